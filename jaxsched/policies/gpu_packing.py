"""gpu-packing (the FGD paper's GpuPacking, as published): fill partly used GPUs, then used
nodes, then the smallest empty nodes.

Tiers (higher wins; ties by rank):
  1. the tightest GPU that fits a fractional job is already partly used (free < 1000):
     ``max(100 - (free * 100 // 1000) // 10, 50)`` with ``free`` that GPU's free milli;
  2. the node has some used GPU, and the job needs wholly free ones:
     ``max(50 - wholly free GPUs taken, 33)`` (a fractional job on a free GPU takes 1);
  3. every GPU of the node is free: ``max(33 - n_gpus, n_gpus)``, smaller nodes first.
CPU-only jobs score 0 on every node (CPU use does not count as GPU use).
"""

import jax.numpy as jnp

from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job
from jaxsched.types import GPU_MILLI


def gpu_packing_scores(obs, job):
    """[N] int32 GpuPacking score of every node for ``job`` (feasibility not applied)."""
    exists = obs.cluster.gpu_exists
    free = obs.free_milli  # [N, G]
    n_gpus = obs.cluster.num_gpus
    whole_free = ((free == GPU_MILLI) & exists).sum(-1)
    all_free = whole_free == n_gpus
    tier3 = jnp.maximum(33 - n_gpus, n_gpus)
    fractional = job["gpu_milli"] < GPU_MILLI
    tightest = jnp.where(exists & (free >= job["gpu_milli"]), free, GPU_MILLI).min(-1)  # [N]
    tier1 = jnp.maximum(100 - (tightest * 100 // GPU_MILLI) // 10, 50)
    taken = jnp.where(fractional, 1, job["num_gpu"])
    tier2 = jnp.maximum(50 - taken, 33)
    used_node = jnp.where(fractional & (tightest < GPU_MILLI), tier1, tier2)
    score = jnp.where(all_free, tier3, used_node)
    return jnp.where(job["num_gpu"] > 0, score, 0).astype(jnp.int32)


def gpu_packing(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    slot = first_fitting_slot(obs)
    scores = gpu_packing_scores(obs, window_job(obs, slot))
    return place_or_wait(obs, slot, best_node(scores, obs.place_mask[slot], obs.node_rank))
