"""Two runs compared on the same episodes: ``python -m jaxsched.compare RUN_A RUN_B``.

A run is an output folder of ``jaxsched.evaluate`` or ``jaxsched.train`` (its
``sweep_per_episode.csv`` when it has one, else ``per_episode.csv``) or such a CSV file, and
one scheduler of it (``--a-scheduler``/``--b-scheduler``; not needed when the run holds only
one). The two are paired by episode, and by load in a load sweep, after checking that they
are the same episodes (equal offered load, job counts): two schedulers of one run, or one
scheduler under two env settings (e.g. with and without rescheduling passes). Printed:
per load, each metric's mean in A and in B and the mean of A - B with its 95% confidence
interval (``report.paired_difference``). Episodes cut at the step cap (``done`` 0) in either
run are left out of the pairs, as ``report.summarize`` leaves them out. A metric that is NaN or
infinite in an episode of A or B is paired on the episodes where it is finite in both (A's mean,
B's mean and A - B over the same pairs), and a warning names it and how many were left out.

Bad input (a file that is not a run's per-episode CSV, a scheduler not in it, runs of other
episodes, a ``--metrics`` that names no metric or a column that is not one, an ``--out`` that
cannot be written or is one of the two runs' CSVs) is a one-line error naming the file, line
and field or the option, exit code 2, before anything is written.

Examples::

    python -m jaxsched.compare results/drr_128/fgd_window_loads results/drr_128/fgd_window_loads \\
        --a-scheduler fgd-window --b-scheduler fgd
    python -m jaxsched.compare results/drr_openb/fgd_resched_600s_20_fgd results/drr_openb \\
        --b-scheduler fgd --metrics frag_rate,frag_amount,gpu_alloc
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from jaxsched import outputs, report
from jaxsched.errors import DataError
from jaxsched.textfile import read_text

METRICS = ("frag_rate", "frag_amount", "gpu_alloc", "work_alloc", "jct_mean", "queue_delay_mean",
           "queue_len_mean")
SAME_EPISODE = ("offered_load", "jobs_total", "measured_jobs")  # equal in two runs of one episode
KEYS = ("scheduler", "load", "episode")  # what names a row, never a metric


def read_run(path, scheduler: str | None = None) -> tuple[Path, pd.DataFrame]:
    """(the CSV read, its rows of ``scheduler``): ``path`` a run folder or a per-episode CSV;
    ``scheduler`` may be None when the run holds one. A ``DataError`` naming the file (and the
    line and field) if it is missing, not UTF-8 CSV text, has no episodes or no
    ``scheduler``/``episode`` column, has an empty scheduler cell, an episode that is not an
    integer, a ``load``/``done`` that is not a number, or the scheduler is not in it."""
    path = Path(path)
    if path.is_dir():
        path = next((path / n for n in ("sweep_per_episode.csv", "per_episode.csv") if (path / n).is_file()),
                    path / "per_episode.csv")
    if not path.exists():
        raise DataError(path, None, None, "no such file (a run folder holds per_episode.csv or "
                        "sweep_per_episode.csv)")
    frame = read_csv(path)
    for column in ("scheduler", "episode"):
        if column not in frame.columns:
            raise DataError(path, 1, column, "missing column: not a per-episode file of a run")
    if frame.empty:
        raise DataError(path, None, None, "no episodes in it (a header only)")
    empty = frame["scheduler"].isna().to_numpy()
    if empty.any():
        raise DataError(path, int(empty.argmax()) + 2, "scheduler", "empty: every row names its scheduler")
    _check_numbers(path, frame, "episode", integer=True)
    for column in ("load", "done"):
        if column in frame.columns:
            _check_numbers(path, frame, column, integer=False)
    frame["scheduler"] = frame["scheduler"].astype(str)  # a scheduler named 1 is '1' on the command line
    names = list(dict.fromkeys(frame["scheduler"]))
    if scheduler is None:
        if len(names) != 1:
            raise DataError(path, None, "scheduler", f"the run holds {len(names)} schedulers ({', '.join(names)}): "
                            "say which (--a-scheduler / --b-scheduler)")
        scheduler = names[0]
    if scheduler not in names:
        raise DataError(path, None, "scheduler", f"no scheduler {scheduler!r} in it; it holds {', '.join(names)}")
    return path, frame[frame["scheduler"] == scheduler].reset_index(drop=True)


def read_csv(path: Path) -> pd.DataFrame:
    """The CSV table at ``path``, read as UTF-8 text (``textfile.read_text``); a ``DataError``
    naming the file (and the line) if it is not that, is empty or its rows are ragged."""
    text = read_text(path)
    if not text.strip():
        raise DataError(path, None, None, "empty file: not a per-episode file of a run")
    rows = list(csv.reader(io.StringIO(text)))
    short = next((i for i, row in enumerate(rows[1:], start=2) if row and len(row) < len(rows[0])), None)
    if short is not None:  # pandas would fill the missing fields with NaN
        raise DataError(path, short, None, f"cut short: {len(rows[short - 1])} of the header's {len(rows[0])} "
                        "fields (a file truncated mid-row?)")
    try:
        return pd.read_csv(io.StringIO(text))
    except ValueError as err:  # pandas.errors.ParserError and EmptyDataError are ValueErrors
        problem = str(err).strip().splitlines()[-1]
        line = re.search(r"line (\d+)", problem)
        raise DataError(path, int(line.group(1)) if line else None, None, f"not a CSV table ({problem})") from None


def _check_numbers(path: Path, frame: pd.DataFrame, column: str, integer: bool) -> None:
    """A ``DataError`` naming the line of the first cell of ``column`` that is empty or not a
    number (not an integer if ``integer``); the header is line 1."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)
    bad = np.isnan(values)
    if integer:
        bad |= ~np.isfinite(values) | (np.nan_to_num(values) % 1 != 0)
    if bad.any():
        i = int(bad.argmax())
        cell = frame[column].iloc[i]
        raise DataError(path, i + 2, column, "empty" if pd.isna(cell) else
                        f"{cell!r} is not {'an integer' if integer else 'a number'}")


def pair(a: pd.DataFrame, b: pd.DataFrame, metrics=METRICS, path_a="A", path_b="B") -> pd.DataFrame:
    """A - B on the same episodes: one row per load (when both are load sweeps) and metric,
    with columns [load,] metric, episodes (finished in both runs), pairs (those of them where
    the metric is finite in both: the means and the difference are over these), left_out
    (episodes - pairs), a_mean, b_mean, diff_mean, diff_ci95_lo, diff_ci95_hi. A
    ``DataError`` (naming the file, episode and field) if the two are not the same episodes,
    or a metric is missing, a key column or not a number."""
    metrics = list(dict.fromkeys(metrics))
    if not metrics:
        raise DataError("--metrics", None, None, "no metric named")
    if ("load" in a.columns) != ("load" in b.columns):  # a sweep at one load pairs with a plain run
        path, sweep = (path_a, a) if "load" in a.columns else (path_b, b)
        if sweep["load"].nunique() != 1:
            raise DataError(path, None, "load", f"a load sweep over {sweep['load'].nunique()} loads paired "
                            "with a run at one load: compare one load of it (a sweep at that load alone)")
        a, b = a.drop(columns="load", errors="ignore"), b.drop(columns="load", errors="ignore")
    keys = ["load", "episode"] if "load" in a.columns else ["episode"]
    for path, frame in ((path_a, a), (path_b, b)):
        check_metrics(path, frame, metrics)
        if frame.duplicated(keys).any():
            raise DataError(path, None, "episode", f"an episode appears twice (keys {', '.join(keys)})")
    a, b = a.set_index(keys), b.set_index(keys)
    if set(a.index) != set(b.index):
        only = sorted(set(a.index) ^ set(b.index))
        raise DataError(path_b, None, "episode", f"{len(only)} episodes are in only one of {path_a} ({len(a)} "
                        f"episodes) and {path_b} ({len(b)}) (first: {only[0]}): not the same episodes")
    b = b.loc[a.index]
    if not any(field in a.columns and field in b.columns for field in SAME_EPISODE):
        lacking = path_a if not any(f in a.columns for f in SAME_EPISODE) else path_b
        raise DataError(lacking, 1, None, f"none of the columns {', '.join(SAME_EPISODE)} that show two runs "
                        "played the same episodes (evaluate's per_episode.csv has them): cannot pair its episodes")
    for field in SAME_EPISODE:
        if field in a.columns and field in b.columns:
            x, y = a[field].to_numpy(), b[field].to_numpy()
            differs = (x != y) & ~(pd.isna(x) & pd.isna(y))
            if differs.any():
                i = int(differs.argmax())
                raise DataError(path_b, None, field, f"episode {a.index[i]} has {y[i]} here "
                                f"and {x[i]} in {path_a}: not the same episodes")
    done = np.ones(len(a), bool)
    if "done" in a.columns and "done" in b.columns:
        done = (a["done"] >= 1).to_numpy() & (b["done"] >= 1).to_numpy()
    loads = a.index.get_level_values("load").to_numpy() if "load" in keys else None
    rows = []
    for load in (sorted(set(loads)) if loads is not None else [None]):
        here = done & (loads == load) if loads is not None else done
        for metric in metrics:
            x, y = (pd.to_numeric(f[metric]).to_numpy(np.float64) for f in (a, b))
            use = here & np.isfinite(x) & np.isfinite(y)
            mean, half = report.paired_difference(pd.Series(x[use]), pd.Series(y[use])) if use.any() else (np.nan,) * 2
            rows.append({**({"load": load} if load is not None else {}), "metric": metric,
                         "episodes": int(here.sum()), "pairs": int(use.sum()), "left_out": int(here.sum() - use.sum()),
                         "a_mean": x[use].mean() if use.any() else np.nan,
                         "b_mean": y[use].mean() if use.any() else np.nan,
                         "diff_mean": mean, "diff_ci95_lo": mean - half, "diff_ci95_hi": mean + half})
    return pd.DataFrame(rows)


def check_metrics(path, frame: pd.DataFrame, metrics) -> None:
    """A ``DataError`` naming the file and the metric if a metric is a key column, is not a
    column of ``frame`` (the message lists its numeric columns) or holds a value that is not a
    number (the message names the episode)."""
    for metric in metrics:
        if metric in KEYS:
            raise DataError(path, 1, metric, "a key column, not a metric")
        if metric not in frame.columns:
            numeric = [c for c in frame.columns if c not in KEYS and pd.api.types.is_numeric_dtype(frame[c])]
            raise DataError(path, 1, metric, "no such metric column; " + (
                f"its metrics are: {', '.join(numeric)}" if numeric else
                "it has no metric columns: not a per-episode file of a run"))
        bad = (pd.to_numeric(frame[metric], errors="coerce").isna() & frame[metric].notna()).to_numpy()
        if bad.any():
            i = int(bad.argmax())
            raise DataError(path, None, metric, f"not a number ({frame[metric].iloc[i]!r}, "
                            f"episode {frame['episode'].iloc[i]})")


def warnings(paired: pd.DataFrame) -> list:
    """One line per (load and) metric that left finished episodes out of its pairs for a NaN
    or an infinity in A or B, and per load where no episode finished in both runs."""
    lines = []
    for _, r in paired.iterrows():
        at = f" at load {r['load']:g}" if "load" in paired.columns else ""
        if r["episodes"] == 0:
            lines.append(f"{r['metric']}{at}: no episode finished (done 1) in both runs: nothing paired")
        elif r["left_out"]:
            lines.append(f"{r['metric']}{at}: {r['left_out']} of {r['episodes']} episodes left out "
                         "(NaN or infinite in A or B)")
    return lines


def markdown(paired: pd.DataFrame, name_a: str, name_b: str) -> str:
    """One Markdown table per load: metric, A's mean, B's mean, A - B and its 95% CI."""
    tables = []
    groups = paired.groupby("load", sort=False) if "load" in paired.columns else [(None, paired)]
    for load, group in groups:
        head = f"load {load:g}, " if load is not None else ""
        lines = [f"{head}{int(group['episodes'].iloc[0])} paired episodes, A = {name_a}, B = {name_b}:", "",
                 "| metric | A | B | A − B | 95% CI |", "|---|---:|---:|---:|---|"]
        for _, r in group.iterrows():
            f = "{:,.1f}" if max(abs(r.a_mean), abs(r.b_mean)) >= 10 else "{:.4f}"
            d = "{:+,.1f}" if max(abs(r.a_mean), abs(r.b_mean)) >= 10 else "{:+.4f}"
            name = r.metric if r.pairs == r.episodes else f"{r.metric} ({r.pairs} pairs)"
            lines.append(f"| {name} | {f.format(r.a_mean)} | {f.format(r.b_mean)} | {d.format(r.diff_mean)} | "
                         f"[{d.format(r.diff_ci95_lo)}, {d.format(r.diff_ci95_hi)}] |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables) + "\n"


def main(argv=None, prog: str = "python -m jaxsched.compare") -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="run A: a run folder or its per-episode CSV")
    parser.add_argument("b", help="run B: the same episodes")
    parser.add_argument("--a-scheduler", help="A's scheduler (needed when the run holds several)")
    parser.add_argument("--b-scheduler", help="B's scheduler (needed when the run holds several)")
    parser.add_argument("--metrics", default=",".join(METRICS), help="comma-separated metric columns")
    parser.add_argument("--out", help="also write the pairs as a CSV here")
    args = parser.parse_args(argv)
    try:
        if args.out is not None:
            outputs.check_out_file(args.out, "--out")  # before the work, not after it
        metrics = list(dict.fromkeys(m.strip() for m in args.metrics.split(",") if m.strip()))
        if not metrics:
            raise DataError("--metrics", None, None, f"no metric named in {args.metrics!r}: give metric "
                            f"columns separated by commas, e.g. {METRICS[0]},{METRICS[1]}")
        path_a, a = read_run(args.a, args.a_scheduler)
        path_b, b = read_run(args.b, args.b_scheduler)
        for run, path in (("A", path_a), ("B", path_b)):
            if args.out is not None and Path(args.out).resolve() == path.resolve():
                raise DataError("--out", None, None, f"{args.out} is run {run}'s CSV: name another file")
        paired = pair(a, b, metrics, path_a, path_b)
    except DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    name_a, name_b = f"{a['scheduler'].iloc[0]} of {path_a}", f"{b['scheduler'].iloc[0]} of {path_b}"
    print(markdown(paired, name_a, name_b), end="")
    for line in warnings(paired):
        print(f"WARNING: {line}", file=sys.stderr)
    if args.out is not None:
        outputs.write_atomically(Path(args.out), paired.to_csv(index=False))
        print(f"wrote {args.out}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
