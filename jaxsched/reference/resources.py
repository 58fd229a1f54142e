"""One job's request as Python scalars (``_Job``) and the fit and fragmentation tests of one node."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxsched.types import GPU_MILLI


class _Job(NamedTuple):
    """One job's request, as Python scalars (times already float32)."""

    arrival_s: np.float32
    work_s: np.float32
    num_gpu: int
    gpu_milli: int
    cpu_milli: int
    mem_mib: int
    model_mask: int
    deadline_s: np.float32
    job_type: int  # column of the cluster's type_speed
    qos_class: int  # priority class, higher = more important (the priority round policy)


def _model_allowed(model_mask: int, gpu_model: int) -> bool:
    # Python ints shift arithmetically, so ALL_MODELS (-1) allows every model.
    return (model_mask >> gpu_model) & 1 == 1


def _is_fractional(num_gpu: int, gpu_milli: int) -> bool:
    return num_gpu == 1 and gpu_milli < GPU_MILLI


def _job_fits(job: _Job, gpu_model: int, free_cpu: int, free_mem: int, free_gpus: list[int]) -> bool:
    """Resource fit of ``job`` on one valid node with the given free resources.

    ``free_gpus`` holds the free milli of the node's existing GPUs only.
    """
    if free_cpu < job.cpu_milli or free_mem < job.mem_mib:
        return False
    if job.num_gpu == 0:
        return True
    if not _model_allowed(job.model_mask, gpu_model):
        return False
    if _is_fractional(job.num_gpu, job.gpu_milli):
        return any(free >= job.gpu_milli for free in free_gpus)
    return sum(free == GPU_MILLI for free in free_gpus) >= job.num_gpu


def node_fragmentation(free_gpus: list[int], free_cpu: int, gpu_model: int, classes: list[tuple]) -> float:
    """FGD fragmentation F_n of one node, in milli-GPU (semantics.md, last section).

    ``classes`` holds ``(cpu_milli, gpu_milli, num_gpu, model_mask, prob)`` tuples.
    A class that cannot use the node's GPUs at all (CPU-only, wrong model, too little CPU
    or too few GPUs with room) sees every idle milli as fragmented.
    """
    idle_milli = sum(free_gpus)
    frag = 0.0
    for cpu_m, gpu_milli_m, num_gpu_m, mask_m, prob_m in classes:
        usable = (
            num_gpu_m > 0
            and _model_allowed(mask_m, gpu_model)
            and free_cpu >= cpu_m
            and sum(free >= gpu_milli_m for free in free_gpus) >= num_gpu_m
        )
        if usable:
            frag_m = sum(free for free in free_gpus if free < gpu_milli_m)
        else:
            frag_m = idle_milli
        frag += prob_m * frag_m
    return frag
