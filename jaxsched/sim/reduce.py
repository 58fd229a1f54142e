"""Sums that behave: float sums whose result does not depend on the batch shape, sums
over a short last axis that vectorise, and the index list of a mask by a fast prefix sum.

XLA may sum a float axis in a different order when the same episode runs in a batch of 1,
of 64 or on another device, which changes the last bits. Per-episode results must not depend
on how a batch is split, so float sums in the simulator go through ``ordered_sum``: a fixed
pairwise tree of elementwise adds, which every batch shape computes identically. Integer
sums are exact in any order and need no such care, which is why FGD fragmentation, summed
at every event, is kept in integers (``sim/frag.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def ordered_sum(x, axis: int = -1):
    """Sum over ``axis`` by a fixed pairwise tree (zero-padded to a power of two).

    The pairs are sliced along ``axis`` where it lies, so a leading axis sums whole
    contiguous slabs (no transpose).
    """
    axis = axis % x.ndim
    n = x.shape[axis]
    size = 1 << max(n - 1, 0).bit_length()
    if size != n:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (0, size - n)
        x = jnp.pad(x, pad)
    while x.shape[axis] > 1:
        x = (jax.lax.slice_in_dim(x, 0, None, 2, axis) + jax.lax.slice_in_dim(x, 1, None, 2, axis))
    return jnp.squeeze(x, axis)


def sum_last(x):
    """Sum over a short last axis (a node's GPUs, at most 8) as elementwise adds of its slices.

    In a loop compiled into one kernel (``devices.py``), XLA:CPU vectorises these adds over
    the leading axes, and a reduction over a minor axis of 8 less well: faster where it is
    used, the per-class sums of ``frag.class_frag`` ([M, G] per event; the A/B in
    docs/performance.md, "What made it fast"). Tried in the FGD policy's [M, N, G] sums and the
    env's [N, G] idle total, it was slower, so those keep ``sum``. Exact for integers.
    """
    total = x[..., 0]
    for i in range(1, x.shape[-1]):
        total = total + x[..., i]
    return total


def nonzero_indices(mask, size: int, fill_value):
    """[size] int32: ``jnp.nonzero(mask, size=size, fill_value=fill_value)[0]`` of a 1-D mask,
    the indices of its True entries ascending, then ``fill_value``; the first ``size`` if more.

    One prefix sum by ``lax.associative_scan`` (``jnp.cumsum`` lowers to a slow reduce-window
    on XLA:CPU), then for a few outputs a binary search of each, for many one scatter: at 8,000
    entries 2 to 4 times faster than ``jnp.nonzero`` on the CPU (a round's bookkeeping runs
    over every job of the episode)."""
    count = jax.lax.associative_scan(jnp.add, mask.astype(jnp.int32))  # [M] True entries up to each
    if size <= 1024:
        index = jnp.searchsorted(count, jnp.arange(1, size + 1, dtype=jnp.int32), side="left", method="scan")
        return jnp.where(jnp.arange(size) < count[-1], index, fill_value).astype(jnp.int32)
    slot = jnp.where(mask & (count <= size), count - 1, size)
    out = jnp.full(size, fill_value, jnp.int32)
    return out.at[slot].set(jnp.arange(mask.shape[0], dtype=jnp.int32), mode="drop")
