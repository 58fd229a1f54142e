"""``ReferenceSim``: one episode, its state, its decisions and its clock; the gangs, rounds and
metrics it mixes in live in ``gangs.py``, ``rounds.py`` and ``metrics.py``."""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

from jaxsched import actions
from jaxsched.cluster import MODEL_NAMES
from jaxsched.reference.config import RefConfig
from jaxsched.reference.gangs import GangsMixin
from jaxsched.reference.heuristics import _fgd_score
from jaxsched.reference.metrics import MetricsMixin
from jaxsched.reference.resources import _Job, _job_fits
from jaxsched.reference.rounds import RoundsMixin, round_after
from jaxsched.types import GPU_MILLI, OUTCOME_NONE, OUTCOME_PLACED, OUTCOME_REJECTED


class ReferenceSim(GangsMixin, RoundsMixin, MetricsMixin):
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

    # ------------------------------------------------------------------ queue, clock and events

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
                self.next_round_s = round_after(self.next_round_s, self.config.round_s)
                since = np.float32(np.float32(self.time_s) - self.last_reset_s)
                waited = since >= np.float32(self.config.round_reset_s) or self.last_reset_s <= 0  # Gavel's 0 start
                if self.config.round_reset_s > 0 and self.jobs_changed and waited:
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
