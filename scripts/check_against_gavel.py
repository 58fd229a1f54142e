"""Run one point of Gavel's continuous experiment in Gavel's own simulator and in jaxsched, on
the same jobs, and print them side by side, job by job.

``--driver trace`` (default): jaxsched draws one stream of Gavel's workload (``configs/gavel.toml``
under Gavel's rules, as ``scripts/reproduce_gavel.py`` runs a point: its episode 0 of
``--seed``, by ``--generator``: Gavel's own draws by default), writes it in Gavel's trace format
(``scheduler/utils.py``'s ``parse_trace``: job type, command, steps argument, needs data dir,
total steps = the duration times the job's V100 throughput at its scale factor, as Gavel's
``generate_job`` computes them, scale factor, priority weight 1, SLO -1, arrival time), runs
Gavel's ``scheduler/scripts/drivers/simulate_scheduler_with_trace.py`` on it (36 V100 + 36 P100
+ 36 K80 one-GPU servers, rounds of 360 s, the measured window ``--window``), reads the per-job
completion times it prints (``Job <id>: <seconds>``), and runs the same jobs through jaxsched's
policy of the same name:

    Gavel policy           jaxsched scheduler
    fifo                   gavel-fifo
    max_min_fairness       las (at the types' mean speed, as reproduce_gavel.py runs it)
    max_min_fairness_perf  las-perf
    fifo_perf              fifo-perf

``--driver generated``: Gavel's ``simulate_scheduler_with_generated_jobs.py`` draws the jobs
itself (its generator at ``--seed``, the rate and workload given, until the window's jobs
finish: how its printed curves were made), a small wrapper records every job it adds in Gavel's
trace format (``trace.txt``), and jaxsched replays that file (``workload.trace``,
``gavel.load_trace``). Gavel's mean JCT is then its printed number (multi-GPU FIFO at 1.0
jobs/h, seed 0, ``--window 4000:5000``, commit 2d8e076: 19.9155 h). ``--draw-offset K`` seeds
Gavel's FIFO's own generator (its type draws) at seed + K: the same jobs with another draw,
to see how much of a point is Gavel's draw (jaxsched's draw, a fixed hash of the job, stays).

Gavel is not a dependency of jaxsched and never runs in its tests: this is a tool for users
who want to check jaxsched themselves. It needs a checkout of stanford-futuredata/gavel
(``--gavel``; its figures came from commit 2d8e076) and a Python that can run it
(``--gavel-python``; Gavel needs numpy, cvxpy, grpcio, matrix-completion and more).

Writes under ``--out``: ``trace.txt`` (the jobs, Gavel's format), ``gavel.log`` (its output),
``per_job.csv`` (job, num_gpus, arrival_s, gavel_jct_h, jaxsched_jct_h, diff_h) and prints
the two mean JCTs over the window, their ratio, and how closely the jobs agree. Example::

    python scripts/check_against_gavel.py --gavel /tmp/gavel --gavel-python /tmp/gavel-venv/bin/python \\
        --policy fifo --workload single --rate 2.0 --jobs 700 --window 400:500
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reproduce_gavel  # noqa: E402  (the point's config: the same settings as the sweep)

from jaxsched import evaluate, experiment, paths  # noqa: E402
from jaxsched.devices import configure_cpu  # noqa: E402
from jaxsched.workload import gavel  # noqa: E402

# Runs Gavel's generated-jobs driver, writing every job its scheduler adds (in job-id order)
# to the file named first, in Gavel's trace format: str(job), a tab, the arrival time. The
# second argument is added to the seed of FIFOPolicy's own generator (its type draws), not to
# the jobs' generator.
RECORDER = """import atexit, runpy, sys
sys.path.insert(0, ".")
import scheduler
from policies import fifo
out, offset, lines, add_job = sys.argv.pop(1), int(sys.argv.pop(1)), [], scheduler.Scheduler.add_job
fifo_init = fifo.FIFOPolicy.__init__
def reseeded_init(self, *args, seed=None, **kwargs):
    fifo_init(self, *args, seed=None if seed is None else seed + offset, **kwargs)
fifo.FIFOPolicy.__init__ = reseeded_init
def recording_add_job(self, job, timestamp=None):
    lines.append("%s\\t%f" % (job, timestamp))
    return add_job(self, job, timestamp=timestamp)
scheduler.Scheduler.add_job = recording_add_job
atexit.register(lambda: open(out, "w").write("\\n".join(lines) + "\\n"))
runpy.run_path("scripts/drivers/simulate_scheduler_with_generated_jobs.py", run_name="__main__")
"""

POLICIES = {"fifo": "gavel-fifo", "max_min_fairness": "las", "max_min_fairness_perf": "las-perf",
            "fifo_perf": "fifo-perf"}
DRIVER = Path("scheduler") / "scripts" / "drivers" / "simulate_scheduler_with_trace.py"
JCT_LINE = re.compile(r"^Job \(?(\d+)[^:]*: ([0-9.]+)\s*$")


def trace_lines(jobs, throughputs: gavel.Throughputs) -> list[str]:
    """The valid jobs of one episode (``Jobs`` of ``gavel.to_jobs``, numpy) in Gavel's trace
    format, one line each: the job type and scale factor from the job's type row
    (``gavel.type_row``), total steps = int(work_s x its V100 steps per second at that scale
    factor, on one server)."""
    ref = throughputs.gpu_types.index(throughputs.reference)
    lines = []
    for j in np.flatnonzero(np.asarray(jobs.valid)):
        row = int(jobs.job_type[j])
        kind, scale = row // (2 * len(gavel.SCALE_FACTORS)), (row // 2) % len(gavel.SCALE_FACTORS)
        steps = int(float(jobs.work_s[j]) * throughputs.steps_per_s[kind, scale, ref])
        lines.append("\t".join([throughputs.job_types[kind], "jaxsched", "--num_steps", "0", str(steps),
                                str(gavel.SCALE_FACTORS[scale]), "1", "-1.000000",
                                f"{float(jobs.arrival_s[j]):.6f}"]))
    return lines


def gavel_jcts(log: str) -> dict:
    """{job id: JCT seconds} from Gavel's ``get_average_jct`` lines (``Job <id>: <seconds>``)."""
    out = {}
    for line in log.splitlines():
        m = JCT_LINE.match(line.strip())
        if m:
            out[int(m[1])] = float(m[2])
    return out


def main(argv=None) -> int:
    configure_cpu()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gavel", required=True, type=Path, help="a checkout of stanford-futuredata/gavel")
    parser.add_argument("--gavel-python", default=sys.executable, help="a Python that runs Gavel's simulator")
    parser.add_argument("--policy", choices=tuple(POLICIES), default="fifo", help="Gavel's policy name")
    parser.add_argument("--workload", choices=reproduce_gavel.WORKLOADS, default="single")
    parser.add_argument("--rate", type=float, default=2.0, help="jobs per hour")
    parser.add_argument("--jobs", type=int, default=700, help="jobs in the stream")
    parser.add_argument("--window", default="400:500", help="the measured jobs, first:end (Gavel's -s, -e)")
    parser.add_argument("--gavel-solver", choices=("ECOS", "SCS", "GUROBI"), default="ECOS",
                        help="the solver Gavel's LP policies use (its --solver; ECOS, its default, fails on "
                             "some multi-GPU allocations)")
    parser.add_argument("--driver", choices=("trace", "generated"), default="trace",
                        help="trace: jaxsched draws --jobs jobs (by --generator) and Gavel runs them as a trace; "
                             "generated: Gavel's own driver draws its jobs until the window's finish, as its "
                             "published runs did (--jobs, --generator not read), and jaxsched replays them")
    parser.add_argument("--generator", choices=reproduce_gavel.GENERATORS, default="gavel",
                        help="with --driver trace, whose draws (workload.gavel.generator): Gavel's (default) or "
                             "jaxsched's JAX generator")
    parser.add_argument("--seed", type=int, default=0, help="jaxsched's eval.seed (the stream) and Gavel's --seed")
    parser.add_argument("--draw-offset", type=int, default=0,
                        help="with --driver generated: Gavel's FIFO draws its types from seed + this (the same "
                             "jobs, another draw: how much of a point is the draw); jaxsched's draw is unchanged")
    parser.add_argument("--out", default="results/runs/check_gavel")
    args = parser.parse_args(argv)
    driver = args.gavel / DRIVER
    if not driver.is_file():
        parser.error(f"--gavel: {driver} not found (a checkout of stanford-futuredata/gavel)")
    first, end = (int(x) for x in args.window.split(":"))
    if args.draw_offset and args.driver != "generated":
        parser.error("--draw-offset: only with --driver generated (Gavel's own generator and policy)")
    if not 0 <= first < end <= (args.jobs if args.driver == "trace" else end):
        parser.error(f"--window {args.window}: needs 0 <= first < end <= --jobs ({args.jobs})")

    scheduler = POLICIES[args.policy]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = (out / "trace.txt").resolve()
    base = reproduce_gavel.point_config(args.workload, scheduler, args.rate, seeds=1, extra_jobs=0)
    throughputs_file = paths.resolve_data_path(base.workload.throughputs).resolve()
    counts = {m: 0 for m in ("V100", "P100", "K80")}
    for name, count, per_node in base.cluster.node_groups:
        counts[name] += count * per_node
    common = ["-p", args.policy, "--throughputs_file", str(throughputs_file),
              "-c", f"{counts['V100']}:{counts['P100']}:{counts['K80']}", "--num_gpus_per_server", "1:1:1",
              "--seed", str(args.seed), "--solver", args.gavel_solver, "-s", str(first), "-e", str(end)]
    if args.driver == "trace":
        config = reproduce_gavel.point_config(args.workload, scheduler, args.rate, seeds=1, extra_jobs=args.jobs - end,
                                              warmup_jobs=first, measured_jobs=end - first, seed=args.seed,
                                              generator=args.generator)
        ep = experiment.episodes(config, experiment.build_nodes(config))
        jobs = jax.tree.map(lambda x: np.asarray(x)[0], ep.jobs)
        throughputs = gavel.load_throughputs(throughputs_file)
        trace.write_text("\n".join(trace_lines(jobs, throughputs)) + "\n")
        command, cwd = [args.gavel_python, str(DRIVER), "-t", str(trace), *common,
                        "--time_per_iteration", str(int(reproduce_gavel.ROUND_S))], args.gavel
    else:  # Gavel draws the jobs; the recorder writes them to trace.txt
        (out / "record_jobs.py").write_text(RECORDER)
        command = [args.gavel_python, str((out / "record_jobs.py").resolve()), str(trace), str(args.draw_offset), *common,
                   "-l", str(3600.0 / args.rate), "-i", str(int(reproduce_gavel.ROUND_S)), "-v",  # -v: the JCTs
                   *(["-m"] if args.workload == "multi" else [])]
        cwd = args.gavel / "scheduler"
    t0 = time.perf_counter()
    run = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    gavel_s = time.perf_counter() - t0
    (out / "gavel.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        print(f"Gavel's simulator failed (exit {run.returncode}); its output: {out / 'gavel.log'}", file=sys.stderr)
        return 1
    if args.driver == "generated":
        num_jobs = sum(1 for line in trace.read_text().splitlines() if line.strip())
        config = reproduce_gavel.point_config(args.workload, scheduler, args.rate, seeds=1, extra_jobs=num_jobs - end,
                                              warmup_jobs=first, measured_jobs=end - first, seed=args.seed)
        config = dataclasses.replace(config, workload=dataclasses.replace(config.workload, trace=str(trace)))
        ep = experiment.episodes(config, experiment.build_nodes(config))
        jobs = jax.tree.map(lambda x: np.asarray(x)[0], ep.jobs)
    theirs = gavel_jcts(run.stdout)

    t0 = time.perf_counter()
    _, records = evaluate.run_scheduler(scheduler, config, ep.params, ep.jobs, ep.env_keys, ep.max_steps)
    jaxsched_s = time.perf_counter() - t0
    window = np.arange(first, end)
    ours = (np.asarray(records["end_s"])[0] - np.asarray(jobs.arrival_s))[window]
    table = pd.DataFrame({"job": window, "num_gpus": np.asarray(jobs.num_gpu)[window],
                          "arrival_s": np.asarray(jobs.arrival_s)[window],
                          "gavel_jct_h": [theirs.get(int(j), np.nan) / 3600.0 for j in window],
                          "jaxsched_jct_h": ours / 3600.0})
    table["diff_h"] = table.jaxsched_jct_h - table.gavel_jct_h
    table.to_csv(out / "per_job.csv", index=False)

    both = table.dropna()
    rel = (both.jaxsched_jct_h / both.gavel_jct_h - 1).abs()
    print(f"Gavel {args.policy} vs jaxsched {scheduler}, {args.workload}-GPU jobs at {args.rate} jobs/h, "
          f"jobs {first}-{end - 1} of {len(np.asarray(jobs.arrival_s))} (seed {args.seed}, Gavel's {args.driver} driver"
          f"{f', its draws at seed + {args.draw_offset}' if args.draw_offset else ''}):")
    print(f"  mean JCT: Gavel {both.gavel_jct_h.mean():.3f} h, jaxsched {both.jaxsched_jct_h.mean():.3f} h "
          f"(ratio {both.jaxsched_jct_h.mean() / both.gavel_jct_h.mean():.4f}); {len(both)} of {len(window)} jobs "
          "finished in both")
    print(f"  per job: median |relative difference| {rel.median():.4f}, within 1% {(rel <= 0.01).mean():.2%}, "
          f"within one round {(both.diff_h.abs() <= reproduce_gavel.ROUND_S / 3600).mean():.2%}")
    print(f"  time: Gavel {gavel_s:.1f} s, jaxsched {jaxsched_s:.1f} s (compile included); wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
