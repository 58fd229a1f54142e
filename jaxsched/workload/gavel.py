"""Gavel's measured throughputs and its synthetic workload (Narayanan et al., OSDI '20).

**Throughputs.** ``load_throughputs(path)`` reads Gavel's ``simulation_throughputs.json``
(``shared/data/gavel/``): per GPU type (``k80``, ``p100``, ``v100``, and ``<gpu>_unconsolidated``:
the same job spread over servers), per key ``"('<job type>', <scale factor>)"``, the job's
training throughput in steps per second running alone (``"null"``; the other entries,
throughputs when sharing a GPU with a partner job, are not read). It returns a
``Throughputs`` table: ``steps_per_s[job type, scale factor, GPU type]``. A job type's
**speed** on a GPU type is its throughput there over its throughput on the reference GPU, the
**V100** (Gavel's own reference: a job's steps are its duration × its V100 throughput), so
work keeps its meaning: ``work_s`` is seconds on V100s (speed 1.0), and a job runs
``work_s / speed`` seconds on another GPU type. ``speed(scale_factor)`` gives the
[job types, GPU types] table at a scale factor (consolidated), ``speed(scale_factor,
consolidated=False)`` the same job spread over servers (still relative to the consolidated
V100 run, so ``speed(s, False) / speed(s)`` is the spread factor; in Gavel's data it is
sometimes above 1). Not measured: NaN (types that are not distributed have no scale factor
above 1; ``k80_unconsolidated`` lacks ResNet-50 at batch sizes 64 and 128). A measured 0 (K80,
ResNet-50 at batch size 128 on 2, 4 or 8 GPUs) is speed 0: the job cannot run there.

**Workload.** ``generate(key, config)`` draws Gavel's synthetic workload in JAX (pure,
jittable with the config static, vmappable over keys), as Gavel's ``scheduler/utils.py`` does,
per job j = 0..J-1:
  arrival    Poisson process at ``jobs_per_hour``: gaps ~ Exponential(mean 3600 /
             jobs_per_hour s), arrival_j = gap_0 + ... + gap_j
  duration   60 × 10^U(3, 4) s with probability 0.2, else 60 × 10^U(1.5, 3) s (31.6 min to
             6.9 days); ``work_s`` = duration (seconds on the reference GPU, speed 1.0)
  num_gpus   the scale factor: 1, 2, 4 or 8 with probability 0.7, 0.1, 0.15, 0.05 when
             ``multi_gpu``, else 1
  job_type   uniform among the types that run at that scale factor (every type at 1, the
             ``distributed`` ones above 1); an index into ``JOB_TYPES`` (= ``Throughputs.job_types``)
Returned as ``GavelJobs`` (arrays of ``num_jobs``, sorted by arrival).

**Into the simulator.** A job's speed depends on its type, its scale factor and whether it
runs on one server or spread over several, so the cluster's job types (``Cluster.type_speed``,
docs/semantics.md "Job types") are Gavel's (job type, scale factor, spread) triples: row
``type_row(t, s, spread) = 2 × (t × 4 + index of s in (1, 2, 4, 8)) + spread``, 8T rows.
``type_speeds(throughputs, models)`` gives ``cluster.to_cluster``'s ``type_speeds`` table,
``{cluster model: [8T] speeds}``, with ``models`` mapping Gavel's GPU types onto the cluster's
models (``MODELS``: k80 -> K80, p100 -> P100, v100 -> V100). ``to_jobs(jobs, throughputs,
models, gpus_per_node, max_span)`` turns ``GavelJobs`` into the env's ``Jobs``: whole GPUs, a
model mask of the mapped models its row runs on, and its row as ``job_type``, spread exactly
when the job needs more GPUs than a server has. Such a job runs as a gang over servers (the
env's ``max_span`` > 1, docs/semantics.md "Gang jobs") at Gavel's measured spread speed (the
``*_unconsolidated`` throughputs, ``spread_speed``), so the env's ``spread_penalty`` stays 1.0;
on Gavel's one-GPU servers every multi-GPU job is one. Where Gavel measured a job on one
server but not spread (the K80's ResNet-50 at batch sizes 64 and 128), ``spread_speed``
estimates it as its one-server speed times the V100's spread factor for the same type and
scale factor. Refused with a ``DataError`` that counts them: jobs above ``gpus_per_node ×
max_span`` GPUs, and jobs whose (type, scale factor) Gavel did not measure. A job that fits
one server runs at its one-server speed; if the env spreads it anyway (no server has room,
several together do), ``spread_penalty`` is all that slows it. A gang may mix GPU types and
then runs at its slowest GPU's speed (docs/semantics.md), where Gavel gives a job one type.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched import cluster as _cluster
from jaxsched.errors import DataError
from jaxsched.textfile import read_text
from jaxsched.types import GPU_MILLI, Jobs, jobs_from_numpy

GPU_TYPES = ("k80", "p100", "v100")
REFERENCE_GPU = "v100"
SCALE_FACTORS = (1, 2, 4, 8)
SCALE_FACTOR_PROBS = (0.7, 0.1, 0.15, 0.05)  # with multi-GPU jobs on
LONG_PROB = 0.2          # share of long jobs
LONG_EXPONENT = (3.0, 4.0)   # duration = 60 × 10^U(lo, hi) seconds
SHORT_EXPONENT = (1.5, 3.0)
GANG_SPEEDS = ("spread", "consolidated")  # GavelConfig.gang_speed
GENERATORS = ("jaxsched", "gavel")  # GavelConfig.generator

# Gavel's 26 job types (its scheduler/job_table.py), in the order of simulation_throughputs.json,
# and whether each runs distributed (scale factor 2, 4, 8): all but A3C, Recommendation, CycleGAN.
JOB_TYPES = (
    *(f"ResNet-18 (batch size {b})" for b in (16, 32, 64, 128, 256)),
    *(f"ResNet-50 (batch size {b})" for b in (16, 32, 64, 128)),
    *(f"Transformer (batch size {b})" for b in (16, 32, 64, 128, 256)),
    "A3C",
    *(f"LM (batch size {b})" for b in (5, 10, 20, 40, 80)),
    *(f"Recommendation (batch size {b})" for b in (512, 1024, 2048, 4096, 8192)),
    "CycleGAN",
)
DISTRIBUTED = tuple(not t.startswith(("A3C", "Recommendation", "CycleGAN")) for t in JOB_TYPES)

_KEY = re.compile(r"\('(.+)', (\d+)\)")


# ---------------------------------------------------------------------------- throughputs

@dataclasses.dataclass(frozen=True, eq=False)
class Throughputs:
    """Gavel's throughputs running alone, on the host.

    job_types       (T,) str   the reference GPU's scale-factor-1 job types, in file order
    gpu_types       ``GPU_TYPES`` (k80, p100, v100); ``reference`` = "v100"
    scale_factors   ``SCALE_FACTORS`` (1, 2, 4, 8)
    steps_per_s     [T, S, G] float64  steps per second of the whole job on s GPUs of one
                    server (NaN: not measured)
    unconsolidated  [T, S, G] float64  the same, spread over servers (NaN: not measured)
    path, report    the file; counts (``job_types``, ``distributed``, ``zero_throughput``,
                    ``unconsolidated_missing``)
    """

    job_types: tuple
    gpu_types: tuple
    scale_factors: tuple
    steps_per_s: np.ndarray
    unconsolidated: np.ndarray
    reference: str
    path: str
    report: dict

    @property
    def distributed(self) -> tuple:
        """(T,) bool: the job type was measured on the reference GPU at every scale factor > 1."""
        ref = self.gpu_types.index(self.reference)
        return tuple(bool(x) for x in np.isfinite(self.steps_per_s[:, 1:, ref]).all(axis=1))

    def speed(self, scale_factor: int = 1, consolidated: bool = True) -> np.ndarray:
        """[T, G] float64: throughput over the reference GPU's consolidated throughput at
        ``scale_factor`` (1.0 on the reference GPU; NaN where not measured)."""
        if scale_factor not in self.scale_factors:
            raise DataError(self.path, None, "scale_factor",
                            f"must be one of {self.scale_factors}, got {scale_factor!r}")
        s = self.scale_factors.index(scale_factor)
        table = self.steps_per_s if consolidated else self.unconsolidated
        return table[:, s, :] / self.steps_per_s[:, s, self.gpu_types.index(self.reference), None]


def _no_repeats(pairs):
    """json object hook: a key written twice would silently drop one measurement."""
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError(f"key {k!r} appears twice in one object")
        seen.add(k)
    return dict(pairs)


# The speeds a throughput may give relative to the reference GPU's at the same key (Gavel's
# measured ones lie in 0.07-2.3): beyond them a file is taken for an error, not a GPU.
SPEED_RANGE = (1e-3, 1e3)


def _alone(path, gpu, key, entry) -> float:
    """The ``"null"`` throughput of one entry, validated: a finite number >= 0."""
    field = f"{gpu} / {key} / null"
    if not isinstance(entry, dict) or "null" not in entry:
        raise DataError(path, None, f"{gpu} / {key}",
                        "expected an object with 'null' (the throughput running alone)")
    value = entry["null"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(path, None, field, f"not a number: {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise DataError(path, None, field, f"must be a finite number >= 0 (steps per second), got {value!r}")
    return float(value)


def _parse_table(path, gpu, table) -> dict:
    """{(job type, scale factor): steps/s} of one GPU type's object."""
    if not isinstance(table, dict):
        raise DataError(path, None, gpu, f"expected an object of job keys, got {type(table).__name__}")
    out = {}
    for key, entry in table.items():
        m = _KEY.fullmatch(key)
        if m is None:
            raise DataError(path, None, f"{gpu} / {key}",
                            "not a job key written as ('<job type>', <scale factor>)")
        if int(m[2]) not in SCALE_FACTORS:
            raise DataError(path, None, f"{gpu} / {key}",
                            f"scale factor {m[2]} is not one of {SCALE_FACTORS}")
        out[(m[1], int(m[2]))] = _alone(path, gpu, key, entry)
    return out


def load_throughputs(path) -> Throughputs:
    """Load Gavel's ``simulation_throughputs.json`` (see the module docstring).

    Validation (``DataError`` naming the file and the field as ``<gpu> / <key> / null``): not
    JSON (with its line), a key repeated in one object, a missing GPU type (k80, p100,
    v100), a malformed job key or a scale factor outside 1, 2, 4, 8, a missing, non-numeric,
    negative or infinite ``"null"``, a zero on the reference GPU, a speed relative to the
    reference GPU's outside ``SPEED_RANGE``, a distributed key without the
    type's scale factor 1, a key on one GPU type the reference does not have (or, for k80 and
    p100, the other way round). The ``*_unconsolidated`` tables are optional and may lack keys
    (NaN, counted in ``report["unconsolidated_missing"]``).
    """
    path = Path(path)
    try:
        raw = json.loads(read_text(path), object_pairs_hook=_no_repeats)
    except json.JSONDecodeError as err:
        raise DataError(path, err.lineno, None, f"not JSON: {err.msg}") from None
    except ValueError as err:  # _no_repeats
        raise DataError(path, None, None, str(err)) from None
    if not isinstance(raw, dict):
        raise DataError(path, None, None, "expected a JSON object of GPU types (k80, p100, v100)")
    for gpu in GPU_TYPES:
        if gpu not in raw:
            raise DataError(path, None, gpu, f"missing GPU type; the file has {sorted(raw)}")
    tables = {gpu: _parse_table(path, gpu, raw[gpu]) for gpu in GPU_TYPES}
    spread = {gpu: _parse_table(path, f"{gpu}_unconsolidated", raw.get(f"{gpu}_unconsolidated", {}))
              for gpu in GPU_TYPES}

    ref = tables[REFERENCE_GPU]
    job_types = tuple(t for t, s in ref if s == 1)
    for (t, s), value in ref.items():
        if value == 0:
            raise DataError(path, None, f"{REFERENCE_GPU} / {(t, s)!r} / null",
                            "0 steps/s on the reference GPU: the job's speed elsewhere is undefined")
        if t not in job_types:
            raise DataError(path, None, f"{REFERENCE_GPU} / {(t, s)!r}",
                            f"scale factor {s} of a job type with no scale factor 1")
    for gpu in GPU_TYPES:
        for name, table, complete in ((gpu, tables[gpu], True), (f"{gpu}_unconsolidated", spread[gpu], False)):
            extra = [k for k in table if k not in ref]
            if extra:
                raise DataError(path, None, f"{name} / {extra[0]!r}",
                                f"not measured on the reference GPU {REFERENCE_GPU}")
            lacking = [k for k in ref if k not in table]
            if complete and lacking:
                raise DataError(path, None, f"{name} / {lacking[0]!r}",
                                f"missing: measured on {REFERENCE_GPU} but not on {gpu}")
            for key, value in table.items():  # a speed the env holds in float32 (Gavel's: 0.07-2.3)
                ratio = value / ref[key]
                if value > 0 and not (SPEED_RANGE[0] <= ratio <= SPEED_RANGE[1]):
                    raise DataError(path, None, f"{name} / {key!r} / null",
                                    f"{value!r} steps/s is {ratio:.3g} times the {REFERENCE_GPU}'s {ref[key]!r}: "
                                    f"a speed outside {list(SPEED_RANGE)} of the reference GPU's is not a throughput")

    shape = (len(job_types), len(SCALE_FACTORS), len(GPU_TYPES))
    steps, loose = np.full(shape, np.nan), np.full(shape, np.nan)
    for g, gpu in enumerate(GPU_TYPES):
        for (t, s), value in tables[gpu].items():
            steps[job_types.index(t), SCALE_FACTORS.index(s), g] = value
        for (t, s), value in spread[gpu].items():
            loose[job_types.index(t), SCALE_FACTORS.index(s), g] = value
    out = Throughputs(job_types=job_types, gpu_types=GPU_TYPES, scale_factors=SCALE_FACTORS,
                      steps_per_s=steps, unconsolidated=loose, reference=REFERENCE_GPU,
                      path=str(path), report={})
    out.report.update(path=str(path), job_types=len(job_types), distributed=sum(out.distributed),
                      zero_throughput=int((steps == 0).sum()),
                      unconsolidated_missing=int((np.isfinite(steps) & np.isnan(loose)).sum()))
    return out


# ---------------------------------------------------------------------------- generator

class GavelJobs(NamedTuple):
    """One synthetic workload, sorted by arrival (a pytree: vmappable, jittable).

    arrival_s  [J] float32  submission time (s)
    work_s     [J] float32  duration on the reference GPU (V100s, speed 1.0), seconds
    num_gpus   [J] int32    scale factor: 1, 2, 4 or 8 GPUs, all or nothing
    job_type   [J] int32    index into ``JOB_TYPES`` / ``Throughputs.job_types``
    """

    arrival_s: jax.Array
    work_s: jax.Array
    num_gpus: jax.Array
    job_type: jax.Array


@dataclasses.dataclass(frozen=True)
class GavelConfig:
    """Settings of Gavel's synthetic workload (hashable: a static argument of ``jax.jit``).

    jobs_per_hour  the Poisson arrival rate (Gavel's sweeps: a fraction of a job to ~8 jobs an
                   hour on its 108-GPU cluster)
    num_jobs       J, the number of jobs drawn
    multi_gpu      draw scale factors 1/2/4/8 (else every job has one GPU)
    distributed    per job type, whether it runs on more than one GPU (``DISTRIBUTED``, or
                   ``Throughputs.distributed`` of a loaded table); its length is the number of types
    gang_speed     the speed of a job larger than a server (``to_jobs``): "spread" (default,
                   Gavel's measured throughput spread over servers, the ``*_unconsolidated``
                   keys) or "consolidated" (its throughput on one server of that many GPUs,
                   which Gavel's simulator gives it whatever its servers: it reads only the
                   ``"null"`` entries of the consolidated keys)
    agnostic_speed every GPU type runs a job at the job's mean speed over the cluster's GPU
                   types (``type_speeds(..., gpus=...)``): the speed a job gets from Gavel's
                   heterogeneity-agnostic policies (LAS, FTF), whose round shuffles the order
                   of the GPU types every round, so each running job's type is drawn afresh
                   each round and its time spreads over the types in proportion to their GPUs
                   (docs/workloads.md, "Gavel"). Default false: each type at its own speed.
    generator      "jaxsched" (default): ``generate``, JAX's draws from the episode's key;
                   "gavel": ``generate_as_gavel``, Gavel's own draws (Python's Mersenne
                   Twister as its simulator seeds it), so episode i is the very stream
                   Gavel's ``--seed`` (eval.seed + i) simulates: its printed curves are seed 0
    """

    jobs_per_hour: float
    num_jobs: int = 1000
    multi_gpu: bool = False
    distributed: tuple = DISTRIBUTED
    gang_speed: str = "spread"
    agnostic_speed: bool = False
    generator: str = "jaxsched"

    def __post_init__(self):
        if isinstance(self.distributed, (list, np.ndarray)):
            object.__setattr__(self, "distributed", tuple(bool(x) for x in self.distributed))

    def validate(self) -> "GavelConfig":
        """Raise ``DataError`` naming the first bad field; return self."""
        def bad(field, problem):
            return DataError("GavelConfig", None, field, problem)
        n = self.num_jobs
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise bad("num_jobs", f"must be an integer >= 1, got {n!r}")
        rate = self.jobs_per_hour
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.integer, np.floating)) or \
                not 0 < rate < math.inf:
            raise bad("jobs_per_hour", f"must be a finite number > 0, got {rate!r}")
        if not isinstance(self.multi_gpu, (bool, np.bool_)):
            raise bad("multi_gpu", f"must be true or false, got {self.multi_gpu!r}")
        d = self.distributed
        if not isinstance(d, tuple) or not d or not all(isinstance(x, (bool, np.bool_)) for x in d):
            raise bad("distributed", f"must be a non-empty tuple of booleans (one per job type), got {d!r}")
        if self.multi_gpu and not any(d):
            raise bad("distributed", "multi_gpu needs at least one distributed job type")
        if not isinstance(self.agnostic_speed, (bool, np.bool_)):
            raise bad("agnostic_speed", f"must be true or false, got {self.agnostic_speed!r}")
        if self.generator not in GENERATORS:
            raise bad("generator", f"must be one of {GENERATORS}, got {self.generator!r}")
        if self.gang_speed not in GANG_SPEEDS:
            raise bad("gang_speed", f"must be one of {GANG_SPEEDS}, got {self.gang_speed!r}")
        return self


def expected_work_s() -> float:
    """E[work_s] of one job: E[60 × 10^U(a, b)] = 60 (10^b - 10^a) / ((b - a) ln 10), mixed
    0.2 / 0.8 (about 60,362 s: 16.8 h)."""
    def mean(lo, hi):
        return 60.0 * (10 ** hi - 10 ** lo) / ((hi - lo) * math.log(10))
    return LONG_PROB * mean(*LONG_EXPONENT) + (1 - LONG_PROB) * mean(*SHORT_EXPONENT)


def expected_gpus(config: GavelConfig) -> float:
    """E[num_gpus] of one job (1.9 with multi-GPU jobs, else 1)."""
    if not config.multi_gpu:
        return 1.0
    return float(np.dot(SCALE_FACTORS, SCALE_FACTOR_PROBS))


def offered_load(config: GavelConfig, capacity: float) -> float:
    """The nominal offered load rho of ``config`` on a cluster of work capacity ``capacity``
    (``cluster.work_capacity``, in V100 GPUs): GPU work arriving per second, jobs_per_hour /
    3600 x E[work_s] x E[num_gpus], over it. Nominal: it counts a job's work at its V100
    speed on one server, while Gavel's jobs run slower on most other GPUs and spread over
    servers, so the GPU time they take is larger (docs/workloads.md, "Gavel")."""
    return config.jobs_per_hour / 3600.0 * expected_work_s() * expected_gpus(config) / capacity


def generate(key: jax.Array, config: GavelConfig) -> GavelJobs:
    """Draw one workload from ``key`` (see the module docstring). Pure and traceable:
    ``jax.jit(generate, static_argnums=1)``, ``jax.vmap(lambda k: generate(k, cfg))(keys)``.
    The draws use fixed subkeys of ``key``, so switching ``multi_gpu`` leaves the arrivals and
    durations of a key unchanged."""
    config.validate()
    n = config.num_jobs
    k_arr, k_long, k_dur, k_scale, k_type = jax.random.split(key, 5)

    mean_gap = jnp.float32(3600.0 / config.jobs_per_hour)
    arrival = jax.lax.cummax(jnp.cumsum(jax.random.exponential(k_arr, (n,), jnp.float32) * mean_gap))

    long = jax.random.bernoulli(k_long, LONG_PROB, (n,))
    u = jax.random.uniform(k_dur, (n,), jnp.float32)
    (llo, lhi), (slo, shi) = LONG_EXPONENT, SHORT_EXPONENT
    exponent = jnp.where(long, llo + (lhi - llo) * u, slo + (shi - slo) * u)
    work = jnp.float32(60.0) * jnp.power(jnp.float32(10.0), exponent)

    if config.multi_gpu:
        scale = jax.random.categorical(k_scale, jnp.log(jnp.asarray(SCALE_FACTOR_PROBS, jnp.float32)),
                                       shape=(n,))
    else:
        scale = jnp.zeros((n,), jnp.int32)
    # allowed[s, t]: type t runs at scale factor index s (every type at 1, distributed ones above)
    allowed = (np.arange(len(SCALE_FACTORS))[:, None] == 0) | np.asarray(config.distributed)[None, :]
    logits = jnp.where(jnp.asarray(allowed)[scale], 0.0, -jnp.inf)
    job_type = jax.random.categorical(k_type, logits, axis=-1)

    return GavelJobs(arrival_s=arrival.astype(jnp.float32), work_s=work.astype(jnp.float32),
                     num_gpus=jnp.asarray(SCALE_FACTORS, jnp.int32)[scale],
                     job_type=job_type.astype(jnp.int32))


def generate_as_gavel(seed: int, config: GavelConfig) -> GavelJobs:
    """The stream Gavel's simulator draws with ``--seed seed`` (``GavelJobs``, numpy, on the
    host), draw for draw: its job generator is Python's ``random.Random(seed + 2)``, its
    inter-arrival generator ``random.Random(seed + 3)`` (``Scheduler._initialize_seeds``).
    Per job, in this order (``utils.generate_job``, commit 2d8e076): a scale factor from
    r = uniform(0, 1) (2 if 0.7 <= r <= 0.8, 4 if 0.8 < r <= 0.95, 8 if r > 0.95, else 1;
    drawn even without multi-GPU jobs, then set to 1), a duration (long if random() >= 0.8:
    60 x 10^uniform(3, 4) s, else 60 x 10^uniform(1.5, 3) s), then a job type by choice over
    the types until one runs at that scale factor (``config.distributed``). The first job
    arrives at 0 s and each gap is -ln(1 - random()) x 3600 / jobs_per_hour s. The same
    distributions as ``generate``, other draws: the streams of Gavel's published runs."""
    config.validate()
    jobs, gaps = random.Random(seed + 2), random.Random(seed + 3)
    mean_gap_s = 3600.0 / config.jobs_per_hour
    types = range(len(config.distributed))
    arrival, work, gpus, kind = np.zeros((4, config.num_jobs))
    clock = 0.0
    for j in range(config.num_jobs):
        r = jobs.uniform(0, 1)
        scale = 2 if 0.7 <= r <= 0.8 else 4 if 0.8 <= r <= 0.95 else 8 if r >= 0.95 else 1
        lo, hi = LONG_EXPONENT if jobs.random() >= 1 - LONG_PROB else SHORT_EXPONENT
        work[j] = 60 * 10 ** jobs.uniform(lo, hi)
        gpus[j] = scale if config.multi_gpu else 1
        kind[j] = jobs.choice(types)
        while gpus[j] > 1 and not config.distributed[int(kind[j])]:
            kind[j] = jobs.choice(types)
        arrival[j] = clock
        clock += -math.log(1.0 - gaps.random()) / (1.0 / mean_gap_s)
    return GavelJobs(arrival_s=arrival.astype(np.float32), work_s=work.astype(np.float32),
                     num_gpus=gpus.astype(np.int32), job_type=kind.astype(np.int32))


TRACE_FIELDS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "scale_factor",
                "priority_weight", "SLO", "arrival_time")  # Gavel's trace format, tab-separated


def load_trace(path, throughputs: Throughputs) -> GavelJobs:
    """The jobs of a trace in Gavel's own format (its ``scheduler/utils.py`` ``parse_trace``:
    one job a line, the ``TRACE_FIELDS`` tab-separated, no header), as ``GavelJobs`` (numpy,
    in file order): ``job_type`` the index of its type in ``throughputs.job_types``,
    ``num_gpus`` its scale factor, ``arrival_s`` its arrival time, and ``work_s`` its total
    steps over its throughput on the reference GPU at its scale factor (the inverse of
    Gavel's ``generate_job``: steps = duration x V100 throughput). The command, data-dir,
    priority and SLO fields are read for their form only (jaxsched gives every job weight 1
    and no SLO). ``DataError`` naming the file, line and field: a line without 9 fields, an
    unknown job type, a scale factor outside 1, 2, 4, 8 or not measured on the reference GPU,
    total steps or an arrival time that is not a finite number >= 0 (steps > 0), or arrivals
    out of order (Gavel asserts they do not decrease)."""
    text = read_text(path)
    index = {name: t for t, name in enumerate(throughputs.job_types)}
    ref = throughputs.gpu_types.index(throughputs.reference)
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(TRACE_FIELDS):
            raise DataError(path, n, None, f"{len(fields)} tab-separated fields, Gavel's trace format has "
                            f"{len(TRACE_FIELDS)} ({', '.join(TRACE_FIELDS)})")
        value = dict(zip(TRACE_FIELDS, fields))

        def number(field, positive=False):
            try:
                x = float(value[field])
            except ValueError:
                raise DataError(path, n, field, f"not a number: {value[field]!r}") from None
            if not math.isfinite(x) or x < 0 or (positive and x == 0):
                raise DataError(path, n, field, f"must be a finite number {'>' if positive else '>='} 0, got {x!r}")
            return x

        if value["job_type"] not in index:
            raise DataError(path, n, "job_type", f"{value['job_type']!r} is not a job type of {throughputs.path}")
        kind = index[value["job_type"]]
        scale = number("scale_factor")
        if scale not in SCALE_FACTORS:
            raise DataError(path, n, "scale_factor", f"must be one of {SCALE_FACTORS}, got {value['scale_factor']!r}")
        per_s = throughputs.steps_per_s[kind, SCALE_FACTORS.index(int(scale)), ref]
        if not per_s > 0:
            raise DataError(path, n, "scale_factor", f"{value['job_type']} was not measured on "
                            f"{int(scale)} {throughputs.reference} GPUs in {throughputs.path}")
        for field in ("needs_data_dir", "priority_weight"):
            number(field)
        try:
            float(value["SLO"])
        except ValueError:
            raise DataError(path, n, "SLO", f"not a number: {value['SLO']!r}") from None
        arrival = number("arrival_time")
        if rows and arrival < rows[-1][0]:
            raise DataError(path, n, "arrival_time", f"{arrival} is before the line above's {rows[-1][0]} "
                            "(Gavel's traces are in arrival order)")
        rows.append((arrival, number("total_steps", positive=True) / per_s, int(scale), kind))
    if not rows:
        raise DataError(path, None, None, "no jobs (an empty trace)")
    arrival, work, gpus, kind = (np.asarray(c) for c in zip(*rows))
    return GavelJobs(arrival_s=arrival.astype(np.float32), work_s=work.astype(np.float32),
                     num_gpus=gpus.astype(np.int32), job_type=kind.astype(np.int32))


# ---------------------------------------------------------------------------- into the simulator

MODELS = {"k80": "K80", "p100": "P100", "v100": "V100"}  # Gavel's GPU types as cluster models
PLACEHOLDER_SPEED = 1.0  # type_speeds' entry where a row cannot run (0) or was not measured (NaN)


def type_row(job_type, num_gpus, spread=False):
    """Row of ``type_speeds`` (the env's ``Jobs.job_type``) of Gavel job type ``job_type`` at
    scale factor ``num_gpus`` (1, 2, 4 or 8), on one server (``spread`` False) or spread over
    servers: ``2 * (job_type * 4 + SCALE_FACTORS.index(num_gpus)) + spread``. Works on ints and
    arrays; a scale factor outside 1, 2, 4, 8 gives -1."""
    num_gpus = np.asarray(num_gpus)
    index = np.select([num_gpus == s for s in SCALE_FACTORS], np.arange(len(SCALE_FACTORS)), -1)
    row = 2 * (np.asarray(job_type) * len(SCALE_FACTORS) + index) + np.asarray(spread, np.int64)
    return np.where(index >= 0, row, -1)


def spread_speed(throughputs: Throughputs, scale_factor: int) -> np.ndarray:
    """[T, G] float64: the speed of a job spread over servers, ``throughputs.speed(s,
    consolidated=False)``, where Gavel did not measure it (NaN) but did measure the job on
    one server: that speed times the reference GPU's spread factor for the same type and
    scale factor (``speed(s, False) / speed(s)`` on the V100). In Gavel's file this fills
    the K80's ResNet-50 at batch sizes 64 and 128 on 2, 4 and 8 GPUs (those at 128 are 0 on
    one server, so they stay 0: the job cannot run there). NaN where neither is measured."""
    ref = throughputs.gpu_types.index(throughputs.reference)
    alone, spread = throughputs.speed(scale_factor), throughputs.speed(scale_factor, consolidated=False)
    estimate = alone * spread[:, ref, None]  # V100's consolidated speed is 1.0
    return np.where(np.isnan(spread), estimate, spread)


def _measured_speeds(throughputs: Throughputs, models: dict) -> dict:
    """{cluster model: [8T] float64} of each mapped Gavel GPU type (NaN: not measured; 0: the
    job cannot run there), rows by ``type_row``; ``models`` checked."""
    if not isinstance(models, dict) or not models:
        raise DataError("gavel", None, "models", "expected {Gavel GPU type: cluster model name}, e.g. "
                        f"{MODELS}")
    out = {}
    for gpu, model in models.items():
        if gpu not in throughputs.gpu_types:
            raise DataError("gavel", None, "models", f"unknown Gavel GPU type {gpu!r}; known: {throughputs.gpu_types}")
        if model not in _cluster.MODEL_NAMES or model == "CPU":
            raise DataError("gavel", None, "models", f"{gpu!r} -> unknown GPU model {model!r}; "
                            f"known: {_cluster.MODEL_NAMES[:-1]}")
        if model in out:
            raise DataError("gavel", None, "models", f"two Gavel GPU types map onto {model!r}")
        g = throughputs.gpu_types.index(gpu)
        rows = [(throughputs.speed(s)[:, g], spread_speed(throughputs, s)[:, g]) for s in SCALE_FACTORS]
        out[model] = np.asarray(rows).transpose(2, 0, 1).reshape(-1)  # [T, S, spread] in type_row order
    return out


def type_speeds(throughputs: Throughputs, models: dict = MODELS, gpus: dict | None = None) -> dict:
    """``cluster.to_cluster``'s ``type_speeds``: {cluster model: [8T] speeds}, row ``type_row(t,
    s, spread)`` = type t's throughput at scale factor s on that GPU over the V100's on one
    server, on one server (``speed(s)``) or spread over servers (``spread_speed``). ``models``
    maps Gavel GPU types onto cluster models. Where a row cannot run (0) or was not measured
    (NaN) the entry is ``PLACEHOLDER_SPEED``, never used: ``to_jobs`` keeps a job off models
    where its row is 0 and refuses unmeasured rows.

    ``gpus`` ({cluster model: GPUs in the cluster}, ``GavelConfig.agnostic_speed``): every
    model instead gets each row's mean speed over the models, weighted by their GPUs, over the
    models where the row runs (speed > 0): the expected speed of a job whose time is spread
    over the GPU types in proportion to their GPUs."""
    speeds = _measured_speeds(throughputs, models)
    runs = {m: np.isfinite(v) & (v > 0) for m, v in speeds.items()}
    if gpus is not None:
        weight = {m: float(gpus.get(m, 0)) * runs[m] for m in speeds}
        total = sum(weight.values())
        mean = sum(weight[m] * np.where(runs[m], speeds[m], 0.0) for m in speeds) / np.where(total > 0, total, 1.0)
        return {m: np.where(runs[m], mean, PLACEHOLDER_SPEED) for m in speeds}
    return {m: np.where(runs[m], v, PLACEHOLDER_SPEED) for m, v in speeds.items()}


def to_jobs(jobs: GavelJobs, throughputs: Throughputs, models: dict, gpus_per_node: int,
            max_span: int = 1, cpu_milli_per_gpu: int = 0, mem_mib_per_gpu: int = 0,
            pad_to: int | None = None, gang_speed: str = "spread") -> Jobs:
    """The env's ``Jobs`` (numpy) of Gavel jobs on a cluster of ``gpus_per_node``-GPU servers
    built with ``type_speeds(throughputs, models)``: ``num_gpus`` whole GPUs, ``work_s`` as
    drawn (seconds on V100s), CPU and memory per GPU as given (Gavel models GPUs only: default
    0), a model mask of the mapped models where its row's speed is > 0, and as ``job_type``
    its row ``type_row(t, s, spread)`` with ``spread`` = ``num_gpus > gpus_per_node``: a job
    larger than a server always spans servers (a gang, ``env.max_span`` > 1), so it runs at
    Gavel's speed spread over servers (``spread_speed``), and the env's ``spread_penalty``
    should be 1.0 (else it multiplies a measured factor). A job that fits one server runs at
    its speed there. With ``gang_speed`` "consolidated" every job takes its one-server row
    (``spread`` False), as Gavel's simulator runs a job of s GPUs at its throughput on one
    server of s GPUs whatever servers hold it (``GavelConfig.gang_speed``).

    ``DataError`` (field ``num_gpus`` or ``job_type``, naming the first job and how many): a
    job needing more than ``gpus_per_node * max_span`` GPUs, a job type outside the table, a
    (type, scale factor) not measured, or one that runs on none of the mapped models."""
    if isinstance(max_span, bool) or not isinstance(max_span, (int, np.integer)) or max_span < 1:
        raise DataError("gavel jobs", None, "max_span", f"must be an integer >= 1, got {max_span!r}")
    speeds = _measured_speeds(throughputs, models)
    num_gpus = np.asarray(jobs.num_gpus)
    kind = np.asarray(jobs.job_type)

    def refuse(field, bad, problem):
        j = int(np.flatnonzero(bad)[0])
        raise DataError("gavel jobs", None, field, f"{int(bad.sum())} of {len(bad)} jobs {problem} "
                        f"(the first: job {j}, type {kind[j]}, {num_gpus[j]} GPUs)")

    too_big = num_gpus > gpus_per_node * max_span
    if too_big.any():
        refuse("num_gpus", too_big, f"need more than the {gpus_per_node * max_span} GPUs of {max_span} "
               f"server(s) of {gpus_per_node} (max_span: the most servers a job may span)")
    if gang_speed not in GANG_SPEEDS:
        raise DataError("gavel jobs", None, "gang_speed", f"must be one of {GANG_SPEEDS}, got {gang_speed!r}")
    row = type_row(kind, num_gpus, spread=(num_gpus > gpus_per_node) & (gang_speed == "spread"))
    outside = (kind < 0) | (kind >= len(throughputs.job_types)) | (row < 0)
    if outside.any():
        refuse("job_type", outside, f"have a job type outside 0..{len(throughputs.job_types) - 1} "
               f"or a scale factor outside {SCALE_FACTORS}")
    table = np.stack([speeds[m] for m in speeds], axis=1)[row]  # [J, mapped models]
    if np.isnan(table).all(axis=1).any():
        refuse("job_type", np.isnan(table).all(axis=1), "have a (job type, scale factor) Gavel did not measure")
    bits = np.asarray([1 << _cluster.model_id(m) for m in speeds], np.int64)
    mask = ((table > 0) * bits[None, :]).sum(axis=1)
    if (mask == 0).any():
        refuse("job_type", mask == 0, f"run on none of the mapped GPU types {tuple(models)} (speed 0)")
    return jobs_from_numpy(
        np.asarray(jobs.arrival_s), np.asarray(jobs.work_s), num_gpus, np.full(len(num_gpus), GPU_MILLI),
        num_gpus * cpu_milli_per_gpu, num_gpus * mem_mib_per_gpu,
        model_mask=mask.astype(np.uint32).astype(np.int32), pad_to=pad_to,
        job_type=row, num_types=2 * len(throughputs.job_types) * len(SCALE_FACTORS))
