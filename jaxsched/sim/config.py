"""The env's static settings: ``EnvConfig``, the values its fields allow, and their checks.

``EnvConfig`` fixes shapes and code paths, so it is hashable and ``ClusterEnv`` (``sim/env.py``)
is a static jit argument. What each setting means for the simulation: docs/semantics.md
("Clock and events", "The window", "Reservation", "Static mode") and docs/schedulers.md
("Rescheduling").
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from jaxsched.cluster import MODEL_NAMES
from jaxsched.sim.gangs import GANG_RULES
from jaxsched.sim.resources import GPU_RULES

INF = np.float32(np.inf)  # numpy, not a JAX array: importing the env must not start a backend
MODES = ("dynamic", "static")
QUEUE_ORDERS = ("fifo", "sjf", "edf")
TIE_BREAKS = ("permutation", "identity")
REWARDS = ("in_system", "placed_jct")
SETTLED_ROUNDS = ("decided", "skipped", "skipped-by-policy")  # EnvConfig.settled_rounds
RESCHED_TARGETS = ("alloc", "fgd")  # where a migrated job goes (EnvConfig.resched_target)
DEFAULT_RESERVE_AFTER_S = 3600.0
MAX_RESTART_S = float(2 ** 24)  # the largest restart cost: float32 keeps whole seconds up to here
# Tiresias's simulator (SymbioticLab/Tiresias, simulator/jobs.py): three queues, so of its
# queue_limit [3250, 7200, 18000] only the first two are ever compared (run_sim.dlas_sim_jobs).
TIRESIAS_THRESHOLDS_GPU_S = (3250.0, 7200.0)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Static settings of the env (they fix shapes and code paths, so they are hashable).

    mode: "dynamic" (jobs run and leave; queueing) or "static" (FGD protocol: no departures,
      jobs arrive one by one, a job that fits nowhere fails).
    window: K, queued jobs shown to the policy.
    backfill: the window shows the first K queued jobs (in queue order) that fit some node
      now (default): a job that fits nowhere never hides the jobs behind it, and a policy
      that always takes slot 0 backfills greedily over the whole queue, as the Alibaba PAI
      simulator's FIFO and SJF do. False: the first K queued jobs, fitting or not (the
      strict head-of-queue window).
    reserve_after_s: the starvation guard (backfill only; +inf = off, pure greedy
      backfilling). When the oldest queued job that fits nowhere has waited this long, it
      reserves the node where it can start soonest, and no other job may be placed on that
      node until it leaves the queue (docs/semantics.md, "Reservation").
    warmup_jobs, measured_jobs: the measurement window. Jobs warmup_jobs ..
      warmup_jobs + measured_jobs - 1 (measured_jobs 0: to the last job) are measured: job
      metrics are theirs, time-weighted ones cover [arrival of the first, arrival of the
      last], and the episode ends once every measured job has finished, failed, been
      rejected or dropped. Dynamic mode only; 0 and 0 measure the whole episode.
    queue_capacity: Q, queued jobs held; an arrival beyond it is dropped and counted.
    running_capacity: R, jobs running at once; while full no job can be placed (flagged).
    queue_order: "fifo" (arrival), "sjf" (least work first) or "edf" (earliest deadline).
    gpu_rule: which GPUs of the chosen node a job gets ("best-fit", "first-fit", "random",
      "fgd", "buddy"; see ``resources.choose_gpus``). The reference knows all but "random".
    tie_break: "permutation" (a random node rank per episode) or "identity" (rank = index).
    reward: what a step's reward counts, times ``reward_scale``; either way an episode's
      (undiscounted) return is -(total JCT of the jobs placed) * reward_scale, up to jobs
      still in the system at a step cap:
      "in_system": -(job-seconds spent in the system during the step);
      "placed_jct": -(JCT of the job the step placed), known at placement (end = start +
      run time); credits a placement's run time to the decision that chose the node at once.
      (Migration pauses are not counted by "placed_jct".)
    reward_gpu_price: "placed_jct" only; 0 (default) keeps the return -(total JCT). Above 0,
      a placement also pays for the fast GPU time it holds, a shadow price of what later jobs
      lose by not having it: price * (GPUs held) * (run time, s) * max(0, speed / s_common - 1),
      where s_common is the GPU-weighted median speed of the cluster (the GPU most jobs fall
      back to). So a whole GPU job prefers common GPUs and a fractional one, which shares its
      GPU and so gets more work sped up per GPU-second, prefers fast ones. Evaluation still
      measures JCT; only the training signal changes.
    reward_scale: reward units per second. Default 1/3600: job-hours.
    track_frag: keep each node's FGD fragmentation ``frag_node`` up to date after every event
      (default). Off: it stays 0, the fragmentation metrics are NaN, and each event skips the
      per-class fragmentation pass over the target workload (a fifth to a quarter of a
      first-fit step on a 2-core CPU); for runs whose policy and metrics do not read it
      (results/bench/bench_quick_nofrag.md, profile.md).
    track_job_classes: keep per node the gpu-clustering job classes it hosts
      (``Observation.node_class_jobs``); costs a [N, S*G+1] count array in the state.
    fgd_table: S > 0 keeps FGD's drop table (``Observation.fgd_shape``, ``fgd_drop``): for
      the first S fractional and S other distinct job shapes (num_gpu, gpu_milli, cpu_milli)
      of the episode, each node's drop (``frag.node_drops``), computed at reset and redone
      for the one node an event changes, [S', G, M] + [S'', M] work (S', S'': the episode's
      shapes of each kind, in blocks of ``FGD_TABLE_BLOCK``) instead of the fgd policy's
      [M, N, G] pass at every decision; the policy looks the job up there and scores every
      node itself only for a shape not in the table. 0: off.
    resched_interval_s: seconds between rescheduling (migration) passes; 0 turns them off.
      Dynamic mode only. Definition: docs/schedulers.md, "Rescheduling".
    resched_max_moves: jobs moved per pass at most (DRR's ``re_num``).
    resched_util_threshold: nodes whose GPU allocation is below this give jobs away.
    resched_target: where a moved job goes: "alloc" the most allocated node it fits, GPUs by
      best fit; "fgd" the node with the top FGD score for it (the fgd policy's score, ties:
      the most allocated), GPUs by the GPU rule "fgd".
    migration_pause_s: seconds a moved job is paused (its cost).
    max_span: S, the most nodes one job may run on (dynamic mode). 1 (default): every job on
      one node. Above 1 a job of k >= 2 whole GPUs may be a gang over up to S nodes, its parts
      starting and ending together (docs/semantics.md, "Gang jobs"); the state then keeps
      [J, S - 1] records of the other parts (``SimState.span_node``, ``span_bits``).
    gang_rule: how a gang's other nodes are chosen after the policy's node: "consolidate"
      (fill the nodes of most capacity first: the fewest nodes) or "spread" (one GPU per
      node and pass: the most nodes); or "helios", Helios's placer, which chooses every node
      itself: a job of at most G GPUs (a node's most) on one node only, a larger one on
      k // G whole free nodes by index and its remainder on the next node by free GPUs.
    spread_penalty: a gang on more than one node runs at this times its speed (1.0: none;
      Blox uses 0.6-0.9 by model).
    gang_one_model: a gang takes nodes of its anchor's GPU model only (Gavel gives a job one
      worker type); false (default): it may mix models and runs at its slowest GPU's speed.
    round_s: seconds between scheduling rounds (0: none, decisions are the event-driven flat
      actions). Above 0 jobs run in segments and may be preempted: at each round a round
      policy's priorities decide which jobs run (``ClusterEnv.step_round``; docs/semantics.md,
      "Preemption and rounds"); ``step`` is refused. Dynamic mode, no rescheduling passes.
    restart_overhead_s: the restart cost (wall seconds) of a job starting again after a
      preemption, by GPU count: ``restart_overhead_s[i]``, i = how many of the thresholds
      ``restart_above_gpus`` the job's num_gpu exceeds (a number: one constant cost).
    restart_above_gpus: the increasing GPU-count thresholds, one fewer than the costs.
    restart_guard: a job that restarted with a cost c > 0 keeps its GPUs, whatever its
      priority, until it has run c seconds past its restart (true, default; false: Helios's
      SRTF, which may preempt a job during its restart). A restart cost then cannot livelock
      a policy that ranks by attained service (docs/semantics.md, "The restart guard").
    round_ends_early: a round lasts until the last job running in it finishes, at most
      ``round_s`` (Gavel's simulator: a round ends when its micro-tasks do), and with no job
      running the next round is at the next arrival (docs/semantics.md, "The round clock").
      False (default): rounds every ``round_s``.
    round_reset_s: Gavel's allocation resets (``minimum_time_between_allocation_resets``, 1,920
      s): a round is a *reset* when a job arrived or finished since the last reset and at least
      this many seconds have passed since it; a reset round is decided even when no job waits,
      and a round policy may recompute its allocation only there (docs/semantics.md,
      "Allocation resets"). 0 (default): no resets.
    round_model_order: GPU model names (``cluster.MODEL_NAMES``): with per-model priorities
      the round walks the (job, model) pairs model by model in this order, each model's by
      priority, then the models not named (Gavel's round for its heterogeneity-aware
      policies: ``["V100", "P100", "K80"]``); empty (default): all pairs by priority
      (docs/semantics.md, "Per-model priorities").
    settled_rounds: a speed setting, set by a round policy's registry entry (docs/performance.md,
      "Settled rounds"): "decided" (default), every due round with a job queued is decided;
      "skipped", for policies whose order moves only at arrivals, completions and the end of
      a job's restart cost, and then never puts a running job behind a queued one (``srtf``,
      ``priority``): after a decided round that placed and preempted nothing, the rounds
      before the next arrival, completion, reset, or end of a running job's restart cost or
      guard are dropped, as a round with nothing queued is, since deciding them would change
      nothing; "skipped-by-policy", the same, but also only until the time the policy names
      (``(priority, {"steady_until": t})``: its priorities stay the same until then, absent
      arrivals and completions; ``helios-srtf``). The schedules are the same; ``decisions``
      counts the rounds decided. Wrong for any other policy (``las``, ``tiresias``, a learned
      one).
    tiresias_thresholds_gpu_s: the tiresias round policy's queue thresholds, attained
      GPU-seconds, increasing and > 0: m thresholds make m + 1 queues (default Tiresias's
      simulator's three queues, ``[3250, 7200]``). Read by the policy only.
    tiresias_promote_knob: tiresias's starvation knob: a started job whose waiting time is at
      least this times its attained service goes back to the top queue (0, default: never).
      Read by the policy only (docs/semantics.md, "Round policies").
    walk_slots: with rounds, the round decision sorts its candidates (the queued and running
      jobs) in an array of this many slots when they fit, else in one of all J jobs: a speed
      setting only, every value gives the same schedules (``sim/rounds.py``).
    """

    mode: str = "dynamic"
    window: int = 8
    backfill: bool = True
    reserve_after_s: float = DEFAULT_RESERVE_AFTER_S
    warmup_jobs: int = 0
    measured_jobs: int = 0
    queue_capacity: int = 1024
    running_capacity: int = 1024
    queue_order: str = "fifo"
    gpu_rule: str = "best-fit"
    tie_break: str = "permutation"
    reward: str = "in_system"
    reward_gpu_price: float = 0.0
    reward_scale: float = 1.0 / 3600.0
    track_job_classes: bool = False
    track_frag: bool = True
    fgd_table: int = 0
    resched_interval_s: float = 0.0
    resched_max_moves: int = 5
    resched_util_threshold: float = 0.5
    resched_target: str = "alloc"
    migration_pause_s: float = 60.0
    max_span: int = 1
    gang_rule: str = "consolidate"
    spread_penalty: float = 1.0
    gang_one_model: bool = False
    round_s: float = 0.0
    restart_overhead_s: tuple = (0.0,)
    restart_above_gpus: tuple = ()
    restart_guard: bool = True
    round_ends_early: bool = False
    round_reset_s: float = 0.0
    round_model_order: tuple = ()
    settled_rounds: str = "decided"
    tiresias_thresholds_gpu_s: tuple = TIRESIAS_THRESHOLDS_GPU_S
    tiresias_promote_knob: float = 0.0
    walk_slots: int = 512

    def __post_init__(self):
        def bad(field, why):
            raise ValueError(f"EnvConfig.{field} = {getattr(self, field)!r}: {why}")

        # Hashable tuples (a TOML array is a list; a number is one constant cost).
        costs = self.restart_overhead_s
        object.__setattr__(self, "restart_overhead_s", tuple(costs) if isinstance(costs, (list, tuple)) else (costs,))
        for field in ("restart_above_gpus", "tiresias_thresholds_gpu_s", "round_model_order"):
            if isinstance(getattr(self, field), list):
                object.__setattr__(self, field, tuple(getattr(self, field)))

        for field, allowed in (("mode", MODES), ("queue_order", QUEUE_ORDERS),
                               ("gpu_rule", GPU_RULES), ("tie_break", TIE_BREAKS),
                               ("reward", REWARDS)):
            if getattr(self, field) not in allowed:
                bad(field, f"must be one of {allowed}")
        for field in ("window", "queue_capacity", "running_capacity", "walk_slots"):
            if not isinstance(getattr(self, field), int) or getattr(self, field) < 1:
                bad(field, "must be a positive integer")
        if isinstance(self.window, int) and self.window > 31:
            bad("window", "must be <= 31 (the window's fit is kept as one int32 bit per slot)")
        if self.queue_capacity < self.window:
            bad("queue_capacity", f"must be >= window ({self.window})")
        if not isinstance(self.backfill, bool):
            bad("backfill", "must be true or false")
        if not self.reserve_after_s >= 0:
            bad("reserve_after_s", "must be a number >= 0 (+inf: no reservations)")
        for field in ("warmup_jobs", "measured_jobs", "fgd_table"):
            if not isinstance(getattr(self, field), int) or getattr(self, field) < 0:
                bad(field, "must be an integer >= 0")
        if self.static and (self.warmup_jobs or self.measured_jobs):
            bad("warmup_jobs" if self.warmup_jobs else "measured_jobs",
                "static mode measures the whole episode (the FGD protocol): leave it 0")
        if not self.reward_scale >= 0:
            bad("reward_scale", "must be >= 0")
        if not (self.reward_gpu_price >= 0 and np.isfinite(self.reward_gpu_price)):
            bad("reward_gpu_price", "must be a finite number >= 0")
        if self.reward_gpu_price > 0 and self.reward != "placed_jct":
            bad("reward_gpu_price", 'prices placements, so it needs reward = "placed_jct"')
        if not (self.resched_interval_s >= 0 and np.isfinite(self.resched_interval_s)):
            bad("resched_interval_s", "must be a finite number >= 0 (0 = no rescheduling)")
        if not isinstance(self.resched_max_moves, int) or self.resched_max_moves < 1:
            bad("resched_max_moves", "must be a positive integer")
        if not 0 <= self.resched_util_threshold <= 1:
            bad("resched_util_threshold", "must be in [0, 1]")
        if self.resched_target not in RESCHED_TARGETS:
            bad("resched_target", f"must be one of {RESCHED_TARGETS}")
        if not (self.migration_pause_s >= 0 and np.isfinite(self.migration_pause_s)):
            bad("migration_pause_s", "must be a finite number >= 0")
        if self.rescheduling and self.static:
            bad("resched_interval_s", "rescheduling needs dynamic mode (static jobs never end)")
        if not isinstance(self.max_span, int) or self.max_span < 1:
            bad("max_span", "must be a positive integer (1: every job on one node)")
        if self.gangs and self.static:
            bad("max_span", "gang jobs need dynamic mode (static mode is the FGD protocol: one node per job)")
        if self.gang_rule not in GANG_RULES:
            bad("gang_rule", f"must be one of {GANG_RULES}")
        if self.gang_rule == "helios" and self.gang_one_model:
            bad("gang_rule", '"helios" (Helios\'s placer, for one GPU model) does not mix with gang_one_model')
        if not (0 < self.spread_penalty <= 1):
            bad("spread_penalty", "must be a number in (0, 1]: a gang on several nodes runs at this times its "
                                  "speed (1.0: spanning nodes costs nothing; above 1 it would run faster)")
        if not isinstance(self.gang_one_model, bool):
            bad("gang_one_model", "must be true or false")
        self._check_rounds(bad)

    def _check_rounds(self, bad):
        """The settings of "Preemption and rounds" (docs/semantics.md)."""
        if not (isinstance(self.round_s, numbers.Real) and 0 <= self.round_s < np.inf):
            bad("round_s", "must be a finite number >= 0 (0 = no rounds)")
        costs, above = self.restart_overhead_s, self.restart_above_gpus
        if not (len(costs) >= 1 and all(isinstance(c, numbers.Real) and 0 <= c <= MAX_RESTART_S for c in costs)):
            bad("restart_overhead_s", f"must be one or more numbers >= 0 and <= {MAX_RESTART_S:g} (seconds: "
                "2^24 s, 194 days, where float32 time stops keeping whole seconds)")
        if not isinstance(self.restart_guard, bool):
            bad("restart_guard", "must be true or false")
        if not (isinstance(above, tuple) and len(above) == len(costs) - 1
                and all(isinstance(b, numbers.Integral) and b >= 0 for b in above)
                and all(a < b for a, b in zip(above, above[1:]))):
            bad("restart_above_gpus", "must be increasing integers >= 0, one fewer than restart_overhead_s")
        thresholds = self.tiresias_thresholds_gpu_s
        if not (isinstance(thresholds, tuple)
                and all(isinstance(b, numbers.Real) and 0 < b < np.inf for b in thresholds)
                and all(a < b for a, b in zip(thresholds, thresholds[1:]))):
            bad("tiresias_thresholds_gpu_s", "must be strictly increasing finite numbers > 0 (GPU-seconds)")
        knob = self.tiresias_promote_knob
        if not (isinstance(knob, numbers.Real) and 0 <= knob < np.inf):
            bad("tiresias_promote_knob", "must be a finite number >= 0 (0 = no promotion)")
        if self.rounds and self.static:
            bad("round_s", "rounds need dynamic mode")
        if self.rounds and self.rescheduling:
            bad("round_s", "rounds and rescheduling passes (resched_interval_s > 0) do not mix")
        if not (isinstance(self.round_reset_s, numbers.Real) and 0 <= self.round_reset_s < np.inf):
            bad("round_reset_s", "must be a finite number >= 0 (seconds; 0 = no allocation resets)")
        if not isinstance(self.round_ends_early, bool):
            bad("round_ends_early", "must be true or false")
        if self.settled_rounds not in SETTLED_ROUNDS:
            bad("settled_rounds", f"must be one of {SETTLED_ROUNDS}")
        order = self.round_model_order
        if not (isinstance(order, tuple) and all(isinstance(m, str) and m in MODEL_NAMES for m in order)
                and len(set(order)) == len(order)):
            bad("round_model_order", f"must be distinct GPU model names, each one of {list(MODEL_NAMES)}")
        if self.round_reset_s > 0 and not self.rounds:
            bad("round_reset_s", "allocation resets need rounds (round_s > 0)")
        if self.rounds and self.track_job_classes:
            bad("track_job_classes", "is not kept with rounds (no round policy reads it)")

    @property
    def static(self) -> bool:
        return self.mode == "static"

    @property
    def gangs(self) -> bool:
        """Jobs of k >= 2 whole GPUs may span nodes (``max_span`` > 1)."""
        return self.max_span > 1

    @property
    def resets(self) -> bool:
        """Gavel's allocation resets (``round_reset_s`` > 0, with rounds)."""
        return self.rounds and self.round_reset_s > 0

    @property
    def rescheduling(self) -> bool:
        return self.resched_interval_s > 0

    @property
    def rounds(self) -> bool:
        """Scheduling rounds and preemption (``round_s`` > 0)."""
        return self.round_s > 0

    @property
    def interrupts(self) -> bool:
        """The event loop can stop for a rescheduling pass or a reservation, which run
        outside it (``ClusterEnv._advance``, ``run_interrupt``)."""
        return self.rescheduling or self.reserving

    @property
    def reserving(self) -> bool:
        """Reservations can happen: backfilling, a finite reserve_after_s, dynamic mode."""
        return self.backfill and np.isfinite(self.reserve_after_s) and not self.static and not self.rounds
