"""``hlo_bytes``: the in-place count charges an update or a read of one entry that entry, a
whole-array select the array, and a rollout-style loop its body; XLA's own count charges the
whole array either way."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsched import hlo_bytes

B, Q = 8, 1024  # episodes, entries of each episode's array (int32: 4 KB)
ARRAY = Q * 4


def compiled(f, *args):
    return jax.jit(f, donate_argnums=0).lower(*args).compile()


def per_episode(program, **kw) -> float:
    return sum(hlo_bytes.inplace_bytes(program.as_text(), **kw).values()) / B


ARR, IDX, VAL, ACTIVE = (jnp.zeros((B, Q), jnp.int32), jnp.arange(B, dtype=jnp.int32),
                         jnp.ones(B, jnp.int32), jnp.arange(B) % 2 == 0)


def test_one_entry_written_or_read_is_charged_the_entry_not_the_array():
    write = compiled(jax.vmap(lambda a, i, v: a.at[i].set(v)), ARR, IDX, VAL)
    read = compiled(jax.vmap(lambda a, i: (a, a[i])), ARR, IDX)
    for program in (write, read):
        assert per_episode(program) < 0.02 * ARRAY
        assert hlo_bytes.xla_bytes(program) / B >= ARRAY  # XLA's count: the whole array


def test_a_masked_whole_array_select_is_charged_the_array_read_and_written():
    select = compiled(jax.vmap(lambda a, i, v, m: jnp.where(m, a.at[i].set(v), a)), ARR, IDX, VAL, ACTIVE)
    assert per_episode(select) >= 2 * ARRAY


def test_loop_body_counts_one_iteration_of_the_entry_loop():
    def run(a):
        def body(carry):
            a, t = carry
            return jnp.where(t % 2 == 0, a + 1, a), t + 1  # a whole-array pass an iteration
        return jax.lax.while_loop(lambda c: c[1] < 10, body, (a, 0))[0]

    program = jax.jit(run).lower(ARR).compile()
    body = per_episode(program, loop_body=True)
    assert 2 * ARRAY <= body < 4 * ARRAY
    assert per_episode(program) >= body


def test_shape_bytes_sums_tuple_elements():
    assert hlo_bytes.shape_bytes("(f32[64,1024]{1,0}, pred[3], s16[2,2])") == 64 * 1024 * 4 + 3 + 8
