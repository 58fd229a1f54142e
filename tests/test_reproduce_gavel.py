"""scripts/reproduce_gavel.py: the physical rules give back results/gavel's earlier rows (the
A/B of Gavel's gang rules), and its comparison with Gavel's printed curves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jaxsched import paths

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("reproduce_gavel", ROOT / "scripts" / "reproduce_gavel.py")
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
    want = committed[(committed.rules == "physical") & (committed.workload == "multi")
                     & (committed.scheduler == "fifo") & (committed.rate_per_h == 0.2)].sort_values("seed")
    assert len(want) == 16
    got, _ = script.run_point("multi", "fifo", 0.2, seeds=16, extra_jobs=3000, rules="physical")
    np.testing.assert_allclose(got["jct_h"].to_numpy(), want["jct_h"].to_numpy(), rtol=1e-5)
    np.testing.assert_array_equal(got["measured_finished"].to_numpy(), want["measured_finished"].to_numpy())


def test_the_comparison_reads_gavels_printed_points_under_gavels_rules_only():
    script = load_script()
    table = pd.DataFrame([
        {"rules": "gavel", "workload": "single", "scheduler": "las", "rate_per_h": 2.0, "jct_mean_h": 25.0,
         "p5_h": 24.0, "p95_h": 27.0},
        {"rules": "physical", "workload": "single", "scheduler": "las", "rate_per_h": 4.0, "jct_mean_h": 23.49,
         "p5_h": 20.0, "p95_h": 26.0},
        {"rules": "gavel", "workload": "multi", "scheduler": "gavel-fifo", "rate_per_h": 1.0, "jct_mean_h": 19.0,
         "p5_h": 15.0, "p95_h": 18.0},
    ])
    out = script.compare_printed(table)
    assert out[["workload", "scheduler", "rate_per_h"]].values.tolist() == [["single", "las", 2.0],
                                                                            ["multi", "gavel-fifo", 1.0]]
    assert out.gavel_h.tolist() == [23.47, 19.92]
    assert out.within_10pct.tolist() == [True, True] and out.printed_in_p5_p95.tolist() == [False, False]
    assert out["diff"].tolist() == [round(25.0 / 23.47 - 1, 3), round(19.0 / 19.92 - 1, 3)]
