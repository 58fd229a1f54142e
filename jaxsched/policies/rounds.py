"""Round policies (docs/semantics.md, "Preemption and rounds"): with rounds
(``EnvConfig.round_s`` > 0) a policy is ``policy(params, state, key) -> priority [J] float32``,
read for the queued and running jobs only: higher runs first, ties to the lower job index;
NaN or -inf holds a job back. ``ClusterEnv.step_round`` takes the priorities.
"""

from __future__ import annotations

from jaxsched.sim.rounds import attained_now, remaining_now


def las(params, state, key):
    """Least attained service: the fewest GPU-seconds held so far first (a job not yet run
    has 0; CPU-only jobs hold no GPU, so they always come first)."""
    return -attained_now(state)[1]


def srtf(params, state, key):
    """Shortest remaining time first, from the oracle remaining work (reference-speed seconds)."""
    return -remaining_now(state)
