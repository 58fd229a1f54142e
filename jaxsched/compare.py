"""Two runs compared on the same episodes: ``python -m jaxsched.compare RUN_A RUN_B``.

A run is an output folder of ``jaxsched.evaluate`` or ``jaxsched.train`` (its
``sweep_per_episode.csv`` when it has one, else ``per_episode.csv``) or such a CSV file, and
one scheduler of it (``--a-scheduler``/``--b-scheduler``; not needed when the run holds only
one). The two are paired by episode, and by load in a load sweep, after checking that they
are the same episodes (equal offered load, job counts): two schedulers of one run, or one
scheduler under two env settings (e.g. with and without rescheduling passes). Printed:
per load, each metric's mean in A and in B and the mean of A - B with its 95% confidence
interval (``report.paired_difference``). Episodes cut at the step cap (``done`` 0) in either
run are left out of the pairs, as ``report.summarize`` leaves them out.

Examples::

    python -m jaxsched.compare results/drr_128/fgd_window_loads results/drr_128/fgd_window_loads \\
        --a-scheduler fgd-window --b-scheduler fgd
    python -m jaxsched.compare results/drr_openb/fgd_resched_600s_20_fgd results/drr_openb \\
        --b-scheduler fgd --metrics frag_rate,frag_amount,gpu_alloc
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from jaxsched import report
from jaxsched.errors import DataError

METRICS = ("frag_rate", "frag_amount", "gpu_alloc", "work_alloc", "jct_mean", "queue_delay_mean",
           "queue_len_mean")
SAME_EPISODE = ("offered_load", "jobs_total", "measured_jobs")  # equal in two runs of one episode


def read_run(path, scheduler: str | None = None) -> tuple[Path, pd.DataFrame]:
    """(the CSV read, its rows of ``scheduler``): ``path`` a run folder or a per-episode CSV;
    ``scheduler`` may be None when the run holds one. A ``DataError`` naming the file if it
    is missing, has no ``scheduler``/``episode`` column, or the scheduler is not in it."""
    path = Path(path)
    if path.is_dir():
        path = next((path / n for n in ("sweep_per_episode.csv", "per_episode.csv") if (path / n).is_file()),
                    path / "per_episode.csv")
    if not path.is_file():
        raise DataError(path, None, None, "no such file (a run folder holds per_episode.csv or "
                        "sweep_per_episode.csv)")
    frame = pd.read_csv(path)
    for column in ("scheduler", "episode"):
        if column not in frame.columns:
            raise DataError(path, 1, column, "missing column: not a per-episode file of a run")
    names = list(dict.fromkeys(frame["scheduler"]))
    if scheduler is None:
        if len(names) != 1:
            raise DataError(path, None, "scheduler", f"the run holds {len(names)} schedulers ({', '.join(names)}): "
                            "say which (--a-scheduler / --b-scheduler)")
        scheduler = names[0]
    if scheduler not in names:
        raise DataError(path, None, "scheduler", f"no scheduler {scheduler!r} in it; it holds {', '.join(names)}")
    return path, frame[frame["scheduler"] == scheduler].reset_index(drop=True)


def pair(a: pd.DataFrame, b: pd.DataFrame, metrics=METRICS, path_a="A", path_b="B") -> pd.DataFrame:
    """A - B on the same episodes: one row per load (when both are load sweeps) and metric,
    with columns [load,] metric, pairs, a_mean, b_mean, diff_mean, diff_ci95_lo,
    diff_ci95_hi. A ``DataError`` (naming the file, episode and field) if the two are not the
    same episodes or a metric is missing."""
    if ("load" in a.columns) != ("load" in b.columns):  # a sweep at one load pairs with a plain run
        path, sweep = (path_a, a) if "load" in a.columns else (path_b, b)
        if sweep["load"].nunique() != 1:
            raise DataError(path, None, "load", f"a load sweep over {sweep['load'].nunique()} loads paired "
                            "with a run at one load: compare one load of it (a sweep at that load alone)")
        a, b = a.drop(columns="load", errors="ignore"), b.drop(columns="load", errors="ignore")
    keys = ["load", "episode"] if "load" in a.columns else ["episode"]
    for path, frame in ((path_a, a), (path_b, b)):
        missing = [m for m in metrics if m not in frame.columns]
        if missing:
            raise DataError(path, 1, missing[0], "no such metric column")
        if frame.duplicated(keys).any():
            raise DataError(path, None, "episode", f"an episode appears twice (keys {', '.join(keys)})")
    a, b = a.set_index(keys), b.set_index(keys)
    if set(a.index) != set(b.index):
        only = sorted(set(a.index) ^ set(b.index))
        raise DataError(path_b, None, "episode", f"{len(only)} episodes are in only one of {path_a} and "
                        f"{path_b} (first: {only[0]}): not the same episodes")
    b = b.loc[a.index]
    for field in SAME_EPISODE:
        if field in a.columns and field in b.columns:
            differs = a[field].to_numpy() != b[field].to_numpy()
            if differs.any():
                i = int(differs.argmax())
                raise DataError(path_b, None, field, f"episode {a.index[i]} has {b[field].iloc[i]} here "
                                f"and {a[field].iloc[i]} in {path_a}: not the same episodes")
    if "done" in a.columns and "done" in b.columns:
        both_done = (a["done"] >= 1).to_numpy() & (b["done"] >= 1).to_numpy()
        a, b = a[both_done], b[both_done]
    rows = []
    groups = a.groupby(level="load", sort=True) if "load" in keys else [(None, a)]
    for load, group_a in groups:
        group_b = b.loc[group_a.index]
        for metric in metrics:
            mean, half = report.paired_difference(group_a[metric], group_b[metric])
            rows.append({**({"load": load} if load is not None else {}), "metric": metric,
                         "pairs": len(group_a), "a_mean": group_a[metric].mean(), "b_mean": group_b[metric].mean(),
                         "diff_mean": mean, "diff_ci95_lo": mean - half, "diff_ci95_hi": mean + half})
    return pd.DataFrame(rows)


def markdown(paired: pd.DataFrame, name_a: str, name_b: str) -> str:
    """One Markdown table per load: metric, A's mean, B's mean, A - B and its 95% CI."""
    tables = []
    groups = paired.groupby("load", sort=False) if "load" in paired.columns else [(None, paired)]
    for load, group in groups:
        head = f"load {load:g}, " if load is not None else ""
        lines = [f"{head}{int(group['pairs'].iloc[0])} paired episodes, A = {name_a}, B = {name_b}:", "",
                 "| metric | A | B | A − B | 95% CI |", "|---|---:|---:|---:|---|"]
        for _, r in group.iterrows():
            f = "{:,.1f}" if max(abs(r.a_mean), abs(r.b_mean)) >= 10 else "{:.4f}"
            d = "{:+,.1f}" if max(abs(r.a_mean), abs(r.b_mean)) >= 10 else "{:+.4f}"
            lines.append(f"| {r.metric} | {f.format(r.a_mean)} | {f.format(r.b_mean)} | {d.format(r.diff_mean)} | "
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
        path_a, a = read_run(args.a, args.a_scheduler)
        path_b, b = read_run(args.b, args.b_scheduler)
        paired = pair(a, b, [m for m in args.metrics.split(",") if m], path_a, path_b)
    except DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    name_a, name_b = f"{a['scheduler'].iloc[0]} of {path_a}", f"{b['scheduler'].iloc[0]} of {path_b}"
    print(markdown(paired, name_a, name_b), end="")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        paired.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
