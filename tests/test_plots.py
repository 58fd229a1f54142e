"""The main job's plots: the paired plot (from ``train.paired_differences``' frame), the learning curve and the comparison bars."""

from __future__ import annotations

import numpy as np
import pandas as pd

from jaxsched import agents, plots
from jaxsched import train as train_lib


def test_paired_plot_draws_each_baseline_and_skips_an_empty_frame(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    episodes = np.arange(16)
    frames = [pd.DataFrame({"scheduler": name, "episode": episodes, "jct_mean": rng.normal(mean, 5.0, 16)})
              for name, mean in (("agent", 100.0), ("first-fit", 110.0), ("sjf", 101.0))]
    paired = train_lib.paired_differences(pd.concat(frames), "agent")
    drawn = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.append(fig) or real(fig, path))
    path = plots.paired(paired, "agent", tmp_path / "paired.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = drawn[0].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(labels) == ["first-fit", "sjf"] and labels[0] == "first-fit"  # most negative first
    assert plots.paired(paired.iloc[:0], "agent", tmp_path / "empty.png") is None


def test_learning_curve_starts_untrained_with_heuristic_lines_and_no_empty_panel():
    learner = agents.get("gnn-ddqn")
    updates = np.array([10, 20, 30])
    # Loaded episodes: no training episode ends, so every return is NaN; the reward per step is not.
    log = pd.DataFrame({"update": np.tile(updates, 2), "run": np.repeat([0, 1], 3), "env_steps": np.tile(updates, 2) * 8,
                        "return": np.nan, "reward_per_step": [-3.0, -2.5, -2.0, -3.1, -2.7, -2.2],
                        **{field: 1.0 for field, *_ in learner.panels}})
    valid = pd.DataFrame({"update": np.tile([0, 20, 30], 2), "env_steps": np.tile([0, 160, 240], 2),
                          "run": np.repeat([0, 1], 3), "seed": np.repeat([0, 1], 3),
                          "valid_jct_s": [120.0, 110.0, 104.0, 121.0, 112.0, 106.0]})
    levels = {"first-fit": 118.0, "sjf": 105.0, "hops (best heuristic)": 103.0}
    fig = train_lib.learning_curve(learner, log, valid, levels)
    first, second = fig.axes[:2]
    runs = [line for line in first.lines if line.get_label().startswith("run")]
    assert [line.get_xdata()[0] for line in runs] == [0, 0]  # every run's curve starts at the untrained agent
    assert first.get_xlabel() == "env steps"
    drawn = {line.get_label(): line.get_ydata()[0] for line in first.lines if not line.get_label().startswith("run")}
    assert drawn == levels
    assert "reward" in second.get_title() and np.isfinite(second.lines[0].get_ydata()).all()
    assert len(fig.axes) == 2 + len(learner.panels)
    ppo = agents.get("gnn-ppo")  # more panels than fit a row: rows of at most 4, no empty one
    log_ppo = log.assign(**{field: 1.0 for field, *_ in ppo.panels})
    wide = train_lib.learning_curve(ppo, log_ppo, valid, levels)
    rows = {round(ax.get_position().y0, 3) for ax in wide.axes}
    assert len(wide.axes) == 2 + len(ppo.panels) and len(rows) == -(-len(wide.axes) // 4) > 1
    with_returns = train_lib.learning_curve(learner, log.assign(**{"return": -100.0}), valid.iloc[:0])
    assert with_returns.axes[0].get_title() == "training return" and len(with_returns.axes) == 1 + len(learner.panels)


def test_comparison_cuts_an_outlier_bar_and_writes_its_value():
    summary = pd.DataFrame({"scheduler": ["agent", "first-fit", "sjf", "fifo"],
                            "jct_mean": [100.0, 120.0, 101.0, 900.0], "jct_mean_ci95": [2.0, 5.0, 2.0, 30.0]})
    ax = train_lib.comparison(summary, "agent").axes[0]
    assert 120.0 + 5.0 < ax.get_ylim()[1] < 900.0  # the others stay readable
    assert [t.get_text() for t in ax.texts] == ["900 ↑"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["agent", "sjf", "first-fit", "fifo"]
    plain = train_lib.comparison(summary[summary.scheduler != "fifo"], "agent").axes[0]
    assert plain.get_ylim()[1] > 125.0 and not plain.texts  # no outlier: the whole of every bar
