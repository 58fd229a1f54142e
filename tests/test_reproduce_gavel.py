"""scripts/reproduce_gavel.py: the physical rules give back results/gavel's earlier rows (the
A/B of Gavel's gang rules), and its comparison with Gavel's printed curves; and
scripts/check_against_gavel.py's trace in Gavel's format and its reading of Gavel's output."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jaxsched import paths

ROOT = Path(__file__).resolve().parents[1]


def load_script(name="reproduce_gavel"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.fixture
def gavel_data():
    found = paths.data_dir()
    if found is None or not (found / "gavel" / "simulation_throughputs.json").is_file():
        pytest.skip("Gavel throughputs not found: set JAXSCHED_DATA or provide "
                    "../shared/data/gavel/simulation_throughputs.json (see shared/data/README.md)")


@pytest.mark.slow
def test_the_physical_rules_give_back_the_committed_multi_gpu_fifo_point(gavel_data):
    """With Gavel's gang rules off (``--rules physical``: spread speeds, gangs free to mix GPU
    types) the multi-GPU fifo point at 0.2 jobs/h is the committed one, seed by seed (16
    streams of 8,000 jobs): the new settings change nothing when off."""
    script = load_script()
    committed = pd.read_csv(ROOT / "results" / "gavel" / "per_seed.csv")
    if "generator" in committed:  # rows since the column: only those drawn by jaxsched's generator
        committed = committed[committed.generator == "jaxsched"]
    want = committed[(committed.rules == "physical") & (committed.workload == "multi")
                     & (committed.scheduler == "fifo") & (committed.rate_per_h == 0.2)].sort_values("seed")
    assert len(want) == 16
    got, _ = script.run_point("multi", "fifo", 0.2, seeds=16, extra_jobs=3000, rules="physical", generator="jaxsched")
    np.testing.assert_allclose(got["jct_h"].to_numpy(), want["jct_h"].to_numpy(), rtol=1e-5)
    np.testing.assert_array_equal(got["measured_finished"].to_numpy(), want["measured_finished"].to_numpy())


def test_the_comparison_reads_gavels_printed_points_under_gavels_rules_only():
    """Printed points only, under Gavel's rules only; the mean from the point's run of the most
    seeds (Gavel's own streams first on ties), and seed 0's JCT (the printed run's own jobs)
    wherever the point ran on Gavel's streams, even in a run of two seeds."""
    script = load_script()
    row = {"p5_h": 15.0, "p95_h": 18.0, "seeds": 16}
    table = pd.DataFrame([
        {"rules": "gavel", "generator": "jaxsched", "workload": "single", "scheduler": "las", "rate_per_h": 2.0,
         "jct_mean_h": 25.0, "p5_h": 24.0, "p95_h": 27.0, "seeds": 16},
        {"rules": "physical", "generator": "jaxsched", "workload": "single", "scheduler": "las", "rate_per_h": 4.0,
         "jct_mean_h": 23.49, "p5_h": 20.0, "p95_h": 26.0, "seeds": 16},
        {"rules": "gavel", "generator": "jaxsched", "workload": "single", "scheduler": "las-perf", "rate_per_h": 2.0,
         "jct_mean_h": 16.0, **row},
        {"rules": "gavel", "generator": "gavel", "workload": "single", "scheduler": "las-perf", "rate_per_h": 2.0,
         "jct_mean_h": 17.5, "p5_h": 17.0, "p95_h": 18.0, "seeds": 2},
        {"rules": "gavel", "generator": "jaxsched", "workload": "multi", "scheduler": "gavel-fifo", "rate_per_h": 1.0,
         "jct_mean_h": 16.0, **row},
        {"rules": "gavel", "generator": "gavel", "workload": "multi", "scheduler": "gavel-fifo", "rate_per_h": 1.0,
         "jct_mean_h": 19.0, **row},
    ])
    per_seed = pd.DataFrame([{"rules": "gavel", "generator": g, "workload": w, "scheduler": s,
                              "rate_per_h": r, "seed": seed, "jct_h": h}
                             for g, w, s, r, seed, h in (("jaxsched", "multi", "gavel-fifo", 1.0, 0, 30.0),
                                                         ("gavel", "multi", "gavel-fifo", 1.0, 1, 17.0),
                                                         ("gavel", "multi", "gavel-fifo", 1.0, 0, 20.5),
                                                         ("jaxsched", "single", "las-perf", 2.0, 0, 14.0),
                                                         ("gavel", "single", "las-perf", 2.0, 0, 16.9))])
    out = script.compare_printed(table, per_seed)
    assert out[["workload", "scheduler", "rate_per_h", "generator", "seeds"]].values.tolist() == [
        ["single", "las", 2.0, "jaxsched", 16], ["single", "las-perf", 2.0, "jaxsched", 16],
        ["multi", "gavel-fifo", 1.0, "gavel", 16]]
    assert out.gavel_h.tolist() == [23.47, 16.95, 19.92]
    assert out.jct_mean_h.tolist() == [25.0, 16.0, 19.0]
    assert out.within_10pct.tolist() == [True, True, True]
    assert out.printed_in_p5_p95.tolist() == [False, True, False]
    assert out["diff"].tolist() == [round(25.0 / 23.47 - 1, 3), round(16.0 / 16.95 - 1, 3), round(19.0 / 19.92 - 1, 3)]
    assert np.isnan(out.seed0_h[0]) and out.seed0_h.tolist()[1:] == [16.9, 20.5]
    assert out.seed0_diff[2] == round(20.5 / 19.92 - 1, 3)
    assert out.seed0_within_10pct.tolist() == [False, True, True]


def test_the_check_writes_gavels_trace_format_and_reads_its_job_lines(tmp_path):
    """Three jobs of the small table (A on 1 and 2 GPUs, B on 1; an hour of V100 work each,
    an hour apart) as Gavel's ``parse_trace`` reads them: the type, a command, the steps
    argument, no data dir, total steps = 3600 x the V100's steps/s at the scale factor (10,
    16 and 4 steps/s), the scale factor, weight 1, SLO -1, the arrival."""
    from jaxsched.workload import gavel as G
    from tests.workload.test_gavel import drawn, small_table, write_json

    check = load_script("check_against_gavel")
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    jobs = G.to_jobs(drawn([0, 0, 1], [1, 2, 1]), tp, G.MODELS, gpus_per_node=1, max_span=2,
                     gang_speed="consolidated", pad_to=4)
    lines = [line.split("\t") for line in check.trace_lines(jobs, tp)]
    assert [f[0] for f in lines] == ["A", "A", "B"] and all(len(f) == 9 for f in lines)
    assert [f[4] for f in lines] == ["36000", "57600", "14400"] and [f[5] for f in lines] == ["1", "2", "1"]
    assert [float(f[8]) for f in lines] == [0.0, 3600.0, 7200.0] and {f[3] for f in lines} == {"0"}
    (tmp_path / "trace.txt").write_text("\n".join(check.trace_lines(jobs, tp)) + "\n")
    back = G.load_trace(tmp_path / "trace.txt", tp)  # and jaxsched reads them back
    assert back.job_type.tolist() == [0, 0, 1] and back.num_gpus.tolist() == [1, 2, 1]
    assert back.work_s.tolist() == [3600.0] * 3 and back.arrival_s.tolist() == [0.0, 3600.0, 7200.0]
    log = "Job completion times:\nJob 4: 1234.500\nJob 5 (high priority): 10.000\nJob 12: 7.25\nAverage job completion time: 1.0"
    assert check.gavel_jcts(log) == {4: 1234.5, 5: 10.0, 12: 7.25}
