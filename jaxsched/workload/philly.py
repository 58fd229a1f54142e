"""Loader for the Microsoft Philly DNN-training trace (Jeon et al., ATC '19), with validation.

The file (``shared/data/philly/philly.csv``, as processed by the Pollux artifact) has one job
per row: ``timestamp,duration,num_gpus,gpu_time,cluster`` (submission time as
``YYYY-MM-DD HH:MM:SS``, run time in seconds, gang size, ``duration × num_gpus``, the virtual
cluster, VC). ``load`` reads it into a ``PhillyWorkload`` (a ``alibaba.TraceWorkload`` plus a
``vc`` column), so the episode tools of the openb replay apply unchanged:
``alibaba.trace_windows`` (windows of consecutive jobs), ``alibaba.compress_to_load``
(arrival times compressed to a stated offered load), ``alibaba.resample``,
``alibaba.cap_work``, ``alibaba.trace_part`` and ``TraceWorkload.to_jobs``.

Per job:
  arrival_s  seconds from the window start (``start``), or from the first selected job's
             submission when no ``start`` is given (``report["t0"]`` keeps that timestamp)
  work_s     ``duration``, taken as work at speed 1.0 (the trace has no GPU model)
  num_gpu    ``num_gpus`` as given: the gang size (1 to 128; above 8 a job spans 8-GPU nodes)
  gpu_milli  1000 (whole GPUs)
  cpu_milli, mem_mib  the trace has none: ``num_gpus × cpu_milli_per_gpu`` and
             ``num_gpus × mem_mib_per_gpu`` (defaults 4 cores and 16 GiB per GPU, which fit
             every node type of the project's presets GPU for GPU, so GPUs bind first); a gang
             spread over nodes takes that per-GPU share on each node for each of its GPUs
  vc         the ``cluster`` column
  names      ``"<vc>/<line>"``

The offered load's capacity is counted in GPUs × seconds: for nodes of speed-1.0 GPUs (64 × 8
for VC b436b2) ``cluster.work_capacity`` is the number of GPUs (512). The trace's durations
are run times on Philly's own GPUs, which the trace does not name, so they are work at speed 1.0.

Validation (one ``errors.DataError`` naming the file, the 1-based line, header = line 1, and
the field): a missing column, an empty or non-numeric value, a malformed timestamp, a zero or
negative duration, a ``num_gpus`` that is not a whole number >= 1, a ``gpu_time`` that is not
``duration × num_gpus``, an unknown VC, an empty time window. A gang larger than the whole
cluster is valid data: ``PhillyWorkload.count_unschedulable`` counts it (gang rule below).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from jaxsched import cluster as _cluster
from jaxsched.errors import DataError
from jaxsched.types import ALL_MODELS, GPU_MILLI
from jaxsched.workload.alibaba import (INT32_MAX, MAX_TRACE_TIME_S, TraceWorkload, _check_isolated, _columns,
                                       _first_line, _numbers, _read_table)

log = logging.getLogger(__name__)

FIELDS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
NEEDED = ("timestamp", "duration", "num_gpus", "cluster")  # gpu_time is checked when present
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"

# The trace has no CPU or memory: a job asks this much per GPU. 4 cores and 16 GiB per GPU fit
# every node type of cluster.OPENB_NODE_TYPES GPU for GPU (the tightest: 2 P100s with 8 cores).
CPU_MILLI_PER_GPU = 4000
MEM_MIB_PER_GPU = 16384

# Nodes of 8 GPUs per VC, as the Helios artifact sizes them (shared/data/README.md).
VC_NODES = {"6214e9": 64, "b436b2": 64, "ee9e8c": 64, "7f04ca": 32, "6c71a0": 32, "0e4a51": 32,
            "11cb48": 16, "e13805": 16, "2869ce": 16, "ed69ec": 8, "103959": 8}


@dataclasses.dataclass(frozen=True, eq=False)
class PhillyWorkload(TraceWorkload):
    """A ``TraceWorkload`` of Philly jobs with their VC: ``vc [J] str``.

    Placement is by gangs: ``unschedulable_mask`` (and so ``count_unschedulable``,
    ``check_schedulable``) uses the gang rule: a job of k GPUs fits the empty cluster when
    the nodes' GPUs of an allowed model, each with its per-GPU share of CPU and memory, add up
    to k (sum over nodes of min(GPUs, CPU // share, memory // share) >= k).
    """

    vc: np.ndarray

    _COLUMNS = TraceWorkload._COLUMNS + ("vc",)

    def take(self, index, **report) -> "PhillyWorkload":
        """The jobs at ``index`` (an index array or slice), with ``report`` entries added."""
        cols = {c: getattr(self, c)[index] for c in self._COLUMNS}
        return PhillyWorkload(**cols, path=self.path, report={**self.report, **report})

    def unschedulable_mask(self, nodes: "_cluster.NodeTable", max_span: int | None = None) -> np.ndarray:
        """[J] bool: the job's gang is larger than the empty cluster can hold (gang rule) on
        at most ``max_span`` nodes (None: on all of them)."""
        return gang_capacity(nodes, self, max_span) < self.num_gpu

    def check_schedulable(self, nodes: "_cluster.NodeTable", strict: bool = False, max_span: int | None = None
                          ) -> tuple[int, list[str]]:
        """Report (log) the jobs the empty cluster cannot hold on at most ``max_span`` nodes;
        ``strict``: a ``DataError``; a file where no job can be held is one either way."""
        bad = self.unschedulable_mask(nodes, max_span)
        names = [str(n) for n in self.names[bad]]
        if names:
            j = int(np.flatnonzero(bad)[0])
            span = f" on at most {max_span} nodes (env.max_span)" if max_span is not None else ""
            msg = (f"{len(names)} job(s) ask for more GPUs than the empty cluster holds{span} "
                   f"({len(nodes)} nodes, {nodes.total_gpus} GPUs); first: {names[0]!r} asks for "
                   f"{int(self.num_gpu[j])} GPUs, the cluster holds {int(gang_capacity(nodes, self, max_span)[j])} "
                   f"with {int(self.cpu_milli[j]) // int(self.num_gpu[j])} milli-CPU and "
                   f"{int(self.mem_mib[j]) // int(self.num_gpu[j])} MiB per GPU")
            if strict or bad.all():
                raise DataError(self.path, int(self.lines[j]), "num_gpus",
                                ("no job of the file can be placed: " if bad.all() else "") + msg)
            log.warning("%s: %s", self.path, msg)
        return len(names), names


def gang_capacity(nodes: "_cluster.NodeTable", workload: TraceWorkload, max_span: int | None = None) -> np.ndarray:
    """[J] int64: how many GPUs of the empty cluster each job could hold at once, its per-GPU
    CPU and memory share (``cpu_milli / num_gpu``, ``mem_mib / num_gpu``) included, on the
    ``max_span`` nodes that hold the most of it (None: on every node)."""
    k = np.maximum(np.asarray(workload.num_gpu, np.int64), 1)
    cpu_share = np.maximum(np.asarray(workload.cpu_milli, np.int64) // k, 1)[:, None]
    mem_share = np.maximum(np.asarray(workload.mem_mib, np.int64) // k, 1)[:, None]
    allowed = ((np.asarray(workload.model_mask, np.int64)[:, None]
                >> np.asarray(nodes.model, np.int64)[None, :]) & 1) == 1
    per_node = np.minimum(np.asarray(nodes.num_gpus, np.int64)[None, :],
                          np.minimum(np.asarray(nodes.cpu_milli, np.int64)[None, :] // cpu_share,
                                     np.asarray(nodes.mem_mib, np.int64)[None, :] // mem_share))
    held = np.where(allowed, per_node, 0)
    if max_span is not None:
        held = -np.sort(-held, axis=1)[:, :max_span]
    return held.sum(axis=1)


def gpu_time_share(workload: TraceWorkload) -> dict:
    """{gang size: its share of the GPU-time (GPUs × work_s)}, sizes ascending, shares sum to 1."""
    gpu_time = np.asarray(workload.num_gpu, np.float64) * workload.work_s
    sizes = np.unique(workload.num_gpu)
    total = gpu_time.sum()
    return {int(k): float(gpu_time[workload.num_gpu == k].sum() / total) for k in sizes}


def _timestamps(path, lines, field, texts) -> np.ndarray:
    """[n] datetime64[s] of ``YYYY-MM-DD HH:MM:SS`` texts; the first bad row raises."""
    parsed = pd.to_datetime(pd.Series(texts, dtype=object), format=TIMESTAMP_FORMAT, errors="coerce")
    i = _first_line(lines, parsed.isna().to_numpy())
    if i is not None:
        problem = ("missing value (empty)" if texts[i] == "" else
                   f"malformed timestamp {str(texts[i])!r}: expected YYYY-MM-DD HH:MM:SS")
        raise DataError(path, int(lines[i]), field, problem)
    return parsed.to_numpy().astype("datetime64[s]")


def _bound(path, field, value) -> np.datetime64 | None:
    """The ``start`` / ``end`` argument as datetime64[s] (a str in the trace's format, or a
    datetime); None stays None."""
    if value is None:
        return None
    try:
        if isinstance(value, str):
            return np.datetime64(pd.to_datetime(value, format=TIMESTAMP_FORMAT), "s")
        return np.datetime64(pd.Timestamp(value), "s")
    except (ValueError, TypeError):
        raise DataError(path, None, field,
                        f"not a timestamp YYYY-MM-DD HH:MM:SS: {value!r}") from None


def load(path, vcs=None, start=None, end=None, cpu_milli_per_gpu: int = CPU_MILLI_PER_GPU,
         mem_mib_per_gpu: int = MEM_MIB_PER_GPU, strict: bool = False) -> PhillyWorkload:
    """Load ``philly.csv``: the jobs of ``vcs`` submitted in ``[start, end)``, sorted by arrival.

    ``vcs``: one VC id, several, or None for all; a VC not in the file is a ``DataError``
    listing the file's VCs. ``start`` / ``end``: ``YYYY-MM-DD HH:MM:SS`` strings or datetimes
    (None: unbounded); no job of the selected VCs in the window is a ``DataError``.
    Every row of the file is validated (see the module docstring), selected or not.
    ``report``: ``rows_read``, ``jobs``, ``left_out_other_vcs``, ``left_out_outside_window``,
    ``vcs`` (the selection), ``t0`` (the timestamp of arrival 0), ``gang_sizes``
    ({num_gpus: jobs}), ``cpu_milli_per_gpu``, ``mem_mib_per_gpu``, ``isolated_arrivals``
    (jobs submitted apart from all the others, ``alibaba.isolated_arrivals``: a far-off
    timestamp; warned about naming the first one's line, and refused with ``strict``).
    """
    path = Path(path)
    for name, value in (("cpu_milli_per_gpu", cpu_milli_per_gpu), ("mem_mib_per_gpu", mem_mib_per_gpu)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise DataError(path, None, name, f"must be a whole number >= 1, got {value!r}")
    header, header_line, rows, lines = _read_table(path, NEEDED)
    if not rows:
        raise DataError(path, None, None, "no jobs in file (header only)")
    col = _columns(path, rows, lines, header, [c for c in FIELDS if c in header])

    submitted = _timestamps(path, lines, "timestamp", col["timestamp"])
    duration = _numbers(path, lines, "duration", col["duration"], integer=False, maximum=MAX_TRACE_TIME_S)
    i = _first_line(lines, duration == 0)
    if i is not None:
        raise DataError(path, int(lines[i]), "duration", f"zero duration {col['duration'][i]!r}: must be > 0 s")
    num_gpus = _numbers(path, lines, "num_gpus", col["num_gpus"], minimum=1)
    i = _first_line(lines, num_gpus * max(cpu_milli_per_gpu, mem_mib_per_gpu) > INT32_MAX)
    if i is not None:
        raise DataError(path, int(lines[i]), "num_gpus",
                        f"{num_gpus[i]:g} GPUs: its CPU or memory request overflows int32")
    if "gpu_time" in col:
        gpu_time = _numbers(path, lines, "gpu_time", col["gpu_time"], integer=False)
        i = _first_line(lines, np.abs(gpu_time - duration * num_gpus) > 1e-6 * np.maximum(1.0, gpu_time))
        if i is not None:
            raise DataError(path, int(lines[i]), "gpu_time",
                            f"{gpu_time[i]:g} is not duration × num_gpus = {duration[i]:g} × "
                            f"{num_gpus[i]:g} (a shifted or swapped column?)")
    vc = col["cluster"]
    i = _first_line(lines, vc == "")
    if i is not None:
        raise DataError(path, int(lines[i]), "cluster", "missing value (empty)")

    known = sorted(set(vc.tolist()))
    wanted = known if vcs is None else [vcs] if isinstance(vcs, str) else list(vcs)
    unknown = [v for v in wanted if v not in known]
    if unknown or not wanted:
        what = f"unknown VC {unknown[0]!r}" if unknown else "no VC selected"
        raise DataError(path, None, "cluster", f"{what}; the file's VCs: {known}")
    lo, hi = _bound(path, "start", start), _bound(path, "end", end)
    if lo is not None and hi is not None and not lo < hi:
        raise DataError(path, None, "end", f"the window [{start}, {end}) is empty: end must be after start")
    in_vc = np.isin(vc, wanted)
    in_window = in_vc.copy()
    if lo is not None:
        in_window &= submitted >= lo
    if hi is not None:
        in_window &= submitted < hi
    if not in_window.any():
        raise DataError(path, None, "timestamp",
                        f"no job of VC(s) {wanted} submitted in [{start or 'start of trace'}, "
                        f"{end or 'end of trace'})")

    keep = np.flatnonzero(in_window)
    order = keep[np.argsort(submitted[keep], kind="stable")]
    t0 = lo if lo is not None else submitted[order[0]]
    k = num_gpus[order].astype(np.int64)
    sizes, counts = np.unique(k, return_counts=True)
    names = np.char.add(np.char.add(vc[order], "/"), lines[order].astype(str)).astype(object)
    seconds = (submitted[order] - submitted[order[0]]).astype(np.float64)
    isolated = _check_isolated(path, lines[order], "timestamp", names, seconds, strict, noun="job")
    report = {"path": str(path), "rows_read": len(rows), "jobs": len(order), "vcs": list(wanted),
              "isolated_arrivals": isolated,
              "left_out_other_vcs": int((~in_vc).sum()),
              "left_out_outside_window": int((in_vc & ~in_window).sum()),
              "t0": str(t0).replace("T", " "), "gang_sizes": dict(zip(sizes.tolist(), counts.tolist())),
              "cpu_milli_per_gpu": int(cpu_milli_per_gpu), "mem_mib_per_gpu": int(mem_mib_per_gpu)}
    return PhillyWorkload(
        names=names,
        arrival_s=(submitted[order] - t0).astype(np.float64),
        work_s=duration[order],
        num_gpu=k.astype(np.int32),
        gpu_milli=np.full(len(order), GPU_MILLI, np.int32),
        cpu_milli=(k * cpu_milli_per_gpu).astype(np.int32),
        mem_mib=(k * mem_mib_per_gpu).astype(np.int32),
        model_mask=np.full(len(order), ALL_MODELS, np.int32),
        qos_class=np.zeros(len(order), np.int32),  # Philly has no priority classes
        gpu_spec=np.full(len(order), "", dtype=object),
        lines=lines[order], path=str(path), report=report,
        vc=vc[order].astype(object),
    )
