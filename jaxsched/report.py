"""Tables of results: per-episode frames -> summary (mean and 95% CI) -> CSV and Markdown."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

# Metrics shown in the printed table, in this order (the CSVs hold every metric).
HEADLINE = ("jct_mean", "jct_p95", "queue_delay_mean", "slowdown_mean", "makespan_s",
            "gpu_alloc", "frag_rate", "finished", "failed", "dropped_overflow", "unfinished")


def summarize(per_episode: pd.DataFrame, by: str = "scheduler") -> pd.DataFrame:
    """Mean and 95% confidence half-width (normal approximation) of every metric per group.

    Returns one row per group with columns ``<metric>`` (mean) and ``<metric>_ci95``.
    """
    metrics = [c for c in per_episode.columns if c not in (by, "episode")]
    rows = []
    for name, group in per_episode.groupby(by, sort=False):
        row = {by: name, "episodes": len(group)}
        for m in metrics:
            values = group[m].to_numpy(np.float64)
            row[m] = values.mean()
            spread = values.std(ddof=1) if len(values) > 1 else 0.0
            row[f"{m}_ci95"] = 1.96 * spread / math.sqrt(len(values))
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(summary: pd.DataFrame, metrics=HEADLINE, by: str = "scheduler") -> str:
    """A Markdown table: one row per group, ``mean ± ci95`` per metric."""
    metrics = [m for m in metrics if m in summary.columns]
    lines = ["| " + " | ".join([by, "episodes", *metrics]) + " |",
             "|" + "---|" * (len(metrics) + 2)]
    for _, row in summary.iterrows():
        cells = [str(row[by]), str(int(row["episodes"]))]
        cells += [f"{_fmt(row[m])} ± {_fmt(row[f'{m}_ci95'])}" for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"
