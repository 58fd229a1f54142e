"""The main job builds no program it does not need (docs/performance.md, "The first run's
compile"): no eager network init, no timeline of the baselines, and the agent's held-out
episodes reuse validation's compiled rollout, with the same results."""

import contextlib
import types

import jax
import jax.numpy as jnp
import jax.monitoring
import numpy as np
import pandas as pd
import pytest

from jaxsched import devices
from jaxsched import evaluate as ev
from jaxsched import report
from jaxsched import train as train_lib
from jaxsched.compile_cache import BACKEND_COMPILE_EVENT
from tests.agents.tiny import tiny_run


@contextlib.contextmanager
def built_programs():
    """The function names of the programs built (compiled or read from the cache) inside."""
    names = []

    def listen(event, seconds, fun_name="?", **_):
        if event == BACKEND_COMPILE_EVENT:
            names.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def test_building_a_trainer_initialises_no_network_eagerly():
    run = tiny_run()
    env, env_params, workload, _ = train_lib.setup(run)
    jax.clear_caches()  # programs built by earlier tests in this process would go uncounted
    with built_programs() as names:
        run.learner.make_train(env, env_params, workload, run.agent, run.train)
    # An eager init of the network compiled one program per operation and shape (~50 here,
    # ~100 in the main job's); what is left: the example observation and constants.
    assert len(names) < 10, names


def test_final_evaluation_runs_no_timeline_or_schedule_of_the_baselines(monkeypatch):
    def refuse(*_, **__):
        raise AssertionError("the main job writes neither timelines nor per-job schedules")

    monkeypatch.setattr(ev, "run_timeline", refuse)
    monkeypatch.setattr(report, "schedule_frame", refuse)
    monkeypatch.setattr(train_lib, "agent_episodes",  # the agent is not what this test is about
                        lambda config, _: lambda __: {"jct_mean": np.zeros(config.eval.episodes)})
    run = tiny_run("eval.episodes=2", "eval.batch_size=2")
    assert run.base.eval.plots  # the config asks for plots: the evaluation CLI would draw them
    agent = types.SimpleNamespace(scheduler=types.SimpleNamespace(name="agent"))
    per_episode, _, _ = train_lib.evaluate_agent(run, agent, None, show_progress=False, baselines=("first-fit",))
    assert sorted(set(per_episode.scheduler)) == ["agent", "first-fit"]


@pytest.mark.slow
def test_held_out_episodes_reuse_validations_compiled_rollout_with_the_same_results(monkeypatch):
    # The main job's CPU path: whole-loop kernels, each episode alone (rollout.default_chunk() == 1).
    monkeypatch.setenv("XLA_FLAGS", f"--{devices.LOOP_OPTION}={devices.LOOP_BYTES}")
    run = tiny_run("train.valid_episodes=4", "eval.episodes=8", "eval.batch_size=8")
    trainer, _ = train_lib.make_trainer(run)
    shapes = jax.eval_shape(trainer.init, jax.random.key(0)).params
    params = jax.tree.map(lambda s: jnp.full(s.shape, 0.01, s.dtype), shapes)
    train_lib.agent_episodes(train_lib.validation_config(run), trainer.scheduler)(params)  # as in training
    monkeypatch.setattr(ev, "evaluate", lambda config, show_progress: ev.Evaluation(pd.DataFrame(), None, {}))
    again, _ = train_lib.make_trainer(run)  # main() evaluates the trainer train() built
    with built_programs() as names:
        per_episode, _, _ = train_lib.evaluate_agent(run, again, params, show_progress=False, baselines=("first-fit",))
    assert "jit(run)" not in names, names
    whole = train_lib.agent_episodes(run.base, trainer.scheduler)(params)  # all 8 in one batch
    for metric, values in whole.items():
        np.testing.assert_array_equal(per_episode[metric].to_numpy(), values, err_msg=metric)
    assert len(per_episode) == 8

