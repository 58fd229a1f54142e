"""The gymnax env's reset bank, its handling of non-integer actions, and the adapters for
outside trainers (``jaxsched.gymnax_env``, ``jaxsched.gymnax_adapters``) on a tiny cluster."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import gymnax_adapters, gymnax_env

TINY = dict(num_nodes=4, num_jobs=12, load=0.9, window=2)  # 4 nodes x 2 slots: 11 actions
BANK = 8


@pytest.fixture(scope="module")
def banked():
    return gymnax_env.make(**TINY, bank_size=BANK, seed=3)


@pytest.fixture(scope="module")
def fresh():
    return gymnax_env.make(**TINY, bank_size=0, seed=3)


def _equal(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_reset_picks_a_banked_start_the_fresh_reset_of_its_key(banked, fresh):
    env, params = banked
    env0, params0 = fresh
    assert params0.starts is None and params0.bank is None
    assert params.bank.arrival_s.shape == (BANK, 12) and params.starts[0].features.shape[0] == BANK
    # Start b is what a fresh reset with key split(key(seed), B)[b] gives.
    keys = jax.random.split(jax.random.key(3), BANK)
    _equal(jax.jit(jax.vmap(env0.reset_env, in_axes=(0, None)))(keys, params0), params.starts)
    # A reset is a pick: no simulator loop left in it; it is the start whose jobs draw_jobs picks.
    assert "while" not in str(jax.make_jaxpr(env.reset_env)(jax.random.key(0), params))
    resets = jax.random.split(jax.random.key(1), 64)
    obs, state = jax.jit(jax.vmap(env.reset_env, in_axes=(0, None)))(resets, params)
    jobs = jax.vmap(env.draw_jobs, in_axes=(0, None))(jax.vmap(lambda k: jax.random.split(k)[0])(resets), params)
    _equal(state.sim.jobs, jobs)
    picks = [[np.array_equal(f, params.starts[0].features[b]) for b in range(BANK)] for f in np.asarray(obs.features)]
    assert all(sum(p) >= 1 for p in picks) and np.any(picks, 0).sum() >= BANK - 2  # most of the bank is used


def test_make_refuses_a_bad_bank_size():
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="bank_size"):
            gymnax_env.make(**TINY, bank_size=bad)


def test_step_env_counts_a_non_integer_action_as_illegal(banked):
    env, params = banked
    obs, state = env.reset_env(jax.random.key(0), params)
    legal = int(np.flatnonzero(obs.action_mask)[0])
    step = jax.jit(lambda a: env.step_env(jax.random.key(1), state, a, params))
    wait = step(jnp.int32(env.num_actions))  # out of range: the documented illegal action
    placed = step(jnp.int32(legal))
    assert placed[4]["legal"] and not wait[4]["legal"]
    for bad in (jnp.nan, jnp.inf, -jnp.inf, legal + 0.5, 0.25, 2.0**40, -1.0):
        out = step(jnp.float32(bad))
        assert not out[4]["legal"], bad
        _equal(out[:4], wait[:4])
    _equal(step(jnp.float32(legal))[:4], placed[:4])  # a whole float is that action


def test_flat_observation_and_five_value_step(banked):
    env, params = banked
    flat = gymnax_adapters.for_rejax(env)
    space = flat.observation_space(params)
    num_actions = flat.action_space(params).n
    obs_t, _ = env.reset(jax.random.key(2), params)
    obs, state = flat.reset(jax.random.key(2), params)
    assert obs.shape == space.shape == (obs_t.features.shape[0] + num_actions,) and obs.dtype == jnp.float32
    np.testing.assert_array_equal(gymnax_adapters.features(obs, num_actions), obs_t.features)
    np.testing.assert_array_equal(gymnax_adapters.action_mask(obs, num_actions), obs_t.action_mask)

    # A hand-written vmapped loop of random legal actions read from the flat observation.
    def body(carry, key):
        obs, state = carry
        k_act, k_step = jax.random.split(key)
        mask = gymnax_adapters.action_mask(obs, num_actions)
        action = jax.random.categorical(k_act, jnp.where(mask, 0.0, -jnp.inf))
        out = jax.vmap(flat.step, in_axes=(0, 0, 0, None))(jax.random.split(k_step, 4), state, action, params)
        assert len(out) == 5
        obs, state, reward, done, info = out
        return (obs, state), (done, info["terminated"], info["truncated"], info["legal"], state.time)

    obs, state = jax.vmap(flat.reset, in_axes=(0, None))(jax.random.split(jax.random.key(3), 4), params)
    _, (done, terminated, truncated, legal, time) = jax.jit(
        lambda c: jax.lax.scan(body, c, jax.random.split(jax.random.key(4), 60)))((obs, state))
    np.testing.assert_array_equal(done, terminated | truncated)
    assert legal.all() and terminated.any() and not truncated.any()
    assert (np.asarray(time)[np.asarray(done)] == 0).all()  # auto-reset: a new episode's first decision


def test_rejax_ppo_trains_on_the_adapter(banked):
    rejax = pytest.importorskip("rejax")
    env, params = banked
    algo = rejax.PPO.create(env=gymnax_adapters.for_rejax(env), env_params=params, total_timesteps=256,
                            eval_freq=256, num_envs=4, num_steps=16, num_minibatches=2, num_epochs=1)
    ts, (lengths, returns) = jax.jit(algo.train)(jax.random.key(0))
    assert lengths.shape[-1] == 128 and np.isfinite(np.asarray(returns)).all()
