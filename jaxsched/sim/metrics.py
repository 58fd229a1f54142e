"""Episode metrics: running accumulators updated by the env, and the end-of-episode summary.

Definitions: docs/semantics.md ("Metrics") and SPEC.md ("Metrics"). ``summarize`` is the
one place metrics are computed; evaluation, training and tests all call it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxsched.sim.reduce import ordered_sum
from jaxsched.types import GPU_MILLI, OUTCOME_PLACED, OUTCOME_REJECTED, EnvParams

SLOWDOWN_FLOOR_S = 10.0  # bounded slowdown divides by max(run time, 10 s)


@struct.dataclass
class Accumulators:
    """Counters and time integrals of one episode.

    Counters (whole episode):
    decisions, invalid_actions, failed, dropped_overflow, reservations, migrations  int32
    running_full     bool     the running set was full after some placement
    migration_gpu_s  float32  GPU-seconds moved jobs spent paused (num_gpu * gpu_milli/1000 * pause)
    in_system_integral float32 integral of jobs queued or running dt over the whole episode
                       (job * s; the "in_system" reward)

    Integrals over the measurement interval [Core.measure_from_s, Core.measure_to_s] only
    (docs/semantics.md, "Metrics"):
    node_integrals [N, 4] float32, per node, one row updated at once (``settle_node``):
        [:, 0] allocated milli-GPU dt                                     (milli * s)
        [:, 1] fragmentation F_n dt                                       (milli * s)
        [:, 2] settled_s: the two integrals hold [episode start, settled_s); since then the
               node's allocation and F_n have not changed
        [:, 3] the F_n it has held since settled_s (Core.frag_node's value then)
        A node's row changes only when the node does, not at every event; ``settled`` adds
        each node's unsettled part at the summary. One array, so that each change reads and
        writes one row in place (separate arrays each cost XLA an [N] copy per event).
    idle_milli        int32     the cluster's free milli-GPU now (kept per change, exact)
    idle_integral     float32   idle milli-GPU of the cluster dt        (milli * s)
    jobs_integral     float32   jobs queued or running dt               (job * s)
    queue_integral    float32   jobs queued dt                          (job * s)
    backlog_first     float32   (queued + dropped so far) dt over the interval's first quarter
    backlog_last      float32   the same over its last quarter
    """

    decisions: jax.Array
    invalid_actions: jax.Array
    failed: jax.Array
    dropped_overflow: jax.Array
    reservations: jax.Array
    running_full: jax.Array
    in_system_integral: jax.Array
    node_integrals: jax.Array
    idle_milli: jax.Array
    idle_integral: jax.Array
    jobs_integral: jax.Array
    queue_integral: jax.Array
    backlog_first: jax.Array
    backlog_last: jax.Array
    migrations: jax.Array
    migration_gpu_s: jax.Array

    @classmethod
    def zeros(cls, num_nodes: int, t0, idle_milli, frag_node) -> "Accumulators":
        """Empty accumulators of an episode that starts at ``t0`` with ``idle_milli`` free
        and the nodes' fragmentation ``frag_node`` [N]."""
        i, f = jnp.int32(0), jnp.float32(0.0)
        zero = jnp.zeros(num_nodes, jnp.float32)
        rows = jnp.stack([zero, zero, jnp.full(num_nodes, t0, jnp.float32), frag_node], -1)
        return cls(i, i, i, i, i, jnp.bool_(False), f, rows, jnp.asarray(idle_milli, jnp.int32),
                   f, f, f, f, f, i, f)


def _overlap(t_from, t_to, lo, hi):
    """Length of [t_from, t_to) within [lo, hi] (float32)."""
    return jnp.clip(t_to, lo, hi) - jnp.clip(t_from, lo, hi)


def accumulate(acc: Accumulators, t_from, t_to, measure_from_s, measure_to_s, queued, running) -> Accumulators:
    """Add the cluster state held over [t_from, t_to) to the integrals: the whole-episode
    ``in_system_integral`` and, for the part inside the measurement interval, the cluster-wide
    ones (the per-node ones wait for the node's next change, ``settle_node``).
    queued, running: job counts."""
    jobs = (queued + running).astype(jnp.float32)
    quarter = (measure_to_s - measure_from_s) * jnp.float32(0.25)
    dt = _overlap(t_from, t_to, measure_from_s, measure_to_s)
    dt_first = _overlap(t_from, t_to, measure_from_s, measure_from_s + quarter)
    dt_last = _overlap(t_from, t_to, measure_to_s - quarter, measure_to_s)
    backlog = (queued + acc.dropped_overflow).astype(jnp.float32)
    return acc.replace(
        in_system_integral=acc.in_system_integral + (t_to - t_from) * jobs,
        idle_integral=acc.idle_integral + dt * acc.idle_milli.astype(jnp.float32),
        jobs_integral=acc.jobs_integral + dt * jobs,
        queue_integral=acc.queue_integral + dt * queued.astype(jnp.float32),
        backlog_first=acc.backlog_first + dt_first * backlog,
        backlog_last=acc.backlog_last + dt_last * backlog,
    )


def used_milli(gpu_exists, free_milli):
    """[...] int32 allocated milli-GPU of the node(s) with GPUs ``gpu_exists`` [..., G] and
    free rows ``free_milli`` [..., G]."""
    return gpu_exists.sum(-1, dtype=jnp.int32) * GPU_MILLI - free_milli.sum(-1)


def settle_node(acc: Accumulators, n, t, measure_from_s, measure_to_s, used_before, frag_now,
                freed_milli, active) -> Accumulators:
    """Node n changes at time ``t`` (when ``active``): add [settled_s, t) at the allocation
    ``used_before`` (int milli) and the fragmentation it held until now to its integrals; from now on
    it holds ``frag_now``. ``freed_milli`` (int; negative: taken; 0 when not ``active``) is
    counted in the idle milli. Not ``active``: nothing changes, so that an integral is split
    at the node's changes only, whatever path the episode took (float32 sums are exact then)."""
    old = acc.node_integrals[n]
    used_i, frag_i, since, frag_held = old
    dt = _overlap(since, t, measure_from_s, measure_to_s)
    row = jnp.stack([used_i + dt * used_before.astype(jnp.float32), frag_i + dt * frag_held,
                     jnp.asarray(t, jnp.float32), frag_now])
    return acc.replace(node_integrals=acc.node_integrals.at[n].set(jnp.where(active, row, old)),
                       idle_milli=acc.idle_milli + freed_milli)


def settled(acc: Accumulators, t, measure_from_s, measure_to_s, used_node):
    """(used_integral, frag_integral) [N] up to time ``t``: each node's unsettled part added,
    at its current allocation ``used_node`` [N] and the fragmentation it holds."""
    used_i, frag_i, since, frag_held = jnp.moveaxis(acc.node_integrals, -1, 0)
    dt = _overlap(since, t, measure_from_s, measure_to_s)
    return used_i + dt * used_node.astype(jnp.float32), frag_i + dt * frag_held


def _safe_div(a, b):
    return jnp.where(b > 0, a / jnp.where(b > 0, b, 1), 0.0)


def _weighted_sum(x, w):
    """sum(x * w) over the last axis in a fixed order. The barrier keeps XLA from fusing the
    products into the adds (an FMA rounds differently): per-episode results must not depend
    on the program around them (sharded, multi-process or not)."""
    return ordered_sum(jax.lax.optimization_barrier(x * w))


def _masked_percentiles(values, mask, qs):
    """numpy-style linear percentiles of values[mask]; 0 when the mask is empty."""
    out = jnp.nanpercentile(jnp.where(mask, values, jnp.nan), jnp.asarray(qs))
    return jnp.where(mask.any(), out, 0.0)


def backlog_terms(weight, since_s, until_s, core):
    """[...] float32 each wait's term of the ``backlog_work_growth`` numerator: ``weight`` (GPU
    work) x (its overlap of [since_s, until_s) with the measurement interval's last quarter -
    its overlap with the first quarter)."""
    lo, hi = core.measure_from_s, core.measure_to_s
    quarter = jnp.maximum(hi - lo, 0.0) * jnp.float32(0.25)
    return weight * (_overlap(since_s, until_s, hi - quarter, hi) - _overlap(since_s, until_s, lo, lo + quarter))


def _backlog_work_growth(state, span, measured, placed, rejected):
    """The backlog of work, from the jobs' records: (mean over the measurement interval's
    last quarter - mean over its first) of the GPU work (GPUs x work at speed 1.0) of the jobs
    waiting (queued, or dropped from a full queue: from their arrival on, until they start,
    are rejected or the episode stops; with rounds also from each preemption until they start
    again, with the GPU work they have left), as a share of the measured jobs' GPU work. Jobs no
    node can hold never wait. Summed job by job: each wait's (last - first) overlap is one term."""
    jobs, core = state.jobs, state.core
    gpus = jobs.num_gpu.astype(jnp.float32) * jobs.gpu_milli.astype(jnp.float32) / GPU_MILLI
    gpu_work = gpus * jobs.work_s
    arrived = jnp.arange(jobs.num_jobs) < core.next_arrival
    waited = jobs.valid & arrived & ~state.unschedulable
    until = jnp.where(placed, state.start_s, jnp.where(rejected, state.end_s, jnp.inf))
    until = jnp.maximum(jnp.minimum(until, core.time_s), jobs.arrival_s)
    growth = ordered_sum(jnp.where(waited, backlog_terms(gpu_work, jobs.arrival_s, until, core), 0.0))
    seg = state.segments
    if seg is not None:  # rounds: the waits after a preemption, ended and still going
        waiting = jnp.isfinite(seg.waiting_since_s)
        still = backlog_terms(gpus * seg.remaining_s, seg.waiting_since_s, core.time_s, core)
        growth = growth + seg.rewait_growth + ordered_sum(jnp.where(waiting, still, 0.0))
    quarter = span * jnp.float32(0.25)
    return _safe_div(growth, quarter * ordered_sum(jnp.where(measured, gpu_work, 0.0)))


def job_sizes(num_gpu) -> dict:
    """{size class: [J] bool} of ``num_gpu`` [J]: "small" (at most one GPU), "2to8", "over8"
    (docs/semantics.md, "Metrics": the JCT and delay means by job size)."""
    return {"small": num_gpu <= 1, "2to8": (num_gpu >= 2) & (num_gpu <= 8), "over8": num_gpu > 8}


def summarize(state, params: EnvParams, static_mode: bool, track_frag: bool = True,
              warmup_jobs: int = 0) -> dict:
    """Per-episode metrics of a (finished or capped) episode as a dict of scalars.

    Job metrics (JCT, queueing delay, slowdown, time in system) are over the *measured* jobs
    (index ``warmup_jobs`` .. ``core.measure_last``), time-weighted ones over the measurement
    interval; counters, ``makespan_s``, ``throughput_per_h`` and ``episode_jct_mean`` are over
    the whole episode (docs/semantics.md, "Metrics"). ``started_after_arrivals`` counts the
    measured jobs that started after the episode's last arrival: nonzero means the jobs after
    the measured ones ran out before those had started, and their waits are too short. Works
    on one episode; ``vmap`` it.
    """
    jobs, core, acc = state.jobs, state.core, state.core.acc
    cluster = params.cluster
    cap_node = (cluster.num_gpus * cluster.valid).astype(jnp.float32) * GPU_MILLI  # [N]
    total_milli = ordered_sum(cap_node)
    t_end, t0 = core.time_s, jobs.arrival_s[0]
    index = jnp.arange(jobs.num_jobs)
    placed = state.outcome == OUTCOME_PLACED
    rejected = state.outcome == OUTCOME_REJECTED
    finished = placed if static_mode else placed & (state.end_s <= t_end)
    measured = jobs.valid & (index >= warmup_jobs) & (index <= core.measure_last)
    n_total = jobs.valid.sum(dtype=jnp.int32)
    n_finished = finished.sum(dtype=jnp.int32)
    n_measured = measured.sum(dtype=jnp.int32)
    done_measured = finished & measured
    n_done_measured = done_measured.sum(dtype=jnp.int32)
    n_rejected = rejected.sum(dtype=jnp.int32)

    jct = state.end_s - jobs.arrival_s
    delay = state.start_s - jobs.arrival_s
    run = state.end_s - state.start_s
    jct_p50, jct_p95, jct_p99 = _masked_percentiles(jct, done_measured, [50.0, 95.0, 99.0])
    mean = lambda x, mask=done_measured: _safe_div(  # noqa: E731
        ordered_sum(jnp.where(mask, x, 0.0)), mask.sum(dtype=jnp.int32))
    slowdown = jnp.maximum(jct / jnp.maximum(run, SLOWDOWN_FLOOR_S), 1.0)
    makespan = jnp.where(n_finished > 0, jnp.where(finished, state.end_s, -jnp.inf).max() - t0, 0.0)
    left = measured & (finished | (rejected & (state.end_s <= t_end)))  # left the system
    last_arrival = jobs.arrival_s[jnp.maximum(n_total - 1, 0)]
    started_late = measured & (state.start_s > last_arrival) & (state.start_s < jnp.inf)

    speed = cluster.speed.astype(jnp.float32)
    if static_mode:
        used_node = cap_node - core.free_milli.sum(-1).astype(jnp.float32)
        alloc_milli = ordered_sum(used_node)
        frag = ordered_sum(core.frag_node)
        gpu_alloc = _safe_div(alloc_milli, total_milli)
        work_alloc = _safe_div(_weighted_sum(used_node, speed), _weighted_sum(cap_node, speed))
        frag_amount = _safe_div(frag, total_milli)
        frag_rate = _safe_div(frag, total_milli - alloc_milli)
        zero = jnp.float32(0.0)
        jobs_in_system = queue_len_mean = backlog_growth = backlog_work_growth = span = zero
    else:
        span = jnp.maximum(core.measure_to_s - core.measure_from_s, 0.0)
        used_integral, frag_integral = settled(acc, core.time_s, core.measure_from_s, core.measure_to_s,
                                               used_milli(cluster.gpu_exists, core.free_milli))
        used = ordered_sum(used_integral)
        frag = ordered_sum(frag_integral)
        gpu_alloc = _safe_div(used, total_milli * span)
        work_alloc = _safe_div(_weighted_sum(used_integral, speed), _weighted_sum(cap_node, speed) * span)
        frag_amount = _safe_div(frag, total_milli * span)
        frag_rate = _safe_div(frag, acc.idle_integral)
        jobs_in_system = _safe_div(acc.jobs_integral, span)
        queue_len_mean = _safe_div(acc.queue_integral, span)
        # Mean backlog of the last quarter minus the first, per measured job.
        backlog_growth = _safe_div(acc.backlog_last - acc.backlog_first, span * 0.25 * n_measured)
        backlog_work_growth = _backlog_work_growth(state, span, measured, placed, rejected)
    if not track_frag:  # EnvConfig.track_frag off: fragmentation was not kept
        frag_amount = frag_rate = jnp.float32(jnp.nan)

    dynamic = lambda x: 0.0 if static_mode else x  # noqa: E731
    return {
        "decisions": acc.decisions,
        "invalid_actions": acc.invalid_actions,
        "jobs_total": n_total,
        "placed": placed.sum(dtype=jnp.int32),
        "finished": n_finished,
        "rejected": n_rejected,
        "failed": acc.failed,
        "dropped_overflow": acc.dropped_overflow,
        "unfinished": n_total - n_finished - n_rejected - acc.failed - acc.dropped_overflow,
        "running_full": acc.running_full.astype(jnp.int32),
        "done": core.done.astype(jnp.int32),
        "measured_jobs": n_measured,
        "measured_finished": n_done_measured,
        "started_after_arrivals": started_late.sum(dtype=jnp.int32),
        "jct_mean": dynamic(mean(jct)),
        "jct_p50": dynamic(jct_p50),
        "jct_p95": dynamic(jct_p95),
        "jct_p99": dynamic(jct_p99),
        "queue_delay_mean": dynamic(mean(delay)),
        "queue_delay_p95": dynamic(_masked_percentiles(delay, done_measured, [95.0])[0]),
        "slowdown_mean": dynamic(mean(slowdown)),
        **{f"{name}_{size}": dynamic(mean(x, done_measured & in_size))
           for size, in_size in job_sizes(jobs.num_gpu).items()
           for name, x in (("jct_mean", jct), ("queue_delay_mean", delay))},
        "time_in_system_mean": dynamic(mean(jct, left)),
        "episode_jct_mean": dynamic(mean(jct, finished)),
        "makespan_s": dynamic(makespan),
        "throughput_per_h": dynamic(_safe_div(n_finished * 3600.0, makespan)),
        "gpu_alloc": gpu_alloc,
        "work_alloc": work_alloc,
        "frag_amount": frag_amount,
        "frag_rate": frag_rate,
        "jobs_in_system": jobs_in_system,
        "queue_len_mean": queue_len_mean,
        "backlog_growth": backlog_growth,
        "backlog_work_growth": backlog_work_growth,
        "measure_span_s": span,
        "reservations": acc.reservations,
        "migrations": acc.migrations,
        "migration_gpu_s": acc.migration_gpu_s,
    }
