"""``when_due``: rare env work skipped under vmap unless some episode of the batch is due."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched.sim.when_due import when_due


def due(state):
    return state["due"]


def masked_add(state, params):
    """Adds ``params`` to ``x`` of a due episode only, as the env's passes mask their work."""
    return {**state, "x": state["x"] + jnp.where(state["due"], params, 0.0)}


def unmasked_add(state, params):
    """Adds to every episode: shows which episodes the work ran on."""
    return {**state, "x": state["x"] + params}


def batch(dues):
    return {"due": jnp.asarray(dues), "x": jnp.zeros(len(dues))}


def test_unbatched_call_runs_the_work_only_when_due():
    for flag, expected in ((True, 2.0), (False, 0.0)):
        out = jax.jit(lambda s: when_due(due, unmasked_add, s, 2.0))({"due": jnp.bool_(flag), "x": 0.0})
        assert float(out["x"]) == expected


def test_batched_call_runs_the_work_on_the_whole_batch_only_when_some_episode_is_due():
    step = jax.jit(jax.vmap(lambda s: when_due(due, unmasked_add, s, 1.0)))
    # None due: skipped for all. One due: run once for the whole batch (a per-episode select
    # would have left the second episode at 0).
    np.testing.assert_array_equal(step(batch([False, False]))["x"], [0.0, 0.0])
    np.testing.assert_array_equal(step(batch([True, False]))["x"], [1.0, 1.0])


def test_nested_vmaps_skip_the_work_unless_some_episode_of_the_whole_batch_is_due():
    step = jax.jit(jax.vmap(jax.vmap(lambda s: when_due(due, unmasked_add, s, 1.0))))
    runs = lambda dues: {"due": jnp.asarray(dues), "x": jnp.zeros((2, 2))}  # noqa: E731
    np.testing.assert_array_equal(step(runs([[False, False], [False, False]]))["x"], np.zeros((2, 2)))
    # One episode of one run due: the work runs once for every run's every episode.
    np.testing.assert_array_equal(step(runs([[False, False], [True, False]]))["x"], np.ones((2, 2)))


def test_masked_work_gives_the_per_episode_results_batched_or_not():
    dues = [True, False, True]
    params = jnp.asarray([1.0, 2.0, 3.0])
    batched = jax.jit(jax.vmap(lambda s, p: when_due(due, masked_add, s, p)))(batch(dues), params)
    one = jax.jit(lambda s, p: when_due(due, masked_add, s, p))
    alone = [float(one({"due": jnp.bool_(d), "x": jnp.float32(0.0)}, p)["x"]) for d, p in zip(dues, params)]
    np.testing.assert_array_equal(batched["x"], alone)
    np.testing.assert_array_equal(batched["x"], [1.0, 0.0, 3.0])
    # An argument not batched (params shared by the batch) is broadcast.
    shared = jax.jit(jax.vmap(lambda s: when_due(due, masked_add, s, 5.0)))(batch(dues))
    np.testing.assert_array_equal(shared["x"], [5.0, 0.0, 5.0])
