"""The Philly trace loader: columns, selection by VC and time window, validation, gangs, load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jaxsched import cluster as C
from jaxsched import paths
from jaxsched.errors import DataError
from jaxsched.types import ALL_MODELS
from jaxsched.workload import alibaba as A
from jaxsched.workload import philly as P
from tests.assertions import assert_names

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
# Lines 2..7 of the small file: out of time order, two VCs, gangs of 1 to 16 GPUs.
ROWS = ("2017-10-01 00:10:00,100.0,1,100.0,aaa\n"
        "2017-10-01 00:00:00,50.0,16,800.0,bbb\n"
        "2017-10-01 00:05:00,200.0,8,1600.0,aaa\n"
        "2017-10-01 00:05:00,30.0,2,60.0,bbb\n"
        "2017-10-02 00:00:00,10.0,4,40.0,aaa\n"
        "2017-09-30 23:00:00,7.0,1,7.0,ccc\n")


def write(tmp_path, text, name="philly.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def node_table(rows):
    """A NodeTable of (name, model, gpus, cpu_milli, mem_mib) rows."""
    names, models, gpus, cpus, mems = zip(*rows)
    return C.NodeTable(names=names, model=np.asarray([C.model_id(m) for m in models], np.int32),
                       num_gpus=np.asarray(gpus, np.int32), cpu_milli=np.asarray(cpus, np.int32),
                       mem_mib=np.asarray(mems, np.int32))


@pytest.fixture
def small(tmp_path):
    return write(tmp_path, HEADER + ROWS)


def test_columns_come_from_their_rows_sorted_by_arrival(small):
    w = P.load(small, vcs=["aaa", "bbb"])
    assert isinstance(w, P.PhillyWorkload) and len(w) == 5
    # stable sort by submission: line 3 (00:00), lines 4 and 5 (00:05, file order), 2, 6
    assert w.lines.tolist() == [3, 4, 5, 2, 6]
    assert w.arrival_s.tolist() == [0.0, 300.0, 300.0, 600.0, 86400.0]
    assert w.work_s.tolist() == [50.0, 200.0, 30.0, 100.0, 10.0]
    assert w.num_gpu.tolist() == [16, 8, 2, 1, 4]
    assert w.vc.tolist() == ["bbb", "aaa", "bbb", "aaa", "aaa"]
    assert w.names.tolist() == ["bbb/3", "aaa/4", "bbb/5", "aaa/2", "aaa/6"]
    assert (w.gpu_milli == 1000).all() and (w.model_mask == ALL_MODELS).all()
    assert np.array_equal(w.cpu_milli, w.num_gpu * P.CPU_MILLI_PER_GPU)
    assert np.array_equal(w.mem_mib, w.num_gpu * P.MEM_MIB_PER_GPU)
    r = w.report
    assert (r["rows_read"], r["jobs"], r["left_out_other_vcs"], r["left_out_outside_window"]) == (6, 5, 1, 0)
    assert r["t0"] == "2017-10-01 00:00:00" and r["gang_sizes"] == {1: 1, 2: 1, 4: 1, 8: 1, 16: 1}


def test_one_vc_a_time_window_and_the_cpu_memory_split(small):
    w = P.load(small, vcs="aaa", start="2017-10-01 00:00:00", end="2017-10-02 00:00:00",
               cpu_milli_per_gpu=1000, mem_mib_per_gpu=2048)
    assert w.lines.tolist() == [4, 2]  # line 6 is submitted at the window's end: outside
    assert w.arrival_s.tolist() == [300.0, 600.0]  # from the window's start, not the first job
    assert w.report["left_out_outside_window"] == 1 and w.report["left_out_other_vcs"] == 3
    assert w.cpu_milli.tolist() == [8000, 1000] and w.mem_mib.tolist() == [16384, 2048]
    assert len(P.load(small)) == 6  # no selection: every VC, the whole trace


@pytest.mark.parametrize("row, field, problem", [
    ("2017-10-01 00:00:00,10.0,1.5,15.0,aaa", "num_gpus", "not a whole number"),
    ("2017-10-01 00:00:00,10.0,0,0.0,aaa", "num_gpus", "must be >= 1"),
    ("2017-10-01 00:00:00,10.0,-2,-20.0,aaa", "num_gpus", "must be >= 1"),
    ("2017-10-01 00:00:00,10.0,two,20.0,aaa", "num_gpus", "not a number"),
    ("2017-10-01 00:00:00,0.0,1,0.0,aaa", "duration", "zero duration"),
    ("2017-10-01 00:00:00,-5.0,1,-5.0,aaa", "duration", "negative"),
    ("2017-10-01 00:00:00,ten,1,10.0,aaa", "duration", "not a number"),
    ("2017-10-01 00:00:00,,1,10.0,aaa", "duration", "missing value"),
    ("2017/10/01 00:00:00,10.0,1,10.0,aaa", "timestamp", "malformed timestamp"),
    ("2017-13-01 00:00:00,10.0,1,10.0,aaa", "timestamp", "malformed timestamp"),
    ("1506816000,10.0,1,10.0,aaa", "timestamp", "malformed timestamp"),
    (",10.0,1,10.0,aaa", "timestamp", "missing value"),
    ("2017-10-01 00:00:00,10.0,1,10.0,", "cluster", "missing value"),
    ("2017-10-01 00:00:00,10.0,2,10.0,aaa", "gpu_time", "not duration × num_gpus"),
    ("2017-10-01 00:00:00,10.0,1,10.0", "cluster", "missing value"),
])
def test_a_malformed_row_is_named_by_file_line_and_field(tmp_path, row, field, problem):
    path = write(tmp_path, HEADER + ROWS + row + "\n")
    with pytest.raises(DataError, match=problem) as e:
        P.load(path)
    assert_names(e.value, path, 8, field)


def test_the_file_must_have_the_columns_and_jobs(tmp_path):
    path = write(tmp_path, "timestamp,duration,gpu_time,cluster\n2017-10-01 00:00:00,1,1,a\n")
    with pytest.raises(DataError, match="missing column") as e:
        P.load(path)
    assert_names(e.value, path, 1, "num_gpus")
    no_gpu_time = write(tmp_path, "timestamp,duration,num_gpus,cluster\n2017-10-01 00:00:00,5,2,a\n", "b.csv")
    assert P.load(no_gpu_time).work_s.tolist() == [5.0]  # gpu_time is only checked when present
    for text, problem in (("", "empty file"), (HEADER, "no jobs")):
        with pytest.raises(DataError, match=problem) as e:
            P.load(write(tmp_path, text, "c.csv"))
        assert_names(e.value, tmp_path / "c.csv", None, None)
    with pytest.raises(DataError, match="file not found"):
        P.load(tmp_path / "nowhere.csv")


@pytest.mark.parametrize("kwargs, field, problem", [
    ({"vcs": "zzz"}, "cluster", r"unknown VC 'zzz'; the file's VCs: \['aaa', 'bbb', 'ccc'\]"),
    ({"vcs": ["aaa", "zzz"]}, "cluster", "unknown VC 'zzz'"),
    ({"vcs": []}, "cluster", "no VC selected"),
    ({"vcs": "ccc", "start": "2017-10-01 00:00:00"}, "timestamp", "no job of VC"),
    ({"start": "2017-10-05 00:00:00"}, "timestamp", "no job of VC"),
    ({"start": "2017-10-02 00:00:00", "end": "2017-10-01 00:00:00"}, "end", "is empty"),
    ({"start": "2017-10-01"}, "start", "not a timestamp"),
    ({"end": "soon"}, "end", "not a timestamp"),
    ({"cpu_milli_per_gpu": 0}, "cpu_milli_per_gpu", ">= 1"),
    ({"mem_mib_per_gpu": 1.5}, "mem_mib_per_gpu", ">= 1"),
])
def test_a_bad_selection_is_named(small, kwargs, field, problem):
    with pytest.raises(DataError, match=problem) as e:
        P.load(small, **kwargs)
    assert_names(e.value, small, None, field)


def test_a_gang_larger_than_the_cluster_is_counted_not_an_error(small, caplog):
    w = P.load(small)
    nodes = node_table([(f"n{i}", "V100", 8, 96000, 393216) for i in range(2)])  # 16 GPUs
    assert w.count_unschedulable(nodes) == (0, [])  # 16 GPUs span the two nodes
    one = node_table([("n0", "V100", 8, 96000, 393216)])
    assert w.count_unschedulable(one) == (1, ["bbb/3"])
    assert w.check_schedulable(one) == (1, ["bbb/3"]) and "more GPUs than the empty cluster" in caplog.text
    with pytest.raises(DataError, match="asks for 16 GPUs, the cluster holds 8") as e:
        w.check_schedulable(one, strict=True)
    assert_names(e.value, small, 3, "num_gpus")
    # a node's CPU and memory bound the GPUs a gang can use there: 8 GPUs, CPU for 2 of them
    poor = node_table([("n0", "V100", 8, 96000, 393216), ("n1", "V100", 8, 2 * P.CPU_MILLI_PER_GPU, 393216)])
    assert P.gang_capacity(poor, w).tolist() == [10] * 6
    assert w.count_unschedulable(poor) == (1, ["bbb/3"])


def test_the_default_cpu_and_memory_fit_every_preset_node_gpu_for_gpu():
    for model, gpus, cpu, mem, _ in C.OPENB_NODE_TYPES:
        assert gpus * P.CPU_MILLI_PER_GPU <= cpu and gpus * P.MEM_MIB_PER_GPU <= mem, model


def test_windows_and_compression_of_the_openb_replay_apply(tmp_path):
    rng = np.random.default_rng(0)
    n = 60
    t = pd.Timestamp("2017-10-01") + pd.to_timedelta(np.sort(rng.integers(0, 86400, n)), unit="s")
    dur = rng.integers(1, 5000, n)
    gpus = rng.choice([1, 2, 8, 16], n)
    vc = rng.choice(["aaa", "bbb"], n)
    rows = [f"{a:%Y-%m-%d %H:%M:%S},{d}.0,{g},{d * g}.0,{v}\n" for a, d, g, v in zip(t, dur, gpus, vc)]
    w = P.load(write(tmp_path, HEADER + "".join(rows)))
    # offered load on 64 x 8 GPUs, counted in GPUs x seconds, by hand
    span = (t.max() - t.min()).total_seconds()
    assert w.offered_load(512) == pytest.approx((dur * gpus).sum() / (512 * span), rel=1e-12)
    windows = A.trace_windows(w, 20, 3, seed=1)
    for win in windows:
        assert isinstance(win, P.PhillyWorkload) and win.arrival_s[0] == 0
        start = win.report["window_start"]
        assert win.vc.tolist() == w.vc[start:start + 20].tolist()  # the VC stays with its job
        assert win.names.tolist() == w.names[start:start + 20].tolist()
        squeezed, factor = A.compress_to_load(win, 512, 0.7)
        assert isinstance(squeezed, P.PhillyWorkload)
        assert squeezed.offered_load(512) == pytest.approx(0.7)
        assert np.allclose(squeezed.arrival_s, win.arrival_s / factor)
    jobs = windows[0].to_jobs(pad_to=32)
    assert np.array_equal(jobs.num_gpu[:20], windows[0].num_gpu) and not jobs.valid[20:].any()


@pytest.mark.parametrize("replay", ["native", "windows"])
def test_a_native_replay_keeps_the_traces_own_arrival_times(tmp_path, replay):
    """``workload.replay = "native"``: the windows of ``"windows"`` at the trace's own arrival
    times (factor 1.0), where ``"windows"`` compresses them to the target load."""
    from jaxsched import experiment

    rng = np.random.default_rng(3)
    n = 30
    t = pd.Timestamp("2017-10-01") + pd.to_timedelta(np.sort(rng.integers(0, 86400, n)), unit="s")
    rows = [f"{a:%Y-%m-%d %H:%M:%S},100.0,1,100.0,aaa\n" for a in t]
    w = P.load(write(tmp_path, HEADER + "".join(rows)))
    nodes = node_table([(f"n{i}", "V100", 8, 96000, 393216) for i in range(2)])
    jobs, factors = experiment.trace_episodes(w, nodes, (0.0, 1.0), 10, 2, 0, 0.7, "span", replay=replay)
    windows = A.trace_windows(w, 10, 2, seed=0)
    for e, win in enumerate(windows):
        want = win.arrival_s if replay == "native" else win.arrival_s / factors[e]
        np.testing.assert_allclose(np.asarray(jobs.arrival_s)[e][:10], want, rtol=1e-6)
    assert (factors == [1.0, 1.0]) == (replay == "native")
    with pytest.raises(DataError, match="must be one of") as e:
        experiment.trace_episodes(w, nodes, (0.0, 1.0), 10, 2, 0, 0.7, "span", replay="as-is")
    assert e.value.field == "workload.replay"


def test_gpu_time_share_by_hand(small):
    share = P.gpu_time_share(P.load(small))
    total = 100 + 800 + 1600 + 60 + 40 + 7
    assert share == pytest.approx({1: 107 / total, 2: 60 / total, 4: 40 / total, 8: 1600 / total,
                                   16: 800 / total})


# ================================================================ the real trace

@pytest.fixture(scope="module")
def philly_csv():
    found = paths.data_dir()
    if found is None or not (found / "philly" / "philly.csv").is_file():
        pytest.skip("Philly trace not found: set JAXSCHED_DATA or provide ../shared/data/philly/philly.csv "
                    "(see shared/data/README.md)")
    return found / "philly" / "philly.csv"


@pytest.fixture(scope="module")
def b436b2(philly_csv):
    return P.load(philly_csv, vcs="b436b2")


def test_real_trace_b436b2(philly_csv, b436b2):
    frame = pd.read_csv(philly_csv, dtype=str, keep_default_na=False)
    mine = frame[frame.cluster == "b436b2"]
    w = b436b2
    assert len(w) == len(mine) == 7423 and w.report["rows_read"] == 82247
    assert w.report["gang_sizes"] == {1: 7237, 2: 3, 4: 72, 8: 51, 16: 58, 24: 2}
    # every job's columns come from its own row (looked up by line, independently of the loader)
    rows = frame.loc[w.lines - 2]
    assert (rows.cluster == "b436b2").all()
    assert np.array_equal(w.work_s, rows.duration.astype(float))
    assert np.array_equal(w.num_gpu, rows.num_gpus.astype(int))
    t = pd.to_datetime(rows.timestamp)
    assert np.array_equal(w.arrival_s, (t - t.min()).dt.total_seconds())
    assert (np.diff(w.arrival_s) >= 0).all()
    # the issue: half its GPU-time is in jobs of 16 and 24 GPUs
    share = P.gpu_time_share(w)
    assert 0.5 < share[16] + share[24] < 0.52
    # the raw trace on 64 nodes x 8 GPUs offers about a ninth of the cluster
    gpu_s = (mine.duration.astype(float) * mine.num_gpus.astype(int)).sum()
    span = (pd.to_datetime(mine.timestamp).max() - pd.to_datetime(mine.timestamp).min()).total_seconds()
    assert w.offered_load(64 * 8) == pytest.approx(gpu_s / (512 * span), rel=1e-12)
    assert 0.10 < w.offered_load(512) < 0.12
    nodes = node_table([(f"n{i}", "V100", 8, 96000, 393216) for i in range(P.VC_NODES["b436b2"])])
    assert w.count_unschedulable(nodes) == (0, [])


def test_real_trace_every_vc_and_a_month(philly_csv):
    w = P.load(philly_csv)
    assert len(w) == 82247 and sorted(set(w.vc)) == sorted(set(P.VC_NODES) | {"23dbec", "51b7ef", "925e2b", "795a4c"})
    assert w.num_gpu.max() == 128 and w.report["t0"] == "2017-09-04 10:30:41"
    october = P.load(philly_csv, vcs=["b436b2", "ee9e8c"], start="2017-10-01 00:00:00", end="2017-11-01 00:00:00")
    assert 0 <= october.arrival_s.min() and october.arrival_s.max() < 31 * 86400
    assert set(october.vc) == {"b436b2", "ee9e8c"}
    assert october.report["jobs"] + october.report["left_out_outside_window"] == 7423 + 1511


@pytest.mark.slow
def test_philly_preset_runs_gangs_across_nodes(philly_csv):
    """configs/philly.toml, shrunk: VC b436b2 on 64 nodes of 8 GPUs. Every job above 8 GPUs
    that ran spans nodes, each multi-GPU job's parts hold exactly its GPUs (GPU bits over its
    nodes), the over-8 JCT is theirs, and consolidate spans fewer nodes in all than
    first-fit on the same episodes (first-fit anchors a job on the first node with a free GPU)."""
    from jaxsched import config as cfg_lib
    from jaxsched import evaluate as ev
    from jaxsched import experiment, report

    config = cfg_lib.load(Path(__file__).parents[2] / "configs" / "philly.toml", overrides=[
        "eval.episodes=2", "eval.batch_size=2", "workload.window_jobs=400", "env.warmup_jobs=100",
        "env.measured_jobs=100", f'workload.trace="{philly_csv}"'])
    nodes = experiment.build_nodes(config)
    assert len(nodes) == 64 and set(nodes.num_gpus) == {8}
    eps = experiment.episodes(config, nodes)
    spans = {}
    for name in ("first-fit", "consolidate"):
        metrics, records = ev.run_scheduler(name, config, eps.params, eps.jobs, eps.env_keys, eps.max_steps)
        used = report.num_nodes(records["node"], records["span_node"])
        placed = records["outcome"] == 1
        k = np.asarray(eps.jobs.num_gpu)
        assert (used[placed & (k > 8)] >= 2).all() and (placed & (k > 8)).any()
        bits = np.concatenate([records["gpu_bits"][..., None], records["span_bits"]], -1)
        held = np.vectorize(lambda b: bin(int(b)).count("1"))(bits).sum(-1)
        np.testing.assert_array_equal(held[placed & (k >= 2)], k[placed & (k >= 2)])
        spans[name] = used[placed & (k >= 2)].sum()
        # The over-8 JCT is the mean over the measured jobs above 8 GPUs that finished.
        index = np.arange(k.shape[1])
        done = placed & (records["end_s"] <= records["time_s"][:, None])
        measured = (index >= config.env.warmup_jobs) & (index <= records["measure_last"][:, None])
        jct = records["end_s"] - np.asarray(eps.jobs.arrival_s)
        for e in range(k.shape[0]):
            mine = done[e] & measured[e] & (k[e] > 8)
            want = jct[e][mine].astype(np.float64).mean() if mine.any() else 0.0
            assert metrics["jct_mean_over8"][e] == pytest.approx(want, rel=1e-4)
    assert spans["consolidate"] < spans["first-fit"]
