"""The main job's paired plot: drawn from ``train.paired_differences``' frame, one row per baseline."""

from __future__ import annotations

import numpy as np
import pandas as pd

from jaxsched import plots
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
