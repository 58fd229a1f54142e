"""gpu-clustering (the FGD paper's GpuClustering, as published): keep job classes together.

A GPU job's class is "share" (fractional) or "k GPUs" (k whole GPUs). A node's score is
``25 * (8000 - node's free GPU milli) // 8000`` plus 75 if the node hosts only this class,
50 if this class among others, 25 if it hosts no GPU job, 0 if only other classes.
CPU-only jobs score 0 on every node.

Which classes a node hosts is history, not in the free-resource arrays: the env keeps it
exactly when ``EnvConfig.track_job_classes`` is on (the registry entry turns it on) and
passes it as ``obs.node_class_jobs`` (jobs of each class on each node). A gang of k GPUs is
of class "k GPUs" on every node it spans.
"""

import jax.numpy as jnp

from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job
from jaxsched.types import GPU_MILLI

MAX_SPEC_GPU_MILLI = 8000  # the published normaliser (8 GPUs)


def class_index(num_gpu, gpu_milli):
    """int32 column of a GPU job's class in ``node_class_jobs``: 0 "share", k "k GPUs"."""
    share = (num_gpu == 1) & (gpu_milli < GPU_MILLI)
    return jnp.where(share, 0, num_gpu).astype(jnp.int32)


def gpu_clustering_scores(obs, job, class_jobs):
    """[N] int32 GpuClustering score of every node for ``job`` (feasibility not applied);
    ``class_jobs`` [N, C] jobs of each class on each node."""
    c = class_index(job["num_gpu"], job["gpu_milli"])
    used = (MAX_SPEC_GPU_MILLI - obs.free_milli.sum(-1)) * 25 // MAX_SPEC_GPU_MILLI
    columns = jnp.arange(class_jobs.shape[-1])
    hosts_mine = ((columns == c) & (class_jobs > 0)).any(-1)  # a class past C is hosted nowhere
    hosts_other = ((columns != c) & (class_jobs > 0)).any(-1)
    bonus = jnp.where(hosts_mine, jnp.where(hosts_other, 50, 75), jnp.where(hosts_other, 0, 25))
    return jnp.where(job["num_gpu"] == 0, 0, used + bonus).astype(jnp.int32)


def gpu_clustering(params, obs, key):
    """policy(params, obs, key) -> flat action (needs ``EnvConfig.track_job_classes``)."""
    del params, key
    slot = first_fitting_slot(obs)
    scores = gpu_clustering_scores(obs, window_job(obs, slot), obs.node_class_jobs)
    return place_or_wait(obs, slot, best_node(scores, obs.place_mask[slot], obs.node_rank))
