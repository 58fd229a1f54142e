"""Tables of results: per-episode frames -> summary (mean and 95% CI) -> CSV and Markdown;
final states -> the per-job schedule (what happened to every job)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from jaxsched.types import GPU_MILLI, OUTCOME_NONE, OUTCOME_PLACED, OUTCOME_REJECTED

# Metrics shown in the printed table, in this order (the CSVs hold every metric).
HEADLINE = ("jct_mean", "jct_p95", "queue_delay_mean", "slowdown_mean", "makespan_s",
            "gpu_alloc", "frag_rate", "migrations", "finished", "rejected", "failed",
            "dropped_overflow", "unfinished")


def summarize(per_episode: pd.DataFrame, by="scheduler") -> pd.DataFrame:
    """Mean and 95% confidence half-width (normal approximation) of every metric per group.

    ``by``: a column name or a list of them (e.g. ``["scheduler", "load"]``).
    Returns one row per group (in order of first appearance) with columns ``<metric>``
    (mean) and ``<metric>_ci95`` = 1.96 x sample std (ddof=1) / sqrt(episodes); 0 for one
    episode.
    """
    keys = [by] if isinstance(by, str) else list(by)
    metrics = [c for c in per_episode.columns if c not in (*keys, "episode")]
    rows = []
    for name, group in per_episode.groupby(keys if len(keys) > 1 else keys[0], sort=False):
        row = dict(zip(keys, name if len(keys) > 1 else (name,)))
        row["episodes"] = len(group)
        for m in metrics:
            values = group[m].to_numpy(np.float64)
            row[m] = values.mean()
            spread = values.std(ddof=1) if len(values) > 1 else 0.0
            row[f"{m}_ci95"] = 1.96 * spread / math.sqrt(len(values))
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(summary: pd.DataFrame, metrics=HEADLINE, by="scheduler") -> str:
    """A Markdown table: one row per group (``by``: a column or a list), ``mean ± ci95`` per metric."""
    keys = [by] if isinstance(by, str) else list(by)
    metrics = [m for m in metrics if m in summary.columns]
    lines = ["| " + " | ".join([*keys, "episodes", *metrics]) + " |",
             "|" + "---|" * (len(metrics) + len(keys) + 1)]
    for _, row in summary.iterrows():
        cells = [str(row[k]) for k in keys] + [str(int(row["episodes"]))]
        cells += [f"{_fmt(row[m])} ± {_fmt(row[f'{m}_ci95'])}" for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


# ----------------------------------------------------------------------------- per-job schedule

# A job's fate at the end of an episode (the per-job CSV's ``outcome`` column).
OUTCOMES = ("placed", "rejected", "failed", "dropped", "unfinished")
# The final-state fields ``job_outcomes`` needs (``evaluate`` copies them off the device).
RECORD_FIELDS = ("outcome", "node", "gpu_bits", "start_s", "end_s", "unschedulable",
                 "queue", "queue_len", "next_arrival", "time_s")


def job_outcomes(records: dict, valid, static: bool) -> np.ndarray:
    """[E, J] index into ``OUTCOMES`` of every job (-1 for padding), from final states.

    ``records``: ``RECORD_FIELDS`` of a batch of final ``SimState``s as [E, ...] arrays.
    The env writes only placed / rejected into ``outcome``; the rest is derived as in
    docs/semantics.md: a job that arrived (index < next_arrival), was never placed or
    rejected and is not in the queue failed (unschedulable; in static mode: fit nowhere at
    arrival) or was dropped (the queue was full). placed = finished (dynamic: ended by the
    final clock; static: placed); everything else (queued, running at the cap, not yet
    arrived) is unfinished. The counts equal the per-episode metrics of the same states.
    """
    outcome = np.asarray(records["outcome"])
    num_eps, num_jobs = outcome.shape
    arrived = np.arange(num_jobs)[None, :] < np.asarray(records["next_arrival"])[:, None]
    queue = np.asarray(records["queue"])
    in_queue = np.arange(queue.shape[1])[None, :] < np.asarray(records["queue_len"])[:, None]
    rows = np.broadcast_to(np.arange(num_eps)[:, None], queue.shape)
    queued = np.zeros_like(arrived)
    queued[rows[in_queue], queue[in_queue]] = True
    placed = outcome == OUTCOME_PLACED
    if not static:
        placed &= np.asarray(records["end_s"]) <= np.asarray(records["time_s"])[:, None]
    never = (outcome == OUTCOME_NONE) & arrived & ~queued
    unschedulable = np.asarray(records["unschedulable"]) | static
    code = np.full(outcome.shape, OUTCOMES.index("unfinished"), np.int64)
    code[placed] = OUTCOMES.index("placed")
    code[outcome == OUTCOME_REJECTED] = OUTCOMES.index("rejected")
    code[never & unschedulable] = OUTCOMES.index("failed")
    code[never & ~unschedulable] = OUTCOMES.index("dropped")
    code[~np.asarray(valid, bool)] = -1
    return code


def schedule_frame(scheduler: str, jobs, records: dict, static: bool, first_episode: int = 0):
    """The complete schedule of a batch as a frame: one row per (episode, valid job).

    ``jobs``: the batch's ``Jobs`` ([E, J] arrays); ``records``: see ``job_outcomes``.
    Columns: scheduler, episode, job, arrival_s, work_s, num_gpu, gpu_milli, cpu_milli,
    mem_mib, outcome, node (-1 = never placed), gpu_bits (bit g = GPU g of the node),
    start_s, end_s (empty = never started; static mode: never ends).
    """
    valid = np.asarray(jobs.valid, bool)
    code = job_outcomes(records, valid, static)
    eps, idx = np.nonzero(valid)
    take = lambda x: np.asarray(x)[eps, idx]  # noqa: E731
    finite = lambda x: np.where(np.isfinite(x), x, np.nan)  # noqa: E731
    return pd.DataFrame({
        "scheduler": scheduler,
        "episode": eps + first_episode,
        "job": idx,
        "arrival_s": take(jobs.arrival_s),
        "work_s": take(jobs.work_s),
        "num_gpu": take(jobs.num_gpu),
        "gpu_milli": take(jobs.gpu_milli),
        "cpu_milli": take(jobs.cpu_milli),
        "mem_mib": take(jobs.mem_mib),
        "outcome": np.asarray(OUTCOMES)[code[eps, idx]],
        "node": take(records["node"]),
        "gpu_bits": take(records["gpu_bits"]),
        "start_s": finite(take(records["start_s"])),
        "end_s": finite(take(records["end_s"])),
    })


def offered_load(jobs, cluster_gpus: int) -> np.ndarray:
    """[E] offered load rho of each episode's jobs (SPEC.md): sum of GPUs x work of the
    valid jobs / (cluster GPUs x arrival span); 0 when the span is 0."""
    valid = np.asarray(jobs.valid, bool)
    gpus = np.asarray(jobs.num_gpu, np.float64) * np.asarray(jobs.gpu_milli, np.float64) / GPU_MILLI
    demand = np.where(valid, gpus * np.asarray(jobs.work_s, np.float64), 0.0).sum(-1)
    arrival = np.asarray(jobs.arrival_s, np.float64)
    span = np.where(valid, arrival, -np.inf).max(-1) - np.where(valid, arrival, np.inf).min(-1)
    span = np.where(valid.any(-1), span, 0.0)
    return np.where(span > 0, demand / (cluster_gpus * np.where(span > 0, span, 1.0)), 0.0)
