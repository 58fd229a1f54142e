"""Benchmark: scheduling decisions per second of the JAX env vs the reference simulator.

For every (cluster size, scheduler, batch size): one jitted rollout of a batch of synthetic
episodes (openb-like mix at offered load 0.9). The first call is timed as compile + run,
a second call on new keys as the run alone. In the same process, the same workloads run
through ``jaxsched/reference.py`` one episode at a time (capped at ``--ref-decisions``
decisions per cluster size and scheduler), so speed-ups are ratios measured side by side.
A decision is one env step of an episode that has not ended (padding steps are not counted).

    python scripts/bench.py --quick                 # about a minute
    python scripts/bench.py                         # the full grid (batch 1..4096)
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python scripts/bench.py --quick --shard

Writes ``results/bench/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

from jaxsched import cluster as cl
from jaxsched import paths, policies, reference
from jaxsched.rollout import rollout, sharded_rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, to_device
from jaxsched.workload import classes, synthetic

# DRR's published mean inter-arrival times; other sizes scale 8 s at 64 nodes.
INTERARRIVAL_S = {32: 16.0, 64: 8.0, 128: 3.8}


def make_nodes(num_nodes: int) -> cl.NodeTable:
    """The openb-mix preset; 1213 = the real openb GPU-node list when the data is present."""
    data = paths.data_dir()
    if num_nodes == 1213 and data is not None:
        path = data / "alibaba-gpu-v2023" / "openb_node_list_gpu_node.csv"
        if path.exists():
            return cl.load_openb_nodes(path)
    return cl.preset(num_nodes)


def make_setup(num_nodes: int, jobs_per_episode: int, running_capacity: int):
    nodes = make_nodes(num_nodes)
    workload = synthetic.SyntheticConfig(
        num_jobs=jobs_per_episode, target_load=0.9, cluster_gpus=nodes.total_gpus,
        mean_interarrival_s=INTERARRIVAL_S.get(num_nodes, 8.0 * 64 / num_nodes))
    rows = np.repeat(np.asarray(workload.job_classes), np.asarray(workload.job_classes)[:, 4], axis=0)
    frag = classes.target_workload(rows[:, 2], rows[:, 1], rows[:, 0], [""] * len(rows))
    params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    env_config = EnvConfig(running_capacity=running_capacity)
    return nodes, workload, frag, params, env_config


def state_bytes_per_episode(state, batch: int) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(state)) // batch


def bench_jax(params, workload, env_config, scheduler: str, batch: int, max_steps: int, shard: bool):
    sched = policies.get(scheduler)
    env = ClusterEnv(env_config.__class__(**{**env_config.__dict__, "gpu_rule": sched.gpu_rule}))
    run_fn = sharded_rollout if shard else rollout
    gen = jax.jit(jax.vmap(lambda k: synthetic.generate(k, workload)))
    run = jax.jit(lambda p, j, k: run_fn(env, sched.policy, None, p, j, k, max_steps))

    keys = jax.random.split(jax.random.key(0), batch)
    jobs = jax.block_until_ready(gen(keys))
    start = time.perf_counter()
    compiled = run.lower(params, jobs, keys).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(params, jobs, keys))  # warm-up run
    start = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(params, jobs, keys))
    run_s = time.perf_counter() - start
    decisions = int(metrics["decisions"].sum())
    jobs_done = int((metrics["finished"] + metrics["failed"] + metrics["rejected"]).sum())
    return {
        "compile_s": round(compile_s, 3), "run_s": round(run_s, 4),
        "decisions": decisions, "decisions_per_s": decisions / run_s,
        "jobs_per_s": jobs_done / run_s, "episodes_done": int(metrics["done"].sum()),
        "state_bytes_per_episode": state_bytes_per_episode(state, batch),
    }, jax.tree.map(lambda x: np.asarray(x[:2]), state.jobs)


def bench_reference(nodes, jobs_np, frag, env_config, scheduler: str, cap: int):
    """Reference decisions per second over a few episodes, at most ``cap`` decisions."""
    config = reference.RefConfig(window=env_config.window, queue_capacity=env_config.queue_capacity,
                                 running_capacity=env_config.running_capacity)
    cluster = cl.to_cluster(nodes)
    decisions, elapsed = 0, 0.0
    for i in range(jobs_np.arrival_s.shape[0]):
        one = jax.tree.map(lambda x: x[i], jobs_np)
        start = time.perf_counter()
        sim = reference.ReferenceSim(cluster, one, frag, config)
        while not sim.done and decisions < cap:
            sim.step(reference.heuristic_action(sim, scheduler))
            decisions += 1
        elapsed += time.perf_counter() - start
        if decisions >= cap:
            break
    return {"decisions": decisions, "run_s": round(elapsed, 3), "decisions_per_s": decisions / elapsed}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64 nodes, batch 1/64/1024, ~1 minute")
    parser.add_argument("--nodes", type=int, nargs="+", default=[32, 64, 128, 1213])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256, 1024, 4096])
    parser.add_argument("--schedulers", nargs="+", default=["first-fit", "best-fit", "fgd"])
    parser.add_argument("--jobs", type=int, default=500, help="jobs per episode")
    parser.add_argument("--running-capacity", type=int, default=512)
    parser.add_argument("--ref-decisions", type=int, default=3000)
    parser.add_argument("--shard", action="store_true", help="split batches across local devices")
    parser.add_argument("--name", default=None, help="output file stem (default: bench or bench_quick)")
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.batches = [64], [1, 64, 1024]
    schedulers = [s for s in args.schedulers if s in policies.REGISTRY]
    rows = []
    for num_nodes in args.nodes:
        nodes, workload, frag, params, env_config = make_setup(num_nodes, args.jobs, args.running_capacity)
        max_steps = 3 * args.jobs + 100
        for scheduler in schedulers:
            ref = None
            for batch in args.batches:
                result, sample_jobs = bench_jax(params, workload, env_config, scheduler, batch,
                                                max_steps, args.shard)
                if ref is None and scheduler in ("first-fit", "best-fit"):
                    ref = bench_reference(nodes, sample_jobs, frag, env_config, scheduler,
                                          args.ref_decisions)
                row = {"nodes": num_nodes, "gpus": nodes.total_gpus, "scheduler": scheduler,
                       "batch": batch, **result,
                       "reference_decisions_per_s": ref["decisions_per_s"] if ref else None}
                row["speedup_vs_reference"] = (row["decisions_per_s"] / ref["decisions_per_s"]
                                               if ref else None)
                rows.append(row)
                print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}),
                      flush=True)
    meta = {"devices": [str(d) for d in jax.devices()], "platform": platform.platform(),
            "processor": platform.processor(), "jax": jax.__version__, "shard": args.shard,
            "jobs_per_episode": args.jobs, "running_capacity": args.running_capacity,
            "command": "python scripts/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or ("bench_quick" if args.quick else "bench")
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"Command: `{meta['command']}` — devices: {meta['devices']}, JAX {meta['jax']}", "",
             "| nodes | scheduler | batch | decisions/s | jobs/s | vs reference | compile s | state bytes/episode |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['speedup_vs_reference']:.0f}x" if r["speedup_vs_reference"] else "n/a"
        lines.append(f"| {r['nodes']} | {r['scheduler']} | {r['batch']} | {r['decisions_per_s']:,.0f} | "
                     f"{r['jobs_per_s']:,.0f} | {ratio} | {r['compile_s']} | {r['state_bytes_per_episode']:,} |")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
