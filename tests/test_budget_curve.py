"""scripts/budget_curve.py: budgets in whole chunks, one row per budget, and --resume."""

import dataclasses
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from jaxsched import train
from tests.agents.tiny import COMMON, GNN_PPO
from tests.settings import extended

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "budget_curve.py"
spec = importlib.util.spec_from_file_location("budget_curve", SCRIPT)
budget_curve = importlib.util.module_from_spec(spec)
spec.loader.exec_module(budget_curve)


def test_budgets_round_up_to_whole_chunks():
    # 32 env steps per update, chunks of 10 updates (320 env steps)
    assert budget_curve.budget_updates([1, 320, 321, 1e4], 32, 10) == [10, 20, 320]
    assert budget_curve.budget_updates([640, 600], 32, 10) == [20]  # one budget, not two


def test_without_config_the_run_is_the_main_jobs_preset():
    # One seed and no validation; workload, env, cluster, learner and held-out episodes are the
    # main job's (a bare config is a different workload: another baseline JCT, no warm-up).
    run, main_job = budget_curve.load_run(None), train.load(train.DEFAULT_CONFIG)
    assert run.base == main_job.base and run.agent == main_job.agent
    assert run.train == dataclasses.replace(main_job.train, num_seeds=1, valid_episodes=0)
    assert budget_curve.load_run(None, episodes=8).base.eval.episodes == 8


def test_interrupted_sessions_time_is_summed_up_to_the_last_checkpoint(tmp_path):
    # budgets at update 10 (in the CSV); then a session stopped at 30, one killed at 50 after
    # its checkpoint at 40: 2 s + 1.5 s, and not the 4 s logged past that checkpoint
    (tmp_path / "checkpoints" / "40").mkdir(parents=True)
    pd.DataFrame({"update": [10, 20, 30, 40, 50], "run": 0,
                  "wall_s": [9.0, 1.0, 2.0, 1.5, 4.0]}).to_csv(tmp_path / "train_log.csv", index=False)
    assert budget_curve.interrupted_train_s(tmp_path, 10) == 3.5
    assert budget_curve.interrupted_train_s(tmp_path, 40) == 0.0
    assert budget_curve.interrupted_train_s(tmp_path / "absent", 0) == 0.0


@pytest.mark.parametrize("learner", [extended(GNN_PPO, id="gnn-ppo")])
def test_one_row_per_budget_and_resume_continues_the_run(learner, tmp_path, capsys):
    sets = [f"--set={s}" for s in [*COMMON, *learner, "eval.episodes=4", "eval.batch_size=4"]]
    # PPO's budget curve runs on its own preset (the main job's is GNN-DDQN's, whose agent keys PPO lacks)
    first = ["--config", "gnn_ppo", "--out", str(tmp_path), "--label", "tiny", "--baseline", "sjf", *sets]
    # tiny PPO: 8 envs x 4 steps = 32 env steps per update, chunks of 10 updates
    assert budget_curve.main([*first, "--budgets", "300"]) == 0
    rows = pd.read_csv(tmp_path / "budget.csv")
    assert rows["updates"].tolist() == [10] and rows["env_steps"].tolist() == [320]
    assert budget_curve.main([*first, "--budgets", "300,700"]) == 2  # rows exist: --resume or another label
    assert "--resume" in capsys.readouterr().err
    # a session stopped between two budgets (one chunk, past its 0 s) writes no row; the next goes on
    assert budget_curve.main([*first, "--budgets", "300,700", "--resume", "--max-train-s", "0"]) == 0
    assert "stopped after 20 of 30 updates" in capsys.readouterr().out
    assert pd.read_csv(tmp_path / "budget.csv")["updates"].tolist() == [10]
    assert budget_curve.main([*first, "--budgets", "300,700", "--resume"]) == 0
    rows = pd.read_csv(tmp_path / "budget.csv")
    assert rows["updates"].tolist() == [10, 30]
    assert rows["train_s"].is_monotonic_increasing
    log = pd.read_csv(tmp_path / "runs" / "tiny" / "train_log.csv")
    assert log["update"].tolist() == [10, 20, 30]  # continued from update 10, not restarted
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "logs" / "tiny.csv"), log)  # the committed copy
    for _, row in rows.iterrows():  # the paired difference and its CI agree with the means
        assert row["ci95_lo_pct"] <= row["diff_pct"] <= row["ci95_hi_pct"]
        assert row["diff_pct"] == pytest.approx(100 * (row["agent_jct_s"] / row["baseline_jct_s"] - 1), abs=1e-3)
    assert (tmp_path / "budget_curve.png").stat().st_size > 0
