"""Tables of results: per-episode frames -> summary (mean and 95% CI) -> CSV and Markdown;
final states -> the per-job schedule (what happened to every job)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from jaxsched.types import GPU_MILLI, OUTCOME_NONE, OUTCOME_PLACED, OUTCOME_REJECTED

# Metrics shown in the printed table, in this order (the CSVs hold every metric).
HEADLINE = ("jct_mean", "jct_p95", "queue_delay_mean", "slowdown_mean", "gpu_alloc",
            "work_alloc", "frag_rate", "frag_amount", "queue_len_mean", "backlog_work_growth", "reservations",
            "migrations", "measured_finished", "rejected", "failed", "dropped_overflow")

# Mean JCT and queueing delay by job size (``metrics.job_sizes``: 1 GPU or less, 2-8 whole GPUs,
# more than 8), the second table of ``summary_markdown``.
BY_SIZE = ("jct_mean_small", "jct_mean_2to8", "jct_mean_over8",
           "queue_delay_mean_small", "queue_delay_mean_2to8", "queue_delay_mean_over8")

# A queue is unbounded over the measurement window when its backlog of work (the GPU work of
# queued and dropped jobs) averaged over the window's last quarter exceeds that of its first
# quarter by more than this share of the measured jobs' GPU work (the ``backlog_work_growth``
# metric). Past saturation by a fraction x of the load, the backlog grows by about 0.75 x of
# the measured work between the quarters, so 0.02 flags loads about 3% past saturation.
# Counted in work, not jobs: a scheduler that starts small jobs first (sjf) keeps its backlog
# in jobs short while the large ones pile up (``backlog_growth`` counts jobs).
SATURATION_GROWTH = 0.02


# Per-episode columns that name something rather than measure it: not averaged.
NOT_METRICS = ("first_never_started", "first_never_started_gpus")


def summarize(per_episode: pd.DataFrame, by="scheduler") -> pd.DataFrame:
    """Mean and 95% confidence half-width (normal approximation) of every metric per group.

    ``by``: a column name or a list of them (e.g. ``["scheduler", "load"]``).
    Returns one row per group (in order of first appearance) with columns ``<metric>``
    (mean) and ``<metric>_ci95`` = 1.96 x sample std (ddof=1) / sqrt(episodes); 0 for one
    episode. Episodes cut at the step cap before their measured jobs had left (``done`` 0)
    measured only part of their window: they are left out (``episodes_capped`` counts them;
    ``episodes`` counts the rest), and a group with none left gets NaN.
    """
    keys = [by] if isinstance(by, str) else list(by)
    metrics = [c for c in per_episode.columns if c not in (*keys, "episode", *NOT_METRICS)]
    rows = []
    for name, group in per_episode.groupby(keys if len(keys) > 1 else keys[0], sort=False):
        row = dict(zip(keys, name if len(keys) > 1 else (name,)))
        capped = (group["done"] < 1).to_numpy() if "done" in group else np.zeros(len(group), bool)
        group = group[~capped]
        row["episodes"] = len(group)
        row["episodes_capped"] = int(capped.sum())
        for m in metrics:
            values = group[m].to_numpy(np.float64)
            row[m] = values.mean() if len(values) else math.nan
            spread = values.std(ddof=1) if len(values) > 1 else 0.0
            row[f"{m}_ci95"] = 1.96 * spread / math.sqrt(len(values)) if len(values) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def paired_difference(a: pd.Series, b: pd.Series) -> tuple[float, float]:
    """(mean of ``a - b``, its 95% confidence half-width) over the episodes both hold (Series
    indexed alike, by episode; a pair with a NaN is left out): 1.96 x sample std / sqrt(pairs),
    the normal approximation of ``summarize``; half-width 0 for one pair."""
    diff = (a - b).dropna().to_numpy(np.float64)
    half = 1.96 * diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
    return float(diff.mean()), float(half)


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


def summary_markdown(summary: pd.DataFrame, by="scheduler") -> str:
    """``summary.md``: the headline table, then mean JCT and queueing delay by job size (s;
    n/a where an episode measured no job of that size)."""
    return (markdown_table(summary, HEADLINE, by) + "\nBy job size (mean JCT and queueing delay, s: "
            "small = 1 GPU or less, 2to8 = 2-8 GPUs, over8 = more than 8):\n\n"
            + markdown_table(summary, BY_SIZE, by))


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "n/a" if math.isnan(x) else str(x)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


# ----------------------------------------------------------------------------- per-job schedule

# A job's fate at the end of an episode (the per-job CSV's ``outcome`` column).
OUTCOMES = ("placed", "rejected", "failed", "dropped", "unfinished")
# The final-state fields ``job_outcomes`` needs (``evaluate`` copies them off the device).
RECORD_FIELDS = ("outcome", "node", "gpu_bits", "start_s", "end_s", "unschedulable",
                 "queue", "queue_len", "next_arrival", "time_s", "measure_last", "span_node",
                 "span_bits")
# With scheduling rounds, per job too: times preempted, and attained service (s, GPU-s) at the end.
ROUND_FIELDS = ("preemptions", "attained_s", "attained_gpu_s")


def num_nodes(node, span_node) -> np.ndarray:
    """[E, J] nodes each job ran on: 0 if never placed, 1 + its other parts for a gang
    (docs/semantics.md, "Gang jobs"). node [E, J]; span_node [E, J, S-1], or the [E, 1, 1]
    placeholder of -1 when jobs span no nodes."""
    node, span_node = np.asarray(node), np.asarray(span_node)
    return (node >= 0).astype(np.int64) + (span_node >= 0).sum(-1)


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


def schedule_frame(scheduler: str, jobs, records: dict, static: bool, warmup_jobs: int = 0,
                   first_episode: int = 0):
    """The complete schedule of a batch as a frame: one row per (episode, valid job).

    ``jobs``: the batch's ``Jobs`` ([E, J] arrays); ``records``: see ``job_outcomes``.
    Columns: scheduler, episode, job, arrival_s, work_s, num_gpu, gpu_milli, cpu_milli,
    mem_mib, qos_class (the job's priority class), outcome, node (-1 = never placed; a gang's
    anchor), num_nodes (0 = never placed; above 1 for a gang), gpu_bits (bit g = GPU g of the node), start_s, end_s (empty = never started; static mode: never ends; a rejected job: when
    it was rejected), measured (one of the measured jobs: ``warmup_jobs`` .. the episode's
    ``measure_last``); with rounds (``ROUND_FIELDS`` in ``records``) preemptions, attained_s
    and attained_gpu_s.
    """
    valid = np.asarray(jobs.valid, bool)
    code = job_outcomes(records, valid, static)
    eps, idx = np.nonzero(valid)
    take = lambda x: np.asarray(x)[eps, idx]  # noqa: E731
    finite = lambda x: np.where(np.isfinite(x), x, np.nan)  # noqa: E731
    rounds = {f: take(records[f]) for f in ROUND_FIELDS if f in records}
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
        "qos_class": take(jobs.qos_class),
        "outcome": np.asarray(OUTCOMES)[code[eps, idx]],
        "node": take(records["node"]),
        "num_nodes": take(num_nodes(records["node"], records["span_node"])),
        "gpu_bits": take(records["gpu_bits"]),
        "start_s": finite(take(records["start_s"])),
        "end_s": finite(take(records["end_s"])),
        "measured": (idx >= warmup_jobs) & (idx <= np.asarray(records["measure_last"])[eps]),
        **rounds,
    })


def offered_load(jobs, cluster_capacity: float, unschedulable=None) -> np.ndarray:
    """[E] offered load rho of each episode's jobs: sum of GPUs x work of the valid jobs /
    (the cluster's work capacity in speed-1.0 GPUs, ``cluster.work_capacity``, x arrival
    span); 0 when the span is 0. ``unschedulable`` ([E, J] bool): jobs no node can hold, which
    fail at arrival and offer no work (their arrivals still count in the span, as
    ``alibaba.compress_to_load`` counts them)."""
    valid = np.asarray(jobs.valid, bool)
    offered = valid if unschedulable is None else valid & ~np.asarray(unschedulable, bool)
    gpus = np.asarray(jobs.num_gpu, np.float64) * np.asarray(jobs.gpu_milli, np.float64) / GPU_MILLI
    demand = np.where(offered, gpus * np.asarray(jobs.work_s, np.float64), 0.0).sum(-1)
    arrival = np.asarray(jobs.arrival_s, np.float64)
    span = np.where(valid, arrival, -np.inf).max(-1) - np.where(valid, arrival, np.inf).min(-1)
    span = np.where(valid.any(-1), span, 0.0)
    return np.where(span > 0, demand / (cluster_capacity * np.where(span > 0, span, 1.0)), 0.0)


def max_load_per_episode(per_episode: pd.DataFrame, growth: float = SATURATION_GROWTH) -> pd.DataFrame:
    """Each episode's maximum sustainable load per scheduler, from a load sweep's per-episode
    frame: columns scheduler, episode, max_load, below_grid, above_grid.

    A load is *sustainable* in an episode when its queue stays bounded over the measurement
    window: ``backlog_work_growth < growth`` and the episode ended before the step cap. The
    episode's maximum sustainable load is the load where ``backlog_work_growth`` first crosses
    ``growth``, interpolated linearly between the last sustainable load of the grid (every
    lower one sustainable too) and the next; the lowest load when even that one is not
    sustainable (``below_grid``), the highest when every one is (``above_grid``). Episodes are
    the same jobs at every load (the sweep scales their arrival rate), so each has its own
    curve, and two schedulers' values pair by episode.
    """
    rows = []
    for name, group in per_episode.groupby("scheduler", sort=False):
        g = group.pivot_table(index="episode", columns="load", values="backlog_work_growth")
        done = group.pivot_table(index="episode", columns="load", values="done")
        loads = np.asarray(g.columns, np.float64)
        for ep in g.index:
            grow = g.loc[ep].to_numpy(np.float64)
            bad = (grow >= growth) | (done.loc[ep].to_numpy() < 1)
            rows.append({"scheduler": name, "episode": ep, "max_load": _crossing(loads, grow, bad, growth),
                         "below_grid": bool(bad[0]), "above_grid": not bad.any()})
    return pd.DataFrame(rows, columns=["scheduler", "episode", "max_load", "below_grid", "above_grid"])


def _crossing(loads, grow, bad, growth: float) -> float:
    """The load where one episode's backlog growth ``grow`` first crosses ``growth`` (``bad``:
    the loads not sustainable), interpolated; the grid's end where it never or always does."""
    if not bad.any():
        return float(loads[-1])
    i = int(np.argmax(bad))
    if i == 0:
        return float(loads[0])
    lo, hi = grow[i - 1], grow[i]
    frac = (growth - lo) / (hi - lo) if hi > lo else 0.0
    return float(loads[i - 1] + np.clip(frac, 0.0, 1.0) * (loads[i] - loads[i - 1]))


def max_sustainable_load(per_episode: pd.DataFrame, growth: float = SATURATION_GROWTH) -> pd.DataFrame:
    """Each scheduler's maximum sustainable load (``max_load_per_episode``, averaged).
    Returns one row per scheduler: episodes, max_load (mean), max_load_ci95, below_grid
    (episodes saturated at the lowest load), above_grid (episodes never saturated)."""
    rows = []
    for name, group in max_load_per_episode(per_episode, growth).groupby("scheduler", sort=False):
        values = group["max_load"].to_numpy(np.float64)
        half = 1.96 * values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else 0.0
        rows.append({"scheduler": name, "episodes": len(values), "max_load": values.mean(),
                     "max_load_ci95": half, "below_grid": int(group["below_grid"].sum()),
                     "above_grid": int(group["above_grid"].sum())})
    return pd.DataFrame(rows)


def max_load_table(max_load: pd.DataFrame) -> str:
    """Markdown table of ``max_sustainable_load``'s rows, highest load first."""
    lines = ["| scheduler | max sustainable load ρ (mean ± 95% CI) | episodes | below grid | above grid |",
             "|---|---|---:|---:|---:|"]
    for _, r in max_load.sort_values("max_load", ascending=False).iterrows():
        lines.append(f"| {r['scheduler']} | {r['max_load']:.3f} ± {r['max_load_ci95']:.3f} | "
                     f"{int(r['episodes'])} | {int(r['below_grid'])} | {int(r['above_grid'])} |")
    return "\n".join(lines) + "\n"


def never_started(jobs, records) -> dict:
    """Per episode ([E] arrays), the jobs that arrived, fit the empty cluster and never started
    by the episode's end (``records``: ``RECORD_FIELDS`` of the final states): ``never_started``
    how many, ``first_never_started`` the first one's index (-1: none) and
    ``first_never_started_gpus`` its GPUs; what the step-cap warning names."""
    valid = np.asarray(jobs.valid, bool)
    index = np.arange(valid.shape[-1])
    arrived = index[None, :] < np.asarray(records["next_arrival"])[:, None]
    waiting = valid & arrived & ~np.asarray(records["unschedulable"], bool) & ~np.isfinite(records["start_s"])
    first = np.where(waiting.any(-1), waiting.argmax(-1), -1)
    gpus = np.take_along_axis(np.asarray(jobs.num_gpu), np.maximum(first, 0)[:, None], -1)[:, 0]
    return {"never_started": waiting.sum(-1), "first_never_started": first,
            "first_never_started_gpus": np.where(first >= 0, gpus, 0)}


def warnings(per_episode: pd.DataFrame, env_config) -> list:
    """What a run must say out loud, not only in a CSV column: jobs dropped from a full queue,
    jobs that failed at arrival, episodes cut at the step cap, measured jobs that started
    after the last arrival."""
    out = []
    by = [c for c in ("scheduler", "load") if c in per_episode.columns]
    for key, g in per_episode.groupby(by, sort=False):
        where = ", ".join(f"{k} {v}" for k, v in zip(by, key if isinstance(key, tuple) else (key,)))
        dropped = int(g["dropped_overflow"].sum())
        if dropped:
            out.append(f"{where}: {dropped} jobs dropped from a full queue in "
                       f"{int((g['dropped_overflow'] > 0).sum())} of {len(g)} episodes "
                       f"(env.queue_capacity = {env_config.queue_capacity}): the queue grew past it")
        failed = int(g["failed"].sum()) if "failed" in g else 0
        if failed:
            out.append(f"{where}: {failed} jobs failed at arrival in {int((g['failed'] > 0).sum())} of {len(g)} "
                       "episodes: no node of the empty cluster (gangs: no set of env.max_span nodes) can hold "
                       "them, or their job type runs on none of its GPUs; they are left out of the JCTs")
        capped = int((g["done"] < 1).sum())
        if capped:
            out.append(f"{where}: {capped} of {len(g)} episodes hit the step cap (eval.max_steps) "
                       "before every measured job had left: they are left out of the summary"
                       + _never_started_text(g[g["done"] < 1]))
        late = int(g["started_after_arrivals"].sum()) if "started_after_arrivals" in g else 0
        if late:
            out.append(f"{where}: {late} measured jobs started after the last arrival: too few jobs "
                       "after the measured ones to keep the cluster loaded")
    return out


def _never_started_text(capped: pd.DataFrame) -> str:
    """The jobs of the capped episodes that waited and never started, named (if any)."""
    if "never_started" not in capped or not (capped["never_started"] > 0).any():
        return ""
    e = capped[capped["never_started"] > 0].iloc[0]
    return (f"; {int(capped['never_started'].sum())} jobs that fit the empty cluster arrived and never "
            f"started (first: job {int(e['first_never_started'])} of episode {int(e['episode'])}, "
            f"{int(e['first_never_started_gpus'])} GPUs): the policy never placed them (a starved job, or one "
            "only a node set the policy does not consider can hold)")
