"""Plots of an evaluation: PNG files from the frames ``evaluate`` writes (matplotlib, Agg).

Each function takes frames (the per-job schedule, the timeline, a summary) and a path,
draws one figure and returns the path, or None when there is nothing to draw (e.g. no job
finished). Figures are built with ``matplotlib.figure.Figure`` directly, not ``pyplot``, so
nothing global (the backend, open figures) changes and it works without a display.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100
MAX_CURVE_POINTS = 2000  # a CDF is drawn through this many quantiles (keeps files small)

# Short axis labels of the headline metrics (others are labelled by their column name).
LABELS = {
    "jct_mean": "mean JCT (s)", "jct_p95": "p95 JCT (s)", "queue_delay_mean": "mean queueing delay (s)",
    "slowdown_mean": "mean bounded slowdown", "makespan_s": "makespan (s)",
    "gpu_alloc": "GPU allocation", "frag_rate": "fragmentation rate",
    "frag_amount": "fragmentation / GPU capacity", "finished": "jobs finished",
    "work_alloc": "work capacity in use", "backlog_growth": "backlog growth (share of measured jobs)",
    "backlog_work_growth": "backlog growth (share of measured work)",
    "queue_len_mean": "mean queue length", "reservations": "reservations",
    "measured_finished": "measured jobs finished",
    "failed": "jobs failed", "dropped_overflow": "jobs dropped", "unfinished": "jobs unfinished",
}


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path) -> Path:
    path = Path(path)
    fig.savefig(path, dpi=DPI)
    return path


def _ecdf(values: np.ndarray):
    """(x, y) of the empirical CDF through at most MAX_CURVE_POINTS quantiles."""
    y = np.linspace(0.0, 1.0, min(len(values), MAX_CURVE_POINTS))
    return np.quantile(values, y), y


def _finished(schedule: pd.DataFrame) -> pd.DataFrame:
    done = schedule[(schedule["outcome"] == "placed") & schedule["end_s"].notna()]
    return done


def jct_cdf(schedule: pd.DataFrame, path) -> Path | None:
    """CDF of job completion time (end - arrival) of finished jobs, one curve per scheduler."""
    done = _finished(schedule)
    if done.empty:
        return None
    fig = _figure(6, 4)
    ax = fig.add_subplot()
    for name, group in done.groupby("scheduler", sort=False):
        jct = (group["end_s"] - group["arrival_s"]).to_numpy(np.float64)
        x, y = _ecdf(np.maximum(jct, 1e-3))
        ax.plot(x, y, label=f"{name} (mean {jct.mean():,.0f} s)")
    ax.set_xscale("log")
    ax.set(xlabel="job completion time (s)", ylabel="fraction of finished jobs",
           title="JCT CDF (all episodes)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def queue_delay_cdf(schedule: pd.DataFrame, path) -> Path | None:
    """CDF of queueing delay (start - arrival) of finished jobs (symlog axis: many are 0)."""
    done = _finished(schedule)
    if done.empty:
        return None
    fig = _figure(6, 4)
    ax = fig.add_subplot()
    for name, group in done.groupby("scheduler", sort=False):
        delay = (group["start_s"] - group["arrival_s"]).to_numpy(np.float64)
        x, y = _ecdf(delay)
        ax.plot(x, y, label=f"{name} (mean {delay.mean():,.1f} s, {np.mean(delay > 0):.0%} wait)")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0)
    # Most jobs often start at once: zoom the y axis onto the part of the CDF that waits.
    started_at_once = done.groupby("scheduler")["start_s"].apply(
        lambda s: np.mean(s.to_numpy() <= done.loc[s.index, "arrival_s"].to_numpy())).min()
    ax.set_ylim(max(0.0, started_at_once - 0.05), 1.005)
    ax.set(xlabel="queueing delay (s)", ylabel="fraction of finished jobs",
           title="Queueing delay CDF (all episodes)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def timeline(frame: pd.DataFrame, total_milli: int, path) -> Path | None:
    """GPU allocation, fragmentation (% of cluster GPUs) and queue length at each decision.

    ``frame``: the timeline (scheduler, episode, time_s, alloc_milli, frag_milli, queue_len,
    done); every scheduler's first recorded episode is drawn. Only decision points are
    recorded: after the last one the env runs the remaining completions in one step, so the
    drain to the episode's end (the done row) is left out rather than drawn as a flat line.
    """
    frame = frame[~frame["done"].astype(bool)]
    if frame.empty:
        return None
    fig = _figure(8, 7)
    axes = fig.subplots(3, 1, sharex=True)
    for name, group in frame.groupby("scheduler", sort=False):
        ep = group[group["episode"] == group["episode"].iloc[0]]
        hours = (ep["time_s"].to_numpy() - ep["time_s"].iloc[0]) / 3600.0
        for ax, values in zip(axes, (ep["alloc_milli"] / total_milli * 100,
                                     ep["frag_milli"] / total_milli * 100, ep["queue_len"])):
            ax.plot(hours, values.to_numpy(), label=name, linewidth=0.8)
    first = int(frame["episode"].iloc[0])
    axes[0].set(ylabel="GPU allocated (%)", title=f"Cluster at each decision (episode {first}; drain after the last one not shown)")
    axes[1].set(ylabel="fragmentation (% GPUs)")
    axes[2].set(ylabel="queued jobs", xlabel="hours since the first arrival")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend()
    return _save(fig, path)


def metric_bars(summary: pd.DataFrame, metrics, path, by: str = "scheduler") -> Path | None:
    """One bar chart per metric (mean over episodes, 95% CI error bars), in a grid."""
    metrics = [m for m in metrics if m in summary.columns]
    if not metrics or summary.empty:
        return None
    cols = min(4, len(metrics))
    rows = -(-len(metrics) // cols)
    fig = _figure(3.2 * cols, 2.6 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    names = summary[by].astype(str).tolist()
    colors = [f"C{i}" for i in range(len(names))]
    for ax, m in zip(axes, metrics):
        ax.bar(names, summary[m], yerr=summary[f"{m}_ci95"], color=colors, capsize=3)
        ax.set_title(LABELS.get(m, m), fontsize=9)
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    return _save(fig, path)


def paired(frame: pd.DataFrame, agent: str, path, label: str = "mean JCT (s)") -> Path | None:
    """The agent minus each baseline on the same episodes: the mean difference and its 95% CI
    per baseline (``train.paired_differences``' frame), against a line at 0. Green where the CI
    lies below 0, red above, grey across it: a 1% difference that bars from zero hide."""
    if frame.empty:
        return None
    frame = frame.sort_values("diff_mean")
    fig = _figure(6.5, 0.4 * len(frame) + 1.3)
    ax = fig.subplots()
    for y, row in enumerate(frame.itertuples()):
        color = "tab:green" if row.diff_ci95_hi < 0 else "tab:red" if row.diff_ci95_lo > 0 else "tab:gray"
        ax.errorbar(row.diff_mean, y, xerr=[[row.diff_mean - row.diff_ci95_lo], [row.diff_ci95_hi - row.diff_mean]],
                    fmt="o", color=color, capsize=3)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(frame)), [str(b) for b in frame["baseline"]], fontsize=8)
    ax.set(xlabel=f"{agent} minus baseline, {label}", title="paired on the held-out episodes (95% CI)")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def sweep(summary: pd.DataFrame, metrics, path) -> Path | None:
    """Each metric against offered load (mean, 95% CI error bars), one line per scheduler.

    ``summary``: the sweep summary (columns scheduler, load, <metric>, <metric>_ci95).
    """
    metrics = [m for m in metrics if m in summary.columns]
    if not metrics or summary.empty:
        return None
    cols = min(4, len(metrics))
    rows = -(-len(metrics) // cols)
    fig = _figure(3.2 * cols, 2.6 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax, m in zip(axes, metrics):
        for name, group in summary.groupby("scheduler", sort=False):
            group = group.sort_values("load")
            ax.errorbar(group["load"], group[m], yerr=group[f"{m}_ci95"], marker="o",
                        markersize=3, capsize=2, label=name)
        ax.set_title(LABELS.get(m, m), fontsize=9)
        ax.set_xlabel("offered load ρ", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    return _save(fig, path)


def saturation(summary: pd.DataFrame, max_load: pd.DataFrame, path) -> Path | None:
    """Mean JCT, mean queueing delay (log scales), GPU allocation and backlog growth against
    offered load, one line per scheduler (95% CI bars), each scheduler's maximum sustainable
    load a dotted vertical line in its colour. ``summary``: the sweep summary; ``max_load``:
    ``report.max_sustainable_load``."""
    from jaxsched.report import SATURATION_GROWTH

    panels = [("jct_mean", True), ("queue_delay_mean", True), ("work_alloc", False),
              ("backlog_work_growth", False)]
    panels = [(m, log) for m, log in panels if m in summary.columns]
    if not panels or summary.empty:
        return None
    fig = _figure(3.4 * len(panels), 3.0)
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    limit = dict(zip(max_load["scheduler"], max_load["max_load"])) if max_load is not None else {}
    for ax, (m, log) in zip(axes, panels):
        for i, (name, group) in enumerate(summary.groupby("scheduler", sort=False)):
            group = group.sort_values("load")
            color = matplotlib.colormaps["tab20"](i % 20)  # 12 registered schedulers: C0..C9 would repeat
            ax.errorbar(group["load"], group[m], yerr=group[f"{m}_ci95"], marker="o", markersize=3,
                        capsize=2, color=color, label=name)
            if name in limit:
                ax.axvline(limit[name], color=color, linestyle=":", linewidth=1)
        if log:
            ax.set_yscale("symlog" if (summary[m] <= 0).any() else "log")
            if (summary[m] <= 0).any():
                ax.set_ylim(bottom=0)  # delays are never negative
        if m == "backlog_work_growth":
            ax.axhline(SATURATION_GROWTH, color="black", linewidth=0.8)
        if m == "work_alloc":
            loads = np.sort(summary["load"].unique())
            ax.plot(loads, loads, color="black", linewidth=0.8, label="ρ")
        ax.set_title(LABELS.get(m, m), fontsize=9)
        ax.set_xlabel("offered load ρ", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _save(fig, path)
