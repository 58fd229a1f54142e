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
from jaxsched.types import FragClasses


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
