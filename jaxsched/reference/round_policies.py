"""The round policies: each gives every job a priority at a round (semantics.md, "Preemption and rounds")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jaxsched import max_min_lp
from jaxsched.cluster import MODEL_NAMES
from jaxsched.reference.resources import _job_fits, _model_allowed
from jaxsched.types import GPU_MILLI

if TYPE_CHECKING:  # annotations only: sim.py imports this module
    from jaxsched.reference.sim import ReferenceSim


# ---------------------------------------------------------------------- round policies
#
# semantics.md, "Preemption and rounds": at a round a policy gives every job a priority
# (higher runs first; the env breaks ties by job index, i.e. by arrival). Only queued and
# running jobs' entries are read.


def _in_system(sim: ReferenceSim) -> list:
    """The jobs queued or running now, by index."""
    return sorted(sim.queue + [j for _, j in sim.running])


def max_min_shares(sizes: list, gpus: int) -> list:
    """Gavel's heterogeneity-agnostic max-min fair shares of time (all throughputs 1, one GPU
    type), water-filled: every job of ``sizes`` (GPUs, each >= 1) gets an equal level L of the
    ``gpus`` GPUs, capped at its size (share 1); the GPUs a capped job leaves are shared out
    again among the others. -> [share] float32, min(1, L / size), L in float32 as the env has it."""
    shares = [np.float32(1)] * len(sizes)
    open_jobs, left = list(range(len(sizes))), gpus
    while open_jobs:
        capped = [i for i in open_jobs if sizes[i] * len(open_jobs) <= left]  # size <= the level
        if not capped:
            level = np.float32(np.float32(left) / np.float32(len(open_jobs)))
            for i in open_jobs:
                shares[i] = min(np.float32(1), np.float32(level / np.float32(sizes[i])))
            break
        for i in capped:
            left -= sizes[i]
            open_jobs.remove(i)
    return shares


def _las_priority(sim: ReferenceSim) -> list:
    """las, Gavel's LAS: a job's max-min fair share of time (CPU-only jobs: 1) over the time it
    has received (wall seconds held, plus Gavel's head start of half a round); 0 for jobs not
    in the system (not read). With allocation resets: the shares of the jobs in the system at
    the last reset, the time received since it, -inf for a job that arrived since."""
    if sim.config.round_reset_s > 0:
        return _las_priority_with_resets(sim)
    gpu_jobs = [j for j in _in_system(sim) if sim.jobs[j].num_gpu > 0]
    shares = {j: np.float32(1) for j in _in_system(sim)}
    shares.update(zip(gpu_jobs, max_min_shares([sim.jobs[j].num_gpu for j in gpu_jobs],
                                                sum(len(g) for g in sim.gpus_of))))
    head_start = np.float32(sim.config.round_s / 2)
    return [np.float32(shares[j] / np.float32(sim.attained_now(j)[0] + head_start)) if j in shares
            else np.float32(0) for j in range(sim.J)]


def _in_system_at_last_reset(sim: ReferenceSim) -> list:
    """The jobs in the system at the last reset R: arrived by R, and still in the system or
    finished after R; by index."""
    last, in_system = sim.last_reset_s, set(_in_system(sim))
    return [j for j in range(sim.J_valid) if sim.jobs[j].arrival_s <= last
            and (j in in_system or (np.isfinite(sim.end_s[j]) and sim.end_s[j] > last))]


def _las_priority_with_resets(sim: ReferenceSim) -> list:
    """las with allocation resets (semantics.md, "Allocation resets"): the jobs in the system
    at the last reset R (arrived by R; still in the system or finished after R) share by
    max-min as las does; priority = share / (time received since R + half a round), 0 at the
    reset round itself; -inf for the rest."""
    at_reset = _in_system_at_last_reset(sim)
    gpu_jobs = [j for j in at_reset if sim.jobs[j].num_gpu > 0]
    shares = {j: np.float32(1) for j in at_reset}
    shares.update(zip(gpu_jobs, max_min_shares([sim.jobs[j].num_gpu for j in gpu_jobs],
                                                sum(len(g) for g in sim.gpus_of))))
    head_start = np.float32(sim.config.round_s / 2)
    out = [np.float32(-np.inf)] * sim.J
    for j in shares:
        received = np.float32(0) if sim.reset_due else np.float32(sim.attained_now(j)[0] - sim.attained_at_reset_s[j])
        out[j] = np.float32(shares[j] / np.float32(received + head_start))
    return out


def _las_perf_priority(sim: ReferenceSim) -> np.ndarray:
    """las-perf, Gavel's heterogeneity-aware LAS: per (job, GPU model id), the job's share of
    time on the model from the max-min LP (``max_min_lp.allocation``, the one solver both
    simulators call) times the model's GPUs, over the time it has received there (plus half
    a round); -inf where it may not run; CPU-only jobs as las with share 1 on every model.
    [J, M] float32 (rows of jobs not in the system are not read). With allocation resets the
    LP is solved at reset rounds only and kept (``sim.policy_share``), the time is received
    on each model since the last reset, and a GPU job that arrived since is held: then
    (priority, {"policy_share": x})."""
    num_models = len(MODEL_NAMES)
    workers = _model_workers(sim)
    speed = _model_speeds(sim)
    in_system = _in_system(sim)
    gpu_jobs = [j for j in in_system if sim.jobs[j].num_gpu > 0]
    share = np.ones(sim.J, np.float32)
    share[gpu_jobs] = max_min_shares([sim.jobs[j].num_gpu for j in gpu_jobs], sum(len(g) for g in sim.gpus_of))
    throughput = np.zeros((sim.J, num_models), np.float32)
    scale = np.zeros(sim.J, np.int64)
    for j in range(sim.J):
        job = sim.jobs[j]
        for m in range(num_models):
            if workers[m] and _model_allowed(job.model_mask, m):
                throughput[j, m] = speed[m][job.job_type]
    scale[gpu_jobs] = [sim.jobs[j].num_gpu for j in gpu_jobs]
    resets = sim.config.round_reset_s > 0
    if not resets or sim.reset_due:
        x = max_min_lp.allocation(throughput, scale, share, workers)
    else:
        x = sim.policy_share
    allocated = set(_in_system_at_last_reset(sim)) if resets else set(in_system)
    head_start = np.float32(sim.config.round_s / 2)
    priority = np.full((sim.J, num_models), -np.inf, np.float32)
    for j in in_system:
        if sim.jobs[j].num_gpu == 0:
            priority[j] = np.float32(1) / np.float32(sim.attained_now(j)[0] + head_start)
            continue
        if j not in allocated:
            continue  # arrived since the last reset: held until the next
        attained = sim.attained_by_model_now(j)
        for m in range(num_models):
            if resets:  # the time received on m since the last reset (0 at the reset round)
                received = (np.float32(0) if sim.reset_due
                            else np.float32(attained[m] - sim.attained_model_at_reset_s[j][m]))
            else:
                received = attained[m]
            if throughput[j, m] > 0:
                priority[j, m] = np.float32(x[j, m] * np.float32(workers[m])) / np.float32(received + head_start)
    return (priority, {"policy_share": x}) if resets else priority


def _model_workers(sim: ReferenceSim) -> list:
    """GPUs of each GPU model id in the cluster (valid nodes)."""
    workers = [0] * len(MODEL_NAMES)
    for n in range(sim.N):
        if sim.node_valid[n]:
            workers[sim.gpu_model[n]] += len(sim.gpus_of[n])
    return workers


def _model_speeds(sim: ReferenceSim) -> list:
    """Per GPU model id, the speed of each job type on the model's fastest node (0: no GPU)."""
    speed = [[np.float32(0)] * sim.T for _ in range(len(MODEL_NAMES))]
    for n in range(sim.N):
        if sim.node_valid[n] and sim.gpus_of[n]:
            m = sim.gpu_model[n]
            speed[m] = [max(a, b) for a, b in zip(speed[m], sim.type_speed[n])]
    return speed


def _gavel_draw(job: int, count: int) -> int:
    """Gavel's ``rng.randrange(count)`` for a job, as the fixed hash both simulators use."""
    return ((job * 2654435761) % 2**32 >> 16) % count


def _fits_model_when_empty(sim: ReferenceSim, j: int, m: int) -> bool:
    """Job j fits the empty cluster on nodes of GPU model id m alone: one such node holds all
    of it, or (a gang) its max_span such nodes of the most capacity hold its GPUs together."""
    job = sim.jobs[j]
    if not _model_allowed(job.model_mask, m):
        return False
    nodes = [n for n in range(sim.N) if sim.node_valid[n] and sim.gpu_model[n] == m]

    def most_gpus(n):  # the most whole GPUs of empty node n whose share of the job's CPU and memory fits
        return max((g for g in range(len(sim.gpus_of[n]) + 1)
                    if all(need <= cap for need, cap in zip(sim._part_request(j, g), (sim.cpu_cap[n], sim.mem_cap[n])))),
                   default=0)
    if job.num_gpu >= 2 and sim.config.max_span > 1:
        return sum(sorted((most_gpus(n) for n in nodes), reverse=True)[:sim.config.max_span]) >= job.num_gpu
    return any(_job_fits(job, m, sim.cpu_cap[n], sim.mem_cap[n], [GPU_MILLI] * len(sim.gpus_of[n])) for n in nodes)


def _gavel_fifo_allocate(sim: ReferenceSim, alloc: list) -> list:
    """Gavel's FIFO allocation, base mode (semantics.md, "Gavel's FIFO, read for gavel-fifo"):
    the allocation ``alloc`` (a model id per job, -1: none) after this round's call."""
    alloc = list(alloc)
    workers = _model_workers(sim)
    in_system = set(_in_system(sim))
    runs_on = lambda j, m: workers[m] > 0 and _fits_model_when_empty(sim, j, m)  # noqa: E731
    queue = [j for j in sorted(in_system) if alloc[j] < 0 and sim.jobs[j].num_gpu > 0]
    avail = list(workers)
    for j in [j for j in range(sim.J) if alloc[j] >= 0]:  # by index
        m = alloc[j]
        if j in in_system:
            avail[m] -= sim.jobs[j].num_gpu
            continue
        if queue and sim.jobs[queue[0]].num_gpu <= avail[m] and runs_on(queue[0], m):
            head = queue.pop(0)
            alloc[head] = m
            avail[m] -= sim.jobs[head].num_gpu
        alloc[j] = -1  # finished: forgotten
    names = sorted((MODEL_NAMES[m].lower(), m) for m in range(len(MODEL_NAMES)) if avail[m] > 0)
    listed = [m for _, m in names]
    while queue and listed:
        j = queue.pop(0)
        size = sim.jobs[j].num_gpu
        room = [i for i, m in enumerate(listed) if avail[m] >= size]
        if not room:
            break
        drawn = _gavel_draw(j, len(room))
        its = [m for m in listed if runs_on(j, m)]
        if its:
            w = its[-1]  # Gavel's leftover loop variable (its jobs run on every model)
            alloc[j] = w
            avail[w] -= size
            if avail[w] == 0:
                listed.pop(room[drawn])
    return alloc


def _fifo_perf_allocate(sim: ReferenceSim) -> list:
    """Gavel's FIFO with Gavel, perf mode (semantics.md, "Gavel's FIFO with Gavel, read for
    fifo-perf"): a model id per job (-1: none), made afresh."""
    workers = _model_workers(sim)
    speed = _model_speeds(sim)

    def throughput(j, m):
        ok = workers[m] > 0 and _fits_model_when_empty(sim, j, m)
        return speed[m][sim.jobs[j].job_type] if ok else np.float32(0)
    alloc = [-1] * sim.J
    avail = list(workers)
    listed = [m for _, m in sorted((MODEL_NAMES[m].lower(), m) for m in range(len(MODEL_NAMES)) if avail[m] > 0)]
    for j in [j for j in sorted(_in_system(sim)) if sim.jobs[j].num_gpu > 0]:
        if not listed:
            break
        size = sim.jobs[j].num_gpu
        room = [m for m in listed if avail[m] >= size]
        if not room:
            break
        speeds = [throughput(j, m) for m in room]
        best = room[max(range(len(room)), key=lambda i: (speeds[i], -i))]  # the fastest, first on ties
        if max(speeds) > 0:
            alloc[j] = best
            avail[best] -= size
            if avail[best] == 0:
                listed.remove(best)
    return alloc


def _gavel_fifo_priority(sim: ReferenceSim, allocate=_gavel_fifo_allocate) -> tuple:
    """gavel-fifo, Gavel's FIFO as its code runs: the allocation (``allocate``, by default
    ``_gavel_fifo_allocate``; with allocation resets only at a reset round, else the last one).
    Without resets, per (job, GPU model id), 1 / (time on the model since arrival + half a
    round) on the job's allocated model, -inf elsewhere (CPU-only jobs: their time, on every
    model). With resets, Gavel's sort of a type's jobs as a rank: the least time received
    since the last reset first (0 at a reset round), then the largest deficit on its type
    (the time since it got the type less the time it ran since, both up to the last reset:
    the reset it got the type at less its attained service then is the baseline, kept in
    ``policy_share`` on its type), then the lower index: J - rank on the job's model.
    -> ([J, M] float32, memory)."""
    resets = sim.config.round_reset_s > 0
    alloc = allocate(sim, sim.policy_model) if not resets or sim.reset_due else list(sim.policy_model)
    head_start = np.float32(sim.config.round_s / 2)
    priority = np.full((sim.J, len(MODEL_NAMES)), -np.inf, np.float32)
    if not resets:
        for j in _in_system(sim):
            received, on_model = sim.attained_now(j)[0], sim.attained_by_model_now(j)
            if sim.jobs[j].num_gpu == 0:
                priority[j] = np.float32(1) / np.float32(received + head_start)
            elif alloc[j] >= 0:
                priority[j, alloc[j]] = np.float32(1) / np.float32(on_model[alloc[j]] + head_start)
        return priority, {"policy_model": alloc}
    last = np.float32(sim.last_reset_s)
    baseline = np.zeros((sim.J, len(MODEL_NAMES)), np.float32)  # the deficit's, on the job's type
    received, deficit = [np.float32(0)] * sim.J, [np.float32(0)] * sim.J
    for j in range(sim.J):
        attained = sim.attained_now(j)[0]
        at_reset = attained if sim.reset_due else sim.attained_at_reset_s[j]
        if not sim.reset_due:
            received[j] = np.float32(attained - sim.attained_at_reset_s[j])
        if alloc[j] >= 0:
            new_type = sim.reset_due and alloc[j] != sim.policy_model[j]
            baseline[j, alloc[j]] = np.float32(last - attained) if new_type else sim.policy_share[j][alloc[j]]
            deficit[j] = np.float32(np.float32(last - at_reset) - baseline[j, alloc[j]])
    order = sorted(range(sim.J), key=lambda j: (received[j], -deficit[j], j))
    in_system = set(_in_system(sim))
    for rank, j in enumerate(order):
        if j not in in_system:
            continue
        if sim.jobs[j].num_gpu == 0:
            priority[j] = np.float32(sim.J - rank)
        elif alloc[j] >= 0:
            priority[j, alloc[j]] = np.float32(sim.J - rank)
    return priority, {"policy_model": alloc, "policy_share": baseline}


def _las_gpu_priority(sim: ReferenceSim) -> list:
    """las-gpu, least attained GPU-time (continuous 2D-LAS): the fewest GPU-seconds held so
    far first (a job that has not run yet has 0). CPU-only jobs hold no GPU, so they always
    come first."""
    return [-sim.attained_now(j)[1] for j in range(sim.J)]


def _tiresias_priority(sim: ReferenceSim) -> list:
    """tiresias, discretized 2D-LAS: queue q = how many thresholds the job's attained
    GPU-seconds reach (0 while promoted: it has started and waited, since its first start,
    at least knob times its attained seconds); -2 q, plus 1 for a running job (a queue's
    running jobs before its queued ones; then arrival order, the env's tie-break)."""
    cfg, t = sim.config, sim.time_s
    knob = np.float32(cfg.tiresias_promote_knob)
    out = []
    for j in range(sim.J):
        attained_s, attained_gpu_s = sim.attained_now(j)
        queue = sum(attained_gpu_s >= np.float32(b) for b in cfg.tiresias_thresholds_gpu_s)
        if knob > 0 and np.isfinite(sim.start_s[j]):
            waited_s = np.float32(np.float32(t - sim.start_s[j]) - attained_s)
            if waited_s >= np.float32(knob * attained_s):
                queue = 0
        out.append(np.float32(-2 * queue + sim._in_segment(j)))
    return out


def _srtf_priority(sim: ReferenceSim) -> list:
    """srtf, shortest remaining time first, from the oracle remaining work (reference-speed
    seconds, ``remaining_now``)."""
    return [-sim.remaining_now(j) for j in range(sim.J)]


def _helios_srtf_priority(sim: ReferenceSim) -> list:
    """helios-srtf, Helios's SRTF: the jobs in the system by (time left, running after queued,
    when it joined the queue or began running, preempted after arrived, index), where time
    left is the work left plus the restart cost still to pay (a running job in its cost: what
    it had left plus the rest of the cost; a queued job preempted before: its work left plus
    its cost); each taken, in that order, while its milli-GPUs fit what the cluster's total
    has left after the jobs taken before it. Priority 1 for a running
    job taken, -(its place) for a queued one, -inf for the rest."""
    t = sim.time_s
    running = {j for _, j in sim.running}

    def time_left(j):
        if j in running and t < sim.run_from_s[j]:
            return np.float32(sim.remaining_s[j] + np.float32(sim.run_from_s[j] - t))
        if j in running:
            return sim.remaining_now(j)
        return np.float32(sim.remaining_s[j] + (sim._restart_cost(j) if sim.preemptions[j] > 0 else np.float32(0)))

    def joined(j):  # when it joined the queue (arrival, or last preemption), or began running
        if j in running:
            return sim.seg_start_s[j]
        return sim.segments[j][-1][2] if sim.segments[j] else sim.jobs[j].arrival_s

    order = sorted(_in_system(sim), key=lambda j: (time_left(j), j in running, joined(j),
                                                   j not in running and bool(sim.segments[j]), j))
    left = sim.cluster_milli
    out = [np.float32(-np.inf)] * sim.J
    for place, j in enumerate(order):
        ask = sim.jobs[j].num_gpu * sim.jobs[j].gpu_milli
        if ask <= left:
            left -= ask
            out[j] = np.float32(1) if j in running else np.float32(-place)
    return out


def _qos_priority(sim: ReferenceSim) -> list:
    """priority, by priority class: 2 qos_class, plus 1 for a running job (a class's running
    jobs before its queued ones, so a queued job preempts running jobs of lower classes only;
    then arrival order, the env's tie-break)."""
    return [np.float32(2 * sim.jobs[j].qos_class + sim._in_segment(j)) for j in range(sim.J)]


ROUND_POLICIES = {
    "las": _las_priority,
    "las-perf": _las_perf_priority,
    "gavel-fifo": _gavel_fifo_priority,
    "fifo-perf": lambda sim: _gavel_fifo_priority(sim, lambda sim, _: _fifo_perf_allocate(sim)),
    "las-gpu": _las_gpu_priority,
    "tiresias": _tiresias_priority,
    "srtf": _srtf_priority,
    "helios-srtf": _helios_srtf_priority,
    "priority": _qos_priority,
}
