"""The heuristic schedulers, read directly from SPEC.md and docs/schedulers.md."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Callable

import numpy as np

from jaxsched.reference.config import BEST_FIT_CPU_MAX_MILLI, BEST_FIT_GPU_MAX_MILLI
from jaxsched.reference.resources import _is_fractional, _Job, _job_fits, _model_allowed
from jaxsched.types import GPU_MILLI, OUTCOME_PLACED

if TYPE_CHECKING:  # annotations only: sim.py imports this module
    from jaxsched.reference.sim import ReferenceSim


# ---------------------------------------------------------------------- heuristics
#
# SPEC.md "Heuristic schedulers" and docs/schedulers.md, read directly. A *node rule*
# scores one node for window job j: ``rule(sim, j, n) -> int`` (r&p: a tuple, compared in
# order), higher wins. Node-rule schedulers take the first window slot whose job fits some
# node and put it on the feasible node with the top score, ties to the lowest ``node_rank``.
# elasticflow and hops choose the window slot too (*window rules*, ``rule(sim) -> flat
# action``). Integer formulas are computed exactly; FGD's float32 arithmetic is done in
# float32, as the env does it.


def _leftover(sim: ReferenceSim, j: int, n: int) -> Fraction:
    """``sum_r w_r (free_r - req_r) / max_r`` over r in {CPU milli, total free GPU milli},
    w = 1/2, maxima 128,000 and 8,000 (SPEC.md, best-fit), as an exact fraction."""
    job = sim.jobs[j]
    cpu_left = sim.free_cpu[n] - job.cpu_milli
    gpu_left = sum(sim._free_gpus(n)) - job.num_gpu * job.gpu_milli
    return (Fraction(cpu_left, 2 * BEST_FIT_CPU_MAX_MILLI)
            + Fraction(gpu_left, 2 * BEST_FIT_GPU_MAX_MILLI))


def _first_fit_score(sim: ReferenceSim, j: int, n: int) -> int:
    """first-fit: the lowest-index node (no two nodes tie, so ranks never matter)."""
    return -n


def _best_fit_score(sim: ReferenceSim, j: int, n: int) -> int:
    """The FGD paper's BestFit node score ``int(100 * (1 - leftover))`` (SPEC.md).

    Exact rational arithmetic: in floating point a score that is exactly an integer can
    come out a hair below it and truncate to the integer beneath. The published min-max
    rescaling to 0-100 across feasible nodes is monotone, so it cannot change which node
    scores highest; it is skipped.
    """
    return int(100 * (1 - _leftover(sim, j, n)))


def _spread_score(sim: ReferenceSim, j: int, n: int) -> int:
    """spread: the opposite of best-fit, ``int(100 * leftover)`` (the most leftover wins)."""
    return int(100 * _leftover(sim, j, n))


def _consolidate_score(sim: ReferenceSim, j: int, n: int) -> tuple:
    """consolidate: (GPUs of j node n can hold, min(cap, num_gpu), for a job of >= 2 whole
    GPUs, else 0; then the BestFit score)."""
    held = min(sim._cap(j, n), sim.jobs[j].num_gpu) if sim.jobs[j].num_gpu >= 2 else 0
    return held, _best_fit_score(sim, j, n)


def _dot_product_score(sim: ReferenceSim, j: int, n: int) -> int:
    """DotProd: ``int(100 * (1 - dot / 2))`` (SPEC.md), the smallest dot product wins.

    dot = free CPU * CPU / 128,000^2 + total free GPU milli * total GPU milli / 8,000^2,
    the node's free resources taken before placing, exactly.
    """
    job = sim.jobs[j]
    dot = (Fraction(sim.free_cpu[n] * job.cpu_milli, BEST_FIT_CPU_MAX_MILLI ** 2)
           + Fraction(sum(sim._free_gpus(n)) * job.num_gpu * job.gpu_milli, BEST_FIT_GPU_MAX_MILLI ** 2))
    return int(100 * (1 - dot / 2))


def _gpu_packing_score(sim: ReferenceSim, j: int, n: int) -> int:
    """GpuPacking's tiers (SPEC.md); CPU-only jobs score 0 everywhere.

    1. a fractional job's tightest GPU with room is partly used (free < 1000):
       ``max(100 - (free * 100 // 1000) // 10, 50)``;
    2. otherwise, on a node with some used GPU: ``max(50 - wholly free GPUs taken, 33)``
       (a fractional job on a wholly free GPU takes one);
    3. every GPU of the node free (CPU use does not count): ``max(33 - n_gpus, n_gpus)``.
    """
    job = sim.jobs[j]
    if job.num_gpu == 0:
        return 0
    free = sim._free_gpus(n)
    if all(f == GPU_MILLI for f in free):
        return max(33 - len(free), len(free))
    if _is_fractional(job.num_gpu, job.gpu_milli):
        tightest = min(f for f in free if f >= job.gpu_milli)
        if tightest < GPU_MILLI:
            return max(100 - tightest * 100 // GPU_MILLI // 10, 50)
        return max(50 - 1, 33)
    return max(50 - job.num_gpu, 33)


# r&p's thresholds (docs/schedulers.md, "r&p").
R_AND_P_HIGH_END_SPEED = 1.0  # a node with GPUs at least this fast is high-end
R_AND_P_HIGH_DEMAND_GPUS = 2  # a job asking for at least this many GPUs is high-demand


def _reserving_packing_score(sim: ReferenceSim, j: int, n: int) -> tuple:
    """r&p, Reserving-and-Packing (docs/schedulers.md), compared as a tuple, in order:

    1. the node is in the job's pool: high-end nodes (GPUs with speed >= 1.0) for jobs of
       >= 2 GPUs, the other nodes (weaker GPUs, or none) for every other job;
    2. the gpu-packing score;
    3. the least allocated share of the node's GPUs, used milli / (1000 * GPUs), exactly
       (0 on a node without GPUs).
    """
    job = sim.jobs[j]
    gpus = sim._free_gpus(n)
    high_end = len(gpus) > 0 and sim.speed[n] >= R_AND_P_HIGH_END_SPEED
    in_pool = high_end == (job.num_gpu >= R_AND_P_HIGH_DEMAND_GPUS)
    share = Fraction(GPU_MILLI * len(gpus) - sum(gpus), GPU_MILLI * len(gpus)) if gpus else Fraction(0)
    return (in_pool, _gpu_packing_score(sim, j, n), -share)


def _gpu_class(job: _Job):
    """gpu-clustering's class of a job: "share" (fractional), k (k whole GPUs), None (CPU-only)."""
    if job.num_gpu == 0:
        return None
    return "share" if _is_fractional(job.num_gpu, job.gpu_milli) else job.num_gpu


def _classes_on_node(sim: ReferenceSim, n: int) -> set:
    """Classes of the GPU jobs on node n now, from the sim's own records: the running jobs
    there (dynamic), or every job placed there (static: placed jobs never leave)."""
    if sim.config.mode == "static":
        held = [j for j in range(sim.J) if sim.outcome[j] == OUTCOME_PLACED]
    else:
        held = [j for _, j in sim.running]
    return {_gpu_class(sim.jobs[j]) for j in held
            if n in [i for i, *_ in sim.parts[j]] and sim.jobs[j].num_gpu > 0}


def _gpu_clustering_score(sim: ReferenceSim, j: int, n: int) -> int:
    """GpuClustering with exact classes (SPEC.md; docs/schedulers.md).

    ``25 * (8000 - free GPU milli) // 8000`` plus 75 if the node hosts only this job's
    class, 50 if this class among others, 25 if no GPU job, 0 if only other classes.
    CPU-only jobs score 0 everywhere.
    """
    mine = _gpu_class(sim.jobs[j])
    if mine is None:
        return 0
    hosted = _classes_on_node(sim, n)
    if mine in hosted:
        bonus = 75 if hosted == {mine} else 50
    else:
        bonus = 0 if hosted else 25
    used = 25 * (BEST_FIT_GPU_MAX_MILLI - sum(sim._free_gpus(n))) // BEST_FIT_GPU_MAX_MILLI
    return used + bonus


def _class_frags(free_gpus: list[int], free_cpu: int, gpu_model: int, classes: list[tuple]) -> list[int]:
    """[M] F_n(m) in milli per class (semantics.md, last section), exact integers."""
    idle = sum(free_gpus)
    out = []
    for cpu_m, gpu_milli_m, num_gpu_m, mask_m, _ in classes:
        usable = (num_gpu_m > 0 and _model_allowed(mask_m, gpu_model) and free_cpu >= cpu_m
                  and sum(f >= gpu_milli_m for f in free_gpus) >= num_gpu_m)
        out.append(sum(f for f in free_gpus if f < gpu_milli_m) if usable else idle)
    return out


def _tree_sum_f32(values: list) -> np.float32:
    """float32 sum by a fixed pairwise tree, zero-padded to a power of two:
    ((v0 + v1) + (v2 + v3)) + ... The env and the fgd policy sum over classes this way."""
    values = [np.float32(v) for v in values]
    values += [np.float32(0)] * ((1 << max(len(values) - 1, 0).bit_length()) - len(values))
    while len(values) > 1:
        values = [values[i] + values[i + 1] for i in range(0, len(values), 2)]
    return values[0]


def _fgd_int_score(delta: np.float32) -> int:
    """FGD's published score ``int(100 * sigmoid(delta / 1000))``, float32 as XLA computes it.

    XLA turns the division by a constant into ``delta * float32(0.001)``; its float32 exp is
    correctly rounded near 0, where a score flips between 49 and 50 (NumPy's float32 exp is
    not), so exp is taken in float64 and rounded; then ``1 / (1 + e)``, times 100, truncated.
    """
    x = np.float32(delta) * np.float32(0.001)
    e = np.float32(np.exp(-np.float64(x)))
    return int(np.float32(100) * (np.float32(1) / (np.float32(1) + e)))


def _fgd_score_after(before: list[int], after: list[int], classes: list[tuple]) -> int:
    """The FGD score of going from per-class F_n(m) ``before`` to ``after``: delta = tree sum
    of float32(before_m - after_m) * prob_m (exact integers first, so no change scores 50)."""
    return _fgd_int_score(_tree_sum_f32([np.float32(b - a) * np.float32(c[4])
                                         for b, a, c in zip(before, after, classes)]))


def _use_gpu(free_gpus: list[int], i: int, milli: int) -> list[int]:
    """``free_gpus`` with ``milli`` taken from the i-th GPU."""
    return [f - milli if g == i else f for g, f in enumerate(free_gpus)]


def _fgd_score(sim: ReferenceSim, j: int, n: int) -> int:
    """FGD's node score (SPEC.md): ``_fgd_int_score(F_n before - F_n after)`` placing j on n.

    As the fgd policy computes it: delta = tree sum of float32(before_m - after_m) * prob_m
    over classes, from exact per-class integers, so an unchanged F_n scores exactly 50. A
    fractional job tries every GPU with room and the node keeps its best GPU's score; a
    whole-GPU job takes the first wholly free GPUs; a CPU-only job only CPU.
    """
    job = sim.jobs[j]
    free, model = sim._free_gpus(n), sim.gpu_model[n]
    before = _class_frags(free, sim.free_cpu[n], model, sim.classes)
    cpu_after = sim.free_cpu[n] - job.cpu_milli

    def score(free_after):
        return _fgd_score_after(before, _class_frags(free_after, cpu_after, model, sim.classes), sim.classes)

    if _is_fractional(job.num_gpu, job.gpu_milli):
        return max(score(_use_gpu(free, i, job.gpu_milli)) for i, f in enumerate(free) if f >= job.gpu_milli)
    taken = [i for i, f in enumerate(free) if f == GPU_MILLI][: job.num_gpu]
    return score([0 if i in taken else f for i, f in enumerate(free)])


def _fgd_weighted_drop(sim: ReferenceSim, j: int, n: int) -> int:
    """How much placing j on n lowers sum_m weight_m F_n(m), exact: on the GPU with the
    largest drop for a fractional job (there the node's FGD score is its best GPU's), the first
    wholly free GPUs for a whole-GPU job, CPU only for a CPU-only one."""
    job = sim.jobs[j]
    free, model = sim._free_gpus(n), sim.gpu_model[n]
    cpu_after = sim.free_cpu[n] - job.cpu_milli

    def weighted(free_gpus, cpu):
        return sum(w * f for w, f in zip(sim.class_weights, _class_frags(free_gpus, cpu, model, sim.classes)))

    before = weighted(free, sim.free_cpu[n])
    if _is_fractional(job.num_gpu, job.gpu_milli):
        return max(before - weighted(_use_gpu(free, i, job.gpu_milli), cpu_after)
                   for i, f in enumerate(free) if f >= job.gpu_milli)
    taken = [i for i, f in enumerate(free) if f == GPU_MILLI][: job.num_gpu]
    return before - weighted([0 if i in taken else f for i, f in enumerate(free)], cpu_after)


def _fgd_gpu(sim: ReferenceSim, j: int, n: int, room: list[int]) -> int:
    """GPU rule "fgd": the GPU of ``room`` (indices with room for fractional job j on node n)
    with the top FGD score, computed exactly as ``_fgd_score`` scores a node; ties: the
    lowest index."""
    job = sim.jobs[j]
    free, model = sim._free_gpus(n), sim.gpu_model[n]
    before = _class_frags(free, sim.free_cpu[n], model, sim.classes)
    cpu_after = sim.free_cpu[n] - job.cpu_milli

    def score(g):
        free_after = _use_gpu(free, sim.gpus_of[n].index(g), job.gpu_milli)
        return _fgd_score_after(before, _class_frags(free_after, cpu_after, model, sim.classes), sim.classes)

    return max(room, key=lambda g: (score(g), -g))


def _buddy_gpus(existing: list[int], whole_free: list[int], k: int) -> list[int]:
    """GPU rule "buddy" for a job of k whole GPUs (docs/schedulers.md, elasticflow).

    b = the smallest power of two >= k; aligned blocks are GPU index ranges [i*b, (i+1)*b)
    of existing GPUs. The job takes the k lowest-index wholly free GPUs of the lowest-index
    block that has k of them; if none has, the node's k lowest-index wholly free GPUs.
    """
    b = 1 << (k - 1).bit_length()
    for start in range(0, existing[-1] + 1, b):
        block = range(start, start + b)
        if all(g in existing for g in block):
            free_in_block = [g for g in whole_free if g in block]
            if len(free_in_block) >= k:
                return free_in_block[:k]
    return whole_free[:k]


def _top_node(sim: ReferenceSim, nodes: list[int], score: Callable[[int], int]) -> int:
    """The node of ``nodes`` with the highest ``score(n)``; ties: the lowest ``node_rank``."""
    return max(nodes, key=lambda n: (score(n), -sim.node_rank[n]))


def _runnable_nodes(sim: ReferenceSim, j: int) -> list[int]:
    """Nodes job j can run on in the *empty* cluster (docs/schedulers.md, notation): alone,
    or, when it can run alone nowhere (a gang), the nodes that can hold a part of one GPU."""
    job = sim.jobs[j]
    alone = [n for n in range(sim.N) if sim.node_valid[n] and _job_fits(
        job, sim.gpu_model[n], sim.cpu_cap[n], sim.mem_cap[n], [GPU_MILLI] * len(sim.gpus_of[n]))]
    if alone or job.num_gpu < 2:
        return alone
    one_gpu = job._replace(num_gpu=1, cpu_milli=-(-job.cpu_milli // job.num_gpu), mem_mib=-(-job.mem_mib // job.num_gpu))
    return [n for n in range(sim.N) if sim.node_valid[n] and _job_fits(
        one_gpu, sim.gpu_model[n], sim.cpu_cap[n], sim.mem_cap[n], [GPU_MILLI] * len(sim.gpus_of[n]))]


def _finish_s(sim: ReferenceSim, j: int, n: int) -> np.float32:
    """``t + run_s(j, n)``: when job j would end if placed on node n now (float32, as ends are),
    estimated as the elasticflow policy does, with the cluster's ``speed`` (job type 0's): the
    policies do not read job types (semantics.md, "Job types")."""
    job = sim.jobs[j]
    if job.num_gpu > 0:
        return np.float32(sim.time_s + job.work_s / sim.speed[n])
    return np.float32(sim.time_s + job.work_s)


def _elasticflow_action(sim: ReferenceSim) -> int:
    """elasticflow (docs/schedulers.md), on the EDF-ordered window.

    1. Reject the first *hopeless* slot: its job would miss its deadline on every node it
       can run on. 2. Else place the first slot that fits some node where it meets its
    deadline, on such a node with the top BestFit score (ties: rank). 3. Else wait.
    """
    mask, window = sim.place_mask(), sim.window()
    for k, j in enumerate(window):
        if all(_finish_s(sim, j, n) > sim.jobs[j].deadline_s for n in _runnable_nodes(sim, j)):
            return sim.K * sim.N + k
    for k, j in enumerate(window):
        on_time = [n for n in range(sim.N) if mask[k, n] and _finish_s(sim, j, n) <= sim.jobs[j].deadline_s]
        if on_time:
            return k * sim.N + _top_node(sim, on_time, lambda n: _best_fit_score(sim, j, n))
    return sim.wait_action()


def _tightest_partly_used(sim: ReferenceSim, n: int, gpu_milli: int) -> int | None:
    """Least free milli over node n's partly used GPUs (free < 1000) with room for
    ``gpu_milli``; None if there is no such GPU."""
    return min((f for f in sim._free_gpus(n) if gpu_milli <= f < GPU_MILLI), default=None)


def _latency_ratio(sim: ReferenceSim, j: int) -> np.float32:
    """hops' ``(wait + work) / max(work, 1)`` with wait = t - arrival (float32, in that order)."""
    job = sim.jobs[j]
    wait_s = np.float32(sim.time_s - job.arrival_s)
    return np.float32((wait_s + job.work_s) / max(job.work_s, np.float32(1)))


def _speed_score(sim: ReferenceSim, j: int, n: int) -> int:
    """hops' ``floor(100 * speed[n] / best_speed)`` (float32 product, then division) for GPU
    jobs, best_speed the top speed over the nodes j can run on; 0 for CPU-only jobs."""
    if sim.jobs[j].num_gpu == 0:
        return 0
    best_speed = max(sim.speed[m] for m in _runnable_nodes(sim, j))
    return int(np.floor(np.float32(100) * sim.speed[n] / best_speed))


def _hops_action(sim: ReferenceSim) -> int:
    """hops (docs/schedulers.md), among the window slots whose job fits somewhere.

    1. Fillers first: fractional jobs that fit a node on a partly used GPU. The smallest
       ``gpu_milli`` (ties: the earlier slot) goes to the node whose tightest such GPU has
       the least free milli (ties: rank).
    2. Else the largest latency ratio (ties: the earlier slot), on the node with the top
       ``(K - q) * speed_score + q * best_fit_score``, q = min(queue length, K) (ties: rank).
    3. Else (nothing fits) wait.
    """
    mask, window = sim.place_mask(), sim.window()
    fitting = [k for k in range(len(window)) if mask[k].any()]
    if not fitting:
        return sim.wait_action()
    fillers = {}  # slot -> nodes where its job fits on a partly used GPU
    for k in fitting:
        job = sim.jobs[window[k]]
        if _is_fractional(job.num_gpu, job.gpu_milli):
            nodes = [n for n in range(sim.N)
                     if mask[k, n] and _tightest_partly_used(sim, n, job.gpu_milli) is not None]
            if nodes:
                fillers[k] = nodes
    if fillers:
        k = min(fillers, key=lambda k: (sim.jobs[window[k]].gpu_milli, k))
        milli = sim.jobs[window[k]].gpu_milli
        return k * sim.N + _top_node(sim, fillers[k], lambda n: -_tightest_partly_used(sim, n, milli))
    k = max(fitting, key=lambda k: (_latency_ratio(sim, window[k]), -k))
    j, q = window[k], min(len(sim.queue), sim.K)
    feasible = [n for n in range(sim.N) if mask[k, n]]
    return k * sim.N + _top_node(
        sim, feasible, lambda n: (sim.K - q) * _speed_score(sim, j, n) + q * _best_fit_score(sim, j, n))


def _fgd_window_action(sim: ReferenceSim) -> int:
    """fgd-window (docs/schedulers.md): every window job that fits goes, in thought, to its
    FGD node (``_fgd_score``, ties: rank); the job whose placement there removes the most
    fragmentation per milli of GPU it takes is placed, ties to the earlier slot. The value,
    float32 as the policy computes it: (float32(weighted drop) * (1 / total weight)) /
    max(num_gpu * gpu_milli, 1)."""
    mask, window = sim.place_mask(), sim.window()
    inv_total = np.float32(1) / np.float32(max(sum(sim.class_weights), 1))
    best = None  # (value, slot, node)
    for k, j in enumerate(window):
        feasible = [n for n in range(sim.N) if mask[k, n]]
        if not feasible:
            continue
        n = _top_node(sim, feasible, lambda n: _fgd_score(sim, j, n))
        job = sim.jobs[j]
        value = (np.float32(_fgd_weighted_drop(sim, j, n)) * inv_total) / np.float32(max(job.num_gpu * job.gpu_milli, 1))
        if best is None or value > best[0]:
            best = (value, k, n)
    return sim.wait_action() if best is None else best[1] * sim.N + best[2]


NODE_RULES = {
    "first-fit": _first_fit_score,
    "best-fit": _best_fit_score,
    "sjf": _best_fit_score,  # shortest-first is the queue order (RefConfig.queue_order)
    "fifo-strict": _best_fit_score,  # a window of one, no backfilling (the registry's env config)
    "sjf-strict": _best_fit_score,
    "spread": _spread_score,
    "consolidate": _consolidate_score,
    "dot-product": _dot_product_score,
    "gpu-packing": _gpu_packing_score,
    "r&p": _reserving_packing_score,
    "pack-resched": _gpu_packing_score,  # plus rescheduling passes (RefConfig.resched_*)
    "gpu-clustering": _gpu_clustering_score,
    "fgd": _fgd_score,
}
WINDOW_RULES = {
    "elasticflow": _elasticflow_action,
    "hops": _hops_action,
    "fgd-window": _fgd_window_action,
}




def heuristic_action(sim: ReferenceSim, policy: str) -> int:
    """Flat action of the deterministic heuristic scheduler ``policy`` (SPEC.md).

    A node rule (``NODE_RULES``) takes the first window slot (queue order) whose job fits
    some node and puts it on the feasible node with the top score, ties to the lowest
    ``node_rank``; it waits when no job fits anywhere. A window rule (``WINDOW_RULES``)
    chooses the slot and the action itself. The run's ``RefConfig`` must carry the
    scheduler's GPU rule and queue order (the registry's ``env_config``).
    """
    if policy in WINDOW_RULES:
        return WINDOW_RULES[policy](sim)
    if policy not in NODE_RULES:
        raise ValueError(f"unknown policy {policy!r}; known: {sorted(NODE_RULES | WINDOW_RULES)}")
    mask = sim.place_mask()
    slots = [k for k in range(sim.K) if mask[k].any()]
    if not slots:
        return sim.wait_action()
    k = slots[0]
    j = sim.window()[k]
    feasible = [n for n in range(sim.N) if mask[k, n]]
    return k * sim.N + _top_node(sim, feasible, lambda n: NODE_RULES[policy](sim, j, n))
