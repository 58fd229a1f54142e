"""How long does a cluster take to reach steady state? The warm-up study behind the defaults.

Runs long episodes of a config's workload (default: the built-in one) from an empty
cluster, with every job measured, and rebuilds from each job's record the cluster over
time in hourly bins: allocated GPUs (and the share of the work capacity in use), jobs
queued. Averaged over episodes, the allocation ramps up to a plateau; the *time to steady
state* is the first hour from which the 3-hour moving average of the mean allocation stays
within 1% of the plateau, or within its 95% confidence interval over the episodes (the
plateau: the mean over the second half of the arrival span, its last two hours left out:
arrivals thin out there). The mean residual run time E[S^2] / (2 E[S]) of
the jobs is reported beside it (SPEC.md: warm-up must cover it).

    python scripts/steady_state.py                          # results/steady_state/
    python scripts/steady_state.py --hours 24 --episodes 16 --loads 0.7 --out /tmp/ss

Writes ``steady_state.csv`` (scheduler, load, hour, means over episodes), ``steady_state.md``
(time to steady state per scheduler and load, the command) and ``steady_state.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import jax
import numpy as np
import pandas as pd

from jaxsched import compile_cache
from jaxsched.devices import configure_cpu
from jaxsched import cluster as cl
from jaxsched import config as cfg_lib
from jaxsched import evaluate as ev
from jaxsched import experiment
from jaxsched import report
from jaxsched.types import GPU_MILLI

TOLERANCE = 0.01  # relative distance of an hour's mean allocation from the plateau


def hourly_profile(jobs, records, nodes: cl.NodeTable, hours: int, speed) -> dict:
    """[E, hours] allocated GPU share, work capacity share and mean queued jobs per hour,
    from the per-job records of final states (jobs and records with a leading [E] axis)."""
    valid = np.asarray(jobs.valid, bool)
    outcome = report.job_outcomes(records, valid, static=False)
    arrival = np.asarray(jobs.arrival_s, np.float64)
    t_end = np.asarray(records["time_s"], np.float64)[:, None]
    start, end = np.asarray(records["start_s"], np.float64), np.asarray(records["end_s"], np.float64)
    ran = valid & np.isfinite(start)
    end = np.where(np.isfinite(end), end, t_end)  # still running (or queued) at the end
    # Time in the queue: until the start, the rejection, or the end of the episode; none for
    # jobs that never entered it (failed, dropped).
    entered = valid & ~np.isin(outcome, [report.OUTCOMES.index("failed"), report.OUTCOMES.index("dropped")])
    left_queue = np.where(ran, start, end)
    gpus = np.where(ran, np.asarray(jobs.num_gpu, np.float64) * np.asarray(jobs.gpu_milli, np.float64)
                    / GPU_MILLI, 0.0)
    job_speed = np.asarray(speed, np.float64)[np.maximum(np.asarray(records["node"]), 0)]
    out = {"gpu_alloc": [], "work_alloc": [], "queue_len": []}
    for h in range(hours):
        lo, hi = 3600.0 * h, 3600.0 * (h + 1)
        run = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0, None)
        wait = np.where(entered, np.clip(np.minimum(left_queue, hi) - np.maximum(arrival, lo), 0, None), 0.0)
        out["gpu_alloc"].append((gpus * run).sum(1) / (nodes.total_gpus * 3600.0))
        out["work_alloc"].append((gpus * run * job_speed).sum(1) / (cl.work_capacity(nodes) * 3600.0))
        out["queue_len"].append(wait.sum(1) / 3600.0)
    return {k: np.stack(v, 1) for k, v in out.items()}


def time_to_steady(alloc: np.ndarray, plateau: slice) -> int:
    """First hour from which the 3-hour moving average of the mean over episodes stays close
    to the plateau (the mean over hours ``plateau``) up to the plateau's end. ``alloc``:
    [E, hours]. An hour is off the plateau when its moving average differs from it by more
    than TOLERANCE and by more than its 95% confidence half-width over the episodes: with
    few episodes, hour-to-hour noise alone would exceed 1%."""
    level = alloc.mean(0)[plateau].mean()
    smooth = np.stack([np.convolve(a, np.ones(3) / 3, mode="valid") for a in alloc])[:, : plateau.stop - 2]
    mean = smooth.mean(0)
    half = 1.96 * smooth.std(0, ddof=1) / np.sqrt(len(alloc)) if len(alloc) > 1 else 0.0
    off = (np.abs(mean / level - 1.0) > TOLERANCE) & (np.abs(mean - level) > half)
    return int(np.flatnonzero(off)[-1] + 1) if off.any() else 0


def main(argv=None) -> int:
    configure_cpu()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="TOML run config (default: built-in defaults)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--hours", type=int, default=36, help="hours of arrivals per episode")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--schedulers", nargs="+", default=["first-fit", "best-fit", "fgd"])
    parser.add_argument("--loads", type=float, nargs="+", default=[0.7, 0.9])
    parser.add_argument("--out", default="results/steady_state")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compile_cache.enable_from_args(args)
    base = cfg_lib.load(args.config, args.set)
    nodes = experiment.build_nodes(base)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, summary = [], []
    for load in args.loads:
        config = experiment.with_load(base, load, nodes)
        syn = config.workload.synthetic
        num_jobs = int(math.ceil(args.hours * 3600.0 / syn.mean_interarrival_s))
        config = dataclasses.replace(
            config,
            workload=dataclasses.replace(config.workload, synthetic=syn.replace(num_jobs=num_jobs)),
            env=dataclasses.replace(config.env, warmup_jobs=0, measured_jobs=0),
            eval=dataclasses.replace(config.eval, episodes=args.episodes, batch_size=args.episodes,
                                     schedulers=tuple(args.schedulers)))
        jobs, params, max_steps, env_keys, info = experiment.episodes(config, nodes)
        host_jobs = jax.device_get(jobs)
        work = np.asarray(host_jobs.work_s, np.float64)[np.asarray(host_jobs.valid)]
        residual_h = (work ** 2).mean() / (2 * work.mean()) / 3600.0  # at speed 1.0
        for name in args.schedulers:
            frame, records = ev.run_scheduler(name, config, params, jobs, env_keys, max_steps)
            profile = hourly_profile(host_jobs, records, nodes, args.hours, np.asarray(params.cluster.speed))
            means = {k: v.mean(0) for k, v in profile.items()}
            plateau = slice(args.hours // 2, args.hours - 2)
            steady = time_to_steady(profile["gpu_alloc"], plateau)
            for h in range(args.hours):
                rows.append({"scheduler": name, "load": load, "hour": h,
                             **{k: float(v[h]) for k, v in means.items()}})
            summary.append({"scheduler": name, "load": load, "steady_after_h": steady,
                            "plateau_gpu_alloc": float(means["gpu_alloc"][plateau].mean()),
                            "plateau_work_alloc": float(means["work_alloc"][plateau].mean()),
                            "plateau_queue_len": float(means["queue_len"][plateau].mean()),
                            "dropped": int(frame["dropped_overflow"].sum()),
                            "residual_run_h_at_speed_1": residual_h})
            print(summary[-1], flush=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "steady_state.csv", index=False)
    command = "python scripts/steady_state.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"Command: `{command}` ({len(nodes)} nodes, {args.episodes} episodes of {args.hours} h "
             f"of arrivals from an empty cluster; plateau = mean over hours {args.hours // 2}.."
             f"{args.hours - 2}; steady = the 3-hour moving average of the mean GPU allocation "
             f"within {TOLERANCE:.0%} of it, or within its 95% CI, from then on)", "",
             "| scheduler | load ρ | steady after (h) | GPU allocation | work capacity in use | "
             "mean queue | dropped | mean residual run time at speed 1 (h) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in summary:
        lines.append(f"| {r['scheduler']} | {r['load']} | {r['steady_after_h']} | "
                     f"{r['plateau_gpu_alloc']:.3f} | {r['plateau_work_alloc']:.3f} | "
                     f"{r['plateau_queue_len']:.1f} | {r['dropped']} | {r['residual_run_h_at_speed_1']:.2f} |")
    (out / "steady_state.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    from jaxsched.plots import _figure, _save
    fig = _figure(10, 3.2)
    axes = fig.subplots(1, 3)
    for (name, load), g in frame.groupby(["scheduler", "load"], sort=False):
        for ax, m in zip(axes, ("gpu_alloc", "work_alloc", "queue_len")):
            ax.plot(g["hour"] + 0.5, g[m], label=f"{name} ρ={load}")
    for ax, title in zip(axes, ("GPU allocation", "work capacity in use", "mean queued jobs")):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("hours since the first arrival", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    _save(fig, out / "steady_state.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
