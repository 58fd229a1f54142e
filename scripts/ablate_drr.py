"""Ablation of DRR's ideas: train DRR with each idea switched off in turn (and all off), then
evaluate every variant and the baseline heuristics (FGD, fgd-window) on the same held-out
episodes; one table and one plot.

    python scripts/ablate_drr.py --config configs/drr_64.toml --out results/drr_ablation

Variants: full (the config), no-imitation, no-dynamic-entropy, no-advantage-adjustment,
no-rescheduling, no-attention, all-off (the four ideas off; attention kept), and first-job
(the job at hand the first window job that fits, not fgd-window's: what the project's own
choice of job buys, docs/drr.md "Decision"). The heuristics in ``--baselines`` (FGD and
fgd-window) play the same episodes. Each trains in
its own folder ``<out>/runs/<variant>`` with checkpoints, so a rerun resumes where it
stopped (``--set`` changes every variant, e.g. ``--set train.total_updates=200`` for a
short run). Writes ``<out>/ablation.md`` (mean, 95% CI, and the paired difference from the
full agent per metric), ``ablation.csv`` (per episode), ``ablation.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from jaxsched import compile_cache, report
from jaxsched.devices import configure_cpu

VARIANTS = {
    "full": {},
    "no-imitation": {"use_imitation": False},
    "no-dynamic-entropy": {"use_dynamic_entropy": False},
    "no-advantage-adjustment": {"use_advantage_adjustment": 0.0},
    "no-rescheduling": {"use_rescheduling": False},
    "no-attention": {"use_attn": False},
    "all-off": {"use_imitation": False, "use_dynamic_entropy": False, "use_advantage_adjustment": 0.0,
                "use_rescheduling": False},
    "first-job": {"job_at_hand": "first"},
}
METRICS = ("frag_rate", "gpu_alloc", "jct_mean", "queue_delay_mean")


def paired(frame: pd.DataFrame, metric: str, base: str) -> dict:
    """{variant: (mean difference from ``base``, 95% half-width)} over the same episodes."""
    ref = frame[frame.variant == base].set_index("episode")[metric]
    out = {}
    for name, group in frame.groupby("variant", sort=False):
        out[name] = report.paired_difference(group.set_index("episode")[metric], ref)
    return out


def main(argv=None) -> int:
    configure_cpu()
    from jaxsched import train as train_lib

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/drr_64.toml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    parser.add_argument("--out", default="results/drr_ablation")
    parser.add_argument("--baselines", default="fgd,fgd-window", help="comma-separated registered heuristics")
    parser.add_argument("--quiet", action="store_true")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compile_cache.enable_from_args(args)
    out = Path(args.out)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        print(f"error: unknown variants {unknown}; known: {list(VARIANTS)}", file=sys.stderr)
        return 2
    from jaxsched.policies import REGISTRY
    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    unknown = [b for b in baselines if b not in REGISTRY]
    if unknown:
        print(f"error: unknown baselines {unknown}; known: {list(REGISTRY)}", file=sys.stderr)
        return 2
    try:
        base_run = train_lib.load(args.config, args.set)
    except (train_lib.DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if base_run.agent.kind != "drr":
        print(f"error: {args.config} trains {base_run.agent.kind!r}, not DRR", file=sys.stderr)
        return 2
    frames, timings = [], {}
    for name in names:
        run = dataclasses.replace(base_run, agent=dataclasses.replace(base_run.agent, **VARIANTS[name]))
        start = time.perf_counter()
        print(f"== {name}: training", flush=True)
        folder = out / "runs" / name
        trained = train_lib.train(run, folder, resume=train_lib.has_checkpoint(folder), show_progress=not args.quiet)
        play = train_lib.agent_episodes(run.base, trained.trainer.scheduler)
        frame = pd.DataFrame(play(trained.selection.params))
        frame.insert(0, "episode", np.arange(len(frame)))
        frame.insert(0, "variant", name)
        frames.append(frame)
        timings[name] = time.perf_counter() - start
        print(f"   {name}: mean JCT {frame.jct_mean.mean():,.0f} s, fragmentation rate "
              f"{frame.frag_rate.mean():.4f}, GPU allocation {frame.gpu_alloc.mean():.4f} "
              f"({timings[name]:.0f} s)", flush=True)
    from jaxsched import evaluate as ev, experiment
    from jaxsched.policies import get
    nodes = experiment.build_nodes(base_run.base)
    jobs, env_params, max_steps, env_keys, _ = experiment.episodes(base_run.base, nodes)
    for name in baselines:
        result, _ = ev.run_scheduler(get(name), base_run.base, env_params, jobs, env_keys, max_steps)
        frames.append(result.drop(columns=["scheduler"]).assign(variant=name)[frames[0].columns])
    frame = pd.concat(frames, ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "ablation.csv", index=False)

    base = "full" if "full" in names else names[0]
    diffs = {m: paired(frame, m, base) for m in METRICS}
    lines = [f"Command: `python scripts/ablate_drr.py --config {args.config}"
             + "".join(f" --set {s}" for s in args.set) + f" --out {args.out}`", "",
             f"{len(frame[frame.variant == base])} held-out episodes ([eval] of the config); "
             f"difference from `{base}`, paired by episode, with its 95% CI.", "",
             "| variant | " + " | ".join(f"{m} | vs {base}" for m in METRICS) + " |",
             "|---|" + "---:|---|" * len(METRICS)]
    for name, group in frame.groupby("variant", sort=False):
        cells = []
        for m in METRICS:
            d, h = diffs[m][name]
            cells += [f"{group[m].mean():.4g}", "" if name == base else f"{d:+.4g} ± {h:.2g}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    (out / "ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.2 * len(METRICS), 3.6))
    order = list(frame.variant.unique())
    for ax, m in zip(axes, METRICS):
        means = [frame[frame.variant == v][m].mean() for v in order]
        err = [1.96 * frame[frame.variant == v][m].std(ddof=1) / math.sqrt(max((frame.variant == v).sum(), 1))
               for v in order]
        ax.bar(order, means, yerr=err, color=["tab:red" if v == base else "tab:gray" if v in baselines else "tab:blue"
                                              for v in order])
        ax.set(title=m)
        ax.tick_params(axis="x", rotation=60)
    fig.tight_layout()
    fig.savefig(out / "ablation.png", dpi=120)
    print(f"wrote {out}/ablation.md, ablation.csv, ablation.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
