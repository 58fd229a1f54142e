"""Moving a run of an array's entries one place along: the queue's removals and sorted inserts,
and the running set's ring read one place along (its inserts and removals); ``put``, the masked
one-entry write they and the queue's appends use.

One episode alone (an unbatched trace, as XLA:CPU runs each episode's loop, devices.py) moves
only the run, a loop of single writes: O(hi - lo). Under ``jax.vmap`` that loop would run as
long as the batch's longest run, and ``while_loop``'s batching rule selects every episode's
whole array at each iteration (a [B, Q] select per entry moved). Batched, a shift is instead
one masked pass over the array (``custom_vmap``, as ``when_due``): one kernel that reads and
writes the array once, whatever the run's length (results/gpu/loop_bytes.md). The ring's reads
are ``jnp.roll`` alone and a pad of a slice batched, which XLA:CPU fuses into the select that
uses it. Each pair gives the same array.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


def _batch(axis_size, in_batched, *args):
    """The arguments with the batch axis in front of every one."""
    return [x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))) for x, b in zip(args, in_batched)]


def along(arr, step: int, wrap: bool = False):
    """[..., Q] ``arr`` read one place along the last axis: entry i holds arr[i + step], step
    +1 or -1; the entry with none holds 0, or with ``wrap`` the other end's (a ring). A pad
    of a slice: XLA:CPU fuses it into the select that reads it (``jnp.roll``'s concatenate,
    it does not; a gather it transposes under ``vmap``)."""
    edge = (0, 1) if step > 0 else (1, 0)
    out = jnp.pad(arr[..., 1:] if step > 0 else arr[..., :-1], [(0, 0)] * (arr.ndim - 1) + [edge])
    if not wrap:
        return out
    i = jnp.arange(arr.shape[-1])
    return jnp.where(i == (arr.shape[-1] - 1 if step > 0 else 0), arr[..., :1] if step > 0 else arr[..., -1:], out)


def _ring(step: int):
    """[R] ring read one place along (entry i holds arr[(i + step) % R]): ``jnp.roll`` alone
    (what one episode's loop compiled to before), ``along`` batched."""
    @custom_vmap
    def read(arr):
        return jnp.roll(arr, -step)

    @read.def_vmap
    def _batched(axis_size, in_batched, arr):
        return along(*_batch(axis_size, in_batched, arr), step, wrap=True), True

    return read


ring_next, ring_prev = _ring(1), _ring(-1)


def put(arr, i, x, active):
    """``arr`` with entry i set to x when ``active`` (i clipped into range). A plain dynamic
    update of one entry, so XLA updates the array in place: ``.at[i].set(x, mode="drop")``
    fuses a select into the update and copies the whole array at every event."""
    i = jnp.clip(i, 0, arr.shape[0] - 1)
    return arr.at[i].set(jnp.where(active, x, arr[i]))


@custom_vmap
def shift_down(arr, lo, hi, fill):
    """[Q] ``arr`` with entries lo+1 .. hi-1 moved to lo .. hi-2 and entry hi-1 set to
    ``fill`` (nothing when hi <= lo; 0 <= lo, hi <= Q)."""
    arr = jax.lax.fori_loop(lo, hi - 1, lambda i, a: a.at[i].set(a[i + 1]), arr)
    return put(arr, hi - 1, fill, hi > lo)


@shift_down.def_vmap
def _shift_down_batched(axis_size, in_batched, arr, lo, hi, fill):
    arr, lo, hi, fill = _batch(axis_size, in_batched, arr, lo, hi, fill)
    i = jnp.arange(arr.shape[-1])
    lo, hi, fill = lo[:, None], hi[:, None], jnp.asarray(fill, arr.dtype)[:, None]
    moved = jnp.where((i >= lo) & (i < hi - 1), along(arr, 1), arr)
    return jnp.where((i == hi - 1) & (hi > lo), fill, moved), True


@custom_vmap
def shift_up(arr, lo, hi):
    """[Q] ``arr`` with entries lo .. hi-1 moved to lo+1 .. hi (nothing when hi <= lo;
    0 <= lo, hi < Q); entry lo keeps its value."""
    return jax.lax.fori_loop(0, hi - lo, lambda n, a: a.at[hi - n].set(a[hi - n - 1]), arr)


@shift_up.def_vmap
def _shift_up_batched(axis_size, in_batched, arr, lo, hi):
    arr, lo, hi = _batch(axis_size, in_batched, arr, lo, hi)
    i = jnp.arange(arr.shape[-1])
    return jnp.where((i > lo[:, None]) & (i <= hi[:, None]), along(arr, -1), arr), True
