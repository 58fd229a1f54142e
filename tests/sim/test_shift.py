"""``sim.shift``: a run of entries moved one place, the same array batched (one masked pass)
or alone (a loop of single writes), and the same as the plain list operation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched.sim.shift import along, ring_next, ring_prev, shift_down, shift_up

Q = 12


def expected_down(arr, lo, hi, fill):
    out = list(arr)
    if hi > lo:
        out[lo:hi - 1] = arr[lo + 1:hi]
        out[hi - 1] = fill
    return out


def expected_up(arr, lo, hi):
    out = list(arr)
    if hi > lo:
        out[lo + 1:hi + 1] = arr[lo:hi]
    return out


def cases():
    """Every (lo, hi) of a Q-entry array: empty runs, runs of one, runs to the end."""
    rng = np.random.default_rng(0)
    runs = [(lo, hi) for lo in range(Q) for hi in range(Q + 1)]
    arrs = rng.integers(0, 100, size=(len(runs), Q)).astype(np.int32)
    lo, hi = (np.asarray(x, np.int32) for x in zip(*runs))
    return arrs, lo, hi


def test_shift_down_batched_alone_and_by_hand_agree():
    arrs, lo, hi = cases()
    batched = jax.jit(jax.vmap(shift_down, in_axes=(0, 0, 0, None)))(arrs, lo, hi, -1)
    alone = jax.jit(shift_down)
    for b in range(len(lo)):
        want = expected_down(arrs[b], lo[b], hi[b], -1)
        np.testing.assert_array_equal(batched[b], want, err_msg=f"batched, lo={lo[b]} hi={hi[b]}")
        np.testing.assert_array_equal(alone(arrs[b], lo[b], hi[b], -1), want, err_msg=f"alone, lo={lo[b]} hi={hi[b]}")


def test_shift_up_batched_alone_and_by_hand_agree():
    arrs, lo, hi = cases()
    keep = hi < Q  # (entry hi must exist)
    arrs, lo, hi = arrs[keep], lo[keep], hi[keep]
    batched = jax.jit(jax.vmap(shift_up))(arrs, lo, hi)
    alone = jax.jit(shift_up)
    for b in range(len(lo)):
        want = expected_up(arrs[b], lo[b], hi[b])
        np.testing.assert_array_equal(batched[b], want, err_msg=f"batched, lo={lo[b]} hi={hi[b]}")
        np.testing.assert_array_equal(alone(arrs[b], lo[b], hi[b]), want, err_msg=f"alone, lo={lo[b]} hi={hi[b]}")


def test_nested_vmaps_and_a_batched_fill_give_the_same_arrays():
    arrs, lo, hi = cases()
    fills = jnp.arange(len(lo), dtype=jnp.int32) + 1000
    flat = jax.vmap(shift_down)(arrs, lo, hi, fills)
    nested = jax.vmap(jax.vmap(shift_down))(*(x.reshape(2, -1, *x.shape[1:]) for x in (arrs, lo, hi, fills)))
    np.testing.assert_array_equal(nested.reshape(flat.shape), flat)
    for b in (0, 5, len(lo) - 1):
        np.testing.assert_array_equal(flat[b], expected_down(arrs[b], lo[b], hi[b], int(fills[b])))


def test_along_reads_the_neighbour_with_and_without_wrapping():
    a = jnp.arange(5)
    np.testing.assert_array_equal(along(a, 1), [1, 2, 3, 4, 0])
    np.testing.assert_array_equal(along(a, -1), [0, 0, 1, 2, 3])
    np.testing.assert_array_equal(along(a, 1, wrap=True), jnp.roll(a, -1))
    np.testing.assert_array_equal(along(a, -1, wrap=True), jnp.roll(a, 1))
    rows = jnp.arange(10).reshape(2, 5)
    np.testing.assert_array_equal(along(rows, -1, wrap=True), jnp.roll(rows, 1, axis=-1))


def test_ring_reads_roll_batched_or_alone():
    rows = jnp.arange(24).reshape(4, 6)
    np.testing.assert_array_equal(jax.vmap(ring_next)(rows), jnp.roll(rows, -1, axis=-1))
    np.testing.assert_array_equal(jax.vmap(ring_prev)(rows), jnp.roll(rows, 1, axis=-1))
    np.testing.assert_array_equal(jax.jit(ring_prev)(rows[1]), jnp.roll(rows[1], 1))
