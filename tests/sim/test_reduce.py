"""sim/reduce.py: nonzero_indices is jnp.nonzero with a size, on both of its paths."""

import hypothesis as hyp
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
from hypothesis import given

from jaxsched.sim.reduce import nonzero_indices


@hyp.settings(max_examples=40, deadline=None)
@given(mask=st.lists(st.booleans(), min_size=1, max_size=3000),
       size=st.sampled_from([1, 3, 64, 1024, 1025, 3100]), fill=st.sampled_from([-1, 0, 7]))
def test_nonzero_indices_equals_jnp_nonzero(mask, size, fill):
    # 1,024 outputs or fewer: a binary search per output; more: one scatter (both exact)
    mask = jnp.asarray(mask)
    expected = jnp.nonzero(mask, size=size, fill_value=fill)[0]
    got = nonzero_indices(mask, size, fill)
    assert got.dtype == jnp.int32 and got.shape == (size,)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
