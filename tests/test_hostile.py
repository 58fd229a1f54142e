"""The hostile suite (issue "Hardening IV"): inputs and settings an outside user tried that
once ran to a cap, hung or gave wrong numbers without a word. One case per class; each
asserts the clear answer (a refusal naming the setting, or a counted and documented
handling), so these stay fixed. Fast: the default tier."""

from __future__ import annotations

import random

import gymnasium
import hypothesis as hyp
import jax
import numpy as np
import pandas as pd
import pytest

from jaxsched import cluster as cl
from jaxsched import compare, evaluate, experiment, outputs, policies, reference, report
from jaxsched import config as cfg_lib
from jaxsched.errors import DataError
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from jaxsched.workload import alibaba, gavel, philly
from tests.settings import extended
from tests.strategies import FRAG_CLASSES
from tests.test_gym import ID, TINY
from tests.workload import test_gavel


def gavel_like_servers(per_model: int):
    """``per_model`` one-GPU servers of each of V100, P100 and K80 (Gavel's cluster, small)."""
    models = [cl.model_id(m) for m in ("V100", "P100", "K80") for _ in range(per_model)]
    n = len(models)
    return cl.to_cluster(cl.NodeTable(names=tuple(f"s{i}" for i in range(n)), model=np.asarray(models, np.int32),
                                      num_gpus=np.ones(n, np.int32), cpu_milli=np.full(n, 8000, np.int32),
                                      mem_mib=np.full(n, 32768, np.int32)))


@pytest.mark.parametrize("name", ["las-perf", "gavel-fifo"])
def test_a_gang_no_one_gpu_type_holds_fails_at_arrival_under_per_model_policies(name):
    """An 8-GPU job on 4 V100 + 4 P100 + 4 K80 one-GPU servers (max_span 8): only a mix of
    types holds it, and a per-model policy places a job on one type's nodes. It ran to the
    round cap (8,344 rounds) with its row n/a; now these policies hold gangs to one type, so
    the job is one no node set can hold: it fails at its arrival, counted in ``failed``, and
    no round waits for it (semantics.md, "Per-model priorities")."""
    sched = policies.get(name)
    base = EnvConfig(round_s=360.0, max_span=8, queue_capacity=8, running_capacity=16, tie_break="identity")
    env = ClusterEnv(sched.env_config(base))
    jobs = jobs_from_numpy(arrival_s=[0, 10], work_s=[3600, 600], num_gpu=[8, 1], gpu_milli=[1000] * 2,
                           cpu_milli=[0] * 2, mem_mib=[0] * 2)
    params = to_device(EnvParams(gavel_like_servers(4), FRAG_CLASSES))
    state, _ = jax.jit(env.reset)(jax.random.key(0), params, to_device(jobs))
    assert np.asarray(state.unschedulable)[:2].tolist() == [True, False]  # (fails at its arrival)


@pytest.mark.parametrize("settings", [["env.resched_interval_s=600"],
                                      ['env.mode="static"', "env.warmup_jobs=0", "env.measured_jobs=0"]])
def test_a_round_policy_that_cannot_run_with_the_settings_is_refused_before_any_scheduler_runs(settings, tmp_path,
                                                                                             capsys):
    """``las`` with rescheduling passes, or in static mode, died with a traceback inside
    ``run_scheduler`` after first-fit had run, its results lost. Now: exit 2 before any
    run, one line naming the scheduler and the setting, and no output folder."""
    out = tmp_path / "out"
    sets = [arg for setting in settings for arg in ("--set", setting)]
    code = evaluate.main([*sets, "--schedulers", "first-fit,las", "--episodes", "1", "--out", str(out), "--quiet",
                          "--no-plots"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "eval.schedulers" in err[0] and "'las'" in err[0] and "round_s" in err[0]
    assert not out.exists()


def test_a_spread_penalty_above_one_is_refused_in_both_simulators():
    """``env.spread_penalty=5`` was accepted: a "penalty" that ran spread gangs 5 times faster."""
    with pytest.raises(ValueError, match=r"EnvConfig.spread_penalty .*\(0, 1\]"):
        EnvConfig(max_span=2, spread_penalty=5.0)
    with pytest.raises(ValueError, match="spread_penalty"):
        reference.RefConfig(max_span=2, spread_penalty=5.0)
    EnvConfig(max_span=2, spread_penalty=1.0)


def test_a_max_span_above_the_clusters_nodes_is_read_as_its_nodes(tmp_path):
    """``env.max_span=100`` on the default 64 nodes ran for minutes with no output (the gang
    arrays and the compile grow with the span). A gang spans at most every node, so the run
    takes the span as 64 and ends, with the same schedule as ``env.max_span=64``."""
    config = cfg_lib.load(None, ["env.max_span=100"])
    nodes = experiment.build_nodes(config)
    assert experiment.span_within(config, nodes).env.max_span == len(nodes) == 64
    assert experiment.span_within(cfg_lib.load(None, ["env.max_span=8"]), nodes).env.max_span == 8


@pytest.mark.parametrize("gpu, value, named", [("k80", 1e300, "k80"), ("v100", 1e-300, "k80")])
def test_absurd_gavel_throughputs_are_refused_naming_the_entry(tmp_path, gpu, value, named):
    """1e300 steps/s on a K80, or 1e-300 on the V100 (the reference), passed validation and
    overflowed the float32 speeds to inf (a NaN work_alloc, only numpy warnings). Now the
    first entry whose speed relative to the V100's leaves ``SPEED_RANGE`` is named."""
    table = test_gavel.small_table()
    table[gpu][test_gavel.key("B", 1)]["null"] = value
    path = test_gavel.write_json(tmp_path, table)
    with pytest.raises(DataError, match="outside") as e:
        gavel.load_throughputs(path)
    assert e.value.field == f"{named} / ('B', 1) / null" and e.value.path == str(path)


def test_a_restart_cost_far_above_the_round_cannot_livelock_las():
    """``las`` with ``env.restart_overhead_s=[1e9]`` livelocked: restart time counts as attained
    service, so a restarting job was preempted again before its restart ended (68,358
    preemptions in 1,829 rounds, 94 of 300 jobs never finished). A cost past 2^24 s is now
    refused, naming the field, and the restart guard (semantics.md, "The restart guard") keeps
    a restarted job on its GPU until it has run as long as its restart took: 3 jobs on one GPU
    with a 1,000-s cost and 100-s rounds all end, where without the guard they preempt each
    other to the step cap."""
    from tests.sim.test_preemption import jitted_round_rollout, round_env
    from tests.test_reference_preemption import one_gpu_nodes

    with pytest.raises(DataError, match="restart_overhead_s"):
        cfg_lib.load(None, ["env.restart_overhead_s=[1e9]"])
    jobs = jobs_from_numpy(arrival_s=[0, 0, 0], work_s=[300] * 3, num_gpu=[1] * 3, gpu_milli=[1000] * 3,
                           cpu_milli=[0] * 3, mem_mib=[0] * 3)
    params = to_device(EnvParams(one_gpu_nodes(1), FRAG_CLASSES))
    batch = jax.tree.map(lambda x: np.asarray(x)[None], jobs)
    done = {}
    for guard in (False, True):
        env = round_env({"round_s": 100.0, "restart_overhead_s": 1000.0, "restart_guard": guard}, tie_break="identity")
        env = ClusterEnv(policies.get("las").env_config(env.config))
        state, metrics = jitted_round_rollout(env, "las", 200)(params, to_device(batch), jax.random.key(0)[None])
        done[guard] = (int(metrics["done"][0]), int(metrics["decisions"][0]), int(np.isfinite(state.end_s[0, :3]).sum()))
    assert done[False][:2] == (0, 200) and done[False][2] < 3 and done[True][0] == 1 and done[True][1] < 100 and done[True][2] == 3


def test_the_round_clock_still_advances_where_float32_cannot_add_a_round():
    """Past 2^24 s float32 holds no step of 1 s (t + 1 == t), so with 1-s rounds the round
    clock stopped: the engine's event loop turned at one instant for ever (a hang inside one
    step; the reference decided that instant to the step cap). Now the next round
    is the next float32 (semantics.md, "The round clock"): a job arriving at 2^24 s with 100 s
    of work ends at 2^24 + 100 s in both simulators, in about 50 rounds of 2 s."""
    from tests.sim.test_preemption import jitted_round_rollout, round_env
    from tests.test_reference_preemption import one_gpu_nodes

    start = float(2**24)
    jobs = jobs_from_numpy(arrival_s=[start], work_s=[100.0], num_gpu=[1], gpu_milli=[1000], cpu_milli=[0],
                           mem_mib=[0])
    cluster = one_gpu_nodes(1)
    env = round_env({"round_s": 1.0}, tie_break="identity")
    env = ClusterEnv(policies.get("srtf").env_config(env.config))
    batch = jax.tree.map(lambda x: np.asarray(x)[None], jobs)
    state, metrics = jitted_round_rollout(env, "srtf", 500)(to_device(EnvParams(cluster, FRAG_CLASSES)),
                                                           to_device(batch), jax.random.key(0)[None])
    ref = reference.run(cluster, jobs, FRAG_CLASSES, reference.RefConfig.like(env.config), round_policy="srtf",
                        max_steps=500)
    assert int(metrics["done"][0]) == 1 and float(state.end_s[0, 0]) == start + 100.0
    assert ref["end_s"][0] == np.float32(start + 100.0) and ref["metrics"]["decisions"] == int(metrics["decisions"][0])


def test_a_number_for_restart_overhead_s_is_one_constant_cost_through_set():
    """``--set env.restart_overhead_s=30`` was refused ("expected a list") though the setting
    reads a number as one constant cost."""
    assert cfg_lib.load(None, ["env.restart_overhead_s=30"]).env.restart_overhead_s == (30.0,)
    assert cfg_lib.load(None, ["env.restart_overhead_s=[7, 30]", "env.restart_above_gpus=[1]"]).env.restart_overhead_s \
        == (7, 30)
    with pytest.raises(DataError, match="restart_overhead_s"):
        cfg_lib.load(None, ['env.restart_overhead_s="slow"'])


@pytest.mark.parametrize("loads", ["nan", "0.5,inf", "-1"])
def test_a_load_that_is_not_a_finite_positive_number_is_named(loads, tmp_path, capsys):
    """``--loads nan`` said "expected a list"."""
    code = evaluate.main(["--loads", loads, "--episodes", "1", "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "eval.sweep_loads" in err[0] and "finite numbers > 0" in err[0]


def test_episodes_of_no_jobs_are_named_by_their_own_setting(tmp_path, capsys):
    """``workload.synthetic.num_jobs=0`` blamed the warm-up (env.warmup_jobs)."""
    code = evaluate.main(["--set", "workload.synthetic.num_jobs=0", "--episodes", "1", "--out", str(tmp_path / "o"),
                          "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "'workload.synthetic.num_jobs'" in err[0] and ">= 1" in err[0]


def test_the_gymnasium_envs_name_a_step_before_reset_and_no_envs():
    """Step before reset gave an AttributeError from inside the env, and ``make_vec`` with
    ``num_envs=0`` "Need at least one array to stack"."""
    with pytest.raises(RuntimeError, match="before reset"):
        gymnasium.make(ID, **TINY).unwrapped.step(0)
    with pytest.raises(RuntimeError, match="before reset"):
        gymnasium.make_vec(ID, num_envs=2, vectorization_mode="vector_entry_point", **TINY).step(np.zeros(2, int))
    with pytest.raises(ValueError, match="num_envs must be an integer >= 1"):
        gymnasium.make_vec(ID, num_envs=0, vectorization_mode="vector_entry_point", **TINY)


def test_a_folder_where_a_run_writes_a_file_is_refused_first_and_results_are_never_lost(tmp_path, capsys):
    """An out folder holding a folder named ``per_episode.csv`` crashed after the run, its
    results lost. Now it is refused before the work, and ``publish`` keeps any other clash's
    files in a folder of their own and names it."""
    out = tmp_path / "out"
    (out / "per_episode.csv").mkdir(parents=True)
    code = evaluate.main(["--schedulers", "first-fit", "--episodes", "1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "per_episode.csv is a folder" in err[0]
    (out / "plot.png").mkdir()

    def write(staging):
        (staging / "plot.png").write_text("the run's plot")
        return ["plot.png"]
    with pytest.raises(DataError, match="is a folder") as e:
        outputs.publish(out, write)
    kept = [p for p in out.glob("results-*/plot.png")]
    assert len(kept) == 1 and kept[0].read_text() == "the run's plot" and str(kept[0].parent) in str(e.value)


def philly_rows(n: int, far_line: int | None = None, far_time: str = "2099-12-31 00:00:00", gpus=None) -> str:
    """A Philly file of ``n`` jobs a minute apart on 2017-10-01 (VC aaa), one GPU each or
    ``gpus`` [n]; the job on file line ``far_line`` (2 = the first) at ``far_time`` instead."""
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(n):
        k = 1 if gpus is None else gpus[i]
        stamp = far_time if i + 2 == far_line else f"2017-10-01 {i // 60:02d}:{i % 60:02d}:00"
        rows.append(f"{stamp},600.0,{k},{600.0 * k},aaa")
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("far_time", ["2099-12-31 00:00:00", "1970-01-01 00:00:00"])
def test_a_philly_job_far_from_the_others_is_warned_about_and_refused_when_strict(tmp_path, caplog, far_time):
    """One row of 300 dated 2099 (or 1970) collapsed its trace window's compression with no
    warning (factor 540,900 against 622.5). Now it is named like openb's isolated pods."""
    path = tmp_path / "philly.csv"
    path.write_text(philly_rows(300, far_line=101, far_time=far_time))
    with caplog.at_level("WARNING"):
        trace = philly.load(path)
    assert trace.report["isolated_arrivals"] == 1
    assert f"{path}, line 101, field 'timestamp': 1 job(s) (lines 101) arrive apart" in caplog.text
    with pytest.raises(DataError, match="arrive apart") as e:
        philly.load(path, strict=True)
    assert (e.value.row, e.value.field) == (101, "timestamp")
    path.write_text(philly_rows(300))
    assert philly.load(path, strict=True).report["isolated_arrivals"] == 0


def test_a_philly_gang_larger_than_max_span_nodes_hold_is_counted_named_and_left_out(tmp_path, caplog):
    """A 64-GPU (or 33-GPU) job with max_span 4 on 8-GPU nodes failed at arrival unnamed,
    ``strict`` let it through, its work stayed in the compression, and a file of only such
    jobs reported jct_mean 0.0. Now: counted and named, out of the compression, refused by
    ``strict``, and a file where no job can be placed is refused."""
    nodes = cl.groups([["V100", 8, 8]])
    path = tmp_path / "philly.csv"
    path.write_text(philly_rows(6, gpus=[1, 64, 8, 33, 2, 16]))
    trace = philly.load(path)
    assert trace.unschedulable_mask(nodes, 4).tolist() == [False, True, False, True, False, False]
    assert trace.unschedulable_mask(nodes).tolist() == [False] * 6  # every node: 64 GPUs fit
    with caplog.at_level("WARNING"):
        count, names = trace.check_schedulable(nodes, max_span=4)
    assert count == 2 and names == ["aaa/3", "aaa/5"] and "on at most 4 nodes (env.max_span)" in caplog.text
    with pytest.raises(DataError, match="ask for more GPUs") as e:
        trace.check_schedulable(nodes, strict=True, max_span=4)
    assert (e.value.row, e.value.field) == (3, "num_gpus")
    jobs, _ = experiment.trace_episodes(trace, nodes, (0.0, 1.0), 6, 1, 0, 0.7, "span", max_span=4)
    runnable = philly.load(path).take(np.asarray([0, 2, 4, 5]))
    _, factor = alibaba.compress_to_load(runnable, cl.work_capacity(nodes), 0.7)
    np.testing.assert_allclose(np.asarray(jobs.arrival_s)[0, :6][[0, 2, 4, 5]], runnable.arrival_s / factor, rtol=1e-5)
    path.write_text(philly_rows(3, gpus=[64, 33, 40]))
    with pytest.raises(DataError, match="no job of the file can be placed"):
        philly.load(path).check_schedulable(nodes, max_span=4)


def test_offered_load_leaves_out_the_jobs_no_node_can_hold(tmp_path):
    """``offered_load`` counted the work of jobs no node can hold (8.82 for a Philly window
    compressed to 0.7 with one 600-GPU job): now it is the load the window was compressed to."""
    path = tmp_path / "philly.csv"
    path.write_text(philly_rows(100, gpus=[64 if i == 10 else 1 for i in range(100)]))
    config = cfg_lib.load(None, ['cluster.node_groups=[["V100", 8, 8]]', 'workload.source="philly"',
                                 f"workload.trace={str(path)!r}".replace("'", '"'), "workload.window_jobs=100",
                                 "workload.target_load=0.7", "env.max_span=4", "env.warmup_jobs=0",
                                 "env.measured_jobs=0", "eval.episodes=1", 'eval.schedulers=["first-fit"]',
                                 "eval.plots=false"])
    nodes = experiment.build_nodes(config)
    jobs, params, _, _, info = experiment.episodes(config, nodes)
    host = jax.device_get(jobs)
    assert info["unschedulable_jobs"] == 1  # (evaluate's offered_load column, below, without a rollout)
    rho = report.offered_load(host, cl.work_capacity(nodes), experiment.unschedulable(config, params, jobs))
    assert rho[0] == pytest.approx(0.7, rel=1e-6) and report.offered_load(host, cl.work_capacity(nodes))[0] > 1.0


@pytest.mark.parametrize("setting, key", [('workload.qos_classes=["LS"]', "workload.qos_classes"),
                                          ('workload.vcs=["b436b2"]', "workload.vcs")])
def test_a_setting_only_another_source_reads_is_refused(setting, key, tmp_path, capsys):
    """``workload.qos_classes`` on a source without qos values was silently ignored."""
    code = evaluate.main(["--set", setting, "--episodes", "1", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"'{key}'" in err[0] and "'synthetic' has none" in err[0]


def test_the_step_cap_warning_names_the_jobs_that_never_started():
    """The step-cap warning named neither the job nor the reason. Two episodes of four jobs:
    in episode 0 job 1 (4 GPUs) arrived, fits and never started, job 2 never fits, job 3 has
    not arrived; episode 1 ended."""
    jobs = jobs_from_numpy(arrival_s=[0, 1, 2, 3], work_s=[1] * 4, num_gpu=[1, 4, 64, 1], gpu_milli=[1000] * 4,
                           cpu_milli=[0] * 4, mem_mib=[0] * 4)
    jobs = jax.tree.map(lambda x: np.stack([x, x]), jobs)
    records = {"next_arrival": np.asarray([3, 4]), "unschedulable": np.asarray([[0, 0, 1, 0]] * 2, bool),
               "start_s": np.asarray([[0, np.inf, np.inf, np.inf], [0, 1, np.inf, 3]], np.float32)}
    cols = report.never_started(jobs, records)
    assert cols["never_started"].tolist() == [1, 0] and cols["first_never_started"].tolist() == [1, -1]
    frame = pd.DataFrame({"scheduler": "las", "episode": [0, 1], "done": [0, 1], "dropped_overflow": 0, **cols})
    (line,) = report.warnings(frame, EnvConfig())
    assert "1 of 2 episodes hit the step cap" in line and "first: job 1 of episode 0, 4 GPUs" in line


def test_compare_refuses_files_that_cannot_show_they_hold_the_same_episodes(tmp_path):
    """``compare`` paired the episodes of two different seeds without a word when the check
    columns (offered_load, jobs_total, measured_jobs) were missing."""
    a = pd.DataFrame({"scheduler": "x", "episode": [0, 1], "jct_mean": [1.0, 2.0], "done": 1})
    with pytest.raises(DataError, match="cannot pair") as e:
        compare.pair(a, a.copy(), ["jct_mean"], "a.csv", "b.csv")
    assert e.value.path == "a.csv"
    checked = a.assign(offered_load=[0.8, 0.9])
    assert compare.pair(checked, checked.copy(), ["jct_mean"])["pairs"].tolist() == [2]


@pytest.mark.parametrize("loader, text", [
    (lambda p: alibaba.load_openb_pods(p, mode="dynamic"),
     "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,,\nopenb-pod-0001,8000,8192,0,0,,BE,Running,0,,\n"),
    (philly.load, "2017-10-01 00:10:00,100.0,1,100.0,aaa\n2017-10-01 00:20:00,0,1,0,aaa\n")])
def test_a_trace_without_a_header_row_says_so(tmp_path, loader, text):
    """A pod list without its header row was reported as "column '0' appears twice"."""
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(DataError, match="no header row: line 1 looks like data") as e:
        loader(path)
    assert e.value.row == 1


def test_a_per_episode_csv_cut_mid_row_is_named_as_cut(tmp_path):
    """A CSV cut mid-row was reported as "not the same episodes" (its last row read as NaNs)."""
    path = tmp_path / "per_episode.csv"
    path.write_text("scheduler,episode,jct_mean,offered_load\nfgd,0,10.0,0.8\nfgd,1,12.0")
    with pytest.raises(DataError, match="cut short: 3 of the header's 4 fields") as e:
        compare.read_csv(path)
    assert e.value.row == 3


def test_jobs_that_failed_at_arrival_are_said_out_loud():
    """Jobs whose type runs on no GPU of the cluster (or that no node holds) were counted as
    failed with no message."""
    frame = pd.DataFrame({"scheduler": "las", "episode": [0, 1], "done": 1, "dropped_overflow": 0, "failed": [0, 3]})
    (line,) = report.warnings(frame, EnvConfig())
    assert line.startswith("scheduler las: 3 jobs failed at arrival in 1 of 2 episodes")


def test_a_sweep_load_so_low_that_float32_rounds_its_times_is_refused_before_any_runs(tmp_path, capsys):
    """A synthetic sweep at load 1e-6 changed run times by float32 rounding (the same jobs gave
    jct_mean 3,699.46 s there and 3,698.49 s at 0.5)."""
    code = evaluate.main(["--loads", "0.5,1e-6", "--episodes", "1", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "eval.sweep_loads" in err[0] and "at load 1e-06" in err[0]
    assert not any((tmp_path / "o").iterdir())  # refused before any load ran


def test_ctrl_c_before_any_scheduler_finished_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    """Ctrl-C during evaluate's first compile ended in a KeyboardInterrupt traceback."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(evaluate, "run_scheduler", interrupted)
    code = evaluate.main(["--set", "workload.synthetic.num_jobs=50", "--set", "env.warmup_jobs=0", "--set",
                          "env.measured_jobs=0", "--episodes", "1", "--out", str(tmp_path / "o"), "--quiet"])
    assert code == 130 and capsys.readouterr().err.strip() == "interrupted before any scheduler finished: nothing written"


def random_round_settings(case: int):
    """(round policy, EnvConfig) drawn for ``case``: the round settings an outside user may
    combine (round length, restart costs by size, gangs and their rules, early-ending rounds,
    allocation resets, the walk's slots), and the round policy."""
    from tests.sim.test_preemption import round_env

    rng = random.Random(case)
    costs, above = rng.choice([((0.0,), ()), ((5.0,), ()), ((45.0,), ()), ((2.0, 60.0), (1,))])
    settings = {"round_s": rng.choice([15.0, 30.0, 100.0]), "restart_overhead_s": costs, "restart_above_gpus": above,
                "max_span": rng.choice([1, 2, 3]),
                "gang_rule": rng.choice(["consolidate", "spread", "helios"]), "spread_penalty": rng.choice([1.0, 0.7]),
                "gang_one_model": rng.random() < 0.5, "round_ends_early": rng.random() < 0.5,
                "round_reset_s": rng.choice([0.0, 55.0]), "walk_slots": rng.choice([3, 512])}
    policy = rng.choice(["las", "las-gpu", "srtf", "tiresias", "priority", "gavel-fifo"])
    if settings["gang_rule"] == "helios":  # (Helios's placer: one GPU model, gangs never held to one)
        settings["gang_one_model"] = False
        policy = "las" if policy == "gavel-fifo" else policy
    env = round_env(settings, tie_break="identity")
    return policy, ClusterEnv(policies.get(policy).env_config(env.config))


DEFAULT_TIER_CASES = (0, 3, 5, 12)  # gangs on one model, consolidate over 3 nodes, Helios's placer at 2 and 3


@pytest.mark.parametrize("case", [case if case in DEFAULT_TIER_CASES else extended(case) for case in range(16)])
def test_random_round_settings_never_overcommit_and_conserve_work(case):
    """Over random round settings (``random_round_settings``) and random gang workloads,
    after every round decision: no resource over-committed, GPUs held plus free equal to the
    cluster's, a job's work left never grows, and a finished job's last segment does exactly
    the work it had left (``tests.sim.test_preemption.assert_round_invariants``)."""
    from tests.sim.test_gangs import GANG_SIZES
    from tests.sim.test_preemption import assert_round_invariants
    from tests.strategies import clusters, workloads

    policy, env = random_round_settings(case)

    @hyp.settings(max_examples=4, deadline=None)
    @hyp.given(cluster=clusters(), jobs=workloads(sizes=GANG_SIZES), seed=hyp.strategies.integers(0, 2**31 - 1))
    def check(cluster, jobs, seed):
        assert_round_invariants(env, policy, cluster, jobs, seed, max_rounds=100)

    check()
