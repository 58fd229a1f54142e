"""Action masking and the Double-DQN target."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxsched.agents import ddqn, gnn_ddqn


def _fake_obs(action_mask, k, n):
    return types.SimpleNamespace(action_mask=jnp.asarray(action_mask),
                                 place_mask=jnp.asarray(action_mask[:k * n]).reshape(k, n))


@st.composite
def masks_and_q(draw):
    k = draw(st.integers(1, 4))
    n = draw(st.integers(1, 5))
    a = k * n + k + 1
    mask = np.array(draw(st.lists(st.booleans(), min_size=a, max_size=a)))
    # float32 values, no subnormals: XLA:CPU flushes those to zero, so -1e-45 and 0 would tie.
    q = np.array(draw(st.lists(st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False, width=32),
                               min_size=a, max_size=a)),
                 np.float32)
    eps = draw(st.floats(0.0, 1.0))
    seed = draw(st.integers(0, 2**31 - 1))
    flags = draw(st.tuples(st.booleans(), st.booleans()))
    return k, n, mask, q, eps, seed, flags


@settings(max_examples=60, deadline=None)
@given(masks_and_q())
def test_masked_actions_are_never_chosen(case):
    k, n, mask, q, eps, seed, (allow_reject, allow_wait) = case
    config = ddqn.AgentConfig(allow_reject=allow_reject, allow_wait=allow_wait)
    legal = np.asarray(ddqn.legal_mask(config, _fake_obs(mask, k, n)))
    assert not (legal & ~mask).any()              # the agent's mask only removes actions
    assert legal.any() == mask.any()              # ... and never empties a live mask
    is_reject = (np.arange(len(mask)) >= k * n) & (np.arange(len(mask)) < k * n + k)
    if not allow_reject and (mask & ~is_reject).any():
        assert not (legal & is_reject).any()
    greedy = int(ddqn.masked_argmax(jnp.asarray(q), jnp.asarray(legal)))
    explore = int(ddqn.epsilon_greedy(jax.random.key(seed), jnp.asarray(q), jnp.asarray(legal), eps))
    if legal.any():
        assert legal[greedy] and legal[explore]
        assert q[greedy] == q[legal].max()


def test_double_dqn_target_matches_hand_worked_example():
    # Episode 0: online net picks action 2 among the legal {0, 2} (action 1 has the highest
    # online Q but is illegal); the TARGET net's value of action 2 (30) is bootstrapped:
    # 1 + 0.9 * 30 = 28. Plain DQN would take the target's own max (40, illegal action 1).
    # Episode 1 is terminal: the target is the reward alone.
    # Episode 2: no legal action next (a finished episode's observation): no bootstrap.
    reward = jnp.array([1.0, -2.0, 0.5])
    done = jnp.array([False, True, False])
    q_online = jnp.array([[1.0, 5.0, 3.0], [0.0, 9.0, 1.0], [7.0, 7.0, 7.0]])
    q_target = jnp.array([[10.0, 40.0, 30.0], [100.0, 100.0, 100.0], [5.0, 5.0, 5.0]])
    mask = jnp.array([[True, False, True], [True, True, True], [False, False, False]])
    target = ddqn.double_dqn_target(reward, done, 0.9, q_online, q_target, mask)
    np.testing.assert_allclose(np.asarray(target), [28.0, -2.0, 0.5])


def test_n_step_return_matches_hand_worked_example():
    # gamma 0.5, runs of 3 steps. Run 0: no episode end: 1 + 0.5 * 2 + 0.25 * 4 = 3, bootstrap.
    # Run 1: the episode ends at step 1: 1 + 0.5 * 2 = 2 (step 2 is the next episode's), done.
    # Run 2: it ends at step 0: the reward of step 0 alone, done.
    reward = jnp.array([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [-3.0, 2.0, 4.0]])
    done = jnp.array([[False, False, False], [False, True, False], [True, False, True]])
    ret, ended = ddqn.n_step_return(reward, done, 0.5)
    np.testing.assert_allclose(np.asarray(ret), [3.0, 2.0, -3.0])
    np.testing.assert_array_equal(np.asarray(ended), [False, True, True])
    one, one_done = ddqn.n_step_return(reward[:, :1], done[:, :1], 0.5)  # n = 1: one step
    np.testing.assert_array_equal(np.asarray(one), [1.0, 1.0, -3.0])
    np.testing.assert_array_equal(np.asarray(one_done), [False, False, True])


def test_epsilon_schedule_is_linear_then_flat():
    assert float(ddqn.epsilon_at(0, 1.0, 0.1, 100)) == 1.0
    np.testing.assert_allclose(float(ddqn.epsilon_at(50, 1.0, 0.1, 100)), 0.55, rtol=1e-6)
    np.testing.assert_allclose(float(ddqn.epsilon_at(500, 1.0, 0.1, 100)), 0.1, rtol=1e-6)


def test_learning_rate_falls_linearly_to_lr_end_then_stays():
    # A constant gradient makes each adam step (bias-corrected) minus the learning rate itself.
    agent = ddqn.AgentConfig(lr=1e-2, lr_decay=10, lr_end=2e-3, grad_steps=2)  # 20 optimiser steps
    optimiser = gnn_ddqn.make_optimiser(agent)
    params, grad = jnp.zeros(()), jnp.ones(())
    state, steps = optimiser.init(params), []
    for _ in range(25):
        update, state = optimiser.update(grad, state, params)
        steps.append(-float(update))
    want = [1e-2 + (2e-3 - 1e-2) * min(k, 20) / 20 for k in range(25)]
    np.testing.assert_allclose(steps, want, rtol=1e-4)  # float32
    # lr_decay 0: adam at a constant rate, with the optimiser state of before (old checkpoints restore)
    constant = gnn_ddqn.make_optimiser(ddqn.AgentConfig(lr=1e-2))
    old = optax.chain(optax.clip_by_global_norm(10.0), optax.adam(1e-2))
    assert jax.tree.structure(constant.init(params)) == jax.tree.structure(old.init(params))
    assert -float(constant.update(grad, constant.init(params), params)[0]) == pytest.approx(1e-2, rel=1e-5)


@pytest.mark.parametrize("bad", [{"lr_decay": -1}, {"lr_decay": 1.5}, {"lr_end": -1e-4}, {"lr_end": 1.0}])
def test_bad_learning_rate_schedules_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        ddqn.AgentConfig(lr=1e-3, **bad)
