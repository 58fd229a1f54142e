"""scripts/check_against_helios.py without Helios: the jobs written in Helios's Philly input
format, the VC's name as Helios's pandas reads it, the reading of Helios's per-job log, and
the schedule statistics, on small hand-made inputs whose answers are worked out by hand."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jaxsched import paths
from jaxsched.workload import philly

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("check_against_helios", ROOT / "scripts" / "check_against_helios.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


script = load_script()


def test_jobs_become_rows_of_helios_philly_log():
    """Three jobs at 0, 61 and 86,400 s: their submission stamps count from Helios's Philly
    start, 2017-10-01 00:00:00; jobname is the job's index, which pairs the two sides."""
    rows = script.helios_input("b436b2", [0.0, 61.0, 86400.0], [5.0, 3600.0, 1.0], [1, 8, 16])
    assert list(rows.columns) == ["user", "vc", "jobname", "gpu_num", "state", "submit_time", "duration"]
    assert rows.submit_time.tolist() == ["2017-10-01 00:00:00", "2017-10-01 00:01:01", "2017-10-02 00:00:00"]
    assert rows.jobname.tolist() == [0, 1, 2]
    assert rows.gpu_num.tolist() == [1, 8, 16]
    assert rows.duration.tolist() == [5, 3600, 1]
    assert rows.vc.tolist() == ["b436b2"] * 3
    assert rows.state.tolist() == ["Pass"] * 3  # Helios's loader maps Pass to COMPLETED


def test_rows_read_back_as_helios_reads_them():
    """Written to CSV and read back as Helios's loader does (``parse_dates``, seconds from the
    first submission), the rows give back the submission seconds and durations."""
    submit, duration = [0.0, 7.0, 7.0, 100000.0], [10.0, 20.0, 30.0, 40.0]
    text = script.helios_input(script.helios_vc_name("6214e9"), submit, duration, [1, 2, 4, 8]).to_csv(index=False)
    back = pd.read_csv(io.StringIO(text), parse_dates=["submit_time"])
    seconds = (back.submit_time - back.submit_time.iloc[0]).dt.total_seconds()
    assert seconds.tolist() == submit
    assert back.duration.tolist() == [10, 20, 30, 40]
    # the VC's name stays a string (pandas reads the bare id 6214e9 as 6.214e12)
    assert back.vc.tolist() == ["vc6214e9"] * 4


def test_helios_vc_name_reads_back_as_a_string():
    name = script.helios_vc_name("6214e9")
    assert name == "vc6214e9"
    assert pd.read_csv(io.StringIO(f"vc\n{name}\n")).vc.tolist() == ["vc6214e9"]
    assert pd.read_csv(io.StringIO("vc\n6214e9\n")).vc.tolist() == [6.214e12]  # why the prefix


@pytest.mark.parametrize("submit, duration", [([0.5], [10.0]), ([0.0], [10.5]), ([0.0], [0.0])])
def test_helios_input_refuses_what_its_clock_cannot_run(submit, duration):
    """Helios ticks in whole seconds and never releases a job of 0 s."""
    with pytest.raises(ValueError):
        script.helios_input("b436b2", submit, duration, [1])


def test_helios_times_pairs_its_log_by_jobname():
    """Helios's log lists jobs in its own order; a job it never started keeps
    ``sys.maxsize``, and a job absent from the log is NaN too."""
    log = pd.DataFrame({"jobname": [2, 0, 3], "start_time": [50.0, 0.0, float(sys.maxsize)],
                        "end_time": [80, 10, sys.maxsize], "queue": [5, 0, 0]})
    times = script.helios_times(log, 4)
    assert times.index.tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(times.start_s.to_numpy(), [0.0, np.nan, 50.0, np.nan])
    np.testing.assert_array_equal(times.end_s.to_numpy(), [10.0, np.nan, 80.0, np.nan])


def test_helios_node_counts_read_its_nodes_column():
    """Helios logs a job's nodes as the text of a list of {node: GPUs}; [] = never placed."""
    counts = script.helios_node_counts(["[{63: 8}]", "[{3: 8}, {7: 8}, {9: 8}]", "[]"])
    assert counts.tolist() == [1, 3, 0]


def test_first_difference_is_the_first_divergence_in_time():
    """Jobs 1 and 3 differ, both starting at 40 on one side: the gang (job 3, 8 GPUs) is the
    one named; job 0, equal on both sides though it starts first, is not."""
    table = pd.DataFrame({"job": [0, 1, 2, 3], "num_gpus": [1, 1, 1, 8],
                          "helios_start_s": [10.0, 50.0, 60.0, 45.0], "helios_end_s": [20.0, 60.0, 70.0, 55.0],
                          "jaxsched_start_s": [10.0, 40.0, 60.0, 40.0], "jaxsched_end_s": [20.0, 50.0, 70.0, 50.0]})
    assert int(script.first_difference(table).job) == 3
    same = table.assign(jaxsched_start_s=table.helios_start_s, jaxsched_end_s=table.helios_end_s)
    assert script.first_difference(same) is None


def test_schedule_stats_and_agreement_by_hand():
    submit, start, end = [0, 10, 20], [0, 15, 40], [100, 25, np.nan]
    stats = script.schedule_stats(submit, start, end)
    # jobs 0 and 1 ended: JCT (100 + 15) / 2, queueing (0 + 5) / 2, last end 100 - first submission 0
    assert stats == {"jobs": 2, "mean_jct_s": 57.5, "mean_queue_s": 2.5, "makespan_s": 100.0}
    assert script.agreement([0, 15, 40, np.nan], [0, 16, 42, 5]) == {"same": 1, "within_1s": 2}


def test_driver_is_python():
    compile(script.DRIVER, "helios_driver.py", "exec")


def test_first_b436b2_jobs_keep_their_trace_gaps():
    """The first three jobs of VC b436b2 in philly.csv (lines 29886, 32822, 77940: submitted
    2017-09-19 05:06:40, 2017-09-20 00:33:44, 2017-09-20 18:41:36) land 0 s, 19 h 27 min 4 s
    and 1 d 13 h 34 min 56 s after Helios's start, with their durations and gang sizes."""
    found = paths.data_dir()
    if found is None or not (found / "philly" / "philly.csv").is_file():
        pytest.skip("philly.csv not found: set JAXSCHED_DATA or provide ../shared/data/philly/philly.csv "
                    "(see shared/data/README.md)")
    jobs = philly.load(found / "philly" / "philly.csv", vcs=["b436b2"])
    rows = script.helios_input("b436b2", jobs.arrival_s[:3], jobs.work_s[:3], jobs.num_gpu[:3])
    assert rows.submit_time.tolist() == ["2017-10-01 00:00:00", "2017-10-01 19:27:04", "2017-10-02 13:34:56"]
    assert rows.duration.tolist() == [1164546, 763839, 1127338]
    assert rows.gpu_num.tolist() == [4, 8, 4]


def test_srtf_runs_with_helios_ticks_and_checkpoint_costs():
    """Helios's SRTF maps to ``helios-srtf`` (or, asked, ``srtf``) in 1-s rounds, unguarded,
    whose restart cost is Helios's checkpoint cost (``Policy.ckpt_overhead``): 7 s for 1 GPU,
    30 s for 2-8, 60 s above."""
    from jaxsched.sim import ClusterEnv

    assert script.POLICIES["srtf"] == "helios-srtf"
    own = script.jaxsched_config("philly.csv", "6214e9", "srtf", "native", 0.7, 100, 8)
    assert own.env.round_s == 1.0 and own.env.restart_overhead_s == (7.0, 30.0, 60.0)
    config = script.jaxsched_config("philly.csv", "6214e9", script.POLICIES["srtf"], "native", 0.7, 100, 8)
    assert config.env.round_s == 1.0 and config.env.restart_guard is False
    costs = ClusterEnv(config.env).restart_cost_s(np.array([1, 2, 8, 9, 24]))
    np.testing.assert_array_equal(np.asarray(costs), [7.0, 30.0, 30.0, 60.0, 60.0])
    fifo = script.jaxsched_config("philly.csv", "6214e9", script.POLICIES["fifo"], "native", 0.7, 100, 8)
    assert fifo.env.round_s == 0.0
