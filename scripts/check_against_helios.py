"""Run one Philly virtual cluster (VC) through Helios's simulator and through jaxsched, on the
same jobs, and compare the schedules job by job.

Helios (Hu et al., SC '21; ``S-Lab-System-Group/HeliosArtifact``, ``framework/QSSF Service``)
simulates each VC of Philly on its own: nodes of 8 GPUs (``data/philly_vc.csv``: 6214e9 and
b436b2 have 64), a clock that ticks in 1-s steps, and at each tick (``policies/fifo.py``,
``sjf.py``) it frees the jobs ending now, queues the jobs submitted now, sorts the queue and
starts jobs from its head until the first that does not fit: strict order, no backfilling.
Its ``consolidate`` placer (``policies/placer/consolidate.py``) puts a job of up to 8 GPUs on
the node with the fewest free GPUs that holds it, and a larger job on whole free nodes. It
places by GPUs only. The policies map to jaxsched's schedulers as:

    Helios policy   jaxsched scheduler   queue order
    fifo            fifo-strict          submission time (ties: trace order)
    sjf             sjf-strict           duration (ties: submission order)
    srtf            helios-srtf          work left, preemptive, every 1-s tick

Helios's SRTF (``policies/srtf.py``) decides every tick: it sorts the queued and running jobs
by their work left (``remain``) and takes them in that order while their GPUs fit the VC's
total (a count, not a placement), preempts the running jobs not taken (adding a checkpoint
cost to their work left: 7 s for 1 GPU, 30 s for up to 8, 60 s above) and places the queued
ones taken, skipping those its placer cannot place. jaxsched's ``helios-srtf`` is that rule
(docs/semantics.md, "Round policies"), run here with rounds of 1 s and Helios's costs as
restart costs (``env.restart_overhead_s`` 7/30/60 above 1 and 8 GPUs), unguarded
(``env.restart_guard = false``: Helios may preempt a job in its checkpoint cost).
``--scheduler srtf`` runs jaxsched's own SRTF instead, whose round places a queued job where it
fits, releasing (in thought) lower jobs until it does, and ranks a preempted job by its work
left alone. Helios's SRTF also ends a job one tick after its work left reaches 0 (at each tick
it first ends the jobs at 0, then counts the others down): a job of d seconds started at s
ends at s + d + 1, and after a preemption at its restart plus its work left, cost and 1.
jaxsched gets each job's duration + 1 s as its work (``SRTF_TICK_S``; Helios gets the
duration), which gives the same ends for the same starts and preemptions (its restart cost is
Helios's checkpoint cost); the per-job table's ``duration_s`` is the trace's.

jaxsched replays the VC from ``configs/philly.toml`` (``workload.source = "philly"``) set to
Helios's rules: the whole VC in one episode (``workload.window_jobs`` = its job count), run
times not capped (``workload.max_work_s``), the VC's nodes (``cluster.preset_nodes``) of 8
GPUs, no spread penalty (``env.spread_penalty = 1.0``), every job measured, and
``env.max_span`` just large enough for the VC's largest gang (1 node for 6214e9, 3 for
b436b2's 24-GPU jobs), Helios's placer (``env.gang_rule = "helios"``: a job of up to 8 GPUs on
one node only, a larger one on whole free nodes by index and its remainder on the next node
by free GPUs; docs/semantics.md, "Gang jobs"), an unbounded queue (``env.queue_capacity`` =
the job count) and a step cap no strict queue reaches. ``--gang-rule consolidate`` runs
jaxsched's own gangs instead (any job of 2 or more GPUs may span nodes: its best-fit node
first, then the nodes of most room), which changes start times once the cluster is full
(results/philly/helios: b436b2 at load 0.7). jaxsched gives each job 4 cores and 16 GiB per
GPU (the trace has none), which every 8-GPU node holds GPU for GPU, so they never block a
placement Helios makes.

``--replay native``: the jobs at the trace's own submission times (``workload.replay =
"native"``); ``--replay load``: compressed to offered load ``--load`` (``"windows"``,
``workload.target_load``), the compressed times rounded to whole seconds, since Helios's
clock ticks in seconds, and given to both sides rounded. Both sides get the same job list:
jaxsched's episode (jobs sorted by submission, stable) is written in Helios's input format,
``cluster_log.csv`` (as ``data/log_process.py`` writes Philly's: ``user, vc, jobname,
gpu_num, state, submit_time, duration``; ``vc`` = "vc" + the id, since pandas would read
6214e9 as a number; ``submit_time`` = 2017-10-01 00:00:00, Helios's Philly start, plus the
job's arrival in seconds; ``jobname`` = the job's index in the episode, which pairs the two
sides' jobs), with ``vc_dict_homo.pkl`` = {VC: its nodes}. Helios sorts the jobs again with
pandas' unstable sort; the script warns if that reordered same-second submissions.

Helios runs through a small driver (``helios_driver.py``, written to ``--out``) that calls
its own ``utils.trace_philly_process`` (the loader of its ``simulator.py``, with a date range
that holds every job), ``utils.trace_parser``, ``cluster.Cluster`` and ``utils.simulate_vc``
(the per-VC function ``simulator.py`` runs in a process pool) in one process, under
``TZ=UTC`` (its loader turns timestamps into seconds in local time). Helios's per-job log
(``<vc>/<policy>_consolidate_<vc>_log.csv``) gives its start and end times.

Helios is not a dependency of jaxsched and never runs in its tests: this is a tool for users
who want to check jaxsched themselves. It needs a checkout of HeliosArtifact (``--helios``;
the figures in results/philly/helios came from commit bdaae10) and a Python with pandas and
numpy (``--helios-python``; FIFO and SJF need no estimator, so no lightgbm).

Writes under ``--out``: ``helios_input/cluster_log.csv`` and ``vc_dict_homo.pkl`` (Helios's
input), ``helios_driver.py``, ``helios.log`` (its output) and ``helios_log/`` (its log
files), ``per_job.csv`` (job, num_gpus, submit_s, duration_s, helios_start_s, helios_end_s,
jaxsched_start_s, jaxsched_end_s, and the nodes each job ran on, helios_nodes and
jaxsched_nodes) and ``summary.csv``; prints mean JCT, mean queueing delay and makespan on
both sides, how many jobs start and end on the same second, the first job that differs, and
how many jobs of at most 8 GPUs each side spread over nodes. Example::

    python scripts/check_against_helios.py --helios /tmp/helios \\
        --helios-python /tmp/helios-venv/bin/python --vc 6214e9 --policy fifo --replay load --load 0.7
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from jaxsched import config as cfg_lib
from jaxsched import evaluate, experiment, paths
from jaxsched.devices import configure_cpu
from jaxsched.workload import philly

POLICIES = {"fifo": "fifo-strict", "sjf": "sjf-strict", "srtf": "helios-srtf"}
SRTFS = ("helios-srtf", "srtf")  # jaxsched's schedulers run with HELIOS_SRTF
SRTF_TICK_S = 1.0  # Helios's SRTF ends a job one tick after its work left reaches 0
# Helios's SRTF: 1-s ticks, its checkpoint costs by GPU count (Policy.ckpt_overhead), unguarded
HELIOS_SRTF = ["env.round_s=1.0", "env.restart_overhead_s=[7.0, 30.0, 60.0]", "env.restart_above_gpus=[1, 8]",
               "env.restart_guard=false"]
HELIOS_DIR = Path("framework") / "QSSF Service"
HELIOS_START = pd.Timestamp("2017-10-01 00:00:00")  # utils.trace_philly_process's ``start``
GPUS_PER_NODE = 8  # Helios's consolidate placer handles 8-GPU nodes only

# Runs the one VC of the input through Helios's own functions: argv = Helios's QSSF Service
# folder, the input folder, the log folder, the policy, the end of the date range. Prints the
# seconds simulate_vc took.
DRIVER = """import logging, pickle, sys, time
helios, trace_dir, log_dir, policy, end = sys.argv[1:6]
sys.path.insert(0, helios)
import cluster, utils
logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(message)s")
logger = logging.getLogger()
df, start_ts = utils.trace_philly_process(trace_dir, ("2017-10-01 00:00:00", end))
trace = utils.trace_parser(df)
vc_dict = pickle.load(open(trace_dir + "/vc_dict_homo.pkl", "rb"))
vcs = cluster.Cluster(vc_dict, 8, 96).vc_list
t0 = time.perf_counter()
utils.simulate_vc(trace, vcs[0], "consolidate", log_dir, policy, logger, start_ts)
print("HELIOS_SIMULATE_S %.3f" % (time.perf_counter() - t0))
"""


def helios_input(vc: str, submit_s, duration_s, num_gpus) -> pd.DataFrame:
    """The jobs (submission seconds from the start, run seconds, GPUs; in job order) as rows of
    Helios's Philly ``cluster_log.csv``: ``jobname`` = the job's index, ``submit_time`` =
    Helios's start (2017-10-01 00:00:00) + the whole seconds given, ``state`` "Pass"."""
    submit = np.asarray(submit_s, np.float64)
    duration = np.asarray(duration_s, np.float64)
    for name, values in (("submission", submit), ("duration", duration)):
        if not np.all(values == np.round(values)):
            raise ValueError(f"Helios ticks in whole seconds: every {name} time must be one")
    if np.any(duration < 1):  # Helios never ends a job of 0 s: its release check has passed
        raise ValueError("Helios needs durations of at least 1 s")
    n = len(submit)
    return pd.DataFrame({
        "user": ["jaxsched"] * n, "vc": [vc] * n, "jobname": np.arange(n),
        "gpu_num": np.asarray(num_gpus, np.int64), "state": ["Pass"] * n,
        "submit_time": (HELIOS_START + pd.to_timedelta(submit.astype(np.int64), unit="s")).strftime("%Y-%m-%d %H:%M:%S"),
        "duration": duration.astype(np.int64)})


def helios_vc_name(vc: str) -> str:
    """The VC's name in Helios's input: ``vc`` + the Philly id. Pandas reads an id such as
    ``6214e9`` as the number 6.214e12 (Helios's VC filter would still match it, but its log
    writer then fails on a float folder name); with the prefix it stays a string, as the
    ``vc...`` names of Helios's own clusters do."""
    return f"vc{vc}"


def helios_times(log: pd.DataFrame, num_jobs: int) -> pd.DataFrame:
    """[num_jobs] rows (index = job) of ``start_s``, ``end_s`` from Helios's per-job log
    (its ``jobname`` is our job index; its times count from the first submission, as ours do).
    A job missing from the log, or never ended (Helios writes ``sys.maxsize``), is NaN."""
    times = log.set_index("jobname")[["start_time", "end_time"]].astype(np.float64)
    times.columns = ["start_s", "end_s"]
    times[times >= 2 ** 62] = np.nan  # sys.maxsize: never started
    return times.reindex(np.arange(num_jobs))


def schedule_stats(submit_s, start_s, end_s) -> dict:
    """Mean JCT (end - submit), mean queueing delay (start - submit), makespan (last end -
    first submission), in seconds, over the jobs with an end (``jobs``: how many)."""
    submit, start, end = (np.asarray(x, np.float64) for x in (submit_s, start_s, end_s))
    done = np.isfinite(end)
    return {"jobs": int(done.sum()), "mean_jct_s": float((end - submit)[done].mean()),
            "mean_queue_s": float((start - submit)[done].mean()),
            "makespan_s": float(end[done].max() - submit.min())}


def agreement(a, b) -> dict:
    """How many of two per-job time arrays are equal (``same``) and within 1 s (``within_1s``);
    NaN counts as a difference."""
    diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return {"same": int((diff == 0).sum()), "within_1s": int((diff <= 1).sum())}


def helios_node_counts(nodes) -> np.ndarray:
    """[J] int: how many nodes each job ran on, from Helios's log column ``nodes`` (the text
    of a list of {node: GPUs} dicts, e.g. ``[{3: 8}, {7: 8}]``; ``[]``: never placed)."""
    return np.array([str(text).count(":") for text in nodes], np.int64)


def first_difference(table: pd.DataFrame):
    """The row of the first divergence in time (None if the schedules agree): of the jobs whose
    start or end differs, the one starting first on either side; of those starting together,
    the largest gang (where a placement rule differs, a gang is the likelier cause)."""
    differ = ~((table.helios_start_s == table.jaxsched_start_s) & (table.helios_end_s == table.jaxsched_end_s))
    if not differ.any():
        return None
    rows = table[differ].assign(when=np.fmin(table.helios_start_s, table.jaxsched_start_s)[differ])
    return rows.sort_values(["when", "num_gpus", "job"], ascending=[True, False, True],
                            na_position="last").drop(columns="when").iloc[0]


def jaxsched_config(trace: str, vc: str, scheduler: str, replay: str, load: float, num_jobs: int,
                    max_gpus: int, gang_rule: str = "helios") -> cfg_lib.Config:
    """configs/philly.toml under Helios's rules for the VC's ``num_jobs`` jobs (module docstring)."""
    return cfg_lib.load("configs/philly.toml", [
        f"workload.trace={trace!r}", f"workload.vcs=[{vc!r}]",
        f"workload.replay={'native' if replay == 'native' else 'windows'!r}",
        f"workload.window_jobs={num_jobs}", f"workload.target_load={load}", "workload.max_work_s=1e9",
        "workload.trace_span=[0.0, 1.0]", f"cluster.preset_nodes={philly.VC_NODES[vc]}", "cluster.node_gpus=8",
        f"env.max_span={max(1, math.ceil(max_gpus / GPUS_PER_NODE))}", "env.spread_penalty=1.0",
        f"env.gang_rule={gang_rule!r}",
        "env.warmup_jobs=0", "env.measured_jobs=0", "eval.episodes=1", "eval.batch_size=1",
        f"eval.schedulers=[{scheduler!r}]",
        # a strict queue spends a decision on each arrival and end it waits through: more than
        # the default cap (3 x jobs + 100) may be needed to finish the episode
        f"eval.max_steps={10 * num_jobs + 100}",
        # Helios's queue is unbounded: jaxsched's must hold every job (an arrival past it is dropped)
        f"env.queue_capacity={num_jobs}", *(HELIOS_SRTF if scheduler in SRTFS else [])])


def main(argv=None) -> int:
    configure_cpu()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--helios", required=True, type=Path, help="a checkout of S-Lab-System-Group/HeliosArtifact")
    parser.add_argument("--helios-python", default=sys.executable, help="a Python with pandas and numpy")
    parser.add_argument("--vc", default="6214e9", choices=sorted(philly.VC_NODES), help="the Philly VC")
    parser.add_argument("--policy", choices=tuple(POLICIES), default="fifo", help="Helios's policy name")
    parser.add_argument("--replay", choices=("native", "load"), default="native",
                        help="native: the trace's submission times; load: compressed to --load")
    parser.add_argument("--load", type=float, default=0.7, help="offered load with --replay load")
    parser.add_argument("--trace", default="../shared/data/philly/philly.csv", help="philly.csv")
    parser.add_argument("--gang-rule", choices=("helios", "consolidate"), default="helios",
                        help="jaxsched's env.gang_rule: Helios's placer, or jaxsched's own gangs")
    parser.add_argument("--scheduler", choices=SRTFS, default=None,
                        help="with --policy srtf: jaxsched's scheduler (default helios-srtf, Helios's rule; srtf: jaxsched's own)")
    parser.add_argument("--out", default="results/runs/check_helios")
    args = parser.parse_args(argv)
    helios = (args.helios / HELIOS_DIR).resolve()
    if not (helios / "utils.py").is_file():
        parser.error(f"--helios: {helios / 'utils.py'} not found (a checkout of HeliosArtifact)")

    # jaxsched's episode: the VC's jobs, whole, sorted by submission.
    vc_jobs = philly.load(paths.resolve_data_path(args.trace), vcs=[args.vc])
    scheduler = args.scheduler or POLICIES[args.policy]
    if args.scheduler and (args.policy == "srtf") != (args.scheduler in SRTFS):
        parser.error(f"--scheduler {args.scheduler}: Helios's {args.policy} runs beside one of "
                     f"{list(SRTFS) if args.policy == 'srtf' else [POLICIES[args.policy]]}")
    config = jaxsched_config(args.trace, args.vc, scheduler, args.replay, args.load, len(vc_jobs),
                             int(vc_jobs.num_gpu.max()), args.gang_rule)
    ep = experiment.episodes(config, experiment.build_nodes(config))
    if args.replay == "load":  # Helios's clock: whole seconds, on both sides
        ep = ep._replace(jobs=ep.jobs.replace(arrival_s=np.round(np.asarray(ep.jobs.arrival_s))))
    valid = np.asarray(ep.jobs.valid)[0]
    submit = np.asarray(ep.jobs.arrival_s, np.float64)[0][valid]
    duration = np.asarray(ep.jobs.work_s, np.float64)[0][valid]
    if scheduler in SRTFS:  # Helios's SRTF runs a segment one tick past its work (module docstring)
        longer = np.asarray(ep.jobs.work_s) + SRTF_TICK_S * np.asarray(ep.jobs.valid)
        ep = ep._replace(jobs=ep.jobs.replace(work_s=longer))
    gpus = np.asarray(ep.jobs.num_gpu)[0][valid]
    print(f"VC {args.vc}: {len(submit)} jobs ({len(vc_jobs)} in the trace), submissions over {submit.max():.0f} s, "
          f"{ep.info['unschedulable_jobs']} unschedulable; compression x{ep.info['compress_factor_max']:.3f}")

    out = Path(args.out)
    (out / "helios_input").mkdir(parents=True, exist_ok=True)
    (out / "helios_log").mkdir(exist_ok=True)
    rows = helios_input(helios_vc_name(args.vc), submit, duration, gpus)
    rows.to_csv(out / "helios_input" / "cluster_log.csv", index=False)
    with open(out / "helios_input" / "vc_dict_homo.pkl", "wb") as f:
        pickle.dump({helios_vc_name(args.vc): philly.VC_NODES[args.vc]}, f)
    (out / "helios_driver.py").write_text(DRIVER)
    end = (HELIOS_START + pd.Timedelta(seconds=float(submit.max()) + 86400)).strftime("%Y-%m-%d %H:%M:%S")
    command = [args.helios_python, str((out / "helios_driver.py").resolve()), str(helios),
               str((out / "helios_input").resolve()), str((out / "helios_log").resolve()), args.policy, end]
    t0 = time.perf_counter()
    run = subprocess.run(command, cwd=helios, capture_output=True, text=True, env={**os.environ, "TZ": "UTC"})
    helios_s = time.perf_counter() - t0
    (out / "helios.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        print(f"Helios's simulator failed (exit {run.returncode}); its output: {out / 'helios.log'}", file=sys.stderr)
        return 1
    simulate_s = float(run.stdout.split("HELIOS_SIMULATE_S")[-1].split()[0])
    name = helios_vc_name(args.vc)  # Helios names the VC's log folder and files after it
    log = pd.read_csv(out / "helios_log" / name / f"{args.policy}_consolidate_{name}_log.csv")
    theirs = helios_times(log, len(submit))
    # Helios sorts its jobs by submission with pandas' default (unstable) sort; its log lists
    # them in its order: same-second jobs it reordered would be queued in another order
    if not (np.diff(log.jobname.to_numpy()) > 0).all():
        print("warning: Helios reordered jobs submitted on the same second (its log's jobname order)", file=sys.stderr)

    t0 = time.perf_counter()
    frame, records = evaluate.run_scheduler(scheduler, config, ep.params, ep.jobs, ep.env_keys, ep.max_steps)
    jaxsched_s = time.perf_counter() - t0
    if not (frame["done"] >= 1).all() or frame["never_started"].sum() > 0:
        print(f"warning: in jaxsched {int(frame['never_started'].sum())} jobs never started (step cap "
              f"{ep.max_steps} decisions)", file=sys.stderr)
    ours_start = np.asarray(records["start_s"], np.float64)[0][valid]
    ours_end = np.asarray(records["end_s"], np.float64)[0][valid]
    # a gang's other nodes ([J, max_span - 1], -1: none; a placeholder when max_span is 1)
    span_node = np.asarray(records["span_node"])[0]
    other_nodes = (span_node[valid] >= 0).sum(-1) if span_node.shape[0] == len(valid) else 0
    n = len(submit)
    ours_start[~np.isfinite(ours_start)] = np.nan  # never started
    ours_end[~np.isfinite(ours_start) | ~np.isfinite(ours_end)] = np.nan

    table = pd.DataFrame({"job": np.arange(n), "num_gpus": gpus, "submit_s": submit, "duration_s": duration,
                          "helios_start_s": theirs.start_s.to_numpy(), "helios_end_s": theirs.end_s.to_numpy(),
                          "jaxsched_start_s": ours_start, "jaxsched_end_s": ours_end,
                          "helios_nodes": helios_node_counts(log.set_index("jobname").nodes.reindex(np.arange(n))),
                          "jaxsched_nodes": np.where(np.isfinite(ours_start), 1 + other_nodes, 0)})
    table.to_csv(out / "per_job.csv", index=False)
    h = schedule_stats(submit, table.helios_start_s, table.helios_end_s)
    j = schedule_stats(submit, ours_start, ours_end)
    starts = agreement(table.helios_start_s, ours_start)
    ends = agreement(table.helios_end_s, ours_end)
    both = agreement(np.maximum(np.abs(table.helios_start_s - ours_start), np.abs(table.helios_end_s - ours_end)),
                     np.zeros(n))
    first = first_difference(table)
    small = table.num_gpus <= GPUS_PER_NODE  # Helios puts these on one node; jaxsched may spread them
    split = {side: int((small & (table[f"{side}_nodes"] > 1)).sum()) for side in ("helios", "jaxsched")}
    replay = "native" if args.replay == "native" else f"load {args.load:g}"
    summary = pd.DataFrame([{
        "vc": args.vc, "replay": replay, "policy": args.policy, "jaxsched_scheduler": scheduler,
        "gang_rule": args.gang_rule, "jobs": n,
        **{f"helios_{k}": v for k, v in h.items()}, **{f"jaxsched_{k}": v for k, v in j.items()},
        "same_start": starts["same"], "same_end": ends["same"], "same_start_and_end": both["same"],
        "within_1s": both["within_1s"], "first_differing_job": -1 if first is None else int(first.job),
        "helios_small_jobs_spread": split["helios"], "jaxsched_small_jobs_spread": split["jaxsched"],
        "helios_wall_s": round(helios_s, 1), "helios_simulate_s": simulate_s, "jaxsched_wall_s": round(jaxsched_s, 1)}])
    summary.to_csv(out / "summary.csv", index=False)

    print(f"Helios {args.policy} vs jaxsched {scheduler}, VC {args.vc}, {replay}, {n} jobs:")
    for name, s in (("Helios", h), ("jaxsched", j)):
        print(f"  {name:8s}: mean JCT {s['mean_jct_s']:.1f} s, mean queueing {s['mean_queue_s']:.1f} s, "
              f"makespan {s['makespan_s']:.0f} s ({s['jobs']} jobs ended)")
    print(f"  same second: start {starts['same']}/{n}, end {ends['same']}/{n}, both {both['same']}/{n}; "
          f"within 1 s: {both['within_1s']}/{n}")
    if first is not None:
        print(f"  {n - both['same']} jobs differ; the first: {first.to_dict()}")
    print(f"  jobs of at most {GPUS_PER_NODE} GPUs spread over several nodes: Helios {split['helios']}, "
          f"jaxsched {split['jaxsched']}")
    print(f"  time: Helios {helios_s:.1f} s ({simulate_s:.1f} s simulating), jaxsched {jaxsched_s:.1f} s "
          f"(compile included); wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
