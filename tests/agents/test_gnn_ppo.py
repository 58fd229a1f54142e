"""GNN-PPO: the clipped loss against the formula, the policy's mask, bad settings, resume,
and a short training run that must learn."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import train as train_lib
from jaxsched.agents import gnn_ppo
from jaxsched.errors import DataError
from jaxsched.policies import get
from tests.agents.test_training import SLOW_THEN_FAST, _leaves_equal, _mean_jct
from tests.agents.tiny import tiny_ppo


def test_clipped_loss_matches_the_formula_with_clipping_active_and_inactive():
    eps = 0.2
    ratio = np.array([1.5, 0.9, 0.5, 1.1, 0.5, 1.5])
    adv = np.array([1.0, 1.0, -1.0, -2.0, 1.0, -1.0])
    # min(r A, clip(r, 0.8, 1.2) A), one sample at a time:
    #   1.5 x +1: clip binds, 1.2        0.9 x +1: inside the range, 0.9
    #   0.5 x -1: clip binds, -0.8       1.1 x -2: inside, -2.2
    #   0.5 x +1: outside, but the unclipped 0.5 is lower: 0.5
    #   1.5 x -1: outside, the unclipped -1.5 is lower: -1.5
    objective = np.array([1.2, 0.9, -0.8, -2.2, 0.5, -1.5])
    old_logp = jnp.log(jnp.array([0.1, 0.3, 0.5, 0.2, 0.4, 0.6]))
    logp = old_logp + jnp.log(jnp.asarray(ratio, jnp.float32))
    loss, clip_frac, approx_kl = gnn_ppo.clipped_policy_loss(logp, old_logp, jnp.asarray(adv, jnp.float32), eps)
    np.testing.assert_allclose(float(loss), -objective.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(clip_frac), 4 / 6)  # |r - 1| > 0.2
    np.testing.assert_allclose(float(approx_kl), np.mean(ratio - 1 - np.log(ratio)), rtol=1e-5)
    # Where the clip binds the sample gives no gradient; elsewhere d(-r A / n) / d logp = -r A / n.
    grad = jax.grad(lambda lp: gnn_ppo.clipped_policy_loss(lp, old_logp, jnp.asarray(adv, jnp.float32), eps)[0])(logp)
    binds = np.array([True, False, True, False, False, False])
    np.testing.assert_allclose(np.asarray(grad), np.where(binds, 0.0, -ratio * adv / 6), rtol=1e-5, atol=1e-8)
    # Ratio 1 everywhere (the first minibatch of an update): the plain policy-gradient loss.
    same, frac, kl = gnn_ppo.clipped_policy_loss(old_logp, old_logp, jnp.asarray(adv, jnp.float32), eps)
    np.testing.assert_allclose(float(same), -adv.mean(), rtol=1e-6)
    assert float(frac) == 0.0 and float(kl) == 0.0


def test_masked_actions_are_never_sampled():
    legal = jnp.array([[False, True, False, True, True, False], [False] * 6])
    # The masked actions carry the largest logits: a mask applied wrongly would pick them.
    logits = jnp.array([[9.0, 0.0, 9.0, 0.5, -1.0, 9.0], [0.0] * 6])
    draws = jax.jit(jax.vmap(gnn_ppo.sample_action, in_axes=(0, None, None)))(
        jax.random.split(jax.random.key(0), 5000), logits, legal)
    assert set(np.asarray(draws[:, 0]).tolist()) == {1, 3, 4}  # every legal action, nothing else
    counts = np.bincount(np.asarray(draws[:, 0]), minlength=6)[[1, 3, 4]] / 5000
    p = np.exp([0.0, 0.5, -1.0]) / np.exp([0.0, 0.5, -1.0]).sum()
    np.testing.assert_allclose(counts, p, atol=0.03)  # the softmax over the legal ones
    assert set(np.asarray(draws[:, 1]).tolist()) == {5}  # nothing legal: wait (the last action)


@pytest.mark.parametrize("field, value", [("clip_eps", 0.0), ("clip_eps", -0.1), ("epochs", 0),
                                          ("num_minibatches", 0), ("gamma", 1.5), ("gae_lambda", -0.1),
                                          ("lr", 0.0), ("ent_coef", -1.0)])
def test_bad_settings_are_rejected_naming_the_field(field, value):
    with pytest.raises(DataError, match=rf"agent.*PPOConfig\.{field} = {value!r}"):
        tiny_ppo(f"agent.{field}={value}")


def test_minibatches_must_divide_the_rollout_batch():
    tiny_ppo("agent.num_minibatches=4")  # 8 envs x 4 steps = 32 samples
    with pytest.raises(DataError, match=r"PPOConfig\.num_minibatches = 3: must divide .* 8 x 4 = 32"):
        tiny_ppo("agent.num_minibatches=3")


def _learning_run(folder):
    """The slow-then-fast cluster of GNN-DDQN's learning test (tests/agents/test_training.py):
    where a job runs decides its JCT, and the placement reward says so at once."""
    nodes = folder / "nodes.csv"
    nodes.write_text(SLOW_THEN_FAST)
    return tiny_ppo(f'cluster.node_list="{nodes}"', "workload.synthetic.target_load=0.3", 'env.reward="placed_jct"',
                    "agent.lr=3e-3", "agent.gamma=0.9", "train.seed=2", "train.total_updates=200",
                    "train.chunk_updates=50", "train.checkpoint_every=50")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(run, its folder, the uninterrupted 200-update run): one compiled trainer for the
    resume and learning tests (a module runs in one xdist worker, ``--dist loadscope``)."""
    folder = tmp_path_factory.mktemp("ppo")
    run = _learning_run(folder)
    return run, folder, train_lib.train(run, folder / "whole", show_progress=False)


def test_ppo_resume_after_interruption_reproduces_uninterrupted_run(trained, capfd):
    run, folder, whole = trained
    train_lib.train(run, folder / "cut", show_progress=False, stop_after=100)  # "interrupted"
    capfd.readouterr()
    resumed = train_lib.train(run, folder / "cut", resume=True, show_progress=False)
    assert "WARNING" not in capfd.readouterr().err  # nothing was lost (a run that never validates has no valid_log)
    _leaves_equal(resumed.runners, whole.runners)
    cols = ["update", "return", *gnn_ppo.LOG_FIELDS]
    np.testing.assert_array_equal(resumed.log[cols].to_numpy(), whole.log[cols].to_numpy())
    assert np.isfinite(whole.log[list(gnn_ppo.LOG_FIELDS)].to_numpy()).all()
    # The env steps of an update are the rollout's (8 envs x 4 steps, 50 updates a chunk).
    assert whole.log["env_steps"].tolist() == [1600, 3200, 4800, 6400]


@pytest.mark.slow
def test_short_ppo_training_run_beats_random_and_its_untrained_start(trained):
    # Measured: 41 s mean JCT after 200 updates, random placement 72 s, the untrained network 79 s.
    run, folder, whole = trained
    agent = whole.trainer.scheduler
    untrained = train_lib.train(run, folder / "untrained", show_progress=False, stop_after=0).selection.params
    random_sched = get("random")
    agent_jct, untrained_jct = _mean_jct(run, agent.policy, agent.gpu_rule, whole.selection.params, untrained)
    [random_jct] = _mean_jct(run, random_sched.policy, random_sched.gpu_rule, None)
    assert agent_jct < 0.8 * random_jct, (agent_jct, random_jct)
    assert agent_jct < 0.8 * untrained_jct, (agent_jct, untrained_jct)
