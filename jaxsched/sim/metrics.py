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
    """Counters and time integrals of one episode (scalars, but for frag_integral).

    decisions, invalid_actions, failed, dropped_overflow  int32
    running_full  bool   the running set was full after some placement
    alloc_integral  float32  integral of allocated milli-GPU dt   (milli * s)
    frag_integral   [N] float32  integral of each node's fragmentation F_n dt (milli * s);
                    kept per node, so each event adds elementwise and no ordered sum over
                    nodes is needed until the summary
    idle_integral   float32  integral of idle milli-GPU dt         (milli * s)
    in_system_integral float32 integral of jobs queued or running dt (job * s)
    migrations      int32    jobs moved by rescheduling passes
    migration_gpu_s float32  GPU-seconds those jobs spent paused (num_gpu * gpu_milli/1000 * pause)
    """

    decisions: jax.Array
    invalid_actions: jax.Array
    failed: jax.Array
    dropped_overflow: jax.Array
    running_full: jax.Array
    alloc_integral: jax.Array
    frag_integral: jax.Array
    idle_integral: jax.Array
    in_system_integral: jax.Array
    migrations: jax.Array
    migration_gpu_s: jax.Array

    @classmethod
    def zeros(cls, num_nodes: int) -> "Accumulators":
        i, f = jnp.int32(0), jnp.float32(0.0)
        return cls(i, i, i, i, jnp.bool_(False), f, jnp.zeros(num_nodes, jnp.float32), f, f, i, f)


def accumulate(acc: Accumulators, dt, alloc_milli, frag_node, idle_milli, in_system) -> Accumulators:
    """Add ``dt`` seconds of the current cluster state to the time integrals (frag_node [N])."""
    dt = jnp.float32(dt)
    return acc.replace(
        alloc_integral=acc.alloc_integral + dt * alloc_milli.astype(jnp.float32),
        frag_integral=acc.frag_integral + dt * frag_node,
        idle_integral=acc.idle_integral + dt * idle_milli.astype(jnp.float32),
        in_system_integral=acc.in_system_integral + dt * in_system.astype(jnp.float32),
    )


def _safe_div(a, b):
    return jnp.where(b > 0, a / jnp.where(b > 0, b, 1), 0.0)


def _masked_percentiles(values, mask, qs):
    """numpy-style linear percentiles of values[mask]; 0 when the mask is empty."""
    out = jnp.nanpercentile(jnp.where(mask, values, jnp.nan), jnp.asarray(qs))
    return jnp.where(mask.any(), out, 0.0)


def summarize(state, params: EnvParams, static_mode: bool, track_frag: bool = True) -> dict:
    """Per-episode metrics of a (finished or capped) episode as a dict of scalars.

    Works on one episode; ``vmap`` it for a batch.
    """
    jobs, core, acc = state.jobs, state.core, state.core.acc
    cluster = params.cluster
    total_milli = (cluster.num_gpus * cluster.valid).sum().astype(jnp.float32) * GPU_MILLI
    t_end, t0 = core.time_s, jobs.arrival_s[0]
    placed = state.outcome == OUTCOME_PLACED
    finished = placed if static_mode else placed & (state.end_s <= t_end)
    n_total = jobs.valid.sum(dtype=jnp.int32)
    n_finished = finished.sum(dtype=jnp.int32)
    n_rejected = (state.outcome == OUTCOME_REJECTED).sum(dtype=jnp.int32)

    jct = state.end_s - jobs.arrival_s
    delay = state.start_s - jobs.arrival_s
    run = state.end_s - state.start_s
    jct_p50, jct_p95, jct_p99 = _masked_percentiles(jct, finished, [50.0, 95.0, 99.0])
    mean = lambda x: _safe_div(ordered_sum(jnp.where(finished, x, 0.0)), n_finished)  # noqa: E731
    slowdown = jnp.maximum(jct / jnp.maximum(run, SLOWDOWN_FLOOR_S), 1.0)
    makespan = jnp.where(n_finished > 0, jnp.where(finished, state.end_s, -jnp.inf).max() - t0, 0.0)

    if static_mode:
        alloc_milli = total_milli - core.free_milli.sum().astype(jnp.float32)
        frag = ordered_sum(core.frag_node)
        gpu_alloc = _safe_div(alloc_milli, total_milli)
        frag_amount = _safe_div(frag, total_milli)
        frag_rate = _safe_div(frag, total_milli - alloc_milli)
    else:
        span = jnp.maximum(t_end - t0, 0.0)
        frag_integral = ordered_sum(acc.frag_integral)
        gpu_alloc = _safe_div(acc.alloc_integral, total_milli * span)
        frag_amount = _safe_div(frag_integral, total_milli * span)
        frag_rate = _safe_div(frag_integral, acc.idle_integral)
    if not track_frag:  # EnvConfig.track_frag off: fragmentation was not kept
        frag_amount = frag_rate = jnp.float32(jnp.nan)

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
        "jct_mean": 0.0 if static_mode else mean(jct),
        "jct_p50": 0.0 if static_mode else jct_p50,
        "jct_p95": 0.0 if static_mode else jct_p95,
        "jct_p99": 0.0 if static_mode else jct_p99,
        "queue_delay_mean": 0.0 if static_mode else mean(delay),
        "queue_delay_p95": 0.0 if static_mode else _masked_percentiles(delay, finished, [95.0])[0],
        "slowdown_mean": 0.0 if static_mode else mean(slowdown),
        "makespan_s": 0.0 if static_mode else makespan,
        "throughput_per_h": 0.0 if static_mode else _safe_div(n_finished * 3600.0, makespan),
        "gpu_alloc": gpu_alloc,
        "frag_amount": frag_amount,
        "frag_rate": frag_rate,
        "migrations": acc.migrations,
        "migration_gpu_s": acc.migration_gpu_s,
    }
