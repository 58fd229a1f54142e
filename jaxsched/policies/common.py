"""Pieces every heuristic shares: which window job to take, and tie-broken node choice.

SPEC.md: heuristics take the first job of the window (in queue order) that fits somewhere
(they backfill within the window) and place it by their node rule; among the top-scoring
feasible nodes the lowest per-episode rank wins.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxsched import actions
from jaxsched.types import Observation


def first_fitting_slot(obs: Observation):
    """Index of the first window slot whose job fits some node (0 if none does)."""
    return jnp.argmax(obs.place_mask.any(-1))


def window_job(obs: Observation, slot):
    """The request of window slot ``slot`` as a dict of scalars."""
    return {
        "num_gpu": obs.job_num_gpu[slot], "gpu_milli": obs.job_gpu_milli[slot],
        "cpu_milli": obs.job_cpu_milli[slot], "mem_mib": obs.job_mem_mib[slot],
        "model_mask": obs.job_model_mask[slot], "work_s": obs.job_work_s[slot],
    }


def can_run_empty(obs: Observation):
    """[K, N] bool: window job k can run on node n of the *empty* cluster (docs/schedulers.md):
    n is valid, has the CPU and memory capacity, and the job is CPU-only or the node's model
    is allowed and it has at least ``num_gpu`` GPUs. A job that no node can hold alone (a
    gang) can run on the nodes that can hold one GPU's part of it."""
    c = obs.cluster
    num_gpu = obs.job_num_gpu[:, None]
    model_ok = (obs.job_model_mask[:, None] >> c.gpu_model) & 1 == 1
    gpu_ok = (num_gpu == 0) | (model_ok & (c.num_gpus >= num_gpu))
    alone = (c.valid & (c.cpu_milli >= obs.job_cpu_milli[:, None])
             & (c.mem_mib >= obs.job_mem_mib[:, None]) & gpu_ok)
    per_gpu = lambda x: (x[:, None] + num_gpu - 1) // jnp.maximum(num_gpu, 1)  # noqa: E731
    part = (c.valid & model_ok & (c.num_gpus >= 1) & (c.cpu_milli >= per_gpu(obs.job_cpu_milli))
            & (c.mem_mib >= per_gpu(obs.job_mem_mib)))
    return alone | (~alone.any(-1, keepdims=True) & (num_gpu >= 2) & part)


def best_node(scores, feasible, node_rank):
    """Feasible node with the highest score; ties go to the lowest rank. scores [N] (int or float)."""
    top = jnp.where(feasible, scores, -jnp.inf).max()
    tied = feasible & (scores == top)
    return jnp.argmin(jnp.where(tied, node_rank, jnp.iinfo(jnp.int32).max))


def place_or_wait(obs: Observation, slot, node):
    """Flat action placing ``slot`` on ``node``, or wait when nothing in the window fits."""
    num_slots, num_nodes = obs.place_mask.shape
    return jnp.where(obs.place_mask.any(), actions.place(slot, node, num_nodes),
                     actions.wait(num_slots, num_nodes)).astype(jnp.int32)
