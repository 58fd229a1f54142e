"""Round policies (docs/semantics.md, "Preemption and rounds" and "Round policies"): with
rounds (``EnvConfig.round_s`` > 0) a policy is ``policy(params, state, key) -> priority [J]
float32``, read for the queued and running jobs only: higher runs first, ties to the lower job
index; NaN or -inf holds a job back. ``ClusterEnv.step_round`` takes the priorities.

``params`` of a round policy is its ``RoundSettings`` (the run's round length and Tiresias's
queues, from the ``EnvConfig``): ``with_settings`` binds them, as ``evaluate.scheduler_policy``
does for every registered round policy; las-gpu, srtf and priority read none. A policy that
also reads the cluster (``las_perf``, marked by ``reads_env_params``) gets the run's
``EnvParams`` as a fourth argument, and gives a priority per (job, GPU model id), [J, M].
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched.cluster import MODEL_NAMES
from jaxsched.max_min_lp import allocation_in_jit
from jaxsched.sim.gangs import fits_each_model_when_empty
from jaxsched.sim.reduce import nonzero_indices
from jaxsched.sim.rounds import attained_by_model_now, attained_now, mark_jobs, remaining_now, restart_cost_s
from jaxsched.types import GPU_MILLI


@dataclasses.dataclass(frozen=True)
class RoundSettings:
    """What the round policies read from the run's ``EnvConfig`` (hashable: bound as constants).

    round_s: seconds between rounds (las: a job's head start of time received is round_s / 2).
    tiresias_thresholds_gpu_s: tiresias's queue thresholds, attained GPU-seconds (b_1 < ... < b_m:
      m + 1 queues).
    tiresias_promote_knob: tiresias's starvation knob (0: no promotion).
    max_span: the most nodes one job may run on (las: the largest job size is this many
      nodes' GPUs).
    reset_s: the run's ``round_reset_s`` (0: no allocation resets; gavel-fifo then allocates
      at every round).
    restart_overhead_s, restart_above_gpus: the run's restart costs (helios-srtf ranks a
      preempted job by its work left plus the cost it will pay).
    """

    round_s: float
    tiresias_thresholds_gpu_s: tuple
    tiresias_promote_knob: float
    max_span: int
    reset_s: float = 0.0
    restart_overhead_s: tuple = (0.0,)
    restart_above_gpus: tuple = ()


def settings(config) -> RoundSettings:
    """The ``RoundSettings`` of an ``EnvConfig`` (one with rounds)."""
    return RoundSettings(float(config.round_s), tuple(float(b) for b in config.tiresias_thresholds_gpu_s),
                         float(config.tiresias_promote_knob), int(config.max_span), float(config.round_reset_s),
                         tuple(float(c) for c in config.restart_overhead_s),
                         tuple(int(b) for b in config.restart_above_gpus))


@functools.lru_cache(maxsize=None)
def with_settings(policy, round_settings: RoundSettings):
    """``policy`` with ``round_settings`` as its params (cached: the same pair gives the same
    function, so jitted rollouts compile once)."""
    reads_env = reads_env_params(policy)

    def bound(params, state, key, env_params=None):
        if reads_env:
            return policy(round_settings, state, key, env_params)
        return policy(round_settings, state, key)
    bound.reads_env_params = reads_env
    bound.calls_host = getattr(policy, "calls_host", False)
    return bound


def reads_env_params(policy) -> bool:
    """The round policy takes the run's ``EnvParams`` as a fourth argument (``las_perf``)."""
    return getattr(policy, "reads_env_params", False)


def _need(params, name):
    if not isinstance(params, RoundSettings):
        raise ValueError(f"round policy {name!r} needs its RoundSettings as params "
                         "(policies.rounds.with_settings(policy, settings(env_config)))")
    return params


def running_jobs(state):
    """[J] bool: the jobs running now."""
    return mark_jobs(state.core.run_job, state.jobs.num_jobs)


def active_jobs(state):
    """[J] bool: the jobs in the system now, queued or running."""
    return mark_jobs(state.core.queue, state.jobs.num_jobs) | running_jobs(state)


def cluster_milli(state):
    """[] int32 the cluster's GPU milli: its free GPU milli and the running jobs' GPU milli."""
    jobs = state.jobs
    return state.core.free_milli.sum() + jnp.where(running_jobs(state), jobs.num_gpu * jobs.gpu_milli, 0).sum()


def cluster_gpus(state):
    """[] int32 the cluster's GPUs (``cluster_milli`` over 1000)."""
    return cluster_milli(state) // GPU_MILLI


def max_min_share(num_gpu, active, total_gpus, max_job_gpus: int):
    """[J] float32 each job's max-min fair share of time x (Gavel's heterogeneity-agnostic
    max-min fairness, all throughputs 1, water-filled): the active GPU jobs get
    x = min(1, L / num_gpu), L the level with sum min(num_gpu, L) = total_gpus (float32:
    L = float32(total - sum of the sizes under it) / float32(how many are not under it));
    every job gets 1 when their GPUs fit, and CPU-only or inactive jobs get 1.

    num_gpu [J] int32, active [J] bool, total_gpus [] int32; max_job_gpus (static): the most
    GPUs an active job can ask (max_span x GPUs per node: a job no node set can hold fails at
    arrival). The level comes from a histogram of the sizes, not a sort of the J jobs: over
    the sizes v that occur, ascending, the first short one (giving every job of size >= v
    its size would need more than the GPUs the smaller ones leave) sets L; the integers are
    those of the sorted water-fill, so the shares are the same (at J = 8,000 and 16 episodes,
    about 10 times less time than the sort on the CPU)."""
    sizes = jnp.where(active & (num_gpu > 0), jnp.minimum(num_gpu, max_job_gpus), 0)
    v = jnp.arange(max_job_gpus + 1, dtype=jnp.int32)  # size v = bin v; bin 0 not counted
    count = jnp.zeros(max_job_gpus + 1, jnp.int32).at[sizes].add(1).at[0].set(0)
    at_least = jnp.cumsum(count[::-1])[::-1]  # jobs of size >= v
    below = jnp.cumsum(v * count) - v * count  # GPUs of the jobs of size < v
    short = (count > 0) & (v * at_least > total_gpus - below)
    first = jnp.argmax(short)
    level = (total_gpus - below[first]).astype(jnp.float32) / at_least[first].astype(jnp.float32)
    share = jnp.minimum(1.0, level / jnp.maximum(sizes, 1).astype(jnp.float32))
    return jnp.where(short.any() & (sizes > 0), share, 1.0)


def in_system_at_last_reset(state):
    """[J] bool: the jobs that were in the system (queued or running) at the last allocation
    reset R: arrived by R and still in the system now, or finished after R."""
    last_reset, end_s = state.core.rounds.last_reset_s, state.end_s
    arrived = state.jobs.valid & (state.jobs.arrival_s <= last_reset)
    return arrived & (active_jobs(state) | (jnp.isfinite(end_s) & (end_s > last_reset)))


def las(params, state, key):
    """Gavel's LAS (heterogeneity-agnostic max-min fairness, one GPU type): priority =
    x / (attained_s + round_s / 2), the max-min fair share of time over the time received
    (wall seconds held, with Gavel's head start of half a round). With allocation resets
    (``RoundSettings.reset_s`` > 0) the share is the one of the jobs in the system at the last
    reset (``in_system_at_last_reset``), the time is received since it (0 at a reset round),
    and a job that arrived since waits, held, for the next reset. docs/semantics.md, "Round
    policies"."""
    round_settings = _need(params, "las")
    attained_s = attained_now(state)[0]
    half_round = jnp.float32(round_settings.round_s / 2)
    max_job_gpus = round_settings.max_span * state.core.free_milli.shape[-1]
    if round_settings.reset_s > 0:
        allocated = in_system_at_last_reset(state)
        share = max_min_share(state.jobs.num_gpu, allocated, cluster_gpus(state), max_job_gpus)
        received = jnp.where(state.core.rounds.reset, 0.0, attained_s - state.segments.attained_at_reset_s)
        return jnp.where(allocated, share / (received + half_round), -jnp.inf)
    share = max_min_share(state.jobs.num_gpu, active_jobs(state), cluster_gpus(state), max_job_gpus)
    return share / (attained_s + half_round)


def model_table(cluster):
    """(workers [M] int32, speed [M, T] float32) per GPU model id: its GPUs in the cluster, and
    the speed of each job type on it (the fastest of its nodes; 0 for a model with no GPU)."""
    num_models = len(MODEL_NAMES)
    gpu_node = cluster.valid & (cluster.num_gpus > 0)
    row = jnp.where(gpu_node, cluster.gpu_model, num_models)  # (dropped)
    workers = jnp.zeros(num_models, jnp.int32).at[row].add(cluster.num_gpus, mode="drop")
    speed = jnp.zeros((num_models, cluster.type_speed.shape[-1]), jnp.float32).at[row].max(
        cluster.type_speed, mode="drop")
    return workers, speed


def las_perf(params, state, key, env_params):
    """Gavel's LAS with Gavel (heterogeneity-aware max-min fairness, ``max_min_fairness_perf``)
    -> priority [J, M] per (job, GPU model id): x[j, m] * W_m / (received on m + round_s / 2),
    x the allocation of the max-min LP over the throughput matrix (``max_min_lp``, solved on
    the host), W_m the model's GPUs; -inf where the job may not run (no GPU of the model, or
    not allowed); CPU-only jobs 1 / (attained_s + round_s / 2) on every model. Without
    allocation resets the LP is solved every round over the jobs in the system and the time
    received is the attained service on m. With resets (``RoundSettings.reset_s`` > 0), as
    Gavel: the LP is solved at reset rounds only, over the jobs in the system then, and kept
    (the policy's memory, ``segments.policy_share``); the time is received on m since the
    last reset; a GPU job that arrived since waits, held, for the next reset. -> (priority,
    memory). docs/semantics.md, "Round policies"."""
    round_settings = _need(params, "las-perf")
    jobs, cluster, seg = state.jobs, env_params.cluster, state.segments
    workers, speed = model_table(cluster)
    allowed = (jobs.model_mask[:, None] >> jnp.arange(len(MODEL_NAMES))) & 1 == 1  # [J, M]
    throughput = jnp.where(allowed & (workers > 0), speed[:, jobs.job_type].T, 0.0)  # [J, M]
    active = active_jobs(state)
    gpu_job = jobs.num_gpu > 0
    share = max_min_share(jobs.num_gpu, active, cluster_gpus(state),
                          round_settings.max_span * state.core.free_milli.shape[-1])
    scale = jnp.where(active & gpu_job, jobs.num_gpu, 0)
    half_round = jnp.float32(round_settings.round_s / 2)
    resets = round_settings.reset_s > 0
    if resets:  # (at a reset round the jobs in the system now are those at the reset)
        reset = state.core.rounds.reset
        x = allocation_in_jit(throughput, scale, share, workers, solve=reset, previous=seg.policy_share)
        received = jnp.where(reset, 0.0, attained_by_model_now(state, cluster) - seg.attained_model_at_reset_s)
        allocated = in_system_at_last_reset(state)
    else:
        x = allocation_in_jit(throughput, scale, share, workers)
        received, allocated = attained_by_model_now(state, cluster), jnp.ones(jobs.num_jobs, bool)
    gpu_priority = jnp.where(allocated[:, None] & (throughput > 0),
                             x * workers.astype(jnp.float32) / (received + half_round), -jnp.inf)
    cpu_priority = 1.0 / (attained_now(state)[0] + half_round)
    priority = jnp.where(gpu_job[:, None], gpu_priority, cpu_priority[:, None])
    return (priority, {"policy_share": x}) if resets else priority


las_perf.reads_env_params = True
las_perf.calls_host = True  # (its LP: ``rollout.sharded_rollout`` keeps it on one device)


# Gavel's GPU types in the order its FIFO lists them (sorted names: k80, p100, v100): model ids,
# and each model id's place in that order.
GAVEL_TYPE_ORDER = np.argsort([name.lower() for name in MODEL_NAMES], kind="stable").astype(np.int32)
GAVEL_TYPE_RANK = np.argsort(GAVEL_TYPE_ORDER).astype(np.int32)


def gavel_pick(job, count):
    """Gavel's ``rng.randrange(count)`` for job ``job`` (an index), as a fixed hash of the index
    that both simulators compute: ((job * 2654435761) mod 2^32) >> 16, mod count (count >= 1)."""
    mixed = (jnp.asarray(job).astype(jnp.uint32) * jnp.uint32(2654435761)) >> 16
    return (mixed % jnp.asarray(count).astype(jnp.uint32)).astype(jnp.int32)


def gavel_fifo_allocation(alloc, in_system, num_gpu, runs_on, workers):
    """Gavel's FIFO allocation (``FIFOPolicy.get_allocation``, base mode, as its code runs;
    docs/semantics.md, "Gavel's FIFO, read for gavel-fifo") -> the new allocation [J] int32.

    alloc [J] int32 the GPU model id each job was allocated (-1: none), in_system [J] bool,
    num_gpu [J] int32 (jobs of 0 GPUs are never allocated), runs_on [J, M] bool the job may
    run on the model (its mask allows it and the model's nodes hold it), or a function of a
    job index giving its row [M] (read for the jobs the walk reaches only), workers [M] int32
    the model's GPUs.
    1. Walk the allocated jobs by index with avail = workers: a job still in the system takes
       its GPUs from avail; a finished one hands its model to the head of the queue (the
       unallocated GPU jobs in the system, by index) if the head fits avail there and runs on
       it, and is forgotten.
    2. The list: models with avail > 0, in Gavel's order (``GAVEL_TYPE_ORDER``). Each queued
       job in turn, while the list is not empty: the list's models with avail >= its GPUs
       (none: stop) and a draw i among them (``gavel_pick``); the job gets the list's *last*
       model w it runs on (Gavel's leftover loop variable: Gavel's jobs run on every model)
       if there is one (else it waits and the walk goes on), avail[w] drops by its GPUs,
       and when avail[w] reaches 0 exactly the i-th model with room leaves the list (not
       necessarily w, which then stays, over-subscribed)."""
    num_jobs, num_models = alloc.shape[0], workers.shape[0]
    row = runs_on if callable(runs_on) else (lambda h: runs_on[h])  # noqa: E731
    models = jnp.arange(num_models)
    still = (alloc >= 0) & in_system
    used = jnp.where((alloc[:, None] == models) & still[:, None], num_gpu[:, None], 0)  # [J, M]
    before = jax.lax.associative_scan(jnp.add, used, axis=0) - used  # GPUs of the earlier ones
    queue = in_system & (alloc < 0) & (num_gpu > 0)
    queue_ids = nonzero_indices(queue, num_jobs, num_jobs)
    n_queue = queue.sum(dtype=jnp.int32)
    finished = (alloc >= 0) & ~in_system
    finished_ids = nonzero_indices(finished, num_jobs, num_jobs)

    def hand_over(i, carry):  # 1. finished job finished_ids[i] hands its model to the queue's head
        alloc, handed, head = carry
        c = finished_ids[i]
        m = alloc[c]
        h = jnp.minimum(queue_ids[jnp.minimum(head, num_jobs - 1)], num_jobs - 1)
        give = (head < n_queue) & (num_gpu[h] <= workers[m] - before[c, m] - handed[m]) & row(h)[m]
        alloc = alloc.at[h].set(jnp.where(give, m, alloc[h])).at[c].set(-1)
        return alloc, handed.at[m].add(jnp.where(give, num_gpu[h], 0)), head + give

    alloc, handed, head = jax.lax.fori_loop(0, finished.sum(dtype=jnp.int32), hand_over,
                                            (alloc, jnp.zeros(num_models, jnp.int32), jnp.int32(0)))
    avail = workers - used.sum(0) - handed
    order, rank = jnp.asarray(GAVEL_TYPE_ORDER), jnp.asarray(GAVEL_TYPE_RANK)

    def going(carry):
        head, _, _, listed, stop = carry
        return (head < n_queue) & listed.any() & ~stop

    def allocate(carry):  # 2. the queue's head, against the list
        head, alloc, avail, listed, _ = carry
        h = queue_ids[head]
        room = listed & (avail >= num_gpu[h])
        stop = ~room.any()
        room_in_order = room[order]
        i = gavel_pick(h, jnp.maximum(room.sum(), 1))
        drawn = order[jnp.argmax(room_in_order & (jnp.cumsum(room_in_order) - 1 == i))]
        its = listed & row(h)
        w = order[jnp.argmax(jnp.where(its[order], rank[order], -1))]  # the list's last model it runs on
        ok = ~stop & its.any()
        alloc = alloc.at[h].set(jnp.where(ok, w, alloc[h]))
        avail = avail.at[w].add(jnp.where(ok, -num_gpu[h], 0))
        listed = listed.at[drawn].set(listed[drawn] & ~(ok & (avail[w] == 0)))
        return head + ~stop, alloc, avail, listed, stop

    return jax.lax.while_loop(going, allocate, (head, alloc, avail, avail > 0, jnp.bool_(False)))[1]


def gavel_fifo(params, state, key, env_params):
    """Gavel's FIFO as its code runs (``fifo``, base mode): each GPU job in the system keeps a
    GPU type from its allocation (``gavel_fifo_allocation``, kept in
    ``segments.policy_model``; made at every round, or with allocation resets at reset rounds
    only), and each type's jobs share it round by round by Gavel's priority there
    (``typed_priority``). -> (priority [J, M], memory)."""
    round_settings = _need(params, "gavel-fifo")
    jobs, cluster = state.jobs, env_params.cluster
    workers, _ = model_table(cluster)

    def runs_on(h):  # a job runs on a model that can hold it (Gavel's servers hold any job)
        return fits_each_model_when_empty(cluster, jobs, round_settings.max_span, h) & (workers > 0)

    def allocate(alloc):
        return gavel_fifo_allocation(alloc, active_jobs(state), jobs.num_gpu, runs_on, workers)
    return typed_priority(state, cluster, round_settings, allocate)


def typed_priority(state, cluster, round_settings: RoundSettings, allocate):
    """The priority of a policy that gives each GPU job one GPU type (Gavel's FIFOs): the
    allocation ``allocate(previous [J]) -> [J]`` (model ids, -1: none) is made at every round,
    or with allocation resets at reset rounds only and kept (``segments.policy_model``).
    Without resets: priority[j, m] = 1 / (received + round_s / 2) on the job's type, -inf
    elsewhere (held until allocated), ``received`` its time on its type since its arrival;
    CPU-only jobs 1 / (that + round_s / 2) on every model. With resets, Gavel's order as a
    rank (``gavel_rank``): the least time received since the last reset first, then the
    largest deficit, then the lower index; the baseline of each job's deficit kept in
    ``segments.policy_share`` at its type. -> (priority [J, M], memory)."""
    jobs, seg = state.jobs, state.segments
    alloc = seg.policy_model
    num_models = len(MODEL_NAMES)
    half_round = jnp.float32(round_settings.round_s / 2)
    if round_settings.reset_s > 0:
        reset, last_reset = state.core.rounds.reset, state.core.rounds.last_reset_s
        previous = alloc
        alloc = jax.lax.cond(reset, allocate, lambda a: a, alloc)
        on_type = jnp.arange(num_models) == alloc[:, None]  # [J, M]
        attained = attained_now(state)[0]
        # A job's time on its type since the last reset (0 at a reset round): its total since,
        # as a job of these policies runs on its allocated type only.
        received = jnp.where(reset, 0.0, attained - seg.attained_at_reset_s)
        attained_at_reset = jnp.where(reset, attained, seg.attained_at_reset_s)
        # Gavel's deficit on the job's type, (time since it got the type - time run since),
        # counted up to the last reset: last_reset - attained_at_reset - baseline, the
        # baseline set when the job gets a type (at a reset round): the reset's time less its
        # attained service then.
        kept = jnp.sum(jnp.where(on_type, seg.policy_share, 0.0), axis=1)
        baseline = jnp.where((alloc >= 0) & (alloc != previous), last_reset - attained, kept)
        deficit = jnp.where(alloc >= 0, (last_reset - attained_at_reset) - baseline, 0.0)
        score = gavel_rank(received, deficit)
        priority = jnp.where((jobs.num_gpu > 0)[:, None], jnp.where(on_type, score[:, None], -jnp.inf), score[:, None])
        return priority, {"policy_model": alloc, "policy_share": jnp.where(on_type, baseline[:, None], 0.0)}
    alloc = allocate(alloc)
    on_type = jnp.arange(num_models) == alloc[:, None]
    received, on_model = attained_now(state)[0], attained_by_model_now(state, cluster)
    gpu_priority = jnp.where(on_type, 1.0 / (on_model + half_round), -jnp.inf)
    cpu_priority = 1.0 / (received + half_round)
    priority = jnp.where((jobs.num_gpu > 0)[:, None], gpu_priority, cpu_priority[:, None])
    return priority, {"policy_model": alloc}


def gavel_rank(received, deficit):
    """Gavel's round order for its FIFOs (``_schedule_jobs_on_workers_helper`` sorts a type's
    jobs by priority = allocation / fraction of the type's time received, then deficit, both
    descending; ties keep the jobs' order): received [J] ascending, deficit [J] descending,
    index ascending -> [J] float32 J - rank (the first J, the last 1)."""
    num_jobs = received.shape[0]
    index = jnp.arange(num_jobs, dtype=jnp.int32)
    order = jnp.lexsort((index, -deficit, received))
    rank = jnp.zeros(num_jobs, jnp.int32).at[order].set(index)
    return (num_jobs - rank).astype(jnp.float32)


gavel_fifo.reads_env_params = True


def fifo_perf_allocation(in_system, num_gpu, throughput, workers):
    """Gavel's FIFO with Gavel (``FIFOPolicyWithPerf``: ``FIFOPolicy`` in perf mode; docs/
    semantics.md, "Gavel's FIFO with Gavel, read for fifo-perf") -> the allocation [J] int32
    (a model id per job, -1: none), made afresh. in_system [J] bool, num_gpu [J] int32 (jobs
    of 0 GPUs are never allocated), throughput [J, M] float32 (0 where the job cannot run; or
    a function of a job index giving its row [M], read for the jobs the walk reaches only),
    workers [M] int32. avail = workers; the list: models with avail > 0 in Gavel's order
    (``GAVEL_TYPE_ORDER``). Each GPU job in the system by index, while the list is not empty:
    the list's models with avail >= its GPUs (none: stop); among them the one of highest
    throughput (the first in the list's order on ties); if that is > 0 the job gets it,
    avail drops by its GPUs and a model at 0 leaves the list; else the job waits and the
    walk goes on."""
    num_jobs = in_system.shape[0]
    row = throughput if callable(throughput) else (lambda h: throughput[h])  # noqa: E731
    queue = in_system & (num_gpu > 0)
    queue_ids = nonzero_indices(queue, num_jobs, num_jobs)
    n_queue = queue.sum(dtype=jnp.int32)
    order = jnp.asarray(GAVEL_TYPE_ORDER)

    def going(carry):
        head, _, _, listed, stop = carry
        return (head < n_queue) & listed.any() & ~stop

    def allocate(carry):
        head, alloc, avail, listed, _ = carry
        h = queue_ids[head]
        room = listed & (avail >= num_gpu[h])
        stop = ~room.any()
        speed = row(h)
        w = order[jnp.argmax(jnp.where(room, speed, -1.0)[order])]  # the best, first in order
        ok = ~stop & (speed[w] > 0)
        alloc = alloc.at[h].set(jnp.where(ok, w, -1))
        avail = avail.at[w].add(jnp.where(ok, -num_gpu[h], 0))
        listed = listed.at[w].set(listed[w] & ~(ok & (avail[w] == 0)))
        return head + ~stop, alloc, avail, listed, stop

    init = (jnp.int32(0), jnp.full(num_jobs, -1, jnp.int32), workers, workers > 0, jnp.bool_(False))
    return jax.lax.while_loop(going, allocate, init)[1]


def fifo_perf(params, state, key, env_params):
    """Gavel's FIFO with Gavel ("Gavel-FIFO", ``fifo_perf``): as ``gavel_fifo``, but the
    allocation is made afresh (``fifo_perf_allocation``): each GPU job in arrival order gets
    the GPU type of highest throughput among those with its GPUs free, never over-subscribed.
    -> (priority [J, M], allocation [J])."""
    round_settings = _need(params, "fifo-perf")
    jobs, cluster = state.jobs, env_params.cluster
    workers, speed = model_table(cluster)

    def throughput(h):  # [M]: 0 on a model whose nodes cannot hold the job
        runs_on = fits_each_model_when_empty(cluster, jobs, round_settings.max_span, h) & (workers > 0)
        return jnp.where(runs_on, speed[:, jobs.job_type[h]], 0.0)
    allocate = lambda _: fifo_perf_allocation(active_jobs(state), jobs.num_gpu, throughput, workers)  # noqa: E731
    return typed_priority(state, cluster, round_settings, allocate)


fifo_perf.reads_env_params = True


def las_gpu(params, state, key):
    """Least attained GPU-time, continuous (Tiresias's 2D-LAS): the fewest GPU-seconds held so
    far first (a job not yet run has 0; CPU-only jobs hold no GPU, so they always come first)."""
    return -attained_now(state)[1]


def tiresias_queue(state, round_settings: RoundSettings):
    """[J] int32 each job's Tiresias queue: how many thresholds its attained GPU-seconds reach,
    or 0 (the top queue) while it is promoted: started, and the time it has waited since its
    first start is at least the knob times its attained (wall) service (knob > 0)."""
    attained_s, attained_gpu_s = attained_now(state)
    thresholds = jnp.asarray(round_settings.tiresias_thresholds_gpu_s, jnp.float32).reshape(-1)
    queue = (attained_gpu_s[:, None] >= thresholds).sum(-1, dtype=jnp.int32)
    knob = jnp.float32(round_settings.tiresias_promote_knob)
    waited_s = (state.core.time_s - state.start_s) - attained_s
    promoted = (knob > 0) & jnp.isfinite(state.start_s) & (waited_s >= knob * attained_s)
    return jnp.where(promoted, 0, queue)


def tiresias(params, state, key):
    """Tiresias's discretized 2D-LAS (Gu et al., NSDI '19): queues by attained GPU-seconds,
    the top queue first; in a queue the running jobs first, then by arrival; starved jobs
    promoted by the knob. priority = -2 * queue + running."""
    queue = tiresias_queue(state, _need(params, "tiresias"))
    return (-2 * queue + running_jobs(state)).astype(jnp.float32)


def srtf(params, state, key):
    """Shortest remaining time first, from the oracle remaining work (reference-speed seconds)."""
    return -remaining_now(state)



def helios_srtf(params, state, key):
    """Helios's SRTF as its code runs (Hu et al., SC '21; HeliosArtifact ``policies/srtf.py``;
    docs/semantics.md, "Round policies"): the queued and running jobs in order of their time
    left, ``helios_srtf_key`` (ties as Helios's lists: queued before running, the queued by
    when they joined the queue, a preempted job after the arrivals of its second, the running
    by start, then by index), are taken while their GPUs fit the cluster's total count (a job
    that does not fit what is left is passed over, and later ones may still be taken); the
    running jobs taken keep their GPUs, the others are preempted, and the queued jobs taken
    are placed in that order where they fit, after every running job (so they release none):
    priority 1 for a running job taken, -(its place in the order) for a queued one, -inf for
    the rest.

    -> (priority [J] float32, {"steady_until": t}): until t, absent arrivals and completions,
    the priorities stay these (``settled_rounds`` "skipped-by-policy"). A queued job's time
    left stands still and a running job's falls, so the order changes only where a running
    job passes a queued one, and only passing a queued job that is taken can move a taken
    job's place or the count before it (to pass an untaken one between, it passes the taken
    ones first). t is when the first running job would reach the time left of the nearest
    taken queued job before it, at its rate (1 in its restart cost, else its speed), less a
    margin for float32 and two rounds."""
    jobs, core = state.jobs, state.core
    num_jobs = jobs.num_jobs
    running = running_jobs(state)
    active = active_jobs(state)
    ask = jnp.where(active, jobs.num_gpu * jobs.gpu_milli, 0)  # [J] int32 milli-GPUs
    quota0 = cluster_milli(state)
    key_s = jnp.where(active, helios_srtf_key(_need(params, "helios-srtf"), state), jnp.inf)
    # Ties as Helios's lists: queued before running; the queue by when a job joined it (arrival,
    # or preemption: after the arrivals of that second), the running jobs by start; then index.
    seg = state.segments
    rejoined = seg.preemptions > 0
    joined_s = jnp.where(running, seg.seg_start_s, jnp.where(rejoined, seg.waiting_since_s, jobs.arrival_s))
    order = jnp.lexsort((jnp.arange(num_jobs), rejoined & ~running, joined_s, running, key_s))
    ask_sorted = ask[order]
    n_active = active.sum(dtype=jnp.int32)
    positions = jnp.arange(num_jobs, dtype=jnp.int32)

    # The greedy pass, a run at a time: from place p, the longest run whose asks fit the quota
    # is taken; the next place does not fit; the pass goes on at the first place after it whose
    # ask fits what is left. Each pass takes a job (or ends), and after the first the quota is
    # below one job's ask: a few passes (at most the largest ask in GPUs, plus one). (The sums
    # are int32; past the first place that does not fit they are never read.)
    def take_run(carry):
        p, quota, taken = carry
        total = jnp.cumsum(jnp.where(positions >= p, ask_sorted, 0))  # the asks from p on, inclusive
        fits = (positions >= p) & (positions < n_active) & (total <= quota)
        end = jnp.where(((positions >= p) & ~fits).any(), jnp.argmax((positions >= p) & ~fits), num_jobs)
        run = (positions >= p) & (positions < end)
        quota = quota - jnp.where(run, ask_sorted, 0).sum()
        nxt = (positions > end) & (positions < n_active) & (ask_sorted <= quota)
        p = jnp.where(nxt.any(), jnp.argmax(nxt), num_jobs).astype(jnp.int32)
        return p, quota, taken | (run & (positions < n_active))

    _, _, taken_sorted = jax.lax.while_loop(lambda c: c[0] < n_active, take_run,
                                            (jnp.int32(0), quota0, jnp.zeros(num_jobs, bool)))
    taken = jnp.zeros(num_jobs, bool).at[order].set(taken_sorted)
    place = jnp.zeros(num_jobs, jnp.int32).at[order].set(positions)
    priority = jnp.where(taken, jnp.where(running, 1.0, -place.astype(jnp.float32)), -jnp.inf)

    # Until when that holds: each running job's distance to the nearest taken queued job
    # before it in the order (the last such key at or before its place), over its rate.
    running_sorted = running[order]
    queued_taken_key = jnp.where(taken_sorted & ~running_sorted & (positions < n_active), key_s[order], -jnp.inf)
    nearest = jax.lax.cummax(queued_taken_key)  # [J] the last taken queued job's key up to each place
    rate = jnp.where(core.time_s < seg.run_from_s, 1.0, seg.seg_speed)[order]
    ahead_s = (key_s[order] - nearest) / rate * (1.0 - 1e-5) - 2.0 * params.round_s
    steady_s = jnp.where(running_sorted & (nearest > -jnp.inf), ahead_s, jnp.inf).min()
    return priority, {"steady_until": core.time_s + steady_s}


def helios_srtf_key(round_settings: RoundSettings, state):
    """[J] float32 each job's time left as Helios's SRTF ranks it (its ``remain``): a running
    job's work left plus the restart cost it has still to pay (float32(end - t) * speed past
    its cost, else float32(remaining + float32(run_from - t))); a queued job's work left plus
    its restart cost when it was preempted before (``remaining_s``, ``restart_overhead_s``)."""
    jobs, seg, t = state.jobs, state.segments, state.core.time_s
    cost = jnp.where(seg.preemptions > 0, restart_cost_s(round_settings.restart_overhead_s,
                                                         round_settings.restart_above_gpus, jobs.num_gpu), 0.0)
    running = running_jobs(state)
    in_cost = running & (t < seg.run_from_s)
    return jnp.where(running, jnp.where(in_cost, seg.remaining_s + (seg.run_from_s - t), remaining_now(state)),
                     seg.remaining_s + cost)


def priority(params, state, key):
    """By priority class (``Jobs.qos_class``, higher first; openb's ``qos``): priority =
    2 * qos_class + running. A class's running jobs keep their GPUs before any queued job of
    that class starts, so a queued job preempts running jobs of lower classes only (the
    lowest classes released first); within a class, arrival order."""
    return (2 * state.jobs.qos_class + running_jobs(state)).astype(jnp.float32)
