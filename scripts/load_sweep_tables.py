"""Markdown tables of a load sweep (``evaluate --sweep load``) by job size, with preemptions.

    python scripts/load_sweep_tables.py results/philly/preemptive_b436b2

Reads the sweep folder's ``sweep.csv`` (mean and 95% CI per scheduler and load) and
``sweep_per_episode.csv``, and writes ``tables.md`` beside them:

- per scheduler and load: offered load, work capacity in use, mean JCT (h, ± 95% CI) over all
  measured jobs and by job size (1 GPU, 2-8, over 8), mean queueing delay (min; first start
  minus arrival) by size, preemptions per measured job, GPU-hours lost to restarts per
  episode, and the two backlog growths (GPU work waiting to start or to resume; queued jobs,
  preempted ones included);
- the maximum sustainable load per scheduler by the sweep's test (``backlog_work_growth``,
  ``report.max_sustainable_load``), and by the same test on ``backlog_growth`` (the queue's
  job count), which also sees jobs waiting after a preemption.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from jaxsched import report

SIZES = ("", "_small", "_2to8", "_over8")  # all measured jobs, then by size (metrics.job_sizes)


def size_table(sweep: pd.DataFrame) -> str:
    """One row per scheduler and load of ``sweep.csv``'s frame (markdown)."""
    lines = ["| scheduler | ρ | offered | work_alloc | mean JCT (h): all | 1 GPU | 2-8 | over 8 "
             "| mean queueing (min): all | 1 GPU | 2-8 | over 8 | preemptions per job "
             "| restart GPU-h per episode | backlog work growth | backlog job growth |",
             "|---|---:|" + "---:|" * 14]
    for _, r in sweep.iterrows():
        jct = [f"{r['jct_mean'] / 3600:.2f} ± {r['jct_mean_ci95'] / 3600:.2f}"]
        jct += [f"{r['jct_mean' + s] / 3600:.2f}" for s in SIZES[1:]]
        delay = [f"{r['queue_delay_mean' + s] / 60:.1f}" for s in SIZES]
        cells = [r["scheduler"], f"{r['load']:g}", f"{r['offered_load']:.3f}", f"{r['work_alloc']:.3f}",
                 *jct, *delay, f"{r['preemptions_per_job']:.3f}", f"{r['restart_gpu_s'] / 3600:.1f}",
                 f"{r['backlog_work_growth']:.3f}", f"{r['backlog_growth']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a load sweep's output folder")
    folder = parser.parse_args(argv).folder
    sweep = pd.read_csv(folder / "sweep.csv")
    per_episode = pd.read_csv(folder / "sweep_per_episode.csv")
    by_jobs = per_episode.assign(backlog_work_growth=per_episode["backlog_growth"])
    text = "\n\n".join([
        "## By job size and load\n\n" + size_table(sweep),
        "## Maximum sustainable load: backlog of GPU work waiting (to start, or to resume after a preemption)\n\n"
        + report.max_load_table(report.max_sustainable_load(per_episode)),
        "## Maximum sustainable load: backlog of queued jobs, preempted ones included\n\n"
        + report.max_load_table(report.max_sustainable_load(by_jobs)),
    ])
    (folder / "tables.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
