"""best-fit (the FGD paper's BestFit, as published): least leftover CPU and GPU.

Node score ``int(100 * (1 - sum_r w_r (free_r - req_r) / max_r))`` over r in {CPU milli,
total free GPU milli}, w = 0.5 each, maxima 128,000 and 8,000. The published plugin then
min-max rescales scores to 0..100 across feasible nodes; that map is monotone and sends
only the top score to 100, so it never changes the winner and is left out.
"""

import jax
import jax.numpy as jnp

from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job


def best_fit_scores(obs, job):
    """[N] int32 BestFit score of every node for ``job`` (feasibility not applied).

    Exact integer form of the formula: with the weights and maxima above,
    100 * (1 - leftover) = (25,600,000 - 100 * cpu_left - 1,600 * gpu_left) / 256,000,
    truncated toward zero like Go's int(); float32 would round some scores across an integer.
    """
    cpu_left = obs.free_cpu - job["cpu_milli"]
    gpu_left = obs.free_milli.sum(-1) - job["num_gpu"] * job["gpu_milli"]
    numerator = 25_600_000 - 100 * cpu_left - 1_600 * gpu_left
    return jax.lax.div(numerator, jnp.int32(256_000))


def best_fit(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    slot = first_fitting_slot(obs)
    scores = best_fit_scores(obs, window_job(obs, slot))
    return place_or_wait(obs, slot, best_node(scores, obs.place_mask[slot], obs.node_rank))
