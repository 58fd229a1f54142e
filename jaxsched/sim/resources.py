"""Fit tests and GPU choice: which nodes can hold a job, and which GPUs of a node it gets.

All functions are pure and shape-polymorphic over leading axes where noted; nothing here
loops over nodes, GPUs or jobs in Python.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsched.types import GPU_MILLI, Cluster


def node_summary(free_milli):
    """Per-node GPU summaries that make fit tests O(N) per job instead of O(N * G).

    free_milli [..., N, G] int32 -> (max_free [..., N] int32, whole_free [..., N] int32):
    the largest free milli on any GPU, and the number of wholly free GPUs.
    Missing GPUs hold 0 free, so they never count.
    """
    return free_milli.max(-1), (free_milli == GPU_MILLI).sum(-1, dtype=jnp.int32)


def fits(cluster: Cluster, free_cpu, free_mem, max_free, whole_free,
         num_gpu, gpu_milli, cpu_milli, mem_mib, model_mask):
    """Fit mask of jobs x nodes (docs/semantics.md, "Resources and fit").

    Node arrays are [N]; job arrays are [...] (any leading shape, e.g. [K]).
    Returns [..., N] bool: the job fits the node with its current free resources.
    """
    job = lambda x: jnp.asarray(x)[..., None]  # noqa: E731 - broadcast a job field over nodes
    num_gpu, gpu_milli = job(num_gpu), job(gpu_milli)
    model_ok = (job(model_mask) >> cluster.gpu_model) & 1 == 1
    fractional_ok = max_free >= gpu_milli
    whole_ok = whole_free >= num_gpu
    gpu_ok = (num_gpu == 0) | (model_ok & jnp.where(gpu_milli < GPU_MILLI, fractional_ok, whole_ok))
    return cluster.valid & (free_cpu >= job(cpu_milli)) & (free_mem >= job(mem_mib)) & gpu_ok


GPU_RULES = ("best-fit", "first-fit", "random", "fgd", "buddy")


def choose_gpus(free_row, num_gpu, gpu_milli, rule: str, key=None, gpu_scores=None, num_gpus=None):
    """The GPUs of one node a job gets, as a [G] bool mask (docs/semantics.md, "GPU rule").

    free_row [G] int32 free milli of the node's GPUs (missing GPUs: 0).
    Whole-GPU jobs take the lowest-index wholly free GPUs, except under "buddy" (below); a
    fractional job takes one GPU with room chosen by ``rule``: "best-fit" and "buddy" least
    free (lowest index on ties), "first-fit" lowest index, "random" uniform (needs ``key``),
    "fgd" highest ``gpu_scores`` [G] (lowest index on ties; see ``frag.fgd_gpu_scores``).
    "buddy" (docs/schedulers.md, elasticflow) needs ``num_gpus``, the node's GPU count
    (int32 scalar): see ``buddy_pick``. CPU-only jobs take none. The caller guarantees the
    job fits.
    """
    whole_free = free_row == GPU_MILLI
    whole_pick = whole_free & (jnp.cumsum(whole_free) <= num_gpu)
    room = free_row >= gpu_milli
    if rule in ("best-fit", "buddy"):
        best = jnp.argmin(jnp.where(room, free_row, jnp.iinfo(jnp.int32).max))
    elif rule == "first-fit":
        best = jnp.argmax(room)
    elif rule == "random":
        best = jax.random.categorical(key, jnp.where(room, 0.0, -jnp.inf))
    elif rule == "fgd":
        best = jnp.argmax(jnp.where(room, gpu_scores, jnp.iinfo(jnp.int32).min))
    else:
        raise ValueError(f"unknown gpu_rule {rule!r}")
    if rule == "buddy":
        if num_gpus is None:
            raise ValueError('gpu_rule "buddy" needs num_gpus')
        whole_pick = buddy_pick(whole_free, num_gpu, num_gpus, whole_pick)
    fractional_pick = jnp.arange(free_row.shape[-1]) == best
    pick = jnp.where(gpu_milli < GPU_MILLI, fractional_pick, whole_pick)
    return pick & (num_gpu > 0)


def buddy_pick(whole_free, num_gpu, num_gpus, fallback):
    """[G] bool: the buddy rule's GPUs for a job of ``num_gpu`` whole GPUs.

    With b the smallest power of two >= num_gpu, the aligned blocks ``[i*b, (i+1)*b)`` that
    lie within the node's ``num_gpus`` GPUs are tried in index order; the job takes the
    ``num_gpu`` lowest-index wholly free GPUs of the first block holding that many, else
    ``fallback`` (the node's lowest-index wholly free GPUs). whole_free [G] bool.
    b comes from the static powers of two up to G; blocks are compared as [G, G] masks.
    """
    max_gpus = whole_free.shape[-1]
    sizes = 2 ** jnp.arange((max_gpus - 1).bit_length() + 1)  # 1, 2, ..., >= G
    b = jnp.where(sizes >= num_gpu, sizes, sizes[-1]).min()
    block = jnp.arange(max_gpus) // b  # [G] block index of each GPU
    inside = (block + 1) * b <= num_gpus
    free_in_block = ((block[:, None] == block[None, :]) & whole_free[None, :]).sum(-1)  # [G]
    roomy = inside & (free_in_block >= num_gpu)
    take = whole_free & (block == block[jnp.argmax(roomy)])
    take = take & (jnp.cumsum(take) <= num_gpu)
    return jnp.where(roomy.any(), take, fallback)


def bits_to_mask(bits, num_gpus: int):
    """int32 bitmask -> [..., G] bool."""
    return (jnp.asarray(bits)[..., None] >> jnp.arange(num_gpus)) & 1 == 1


def mask_to_bits(mask):
    """[..., G] bool -> int32 bitmask."""
    return (mask.astype(jnp.int32) << jnp.arange(mask.shape[-1])).sum(-1, dtype=jnp.int32)
