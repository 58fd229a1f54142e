"""A plain-Python event simulator: the oracle the JAX simulator is tested against.

It implements ``docs/semantics.md`` directly, one event and one job at a time, with
ordinary lists and a heap. It shares no code with ``jaxsched/sim`` or
``jaxsched/policies`` on purpose: a bug copied into both would make the differential tests
pass. Speed does not matter here; being obviously right does.

Times are float32 exactly as the contract says (``float32(t) + float32(work) /
float32(speed)``, the speed of the job's type on the node), so per-job node, GPUs, start and end match the JAX side bit for bit.
Time-weighted integrals are accumulated in float64; the JAX side uses float32, so those
metrics are compared with a relative tolerance.

Typical use::

    sim = ReferenceSim(cluster, jobs, frag_classes, RefConfig(window=4))
    while not sim.done:
        sim.step(heuristic_action(sim, "best-fit"))
    out = sim.results()

With rounds (``RefConfig(round_s=...)``, semantics.md "Preemption and rounds") a round
policy gives priorities instead: ``sim.step_round(ROUND_POLICIES["las"](sim))``.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
from fractions import Fraction
from typing import Callable, NamedTuple

import numpy as np

from jaxsched import actions, max_min_lp
from jaxsched.cluster import MODEL_NAMES
from jaxsched.types import GPU_MILLI, OUTCOME_NONE, OUTCOME_PLACED, OUTCOME_REJECTED

# Fixed maxima of the published BestFit score (SPEC.md, best-fit).
BEST_FIT_CPU_MAX_MILLI = 128000
BEST_FIT_GPU_MAX_MILLI = 8000


@dataclasses.dataclass(frozen=True)
class RefConfig:
    """Environment settings (semantics.md, Inputs). Tie-break ranks are passed separately."""

    mode: str = "dynamic"  # "dynamic" | "static"
    window: int = 8  # K: queued jobs shown to the policy
    backfill: bool = True  # the window: the first K queued jobs that fit some node (else the first K)
    reserve_after_s: float = 3600.0  # the starvation guard (+inf: none; see _reserve)
    warmup_jobs: int = 0  # the measured jobs: warmup_jobs .. warmup_jobs + measured_jobs - 1
    measured_jobs: int = 0  # (0: to the last job)
    queue_capacity: int = 1024  # Q
    running_capacity: int = 1024  # R (dynamic mode only, see ReferenceSim)
    queue_order: str = "fifo"  # "fifo" | "sjf" | "edf"
    gpu_rule: str = "best-fit"  # "best-fit" | "first-fit" | "fgd" | "buddy" (see _choose_gpus)
    # Rescheduling (docs/schedulers.md): a pass every resched_interval_s (0 = off).
    resched_interval_s: float = 0.0
    resched_max_moves: int = 5
    resched_util_threshold: float = 0.5
    resched_target: str = "alloc"  # "alloc" | "fgd": where a moved job goes (see _migrate_one)
    migration_pause_s: float = 60.0
    track_frag: bool = True  # off: frag_node stays 0 (like EnvConfig.track_frag)
    # Gang jobs (semantics.md, "Gang jobs"): a job of k >= 2 whole GPUs may span up to
    # max_span nodes (1: never), its nodes chosen by gang_rule; on more than one node it
    # runs at spread_penalty times its speed; with gang_one_model its nodes are all of its
    # anchor's GPU model.
    max_span: int = 1
    gang_rule: str = "consolidate"  # "consolidate" | "spread"
    spread_penalty: float = 1.0
    gang_one_model: bool = False
    # Preemption and rounds (semantics.md, "Preemption and rounds"): a round every round_s
    # seconds (0: none, decisions are event-driven as before), where a round policy's
    # priorities decide which jobs run; a job restarting after a preemption first pays
    # restart_overhead_s[i] wall seconds, i = how many of the thresholds restart_above_gpus
    # its GPU count exceeds (one cost and no threshold: a constant; a number is read as one).
    round_s: float = 0.0
    restart_overhead_s: tuple = (0.0,)
    restart_above_gpus: tuple = ()
    # Rounds that end when their last running job does, at most round_s (Gavel's; with no job
    # running, at the next arrival): semantics.md, "The round clock".
    round_ends_early: bool = False
    # Gavel's allocation resets (semantics.md, "Allocation resets"): a round is a reset when a
    # job arrived or finished since the last one and round_reset_s has passed (0: none).
    round_reset_s: float = 0.0
    # With per-model priorities, the round's (job, model) pairs model by model in this order of
    # GPU model names, then the unnamed models by id (empty: by priority alone): semantics.md,
    # "Per-model priorities".
    round_model_order: tuple = ()
    # The tiresias round policy's settings (semantics.md, "Round policies"): queue thresholds
    # in attained GPU-seconds (m thresholds, m + 1 queues) and the promotion knob (0: off).
    tiresias_thresholds_gpu_s: tuple = (3250.0, 7200.0)
    tiresias_promote_knob: float = 0.0

    @classmethod
    def like(cls, config) -> "RefConfig":
        """The RefConfig with the same-named settings as ``config`` (e.g. an env's
        ``EnvConfig``, read by attribute so this module imports nothing from the env).
        The settings of rounds and preemption keep their defaults (off) when ``config`` lacks
        them (a config of an older env, or any object without them)."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)
                      if f.name not in ROUND_SETTINGS or hasattr(config, f.name)})

    def __post_init__(self):
        if isinstance(self.restart_overhead_s, (int, float)):  # a constant cost
            object.__setattr__(self, "restart_overhead_s", (float(self.restart_overhead_s),))
        object.__setattr__(self, "restart_overhead_s", tuple(self.restart_overhead_s))
        object.__setattr__(self, "restart_above_gpus", tuple(self.restart_above_gpus))
        object.__setattr__(self, "tiresias_thresholds_gpu_s", tuple(self.tiresias_thresholds_gpu_s))
        object.__setattr__(self, "round_model_order", tuple(self.round_model_order))
        thresholds = self.tiresias_thresholds_gpu_s
        costs, above = self.restart_overhead_s, self.restart_above_gpus
        checks = (
            (self.mode in ("dynamic", "static"), f"mode {self.mode!r}"),
            (self.queue_order in ("fifo", "sjf", "edf"), f"queue_order {self.queue_order!r}"),
            (self.gpu_rule in ("best-fit", "first-fit", "fgd", "buddy"), f"gpu_rule {self.gpu_rule!r}"),
            (self.resched_target in ("alloc", "fgd"), f"resched_target {self.resched_target!r}"),
            (self.window >= 1, f"window {self.window}"),
            (self.queue_capacity >= 1, f"queue_capacity {self.queue_capacity}"),
            (self.running_capacity >= 1, f"running_capacity {self.running_capacity}"),
            (self.max_span >= 1, f"max_span {self.max_span}"),
            (self.max_span == 1 or self.mode == "dynamic", "max_span > 1 in static mode"),
            (self.gang_rule in ("consolidate", "spread"), f"gang_rule {self.gang_rule!r}"),
            (0 < self.spread_penalty <= 1, f"spread_penalty {self.spread_penalty}"),
            (0 <= self.round_s < math.inf, f"round_s {self.round_s} (a finite number >= 0; 0 = no rounds)"),
            (self.round_s == 0 or self.mode == "dynamic", "round_s > 0 in static mode"),
            (self.round_s == 0 or self.resched_interval_s == 0,
             "round_s > 0 with resched_interval_s > 0 (rounds and rescheduling passes do not mix)"),
            (len(costs) >= 1 and all(0 <= c < math.inf for c in costs),
             f"restart_overhead_s {costs} (finite numbers >= 0)"),
            (len(above) == len(costs) - 1 and all(b >= 0 for b in above)
             and all(a < b for a, b in zip(above, above[1:])),
             f"restart_above_gpus {above} (one threshold fewer than restart_overhead_s, increasing, >= 0)"),
            (all(0 < b < math.inf for b in thresholds) and all(a < b for a, b in zip(thresholds, thresholds[1:])),
             f"tiresias_thresholds_gpu_s {thresholds} (strictly increasing, finite, > 0)"),
            (0 <= self.round_reset_s < math.inf and (self.round_reset_s == 0 or self.round_s > 0),
             f"round_reset_s {self.round_reset_s} (a finite number >= 0; resets need round_s > 0)"),
            (0 <= self.tiresias_promote_knob < math.inf,
             f"tiresias_promote_knob {self.tiresias_promote_knob} (a finite number >= 0; 0 = off)"),
        )
        for ok, what in checks:
            if not ok:
                raise ValueError(f"RefConfig: bad {what}")


# RefConfig's settings of rounds (RefConfig.like leaves them off when a config lacks them).
ROUND_SETTINGS = ("round_s", "restart_overhead_s", "restart_above_gpus", "tiresias_thresholds_gpu_s",
                  "tiresias_promote_knob", "round_reset_s", "round_ends_early", "round_model_order")


class _Job(NamedTuple):
    """One job's request, as Python scalars (times already float32)."""

    arrival_s: np.float32
    work_s: np.float32
    num_gpu: int
    gpu_milli: int
    cpu_milli: int
    mem_mib: int
    model_mask: int
    deadline_s: np.float32
    job_type: int  # column of the cluster's type_speed
    qos_class: int  # priority class, higher = more important (the priority round policy)


def _model_allowed(model_mask: int, gpu_model: int) -> bool:
    # Python ints shift arithmetically, so ALL_MODELS (-1) allows every model.
    return (model_mask >> gpu_model) & 1 == 1


def _is_fractional(num_gpu: int, gpu_milli: int) -> bool:
    return num_gpu == 1 and gpu_milli < GPU_MILLI


def _job_fits(job: _Job, gpu_model: int, free_cpu: int, free_mem: int, free_gpus: list[int]) -> bool:
    """Resource fit of ``job`` on one valid node with the given free resources.

    ``free_gpus`` holds the free milli of the node's existing GPUs only.
    """
    if free_cpu < job.cpu_milli or free_mem < job.mem_mib:
        return False
    if job.num_gpu == 0:
        return True
    if not _model_allowed(job.model_mask, gpu_model):
        return False
    if _is_fractional(job.num_gpu, job.gpu_milli):
        return any(free >= job.gpu_milli for free in free_gpus)
    return sum(free == GPU_MILLI for free in free_gpus) >= job.num_gpu


def node_fragmentation(free_gpus: list[int], free_cpu: int, gpu_model: int, classes: list[tuple]) -> float:
    """FGD fragmentation F_n of one node, in milli-GPU (semantics.md, last section).

    ``classes`` holds ``(cpu_milli, gpu_milli, num_gpu, model_mask, prob)`` tuples.
    A class that cannot use the node's GPUs at all (CPU-only, wrong model, too little CPU
    or too few GPUs with room) sees every idle milli as fragmented.
    """
    idle_milli = sum(free_gpus)
    frag = 0.0
    for cpu_m, gpu_milli_m, num_gpu_m, mask_m, prob_m in classes:
        usable = (
            num_gpu_m > 0
            and _model_allowed(mask_m, gpu_model)
            and free_cpu >= cpu_m
            and sum(free >= gpu_milli_m for free in free_gpus) >= num_gpu_m
        )
        if usable:
            frag_m = sum(free for free in free_gpus if free < gpu_milli_m)
        else:
            frag_m = idle_milli
        frag += prob_m * frag_m
    return frag


class ReferenceSim:
    """One episode of the scheduling simulator, stepped by flat actions.

    Public state (read it, don't write it): ``time_s`` (float32 clock), ``queue`` (job
    indices in queue order), ``free_milli`` ([N][G] ints, 0 for missing GPUs),
    ``free_cpu``, ``free_mem``, ``frag_node`` ([N] floats), ``done``.

    In static mode the running-set capacity R does not apply: placed jobs never leave,
    so there is no set to bound (``running_full`` stays 0).
    """

    def __init__(self, cluster, jobs, frag_classes, config: RefConfig, node_rank=None):
        """Build the episode and ``advance`` to its first decision point (or to done)."""
        self.config = config
        self.K = config.window

        # --- cluster (host copies; padding nodes are kept so indices match) ---
        self.node_valid = [bool(v) for v in np.asarray(cluster.valid)]
        self.N = len(self.node_valid)
        gpu_exists = np.asarray(cluster.gpu_exists, bool).reshape(self.N, -1)
        self.G = gpu_exists.shape[1]
        self.gpu_model = [int(m) for m in np.asarray(cluster.gpu_model)]
        self.speed = [np.float32(s) for s in np.asarray(cluster.speed, np.float32)]  # job type 0's
        # type_speed[n][t]: the speed of a job of type t on node n (semantics.md, "Job types").
        self.type_speed = [[np.float32(s) for s in row]
                           for row in np.asarray(cluster.type_speed, np.float32).reshape(self.N, -1)]
        self.T = len(self.type_speed[0]) if self.N else 1
        self.cpu_cap = [int(c) for c in np.asarray(cluster.cpu_milli)]
        self.mem_cap = [int(m) for m in np.asarray(cluster.mem_mib)]
        # Existing GPU indices per node; padding nodes hold nothing.
        self.gpus_of = [
            [g for g in range(self.G) if gpu_exists[n, g]] if self.node_valid[n] else []
            for n in range(self.N)
        ]
        self.cluster_milli = GPU_MILLI * sum(len(gs) for gs in self.gpus_of)
        self.node_rank = list(range(self.N)) if node_rank is None else [int(r) for r in np.asarray(node_rank)]
        if len(self.node_rank) != self.N:
            raise ValueError(f"node_rank has {len(self.node_rank)} entries, cluster has {self.N} nodes")

        # --- jobs ---
        valid = np.asarray(jobs.valid, bool)
        self.J = len(valid)
        self.J_valid = int(valid.sum())
        if not valid[: self.J_valid].all():
            raise ValueError("valid jobs must come first (padding at the end)")
        cols = {
            name: np.asarray(getattr(jobs, name))
            for name in ("arrival_s", "work_s", "num_gpu", "gpu_milli", "cpu_milli", "mem_mib",
                         "model_mask", "deadline_s", "job_type", "qos_class")
        }
        self.jobs = [
            _Job(
                arrival_s=np.float32(cols["arrival_s"][j]),
                work_s=np.float32(cols["work_s"][j]),
                num_gpu=int(cols["num_gpu"][j]),
                gpu_milli=int(cols["gpu_milli"][j]),
                cpu_milli=int(cols["cpu_milli"][j]),
                mem_mib=int(cols["mem_mib"][j]),
                model_mask=int(cols["model_mask"][j]),
                deadline_s=np.float32(cols["deadline_s"][j]),
                job_type=int(cols["job_type"][j]),
                qos_class=int(cols["qos_class"][j]),
            )
            for j in range(self.J)
        ]
        for j in range(self.J_valid):
            job = self.jobs[j]
            if job.num_gpu >= 2 and job.gpu_milli != GPU_MILLI:
                raise ValueError(f"job {j}: num_gpu={job.num_gpu} needs gpu_milli=1000, got {job.gpu_milli}")
            if j > 0 and job.arrival_s < self.jobs[j - 1].arrival_s:
                raise ValueError(f"job {j}: jobs must be sorted by arrival_s")
            if not 0 <= job.job_type < self.T:
                raise ValueError(f"job {j}: job_type {job.job_type} is not one of the cluster's {self.T} types")

        # --- FGD classes (prob read as float32, then used in float64 sums) ---
        self.classes = [
            (int(c), int(gm), int(ng), int(mm), float(np.float32(p)))
            for c, gm, ng, mm, p in zip(
                np.asarray(frag_classes.cpu_milli), np.asarray(frag_classes.gpu_milli),
                np.asarray(frag_classes.num_gpu), np.asarray(frag_classes.model_mask),
                np.asarray(frag_classes.prob, np.float32),
            )
        ]
        self.class_weights = [int(w) for w in np.asarray(frag_classes.weight)]  # exact sum_m w_m F_n(m)

        # --- mutable state ---
        self.free_milli = [[GPU_MILLI if g in self.gpus_of[n] else 0 for g in range(self.G)]
                           for n in range(self.N)]
        self.free_cpu = [self.cpu_cap[n] if self.node_valid[n] else 0 for n in range(self.N)]
        self.free_mem = [self.mem_cap[n] if self.node_valid[n] else 0 for n in range(self.N)]
        self.resv_job = -1  # the job holding the reservation, and its node (-1: none)
        self.resv_node = -1
        # A job is unschedulable iff it fits no node of the empty cluster (decided once).
        self.unschedulable = [
            not any(self._fits(j, n) for n in range(self.N)) for j in range(self.J_valid)
        ]
        self.frag_node = [self._node_frag(n) for n in range(self.N)]

        self.t0_s = self.jobs[0].arrival_s if self.J_valid > 0 else np.float32(0.0)
        self.time_s = np.float32(self.t0_s)
        # The measured jobs and the measurement interval [measure_from_s, measure_to_s].
        self.measure_first = config.warmup_jobs
        last = self.J_valid - 1
        if config.measured_jobs:
            last = min(last, config.warmup_jobs + config.measured_jobs - 1)
        if self.measure_first <= last:
            self.measure_last = last
            self.measure_from_s = self.jobs[self.measure_first].arrival_s
            self.measure_to_s = self.jobs[last].arrival_s
        else:  # no measured job: an empty interval, and the episode runs to its end
            self.measure_last = int(np.iinfo(np.int32).max)
            self.measure_from_s = self.measure_to_s = np.float32(self.t0_s)
        self.measure_open = 0  # measured jobs queued or running
        self.next_arrival = 0  # p: jobs < p have arrived
        self.queue: list[int] = []  # job indices, sorted by (key, index)
        self.queue_keys: list = []  # the discipline's key of each queued job, same order
        self.running: list[tuple] = []  # heap of (end_s, job): smallest end, then index
        self.done = False
        interval = np.float32(config.resched_interval_s)
        self.next_resched_s = np.float32(self.time_s + interval) if interval > 0 else np.float32(np.inf)
        # Rounds: the first at t0, then every round_s (float32 sums); round_due: a round's
        # event was processed at this instant and waits for its priorities (step_round).
        self.next_round_s = np.float32(self.time_s) if config.round_s > 0 else np.float32(np.inf)
        self.round_due = False
        # Allocation resets: the last one, whether a job arrived or finished since, whether the
        # due round is one, and each job's attained_s at the last one.
        self.last_reset_s = np.float32(-np.inf)
        self.jobs_changed = False
        self.reset_due = False
        self.attained_at_reset_s = [np.float32(0)] * self.J
        self.attained_model_at_reset_s = [[np.float32(0)] * len(MODEL_NAMES) for _ in range(self.J)]

        self.outcome = [OUTCOME_NONE] * self.J
        self.node = [-1] * self.J
        self.gpu_bits = [0] * self.J
        # Every running (or static: placed) job's parts, [(node, gpus, cpu, mem)], the anchor
        # first: one part unless it is a gang (semantics.md, "Gang jobs").
        self.parts: list[list[tuple]] = [[] for _ in range(self.J)]
        # The records of a gang's other parts (nodes, GPU bits), in its list order.
        self.span_node = [[-1] * (config.max_span - 1) for _ in range(self.J)]
        self.span_bits = [[0] * (config.max_span - 1) for _ in range(self.J)]
        self.start_s = [np.float32(np.inf)] * self.J  # the first start
        self.end_s = [np.float32(np.inf)] * self.J  # the end of the job's current (or last) run
        # Preemption (semantics.md, "Preemption and rounds"): a job runs in segments; the
        # current one began at seg_start_s, does work from run_from_s on (after its restart
        # cost seg_cost_s) at seg_speed, and remaining_s (reference-speed seconds, float32)
        # is the work left when it began. Closed segments: (start, run_from, stop, speed).
        self.remaining_s = [job.work_s for job in self.jobs]
        self.seg_start_s = [np.float32(np.inf)] * self.J
        self.run_from_s = [np.float32(np.inf)] * self.J
        self.seg_speed = [np.float32(1)] * self.J
        self.seg_cost_s = [np.float32(0)] * self.J  # restart cost of the current segment (0: none)
        self.segments: list[list[tuple]] = [[] for _ in range(self.J)]
        self.attained_s = [np.float32(0)] * self.J  # wall seconds held, closed segments
        self.attained_model_s = [[np.float32(0)] * len(MODEL_NAMES) for _ in range(self.J)]  # ... by anchor model
        self.preemptions = [0] * self.J
        # A round policy's memory (semantics.md, "Policy memory"): a model id and a share per
        # (job, model) it keeps from round to round.
        self.policy_model = [-1] * self.J
        self.policy_share = np.zeros((self.J, len(MODEL_NAMES)), np.float32)
        self.restart_gpu_s = 0.0  # GPU-seconds of the restart costs of closed segments

        self.decisions = 0
        self.invalid_actions = 0
        self.placed = 0
        self.rejected = 0
        self.failed = 0
        self.dropped_overflow = 0
        self.running_full = False
        self.migrations = 0
        self.migration_gpu_s = 0.0
        self.reservations = 0
        # Time integrals over the measurement interval, in float64: allocated milli * s,
        # allocated milli * speed * s, F * s, jobs in the system * s, queued jobs * s, and
        # (queued + dropped so far) * s over the interval's first and last quarter, and the
        # same for their GPU work (GPUs x work at speed 1.0; ``waiting_work``: queued + dropped).
        self.alloc_milli_s = 0.0
        self.work_milli_s = 0.0
        self.frag_milli_s = 0.0
        self.jobs_s = 0.0
        self.queue_s = 0.0
        self.backlog_first_s = 0.0
        self.backlog_last_s = 0.0
        self.waiting_work = 0.0
        self.backlog_work_first = 0.0
        self.backlog_work_last = 0.0

        self._advance()

    # ------------------------------------------------------------------ resources

    def _free_gpus(self, n: int) -> list[int]:
        return [self.free_milli[n][g] for g in self.gpus_of[n]]

    def _fits(self, j: int, n: int) -> bool:
        """Job j fits node n now: alone, or (a gang) with n as its anchor."""
        if self._may_span(j):
            return sum(g for _, g in self._gang_parts(j, n)) == self.jobs[j].num_gpu
        return self._fits_alone(j, n)

    def _fits_alone(self, j: int, n: int) -> bool:
        """Job j fits node n, all of it there, with the node's current free resources."""
        if not self.node_valid[n]:
            return False
        return _job_fits(self.jobs[j], self.gpu_model[n], self.free_cpu[n], self.free_mem[n],
                         self._free_gpus(n))

    # ------------------------------------------------------------------ gangs

    def _may_span(self, j: int) -> bool:
        """Job j may run on several nodes: gangs are on and it wants >= 2 whole GPUs."""
        return self.config.max_span > 1 and self.jobs[j].num_gpu >= 2

    def _part_request(self, j: int, g: int) -> tuple[int, int]:
        """(milli-cores, MiB) of job j's part of g GPUs: its request times g / k, rounded up."""
        job = self.jobs[j]
        return -(-job.cpu_milli * g // job.num_gpu), -(-job.mem_mib * g // job.num_gpu)

    def _cap(self, j: int, i: int) -> int:
        """The most whole GPUs node i can give job j now: the largest g whose part fits."""
        job = self.jobs[j]
        closed = self.resv_job >= 0 and i == self.resv_node and j != self.resv_job
        if not self.node_valid[i] or closed or not _model_allowed(job.model_mask, self.gpu_model[i]):
            return 0
        whole = sum(free == GPU_MILLI for free in self._free_gpus(i))
        fitting = [g for g in range(whole + 1)
                   if all(need <= free for need, free in zip(self._part_request(j, g), (self.free_cpu[i], self.free_mem[i])))]
        return max(fitting, default=0)

    def _gang_parts(self, j: int, n: int) -> list[tuple[int, int]]:
        """[(node, GPUs)] job j would take with anchor n, in the gang rule's order, the GPUs
        adding up to fewer than k when it does not fit. Fits alone: [(n, k)]."""
        k = self.jobs[j].num_gpu
        cap = {i: self._cap(j, i) for i in range(self.N)}
        if cap[n] == 0:
            return []
        if cap[n] >= k:
            return [(n, k)]
        others = sorted((i for i in range(self.N) if i != n and cap[i] > 0
                         and (not self.config.gang_one_model or self.gpu_model[i] == self.gpu_model[n])),
                        key=lambda i: (-cap[i], self.node_rank[i]))
        nodes = [n] + others[: self.config.max_span - 1]
        taken = dict.fromkeys(nodes, 0)
        if self.config.gang_rule == "consolidate":
            for i in nodes:
                taken[i] = min(cap[i], k - sum(taken.values()))
        else:  # spread: one GPU per node with room, pass after pass
            while sum(taken.values()) < k and any(taken[i] < cap[i] for i in nodes):
                for i in nodes:
                    if taken[i] < cap[i] and sum(taken.values()) < k:
                        taken[i] += 1
        return [(i, taken[i]) for i in nodes if taken[i] > 0]

    def _node_frag(self, n: int) -> float:
        if not (self.node_valid[n] and self.config.track_frag):
            return 0.0
        return node_fragmentation(self._free_gpus(n), self.free_cpu[n], self.gpu_model[n], self.classes)

    def _choose_gpus(self, j: int, n: int, rule: str | None = None) -> list[int]:
        """GPUs of node n that job j gets under ``rule`` (default: the config's GPU rule;
        assumes it fits).

        Fractional jobs: "first-fit" the lowest-index GPU with room, "fgd" FGD's own choice
        (``_fgd_gpu``), "best-fit" and "buddy" the least free GPU with room. Whole-GPU jobs:
        the lowest-index wholly free GPUs, inside a power-of-two aligned block under "buddy"
        (``_buddy_gpus``).
        """
        job, rule = self.jobs[j], rule or self.config.gpu_rule
        if job.num_gpu == 0:
            return []
        if _is_fractional(job.num_gpu, job.gpu_milli):
            room = [g for g in self.gpus_of[n] if self.free_milli[n][g] >= job.gpu_milli]
            if rule == "first-fit":
                return [room[0]]
            if rule == "fgd":
                return [_fgd_gpu(self, j, n, room)]
            # best-fit: least free milli; min() keeps the first (lowest index) on ties.
            return [min(room, key=lambda g: self.free_milli[n][g])]
        whole = [g for g in self.gpus_of[n] if self.free_milli[n][g] == GPU_MILLI]
        if rule == "buddy":
            return _buddy_gpus(self.gpus_of[n], whole, job.num_gpu)
        return whole[: job.num_gpu]

    def _take(self, j: int, n: int, gpus: list[int], cpu: int | None = None, mem: int | None = None) -> None:
        """Job j takes ``gpus`` of node n and ``cpu``, ``mem`` (default: its whole request)
        there: one more part of it."""
        job = self.jobs[j]
        cpu = job.cpu_milli if cpu is None else cpu
        mem = job.mem_mib if mem is None else mem
        for g in gpus:
            self.free_milli[n][g] -= job.gpu_milli
        self.free_cpu[n] -= cpu
        self.free_mem[n] -= mem
        self.frag_node[n] = self._node_frag(n)
        self.parts[j].append((n, gpus, cpu, mem))

    def _release(self, j: int) -> None:
        # Completion gives back exactly what placement took, on every node of the job.
        self._give_back(j)
        for n, *_ in self.parts[j]:
            self.frag_node[n] = self._node_frag(n)
        self.parts[j] = []

    def allocated_milli(self) -> int:
        """GPU milli held by jobs right now, over the whole cluster."""
        return self.cluster_milli - self.idle_milli()

    def idle_milli(self) -> int:
        """Free GPU milli over the existing GPUs of valid nodes."""
        return sum(sum(self._free_gpus(n)) for n in range(self.N))

    def cluster_frag(self) -> float:
        """Cluster fragmentation F = sum of F_n over valid nodes (milli-GPU)."""
        return sum(self.frag_node[n] for n in range(self.N) if self.node_valid[n])

    # ------------------------------------------------------------------ observation

    def _may_use(self, j: int, n: int) -> bool:
        """Job j fits node n now and the reservation allows it there."""
        closed = self.resv_job >= 0 and n == self.resv_node and j != self.resv_job
        return not closed and self._fits(j, n)

    def _fits_somewhere(self, j: int) -> bool:
        return any(self._may_use(j, n) for n in range(self.N))

    def window(self) -> list[int]:
        """Job indices in the window slots: the first K queued jobs that fit some node now
        (backfill), or simply the first K (strict, and static mode)."""
        if self.config.mode == "static" or not self.config.backfill:
            return self.queue[: self.K]
        out = []
        for j in self.queue:
            if len(out) == self.K:
                break
            if self._fits_somewhere(j):
                out.append(j)
        return out

    def _running_has_room(self) -> bool:
        # Static mode has no running-set bound (see the class docstring).
        return self.config.mode == "static" or len(self.running) < self.config.running_capacity

    def place_mask(self) -> np.ndarray:
        """[K, N] bool: slot k holds a job that fits node n, and the running set has room
        (none with rounds: a round policy acts through ``step_round`` alone)."""
        mask = np.zeros((self.K, self.N), bool)
        if self.done or not self._running_has_room() or self._rounds():
            return mask
        for k, j in enumerate(self.window()):
            for n in range(self.N):
                mask[k, n] = self._may_use(j, n)
        return mask

    def _is_decision_point(self) -> bool:
        return bool(self.place_mask().any())

    def wait_action(self) -> int:
        """The flat index of the wait action, K*N + K."""
        return actions.wait(self.K, self.N)

    def _wait_legal(self) -> bool:
        if self.config.mode == "static":
            return False
        return bool(self.running) or self.next_arrival < self.J_valid

    def action_legal(self, action: int) -> bool:
        """Whether the flat ``action`` is legal now (semantics.md, Actions)."""
        action = int(action)
        K, N = self.K, self.N
        if self.done or self._rounds() or action < 0 or action > actions.wait(K, N):
            return False  # (with rounds, decisions are priorities: step_round)
        if actions.is_place(action, K, N):
            return bool(self.place_mask()[actions.place_slot_node(action, N)])
        if actions.is_reject(action, K, N):
            return actions.reject_slot(action, K, N) < len(self.window())
        return self._wait_legal()

    def action_mask(self) -> np.ndarray:
        """[K*N + K + 1] bool: ``action_legal`` for every flat action."""
        return np.array([self.action_legal(a) for a in range(self.wait_action() + 1)], bool)

    # ------------------------------------------------------------------ dynamics

    def step(self, action: int) -> None:
        """Apply one flat action (place / reject / wait); no-op once the episode is done."""
        if self._rounds():
            raise ValueError("RefConfig.round_s > 0: decisions are rounds, use step_round")
        if self.done:
            return
        action = int(action)
        self.decisions += 1
        if not self.action_legal(action):
            self.invalid_actions += 1
            if self._wait_legal():
                self._wait()
            return  # an illegal action with no legal wait changes nothing
        K, N = self.K, self.N
        if actions.is_place(action, K, N):
            slot, node = actions.place_slot_node(action, N)
            self._place(self.window()[slot], node)
        elif actions.is_reject(action, K, N):
            self._reject(self.window()[actions.reject_slot(action, K, N)])
        else:
            self._wait()
            return
        self._advance()

    def _place(self, j: int, n: int) -> None:
        if self._may_span(j) and not self._fits_alone(j, n):  # a gang: a part on each node
            for i, g in self._gang_parts(j, n):
                whole = [x for x in self.gpus_of[i] if self.free_milli[i][x] == GPU_MILLI]
                self._take(j, i, whole[:g], *self._part_request(j, g))
        else:
            self._take(j, n, self._choose_gpus(j, n))
        self.outcome[j] = OUTCOME_PLACED
        self.node[j] = n
        self.gpu_bits[j] = sum(1 << g for g in self.parts[j][0][1])
        # A restart after a preemption overwrites the last placement's records, unused parts too.
        self.span_node[j] = [-1] * (self.config.max_span - 1)
        self.span_bits[j] = [0] * (self.config.max_span - 1)
        for s, (i, gpus, *_) in enumerate(self.parts[j][1:]):
            self.span_node[j][s], self.span_bits[j][s] = i, sum(1 << g for g in gpus)
        first_start = not np.isfinite(self.start_s[j])
        if first_start:
            self.start_s[j] = self.time_s
        if self.config.mode == "static":
            self.end_s[j] = np.float32(np.inf)  # no departures: held forever
        else:
            self._begin_segment(j, np.float32(0) if first_start else self._restart_cost(j))
        if not first_start:  # a restart: its wait since the preemption ends
            self.waiting_work -= self._gpus(j) * float(self.remaining_s[j])
        self._remove_from_queue(j, waited=first_start)
        self.placed += first_start
        self._end_reservation(j)
        if self.config.mode == "dynamic":
            heapq.heappush(self.running, (self.end_s[j], j))
            if len(self.running) == self.config.running_capacity:
                self.running_full = True

    def _speed_now(self, j: int) -> np.float32:
        """The speed running job j works at on its parts: its type's speed, the slowest part's
        times spread_penalty for a gang; 1.0 for a CPU-only job."""
        job = self.jobs[j]
        if job.num_gpu == 0:
            return np.float32(1)
        speed = min(self.type_speed[i][job.job_type] for i, *_ in self.parts[j])
        if len(self.parts[j]) > 1:
            speed = np.float32(speed * np.float32(self.config.spread_penalty))
        return speed

    def _restart_cost(self, j: int) -> np.float32:
        """restart_overhead_s[i], i = how many thresholds of restart_above_gpus job j's GPU
        count exceeds."""
        cfg = self.config
        return np.float32(cfg.restart_overhead_s[sum(self.jobs[j].num_gpu > b for b in cfg.restart_above_gpus)])

    def _begin_segment(self, j: int, cost_s: np.float32) -> None:
        """Job j starts a run segment now on its parts: ``cost_s`` wall seconds without work,
        then its remaining work at its speed: ``end = (t + cost) + remaining / speed`` (float32;
        CPU-only: ``(t + cost) + remaining``). With no cost and all its work left this is the
        run time of semantics.md, "Resources and fit"."""
        speed = self._speed_now(j)
        self.seg_start_s[j], self.seg_speed[j], self.seg_cost_s[j] = self.time_s, speed, cost_s
        self.run_from_s[j] = np.float32(self.time_s + cost_s)
        if self.jobs[j].num_gpu > 0:
            self.end_s[j] = np.float32(self.run_from_s[j] + self.remaining_s[j] / speed)
        else:
            self.end_s[j] = np.float32(self.run_from_s[j] + self.remaining_s[j])

    def _remaining_now(self, j: int) -> np.float32:
        """Job j's work left now (reference-speed seconds): ``(end - t) * speed`` once its
        restart cost is paid, else the work left when its segment began (float32)."""
        if self._in_segment(j) and self.time_s >= self.run_from_s[j]:
            return np.float32(np.float32(self.end_s[j] - self.time_s) * self.seg_speed[j])
        return self.remaining_s[j]

    def _end_segment(self, j: int) -> None:
        """Close running job j's segment now: its attained service and restart cost grow by
        what it held since the segment began; its remaining work is what is left now."""
        t = self.time_s
        self.remaining_s[j] = np.float32(0) if t >= self.end_s[j] else self._remaining_now(j)
        self.segments[j].append((self.seg_start_s[j], self.run_from_s[j], t, self.seg_speed[j]))
        self.attained_s[j] = np.float32(self.attained_s[j] + np.float32(t - self.seg_start_s[j]))
        m = self.gpu_model[self.node[j]]
        self.attained_model_s[j][m] = np.float32(self.attained_model_s[j][m] + np.float32(t - self.seg_start_s[j]))
        restart_s = min(float(self.seg_cost_s[j]), float(t) - float(self.seg_start_s[j]))
        self.restart_gpu_s += self._gpus(j) * restart_s
        self.seg_start_s[j] = self.run_from_s[j] = np.float32(np.inf)

    def _gpus(self, j: int) -> float:
        """GPUs job j holds: num_gpu * gpu_milli / 1000 (0 for CPU-only)."""
        job = self.jobs[j]
        return job.num_gpu * job.gpu_milli / GPU_MILLI

    def attained_now(self, j: int) -> tuple[np.float32, np.float32]:
        """Job j's attained service now, (seconds, GPU-seconds): the wall seconds it has held
        its resources, the running segment included, and that times its GPUs (float32)."""
        attained = self.attained_s[j]
        if self._in_segment(j):
            attained = np.float32(attained + np.float32(self.time_s - self.seg_start_s[j]))
        gpus = np.float32(self.jobs[j].num_gpu * self.jobs[j].gpu_milli) / np.float32(GPU_MILLI)
        return attained, np.float32(attained * gpus)

    def attained_by_model_now(self, j: int) -> list:
        """Job j's attained wall seconds now by GPU model id ([M] float32): on the models of
        its segments' anchor nodes, the running segment included."""
        attained = list(self.attained_model_s[j])
        if self._in_segment(j):
            m = self.gpu_model[self.node[j]]
            attained[m] = np.float32(attained[m] + np.float32(self.time_s - self.seg_start_s[j]))
        return attained

    def remaining_now(self, j: int) -> np.float32:
        """Job j's work left now, in reference-speed seconds (an oracle: policies that know
        job sizes read it)."""
        return self._remaining_now(j)

    def _in_segment(self, j: int) -> bool:
        """Job j is running (dynamic mode): its segment is open."""
        return bool(np.isfinite(self.seg_start_s[j]))

    # ------------------------------------------------------------------ rounds and preemption

    def step_round(self, priority) -> None:
        """Decide the round due now (semantics.md, "Preemption and rounds"): ``priority`` is
        a float per job ([J]) or per (job, GPU model id) ([J, M]; read for queued and running
        jobs only), higher runs first, ties to the lower job index (then model); NaN or -inf
        holds a job (a pair) back (a running one is preempted). ``priority`` may be a pair
        (priority, memory): ``memory`` is a dict of ``policy_model`` (J model ids, -1: none)
        and/or ``policy_share`` ([J, M] floats), kept for the policy's next rounds
        (``self.policy_model``, ``self.policy_share``). No-op once the episode is done."""
        if not self._rounds():
            raise ValueError("step_round needs RefConfig.round_s > 0")
        if self.done:
            return
        if not self.round_due:
            raise ValueError("no round is due now")
        memory = {}
        if isinstance(priority, tuple):
            priority, memory = priority
            if not isinstance(memory, dict) or not set(memory) <= {"policy_model", "policy_share"}:
                raise ValueError(f"a round policy's memory must be a dict of policy_model, policy_share; got {memory!r}")
            for name, value in memory.items():
                if len(value) != self.J:
                    raise ValueError(f"{name} has {len(value)} entries; the episode has {self.J} jobs")
        priority = np.asarray(priority, np.float32)
        if priority.ndim not in (1, 2) or priority.shape[0] != self.J:
            raise ValueError(f"priority has shape {priority.shape}; the episode has {self.J} jobs: "
                             f"give [{self.J}] or [{self.J}, models]")
        self.decisions += 1
        if self.reset_due:  # each job's service at the reset (semantics.md, "Allocation resets")
            self.attained_at_reset_s = [self.attained_now(j)[0] for j in range(self.J)]
            self.attained_model_at_reset_s = [self.attained_by_model_now(j) for j in range(self.J)]
        self._allocate_round(priority)
        if "policy_model" in memory:
            self.policy_model = [int(m) for m in memory["policy_model"]]
        if "policy_share" in memory:
            self.policy_share = np.asarray(memory["policy_share"], np.float32).reshape(self.J, len(MODEL_NAMES))
        self.round_due = self.reset_due = False
        if self.config.round_ends_early:
            self.next_round_s = self._round_end()
        self._advance()

    def _round_end(self) -> np.float32:
        """round_ends_early: the round starting now ends when its last running job does, at
        most round_s on; with no job running, at the next arrival (round_s on if none)."""
        full = np.float32(self.time_s + np.float32(self.config.round_s))
        if self.running:
            return min(full, max(end for end, _ in self.running))
        if self.next_arrival < self.J_valid:
            return np.float32(self.jobs[self.next_arrival].arrival_s)
        return full

    def _allocate_round(self, priority: np.ndarray) -> None:
        """Held running jobs are preempted; then the queued and running jobs (with per-model
        priorities: the (job, model) pairs, a running job only on its anchor's model), by
        priority, each keep their nodes (running) or are placed first-fit (queued; on the
        pair's model only), preempting the lowest-priority running jobs still to come in the
        order when nothing else fits."""
        per_model = priority.ndim == 2
        score = {}  # (job, model) -> priority; model None: any model
        running = {j for _, j in self.running}
        for j in self.queue + sorted(running):
            if not per_model:
                units = [(None, priority[j])]
            elif j in running:  # its own pair only: the model of its anchor node
                m = self.gpu_model[self.node[j]]
                units = [(m, priority[j, m] if m < priority.shape[1] else np.nan)]
            else:
                units = list(enumerate(priority[j]))
            for m, p in units:
                if p > -np.inf:  # not NaN or -inf
                    score[j, m] = float(p)
        listed = {j for j, _ in score}
        for j in sorted(running - listed):
            self._preempt(j)  # held: its own pair is not listed
        named = [MODEL_NAMES.index(name) for name in self.config.round_model_order]

        def place(m):  # the pair's model's place in round_model_order (unnamed: after, by id; none: 0)
            if not named or m is None:
                return 0
            return named.index(m) if m in named else len(named) + m
        order = sorted(score, key=lambda u: (place(u[1]), -score[u], u[0], -1 if u[1] is None else u[1]))
        for pos, (j, m) in enumerate(order):
            if self._in_segment(j) or len(self.running) >= self.config.running_capacity:
                continue  # a running (or already placed) job keeps its nodes; a full set takes none
            lower = [v for v, _ in order[pos + 1:] if v in running and self._in_segment(v)]
            if m is None:
                self._place_preempting(j, lower)
                continue
            job = self.jobs[j]
            self.jobs[j] = job._replace(model_mask=job.model_mask & (1 << m))  # this pair's model only
            try:
                self._place_preempting(j, lower)
            finally:
                self.jobs[j] = job

    def _place_preempting(self, j: int, lower: list[int]) -> None:
        """Place queued job j first-fit, after giving back (in thought) the running jobs of
        ``lower`` (lower priority, in priority order), the last first, until it fits; those
        whose resources it then took are preempted, the others take theirs back. Nothing
        changes if it fits nowhere even with all of them given back."""
        released = []
        for v in reversed(lower):
            if self._first_fit_node(j) >= 0:
                break
            self._give_back(v)
            released.append(v)
        node = self._first_fit_node(j)
        if node < 0:
            for v in released:
                self._take_back(v)
            return
        touched = {n for v in released for n, *_ in self.parts[v]}
        self._place(j, node)
        for v in reversed(released):  # in priority order
            if self._parts_free(v):
                self._take_back(v)
            else:
                self._preempt(v, given_back=True)
        for n in touched | {n for n, *_ in self.parts[j]}:  # F_n once the what-if is over
            self.frag_node[n] = self._node_frag(n)

    def _first_fit_node(self, j: int) -> int:
        """The round's placement rule: the lowest-index node job j fits (as the anchor, for a
        gang) with the current free resources; -1 if none."""
        return next((n for n in range(self.N) if self._fits(j, n)), -1)

    def _parts_free(self, j: int) -> bool:
        """Every part of running job j (its GPUs, milli-cores, MiB) is free now."""
        return all(all(self.free_milli[n][g] >= self.jobs[j].gpu_milli for g in gpus)
                   and self.free_cpu[n] >= cpu and self.free_mem[n] >= mem
                   for n, gpus, cpu, mem in self.parts[j])

    def _take_back(self, j: int) -> None:
        """Running job j takes its parts again after ``_give_back`` (free lists only)."""
        for n, gpus, cpu, mem in self.parts[j]:
            for g in gpus:
                self.free_milli[n][g] -= self.jobs[j].gpu_milli
            self.free_cpu[n] -= cpu
            self.free_mem[n] -= mem

    def _preempt(self, j: int, given_back: bool = False) -> None:
        """Suspend running job j now: it leaves its resources (already given back in thought
        when ``given_back``), keeps the work it has left, and rejoins the queue in its
        discipline's order (never dropped)."""
        self._end_segment(j)
        self.waiting_work += self._gpus(j) * float(self.remaining_s[j])  # it waits again, with its work left
        if given_back:
            nodes = [n for n, *_ in self.parts[j]]
            self.parts[j] = []
            for n in nodes:
                self.frag_node[n] = self._node_frag(n)
        else:
            self._release(j)
        self.running.remove((self.end_s[j], j))
        heapq.heapify(self.running)
        self.end_s[j] = np.float32(np.inf)
        self.preemptions[j] += 1
        self._enqueue(j)

    def _enqueue(self, j: int) -> None:
        """Job j joins the queue after every queued job with key <= its key."""
        key = self._queue_key(j)
        i = bisect.bisect_right(self.queue_keys, key)
        self.queue.insert(i, j)
        self.queue_keys.insert(i, key)

    def _reject(self, j: int) -> None:
        self._remove_from_queue(j)
        self.outcome[j] = OUTCOME_REJECTED
        self.end_s[j] = self.time_s  # when it left the system
        self.rejected += 1
        self.measure_open -= self._measured(j)
        self._end_reservation(j)

    def _end_reservation(self, j: int) -> None:
        if j == self.resv_job:
            self.resv_job = self.resv_node = -1

    def _gpu_work(self, j: int) -> float:
        job = self.jobs[j]
        return job.num_gpu * job.gpu_milli / GPU_MILLI * float(job.work_s)

    def _remove_from_queue(self, j: int, waited: bool = True) -> None:
        if waited:  # it waited from arrival until now (its first start, or its rejection)
            self.waiting_work -= self._gpu_work(j)
        i = self.queue.index(j)
        del self.queue[i]
        del self.queue_keys[i]

    def _queue_key(self, j: int):
        order = self.config.queue_order
        if order == "fifo":
            return j
        if order == "sjf":
            return self.jobs[j].work_s
        return self.jobs[j].deadline_s

    def _rounds(self) -> bool:
        return self.config.round_s > 0

    def _next_round_s(self) -> np.float32:
        """Time of the next round: +inf when off or when no job is queued, running or to come."""
        if self.queue or self.running or self.next_arrival < self.J_valid:
            return self.next_round_s
        return np.float32(np.inf)

    def _next_resched_s(self) -> np.float32:
        """Time of the next rescheduling pass: +inf when off or when no other event is left."""
        if self.running or self.next_arrival < self.J_valid:
            return self.next_resched_s
        return np.float32(np.inf)

    def _next_event_s(self) -> np.float32:
        """Time of the next event (completion, arrival, pass or round), +inf when none is left."""
        t_next = min(self._next_resched_s(), self._next_round_s())
        if self.running:
            t_next = min(t_next, self.running[0][0])
        if self.next_arrival < self.J_valid:
            t_next = min(t_next, self.jobs[self.next_arrival].arrival_s)
        return np.float32(t_next)

    def _move_clock(self, t_next: np.float32) -> None:
        """Accumulate the time integrals over [t, t_next) within the measurement interval
        and set t = t_next."""
        lo, hi = float(self.measure_from_s), float(self.measure_to_s)
        quarter = (hi - lo) / 4

        def within(a, b):  # length of [t, t_next) inside [a, b]
            return min(max(float(t_next), a), b) - min(max(float(self.time_s), a), b)

        dt_s = within(lo, hi)
        used = [GPU_MILLI * len(self.gpus_of[n]) - sum(self._free_gpus(n)) for n in range(self.N)]
        self.alloc_milli_s += sum(used) * dt_s
        self.work_milli_s += sum(u * float(self.speed[n]) for n, u in enumerate(used)) * dt_s
        self.frag_milli_s += self.cluster_frag() * dt_s
        self.jobs_s += (len(self.queue) + len(self.running)) * dt_s
        self.queue_s += len(self.queue) * dt_s
        backlog = len(self.queue) + self.dropped_overflow
        self.backlog_first_s += backlog * within(lo, lo + quarter)
        self.backlog_last_s += backlog * within(hi - quarter, hi)
        self.backlog_work_first += self.waiting_work * within(lo, lo + quarter)
        self.backlog_work_last += self.waiting_work * within(hi - quarter, hi)
        self.time_s = np.float32(t_next)

    def _wait(self) -> None:
        self._move_clock(self._next_event_s())
        self._advance()

    def _advance(self) -> None:
        if self.config.mode == "static":
            self._advance_static()
        else:
            self._advance_dynamic()

    def _advance_dynamic(self) -> None:
        """Process events until a decision point or the end (semantics.md, Clock and events)."""
        while True:
            t_next = self._next_event_s()
            # (With rounds a queued job waits for the next round: an event still to come.)
            no_event_left = not self.running and self.next_arrival >= self.J_valid and not (
                self._rounds() and self.queue)
            if t_next > self.time_s or no_event_left:
                # Every event at the current instant has been processed.
                self._reserve()
                if self._measured_jobs_left():
                    self.done = True
                    return
                if self.round_due and not self.queue and not self.reset_due:
                    self.round_due = False  # nothing waits: nothing to decide (a reset is decided)
                    if self.config.round_ends_early:
                        self.next_round_s = self._round_end()
                        t_next = self._next_event_s()  # (the round moved)
                if self._is_decision_point() or self.round_due:
                    return
                if no_event_left:
                    self.done = True
                    return
                self._move_clock(t_next)
            # Process exactly one event at time t: completions, then arrivals, then a pass or
            # a round.
            if self.running and self.running[0][0] <= self.time_s:
                _, j = heapq.heappop(self.running)
                self._end_segment(j)
                self._release(j)
                self.measure_open -= self._measured(j)
                self.jobs_changed = True
            elif self.next_arrival < self.J_valid and self.jobs[self.next_arrival].arrival_s <= self.time_s:
                self._arrive_dynamic()
                self.jobs_changed = True
            elif self._rounds():
                self.round_due = True  # decided at the boundary, by step_round
                self.next_round_s = np.float32(self.next_round_s + np.float32(self.config.round_s))
                since = np.float32(np.float32(self.time_s) - self.last_reset_s)
                if self.config.round_reset_s > 0 and self.jobs_changed and since >= np.float32(self.config.round_reset_s):
                    self.reset_due, self.jobs_changed = True, False
                    self.last_reset_s = np.float32(self.time_s)
            else:
                self._reschedule()

    def _measured(self, j: int) -> bool:
        return self.measure_first <= j <= self.measure_last

    def _measured_jobs_left(self) -> bool:
        """Every measured job has arrived and none is queued or running."""
        return self.next_arrival > self.measure_last and self.measure_open == 0

    def _reserve(self) -> None:
        """The starvation guard (semantics.md, "Reservation"), at a boundary: without a
        reservation, the oldest queued job that fits nowhere and lies ahead of the window's
        last job (anywhere, if the window is not full) gets one once it has waited
        reserve_after_s: the node where it fits first as the running jobs end."""
        cfg = self.config
        if not (cfg.backfill and math.isfinite(cfg.reserve_after_s)) or self.resv_job >= 0 or self._rounds():
            return
        window = self.window()
        ahead = self.queue if len(window) < self.K else self.queue[: self.queue.index(window[-1])]
        parked = [j for j in ahead if j not in window]
        if not parked:
            return
        j = min(parked)  # the oldest: jobs are indexed in arrival order
        if not np.float32(self.time_s - self.jobs[j].arrival_s) >= np.float32(cfg.reserve_after_s):
            return
        # Release the running jobs in end order, all those with one end time together.
        saved = ([list(row) for row in self.free_milli], list(self.free_cpu), list(self.free_mem))
        node = -1
        ends = sorted({end for end, _ in self.running})
        for end in ends:
            for e, jr in self.running:
                if e == end:
                    self._give_back(jr)
            fitting = [n for n in range(self.N) if self._fits(j, n)]
            if fitting:
                node = min(fitting, key=lambda n: self.node_rank[n])
                break
        self.free_milli, self.free_cpu, self.free_mem = saved
        if node >= 0:
            self.resv_job, self.resv_node = j, node
            self.reservations += 1

    def _give_back(self, j: int) -> None:
        """Running job j's resources back to its nodes (free lists only: a what-if)."""
        for n, gpus, cpu, mem in self.parts[j]:
            for g in gpus:
                self.free_milli[n][g] += self.jobs[j].gpu_milli
            self.free_cpu[n] += cpu
            self.free_mem[n] += mem

    def _arrive_dynamic(self) -> None:
        j = self.next_arrival
        self.next_arrival += 1
        if self.unschedulable[j]:
            self.failed += 1
            return
        self.waiting_work += self._gpu_work(j)  # queued or dropped: it waits from now on
        if len(self.queue) >= self.config.queue_capacity:
            self.dropped_overflow += 1
            return
        self._enqueue(j)  # the queue stays sorted by (key, index)
        self.measure_open += self._measured(j)

    def _reschedule(self) -> None:
        """A rescheduling pass now (docs/schedulers.md): up to resched_max_moves moves."""
        cfg = self.config
        for _ in range(cfg.resched_max_moves):
            if not self._migrate_one():
                break
        self.next_resched_s = np.float32(self.next_resched_s + np.float32(cfg.resched_interval_s))

    def _alloc840(self, n: int) -> int:
        """Node n's GPU allocation times 840 (exact: 840 is divisible by every GPU count 1..8)."""
        gpus = self.gpus_of[n]
        used = GPU_MILLI * len(gpus) - sum(self._free_gpus(n))
        return used * (840 // len(gpus))

    def _migrate_one(self) -> bool:
        """Move one job off an under-allocated node, if some job can move; True if one did."""
        cfg, t = self.config, self.time_s
        limit = np.float32(cfg.resched_util_threshold) * np.float32(840000)
        moves = []  # (source alloc, -remaining, job, source, destinations)
        for end, j in self.running:
            s = self.node[j]
            if (self.jobs[j].num_gpu == 0 or len(self.parts[j]) > 1 or not self.gpus_of[s]
                    or not np.float32(self._alloc840(s)) < limit):
                continue  # a gang never moves
            dests = [d for d in range(self.N) if d != s and d != self.resv_node and self.gpus_of[d]
                     and self._fits_alone(j, d) and self._alloc840(d) > self._alloc840(s)]
            if dests:
                moves.append((self._alloc840(s), -np.float32(end - t), j, s, dests))
        if not moves:
            return False
        _, _, j, s, dests = min(moves, key=lambda m: m[:3])
        fgd = cfg.resched_target == "fgd"  # first the top FGD score for j, then allocation
        d = max(dests, key=lambda d: (_fgd_score(self, j, d) if fgd else 0, self._alloc840(d), -self.node_rank[d]))
        job, end = self.jobs[j], self.end_s[j]
        self._end_segment(j)  # its run here stops; a new segment begins on d after the pause

        self._release(j)
        gpus = self._choose_gpus(j, d, "fgd" if fgd else "best-fit")  # whatever the config's GPU rule
        self.node[j], self.gpu_bits[j] = d, sum(1 << g for g in gpus)
        self._take(j, d, gpus)

        pause = np.float32(cfg.migration_pause_s)
        speed = [row[job.job_type] for row in self.type_speed]  # the job's type's speeds
        new_end = np.float32(np.float32(t + pause) + np.float32(np.float32((end - t) * speed[s]) / speed[d]))
        self.end_s[j] = new_end
        self.remaining_s[j] = np.float32(np.float32(end - t) * speed[s])  # the rule above, kept as it was
        self.seg_start_s[j], self.run_from_s[j], self.seg_cost_s[j] = t, np.float32(t + pause), np.float32(0)
        self.seg_speed[j] = speed[d]
        self.running.remove((end, j))
        self.running.append((new_end, j))
        heapq.heapify(self.running)
        self.migrations += 1
        self.migration_gpu_s += job.num_gpu * job.gpu_milli / GPU_MILLI * float(pause)
        return True

    def _advance_static(self) -> None:
        """The FGD paper's protocol: one job at a time, in index order, no departures."""
        while True:
            if self.queue:
                return
            if self.next_arrival >= self.J_valid:
                self.done = True
                return
            j = self.next_arrival
            self.time_s = self.jobs[j].arrival_s
            self.next_arrival += 1
            if any(self._fits(j, n) for n in range(self.N)):
                self.queue.append(j)
                self.queue_keys.append(self._queue_key(j))
            else:
                self.failed += 1

    # ------------------------------------------------------------------ results

    def results(self) -> dict:
        """Per-job records and the episode metrics (semantics.md, Metrics), as of now."""
        static = self.config.mode == "static"
        t_end = self.time_s
        start_s = np.array(self.start_s, np.float32)
        end_s = np.array(self.end_s, np.float32)
        arrival_s = np.array([job.arrival_s for job in self.jobs], np.float32)
        outcome = np.array(self.outcome)
        placed = outcome == OUTCOME_PLACED
        if static:
            finished_mask = placed  # placed jobs count as finished; they never end
        else:
            finished_mask = placed & (end_s <= t_end)
        finished = int(finished_mask.sum())
        index = np.arange(self.J)
        measured = (index < self.J_valid) & (index >= self.measure_first) & (index <= self.measure_last)
        left = measured & (finished_mask | ((outcome == OUTCOME_REJECTED) & (end_s <= t_end)))

        metrics = {
            "decisions": self.decisions,
            "invalid_actions": self.invalid_actions,
            "jobs_total": self.J_valid,
            "placed": self.placed,
            "finished": finished,
            "rejected": self.rejected,
            "failed": self.failed,
            "dropped_overflow": self.dropped_overflow,
            "unfinished": self.J_valid - finished - self.rejected - self.failed - self.dropped_overflow,
            "running_full": int(self.running_full),
            "done": int(self.done),
            "measured_jobs": int(measured.sum()),
            "measured_finished": int((measured & finished_mask).sum()),
            "started_after_arrivals": int((measured & np.isfinite(start_s) & (start_s > (
                arrival_s[self.J_valid - 1] if self.J_valid else np.inf))).sum()),
            "reservations": self.reservations,
            "migrations": self.migrations,
        }
        metrics["migration_gpu_s"] = self.migration_gpu_s
        preemptions = np.array(self.preemptions, np.int32)
        if self._rounds():  # (without rounds the metrics are those both simulators had before)
            metrics.update(self._preemption_metrics(preemptions, measured, t_end))
        metrics.update(self._job_metrics(arrival_s, start_s, end_s, finished_mask & measured, static))
        jct = lambda mask: float((end_s[mask] - arrival_s[mask]).astype(np.float64).mean()) if mask.any() else 0.0  # noqa: E731
        metrics["time_in_system_mean"] = 0.0 if static else jct(left)
        metrics["episode_jct_mean"] = 0.0 if static else jct(finished_mask)
        metrics.update(self._episode_metrics(end_s, finished_mask, static))
        measured_work = sum(self._gpu_work(j) for j in np.flatnonzero(measured))
        metrics.update(self._resource_metrics(int(measured.sum()), measured_work, static))
        return {
            "outcome": np.array(self.outcome, np.int32),
            "node": np.array(self.node, np.int32),
            "gpu_bits": np.array(self.gpu_bits, np.int32),
            "span_node": np.array(self.span_node, np.int32).reshape(self.J, -1),
            "span_bits": np.array(self.span_bits, np.int32).reshape(self.J, -1),
            "start_s": start_s,
            "end_s": end_s,
            # Preemption (semantics.md, "Preemption and rounds"): times each job was
            # preempted, its attained service now (seconds held, and GPU-seconds), and its
            # closed run segments, [(start, run_from, stop, speed)] (the reference's record).
            "preemptions": preemptions,
            "attained_s": np.array([self.attained_now(j)[0] for j in range(self.J)], np.float32),
            "attained_gpu_s": np.array([self.attained_now(j)[1] for j in range(self.J)], np.float32),
            "segments": [list(seg) for seg in self.segments],
            "metrics": metrics,
        }

    def _preemption_metrics(self, preemptions, measured, t_end) -> dict:
        """preemptions, preemptions_per_job (over the measured jobs) and restart_gpu_s (the
        restart costs of the closed segments, and of the running ones up to ``t_end``)."""
        restart_gpu_s = self.restart_gpu_s + sum(
            self._gpus(j) * min(float(self.seg_cost_s[j]), float(t_end) - float(self.seg_start_s[j]))
            for j in range(self.J) if self._in_segment(j))
        return {"preemptions": int(preemptions.sum()),
                "preemptions_per_job": float(preemptions[measured].mean()) if measured.any() else 0.0,
                "restart_gpu_s": restart_gpu_s}

    def _job_metrics(self, arrival_s, start_s, end_s, mask, static: bool) -> dict:
        """Statistics over the jobs of ``mask`` (the measured jobs that finished), and the
        JCT and delay means by job size (at most 1 GPU, 2 to 8, more than 8)."""
        names = ("jct_mean", "jct_p50", "jct_p95", "jct_p99", "queue_delay_mean",
                 "queue_delay_p95", "slowdown_mean")
        num_gpu = np.array([job.num_gpu for job in self.jobs])
        by_size = {}
        for size, in_size in (("small", num_gpu <= 1), ("2to8", (num_gpu >= 2) & (num_gpu <= 8)),
                              ("over8", num_gpu > 8)):
            sized = mask & in_size
            for name, x in (("jct_mean", end_s), ("queue_delay_mean", start_s)):
                differences = (x[sized] - arrival_s[sized]).astype(np.float64)
                by_size[f"{name}_{size}"] = float(differences.mean()) if sized.any() and not static else 0.0
        if static or not mask.any():
            return {**dict.fromkeys(names, 0.0), **by_size}
        # Differences in float32 like the per-job arrays; statistics in float64.
        jct_s = (end_s[mask] - arrival_s[mask]).astype(np.float64)
        delay_s = (start_s[mask] - arrival_s[mask]).astype(np.float64)
        run_s = (end_s[mask] - start_s[mask]).astype(np.float64)
        slowdown = np.maximum(jct_s / np.maximum(run_s, 10.0), 1.0)
        return {
            "jct_mean": float(jct_s.mean()),
            "jct_p50": float(np.percentile(jct_s, 50)),
            "jct_p95": float(np.percentile(jct_s, 95)),
            "jct_p99": float(np.percentile(jct_s, 99)),
            "queue_delay_mean": float(delay_s.mean()),
            "queue_delay_p95": float(np.percentile(delay_s, 95)),
            "slowdown_mean": float(slowdown.mean()),
            **by_size,
        }

    def _episode_metrics(self, end_s, finished_mask, static: bool) -> dict:
        """makespan_s and throughput_per_h, over every finished job of the episode."""
        if static or not finished_mask.any():
            return {"makespan_s": 0.0, "throughput_per_h": 0.0}
        makespan_s = float(np.float32(end_s[finished_mask].max() - self.t0_s))
        return {"makespan_s": makespan_s,
                "throughput_per_h": float(finished_mask.sum() / (makespan_s / 3600.0)) if makespan_s > 0 else 0.0}

    def _resource_metrics(self, num_measured: int, measured_work: float, static: bool) -> dict:
        def ratio(num, den):
            return float(num / den) if den > 0 else 0.0

        cap_work = sum(GPU_MILLI * len(self.gpus_of[n]) * float(self.speed[n]) for n in range(self.N))
        if static:
            # Snapshot at the end: the FGD paper's protocol has no time axis.
            frag = self.cluster_frag()
            work = sum((GPU_MILLI * len(self.gpus_of[n]) - sum(self._free_gpus(n))) * float(self.speed[n])
                       for n in range(self.N))
            out = {
                "gpu_alloc": ratio(self.allocated_milli(), self.cluster_milli),
                "work_alloc": ratio(work, cap_work),
                "frag_amount": ratio(frag, self.cluster_milli),
                "frag_rate": ratio(frag, self.idle_milli()),
                "jobs_in_system": 0.0, "queue_len_mean": 0.0, "backlog_growth": 0.0,
                "backlog_work_growth": 0.0,
                "measure_span_s": 0.0,
            }
        else:
            span_s = max(float(self.measure_to_s) - float(self.measure_from_s), 0.0)
            milli_s = self.cluster_milli * span_s
            out = {
                "gpu_alloc": ratio(self.alloc_milli_s, milli_s),
                "work_alloc": ratio(self.work_milli_s, cap_work * span_s),
                "frag_amount": ratio(self.frag_milli_s, milli_s),
                "frag_rate": ratio(self.frag_milli_s, milli_s - self.alloc_milli_s),
                "jobs_in_system": ratio(self.jobs_s, span_s),
                "queue_len_mean": ratio(self.queue_s, span_s),
                "backlog_growth": ratio(self.backlog_last_s - self.backlog_first_s,
                                        span_s / 4 * num_measured),
                "backlog_work_growth": ratio(self.backlog_work_last - self.backlog_work_first,
                                             span_s / 4 * measured_work),
                "measure_span_s": span_s,
            }
        if not self.config.track_frag:
            out.update(frag_amount=math.nan, frag_rate=math.nan)
        return out


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
    speed = [[np.float32(0)] * sim.T for _ in range(num_models)]
    for n in range(sim.N):
        if sim.node_valid[n] and sim.gpus_of[n]:
            m = sim.gpu_model[n]
            speed[m] = [max(a, b) for a, b in zip(speed[m], sim.type_speed[n])]
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


def _gavel_fifo_priority(sim: ReferenceSim) -> tuple:
    """gavel-fifo, Gavel's FIFO as its code runs: the allocation (``_gavel_fifo_allocate``; with
    allocation resets only at a reset round, else the last one) and, per (job, GPU model id),
    1 / (time received + half a round) on the job's allocated model, -inf elsewhere: the time
    on the model since arrival, or with resets the time received since the last reset (0 at
    a reset round); CPU-only jobs the same on every model. -> ([J, M] float32, allocation)."""
    resets = sim.config.round_reset_s > 0
    alloc = _gavel_fifo_allocate(sim, sim.policy_model) if not resets or sim.reset_due else list(sim.policy_model)
    head_start = np.float32(sim.config.round_s / 2)
    priority = np.full((sim.J, len(MODEL_NAMES)), -np.inf, np.float32)
    for j in _in_system(sim):
        if resets:
            received = np.float32(0) if sim.reset_due else np.float32(sim.attained_now(j)[0] - sim.attained_at_reset_s[j])
            on_model = [received] * len(MODEL_NAMES)
        else:
            received, on_model = sim.attained_now(j)[0], sim.attained_by_model_now(j)
        if sim.jobs[j].num_gpu == 0:
            priority[j] = np.float32(1) / np.float32(received + head_start)
        elif alloc[j] >= 0:
            priority[j, alloc[j]] = np.float32(1) / np.float32(on_model[alloc[j]] + head_start)
    return priority, {"policy_model": alloc}


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


def _qos_priority(sim: ReferenceSim) -> list:
    """priority, by priority class: 2 qos_class, plus 1 for a running job (a class's running
    jobs before its queued ones, so a queued job preempts running jobs of lower classes only;
    then arrival order, the env's tie-break)."""
    return [np.float32(2 * sim.jobs[j].qos_class + sim._in_segment(j)) for j in range(sim.J)]


ROUND_POLICIES = {
    "las": _las_priority,
    "las-perf": _las_perf_priority,
    "gavel-fifo": _gavel_fifo_priority,
    "las-gpu": _las_gpu_priority,
    "tiresias": _tiresias_priority,
    "srtf": _srtf_priority,
    "priority": _qos_priority,
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


def run(cluster, jobs, frag_classes, config: RefConfig,
        policy: str | Callable[[ReferenceSim], int] = "first-fit",
        max_steps: int = 100_000, node_rank=None,
        round_policy: str | Callable[[ReferenceSim], list] | None = None) -> dict:
    """Run one episode to done (or ``max_steps`` decisions) and return ``results()``.

    ``policy`` is a heuristic name (see ``heuristic_action``) or a callable sim -> action.
    With rounds (``config.round_s > 0``) ``round_policy`` decides instead: a name of
    ``ROUND_POLICIES`` or a callable sim -> [J] priorities (see ``ReferenceSim.step_round``).
    """
    sim = ReferenceSim(cluster, jobs, frag_classes, config, node_rank=node_rank)
    if config.round_s > 0:
        if round_policy is None:
            raise ValueError(f"round_s > 0 needs a round_policy; known: {sorted(ROUND_POLICIES)}")
        prioritise = round_policy if callable(round_policy) else ROUND_POLICIES[round_policy]
        decide = lambda s: s.step_round(prioritise(s))  # noqa: E731
    else:
        choose = policy if callable(policy) else (lambda s: heuristic_action(s, policy))
        decide = lambda s: s.step(choose(s))  # noqa: E731
    for _ in range(max_steps):
        if sim.done:
            break
        decide(sim)
    return sim.results()
