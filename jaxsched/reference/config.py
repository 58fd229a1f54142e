"""The reference simulator's settings (``RefConfig``) and the published scores' fixed maxima."""

from __future__ import annotations

import dataclasses
import math

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
    gang_rule: str = "consolidate"  # "consolidate" | "spread" | "helios" (Helios's placer; not with gang_one_model)
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
    # The restart guard (semantics.md, "The restart guard"): a job that restarted with a cost
    # c > 0 keeps its GPUs until it has run c seconds past it (False: none, Helios's SRTF).
    restart_guard: bool = True
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
            (self.gang_rule in ("consolidate", "spread", "helios") and not (
                self.gang_rule == "helios" and self.gang_one_model), f"gang_rule {self.gang_rule!r}"),
            (0 < self.spread_penalty <= 1, f"spread_penalty {self.spread_penalty}"),
            (0 <= self.round_s < math.inf, f"round_s {self.round_s} (a finite number >= 0; 0 = no rounds)"),
            (self.round_s == 0 or self.mode == "dynamic", "round_s > 0 in static mode"),
            (self.round_s == 0 or self.resched_interval_s == 0,
             "round_s > 0 with resched_interval_s > 0 (rounds and rescheduling passes do not mix)"),
            (len(costs) >= 1 and all(0 <= c <= 2.0 ** 24 for c in costs),
             f"restart_overhead_s {costs} (numbers >= 0 and <= 2^24 s)"),
            (isinstance(self.restart_guard, bool), f"restart_guard {self.restart_guard!r} (true or false)"),
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
ROUND_SETTINGS = ("round_s", "restart_overhead_s", "restart_above_gpus", "restart_guard",
                  "tiresias_thresholds_gpu_s", "tiresias_promote_knob", "round_reset_s", "round_ends_early", "round_model_order")
