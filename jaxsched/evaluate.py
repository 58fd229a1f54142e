"""Evaluate schedulers side by side on the same episodes: ``python -m jaxsched.evaluate``.

Every scheduler runs over the same batch of episodes (same workloads, same tie-break keys)
in one jitted, vmapped rollout per batch. Writes, under ``eval.out_dir``:
``per_episode.csv``, ``summary.csv``, ``summary.md`` and ``config.json``; prints the table.

Examples::

    python -m jaxsched.evaluate                                  # built-in synthetic workload
    python -m jaxsched.evaluate --config configs/default.toml --set eval.episodes=128
    python -m jaxsched.evaluate --set workload.source=openb \\
        --set workload.trace=../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv
    python -m jaxsched.evaluate --list                           # the registered schedulers
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from tqdm import tqdm

from jaxsched import cluster as cl
from jaxsched import config as cfg_lib
from jaxsched import policies, report
from jaxsched.errors import DataError
from jaxsched.rollout import rollout
from jaxsched.sim.env import ClusterEnv
from jaxsched.types import EnvParams, to_device
from jaxsched.workload import alibaba, classes, synthetic


def build_nodes(config: cfg_lib.Config) -> cl.NodeTable:
    """The cluster's node table from the config (node list, PAI machines, or a preset)."""
    c = config.cluster
    if c.node_list:
        return cl.load_openb_nodes(c.node_list)
    if c.pai_machines:
        return cl.load_pai_machines(c.pai_machines)
    return cl.preset(c.preset_nodes)


def episode_keys(seed: int, num_episodes: int, stream: int):
    """[E] keys; episode i's key depends only on (seed, stream, i), not on batching."""
    base = jax.random.fold_in(jax.random.key(seed), stream)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_episodes))


def build_workload(config: cfg_lib.Config, nodes: cl.NodeTable):
    """Jobs for every episode ([E, J] arrays), FGD's target workload, and a report dict."""
    w, episodes = config.workload, config.eval.episodes
    if w.source == "synthetic":
        syn = w.synthetic
        if syn.target_load is not None and syn.cluster_gpus is None:
            syn = syn.replace(cluster_gpus=nodes.total_gpus)
        syn.validate()
        keys = episode_keys(config.eval.seed, episodes, stream=0)
        jobs = jax.vmap(lambda k: synthetic.generate(k, syn))(keys)
        # FGD's target workload of the synthetic mix: the class table, each row repeated by weight.
        rows = np.repeat(np.asarray(syn.job_classes), np.asarray(syn.job_classes)[:, 4], axis=0)
        frag = classes.target_workload(rows[:, 2], rows[:, 1], rows[:, 0], [""] * len(rows))
        info = {"source": "synthetic", "jobs_per_episode": syn.num_jobs,
                "expected_offered_load": synthetic.expected_offered_load(syn, nodes.total_gpus)}
        return jobs, frag, info
    if w.source == "openb":
        if not w.trace:
            raise DataError("config", None, "workload.trace", "source 'openb' needs a pod-list path")
        trace = alibaba.load_openb_pods(w.trace, mode="dynamic", strict=w.strict)
        unschedulable, names = trace.check_schedulable(nodes, strict=w.strict)
        windows = alibaba.trace_windows(trace, w.window_jobs, episodes, config.eval.seed)
        compressed = [alibaba.compress_to_load(win, nodes.total_gpus, w.target_load) for win in windows]
        jobs = jax.tree.map(lambda *x: np.stack(x), *[c.to_jobs(pad_to=w.window_jobs) for c, _ in compressed])
        factors = [f for _, f in compressed]
        info = {"source": "openb", "trace": w.trace, "jobs_per_episode": w.window_jobs,
                "left_out_pending": trace.report.get("left_out_pending", 0),
                "unschedulable_jobs": unschedulable, "target_load": w.target_load,
                "compress_factor_min": min(factors), "compress_factor_max": max(factors)}
        return to_device(jobs), trace.frag_classes(), info
    raise DataError("config", None, "workload.source", f"must be 'synthetic' or 'openb', got {w.source!r}")


def run_scheduler(name: str, config: cfg_lib.Config, params: EnvParams, jobs, env_keys,
                  max_steps: int, progress=None) -> pd.DataFrame:
    """Per-episode metrics of one registered scheduler over all episodes (batched)."""
    sched = policies.get(name)
    env = ClusterEnv(sched.env_config(config.env))  # its GPU rule and queue order
    run = jax.jit(lambda p, j, k: rollout(env, sched.policy, None, p, j, k, max_steps)[1])
    episodes, batch = config.eval.episodes, config.eval.batch_size
    frames = []
    for lo in range(0, episodes, batch):
        hi = min(lo + batch, episodes)
        chunk = jax.tree.map(lambda x: x[lo:hi], jobs)
        metrics = jax.device_get(run(params, chunk, env_keys[lo:hi]))
        frame = pd.DataFrame({k: np.asarray(v) for k, v in metrics.items()})
        frame.insert(0, "episode", np.arange(lo, hi))
        frames.append(frame)
        if progress is not None:
            progress.update(hi - lo)
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "scheduler", name)
    return out


def evaluate(config: cfg_lib.Config, show_progress: bool = True):
    """Run every configured scheduler; returns (per-episode frame, summary frame, info)."""
    nodes = build_nodes(config)
    jobs, frag, info = build_workload(config, nodes)
    params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    max_steps = config.eval.max_steps or 3 * jobs.num_jobs + 100
    env_keys = episode_keys(config.eval.seed, config.eval.episodes, stream=1)
    total = config.eval.episodes * len(config.eval.schedulers)
    frames, timings = [], {}
    with tqdm(total=total, desc="episodes", unit="ep", disable=not show_progress) as bar:
        for name in config.eval.schedulers:
            start = time.perf_counter()
            frames.append(run_scheduler(name, config, params, jobs, env_keys, max_steps, bar))
            timings[name] = round(time.perf_counter() - start, 3)
    per_episode = pd.concat(frames, ignore_index=True)
    info.update(nodes=len(nodes), gpus=nodes.total_gpus, episodes=config.eval.episodes,
                max_steps=max_steps, seconds_per_scheduler=timings)
    return per_episode, report.summarize(per_episode), info


def write_outputs(out_dir: Path, config, per_episode, summary, info) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    per_episode.to_csv(out_dir / "per_episode.csv", index=False)
    summary.to_csv(out_dir / "summary.csv", index=False)
    (out_dir / "summary.md").write_text(report.markdown_table(summary))
    (out_dir / "config.json").write_text(json.dumps(
        {"config": cfg_lib.to_dict(config), "info": info}, indent=2, default=str))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxsched.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="TOML run config (default: built-in defaults)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. env.window=4 (repeatable)")
    parser.add_argument("--schedulers", help="comma-separated registry names")
    parser.add_argument("--episodes", type=int)
    parser.add_argument("--out", help="output folder (eval.out_dir)")
    parser.add_argument("--list", action="store_true", help="list the schedulers and exit")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.list:
        for s in policies.REGISTRY.values():
            print(f"{s.name:16s} GPU rule {s.gpu_rule:10s} {s.description}")
        return 0
    overrides = list(args.set)
    if args.schedulers:
        overrides.append("eval.schedulers=" + json.dumps(args.schedulers.split(",")))
    if args.episodes is not None:
        overrides.append(f"eval.episodes={args.episodes}")
    if args.out:
        overrides.append(f"eval.out_dir={json.dumps(args.out)}")
    try:
        config = cfg_lib.load(args.config, overrides)
        for name in config.eval.schedulers:
            policies.get(name)
        per_episode, summary, info = evaluate(config, show_progress=not args.quiet)
    except (DataError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out_dir = Path(config.eval.out_dir)
    write_outputs(out_dir, config, per_episode, summary, info)
    print(f"{info['episodes']} episodes x {len(config.eval.schedulers)} schedulers on "
          f"{info['nodes']} nodes ({info['gpus']} GPUs), workload: {info['source']}")
    print(report.markdown_table(summary))
    print(f"wrote {out_dir}/per_episode.csv, summary.csv, summary.md, config.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
