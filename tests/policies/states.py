"""Hand-made observations for policy tests: a tiny cluster whose free resources are set by hand.

Every test module uses the same shapes (N_NODES x G_MAX, window 1, M_CLASSES classes), so a
jitted policy compiles once per module.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched import cluster as cl
from jaxsched.sim import ClusterEnv, EnvConfig, resources
from jaxsched.types import ALL_MODELS, GPU_MILLI, EnvParams, FragClasses, jobs_from_numpy, to_device

N_NODES, G_MAX, M_CLASSES = 4, 8, 5
ENV = ClusterEnv(EnvConfig(mode="static", window=1, queue_capacity=1, running_capacity=1,
                           tie_break="identity"))
_reset = jax.jit(ENV.reset)


def frag_classes(rows):
    """FragClasses from (cpu_milli, gpu_milli, num_gpu, weight) rows, padded to M_CLASSES."""
    rows = list(rows) + [(0, 0, 0, 0)] * (M_CLASSES - len(rows))
    cpu, gpu, num, weight = (np.asarray(c) for c in zip(*rows))
    return FragClasses(cpu_milli=cpu.astype(np.int32), gpu_milli=gpu.astype(np.int32),
                       num_gpu=num.astype(np.int32), model_mask=np.full(M_CLASSES, ALL_MODELS, np.int32),
                       weight=weight.astype(np.int32))


DEFAULT_CLASSES = frag_classes([(1000, 500, 1, 1)])


def cluster(num_gpus=(8, 8, 2, 1), cpu_milli=(96000, 96000, 32000, 8000), model="G2"):
    """A padded ``Cluster`` (numpy) of N_NODES nodes, all of one GPU model."""
    table = cl.NodeTable(
        names=tuple(f"n{i}" for i in range(len(num_gpus))),
        model=np.full(len(num_gpus), cl.model_id(model), np.int32),
        num_gpus=np.asarray(num_gpus, np.int32), cpu_milli=np.asarray(cpu_milli, np.int32),
        mem_mib=np.full(len(num_gpus), 1 << 20, np.int32))
    return cl.to_cluster(table, pad_nodes=N_NODES, max_gpus=G_MAX)


def observe(job, free_milli=None, free_cpu=None, *, clus=None, classes=DEFAULT_CLASSES,
            node_rank=None):
    """The observation of one window job ``job`` = (num_gpu, gpu_milli, cpu_milli) on a cluster
    whose free GPU milli [N, G] (rows may be shorter: missing GPUs) and free CPU [N] are given
    (default: empty cluster). node_rank defaults to the identity."""
    clus = cluster() if clus is None else clus
    num_gpu, gpu_milli, cpu_milli = job
    jobs = jobs_from_numpy([0.0], [1.0], [num_gpu], [gpu_milli], [cpu_milli], [1024])
    _, obs = _reset(jax.random.key(0), to_device(EnvParams(clus, classes)), to_device(jobs))
    exists = np.asarray(clus.gpu_exists)
    if free_milli is None:
        free = np.where(exists, GPU_MILLI, 0)
    else:
        free = np.zeros((N_NODES, G_MAX), np.int32)
        for n, row in enumerate(free_milli):
            free[n, :len(row)] = row
        assert not (free[~exists] != 0).any(), "free milli given for a GPU that does not exist"
    cpu = np.asarray(clus.cpu_milli) if free_cpu is None else np.asarray(free_cpu, np.int32)
    free, cpu = jnp.asarray(free, jnp.int32), jnp.asarray(cpu, jnp.int32)
    c = to_device(clus)
    max_free, whole_free = resources.node_summary(free)
    mask = resources.fits(c, cpu, obs.free_mem, max_free, whole_free, obs.job_num_gpu,
                          obs.job_gpu_milli, obs.job_cpu_milli, obs.job_mem_mib, obs.job_model_mask)
    rank = jnp.arange(N_NODES, dtype=jnp.int32) if node_rank is None else jnp.asarray(node_rank, jnp.int32)
    return obs.replace(free_milli=free, free_cpu=cpu, place_mask=mask, node_rank=rank,
                       frag_node=jnp.zeros(N_NODES, jnp.float32))


def chosen_node(action, obs):
    """The node a flat place action picks (asserts it is a place action for slot 0)."""
    action = int(action)
    n = obs.place_mask.shape[1]
    assert 0 <= action < n, f"not a place action for slot 0: {action}"
    return action


def observe_window(window_jobs, free_milli=None, free_cpu=None, **kwargs):
    """``observe`` with a window of several jobs, each (num_gpu, gpu_milli, cpu_milli), in
    queue order (every other window field as the first job's; the flat action mask is not
    rebuilt: policies read ``place_mask``)."""
    obs = observe(window_jobs[0], free_milli, free_cpu, **kwargs)
    k = len(window_jobs)
    num_gpu, gpu_milli, cpu_milli = (jnp.asarray(c, jnp.int32) for c in zip(*window_jobs))
    widen = lambda x: jnp.broadcast_to(x[:1], (k,) + x.shape[1:])  # noqa: E731
    obs = obs.replace(**{f: widen(getattr(obs, f)) for f in (
        "window_job", "job_mem_mib", "job_model_mask", "job_work_s", "job_wait_s", "job_deadline_s")})
    max_free, whole_free = resources.node_summary(obs.free_milli)
    mask = resources.fits(obs.cluster, obs.free_cpu, obs.free_mem, max_free, whole_free, num_gpu,
                          gpu_milli, cpu_milli, obs.job_mem_mib, obs.job_model_mask)
    return obs.replace(window_job=jnp.arange(k, dtype=jnp.int32), job_num_gpu=num_gpu,
                       job_gpu_milli=gpu_milli, job_cpu_milli=cpu_milli, place_mask=mask)
