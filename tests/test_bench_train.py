"""scripts/bench_train.py: where training time goes (the learners' parts and their sweep)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("bench_train", Path(__file__).parents[1] / "scripts" / "bench_train.py")
bench_train = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench_train)

# Short episodes: the presets' 18,000-job episodes and 10,800-job warm-up cost minutes to build.
SHORT = ["--set", "workload.synthetic.num_jobs=600", "--set", "env.warmup_jobs=300",
         "--set", "env.measured_jobs=100", "--set", "train.train_jobs=600"]


def whole_row(learner, setting, env_steps_per_s):
    return {"table": "side by side", "learner": learner, "setting": setting, "program": "whole", "num_envs": 16,
            "env_steps": 512, "grad_steps": 8, "grad_samples": 512, "compile_s": 1.0,
            "s_per_chunk": 512 / env_steps_per_s, "env_steps_per_s": env_steps_per_s,
            "grad_steps_per_s": 8 * env_steps_per_s / 512}


@pytest.mark.parametrize("ppo_fastest, verdict", [(480.0, "not met"), (500.0, "met")])
def test_report_says_whether_ppo_reaches_five_times_ddqn(ppo_fastest, verdict):
    ddqn = whole_row("gnn-ddqn", "preset", 100.0)
    ppo = [whole_row("gnn-ppo", "preset", 250.0), whole_row("gnn-ppo", "epochs 1", ppo_fastest)]
    text = bench_train.report([ddqn] + ppo, {}, command="cmd", load=((1, 1, 1), (2, 2, 2)), wall_s=1.0,
                              machine="cpu")
    assert "both presets: **2.50x**" in text
    assert f"(epochs 1): **{ppo_fastest / 100:.2f}x**" in text
    assert f"The goal of 5x is {verdict} in this run." in text
    assert "| gnn-ppo | epochs 1 | 16 | " in text


@pytest.mark.slow
def test_quick_run_times_every_part_of_gnn_ddqn_and_writes_its_rows(tmp_path):
    out = tmp_path / "bench"
    assert bench_train.main(["--quick", "--learners", "gnn-ddqn", "--env-steps", "4", "--calls", "1",
                             "--out", str(out)] + SHORT) == 0
    rows = list(csv.DictReader(open(out / "bench_train.csv")))
    assert [(r["table"], r["learner"], r["setting"], r["program"]) for r in rows] == [
        ("split", "gnn-ddqn", "preset", program) for program in ("whole", "env", "act", "replay", "grad")] + [
        ("side by side", "gnn-ddqn", "preset", "whole")]
    for row in rows:
        assert float(row["s_per_chunk"]) > 0 and float(row["compile_s"]) > 0, row
    whole = rows[0]
    assert int(whole["env_steps"]) == 4 * 16 and int(whole["grad_steps"]) == 4 * 2  # the preset's grad_steps 2
    assert float(whole["env_steps_per_s"]) == pytest.approx(64 / float(whole["s_per_chunk"]), rel=1e-4)
    text = (out / "bench_train.md").read_text()
    assert "| gnn-ddqn | 16 | 64 |" in text and "parts / whole" in text
