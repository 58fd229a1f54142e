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

Layout, one concern a module: ``config.py`` (``RefConfig``), ``resources.py`` (a job's request
and one node's fit), ``sim.py`` (``ReferenceSim``: the episode's state, its decisions, queue and
clock), which mixes in ``gangs.py`` (a job's GPUs over nodes), ``rounds.py`` (running
segments, rounds, preemption) and ``metrics.py`` (``results``); ``heuristics.py`` (the
schedulers' node and window rules, ``heuristic_action``) and ``round_policies.py``
(``ROUND_POLICIES``); ``run`` below plays one episode.
"""

from __future__ import annotations

from typing import Callable

from jaxsched.reference.config import ROUND_SETTINGS, RefConfig
from jaxsched.reference.heuristics import NODE_RULES, WINDOW_RULES, _fgd_int_score, heuristic_action
from jaxsched.reference.resources import node_fragmentation
from jaxsched.reference.round_policies import ROUND_POLICIES, max_min_shares
from jaxsched.reference.sim import ReferenceSim

__all__ = ["NODE_RULES", "ROUND_POLICIES", "ROUND_SETTINGS", "WINDOW_RULES", "RefConfig", "ReferenceSim",
           "_fgd_int_score", "heuristic_action", "max_min_shares", "node_fragmentation", "run"]


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
