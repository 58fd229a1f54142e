"""What DRR and GNN-PPO share (agents/policy_gradient.py): GAE and the masked policy."""

import jax.numpy as jnp
import numpy as np

from jaxsched.agents import policy_gradient as pg


def test_gae_matches_a_hand_computation():
    # Env 0: step 1 ends its episode (nothing after it bootstrapped); env 1: no episode end.
    rewards = jnp.array([[1.0, 0.5], [0.0, 0.5], [2.0, 0.5]])
    values = jnp.array([[0.5, 1.0], [0.2, 1.0], [1.0, 1.0]])
    dones = jnp.array([[False, False], [True, False], [False, False]])
    adv, ret = pg.gae(rewards, values, dones, jnp.array([3.0, 2.0]), gamma=0.9, lam=0.8)
    d2 = 2.0 + 0.9 * 3.0 - 1.0
    d1 = 0.0 - 0.2
    d0 = 1.0 + 0.9 * 0.2 - 0.5
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [d0 + 0.9 * 0.8 * d1, d1, d2], rtol=1e-6)
    e2 = 0.5 + 0.9 * 2.0 - 1.0  # env 1: deltas discounted by gamma x lambda = 0.72
    e1 = 0.5 + 0.9 * 1.0 - 1.0
    np.testing.assert_allclose(np.asarray(adv)[:, 1], [e1 + 0.72 * e1 + 0.72 ** 2 * e2, e1 + 0.72 * e2, e2],
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ret), np.asarray(adv) + np.asarray(values))


def test_masked_log_softmax_spreads_probability_over_the_legal_actions_only():
    legal = jnp.array([[True, False, True, True], [False, False, False, False]])
    logp = pg.masked_log_softmax(jnp.array([[1.0, 50.0, 1.0, 1.0], [0.0, 1.0, 2.0, 3.0]]), legal)
    np.testing.assert_allclose(np.asarray(jnp.exp(logp[0]) * legal[0]), [1 / 3, 0, 1 / 3, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(pg.entropy(logp, legal)), [np.log(3), 0.0], rtol=1e-6)
    assert np.asarray(logp[1]).tolist() == [0.0] * 4  # no legal action: 0, not NaN
