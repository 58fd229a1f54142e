"""A seeded synthetic workload, modelled on openb, that needs no trace file.

``generate(key, config)`` draws a ``types.Jobs`` entirely in JAX: it is pure, jittable with
the config static (``jax.jit(generate, static_argnums=1)``) and vmappable over keys, so a
batch of episodes gets a batch of workloads in one call.

What it draws, per real job j = 0..J-1 (J = ``num_jobs``):
  arrival   Poisson process: gap_j ~ Exponential(mean = ``mean_interarrival_s``) and
            arrival_j = gap_0 + ... + gap_j (the first job arrives at the first draw).
            Sorted by construction (a running max guards float32 rounding).
  shape     a row of ``job_classes`` (default ``OPENB_JOB_CLASSES``), drawn with probability
            proportional to its weight: (num_gpu, gpu_milli, cpu_milli, mem_mib).
  work      min(m * exp(sigma * Z), ``max_work_s``) with Z ~ N(0, 1): lognormal, median m,
            heavy-tailed, capped. m = ``median_work_s`` unless ``target_load`` is set, in which
            case m is chosen (on the host, once) so that the EXPECTED offered load is the target
            (see ``expected_offered_load``); sigma and the cap are kept.
  model     with probability ``model_constraint_prob`` a GPU job (num_gpu >= 1) may run only on
            one model, drawn uniformly from ``constraint_models`` (its mask has that single bit);
            every other job (CPU-only jobs always) gets ``types.ALL_MODELS``.
  deadline  arrival + ``deadline_slack`` x work; +inf when the slack is +inf (the default).
Padding up to ``pad_to`` follows ``types.Jobs``: valid=False, arrival +inf, work 0, shape 0,
model_mask 0, deadline +inf. The real jobs do not depend on ``pad_to``.

The keys for the five draws are split from ``key`` in a fixed way, so changing one setting
(say the constraint probability) leaves the other draws of the same key unchanged.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched import types
from jaxsched.cluster import MAX_GPUS_PER_NODE, MODEL_NAMES, model_id
from jaxsched.errors import DataError

# The most popular request shapes of openb_pod_list_default.csv (Alibaba GPU trace 2023,
# 8,152 pods), one row per shape:
#   (num_gpu, gpu_milli, cpu_milli, mem_mib, weight)
# num_gpu 0 = CPU-only, 1 = one GPU (gpu_milli < 1000: a fraction of it), k >= 2 = k whole
# GPUs; gpu_milli is per GPU; cpu in milli-cores; memory in MiB; weight = number of pods.
#
# How the table was made (once, offline; the generator never reads the trace):
# - Pods grouped by (num_gpu, gpu_milli, cpu_milli) -- FGD's class key; memory is not part
#   of it, and no default pod has a gpu_spec -- sorted by count; the 35 most popular groups
#   cover 95.3% of pods (the same 35 classes FGD's target workload uses for this list).
# - The most popular group with 2, 4 and 8 GPUs is added, so multi-GPU jobs are represented
#   (37 + 1 = 38 rows; CPU-only shapes are among the top 35 already).
# - mem_mib of a row = the most common memory request within its group.
# - weight = the group's own pods (95.7% of all pods) plus every remaining pod, folded into
#   the nearest row of the same kind (same num_gpu; fractional vs whole GPU) by
#   |d gpu_milli| / 1000 + |d cpu_milli| / 8000. So weights sum to all 8,152 pods and the
#   table reproduces the trace's class mix exactly:
#     CPU-only 1,088 (13.35%)  fractional 3,078 (37.76%)  1 whole GPU 3,911 (47.98%)
#     2 GPUs 16 (0.20%)  4 GPUs 15 (0.18%)  8 GPUs 44 (0.54%)
#   Mean GPUs requested per job: E[num_gpu x gpu_milli / 1000] = 0.7473.
OPENB_JOB_CLASSES = (
    (1, 810, 3152, 5600, 1047),
    (1, 1000, 11300, 49152, 874),
    (1, 1000, 11400, 48128, 599),
    (1, 1000, 3152, 5600, 493),
    (1, 470, 11908, 47104, 394),
    (0, 0, 12500, 57344, 381),
    (1, 470, 8000, 30517, 377),
    (1, 1000, 12000, 24576, 326),
    (0, 0, 32000, 49152, 290),
    (1, 320, 4000, 22888, 268),
    (1, 1000, 18708, 64512, 255),
    (1, 650, 11908, 47104, 237),
    (1, 1000, 9810, 41560, 201),
    (0, 0, 8000, 30517, 186),
    (1, 1000, 8000, 16384, 183),
    (1, 1000, 16000, 32768, 180),
    (1, 1000, 4000, 24576, 160),
    (1, 1000, 15700, 58368, 158),
    (1, 1000, 11908, 47104, 153),
    (1, 230, 4000, 30517, 126),
    (1, 460, 6000, 6144, 122),
    (0, 0, 15400, 51200, 120),
    (0, 0, 16500, 51200, 111),
    (1, 320, 8000, 30517, 111),
    (1, 160, 4000, 15258, 104),
    (1, 550, 4152, 10600, 94),
    (1, 1000, 14200, 58368, 94),
    (1, 1000, 24200, 93184, 84),
    (1, 590, 3152, 5600, 77),
    (1, 1000, 11900, 77824, 56),
    (1, 1000, 15200, 80896, 53),
    (1, 370, 4152, 10600, 47),
    (8, 1000, 88000, 327680, 44),
    (1, 220, 4000, 15258, 43),
    (1, 1000, 8200, 33792, 42),
    (1, 810, 4152, 10600, 31),
    (2, 1000, 16200, 66560, 16),
    (4, 1000, 32200, 132096, 15),
)

# GPU models of openb's GPU nodes (cluster.OPENB_NODE_TYPES): the default choices for a
# model-constrained job.
OPENB_GPU_MODELS = ("G2", "T4", "P100", "G3", "V100M16", "V100M32", "A10")

_WHERE = "SyntheticConfig"


def _bad(field: str, problem: str) -> DataError:
    return DataError(_WHERE, None, field, problem)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    """Settings of the synthetic workload (all overridable; hashable, so usable as a static arg).

    num_jobs               J, the number of real jobs.
    pad_to                 pad the arrays to this many jobs (None: no padding).
    mean_interarrival_s    mean gap of the Poisson arrivals. DRR's published runs use
                           16 s / 8 s / 3.8 s for 32 / 64 / 128 nodes.
    median_work_s, sigma   lognormal work (seconds at speed 1.0): median and log-std. The
                           defaults (900 s, 1.5) follow openb, whose Running pods have a
                           median lifetime of about 900 s (and a log-std near 1.9).
    max_work_s             cap on a job's work (+inf: no cap). The default, 8 h, keeps 97% of
                           openb's pods as they are but cuts its tail (94% of openb's GPU time
                           is in pods that run longer), so that a cluster reaches steady state
                           within ~12 h of arrivals (docs/concepts/loaded-clusters.md).
    target_load            if set, the work median is chosen so that the expected offered load
                           E[num_gpu * gpu_milli/1000 * work] / (cluster_capacity * mean_interarrival_s)
                           equals it; needs ``cluster_capacity``. ``median_work_s`` is then unused.
    cluster_capacity       work capacity of the cluster the load is meant for, in speed-1.0
                           GPUs: sum over GPUs of their speed (``cluster.work_capacity``; only
                           with target_load). Below saturation the share of the cluster's
                           work capacity in use (the ``work_alloc`` metric) equals the load.
    model_constraint_prob  fraction of GPU jobs that may run on one GPU model only.
    constraint_models      the models a constrained job's model is drawn from (uniformly; a
                           repeated name is drawn more often).
    deadline_slack         deadline = arrival + slack * work (+inf: no deadlines).
    job_classes            the shape table, rows (num_gpu, gpu_milli, cpu_milli, mem_mib, weight).
    """

    num_jobs: int = 1000
    pad_to: int | None = None
    mean_interarrival_s: float = 8.0
    median_work_s: float = 900.0
    sigma: float = 1.5
    max_work_s: float = 8 * 3600.0
    target_load: float | None = None
    cluster_capacity: float | None = None
    model_constraint_prob: float = 0.0
    constraint_models: tuple = OPENB_GPU_MODELS
    deadline_slack: float = math.inf
    job_classes: tuple = OPENB_JOB_CLASSES

    def __post_init__(self):
        # Lists given for the table fields become tuples, so the config stays hashable.
        if isinstance(self.constraint_models, (list, tuple)):
            object.__setattr__(self, "constraint_models", tuple(self.constraint_models))
        if isinstance(self.job_classes, (list, tuple, np.ndarray)):
            rows = tuple(
                tuple(r.tolist()) if isinstance(r, np.ndarray) else
                tuple(r) if isinstance(r, (list, tuple)) else r
                for r in self.job_classes
            )
            object.__setattr__(self, "job_classes", rows)

    def replace(self, **changes) -> "SyntheticConfig":
        return dataclasses.replace(self, **changes)

    def validate(self) -> "SyntheticConfig":
        """Raise ``ValueError`` (a ``DataError``) naming the first bad field; return self."""
        if not _is_int(self.num_jobs) or self.num_jobs < 1:
            raise _bad("num_jobs", f"must be an integer >= 1, got {self.num_jobs!r}")
        if self.pad_to is not None and (not _is_int(self.pad_to) or self.pad_to < self.num_jobs):
            raise _bad("pad_to", f"must be None or an integer >= num_jobs={self.num_jobs}, "
                                 f"got {self.pad_to!r}")
        for name in ("mean_interarrival_s", "median_work_s"):
            v = getattr(self, name)
            if not _is_real(v) or not (0 < v < math.inf):
                raise _bad(name, f"must be a finite number > 0, got {v!r}")
        if not _is_real(self.sigma) or not (0 <= self.sigma < math.inf):
            raise _bad("sigma", f"must be a finite number >= 0, got {self.sigma!r}")
        if not _is_real(self.max_work_s) or not self.max_work_s > 0:
            raise _bad("max_work_s", f"must be > 0 (+inf for no cap), got {self.max_work_s!r}")
        if not _is_real(self.model_constraint_prob) or not 0 <= self.model_constraint_prob <= 1:
            raise _bad("model_constraint_prob",
                       f"must be a probability in [0, 1], got {self.model_constraint_prob!r}")
        if not isinstance(self.constraint_models, tuple) or not self.constraint_models:
            raise _bad("constraint_models",
                       f"must be a non-empty tuple of GPU model names, got {self.constraint_models!r}")
        for name in self.constraint_models:
            if name not in MODEL_NAMES or name == "CPU":
                raise _bad("constraint_models", f"unknown GPU model {name!r}; known: "
                                                f"{tuple(m for m in MODEL_NAMES if m != 'CPU')}")
        if not _is_real(self.deadline_slack) or not self.deadline_slack > 0:
            raise _bad("deadline_slack", f"must be > 0 (+inf for no deadlines), got {self.deadline_slack!r}")
        self._validate_classes()
        if self.cluster_capacity is not None and (
                not _is_real(self.cluster_capacity) or not 0 < self.cluster_capacity < math.inf):
            raise _bad("cluster_capacity", f"must be None or a finite number > 0, got {self.cluster_capacity!r}")
        if self.target_load is not None:
            if not _is_real(self.target_load) or not (0 < self.target_load < math.inf):
                raise _bad("target_load", f"must be None or a finite number > 0, got {self.target_load!r}")
            if self.cluster_capacity is None:
                raise _bad("cluster_capacity", f"target_load={self.target_load} needs cluster_capacity "
                                           "(the cluster's total GPUs), got None")
            if _mean_gpus(self.job_classes) <= 0:
                raise _bad("job_classes", "target_load needs GPU jobs, but the table has only "
                                          "CPU-only (or zero-weight GPU) rows")
            reachable = _mean_gpus(self.job_classes) * self.max_work_s / (
                self.cluster_capacity * self.mean_interarrival_s)
            if not self.target_load < reachable:
                raise _bad("target_load", f"{self.target_load} cannot be reached with max_work_s="
                                          f"{self.max_work_s} (every job at the cap gives {reachable:.4g})")
        return self

    def _validate_classes(self):
        rows = self.job_classes
        if not isinstance(rows, tuple) or not rows:
            raise _bad("job_classes", f"must be a non-empty table of rows, got {rows!r}")
        for i, row in enumerate(rows):
            f = f"job_classes[{i}]"
            if not isinstance(row, tuple) or len(row) != 5:
                raise _bad(f, f"must be (num_gpu, gpu_milli, cpu_milli, mem_mib, weight), got {row!r}")
            ng, gm, cpu, mem, w = row
            for col, v in zip(("num_gpu", "gpu_milli", "cpu_milli", "mem_mib"), row[:4]):
                if not _is_int(v) or v < 0:
                    raise _bad(f"{f}.{col}", f"must be an integer >= 0, got {v!r}")
            if ng > MAX_GPUS_PER_NODE:
                raise _bad(f"{f}.num_gpu", f"{ng} > {MAX_GPUS_PER_NODE} GPUs per node")
            if ng == 0 and gm != 0:
                raise _bad(f"{f}.gpu_milli", f"must be 0 for a CPU-only row, got {gm}")
            if ng == 1 and not 1 <= gm <= types.GPU_MILLI:
                raise _bad(f"{f}.gpu_milli", f"must be in 1..{types.GPU_MILLI} for one GPU, got {gm}")
            if ng >= 2 and gm != types.GPU_MILLI:
                raise _bad(f"{f}.gpu_milli", f"must be {types.GPU_MILLI} for {ng} whole GPUs, got {gm}")
            if not _is_real(w) or not (0 <= w < math.inf):
                raise _bad(f"{f}.weight", f"must be a finite number >= 0, got {w!r}")
        if not sum(r[4] for r in rows) > 0:
            raise _bad("job_classes", "weights sum to 0")


# ---------------------------------------------------------------------------- host helpers

def _mean_gpus(rows) -> float:
    """E[num_gpu * gpu_milli / 1000] of one job drawn from the table."""
    total = sum(r[4] for r in rows)
    return sum(r[0] * r[1] / types.GPU_MILLI * r[4] for r in rows) / total


def class_shares(rows=OPENB_JOB_CLASSES) -> dict:
    """Share of jobs per kind: 'cpu', 'frac', and '1', '2', ... whole GPUs."""
    total = sum(r[4] for r in rows)
    out: dict = {}
    for ng, gm, _, _, w in rows:
        kind = "cpu" if ng == 0 else "frac" if (ng == 1 and gm < types.GPU_MILLI) else str(ng)
        out[kind] = out.get(kind, 0.0) + w / total
    return out


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def mean_capped_lognormal(median: float, sigma: float, cap: float) -> float:
    """E[min(median * exp(sigma * Z), cap)], Z ~ N(0, 1)."""
    if sigma == 0:
        return min(median, cap)
    mean = median * math.exp(0.5 * sigma * sigma)
    if math.isinf(cap):
        return mean
    z = (math.log(cap) - math.log(median)) / sigma
    return mean * _phi(z - sigma) + cap * _phi(-z)


def effective_median_work_s(config: SyntheticConfig) -> float:
    """The lognormal median ``generate`` uses: ``median_work_s``, or the one hitting target_load."""
    config.validate()
    if config.target_load is None:
        return float(config.median_work_s)
    need = config.target_load * config.cluster_capacity * config.mean_interarrival_s / _mean_gpus(
        config.job_classes)  # the mean work that gives the target
    s, cap = config.sigma, config.max_work_s
    lo = need / math.exp(0.5 * s * s)  # uncapped answer; capping only lowers the mean
    if mean_capped_lognormal(lo, s, cap) >= need:
        return lo
    hi = lo
    while mean_capped_lognormal(hi, s, cap) < need:
        hi *= 2.0
    for _ in range(200):  # bisection in log space; the mean is increasing in the median
        mid = math.sqrt(lo * hi)
        if mean_capped_lognormal(mid, s, cap) < need:
            lo = mid
        else:
            hi = mid
        if hi / lo - 1 < 1e-12:
            break
    return hi


def expected_work_s(config: SyntheticConfig) -> float:
    """E[work] of one job (seconds at speed 1.0), cap included."""
    return mean_capped_lognormal(effective_median_work_s(config), config.sigma, config.max_work_s)


def expected_offered_load(config: SyntheticConfig, cluster_capacity: float) -> float:
    """Expected offered load rho = E[GPUs x work] / (cluster_capacity x mean inter-arrival),
    cluster_capacity in speed-1.0 GPUs (``cluster.work_capacity``)."""
    if not _is_real(cluster_capacity) or not 0 < cluster_capacity < math.inf:
        raise _bad("cluster_capacity", f"must be a finite number > 0, got {cluster_capacity!r}")
    return _mean_gpus(config.job_classes) * expected_work_s(config) / (
        cluster_capacity * config.mean_interarrival_s)


# ---------------------------------------------------------------------------- generator

def generate(key: jax.Array, config: SyntheticConfig = SyntheticConfig()) -> types.Jobs:
    """Draw one workload (a ``types.Jobs`` of jax arrays) from ``key``; see the module doc.

    Pure and traceable: jit with ``static_argnums=1`` (the config is hashable) and vmap over
    keys, e.g. ``jax.vmap(lambda k: generate(k, cfg))(keys)``.
    """
    config.validate()
    n = config.num_jobs
    size = n if config.pad_to is None else config.pad_to
    table = np.asarray([r[:4] for r in config.job_classes], np.int32)
    weights = np.asarray([r[4] for r in config.job_classes], np.float64)
    median = effective_median_work_s(config)
    k_arr, k_cls, k_work, k_con, k_model = jax.random.split(key, 5)

    gaps = jax.random.exponential(k_arr, (n,), jnp.float32) * jnp.float32(config.mean_interarrival_s)
    arrival = jax.lax.cummax(jnp.cumsum(gaps))  # cummax: sorted even if the scan rounds oddly

    with np.errstate(divide="ignore"):
        logits = jnp.asarray(np.log(weights / weights.sum()), jnp.float32)
    cls = jax.random.categorical(k_cls, logits, shape=(n,))
    shape = jnp.asarray(table)[cls]  # [n, 4]
    num_gpu, gpu_milli, cpu_milli, mem_mib = (shape[:, i] for i in range(4))

    z = jax.random.normal(k_work, (n,), jnp.float32)
    work = jnp.float32(median) * jnp.exp(jnp.float32(config.sigma) * z)
    work = jnp.minimum(work, jnp.float32(config.max_work_s))

    if config.model_constraint_prob > 0:
        ids = jnp.asarray([model_id(m) for m in config.constraint_models], jnp.int32)
        constrained = jax.random.bernoulli(k_con, config.model_constraint_prob, (n,)) & (num_gpu > 0)
        pick = ids[jax.random.randint(k_model, (n,), 0, len(ids))]
        model_mask = jnp.where(constrained, jnp.left_shift(jnp.int32(1), pick), types.ALL_MODELS)
    else:
        model_mask = jnp.full((n,), types.ALL_MODELS, jnp.int32)

    if math.isinf(config.deadline_slack):
        deadline = jnp.full((n,), jnp.inf, jnp.float32)
    else:
        deadline = arrival + jnp.float32(config.deadline_slack) * work

    def pad(x, dtype, fill):
        x = x.astype(dtype)
        if size == n:
            return x
        return jnp.concatenate([x, jnp.full((size - n,), fill, dtype)])

    return types.Jobs(
        arrival_s=pad(arrival, jnp.float32, jnp.inf),
        work_s=pad(work, jnp.float32, 0.0),
        num_gpu=pad(num_gpu, jnp.int32, 0),
        gpu_milli=pad(gpu_milli, jnp.int32, 0),
        cpu_milli=pad(cpu_milli, jnp.int32, 0),
        mem_mib=pad(mem_mib, jnp.int32, 0),
        model_mask=pad(model_mask.astype(jnp.int32), jnp.int32, 0),
        deadline_s=pad(deadline, jnp.float32, jnp.inf),
        valid=pad(jnp.ones((n,), bool), jnp.bool_, False),
        job_type=jnp.zeros((size,), jnp.int32),  # one job type: the clusters' per-model speeds
        qos_class=jnp.zeros((size,), jnp.int32),  # one priority class: no trace gives any
    )
