"""spread: the opposite of best-fit, the node left with the most CPU and GPU (load balancing).

Node score ``int(100 * sum_r w_r (free_r - req_r) / max_r)`` over r in {CPU milli, total free
GPU milli}, w = 0.5 each, maxima 128,000 and 8,000 (best-fit's terms with the sign flipped).
"""

import jax
import jax.numpy as jnp

from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job


def spread_scores(obs, job):
    """[N] int32 spread score of every node for ``job`` (feasibility not applied).

    Exact integer form: 100 * leftover = (100 * cpu_left + 1,600 * gpu_left) / 256,000,
    truncated toward zero (both terms are >= 0 on feasible nodes).
    """
    cpu_left = obs.free_cpu - job["cpu_milli"]
    gpu_left = obs.free_milli.sum(-1) - job["num_gpu"] * job["gpu_milli"]
    return jax.lax.div(100 * cpu_left + 1_600 * gpu_left, jnp.int32(256_000))


def spread(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    slot = first_fitting_slot(obs)
    scores = spread_scores(obs, window_job(obs, slot))
    return place_or_wait(obs, slot, best_node(scores, obs.place_mask[slot], obs.node_rank))
