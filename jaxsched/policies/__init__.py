"""The registry of schedulers: a name -> (policy function, GPU rule the env applies).

A policy is ``policy(params, obs, key) -> flat action`` (see ``sim.env``); heuristics take
``params=None``. Add your own by writing such a function and registering it here.
Definitions: ../shared/SPEC.md, "Heuristic schedulers"; the project's exact readings of
elasticflow, hops, r&p's thresholds and rescheduling (whose internals are not public):
docs/schedulers.md.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax

from jaxsched.policies.best_fit import best_fit
from jaxsched.policies.consolidate import consolidate
from jaxsched.policies.dot_product import dot_product
from jaxsched.policies.elasticflow import elasticflow
from jaxsched.policies.fgd import fgd
from jaxsched.policies.fgd_window import fgd_window
from jaxsched.policies.fifo import fifo
from jaxsched.policies.first_fit import first_fit
from jaxsched.policies.gpu_clustering import gpu_clustering
from jaxsched.policies.gpu_packing import gpu_packing
from jaxsched.policies.hops import hops
from jaxsched.policies.random_node import random_node
from jaxsched.policies import rounds
from jaxsched.policies.reserving_packing import reserving_packing
from jaxsched.policies.rounds import (fifo_perf, gavel_fifo, helios_srtf, las, las_gpu, las_perf, priority, srtf,
                                      tiresias)
from jaxsched.policies.sjf import sjf
from jaxsched.policies.spread import spread
from jaxsched.rollout import TURNS


@dataclasses.dataclass(frozen=True)
class Scheduler:
    """A registry entry: the node rule (a policy), the GPU rule inside the node, and what
    it needs from the env: a queue order (None: the run's, FIFO by default), per-node job
    classes, rescheduling passes (the run's settings if it turns them on, else DRR's
    published interval, ``DRR_RESCHED_INTERVAL_S``); and the rollout loop that runs it
    fastest (``turns``, see ``rollout.rollout``): turn by turn for cheap policies, stepping
    for costly ones (results/bench/rollout_schedule.md); ``env_changes``, any other env
    settings it needs (a trained agent's rescheduling passes). ``round_policy``: a round
    policy (priorities at every round, ``ClusterEnv.step_round``): its env has rounds (the
    run's ``round_s``, else Gavel's ``ROUND_S``); every other scheduler's env has none
    (``round_s`` 0: flat actions, event-driven), so one run compares both kinds."""

    name: str
    policy: Callable
    gpu_rule: str = "best-fit"
    description: str = ""
    queue_order: str | None = None
    track_job_classes: bool = False
    rescheduling: bool = False
    turns: int | None = TURNS
    env_changes: tuple = ()  # further (EnvConfig field, value) pairs, e.g. a learner's rescheduling
    round_policy: bool = False

    def env_config(self, config):
        """``config`` (an ``EnvConfig``) with what this scheduler needs applied."""
        changes = {"gpu_rule": self.gpu_rule, **dict(self.env_changes)}
        if self.queue_order is not None:
            changes["queue_order"] = self.queue_order
        if self.track_job_classes:
            changes["track_job_classes"] = True
        if self.rescheduling and not config.rescheduling:
            changes["resched_interval_s"] = DRR_RESCHED_INTERVAL_S
        changes["round_s"] = (config.round_s or ROUND_S) if self.round_policy else 0.0
        changes["round_reset_s"] = config.round_reset_s if self.round_policy else 0.0
        settled = dict(self.env_changes).get("settled_rounds", "decided")
        if config.settled_rounds not in ("decided", settled):
            why = ("cannot skip rounds (its order moves between events)" if settled == "decided"
                   else f"skips them as {settled!r}")
            able = sorted(n for n, s in REGISTRY.items()
                          if dict(s.env_changes).get("settled_rounds") == config.settled_rounds)
            raise ValueError(f"env.settled_rounds = {config.settled_rounds!r}: scheduler {self.name!r} {why}; "
                             f"only {able} skip them so")
        return dataclasses.replace(config, **changes)

    def bound_policy(self, config):
        """The policy to run in the env of ``env_config(config)``: a round policy with its
        ``RoundSettings`` (that env's round length and Tiresias settings) bound as params;
        any other scheduler's policy as it is."""
        if not self.round_policy:
            return self.policy
        return rounds.with_settings(self.policy, rounds.settings(self.env_config(config)))


# Job shapes of each kind in fgd's drop table (``EnvConfig.fgd_table``): the openb pod lists
# have at most 39 fractional and 52 other shapes; a shape beyond is scored the slow way.
FGD_TABLE = 64

# DRR's published ``--re_time``; its ``--re_num 5`` and ``--util_threshold 0.5`` are the
# EnvConfig defaults (resched_max_moves, resched_util_threshold).
DRR_RESCHED_INTERVAL_S = 3600.0
# A round policy's rounds when the run sets none (env.round_s = 0): Gavel's round length
# (``time_per_iteration``; Blox uses 300 s).
ROUND_S = 360.0


# The strict queue of the field's FIFO and SJF (Helios's simulator, Tiresias): only the queue's
# first job may start (a window of one, no backfilling), ties to the lowest node index.
STRICT = (("window", 1), ("backfill", False), ("tie_break", "identity"))

REGISTRY = {
    s.name: s for s in (
        Scheduler("first-fit", first_fit, "best-fit", "lowest-index feasible node"),
        Scheduler("best-fit", best_fit, "best-fit", "FGD paper's BestFit: least CPU+GPU leftover"),
        Scheduler("random", random_node, "random", "uniform over feasible nodes, random GPU"),
        Scheduler("spread", spread, "best-fit", "most CPU+GPU leftover (load balancing); gangs spread",
                  env_changes=(("gang_rule", "spread"),)),
        Scheduler("consolidate", consolidate, "best-fit",
                  "gangs on the fewest nodes (the node holding most of the job), then best-fit",
                  env_changes=(("gang_rule", "consolidate"),)),
        Scheduler("dot-product", dot_product, "best-fit",
                  "FGD paper's DotProd: smallest dot product of free and requested CPU/GPU"),
        Scheduler("gpu-packing", gpu_packing, "best-fit",
                  "FGD paper's GpuPacking: partly used GPUs, then used nodes, then small empty nodes"),
        Scheduler("gpu-clustering", gpu_clustering, "best-fit",
                  "FGD paper's GpuClustering: nodes hosting the same job class",
                  track_job_classes=True),
        Scheduler("fgd", fgd, "fgd", "Fragmentation Gradient Descent (Weng et al., ATC '23)",
                  turns=None, env_changes=(("fgd_table", FGD_TABLE),)),
        Scheduler("fgd-window", fgd_window, "fgd",
                  "FGD over the window: of the window's jobs on their FGD nodes, the one that "
                  "removes the most fragmentation per GPU milli", turns=None,
                  env_changes=(("fgd_table", FGD_TABLE),)),
        Scheduler("fifo", fifo, "best-fit",
                  "strict arrival order, no backfill (Gavel's FIFO): a GPU model drawn uniformly "
                  "among those with room, its lowest-index node", queue_order="fifo",
                  env_changes=(("backfill", False),)),
        Scheduler("sjf", sjf, "best-fit", "shortest work first, best-fit placement", queue_order="sjf"),
        Scheduler("fifo-strict", best_fit, "best-fit",
                  "the field's strict FIFO (Helios, Tiresias): the queue's head on its best-fit node, "
                  "or nothing; no window, no backfilling, ties to the lowest node", queue_order="fifo",
                  env_changes=STRICT),
        Scheduler("sjf-strict", best_fit, "best-fit",
                  "the field's strict SJF (Helios): the shortest queued job on its best-fit node, "
                  "or nothing; no window, no backfilling, ties to the lowest node", queue_order="sjf",
                  env_changes=STRICT),
        Scheduler("r&p", reserving_packing, "best-fit",
                  "Alibaba's Reserving-and-Packing (NSDI '22): high-end GPUs for multi-GPU jobs, "
                  "the rest packed on weaker GPUs, load balancing second"),
        Scheduler("pack-resched", gpu_packing, "best-fit",
                  "gpu-packing plus DRR's periodic migration pass", rescheduling=True),
        Scheduler("elasticflow", elasticflow, "buddy",
                  "ElasticFlow-style: deadline admission control, EDF, buddy GPU blocks",
                  queue_order="edf"),
        Scheduler("hops", hops, "best-fit",
                  "Hops-style: fill GPU fragments smallest first, else latency-ratio fairness "
                  "with speed vs packing weighted by queue pressure", queue_order="fifo"),
        Scheduler("las", las, "best-fit",
                  "round policy, Gavel's LAS: max-min fair share over time received; preempts, first-fit",
                  turns=None, round_policy=True),
        Scheduler("las-perf", las_perf, "best-fit",
                  "round policy, Gavel's heterogeneity-aware LAS: max-min fairness over the "
                  "throughput matrix (an LP on the host), a priority per (job, GPU model); preempts, first-fit; "
                  "a gang on one type, as Gavel's", turns=None, round_policy=True,
                  env_changes=(("gang_one_model", True),)),
        Scheduler("gavel-fifo", gavel_fifo, "best-fit",
                  "round policy, Gavel's FIFO as its code runs: a GPU type per job in arrival order "
                  "(its FIFO's type rule, over-subscription included), the type's jobs time-share it "
                  "by time received, in-round backfilling; a gang on one type, as Gavel's",
                  turns=None, round_policy=True, env_changes=(("gang_one_model", True),)),
        Scheduler("fifo-perf", fifo_perf, "best-fit",
                  "round policy, Gavel's heterogeneity-aware FIFO (Gavel-FIFO, fifo_perf): in arrival order each "
                  "GPU job gets the GPU type of highest throughput among those with its GPUs free, never "
                  "over-subscribed; strict FIFO across types; a gang on one type, as Gavel's",
                  turns=None, round_policy=True, env_changes=(("gang_one_model", True),)),
        Scheduler("las-gpu", las_gpu, "best-fit",
                  "round policy, least attained GPU-time first (Tiresias's continuous 2D-LAS); "
                  "preempts, first-fit", turns=None, round_policy=True),
        Scheduler("tiresias", tiresias, "best-fit",
                  "round policy, Tiresias's discretized 2D-LAS: GPU-time queues, FIFO in a queue, "
                  "starved jobs promoted; preempts, first-fit", turns=None, round_policy=True),
        Scheduler("srtf", srtf, "best-fit",
                  "round policy, shortest remaining time first (oracle sizes); preempts, first-fit",
                  turns=None, round_policy=True, env_changes=(("settled_rounds", "skipped"),)),
        Scheduler("helios-srtf", helios_srtf, "best-fit",
                  "round policy, Helios's SRTF as its code runs (SC '21): by time left (restart cost included), "
                  "jobs taken while their GPUs fit the cluster's total count, the running ones not taken "
                  "preempted, the queued ones taken placed best-fit where they fit", turns=None, round_policy=True,
                  env_changes=(("settled_rounds", "skipped-by-policy"),)),
        Scheduler("priority", priority, "best-fit",
                  "round policy, priority classes (openb's qos): a higher class preempts lower ones, "
                  "running first and FIFO in a class; first-fit", turns=None, round_policy=True,
                  env_changes=(("settled_rounds", "skipped"),)),
    )
}


@functools.lru_cache(maxsize=None)
def warmed_up(policy: Callable, warmup_policy: Callable) -> Callable:
    """A policy that lets ``warmup_policy`` (a heuristic: no params) take the decisions of
    the warm-up, before the first measured job arrives (``obs.measure_from_s``), and
    ``policy`` every later one: schedulers compared after one common warm-up, and a learned
    scheduler that is trained and run on a loaded cluster without playing its warm-up
    (``eval.warmup_scheduler``, ``train.warmup_scheduler``). Cached: the same pair gives the
    same function, so jitted rollouts compile once."""
    def policy_after_warmup(params, obs, key):
        return jax.lax.cond(obs.time_s < obs.measure_from_s, lambda: warmup_policy(None, obs, key),
                            lambda: policy(params, obs, key))
    return policy_after_warmup


def get(name: str) -> Scheduler:
    """Look a scheduler up by name, with a helpful error."""
    if name not in REGISTRY:
        raise KeyError(f"unknown scheduler {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]


def get_flat(name: str, role: str) -> Scheduler:
    """``get`` for a use that needs flat actions (a warm-up, a teacher: ``role``), refusing a
    round policy with a one-line error."""
    sched = get(name)
    if sched.round_policy:
        flat = sorted(n for n, s in REGISTRY.items() if not s.round_policy)
        raise ValueError(f"{role} {name!r} is a round policy; it must take flat actions: one of {flat}")
    return sched


def flat_names() -> tuple:
    """The registered schedulers that take flat actions (every one but the round policies)."""
    return tuple(n for n, s in REGISTRY.items() if not s.round_policy)
