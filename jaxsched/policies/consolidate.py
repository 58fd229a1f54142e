"""consolidate: gangs on the fewest nodes, then best-fit (the node rule that DL-training
simulators such as Gavel, Tiresias and Blox compare with spreading a job out).

docs/schedulers.md, "consolidate". The first window slot that fits goes to the feasible node
that can hold the most of its GPUs, min(cap, num_gpu) (``sim.gangs.caps``; only jobs of >= 2
whole GPUs, which may span nodes, count them), so a job that fits one node alone lands there
and a gang's anchor takes the biggest part; ties: the top best-fit score, then rank. The env
pairs it with the gang rule "consolidate" (the rest of the gang on the nodes of most capacity).
"""

import jax.numpy as jnp

from jaxsched.policies.best_fit import best_fit_scores
from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job
from jaxsched.sim import gangs


def gpus_held(obs, job):
    """[N] int32: how many of ``job``'s GPUs each node can hold now, min(cap, num_gpu) for a
    job of >= 2 whole GPUs, 0 for the others."""
    whole_free = (obs.free_milli == 1000).sum(-1, dtype=jnp.int32)
    cap = gangs.caps(obs.cluster, obs.free_cpu, obs.free_mem, whole_free, job["num_gpu"], job["cpu_milli"],
                     job["mem_mib"], job["model_mask"])
    return jnp.where(job["num_gpu"] >= 2, jnp.minimum(cap, job["num_gpu"]), 0)


def consolidate(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    slot = first_fitting_slot(obs)
    job = window_job(obs, slot)
    held = gpus_held(obs, job)
    feasible = obs.place_mask[slot]
    most = feasible & (held == jnp.where(feasible, held, -1).max())
    return place_or_wait(obs, slot, best_node(best_fit_scores(obs, job), most, obs.node_rank))
