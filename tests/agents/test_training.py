"""Training: checkpoint round trip, resume = uninterrupted run, and a learning test."""

import dataclasses
import json

import jax
import numpy as np
import pandas as pd
import pytest

from jaxsched import evaluate as ev
from jaxsched import experiment
from jaxsched import train as train_lib
from jaxsched.agents import checkpoint, training
from jaxsched.errors import DataError
from jaxsched.policies import get
from jaxsched.rollout import rollout, warm_up_batch
from jaxsched.workload import alibaba, synthetic
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
    tr, _ = train_lib.make_trainer(run)
    init = jax.jit(training.over_seeds(tr.init, 1))  # a runner as train() holds it: one program with train()'s
    runner = init(training.seed_keys(3, 1))
    other = init(training.seed_keys(4, 1))
    mgr = checkpoint.manager(tmp_path / "ckpt")
    checkpoint.save(mgr, 7, runner)
    step, restored = checkpoint.restore(mgr, other)
    mgr.close()
    assert step == 7
    _leaves_equal(restored, runner)
    # Same types too (weak ones included): else jitted training compiles again after --resume.
    assert [jax.typeof(x) for x in jax.tree.leaves(restored)] == [jax.typeof(x) for x in jax.tree.leaves(runner)]


@pytest.mark.slow
def test_resume_after_interruption_reproduces_uninterrupted_run(tmp_path):
    run = tiny_run("train.num_seeds=2", "train.valid_episodes=4")
    whole = train_lib.train(run, tmp_path / "whole", show_progress=False)
    train_lib.train(run, tmp_path / "cut", show_progress=False, stop_after=20)  # "interrupted"
    resumed = train_lib.train(run, tmp_path / "cut", resume=True, show_progress=False)
    assert np.asarray(resumed.runners.update).tolist() == [run.train.total_updates] * 2
    _leaves_equal(resumed.runners, whole.runners)
    _leaves_equal(resumed.selection, whole.selection)
    cols = ["update", "run", "return", "loss", "q_mean", "epsilon"]
    np.testing.assert_array_equal(resumed.log[cols].to_numpy(), whole.log[cols].to_numpy())
    pd.testing.assert_frame_equal(resumed.valid_log, whole.valid_log)
    # --checkpoint: the agent evaluated elsewhere is the one the run picked.
    _, loaded = train_lib.load_trained(run, tmp_path / "whole")
    _leaves_equal(loaded, whole.selection)


def test_resume_falls_back_past_a_corrupt_checkpoint_and_says_what_the_log_lost(tmp_path, capfd):
    run = tiny_run("train.total_updates=30")
    whole = train_lib.train(run, tmp_path / "whole", show_progress=False)
    cut = tmp_path / "cut"
    train_lib.train(run, cut, show_progress=False, stop_after=20)  # keeps checkpoints 10 and 20
    for f in (cut / "checkpoints" / "20").rglob("*"):
        if f.is_file():
            f.write_bytes(b"\0garbage")
    log = cut / "train_log.csv"
    text = log.read_bytes()
    log.write_bytes(text[: text.index(b"\n") + 12])  # cut inside the first row
    resumed = train_lib.train(run, cut, resume=True, show_progress=False)
    err = capfd.readouterr().err
    assert "checkpoints/20 cannot be read" in err and "trying the one before" in err
    assert "moved aside to 20.corrupt" in err and "restored checkpoint" in err
    assert "train_log.csv holds" in err  # rows lost to the cut, said
    _leaves_equal(resumed.runners, whole.runners)  # continued from checkpoint 10, exactly
    mgr = checkpoint.manager(cut / "checkpoints")
    assert list(mgr.all_steps()) == [20, 30]  # 20 saved again, not skipped as already there
    mgr.close()
    assert checkpoint.corrupt_steps(cut / "checkpoints") == [20]
    log.unlink()
    (cut / "valid_log.csv").unlink(missing_ok=True)
    more = dataclasses.replace(run, train=dataclasses.replace(run.train, total_updates=40))
    train_lib.train(more, cut, resume=True, show_progress=False)  # a longer run may continue
    assert "train_log.csv cannot be read" in capfd.readouterr().err


def test_checkpoint_flag_and_resume_agree_on_the_newest_intact_step_past_an_emptied_one(tmp_path, capfd):
    # The latest step folder emptied (files deleted): every reader gets step 10, and says so.
    run = tiny_run("train.total_updates=30")
    cut = tmp_path / "cut"
    train_lib.train(run, cut, show_progress=False, stop_after=20)  # keeps checkpoints 10 and 20
    train_lib.train(run, tmp_path / "ten", show_progress=False, stop_after=10)
    _, at_10 = train_lib.load_trained(run, tmp_path / "ten")  # the agent of checkpoint 10
    for f in sorted((cut / "checkpoints" / "20").rglob("*"), reverse=True):
        f.rmdir() if f.is_dir() else f.unlink()
    for _ in range(2):  # --checkpoint DIR, twice: the same agent both times, the loss said
        _, selection = train_lib.load_trained(run, cut)
        _leaves_equal(selection, at_10)
        assert "not the newer 20.corrupt" in capfd.readouterr().err
    resumed = train_lib.train(run, cut, resume=True, show_progress=False)  # --resume: from 10 too
    assert np.asarray(resumed.runners.update).tolist() == [30]
    assert "not the newer 20.corrupt" in capfd.readouterr().err
    _, selection = train_lib.load_trained(run, cut)
    assert int(selection.update) == 30 and "corrupt" not in capfd.readouterr().err


def test_a_setting_newer_than_the_checkpoints_counts_as_its_default(tmp_path):
    # train_run.json written before agent.lr_decay / lr_end existed: resuming at their defaults
    # (what that code did) is the same run; a schedule switched on is another one.
    run = tiny_run()
    older = train_lib.run_identity(run)
    del older["agent"]["lr_decay"], older["agent"]["lr_end"]
    (tmp_path / train_lib.RUN_FILE).write_text(json.dumps(older))
    train_lib.check_same_run(tmp_path, run)
    with pytest.raises(DataError, match=r"agent\.lr_decay = 100 now, None in the checkpoints"):
        train_lib.check_same_run(tmp_path, tiny_run("agent.lr_decay=100"))
    with pytest.raises(DataError, match=r"agent\.lr = 0\.01 now, 0\.001 in the checkpoints"):
        train_lib.check_same_run(tmp_path, tiny_run("agent.lr=0.01"))


def test_resume_refuses_what_it_cannot_continue(tmp_path):
    run = tiny_run("train.total_updates=10")
    with pytest.raises(DataError, match="no checkpoint to resume from"):
        train_lib.train(run, tmp_path / "empty", resume=True, show_progress=False)
    train_lib.train(run, tmp_path / "one", show_progress=False)
    with pytest.raises(DataError, match="holds checkpoints of an earlier run"):
        train_lib.train(run, tmp_path / "one", show_progress=False)
    with pytest.raises(DataError, match=r"train\.seed = 7 now, 0 in the checkpoints"):
        train_lib.train(tiny_run("train.total_updates=10", "train.seed=7"), tmp_path / "one",
                        resume=True, show_progress=False)
    with pytest.raises(DataError, match="train.checkpoint_every"):
        train_lib.train(tiny_run("train.total_updates=10", "train.checkpoint_every=0"), tmp_path / "one",
                        resume=True, show_progress=False)


def test_max_train_s_ends_training_after_the_chunk_that_passes_it_validated_and_kept(tmp_path):
    # Chunks of 10 updates, checkpoints every 20: only the time limit validates and saves at 10.
    run = tiny_run("train.num_seeds=2", "train.valid_episodes=4", "train.total_updates=60",
                   "train.checkpoint_every=20")
    cut = train_lib.train(run, tmp_path / "cut", show_progress=False, max_train_s=0.0)
    assert np.asarray(cut.runners.update).tolist() == [10, 10]
    # Validated before training (the untrained agent, never kept) and at the time limit.
    assert sorted(set(cut.valid_log["update"])) == [0, 10] and int(cut.selection.update) == 10
    mgr = checkpoint.manager(tmp_path / "cut" / "checkpoints")
    assert list(mgr.all_steps()) == [10]
    mgr.close()
    resumed = train_lib.train(run, tmp_path / "cut", resume=True, show_progress=False)  # goes on from 10
    assert np.asarray(resumed.runners.update).tolist() == [60, 60]


def test_warm_up_gives_the_same_episodes_each_env_alone_or_all_vmapped():
    # A GPU warms the training envs up together (vmap), a CPU each alone (lax.map): same states.
    run = tiny_run("env.warmup_jobs=20", "env.measured_jobs=10", 'train.warmup_scheduler="first-fit"')
    env, env_params, workload, _ = train_lib.setup(run)
    keys = jax.random.split(jax.random.key(5), 4)
    jobs = jax.vmap(lambda k: synthetic.generate(k, workload.replace(num_jobs=40, pad_to=None)))(keys)
    state, obs = jax.vmap(env.reset, in_axes=(0, None, 0))(keys, env_params, jobs)
    warm = jax.jit(lambda s, o, k, alone: warm_up_batch(env, get("first-fit").policy, env_params, s, o, k, alone),
                   static_argnums=3)
    alone, together = warm(state, obs, keys, True), warm(state, obs, keys, False)
    assert (np.asarray(alone[0].core.time_s) >= np.asarray(alone[0].core.measure_from_s)).all()  # warmed up
    assert int(np.asarray(alone[0].core.acc.decisions).min()) > 0
    for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(together)):
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_baselines_flag_names_registered_heuristics(capsys):
    assert train_lib.parse_baselines(None) is None
    assert train_lib.parse_baselines("first-fit, sjf") == ("first-fit", "sjf")
    with pytest.raises(ValueError, match="unknown nope"):
        train_lib.parse_baselines("first-fit,nope")
    assert train_lib.main(["--baselines", "nope", "--no-compile-cache"]) == 2  # refused before training
    assert "--baselines 'nope': unknown nope" in capsys.readouterr().err


def test_checkpoint_of_another_config_is_refused_by_name(tmp_path):
    train_lib.train(tiny_run("train.total_updates=10"), tmp_path / "one", show_progress=False)
    two_runs = tiny_run("train.total_updates=10", "train.num_seeds=2", "train.valid_episodes=4")
    with pytest.raises(DataError, match=r"checkpoints/10.*shape \(1, 16\).*\(2, 16\)"):
        train_lib.load_trained(two_runs, tmp_path / "one")
    with pytest.raises(DataError, match="num_seeds"):
        train_lib.train(two_runs, tmp_path / "one", resume=True, show_progress=False)


def test_validation_keeps_the_agent_with_the_lowest_validation_jct(tmp_path):
    run = tiny_run("train.num_seeds=2", "train.valid_episodes=4", "train.total_updates=60",
                   "train.checkpoint_every=20")
    trained = train_lib.train(run, tmp_path / "two", show_progress=False)
    valid = trained.valid_log
    assert sorted(set(zip(valid["update"], valid["run"]))) == [(u, r) for u in (0, 20, 40, 60) for r in (0, 1)]
    assert (valid["env_steps"] == valid["update"] * run.train.num_envs).all()  # GNN-DDQN: one step per env per update
    trained_rows = valid[valid["update"] > 0]  # the untrained agent (update 0) is measured, never kept
    best = trained_rows.loc[trained_rows.valid_jct_s.idxmin()]
    sel = trained.selection
    assert (int(sel.run), int(sel.update)) == (int(best["run"]), int(best["update"]))
    # Replaying the kept agent on the validation episodes gives the JCT it was kept for.
    play = train_lib.agent_episodes(train_lib.validation_config(run), trained.trainer.scheduler)
    assert float(np.mean(play(sel.params)["jct_mean"])) == pytest.approx(float(sel.valid_jct_s), rel=1e-6)
    # Run i of a multi-run training is the single run with seed train.seed + i (up to rounding).
    single = train_lib.train(tiny_run("train.seed=1", "train.total_updates=60", "train.checkpoint_every=20"),
                             tmp_path / "one", show_progress=False)
    for a, b in zip(jax.tree.leaves(jax.tree.map(lambda x: x[1], trained.runners.params)),
                    jax.tree.leaves(jax.tree.map(lambda x: x[0], single.runners.params))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    assert int(single.selection.run) == 0 and int(single.selection.update) == 60  # no validation: the last


def test_validation_episodes_are_never_the_held_out_ones():
    run = tiny_run("train.valid_episodes=8", "train.valid_seed=7")
    config = train_lib.validation_config(run)
    assert (config.eval.episodes, config.eval.seed) == (8, 7) and run.base.eval.seed == 1000
    trace = tiny_run('workload.source="openb"', "workload.trace_span=[0.5, 1.0]", "train.trace_span=[0.0, 0.5]",
                     "train.valid_episodes=8")
    assert train_lib.validation_config(trace).workload.trace_span == (0.0, 0.5)
    with pytest.raises(DataError, match="valid_seed"):
        train_lib.validation_config(tiny_run("train.valid_episodes=8", "train.valid_seed=1000"))
    with pytest.raises(ValueError, match="valid_episodes"):
        tiny_run("train.num_seeds=2")


def test_eval_overrides_change_the_evaluation_only(tmp_path):
    run = tiny_run()
    trace = "some/openb_pod_list.csv"
    evaluated = train_lib.with_eval_overrides(run, ["workload.source=openb", f"workload.trace={trace}"])
    assert (evaluated.base.workload.source, evaluated.base.workload.trace) == ("openb", trace)
    assert run.base.workload.source == "synthetic"  # training still uses the synthetic workload
    assert (evaluated.agent, evaluated.train, evaluated.base.env) == (run.agent, run.train, run.base.env)
    with pytest.raises(DataError, match="agent"):
        train_lib.with_eval_overrides(run, ["agent.hidden=8"])
    with pytest.raises(DataError, match="no checkpoint"):
        train_lib.load_trained(run, tmp_path / "never-trained")


def _mean_jct(run, policy, gpu_rule, *policy_params):
    """The mean JCT of ``policy`` with each of ``policy_params`` (one compiled rollout)."""
    config = run.base
    nodes = experiment.build_nodes(config)
    jobs, frag, _ = experiment.build_workload(config, nodes)
    env_params = train_lib.setup(run)[1]
    keys = experiment.episode_keys(config.eval.seed, config.eval.episodes, stream=1)
    env = ClusterEnv(dataclasses.replace(config.env, gpu_rule=gpu_rule))
    play = jax.jit(lambda pp, j, k: rollout(env, policy, pp, env_params, j, k, 400)[1])
    jcts = []
    for params in policy_params:
        metrics = play(params, jobs, keys)
        assert bool(metrics["done"].all())
        jcts.append(float(metrics["jct_mean"].mean()))
    return jcts


SLOW_THEN_FAST = "sn,cpu_milli,memory_mib,gpu,model\nslow-0,64000,262144,4,T4\nslow-1,64000,262144,4,T4\nfast-2,96000,393216,8,A10\n"


@pytest.mark.slow
def test_short_training_run_beats_random_scheduler(tmp_path):
    # Two 4 x T4 nodes (speed 0.45) before one 8 x A10 node (1.1), at load 0.3: the A10 usually
    # has room, so where a job runs decides its JCT. With train.seed 2 the untrained network
    # prefers the slow nodes (~105 s); learning must turn that around: measured 53 s after 300
    # updates, against random placement's 91 s.
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(SLOW_THEN_FAST)
    run = tiny_run(f'cluster.node_list="{nodes}"', "workload.synthetic.target_load=0.3",
                   'env.reward="placed_jct"', "train.seed=2", "train.total_updates=300",
                   "train.chunk_updates=100", "train.checkpoint_every=0", "agent.grad_steps=4",
                   "agent.lr=3e-3")
    trained = train_lib.train(run, tmp_path / "learn", show_progress=False)
    agent = trained.trainer.scheduler.policy
    # The network before any update: train's own init (compiled already), no update run.
    untrained = train_lib.train(run, tmp_path / "untrained", show_progress=False, stop_after=0).selection.params
    random_sched = get("random")
    agent_jct, untrained_jct = _mean_jct(run, agent, "best-fit", trained.selection.params, untrained)
    [random_jct] = _mean_jct(run, random_sched.policy, random_sched.gpu_rule, None)
    assert agent_jct < 0.75 * random_jct, (agent_jct, random_jct)
    assert agent_jct < 0.75 * untrained_jct, (agent_jct, untrained_jct)


@pytest.mark.slow
def test_training_on_trace_windows_uses_only_the_training_span(openb_dir):
    trace = openb_dir / "openb_pod_list_default.csv"
    run = tiny_run('workload.source="openb"', f'workload.trace="{trace}"', "workload.window_jobs=40",
                   "workload.trace_span=[0.5, 1.0]", "train.trace_span=[0.0, 0.5]", "train.trace_windows=8")
    env, env_params, bank, _ = train_lib.setup(run)
    assert bank.arrival_s.shape == (8, run.train.train_jobs)
    pods = alibaba.cap_work(alibaba.load_openb_pods(trace, mode="dynamic"), run.base.workload.max_work_s)
    first_half = set(alibaba.trace_part(pods, (0.0, 0.5)).work_s.astype(np.float32))
    second_half = set(alibaba.trace_part(pods, (0.5, 1.0)).work_s.astype(np.float32))
    work = set(np.asarray(bank.work_s)[np.asarray(bank.valid)])
    assert work <= first_half and not work <= second_half
    tr = run.learner.make_train(env, env_params, bank, run.agent, run.train)
    runner = jax.jit(tr.init)(jax.random.key(0))
    bank_rows = {tuple(row) for row in np.asarray(bank.work_s)}
    assert all(tuple(row) in bank_rows for row in np.asarray(runner.env_state.jobs.work_s))
    runner, summary = jax.jit(tr.run_chunk)(runner)
    assert int(runner.update) == run.train.chunk_updates and np.isfinite(float(summary["reward_per_step"]))


def test_agent_queue_order_is_the_window_it_trains_and_is_evaluated_on():
    sjf_run = tiny_run('agent.queue_order="sjf"')
    trainer, env = train_lib.make_trainer(sjf_run)
    assert sjf_run.base.env.queue_order == "fifo"  # the heuristics' order stays the env's
    assert env.config.queue_order == "sjf"
    assert trainer.scheduler.env_config(sjf_run.base.env).queue_order == "sjf"  # what evaluate runs
    fifo_run = tiny_run()  # '' keeps [env] queue_order
    trainer, env = train_lib.make_trainer(fifo_run)
    assert env.config.queue_order == "fifo"
    assert trainer.scheduler.env_config(fifo_run.base.env).queue_order == "fifo"
    with pytest.raises(ValueError, match="queue_order"):
        tiny_run('agent.queue_order="lifo"')


def test_learning_curve_lines_are_the_heuristics_on_the_validation_episodes():
    run = tiny_run("train.valid_episodes=4", "train.valid_seed=9")
    summary = pd.DataFrame({"scheduler": ["gnn-ddqn", "first-fit", "sjf", "hops"], "jct_mean": [1.0, 9.0, 5.0, 7.0]})
    levels = train_lib.validation_baselines(run, summary, "gnn-ddqn")
    assert list(levels) == ["first-fit", "sjf (best heuristic)"]  # the agent's own row is never the best heuristic
    # The episodes of the validation points: eval.episodes and eval.seed replaced by train's.
    config = dataclasses.replace(run.base, eval=dataclasses.replace(run.base.eval, episodes=4, seed=9))
    jobs, params, max_steps, keys, _ = experiment.episodes(config, experiment.build_nodes(config))
    for name in ("first-fit", "sjf"):
        frame, _ = ev.run_scheduler(name, config, params, jobs, keys, max_steps)
        assert levels[name if name == "first-fit" else "sjf (best heuristic)"] == pytest.approx(frame["jct_mean"].mean())
