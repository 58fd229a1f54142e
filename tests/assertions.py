"""Assertions shared by the tests."""

import jax
import numpy as np

from jaxsched.errors import DataError


def assert_trees_equal_to_rounding(got, want, rtol=1e-6):
    """Two pytrees are equal: integers, booleans and keys exactly, floats to float32 rounding.

    For the same episodes run by two compiled programs (batched and alone, chunked, sharded):
    XLA may evaluate ``a + b * c`` with or without a fused multiply-add, so float sums can
    differ in their last bit (1e-7 relative), while every count, outcome and placement may not.
    """
    got_leaves, got_def = jax.tree.flatten(got)
    want_leaves, want_def = jax.tree.flatten(want)
    assert got_def == want_def, f"{got_def} != {want_def}"
    for path_and_leaf, g in zip(jax.tree_util.tree_flatten_with_path(want)[0], got_leaves):
        path, w = path_and_leaf
        name = jax.tree_util.keystr(path)
        if jax.dtypes.issubdtype(getattr(w, "dtype", None), jax.dtypes.prng_key):
            g, w = jax.random.key_data(g), jax.random.key_data(w)
        g, w = np.asarray(g), np.asarray(w)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


def assert_names(err: DataError, path, line, field):
    """The message names the file, the 1-based line and the field, and so do the attributes."""
    assert err.path == str(path)
    assert err.row == line
    assert err.field == field
    where = f"{path}"
    if line is not None:
        where += f", line {line}"
    if field is not None:
        where += f", field '{field}'"
    assert str(err).startswith(where + ": "), str(err)
