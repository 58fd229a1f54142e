"""The registry of schedulers: a name -> (policy function, GPU rule the env applies).

A policy is ``policy(params, obs, key) -> flat action`` (see ``sim.env``); heuristics take
``params=None``. Add your own by writing such a function and registering it here.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jaxsched.policies.best_fit import best_fit
from jaxsched.policies.first_fit import first_fit


@dataclasses.dataclass(frozen=True)
class Scheduler:
    """A registry entry: the node rule (a policy) and the GPU rule inside the node."""

    name: str
    policy: Callable
    gpu_rule: str = "best-fit"
    description: str = ""


REGISTRY = {
    s.name: s for s in (
        Scheduler("first-fit", first_fit, "best-fit", "lowest-index feasible node"),
        Scheduler("best-fit", best_fit, "best-fit", "FGD paper's BestFit: least CPU+GPU leftover"),
    )
}


def get(name: str) -> Scheduler:
    """Look a scheduler up by name, with a helpful error."""
    if name not in REGISTRY:
        raise KeyError(f"unknown scheduler {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name]
