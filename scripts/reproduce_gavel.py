"""Reproduce Gavel's continuous experiments (Narayanan et al., OSDI '20, Figure 8): mean JCT
of jobs 4000-4999 of one Poisson stream against the arrival rate, on Gavel's cluster of 36 V100
+ 36 P100 + 36 K80 one-GPU servers (configs/gavel.toml), for ``gavel-fifo`` (Gavel's FIFO as
its code runs: a GPU type per job, its jobs time-sharing it) and ``las`` (rounds of 360 s,
preemptive, no restart cost, as Gavel's simulator charges none); on request ``fifo``
(event-driven, non-preemptive, strict arrival order, a type drawn uniformly) and ``las-perf``,
Gavel's heterogeneity-aware LAS (the same rounds; a linear program per round and episode,
solved on the host, its episodes on one device). Gavel's printed curves (``GAVEL_PRINTED``)
are drawn beside them and compared in ``vs_gavel.csv``.

Gavel's simulator's rules (``--rules gavel``, the default, as configs/gavel.toml has them): a
job of s GPUs runs at its throughput on one server of s GPUs although Gavel's servers hold one
GPU each (``workload.gavel.gang_speed = "consolidated"``), and on one GPU type
(``env.gang_one_model``), and its rounds end when their last running job does
(``env.round_ends_early``). ``--rules physical``: at Gavel's measured spread-over-servers
throughput, a gang free to mix GPU types (then at its slowest GPU's speed), rounds every
360 s. Single-GPU jobs under ``fifo`` run the same under both. Under Gavel's rules ``las``,
Gavel's heterogeneity-agnostic LAS, runs each job at its mean speed over the GPU types
(``workload.gavel.agnostic_speed``): Gavel's round shuffles the order of the GPU types every
round, so a job's type is drawn afresh each round; under the physical rules ``las`` places
first-fit, the V100s first. ``gavel-fifo`` and ``las`` allocate at Gavel's resets
(``env.round_reset_s`` = 1,920 s).

Each point (rules, generator, workload, scheduler, rate) runs ``--seeds`` streams as one vmapped
batch through ``evaluate.run_scheduler`` (the rollout of every scheduler): episode i is Gavel's
own stream of seed i (``--generator gavel``, the default: ``gavel.generate_as_gavel``, draw for
draw what Gavel's simulator draws, so seed 0 holds the very jobs of its printed run), or stream
i of jaxsched's JAX generator at ``eval.seed`` 0 (``--generator jaxsched``: the same laws, other
draws), with ``warmup_jobs`` 4000 and ``measured_jobs`` 1000, so the episode ends when jobs
4000-4999 have all left and its ``jct_mean`` is their mean JCT. ``--extra-jobs`` more jobs
keep arriving after them; a seed whose last measured job ends after the last arrival *ran out*
(the cluster was no longer loaded as in Gavel, which generates jobs until the measured ones
finish): the point is reported and flagged (``ran_out`` seeds, and per seed how many measured
jobs ended after the last arrival), never silently kept. Under ``fifo`` (strict order, no
backfilling) jobs behind the measured ones cannot delay their start, so running out
matters to ``las`` only.

Writes, under ``--out`` (results/gavel):
  table.csv     rules, generator, workload, scheduler, rate_per_h, jct_mean_h (mean over seeds), jct_ci_h (95%
                half-width, normal approximation as ``report.summarize``), seeds, p5_h, p95_h (5th and 95th percentile of the
                per-seed values), ran_out (seeds), wall_s (the point's run time)
  per_seed.csv  one row per seed (rules, generator, workload, scheduler, rate_per_h, seed): jct_h, measured_finished, done, ended_after_arrivals (measured
                jobs that ended after the last arrival), ran_out (one did), dropped
  jct_vs_rate.png  JCT against rate, one panel per workload (Figure 8), with Gavel's
                printed curves (seed 0) as stars; the physical rules' rows dotted
  vs_gavel.csv  every printed point jaxsched has run under Gavel's rules: workload, scheduler,
                rate_per_h, gavel_h (printed), and from the point's run of the most seeds
                generator, seeds, jct_mean_h, diff (jaxsched over Gavel, - 1), p5_h, p95_h,
                within_10pct, printed_in_p5_p95; where it ran on Gavel's streams seed0_h
                (jaxsched on the printed run's own jobs), seed0_diff, seed0_within_10pct
  printed_run.png  seed0_h at every printed point beside Gavel's printed curves (log JCT axis)

Resumable: a point already in table.csv is skipped. Examples::

    nice -n 10 python scripts/reproduce_gavel.py                       # every point
    python scripts/reproduce_gavel.py --workload single --schedulers fifo --rates 4.0
    python scripts/reproduce_gavel.py --quick                          # 2 seeds, 2 rates, short streams
    python scripts/reproduce_gavel.py --schedulers las-perf --seeds 2  # seed 0 (the printed run's jobs) cheaply
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from jaxsched import config as cfg_lib
from jaxsched import evaluate, experiment, report
from jaxsched.devices import configure_cpu

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "gavel.toml"
SCHEDULERS = ("gavel-fifo", "las")  # the default sweep; fifo (strict), las-perf (Gavel-LAS), fifo-perf on request
COLOURS = {"gavel-fifo": "tab:blue", "fifo": "tab:purple", "las": "tab:orange", "las-perf": "tab:green",
           "fifo-perf": "tab:red"}
WORKLOADS = ("single", "multi")
# Gavel's sweep ranges (Figure 8's x axes), jobs per hour.
RATES = {"single": tuple(np.round(np.arange(0.4, 6.01, 0.4), 2)),
         "multi": tuple(np.round(np.arange(0.2, 2.81, 0.2), 2))}
WARMUP_JOBS, MEASURED_JOBS = 4000, 1000  # Gavel's measurement window: jobs 4000-4999
ROUND_S = 360.0                          # Gavel's time_per_iteration
# Gavel's printed mean JCT (hours) of jobs 4000-4999, seed 0, from its notebooks
# (scheduler/notebooks/figures/evaluation/continuous_jobs.ipynb and
# continuous_jobs_multigpu.ipynb, Gavel's code of 2020, commit 2d8e076), for the policies
# jaxsched has: FIFO (fifo, base mode: jaxsched's gavel-fifo), LAS (max_min_fairness),
# Gavel-LAS (max_min_fairness_perf, jaxsched's las-perf) and Gavel-FIFO (fifo_perf, jaxsched's fifo-perf). {(workload, scheduler): {rate: hours}}; a missing rate was not printed.
GAVEL_PRINTED = {
    ("single", "gavel-fifo"): {0.4: 17.58, 2.0: 18.32, 3.2: 22.21, 4.0: 25.38, 4.4: 44.28, 4.8: 99.19, 5.2: 151.67},
    ("single", "las"): {0.4: 23.26, 2.0: 23.47, 3.2: 23.59, 4.0: 23.49, 4.4: 23.81, 4.8: 35.79, 5.2: 63.78,
                        5.6: 95.99},
    ("single", "las-perf"): {0.4: 17.58, 2.0: 16.95, 3.2: 16.08, 4.0: 16.82, 4.4: 17.48, 4.8: 18.97,
                             5.2: 22.02, 5.6: 28.96, 6.0: 41.23},
    ("single", "fifo-perf"): {0.4: 15.31, 2.0: 15.45, 3.2: 15.95, 4.0: 17.08, 4.4: 18.19, 4.8: 22.24,
                              5.2: 56.69, 5.6: 104.12, 6.0: 150.04},
    ("multi", "gavel-fifo"): {0.2: 18.56, 1.0: 19.92, 1.6: 30.82, 2.0: 37.56, 2.4: 129.27, 2.6: 304.76, 2.8: 414.68},
    ("multi", "las"): {0.2: 25.93, 1.0: 26.10, 1.6: 26.51, 2.0: 28.91, 2.4: 38.71, 2.6: 70.54, 2.8: 169.93},
    ("multi", "las-perf"): {0.2: 18.55, 1.0: 18.54, 1.6: 19.12, 2.0: 21.90, 2.4: 30.03, 2.6: 36.44, 2.8: 55.78},
    ("multi", "fifo-perf"): {0.2: 16.91, 1.0: 17.34, 1.6: 20.02, 2.0: 27.68, 2.4: 43.94, 2.6: 93.60, 2.8: 204.44},
}
GAVEL_COMMIT = "2d8e076"
GAVEL_NAMES = {"gavel-fifo": "FIFO", "las": "LAS", "las-perf": "Gavel-LAS", "fifo-perf": "Gavel-FIFO"}  # its figures' labels
Y_MAX_H = 150.0  # the plot's JCT axis, as Figure 8 cuts it off near saturation
PLOTTED_SEEDS = 8  # the fewest seeds of a mean drawn in jct_vs_rate.png
# The gang rules: Gavel's simulator's (configs/gavel.toml) or the physical variant.
RULES = {"gavel": (), "physical": ('workload.gavel.gang_speed="spread"', "env.gang_one_model=false",
                                   "env.round_ends_early=false", "env.round_model_order=[]")}
# Under Gavel's rules, its heterogeneity-agnostic policies: the round shuffles the GPU types'
# order every round, so a job's time spreads over the types (workload.gavel.agnostic_speed).
AGNOSTIC = ("las",)
# Gavel's allocation resets (its minimum_time_between_allocation_resets, seconds), for the
# policies that read them (las-perf then solves its LP at resets only).
RESET_S = 1920.0
WITH_RESETS = ("gavel-fifo", "las", "las-perf", "fifo-perf")
GENERATORS = ("gavel", "jaxsched")  # workload.gavel.generator
# The plot's lines: (rules, generator) -> (line style, alpha, label suffix).
LINES = {("gavel", "gavel"): ("-", 1.0, ""), ("gavel", "jaxsched"): ("--", 0.6, " (jaxsched's streams)"),
         ("physical", "gavel"): (":", 0.5, " (physical)"), ("physical", "jaxsched"): (":", 0.5, " (physical)")}
TABLE_COLUMNS = ["rules", "generator", "workload", "scheduler", "rate_per_h", "jct_mean_h", "jct_ci_h", "seeds",
                 "p5_h", "p95_h", "ran_out", "wall_s"]


def point_config(workload: str, scheduler: str, rate: float, seeds: int, extra_jobs: int,
                 warmup_jobs: int = WARMUP_JOBS, measured_jobs: int = MEASURED_JOBS,
                 rules: str = "gavel", seed: int = 0, generator: str = "gavel") -> cfg_lib.Config:
    """configs/gavel.toml under ``rules`` (``RULES``) at ``rate`` jobs/h, single- or multi-GPU
    jobs, Gavel's measurement window, ``seeds`` episodes in one batch (drawn by ``generator``:
    "gavel", Gavel's own streams of seeds ``seed``, ``seed`` + 1, ...; "jaxsched", the first
    streams of ``eval.seed`` = ``seed``), rounds of ``ROUND_S`` with no restart cost (read by round policies
    only); under Gavel's rules ``las`` at the types' mean speed (``AGNOSTIC``), and
    ``gavel-fifo`` and ``las`` with Gavel's allocation resets (``RESET_S``). The running set holds one job more than the cluster has GPUs:
    every Gavel job takes at least one whole GPU, so the set is never full (a full set would
    skip a queued job's turn at a round, though it could preempt) and stays small (its ring is
    sorted every round); the queue holds every job. The step cap counts rounds for ``las``: the stream's span in
    rounds at the workload's lowest rate (or ``rate``, if lower), twice over, or 3 decisions
    per job, whichever is larger; one cap for every rate of the sweep, so each scheduler
    compiles once (the cap only bounds the loop)."""
    num_jobs = warmup_jobs + measured_jobs + extra_jobs
    span_rounds = num_jobs / min(rate, *RATES[workload]) * 3600.0 / ROUND_S
    gpus = sum(count * per_node for _, count, per_node in cfg_lib.load(CONFIG).cluster.node_groups)
    agnostic = ("workload.gavel.agnostic_speed=true",) if rules == "gavel" and scheduler in AGNOSTIC else ()
    resets = (f"env.round_reset_s={RESET_S}",) if rules == "gavel" and scheduler in WITH_RESETS else ()
    return cfg_lib.load(CONFIG, [
        *RULES[rules], *agnostic, *resets, f"workload.gavel.jobs_per_hour={rate}", f"workload.gavel.num_jobs={num_jobs}",
        f'workload.gavel.generator="{generator}"',
        f"workload.gavel.multi_gpu={'true' if workload == 'multi' else 'false'}",
        f"env.warmup_jobs={warmup_jobs}", f"env.measured_jobs={measured_jobs}",
        f"env.queue_capacity={num_jobs}", f"env.running_capacity={gpus + 1}",
        f"env.round_s={ROUND_S}", "env.restart_overhead_s=[0.0]",
        f"eval.episodes={seeds}", f"eval.batch_size={seeds}", f"eval.seed={seed}",
        f"eval.schedulers=[\"{scheduler}\"]", f"eval.max_steps={int(max(2 * span_rounds, 3 * num_jobs + 100))}",
    ])


def run_point(workload: str, scheduler: str, rate: float, seeds: int, extra_jobs: int,
              rules: str = "gavel", generator: str = "gavel", **window) -> tuple[pd.DataFrame, list]:
    """One point: (per-seed frame, the run's warnings). jct_h is NaN for a seed that did not
    finish every measured job (step cap)."""
    config = point_config(workload, scheduler, rate, seeds, extra_jobs, rules=rules, generator=generator, **window)
    nodes = experiment.build_nodes(config)
    ep = experiment.episodes(config, nodes)
    frame, records = evaluate.run_scheduler(scheduler, config, ep.params, ep.jobs, ep.env_keys, ep.max_steps)
    arrival = np.asarray(ep.jobs.arrival_s)                       # [E, J]
    last_arrival = np.where(np.isfinite(arrival), arrival, -np.inf).max(axis=1)
    lo = config.env.warmup_jobs
    end = np.asarray(records["end_s"])[:, lo:lo + config.env.measured_jobs]
    complete = (frame["done"].to_numpy() == 1) & (frame["measured_finished"].to_numpy() == end.shape[1])
    out = pd.DataFrame({
        "rules": rules, "generator": generator, "workload": workload, "scheduler": scheduler, "rate_per_h": rate,
        "seed": np.arange(seeds),
        "jct_h": np.where(complete, frame["jct_mean"].to_numpy() / 3600.0, np.nan),
        "measured_finished": frame["measured_finished"].to_numpy(), "done": frame["done"].to_numpy(),
        "ended_after_arrivals": (end > last_arrival[:, None]).sum(axis=1),
        "ran_out": end.max(axis=1) > last_arrival, "dropped": frame["dropped_overflow"].to_numpy(),
    })
    return out, report.warnings(frame, config.env)


def summarize(per_seed: pd.DataFrame, wall_s: float) -> dict:
    """One table row from a point's per-seed frame: mean and 95% half-width as
    ``report.summarize`` gives them (normal approximation; seeds cut at the step cap left out)."""
    key = ["rules", "generator", "workload", "scheduler", "rate_per_h"]
    stats = report.summarize(per_seed[[*key, "jct_h", "done"]], by=key).iloc[0]
    ok = per_seed["jct_h"].dropna().to_numpy()
    return {**{k: stats[k] for k in key}, "jct_mean_h": stats["jct_h"], "jct_ci_h": stats["jct_h_ci95"],
            "seeds": len(ok), "p5_h": np.percentile(ok, 5) if len(ok) else np.nan,
            "p95_h": np.percentile(ok, 95) if len(ok) else np.nan,
            "ran_out": int(per_seed["ran_out"].sum()), "wall_s": round(wall_s, 1)}


def plot(table: pd.DataFrame, path: Path) -> None:
    """Figure 8: mean JCT (h) against the arrival rate, a panel per workload, 95% CI bars, the
    JCT axis cut at ``Y_MAX_H``; the points of fewer than ``PLOTTED_SEEDS`` seeds (run for
    seed 0: ``plot_printed_run``) left out."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, workload in zip(axes, WORKLOADS):
        for sched, colour in COLOURS.items():
            for (rules, generator), (style, alpha, note) in LINES.items():
                rows = table[(table.rules == rules) & (table.generator == generator) & (table.workload == workload)
                             & (table.scheduler == sched) & (table.seeds >= PLOTTED_SEEDS)].sort_values("rate_per_h")
                if len(rows):
                    ax.errorbar(rows.rate_per_h, rows.jct_mean_h, yerr=rows.jct_ci_h, marker="o", ms=3,
                                capsize=2, color=colour, ls=style, alpha=alpha, label=f"jaxsched {sched}{note}")
            printed = GAVEL_PRINTED.get((workload, sched), {})
            if printed:
                ax.plot(list(printed), list(printed.values()), "*--", ms=10, lw=0.8, color=colour,
                        markeredgecolor="k", label=f"Gavel's {GAVEL_NAMES[sched]} (printed, {GAVEL_COMMIT})")
        ax.set_title(f"continuous-{workload}")
        ax.set_xlabel("input job rate (jobs/hour)")
        ax.set_ylabel("average JCT (hours)")
        ax.set_ylim(0, Y_MAX_H)  # past saturation the JCT runs to thousands of hours (table.csv)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare_printed(table: pd.DataFrame, per_seed: pd.DataFrame) -> pd.DataFrame:
    """Every printed point of ``GAVEL_PRINTED`` that ``table`` has under Gavel's rules, beside
    jaxsched's mean and its seeds' 5th-95th percentiles (from the point's run of the most seeds,
    Gavel's own streams first on ties), and then, where the point ran on Gavel's streams,
    jaxsched's JCT on seed 0's stream: the very jobs of the printed run (``seed0_h``; NaN if it
    ran on jaxsched's streams only). A run of a few seeds (``--seeds 2``) gives seed 0 cheaply."""
    rows = []
    for (workload, sched), printed in GAVEL_PRINTED.items():
        for rate, gavel_h in printed.items():
            def point(frame):
                return frame[(frame.rules == "gavel") & (frame.workload == workload) & (frame.scheduler == sched)
                             & (frame.rate_per_h.astype(float).round(2) == rate)]
            ours = point(table)
            if not len(ours):
                continue
            ours = ours.assign(gavels=ours.generator == "gavel")
            row = ours.sort_values(["seeds", "gavels"], ascending=False).iloc[0]
            seed0 = point(per_seed)
            seed0 = seed0[(seed0.generator == "gavel") & (seed0.seed == 0)]
            seed0_h = float(seed0.jct_h.iloc[-1]) if len(seed0) else np.nan
            rows.append({"workload": workload, "scheduler": sched, "rate_per_h": rate, "gavel_h": gavel_h,
                         "generator": row.generator, "seeds": int(row.seeds),
                         "jct_mean_h": round(float(row.jct_mean_h), 2),
                         "diff": round(float(row.jct_mean_h) / gavel_h - 1, 3),
                         "p5_h": round(float(row.p5_h), 2), "p95_h": round(float(row.p95_h), 2),
                         "within_10pct": abs(float(row.jct_mean_h) / gavel_h - 1) <= 0.10,
                         "printed_in_p5_p95": float(row.p5_h) <= gavel_h <= float(row.p95_h),
                         "seed0_h": round(seed0_h, 2), "seed0_diff": round(seed0_h / gavel_h - 1, 3),
                         "seed0_within_10pct": abs(seed0_h / gavel_h - 1) <= 0.10})
    return pd.DataFrame(rows)


def plot_printed_run(compared: pd.DataFrame, path: Path) -> None:
    """The printed run's own jobs (Gavel's stream 0): jaxsched's JCT (``seed0_h``, circles) at
    every printed point it ran on Gavel's streams, beside Gavel's printed curve (stars), a panel
    per workload, the JCT axis logarithmic so that the saturated points show too."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, workload in zip(axes, WORKLOADS):
        for sched, colour in COLOURS.items():
            printed = GAVEL_PRINTED.get((workload, sched), {})
            rows = compared[(compared.workload == workload) & (compared.scheduler == sched)].dropna(subset=["seed0_h"])
            if not printed or not len(rows):
                continue
            ax.plot(list(printed), list(printed.values()), "*--", ms=10, lw=0.8, color=colour, markeredgecolor="k",
                    alpha=0.6, label=f"Gavel's {GAVEL_NAMES[sched]} (printed)")
            rows = rows.sort_values("rate_per_h")
            ax.plot(rows.rate_per_h, rows.seed0_h, "o-", ms=4, color=colour, label=f"jaxsched {sched}")
        ax.set_title(f"continuous-{workload}: the printed run's jobs (Gavel's seed 0)")
        ax.set_xlabel("input job rate (jobs/hour)")
        ax.set_ylabel("average JCT of jobs 4000-4999 (hours)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def read_csv(path: Path, columns) -> pd.DataFrame:
    """A results CSV (empty with ``columns`` if absent); rows written before the ``generator``
    column were drawn by jaxsched's generator."""
    if not path.exists():
        return pd.DataFrame(columns=columns)
    frame = pd.read_csv(path)
    if len(frame.columns) and "generator" not in frame:
        frame.insert(1, "generator", "jaxsched")
    return frame


def main(argv=None) -> int:
    configure_cpu()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=(*WORKLOADS, "both"), default="both")
    parser.add_argument("--rules", choices=tuple(RULES), default="gavel",
                        help="gang speed and typing: Gavel's simulator's (default) or the physical variant")
    parser.add_argument("--generator", choices=GENERATORS, default="gavel",
                        help="whose draws make the streams: Gavel's own (default; seed 0 is its printed "
                             "run's) or jaxsched's JAX generator (the same distributions)")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS),
                        help="comma-separated: gavel-fifo,las (default), fifo, las-perf, fifo-perf")
    parser.add_argument("--rates", help="comma-separated jobs/h (default: Gavel's range per workload)")
    parser.add_argument("--seeds", type=int, default=16, help="streams per point, run as one batch")
    parser.add_argument("--extra-jobs", type=int, default=3000,
                        help="jobs generated after the measured ones, to keep the cluster loaded")
    parser.add_argument("--out", default="results/gavel")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 2 seeds, 2 rates, jobs 400-499 of 800, into --out/quick")
    args = parser.parse_args(argv)

    workloads = WORKLOADS if args.workload == "both" else (args.workload,)
    schedulers = tuple(args.schedulers.split(","))
    out = Path(args.out) / ("quick" if args.quick else "")
    window = {"warmup_jobs": 400, "measured_jobs": 100} if args.quick else {}
    seeds, extra = (2, 300) if args.quick else (args.seeds, args.extra_jobs)
    if seeds < 2:
        parser.error("--seeds must be >= 2 (a confidence interval needs two)")
    out.mkdir(parents=True, exist_ok=True)
    table_path, seeds_path = out / "table.csv", out / "per_seed.csv"
    table, per_seed = read_csv(table_path, TABLE_COLUMNS), read_csv(seeds_path, [])
    done = set(zip(table.rules, table.generator, table.workload, table.scheduler,
                   table.rate_per_h.astype(float).round(2)))

    start = time.perf_counter()
    for workload in workloads:
        rates = [float(r) for r in args.rates.split(",")] if args.rates else list(RATES[workload])
        rates = rates[:2] if args.quick else rates
        for sched in schedulers:
            for rate in rates:
                name = f"{args.rules} rules, {args.generator}'s streams: {workload} {sched} {rate:.2f}/h"
                if (args.rules, args.generator, workload, sched, round(rate, 2)) in done:
                    print(f"{name}: in {table_path}, skipped", flush=True)
                    continue
                t0 = time.perf_counter()
                frame, warnings = run_point(workload, sched, rate, seeds, extra, rules=args.rules,
                                            generator=args.generator, **window)
                row = summarize(frame, time.perf_counter() - t0)
                table = pd.concat([table, pd.DataFrame([row])], ignore_index=True)
                if len(per_seed):  # a point rerun (its row deleted from table.csv): its old seeds go
                    per_seed = per_seed[~((per_seed.rules == args.rules) & (per_seed.generator == args.generator)
                                          & (per_seed.workload == workload) & (per_seed.scheduler == sched)
                                          & (per_seed.rate_per_h.astype(float).round(2) == round(rate, 2)))]
                per_seed = pd.concat([per_seed, frame], ignore_index=True)
                table.to_csv(table_path, index=False)   # after every point: resumable
                per_seed.to_csv(seeds_path, index=False)
                print(f"{name}: JCT {row['jct_mean_h']:.2f} h "
                      f"± {row['jct_ci_h']:.2f} ({row['seeds']} seeds, p5-p95 {row['p5_h']:.2f}-"
                      f"{row['p95_h']:.2f}), ran out {row['ran_out']}, {row['wall_s']:.0f} s", flush=True)
                for line in warnings:
                    print(f"  WARNING: {line}", flush=True)
                if row["ran_out"]:
                    print(f"  WARNING: {row['ran_out']} seeds ran out of jobs before their measured jobs "
                          "finished: raise --extra-jobs", flush=True)
    plot(table, out / "jct_vs_rate.png")
    compared = compare_printed(table, per_seed)
    compared.to_csv(out / "vs_gavel.csv", index=False)
    plot_printed_run(compared, out / "printed_run.png")
    print(f"{time.perf_counter() - start:.0f} s; wrote {table_path}, {seeds_path}, {out / 'jct_vs_rate.png'}, "
          f"{out / 'vs_gavel.csv'}, {out / 'printed_run.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
