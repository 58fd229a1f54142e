"""dot-product (the FGD paper's DotProd, in the configuration the paper ran; Tetris-style).

Node vector ``[free CPU / 128000, total free GPU milli / 8000]`` dotted with the job's
``[CPU / 128000, total GPU milli / 8000]``; score ``int(100 * (1 - dot / 2))``, no rescaling,
so the *smallest* dot product wins (ties by rank). GPUs then by best fit.
"""

import jax.numpy as jnp

from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job

# 100 * dot / 2 = (cpu_free * cpu_req + 256 * gpu_free * gpu_req) / DOT_DENOM exactly.
DOT_DENOM = 327_680_000  # 128,000^2 / 50


def dot_product_scores(obs, job):
    """[N] int32 DotProd score of every node for ``job`` (feasibility not applied).

    score = 100 - ceil(X / DOT_DENOM) with X = cpu_free * cpu_req + 256 * gpu_free * gpu_req,
    an integer up to ~3.3e10. It is computed exactly without int64: round a float32
    estimate k of X / DOT_DENOM, then X - k * DOT_DENOM (|.| < DOT_DENOM, so it fits int32)
    is exact in wrapping int32 arithmetic and says whether X / DOT_DENOM is above k.
    """
    cpu_free, gpu_free = obs.free_cpu, obs.free_milli.sum(-1)
    cpu_req, gpu_req = job["cpu_milli"], job["num_gpu"] * job["gpu_milli"]
    estimate = (cpu_free.astype(jnp.float32) * cpu_req.astype(jnp.float32)
                + 256.0 * gpu_free.astype(jnp.float32) * gpu_req.astype(jnp.float32)) / DOT_DENOM
    k = jnp.round(estimate).astype(jnp.int32)
    excess = cpu_free * cpu_req + 256 * gpu_free * gpu_req - k * DOT_DENOM  # wraps to the exact value
    return 100 - (k + (excess > 0))


def dot_product(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    slot = first_fitting_slot(obs)
    scores = dot_product_scores(obs, window_job(obs, slot))
    return place_or_wait(obs, slot, best_node(scores, obs.place_mask[slot], obs.node_rank))
