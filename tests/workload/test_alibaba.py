"""Real-trace loaders (openb, PAI), their validation, windows, offered load and FGD classes."""

from __future__ import annotations

import collections

import numpy as np
import pandas as pd
import pytest

from jaxsched import cluster as C
from jaxsched import experiment, paths
from jaxsched.config import WorkloadConfig
from jaxsched.errors import DataError
from jaxsched.types import ALL_MODELS, MAX_FRAG_WEIGHT, MAX_GPUS_PER_NODE
from jaxsched.workload import alibaba as A
from jaxsched.workload.classes import class_weights, target_workload
from tests.assertions import assert_names


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


# ================================================================ paths

def test_config_trace_paths_honour_jaxsched_data_and_any_working_dir(monkeypatch, tmp_path):
    shipped = "../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv"  # as configs write it
    monkeypatch.setenv("JAXSCHED_DATA", str(tmp_path))
    assert paths.resolve_data_path(shipped) == tmp_path / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    monkeypatch.delenv("JAXSCHED_DATA")
    monkeypatch.chdir(tmp_path)  # not the repository: relative paths are found from its root
    repo = __import__("pathlib").Path(paths.__file__).resolve().parent.parent
    assert paths.resolve_data_path("configs/default.toml") == repo / "configs" / "default.toml"
    (tmp_path / "mine.csv").write_text("")
    assert paths.resolve_data_path("mine.csv").resolve() == tmp_path / "mine.csv"  # the working dir first
    assert str(paths.resolve_data_path("nowhere.csv")) == "nowhere.csv"  # left to fail, named


def test_data_dir_env_var_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXSCHED_DATA", str(tmp_path))
    assert paths.data_dir() == tmp_path


def test_data_dir_default_is_next_to_the_repo(monkeypatch):
    monkeypatch.delenv("JAXSCHED_DATA", raising=False)
    found = paths.data_dir()
    repo = __import__("pathlib").Path(paths.__file__).resolve().parent.parent
    expected = repo.parent / "shared" / "data"
    assert found == (expected if expected.is_dir() else None)


# ================================================================ openb on the real files

@pytest.fixture(scope="module")
def default_csv(openb_dir):
    return openb_dir / "openb_pod_list_default.csv"


@pytest.fixture(scope="module")
def default_frame(default_csv):
    return pd.read_csv(default_csv, dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def gpu_nodes(openb_dir):
    return C.load_openb_nodes(openb_dir / "openb_node_list_gpu_node.csv")


def test_default_list_dynamic(default_csv, default_frame):
    w = A.load_openb_pods(default_csv)
    r = w.report
    assert r["rows_read"] == 8152
    assert r["phases"] == {"Running": 5193, "Failed": 1870, "Pending": 897, "Succeeded": 192}
    assert r["left_out_pending"] == 897
    assert len(w) == r["jobs"] == 8152 - 897
    pending = set(default_frame.name[default_frame.scheduled_time == ""])
    assert len(pending) == 897 and not pending & set(w.names)
    assert (np.diff(w.arrival_s) >= 0).all()
    # every job's columns come from its own row (looked up by name, independently of the loader)
    f = default_frame.set_index("name").loc[list(w.names)]
    num = lambda c: f[c].astype(float).to_numpy()
    assert np.array_equal(w.arrival_s, num("creation_time"))
    assert np.array_equal(w.work_s, num("deletion_time") - num("scheduled_time"))
    assert (w.work_s >= 0).all()
    assert np.array_equal(w.cpu_milli, num("cpu_milli"))
    assert np.array_equal(w.mem_mib, num("memory_mib"))
    assert np.array_equal(w.num_gpu, num("num_gpu")) and np.array_equal(w.gpu_milli, num("gpu_milli"))
    assert (w.model_mask == ALL_MODELS).all()  # the default list has no gpu_spec
    # source lines point at the right rows (header = line 1)
    row_of = pd.Index(default_frame.name).get_indexer(list(w.names))
    assert np.array_equal(w.lines, row_of + 2)


def test_default_list_strict_refuses_pending(default_csv, default_frame):
    with pytest.raises(DataError, match="Pending|never ran") as e:
        A.load_openb_pods(default_csv, strict=True)
    first = int(np.flatnonzero(default_frame.scheduled_time.to_numpy() == "")[0]) + 2
    assert_names(e.value, default_csv, first, "scheduled_time")


def test_default_list_static(default_csv):
    w = A.load_openb_pods(default_csv, mode="static")
    assert len(w) == 8152 and w.report["left_out_pending"] == 0
    assert list(w.names) == sorted(w.names)
    assert np.array_equal(w.arrival_s, np.arange(8152))
    assert (w.work_s == 0).all()


def test_static_sorts_by_name(openb_dir):
    # cpu300 is not in name order in the file; static mode sorts it, as the FGD paper does
    path = openb_dir / "openb_pod_list_cpu300.csv"
    names = pd.read_csv(path, dtype=str).name.tolist()
    assert names != sorted(names)
    w = A.load_openb_pods(path, mode="static")
    assert list(w.names) == sorted(names)
    assert np.array_equal(w.arrival_s, np.arange(len(names)))


@pytest.mark.parametrize("pct", ["20", "30", "40", "50"])
def test_multigpu_lists_static_only(openb_dir, pct):
    path = openb_dir / f"openb_pod_list_multigpu{pct}.csv"
    w = A.load_openb_pods(path, mode="static")
    rows = sum(1 for _ in open(path)) - 1
    assert len(w) == rows and 8324 <= rows <= 9061
    assert (w.num_gpu >= 2).any() and (w.gpu_milli[w.num_gpu >= 2] == 1000).all()
    with pytest.raises(DataError, match="creation_time.*deletion_time.*scheduled_time") as e:
        A.load_openb_pods(path, mode="dynamic")
    assert_names(e.value, path, 1, "creation_time")


def test_gpuspec10_unschedulable(openb_dir, gpu_nodes):
    path = openb_dir / "openb_pod_list_gpuspec10.csv"
    w = A.load_openb_pods(path, mode="static")
    count, names = w.count_unschedulable(gpu_nodes)
    assert (count, names) == (2, ["openb-pod-1639", "openb-pod-5724"])
    assert w.check_schedulable(gpu_nodes) == (count, names)  # not strict: reported, no error
    with pytest.raises(DataError, match="2 job") as e:
        w.check_schedulable(gpu_nodes, strict=True)
    frame = pd.read_csv(path, dtype=str)
    line = int(np.flatnonzero(frame.name == "openb-pod-1639")[0]) + 2
    assert_names(e.value, path, line, "cpu_milli")  # 8 G2 GPUs with more CPU than a G2 node
    # the default list, on the same nodes, has no such pod
    d = A.load_openb_pods(openb_dir / "openb_pod_list_default.csv", mode="static")
    assert d.count_unschedulable(gpu_nodes) == (0, [])


def test_gpuspec_masks(openb_dir):
    path = openb_dir / "openb_pod_list_gpuspec33.csv"
    w = A.load_openb_pods(path, mode="static")
    spec = w.gpu_spec.astype(str)
    assert (w.model_mask[spec == ""] == ALL_MODELS).all()
    for s in ("T4", "V100M16|V100M32", "V100M16|V100M32|V100M32"):
        assert (w.model_mask[spec == s] == C.model_mask(s.split("|"))).all()
        assert (spec == s).any()


def test_to_jobs(default_csv):
    w = A.load_openb_pods(default_csv)
    j = w.to_jobs(pad_to=8192)
    assert j.num_jobs == 8192 and j.valid.sum() == len(w)
    assert np.allclose(j.arrival_s[: len(w)], w.arrival_s.astype(np.float32))
    assert np.isinf(j.arrival_s[len(w):]).all()
    assert np.array_equal(j.num_gpu[: len(w)], w.num_gpu)
    assert j.arrival_s.dtype == np.float32 and j.cpu_milli.dtype == np.int32


def test_fgd_classes_default(default_csv):
    w = A.load_openb_pods(default_csv, mode="static")
    fc = w.frag_classes()
    m = len(fc.prob)
    assert m == 35
    assert fc.prob.dtype == np.float32 and abs(float(fc.prob.sum()) - 1) < 1e-5
    assert (np.diff(fc.prob) <= 0).all()  # most popular first
    keys = collections.Counter(zip(w.cpu_milli.tolist(), w.gpu_milli.tolist(), w.num_gpu.tolist()))
    counts = np.array([keys[(c, g, n)] for c, g, n in zip(fc.cpu_milli, fc.gpu_milli, fc.num_gpu)])
    assert counts.sum() >= 0.95 * len(w) > counts[:-1].sum()  # the fewest that cover 95%
    assert np.allclose(fc.prob, counts / counts.sum())
    assert (fc.num_gpu == 0).any()  # CPU-only jobs are classes too
    padded = w.frag_classes(max_classes=40)
    assert len(padded.prob) == 40 and (padded.prob[35:] == 0).all()
    assert np.array_equal(padded.cpu_milli[:35], fc.cpu_milli)
    with pytest.raises(DataError, match="max_classes"):
        w.frag_classes(max_classes=10)


def test_target_workload_key_and_ties():
    # memory is not in the key: jobs differing only in memory are one class
    cpu = np.array([1000, 1000, 2000, 2000, 3000, 4000])
    milli = np.array([500, 500, 0, 0, 1000, 1000])
    ngpu = np.array([1, 1, 0, 0, 2, 1])
    spec = np.array(["", "", "", "", "T4", "A10|T4"], dtype=object)
    fc = target_workload(cpu, milli, ngpu, spec, coverage=1.0)
    assert len(fc.prob) == 4
    # equal counts are ordered by key, whatever the input order
    assert fc.cpu_milli.tolist() == [1000, 2000, 3000, 4000]
    perm = np.array([5, 3, 1, 4, 0, 2])
    fp = target_workload(cpu[perm], milli[perm], ngpu[perm], spec[perm], coverage=1.0)
    for a, b in zip((fc.cpu_milli, fc.gpu_milli, fc.num_gpu, fc.model_mask, fc.prob),
                    (fp.cpu_milli, fp.gpu_milli, fp.num_gpu, fp.model_mask, fp.prob)):
        assert np.array_equal(a, b)
    assert np.allclose(fc.prob, [1 / 3, 1 / 3, 1 / 6, 1 / 6])
    assert fc.model_mask.tolist() == [ALL_MODELS, ALL_MODELS, C.model_mask(["T4"]),
                                      C.model_mask(["A10", "T4"])]
    half = target_workload(cpu, milli, ngpu, spec, coverage=0.5)
    assert half.cpu_milli.tolist() == [1000, 2000] and np.allclose(half.prob, [0.5, 0.5])


def test_class_weights_are_counts_reduced_and_fit_int32_sums():
    assert class_weights([6, 4, 2]).tolist() == [3, 2, 1]  # divided by the gcd: same frequencies
    big = np.array([900_000, 60_000, 1_000, 1])  # a trace of ~1M jobs: scaled down
    w = class_weights(big)
    assert w.dtype == np.int32 and w.sum() <= MAX_FRAG_WEIGHT and (w >= 1).all()
    assert np.abs(w / w.sum() - big / big.sum()).max() < 5 / MAX_FRAG_WEIGHT
    # F_n(m) <= 8 GPUs x 1000 milli, so the weighted sum cannot overflow int32
    assert int(w.sum()) * MAX_GPUS_PER_NODE * 1000 <= np.iinfo(np.int32).max
    with pytest.raises(DataError, match="count"):
        class_weights([3, 0])


# ================================================================ openb validation (synthetic files)

OPENB_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                "creation_time,deletion_time,scheduled_time\n")
POD_A = "p-0,12000,16384,1,1000,,LS,Running,0,5000,10\n"
POD_B = "p-1,6000,12288,1,460,T4|P100,LS,Running,100,900,300\n"
POD_PENDING = "p-2,4000,8192,0,0,,BE,Pending,200,700,\n"
POD_MULTI = "p-3,32000,65536,4,1000,V100M32,LS,Failed,50,60,55\n"


def test_synthetic_openb_values(tmp_path):
    p = write(tmp_path, "pods.csv", OPENB_HEADER + POD_A + POD_B + POD_PENDING + POD_MULTI)
    w = A.load_openb_pods(p)
    assert list(w.names) == ["p-0", "p-3", "p-1"]  # by arrival
    assert w.arrival_s.tolist() == [0, 50, 100]
    assert w.work_s.tolist() == [4990, 5, 600]
    assert w.lines.tolist() == [2, 5, 3]
    assert w.model_mask.tolist() == [ALL_MODELS, C.model_mask(["V100M32"]), C.model_mask(["T4", "P100"])]
    assert w.report["left_out_pending"] == 1 and w.report["rows_read"] == 4
    s = A.load_openb_pods(p, mode="static")
    assert list(s.names) == ["p-0", "p-1", "p-2", "p-3"] and s.num_gpu.tolist() == [1, 1, 0, 4]


@pytest.mark.parametrize("rows, line, field, problem", [
    (POD_A + "p-1,abc,12288,1,460,,LS,Running,100,900,300\n", 3, "cpu_milli", "not a number"),
    (POD_A + POD_B + "p-2,4000,-8192,0,0,,BE,Running,200,700,250\n", 4, "memory_mib", "negative"),
    (POD_A + "p-1,6000,12288,1.5,460,,LS,Running,100,900,300\n", 3, "num_gpu", "whole"),
    (POD_A + "p-1,6000,,1,460,,LS,Running,100,900,300\n", 3, "memory_mib", "missing value"),
    (POD_A + "p-1,6000,12288,1,460,,LS,Running,100,900,x\n", 3, "scheduled_time", "not a number"),
    (POD_A + "p-1,6000,12288,1,460,,LS,Running,100,200,300\n", 3, "deletion_time", "reversed"),
    (POD_A + "p-1,6000,12288,0,0,,LS,Pending,100,50,\n", 3, "deletion_time", "reversed"),
    (POD_A + "p-1,6000,12288,0,500,,LS,Running,100,900,300\n", 3, "gpu_milli", "CPU-only"),
    (POD_A + "p-1,6000,12288,2,500,,LS,Running,100,900,300\n", 3, "gpu_milli", "whole GPUs"),
    (POD_A + "p-1,6000,12288,1,0,,LS,Running,100,900,300\n", 3, "gpu_milli", "1..1000"),
    (POD_A + "p-1,6000,12288,1,1500,,LS,Running,100,900,300\n", 3, "gpu_milli", "1..1000"),
    (POD_A + POD_B + "p-2,6000,12288,1,500,T4|H100,LS,Running,100,900,300\n", 4, "gpu_spec",
     "unknown GPU model 'H100'"),
    (POD_A + "p-1,6000,12288,1,500\n", 3, "gpu_spec", "missing value"),
    (POD_A + ",6000,12288,1,460,,LS,Running,100,900,300\n", 3, "name", "missing value"),
    (POD_A + "p-0,6000,12288,1,460,,LS,Running,100,900,300\n", 3, "name", "duplicate name 'p-0'"),
    (POD_A + "p-1,6000,12288,1,460,,LS,Running,100,900,50\n", 3, "scheduled_time", "reversed"),
    (POD_A + "p-1,6000,12288,1,460,,LS,Running,1e39,1e39,1e39\n", 3, "creation_time", "too large"),
    (POD_A + "p-1,6000,12288,1,460,,LS,Running,100,1e300,300\n", 3, "deletion_time", "too large"),
    (POD_A + "p-1,6000,12288,1,460,,BestEffort,Pending,100,900,\n", 3, "qos",
     "'BestEffort' is not a priority class of workload.qos_classes"),
])
def test_malformed_openb(tmp_path, rows, line, field, problem):
    p = write(tmp_path, "bad.csv", OPENB_HEADER + rows)
    with pytest.raises(DataError, match=problem) as e:
        A.load_openb_pods(p, mode="dynamic")
    assert_names(e.value, p, line, field)


def test_openb_qos_gives_priority_classes_highest_first(tmp_path):
    burstable = "p-4,4000,8192,2,1000,,Burstable,Running,150,900,160\n"
    p = write(tmp_path, "pods.csv", OPENB_HEADER + POD_A + POD_B + POD_PENDING + POD_MULTI + burstable)
    w = A.load_openb_pods(p)  # openb's order: LS, Guaranteed, Burstable, BE -> 3, 2, 1, 0
    assert list(w.names) == ["p-0", "p-3", "p-1", "p-4"] and w.qos_class.tolist() == [3, 3, 3, 1]
    mine = A.load_openb_pods(p, qos_classes=["Burstable", "BE", "LS"])  # the pending BE pod counts
    assert mine.qos_class.tolist() == [0, 0, 0, 2]
    # Jobs keep each pod's class through sorting by arrival (p-0, then p-4), padding 0.
    np.testing.assert_array_equal(mine.take([3, 0]).to_jobs(pad_to=3).qos_class, [0, 2, 0])
    with pytest.raises(DataError, match="'Burstable' is not a priority class") as e:
        A.load_openb_pods(p, qos_classes=["LS", "BE"])
    assert_names(e.value, p, 6, "qos")
    # A configured class that no pod of the trace has (the default list's Guaranteed here) or
    # a class named twice: one line naming the config key.
    for classes, problem in ((A.OPENB_QOS_CLASSES, "'Guaranteed' is not in the trace"),
                             (["LS", "BE", "LS", "Burstable"], "distinct")):
        with pytest.raises(DataError, match=problem) as e:
            experiment.load_trace(WorkloadConfig(source="openb", trace=str(p), qos_classes=tuple(classes)))
        assert_names(e.value, "config", None, "workload.qos_classes")
        assert "\n" not in str(e.value)
    # Lists without a qos column (multigpu: static mode only) are one class.
    short = write(tmp_path, "short.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np-0,1000,1024,1,1000\n")
    assert A.load_openb_pods(short, mode="static").qos_class.tolist() == [0]
    with pytest.raises(DataError, match="no qos column"):
        A.load_openb_pods(short, mode="static", qos_classes=["LS"])


@pytest.mark.parametrize("content, line, problem", [
    (b"\x1f\x8b\x08\x00compressed", None, "gzip-compressed"),
    (b"PK\x03\x04zipped", None, "zip archive"),
    (b"name,cpu\n\xff\xfe bad", 2, "not UTF-8"),
    ("name,cpu_milli\n".encode("utf-16"), 1, "not UTF-8"),
    (b"name,cpu_milli\np,1\x00\n", 2, "NUL byte"),
])
def test_files_that_are_not_csv_text_are_named(tmp_path, content, line, problem):
    p = tmp_path / "pods.csv"
    p.write_bytes(content)
    with pytest.raises(DataError, match=problem) as e:
        A.load_openb_pods(p)
    assert_names(e.value, p, line, None)


def test_missing_files_folders_bom_and_repeated_columns(tmp_path):
    for path, problem in ((tmp_path / "nope.csv", "file not found"), (tmp_path, "is a folder")):
        with pytest.raises(DataError, match=problem) as e:
            A.load_openb_pods(path)
        assert_names(e.value, path, None, None)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (OPENB_HEADER + POD_A + POD_B).encode())
    plain = write(tmp_path, "plain.csv", OPENB_HEADER + POD_A + POD_B)
    assert A.load_openb_pods(bom).arrival_s.tolist() == A.load_openb_pods(plain).arrival_s.tolist()
    twice = write(tmp_path, "twice.csv", OPENB_HEADER.replace("qos", "cpu_milli") + POD_A)
    with pytest.raises(DataError, match="appears twice") as e:
        A.load_openb_pods(twice)
    assert_names(e.value, twice, 1, "cpu_milli")


def test_times_past_float32_seconds_are_refused_not_rounded(tmp_path):
    # Epoch-second times load (float64), and a re-based window of them is fine; replayed
    # whole they would round to 128 s in float32, so that is refused, naming the line.
    epoch = 1_700_000_000
    p = write(tmp_path, "epoch.csv", OPENB_HEADER + f"p-0,1000,1024,1,500,,LS,Running,{epoch},{epoch + 100},{epoch}\n"
              f"p-1,1000,1024,1,500,,LS,Running,{epoch + 3},{epoch + 150},{epoch + 5}\n")
    w = A.load_openb_pods(p)
    with pytest.raises(DataError, match="float32") as e:
        w.to_jobs()
    assert_names(e.value, p, 2, "arrival (seconds from the episode's start)")
    (window,) = A.trace_windows(w, 2, 1, seed=0)
    assert window.to_jobs().arrival_s.tolist() == [0.0, 3.0]


def _pods_at(times):
    return OPENB_HEADER + "".join(f"p-{i},1000,1024,1,500,,LS,Running,{t:.0f},{t + 600:.0f},{t:.0f}\n"
                                  for i, t in enumerate(times))


def test_a_creation_time_apart_from_the_trace_is_named_and_strict_refuses_it(tmp_path, caplog):
    # 300 pods a minute apart; one at 5e10 s (under the 1e11 cap) would make a window holding
    # it span 5e10 s, and compress_to_load would squeeze the window's other pods into ~1 s.
    times = 60.0 * np.arange(300)
    times[150] = 5e10
    p = write(tmp_path, "far.csv", _pods_at(times))
    with caplog.at_level("WARNING", logger="jaxsched.workload.alibaba"):
        w = A.load_openb_pods(p)
    assert w.report["isolated_arrivals"] == 1 and len(w) == 300  # kept, counted, said
    assert f"{p}, line 152, field 'creation_time': 1 pod(s) (lines 152)" in caplog.text
    assert "'p-150' at 5e+10 s" in caplog.text and "after them" in caplog.text
    with pytest.raises(DataError, match="arrive apart from the other 299") as e:
        A.load_openb_pods(p, strict=True)
    assert_names(e.value, p, 152, "creation_time")
    # Two pods far before the rest: the group is named by its first line.
    times = np.concatenate([[0.0, 10.0], 1e7 + 60.0 * np.arange(298)])
    p = write(tmp_path, "early.csv", _pods_at(times[::-1]))  # file order: latest first
    with pytest.raises(DataError, match=r"2 pod\(s\) \(lines 300, 301\).*'p-298' at 10 s.*before them") as e:
        A.load_openb_pods(p, strict=True)
    assert_names(e.value, p, 300, "creation_time")


def test_gaps_within_the_trace_and_small_traces_are_not_isolated_arrivals(tmp_path, caplog):
    times = 60.0 * np.arange(300)
    times[100:] += 1e6                           # a long gap inside the trace
    times[-1] = times[-2] + (times[-2] - times[0])  # a last gap as long as the rest's span: not longer
    few = np.array([0.0, 60.0, 5e10])   # fewer than 100 pods: the rule does not apply
    with caplog.at_level("WARNING", logger="jaxsched.workload.alibaba"):
        for name, t in (("gaps.csv", times), ("few.csv", few)):
            w = A.load_openb_pods(write(tmp_path, name, _pods_at(t)), strict=True)
            assert w.report["isolated_arrivals"] == 0
    assert "apart" not in caplog.text


def test_malformed_openb_first_bad_line_wins(tmp_path):
    # line 3 has a negative value, line 4 a non-number in the same column: line 3 is named
    p = write(tmp_path, "bad.csv", OPENB_HEADER + POD_A + POD_B.replace("6000", "-6000")
              + POD_B.replace("6000", "six").replace("p-1", "p-2"))
    with pytest.raises(DataError, match="negative") as e:
        A.load_openb_pods(p)
    assert_names(e.value, p, 3, "cpu_milli")


def test_openb_blank_lines_keep_line_numbers(tmp_path):
    p = write(tmp_path, "bad.csv", OPENB_HEADER + POD_A + "\n" + POD_B.replace("460", "4600"))
    with pytest.raises(DataError) as e:
        A.load_openb_pods(p)
    assert_names(e.value, p, 4, "gpu_milli")


def test_openb_missing_column_empty_file_and_strict(tmp_path):
    p = write(tmp_path, "nomem.csv", "name,cpu_milli,num_gpu,gpu_milli\np,1,0,0\n")
    with pytest.raises(DataError, match="missing column") as e:
        A.load_openb_pods(p, mode="static")
    assert_names(e.value, p, 1, "memory_mib")
    p = write(tmp_path, "empty.csv", "")
    with pytest.raises(DataError, match="empty file") as e:
        A.load_openb_pods(p)
    assert_names(e.value, p, None, None)
    p = write(tmp_path, "header.csv", OPENB_HEADER)
    with pytest.raises(DataError, match="no pods") as e:
        A.load_openb_pods(p)
    assert_names(e.value, p, None, None)
    p = write(tmp_path, "pending.csv", OPENB_HEADER + POD_A + POD_PENDING)
    with pytest.raises(DataError, match="never ran") as e:
        A.load_openb_pods(p, strict=True)
    assert_names(e.value, p, 3, "scheduled_time")
    with pytest.raises(DataError, match="mode"):
        A.load_openb_pods(p, mode="replay")


def test_five_column_static(tmp_path):
    p = write(tmp_path, "multi.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
              "b,8000,1024,8,1000\na,1000,1024,1,250\n")
    w = A.load_openb_pods(p, mode="static")
    assert list(w.names) == ["a", "b"] and w.gpu_milli.tolist() == [250, 1000]
    assert (w.model_mask == ALL_MODELS).all() and w.lines.tolist() == [3, 2]
    with pytest.raises(DataError) as e:
        A.load_openb_pods(p)
    assert_names(e.value, p, 1, "creation_time")


def test_unschedulable_fit_rule(tmp_path):
    nodes = C.NodeTable(names=("t4", "g2", "cpu"), model=np.array([C.model_id("T4"), C.model_id("G2"),
                        C.model_id("CPU")], np.int32), num_gpus=np.array([2, 8, 0], np.int32),
                        cpu_milli=np.array([16000, 96000, 200000], np.int32),
                        mem_mib=np.array([65536, 393216, 1048576], np.int32))
    rows = [
        "ok-frac,16000,65536,1,500,T4",       # fits t4 exactly
        "ok-cpu,200000,1048576,0,0,",         # CPU-only, only the cpu node is big enough
        "bad-cpu,300000,1024,0,0,",           # no node has the CPU
        "bad-mem,1000,2000000,0,0,",          # no node has the memory
        "bad-model,1000,1024,1,500,A10",      # no A10 node
        "bad-count,1000,1024,4,1000,T4",      # T4 nodes have 2 GPUs
        "bad-joint,20000,1024,2,1000,T4",     # T4 has the GPUs but not the CPU
        "ok-whole,96000,393216,8,1000,",      # a whole G2 node
    ]
    p = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
              + "\n".join(rows) + "\n")
    w = A.load_openb_pods(p, mode="static")
    count, names = w.count_unschedulable(nodes)
    assert count == 5 and sorted(names) == ["bad-count", "bad-cpu", "bad-joint", "bad-mem", "bad-model"]
    with pytest.raises(DataError) as e:
        w.check_schedulable(nodes, strict=True)
    # static order is by name, so bad-count (line 7) comes first; it lacks GPUs of its model
    assert_names(e.value, p, 7, "num_gpu")
    assert "5 job(s)" in str(e.value) and "'bad-count'" in str(e.value)


# ================================================================ PAI (small files in the exact format)

def test_pai_headers_match_the_published_column_lists(pai_dir):
    job = (pai_dir / "pai_job_table.header").read_text().strip().split(",")
    task = (pai_dir / "pai_task_table.header").read_text().strip().split(",")
    assert tuple(job) == A.PAI_JOB_FIELDS and tuple(task) == A.PAI_TASK_FIELDS


JOBS = ("jobA,instA,user1,Terminated,1000.0,5000.0\n"
        "jobB,instB,user2,Terminated,500.0,9000.0\n"
        "jobC,instC,user1,Running,700.0,\n")
TASKS = ("jobA,worker,2.0,Terminated,1100.0,1600.0,600.0,29.296875,50.0,T4\n"       # 2 x half a T4
         "jobA,ps,1.0,Terminated,1100.0,1200.0,400.0,10.0,,\n"                      # CPU-only
         "jobB,tensorflow,1.0,Terminated,600.0,4600.0,1200.0,60.0,800.0,V100M32\n"  # 8 whole V100M32
         "jobB,evaluator,1.0,Terminated,600.0,700.0,100.0,2.0,250.0,MISC\n"         # 3 GPUs, any
         "jobC,worker,4.0,Running,800.0,,600.0,20.0,100.0,P100\n"                   # left out
         "jobB,big,1.0,Terminated,600.0,900.0,100.0,2.0,1600.0,\n"                  # 16 GPUs: no node
         "jobA,chief,1.0,Failed,1100.0,1150.0,100.0,2.0,100.0,T4\n")                # left out


@pytest.fixture
def pai_files(tmp_path):
    return write(tmp_path, "pai_job_table.csv", JOBS), write(tmp_path, "pai_task_table.csv", TASKS)


def test_pai_loader(pai_files):
    jobs, tasks = pai_files
    w = A.load_pai(jobs, tasks)
    r = w.report
    assert r["rows_read"] == 7 and r["job_rows_read"] == 3
    assert r["left_out_not_terminated"] == 2 and r["status"] == {"Terminated": 5, "Running": 1, "Failed": 1}
    assert r["tasks_used"] == 5 and len(w) == r["jobs"] == 6
    # jobB was submitted first (500 s): its instances come first; arrival = the JOB's start time
    assert list(w.names) == ["jobB/tensorflow/0", "jobB/evaluator/0", "jobB/big/0",
                             "jobA/worker/0", "jobA/worker/1", "jobA/ps/0"]
    assert w.arrival_s.tolist() == [500, 500, 500, 1000, 1000, 1000]
    assert w.work_s.tolist() == [4000, 100, 300, 500, 500, 100]  # task end - task start
    assert w.num_gpu.tolist() == [8, 3, 16, 1, 1, 0]
    assert w.gpu_milli.tolist() == [1000, 1000, 1000, 500, 500, 0]
    assert w.cpu_milli.tolist() == [12000, 1000, 1000, 6000, 6000, 4000]
    assert w.mem_mib.tolist() == [61440, 2048, 2048, 30000, 30000, 10240]
    assert w.model_mask.tolist() == [C.model_mask(["V100M32"]), ALL_MODELS, ALL_MODELS,
                                     C.model_mask(["T4"]), C.model_mask(["T4"]), ALL_MODELS]
    assert r["gpu_type_unconstrained"] == 2  # MISC and the empty gpu_type
    assert w.lines.tolist() == [3, 4, 6, 1, 1, 2]
    assert w.path == str(tasks)
    j = w.to_jobs()
    assert j.valid.all() and j.num_gpu.tolist() == w.num_gpu.tolist()


def test_pai_gang_not_modelled_counted_unschedulable(pai_files, pai_dir):
    w = A.load_pai(*pai_files)
    machines = C.load_pai_machines(pai_dir / "pai_machine_spec.csv")
    assert w.count_unschedulable(machines) == (1, ["jobB/big/0"])


def test_pai_strict(pai_files):
    jobs, tasks = pai_files
    with pytest.raises(DataError, match="Running") as e:
        A.load_pai(jobs, tasks, strict=True)
    assert_names(e.value, tasks, 5, "status")


@pytest.mark.parametrize("task_rows, line, field, problem", [
    ("jobA,w,1.0,Terminated,1100.0,1600.0,abc,29.0,50.0,T4\n", 2, "plan_cpu", "not a number"),
    ("jobA,w,1.0,Terminated,1100.0,1600.0,600.0,-1.0,50.0,T4\n", 2, "plan_mem", "negative"),
    ("jobA,w,1.0,Terminated,1100.0,1600.0,600.0,1.0,-50.0,T4\n", 2, "plan_gpu", "negative"),
    ("jobA,w,1.5,Terminated,1100.0,1600.0,600.0,1.0,50.0,T4\n", 2, "inst_num", "whole"),
    ("jobA,w,,Terminated,1100.0,1600.0,600.0,1.0,50.0,T4\n", 2, "inst_num", "missing value"),
    ("jobA,w,1.0,Terminated,1600.0,1100.0,600.0,1.0,50.0,T4\n", 2, "end_time", "reversed"),
    ("jobA,w,1.0,Terminated,1600.0,,600.0,1.0,50.0,T4\n", 2, "end_time", "missing value"),
    ("jobA,w,1.0,Terminated,1100.0,1600.0,600.0\n", 2, "plan_mem", "missing value"),
    ("jobA,w,2000000000,Terminated,1100.0,1600.0,600.0,1.0,50.0,T4\n", 2, "inst_num", "expands to"),
    ("jobA,w,1.0,Terminated,1e39,1e39,600.0,1.0,50.0,T4\n", 2, "start_time", "too large"),
])
def test_malformed_pai_task_table(tmp_path, task_rows, line, field, problem):
    jobs = write(tmp_path, "jobs.csv", JOBS)
    good = "jobA,ok,1.0,Terminated,1100.0,1600.0,600.0,29.0,50.0,T4\n"
    tasks = write(tmp_path, "tasks.csv", good + task_rows)
    with pytest.raises(DataError, match=problem) as e:
        A.load_pai(jobs, tasks)
    assert_names(e.value, tasks, line, field)


def test_a_pai_task_listed_twice_is_refused_naming_both_rows_and_the_key(tmp_path):
    jobs = write(tmp_path, "jobs.csv", JOBS)
    for status in ("Terminated", "Failed"):  # a second row of a task, whatever its status
        tasks = write(tmp_path, "tasks.csv", TASKS + f"jobA,worker,2.0,{status},1100.0,1600.0,600.0,29.3,50.0,T4\n")
        with pytest.raises(DataError, match=r"duplicate task \(job_name, task_name\) = \('jobA', 'worker'\) "
                                            r"\(first at line 1\)") as e:
            A.load_pai(jobs, tasks)
        assert_names(e.value, tasks, 8, "task_name")
    # The same task name in two jobs is two tasks.
    tasks = write(tmp_path, "tasks.csv", TASKS + "jobB,worker,1.0,Terminated,600.0,700.0,100.0,2.0,50.0,T4\n")
    assert A.load_pai(jobs, tasks).report["tasks_used"] == 6


def test_malformed_pai_rows_not_terminated_are_not_validated(tmp_path):
    # a Running task has no end_time yet; it is left out, not an error
    jobs = write(tmp_path, "jobs.csv", JOBS)
    tasks = write(tmp_path, "tasks.csv", "jobC,w,x,Running,800.0,,,,,\n"
                  "jobA,ok,1.0,Terminated,1100.0,1600.0,600.0,29.0,50.0,T4\n")
    w = A.load_pai(jobs, tasks)
    assert len(w) == 1 and w.report["left_out_not_terminated"] == 1


def test_malformed_pai_job_table_and_join(tmp_path):
    tasks = write(tmp_path, "tasks.csv", "jobA,ok,1.0,Terminated,1100.0,1600.0,600.0,29.0,50.0,T4\n"
                  "jobZ,ok,1.0,Terminated,1100.0,1600.0,600.0,29.0,50.0,T4\n")
    jobs = write(tmp_path, "jobs.csv", JOBS + "jobA,i,u,Terminated,1.0,2.0\n")
    with pytest.raises(DataError, match="duplicate job_name 'jobA' \\(first at line 1\\)") as e:
        A.load_pai(jobs, tasks)
    assert_names(e.value, jobs, 4, "job_name")
    jobs = write(tmp_path, "jobs.csv", "jobA,i,u,Terminated,,2.0\n")
    with pytest.raises(DataError, match="line 1 needs it") as e:
        A.load_pai(jobs, tasks)
    assert_names(e.value, jobs, 1, "start_time")
    jobs = write(tmp_path, "jobs.csv", "jobA,i,u,Terminated,x,2.0\n")
    with pytest.raises(DataError, match="not a number") as e:
        A.load_pai(jobs, tasks)
    assert_names(e.value, jobs, 1, "start_time")
    jobs = write(tmp_path, "jobs.csv", "jobA,i,u,Terminated,5.0\n")
    with pytest.raises(DataError, match="5 fields, expected 6") as e:
        A.load_pai(jobs, tasks)
    assert_names(e.value, jobs, 1, "end_time")
    jobs = write(tmp_path, "jobs.csv", "jobA,i,u,Terminated,5.0,6.0\n")
    w = A.load_pai(jobs, tasks)  # jobZ is not in the job table: left out and counted
    assert len(w) == 1 and w.report["left_out_unknown_job"] == 1
    with pytest.raises(DataError, match="not in the job table") as e:
        A.load_pai(jobs, tasks, strict=True)
    assert_names(e.value, tasks, 2, "job_name")
    empty = write(tmp_path, "empty.csv", "")
    with pytest.raises(DataError, match="empty file") as e:
        A.load_pai(jobs, empty)
    assert_names(e.value, empty, None, None)


# ================================================================ offered load, windows, compression

def test_offered_load_by_hand():
    # (0.5 GPU x 50 s + 2 GPUs x 100 s + CPU-only) / (4 speed-1.0 GPUs x 100 s span)
    rho = A.offered_load([0, 100, 40], [50, 100, 1e6], [1, 2, 0], [500, 1000, 0], 4)
    assert rho == pytest.approx(225 / 400)
    with pytest.raises(DataError, match="span"):
        A.offered_load([5, 5], [1, 1], [1, 1], [1000, 1000], 4)
    with pytest.raises(DataError, match="cluster_capacity"):
        A.offered_load([0, 5], [1, 1], [1, 1], [1000, 1000], 0)


def test_resample_offers_the_load_in_every_part_of_the_episode(tmp_path):
    # A trace whose pods grow heavier with time (work 10 s .. 1,000 s in file order): resampled
    # episodes take the mix, not the order, so each third of an episode offers rho, and a pod
    # that no node can hold counts as no work.
    n = 200
    rows = "".join(f"p-{i:03d},1000,1024,1,1000,,LS,Running,{i},{i + 10 + 5 * i},{i}\n" for i in range(n))
    w = A.load_openb_pods(write(tmp_path, "p.csv", OPENB_HEADER + rows))
    episodes = A.resample(w, num_jobs=6000, num_episodes=2, seed=0, cluster_capacity=4.0, rho=0.8)
    assert [len(e) for e in episodes] == [6000, 6000]
    assert not np.array_equal(episodes[0].names, episodes[1].names)
    for e in episodes:
        assert (np.diff(e.arrival_s) > 0).all()
        thirds = np.array_split(np.arange(6000), 3)
        mean_work = [e.work_s[t].mean() for t in thirds]
        assert max(mean_work) / min(mean_work) < 1.1, mean_work  # sorted draws: ~5x
        assert e.offered_load(4.0) == pytest.approx(0.8, rel=0.06)
    runnable = np.arange(n) % 2 == 0  # half the pods count as no work: the gap shrinks with the work
    half = A.resample(w, 6000, 1, 0, 4.0, 0.8, runnable=runnable)[0]
    assert half.report["mean_gap_s"] == pytest.approx(episodes[0].report["mean_gap_s"] * w.work_s[runnable].sum()
                                                      / w.work_s.sum())


def test_raw_openb_load_is_tiny(default_csv):
    # Replayed as is, the trace keeps only a small share of the 6,212 GPUs busy
    w = A.load_openb_pods(default_csv)
    assert 0 < w.offered_load(6212) < 0.02


def test_windows_distinct_and_rebased(default_csv):
    w = A.load_openb_pods(default_csv)
    wins = A.trace_windows(w, jobs_per_window=500, num_windows=6, seed=3)
    assert len(wins) == 6
    starts = [x.report["window_start"] for x in wins]
    assert starts == sorted(starts) and all(b - a >= 500 for a, b in zip(starts, starts[1:]))
    assert not any(x.report["windows_overlap"] for x in wins)
    seen = set()
    for x, s in zip(wins, starts):
        assert len(x) == 500 and x.arrival_s[0] == 0 and (np.diff(x.arrival_s) >= 0).all()
        assert list(x.names) == list(w.names[s:s + 500])  # contiguous
        assert np.allclose(x.arrival_s + x.report["window_t0"], w.arrival_s[s:s + 500])
        assert np.array_equal(x.work_s, w.work_s[s:s + 500])
        assert not seen & set(x.names)
        seen |= set(x.names)
    again = A.trace_windows(w, 500, 6, seed=3)
    assert [x.report["window_start"] for x in again] == starts
    others = {tuple(x.report["window_start"] for x in A.trace_windows(w, 500, 6, seed=s))
              for s in range(4, 9)}
    assert len(others | {tuple(starts)}) > 1  # the seed matters


def test_windows_overlap_only_when_forced(tmp_path):
    rows = "".join(f"p-{i:02d},1000,1024,1,1000,,LS,Running,{i * 10},{i * 10 + 5},{i * 10}\n"
                   for i in range(10))
    w = A.load_openb_pods(write(tmp_path, "p.csv", OPENB_HEADER + rows))
    wins = A.trace_windows(w, 4, 2, seed=0)
    assert not any(x.report["windows_overlap"] for x in wins)
    wins = A.trace_windows(w, 4, 5, seed=0)  # 20 jobs wanted from 10: distinct starts, overlapping
    starts = [x.report["window_start"] for x in wins]
    assert len(set(starts)) == 5 and all(x.report["windows_overlap"] for x in wins)
    assert all(x.arrival_s[0] == 0 for x in wins)
    with pytest.raises(DataError):
        A.trace_windows(w, 8, 4, seed=0)  # only 3 distinct starts exist
    with pytest.raises(DataError):
        A.trace_windows(w, 11, 1, seed=0)


def test_trace_part_cuts_disjoint_spans(tmp_path):
    rows = "".join(f"p-{i:02d},1000,1024,1,1000,,LS,Running,{i * 10},{i * 10 + 5},{i * 10}\n"
                   for i in range(10))
    w = A.load_openb_pods(write(tmp_path, "p.csv", OPENB_HEADER + rows))
    first, last = A.trace_part(w, (0.0, 0.6)), A.trace_part(w, [0.6, 1.0])
    assert list(first.names) == [f"p-{i:02d}" for i in range(6)]
    assert list(last.names) == [f"p-{i:02d}" for i in range(6, 10)]
    assert last.report["trace_span"] == (0.6, 1.0)
    assert list(A.trace_part(w, (0, 1)).names) == list(w.names)
    for bad in [(0.5, 0.5), (0.7, 0.2), (-0.1, 0.5), (0.0, 1.5), (0.3,), "ab"]:
        with pytest.raises(DataError, match="train.trace_span"):
            A.trace_part(w, bad, "train.trace_span")


@pytest.mark.parametrize("rho", [0.5, 0.9, 1.3])
def test_compress_to_load_hits_target(default_csv, rho):
    w = A.load_openb_pods(default_csv)
    win = A.trace_windows(w, 1000, 1, seed=0)[0]
    gpus = C.work_capacity(C.preset(64))
    before = win.offered_load(gpus)
    out, factor = A.compress_to_load(win, gpus, rho)
    assert out.offered_load(gpus) == pytest.approx(rho, rel=1e-9)
    assert factor == pytest.approx(rho / before) and out.report["compress_factor"] == factor
    assert out.report["offered_load"] == rho and out.report["offered_load_before"] == before
    assert np.allclose(out.arrival_s * factor, win.arrival_s)
    assert np.array_equal(out.work_s, win.work_s) and np.array_equal(out.names, win.names)
    assert "compress_factor" not in win.report  # the input is untouched


def test_compress_needs_gpu_work(tmp_path):
    rows = "a,1000,1024,0,0,,BE,Running,0,10,0\nb,1000,1024,0,0,,BE,Running,5,10,5\n"
    w = A.load_openb_pods(write(tmp_path, "p.csv", OPENB_HEADER + rows))
    with pytest.raises(DataError, match="no GPU work"):
        A.compress_to_load(w, 8, 0.9)
    with pytest.raises(DataError, match="rho"):
        A.compress_to_load(w, 8, 0)
