"""hops: Hops-style (SoCC '24) heterogeneity-aware scheduling with fragment filling.

docs/schedulers.md, "hops". FIFO queue, best-fit GPU rule; the policy picks the slot itself
among the window slots whose job fits somewhere:
  1. fill fragments, smallest first: a *filler* is a fractional job that fits a node with a
     partly used GPU (existing, free < 1000) holding free >= its gpu_milli. The filler with
     the least gpu_milli (ties: earlier slot) goes to the node whose tightest such GPU has
     the least free milli (ties: rank); the best-fit GPU rule then puts it on that GPU;
  2. otherwise latency-ratio fairness: the slot with the largest ``(wait + work) /
     max(work, 1)`` (float32; ties: earlier slot) goes to the node with the highest integer
     ``(K - q) * speed_score + q * best_fit_score``, q = min(queue_len, K) the queue
     pressure, ``speed_score = floor(100 * speed / best_speed)`` (float32; best_speed the
     fastest node the job can run on; 0 for CPU-only jobs); ties: rank;
  3. if nothing fits: wait.
"""

import jax.numpy as jnp

from jaxsched.policies.best_fit import best_fit_scores
from jaxsched.policies.common import best_node, can_run_empty, place_or_wait, window_job
from jaxsched.types import GPU_MILLI


def tightest_fragment(obs):
    """[K, N] int32: the least free milli among node n's partly used GPUs with room for window
    job k's gpu_milli (GPU_MILLI where there is none)."""
    free = obs.free_milli[None]  # [1, N, G]
    fragment = obs.cluster.gpu_exists & (free < GPU_MILLI) & (free >= obs.job_gpu_milli[:, None, None])
    return jnp.where(fragment, free, GPU_MILLI).min(-1)


def pressure_scores(obs, job, can_run):
    """[N] int32 ``(K - q) * speed_score + q * best_fit_score`` of every node for ``job``;
    can_run [N] bool: the nodes the job can run on (they fix best_speed)."""
    window = obs.window_job.shape[0]
    q = jnp.minimum(obs.queue_len, window)
    speed = obs.cluster.speed
    best_speed = jnp.where(can_run, speed, 0.0).max()
    speed_score = jnp.floor(100 * speed / best_speed).astype(jnp.int32)
    speed_score = jnp.where(job["num_gpu"] > 0, speed_score, 0)
    return (window - q) * speed_score + q * best_fit_scores(obs, job)


def hops(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    fractional = (obs.job_num_gpu == 1) & (obs.job_gpu_milli < GPU_MILLI)  # [K]
    tightest = tightest_fragment(obs)  # [K, N]
    fills = obs.place_mask & fractional[:, None] & (tightest < GPU_MILLI)  # [K, N]
    filler = fills.any(-1)
    filler_slot = jnp.argmin(jnp.where(filler, obs.job_gpu_milli, jnp.iinfo(jnp.int32).max))
    filler_node = best_node(-tightest[filler_slot], fills[filler_slot], obs.node_rank)

    ratio = (obs.job_wait_s + obs.job_work_s) / jnp.maximum(obs.job_work_s, 1.0)  # [K]
    fair_slot = jnp.argmax(jnp.where(obs.place_mask.any(-1), ratio, -jnp.inf))
    scores = pressure_scores(obs, window_job(obs, fair_slot), can_run_empty(obs)[fair_slot])
    fair_node = best_node(scores, obs.place_mask[fair_slot], obs.node_rank)

    use_filler = filler.any()
    return place_or_wait(obs, jnp.where(use_filler, filler_slot, fair_slot),
                         jnp.where(use_filler, filler_node, fair_node))
