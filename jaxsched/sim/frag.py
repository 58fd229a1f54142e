"""FGD fragmentation (Weng et al., ATC '23), shared by the env, its metrics and policies.

For node n with free GPU milli f_g, free CPU c and a job class m of the target workload:
m fits the node's GPUs iff it needs a GPU, its model is allowed, c >= cpu_m and at least
num_gpu_m GPUs have f_g >= gpu_milli_m. Then F_n(m) = sum of f_g over GPUs too small for m
(f_g < gpu_milli_m); otherwise (CPU-only class included) F_n(m) = all idle GPU milli of n.
F_n = sum_m p_m F_n(m); cluster F = sum_n F_n.

F_n(m) are integers, and p_m = weight_m / total weight with integer weights
(``FragClasses.weight``), so F_n and its changes are computed as one exact int32 sum
sum_m weight_m F_n(m) and a single float division: the same value whatever the order XLA
sums in, hence the same in any batch shape, with one reduction instead of an ordered tree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsched.sim.reduce import sum_last
from jaxsched.types import GPU_MILLI, FragClasses


def class_frag(free_milli, free_cpu, gpu_model, classes: FragClasses):
    """F_n(m) of every class, exact: [..., M] int32 (milli-GPU).

    free_milli [..., G] int32 (missing GPUs hold 0), free_cpu [...] int32, gpu_model [...] int32.
    Cost O(G * M) per node.
    """
    f = free_milli[..., None, :]  # [..., 1, G]
    need = classes.gpu_milli[:, None]  # [M, 1]
    enough = (f >= need) & (need > 0)  # [..., M, G]
    model_ok = (classes.model_mask >> gpu_model[..., None]) & 1 == 1  # [..., M]
    fits = ((classes.num_gpu > 0) & model_ok & (free_cpu[..., None] >= classes.cpu_milli)
            & (sum_last(enough.astype(jnp.int32)) >= classes.num_gpu))
    too_small = sum_last(jnp.where(f < need, f, 0))  # [..., M]
    idle = sum_last(free_milli)[..., None]  # [..., 1]
    return jnp.where(fits, too_small, idle)


def weighted_frag(per_class, classes: FragClasses, axis: int = -1):
    """sum_m p_m x_m of integer per-class milli x [..., M] -> [...] float32, summed exactly in
    int32 (``axis``: where the class axis is; ``classes.weight`` must broadcast along it)."""
    return frag_milli(jnp.sum(per_class * classes.weight, axis), classes)


def frag_milli(weighted, classes: FragClasses):
    """An exact int32 sum_m weight_m x_m -> sum_m p_m x_m (float32 milli): one rounding."""
    total = jnp.maximum(jnp.sum(classes.weight), 1).astype(jnp.float32)  # no classes: 0, not NaN
    # Times the reciprocal, not a division: XLA turns some divisions by a loop-invariant into
    # that product and not others, which would make the last bit depend on the code path.
    return weighted.astype(jnp.float32) * (1.0 / total)


def node_frag(free_milli, free_cpu, gpu_model, classes: FragClasses):
    """F_n = sum_m p_m F_n(m) for any number of nodes (shapes as ``class_frag``) -> [...] float32."""
    return weighted_frag(class_frag(free_milli, free_cpu, gpu_model, classes), classes)


def frag_drop(class_before, class_after, classes: FragClasses, axis: int = -1):
    """F_n(before) - F_n(after) from exact per-class F_n(m) [..., M] -> [...] float32 (class
    axis last by default).

    Summed from integer per-class differences, so an unchanged F_n is exactly 0 (the fgd
    policy and GPU rule both score this way). ``axis``: where the class axis is.
    """
    return weighted_frag(class_before - class_after, classes, axis)


def fgd_score(frag_before, frag_after):
    """FGD's published integer node score: int(100 * sigmoid((F_before - F_after) / 1000))."""
    return (100.0 * jax.nn.sigmoid((frag_before - frag_after) / 1000.0)).astype(jnp.int32)


def fgd_gpu_scores(free_row, free_cpu_before, free_cpu_after, gpu_model, gpu_milli,
                   classes: FragClasses):
    """[G] int32 FGD score of putting a fractional job (``gpu_milli``) on each GPU of one node.

    free_row [G] int32 free milli before; free_cpu_before / free_cpu_after [] the node's free
    CPU before and once the job's CPU is taken. Scored exactly as the fgd policy scores the
    node (``frag_drop``). GPUs without room get meaningless scores: mask them.
    """
    g = free_row.shape[-1]
    rows = free_row[None, :] - jnp.eye(g, dtype=free_row.dtype) * gpu_milli  # [G, G]: GPU g used
    before = class_frag(free_row, free_cpu_before, gpu_model, classes)  # [M]
    after = class_frag(rows, jnp.broadcast_to(free_cpu_after, (g,)), jnp.broadcast_to(gpu_model, (g,)),
                       classes)  # [G, M]
    return fgd_score(frag_drop(before, after, classes), 0.0)


NO_ROOM = jnp.iinfo(jnp.int32).min  # a fractional job's drop (and score) on a node with no GPU room


def node_drops(free_row, gpu_exists, free_cpu, gpu_model, classes: FragClasses, num_gpu, gpu_milli,
               cpu_milli, fractional: bool, tried: int | None = None):
    """[S] int32: how much placing each of S job shapes on one node lowers sum_m weight_m
    F_n(m), exact: the same integers as the fgd policy's pass over every node
    (``policies.fgd.fgd_drops``), for the env's table of them (``EnvConfig.fgd_table``).

    free_row, gpu_exists [G] (int32, bool); free_cpu, gpu_model []; num_gpu, gpu_milli,
    cpu_milli [S] int32. ``fractional`` (static): every shape is one GPU and < 1000 milli, and
    the node's drop is its best GPU's with room (``NO_ROOM`` if none), GPUs tried directly
    ([S, G, M]: a job on GPU g changes the classes whose gpu_milli lies in (f_g - d, f_g] or
    above f_g); else every shape is whole-GPU or CPU-only ([S, M]). ``tried``: fractional
    only, try the first ``tried`` GPUs alone (all by default; a node whose GPUs are all
    alike needs one). Feasibility not applied.
    """
    need = classes.gpu_milli  # [M]
    f, has = free_row[:, None], gpu_exists[:, None]  # [G, 1]
    enough = (has & (f >= need) & (need > 0)).sum(0, dtype=jnp.int32)  # [M] GPUs with room
    too_small = jnp.where(has & (f < need), f, 0).sum(0)  # [M] milli on GPUs without
    idle = free_row.sum()
    static_fit = (classes.num_gpu > 0) & ((classes.model_mask >> gpu_model) & 1 == 1)  # [M]
    w = classes.weight
    before = jnp.where(static_fit & (free_cpu >= classes.cpu_milli) & (enough >= classes.num_gpu),
                       too_small, idle)
    weighted_before = (before * w).sum()  # exact int32 (types.MAX_FRAG_WEIGHT)
    d = gpu_milli[:, None]  # [S, 1]
    fits_cpu_after = static_fit & (free_cpu - cpu_milli[:, None] >= classes.cpu_milli)  # [S, M]
    if not fractional:  # k wholly free GPUs (1000 >= any class's gpu_milli) become 0 (a gang's
        # anchor: the ones it has)
        whole = (gpu_exists & (free_row == GPU_MILLI)).sum()
        k = jnp.minimum(jnp.where(d < GPU_MILLI, 0, num_gpu[:, None]), whole)
        after = jnp.where(fits_cpu_after & (enough - k * (need > 0) >= classes.num_gpu), too_small,
                          idle - k * GPU_MILLI)
        return weighted_before - (after * w).sum(-1)
    row, exists = free_row[:tried], gpu_exists[:tried]  # [G'] the GPUs tried
    fg, dg = row[None, :, None], d[:, :, None]  # [1, G', 1], [S, 1, 1]
    loses = (fg - dg < need) & (need <= fg)  # [S, G', M] GPU g loses room for class m
    was_small = fg < need  # [1, G', M] it was too small for m already
    after = jnp.where(fits_cpu_after[:, None, :] & (enough - loses >= classes.num_gpu),
                      too_small + (fg - dg) * loses - dg * was_small, idle - dg)
    drop = weighted_before - (after * w).sum(-1)  # [S, G']
    return jnp.where(exists & (row >= d), drop, NO_ROOM).max(-1)
