"""Float sums whose result does not depend on the batch shape.

XLA may sum a float axis in a different order when the same episode runs in a batch of 1,
of 64 or on another device, which changes the last bits. Per-episode results must not depend
on how a batch is split, so float sums in the simulator go through ``ordered_sum``: a fixed
pairwise tree of elementwise adds, which every batch shape computes identically.
"""

from __future__ import annotations

import jax.numpy as jnp


def ordered_sum(x, axis: int = -1):
    """Sum over ``axis`` by a fixed pairwise tree (zero-padded to a power of two)."""
    x = jnp.moveaxis(x, axis, -1)
    n = x.shape[-1]
    size = 1 << max(n - 1, 0).bit_length()
    if size != n:
        x = jnp.concatenate([x, jnp.zeros((*x.shape[:-1], size - n), x.dtype)], axis=-1)
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]
