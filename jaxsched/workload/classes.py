"""FGD's target workload: the most popular job classes of a trace and their frequencies.

As in Weng et al. (ATC '23) and SPEC.md ("fgd"): group *all* jobs, CPU-only ones included,
by (cpu_milli, gpu_milli, num_gpu, gpu_spec string) — memory is not part of the key, and the
spec string is taken as written ("A|B" and "B|A" are different classes, as in the published
code) — sort the classes by count (most popular first; equal counts by key, so the result is
deterministic), keep the most popular until they cover at least ``coverage`` of the jobs, and
renormalise their frequencies. On openb's default pod list this gives 35 classes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from jaxsched import cluster as _cluster
from jaxsched.errors import DataError
from jaxsched.types import ALL_MODELS, MAX_FRAG_WEIGHT, FragClasses


def spec_mask(spec: str) -> int:
    """model_mask of a gpu_spec string ("A|B|A" -> bits of A and B; "" -> ALL_MODELS)."""
    if spec == "":
        return ALL_MODELS
    parts = [p.strip() for p in spec.split("|")]
    bad = [p for p in parts if p not in _cluster.MODEL_NAMES]
    if bad:
        raise DataError("target_workload", None, "gpu_spec",
                        f"unknown GPU model {bad[0]!r} in {spec!r}; known: {_cluster.MODEL_NAMES}")
    return _cluster.model_mask(parts)


def target_workload(cpu_milli, gpu_milli, num_gpu, gpu_spec_strings, coverage: float = 0.95,
                    max_classes: int | None = None) -> FragClasses:
    """The FGD target workload (numpy ``FragClasses``) of the given jobs.

    ``coverage`` in (0, 1]: keep the most popular classes until they hold >= that share of
    the jobs. ``max_classes``: pad with weight-0 classes to exactly this many (a fixed shape
    for batching); ``DataError`` if more classes are needed.
    """
    if not 0 < coverage <= 1:
        raise DataError("target_workload", None, "coverage", f"must be in (0, 1], got {coverage}")
    cols = [np.asarray(cpu_milli), np.asarray(gpu_milli), np.asarray(num_gpu)]
    specs = ["" if s is None else str(s) for s in np.asarray(gpu_spec_strings, dtype=object)]
    n = len(specs)
    if any(len(c) != n for c in cols):
        raise DataError("target_workload", None, None, "columns of different lengths")
    if n == 0:
        raise DataError("target_workload", None, None, "no jobs")
    counts = Counter(zip(cols[0].tolist(), cols[1].tolist(), cols[2].tolist(), specs))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    cum = np.cumsum([c for _, c in ranked])
    # smallest m with cum[m-1] >= coverage * n (a tiny tolerance for float coverage)
    m = int(np.searchsorted(cum, coverage * n - 1e-9, side="left")) + 1
    m = min(m, len(ranked))
    kept = ranked[:m]
    size = m if max_classes is None else int(max_classes)
    if size < m:
        raise DataError("target_workload", None, "max_classes",
                        f"{m} classes are needed to cover {coverage:.0%} of jobs, max_classes={max_classes}")

    def column(values, dtype):
        out = np.zeros(size, dtype)
        out[:m] = values
        return out

    return FragClasses(
        cpu_milli=column([k[0] for k, _ in kept], np.int32),
        gpu_milli=column([k[1] for k, _ in kept], np.int32),
        num_gpu=column([k[2] for k, _ in kept], np.int32),
        model_mask=column([spec_mask(k[3]) for k, _ in kept], np.int32),
        weight=column(class_weights([c for _, c in kept]), np.int32),
    )


def class_weights(counts) -> np.ndarray:
    """``FragClasses.weight`` of classes with these job counts: the counts, divided by their
    gcd; where they still add up to more than ``MAX_FRAG_WEIGHT`` (traces of over ~268k jobs),
    scaled down and rounded (each class keeps at least 1), which moves each of the M classes'
    frequencies by at most (M + 1) / (MAX_FRAG_WEIGHT - M) (M = 35: about 1.3e-4)."""
    counts = np.asarray(counts, np.int64)
    if counts.size == 0 or (counts <= 0).any():
        raise DataError("target_workload", None, "count", "class counts must be positive")
    counts = counts // np.gcd.reduce(counts)
    total = int(counts.sum())
    if total > MAX_FRAG_WEIGHT:
        budget = MAX_FRAG_WEIGHT - counts.size  # rounding up and the floor of 1 add < 1 each
        counts = np.maximum(1, np.round(counts * (budget / total))).astype(np.int64)
    return counts.astype(np.int32)
