"""Training: checkpoint round trip, resume = uninterrupted run, and a learning test."""

import dataclasses

import jax
import numpy as np
import pytest

from jaxsched import evaluate as ev
from jaxsched import train as train_lib
from jaxsched.agents import checkpoint, ddqn, trainer
from jaxsched.rollout import rollout
from jaxsched.sim.env import ClusterEnv
from tests.agents.tiny import tiny_run


def _leaves_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_checkpoint_round_trip_restores_every_leaf(tmp_path):
    run = tiny_run()
    env, env_params, syn, _ = train_lib.setup(run)
    tr = trainer.make_train(env, env_params, syn, run.agent, run.train)
    runner = jax.jit(tr.init)(jax.random.key(3))
    other = jax.jit(tr.init)(jax.random.key(4))
    mgr = checkpoint.manager(tmp_path / "ckpt")
    checkpoint.save(mgr, 7, runner)
    step, restored = checkpoint.restore(mgr, other)
    mgr.close()
    assert step == 7
    _leaves_equal(restored, runner)


def test_resume_after_interruption_reproduces_uninterrupted_run(tmp_path):
    run = tiny_run()
    _, whole, whole_log = train_lib.train(run, tmp_path / "whole", show_progress=False)
    train_lib.train(run, tmp_path / "cut", show_progress=False, stop_after=20)  # "interrupted"
    _, resumed, resumed_log = train_lib.train(run, tmp_path / "cut", resume=True, show_progress=False)
    assert int(resumed.update) == int(whole.update) == run.train.total_updates
    _leaves_equal(resumed.params, whole.params)
    _leaves_equal(resumed.key, whole.key)
    cols = ["update", "return", "loss", "q_mean", "epsilon"]
    np.testing.assert_array_equal(resumed_log[cols].to_numpy(), whole_log[cols].to_numpy())


def _mean_jct(run, policy, policy_params, gpu_rule):
    config = run.base
    nodes = ev.build_nodes(config)
    jobs, frag, _ = ev.build_workload(config, nodes)
    env_params = train_lib.setup(run)[1]
    keys = ev.episode_keys(config.eval.seed, config.eval.episodes, stream=1)
    env = ClusterEnv(dataclasses.replace(config.env, gpu_rule=gpu_rule))
    metrics = jax.jit(lambda pp, j, k: rollout(env, policy, pp, env_params, j, k, 400)[1])(
        policy_params, jobs, keys)
    assert bool(metrics["done"].all())
    return float(metrics["jct_mean"].mean())


@pytest.mark.skip(reason="known gap (issue 5 open): at load 0.3, 300 updates with reward "
                  "'placed_jct' reach JCT 87.4 s vs random 92.9 s, but the untrained network "
                  "(lr=0) already gets 83.3 s (it happens to prefer the fast nodes), so this "
                  "test could not tell broken learning apart; with 'in_system' 92.5 s")
def test_short_training_run_beats_random_scheduler(tmp_path):
    # 4 nodes of very different speed (G2 0.8 vs T4 0.45) at load 0.8: where a job runs
    # matters, so an agent that learned anything beats uniform random placement.
    run = tiny_run("train.total_updates=400", "train.chunk_updates=100", "train.checkpoint_every=0")
    tr, runner, _ = train_lib.train(run, tmp_path / "learn", show_progress=False)
    from jaxsched.policies import get
    random_sched = get("random")
    agent_jct = _mean_jct(run, ddqn.greedy_policy(tr.graphdef, run.agent), runner.params, "best-fit")
    random_jct = _mean_jct(run, random_sched.policy, None, random_sched.gpu_rule)
    assert agent_jct < 0.97 * random_jct, (agent_jct, random_jct)
