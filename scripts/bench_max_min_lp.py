"""Time las-perf's linear program (``jaxsched.max_min_lp.allocation``: Gavel's
heterogeneity-aware max-min fairness, solved by HiGHS on the host) against the number of jobs
in the system, on Gavel's cluster (36 V100 + 36 P100 + 36 K80) with jobs of Gavel's types and
sizes, as Gavel's Figure 12 times its policies. One solve per round and episode is what
las-perf adds to a round, so this is its cost per round.

Jobs: a uniform job type; one GPU each (``--single``) or Gavel's multi-GPU mix (1/2/4/8 GPUs,
70/10/15/5%, distributed types only above one GPU); the throughput of each on each GPU type
its speed there (spread over servers above one GPU, as on Gavel's one-GPU servers); shares the
water-filled max-min share of the 108 GPUs. Median of ``--trials`` solves per size, one
process, after a warm-up solve.

    python scripts/bench_max_min_lp.py --out results/gavel/lp_runtime.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from jaxsched import cluster as cl
from jaxsched import max_min_lp, reference
from jaxsched.workload import gavel

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUTS = ROOT.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json"
GPUS = {"V100": 36, "P100": 36, "K80": 36}
SIZES = (1, 2, 4, 8)
SIZE_P = (0.7, 0.1, 0.15, 0.05)


def problem(n: int, multi: bool, thr, rng):
    """(throughput [n, M], scale [n], share [n], workers [M]) of n jobs drawn as Gavel does."""
    m = len(cl.MODEL_NAMES)
    workers = np.zeros(m, np.int64)
    models = [cl.model_id(name) for name in GPUS]
    workers[models] = list(GPUS.values())
    scale = rng.choice(SIZES, n, p=SIZE_P) if multi else np.ones(n, np.int64)
    throughput = np.zeros((n, m), np.float32)
    distributed = [i for i, d in enumerate(thr.distributed) if d]
    for j, s in enumerate(scale):
        kind = rng.integers(len(thr.job_types)) if s == 1 else rng.choice(distributed)
        speeds = thr.speed(1)[kind] if s == 1 else gavel.spread_speed(thr, int(s))[kind]
        for model, name in zip(models, GPUS):
            throughput[j, model] = np.nan_to_num(speeds[thr.gpu_types.index(name.lower())])
    share = np.asarray(reference.max_min_shares([int(s) for s in scale], sum(GPUS.values())), np.float32)
    return throughput, scale, share, workers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default="32,64,128,256,512,1024,2048")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", help="markdown table to write (default: print only)")
    args = parser.parse_args(argv)
    if not THROUGHPUTS.exists():
        print(f"skipped: no {THROUGHPUTS} (Gavel's throughputs, ../shared/data/gavel)")
        return 0
    thr = gavel.load_throughputs(THROUGHPUTS)
    rng = np.random.default_rng(0)
    max_min_lp.allocation(*problem(8, False, thr, rng))  # warm-up (imports, HiGHS)
    rows = ["| jobs in the system | single-GPU jobs: s per solve | multi-GPU mix: s per solve |", "|---|---|---|"]
    for n in (int(x) for x in args.jobs.split(",")):
        cells = []
        for multi in (False, True):
            times = []
            for _ in range(args.trials):
                inputs = problem(n, multi, thr, rng)
                start = time.perf_counter()
                max_min_lp.allocation(*inputs)
                times.append(time.perf_counter() - start)
            cells.append(f"{statistics.median(times):.4f}")
        rows.append(f"| {n} | {cells[0]} | {cells[1]} |")
        print(rows[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join([
            "# las-perf's linear program: seconds per solve against jobs in the system",
            "", f"`python scripts/bench_max_min_lp.py --out {args.out}` (median of {args.trials} solves, "
            "HiGHS via scipy.optimize.linprog, one process, Gavel's 36 + 36 + 36 GPUs).", "", *rows, ""]))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
