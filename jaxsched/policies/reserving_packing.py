"""r&p: Alibaba's Reserving-and-Packing (Weng et al., "MLaaS in the Wild", NSDI '22).

PAI's scheduler reserves the high-end GPUs for tasks with a high GPU demand and packs the
other tasks onto machines with weaker GPUs, with load balancing second. The paper gives the
idea, not the thresholds; this project's reading (docs/schedulers.md, "r&p"):

* **high-end node**: a node with GPUs whose speed is ``>= HIGH_END_SPEED`` (1.0, the V100
  class). With the default speeds (``cluster.DEFAULT_SPEEDS``) that is V100, V100M16,
  V100M32, A10 and G3; P100, T4, G2 and MISC are weak, and so is every node without GPUs
  (on the PAI 2020 machines: V100 and V100M32 against P100, T4 and MISC).
* **high-demand job**: ``num_gpu >= HIGH_DEMAND_GPUS`` (2, i.e. multi-GPU jobs, which always
  take whole GPUs), the jobs that gain most from a fast multi-GPU machine. In the openb
  default pod list they are about 7% of the GPU demand, against 11.5% of the openb GPUs on
  high-end nodes, so the reservation has room for them; a threshold of one whole GPU would
  not: single-GPU jobs are about 64% of the demand and would swamp the high-end nodes.
  Every other job (one GPU or a fraction of one, or CPU-only) is a *low-demand* job.

Score of a feasible node n (higher wins), lexicographic:
  1. its pool: 1 if n is in the job's pool (high-end for high-demand jobs, weak for the
     rest), else 0: a job falls back to the other pool only when nothing in its own fits;
  2. gpu-packing's score (partly used GPUs, then used nodes, then small empty nodes;
     SPEC.md, ``gpu_packing.gpu_packing_scores``; 0 for CPU-only jobs);
  3. load balancing: the less GPU-allocated node, ``alloc840 = used GPU milli * (840 //
     num_gpus)`` (the allocated share of the node's GPUs, exact; 0 without GPUs);
  4. the per-episode rank (``common.best_node``).
Packed into one int32: ``pool * POOL + packing * PACK + (ALLOC840_MAX - alloc840)``.
"""

import jax.numpy as jnp

from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job
from jaxsched.policies.gpu_packing import gpu_packing_scores
from jaxsched.types import GPU_MILLI

HIGH_END_SPEED = 1.0  # nodes at least this fast (V100 = 1.0) are high-end
HIGH_DEMAND_GPUS = 2  # jobs asking for at least this many (whole) GPUs are high-demand

ALLOC840_MAX = 840 * GPU_MILLI  # a full node: 840 = lcm(1..8), so the share is an exact integer
PACK = ALLOC840_MAX + 1  # one gpu-packing point outweighs any load difference
POOL = 101 * PACK  # the pool outweighs any gpu-packing score (0..100)


def high_end_nodes(obs):
    """[N] bool: the node has GPUs and they are at least ``HIGH_END_SPEED`` fast."""
    return (obs.cluster.num_gpus > 0) & (obs.cluster.speed >= HIGH_END_SPEED)


def alloc840(obs):
    """[N] int32: the allocated share of each node's GPUs times 840,000 (0 without GPUs)."""
    c = obs.cluster
    used = jnp.where(c.gpu_exists, GPU_MILLI - obs.free_milli, 0).sum(-1)
    return jnp.where(c.num_gpus > 0, used * (840 // jnp.maximum(c.num_gpus, 1)), 0)


def reserving_packing_scores(obs, job):
    """[N] int32 r&p score of every node for ``job`` (feasibility not applied)."""
    in_pool = high_end_nodes(obs) == (job["num_gpu"] >= HIGH_DEMAND_GPUS)
    return (in_pool.astype(jnp.int32) * POOL + gpu_packing_scores(obs, job) * PACK
            + (ALLOC840_MAX - alloc840(obs))).astype(jnp.int32)


def reserving_packing(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    slot = first_fitting_slot(obs)
    scores = reserving_packing_scores(obs, window_job(obs, slot))
    return place_or_wait(obs, slot, best_node(scores, obs.place_mask[slot], obs.node_rank))
