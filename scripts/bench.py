"""Benchmark: scheduling decisions per second of the JAX env vs the reference simulator.

For every (cluster size, scheduler, batch size): one jitted rollout of a batch of synthetic
episodes (openb-like mix at offered load 0.9). The first call is timed as compile + run,
a second call on new keys as the run alone. In the same process, the same workloads run
through ``jaxsched/reference.py`` one episode at a time (capped at ``--ref-decisions``
decisions per cluster size and scheduler), so speed-ups are ratios measured side by side.
A decision is one env step of an episode that has not ended (padding steps are not counted).

    python scripts/bench.py --quick                 # about a minute
    python scripts/bench.py                         # the full grid (batch 1..4096)
    python scripts/bench.py --quick --no-shard      # one XLA device (one core) only
    python scripts/bench.py --quick --no-frag       # fragmentation upkeep off (env and reference)

Writes ``results/bench/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import jax

from jaxsched import compile_cache
from jaxsched.devices import configure_cpu
from jaxsched import policies
from jaxsched.benchmark import bench_jax, bench_reference, make_setup

def main(argv=None) -> int:
    configure_cpu()  # XLA flags for the CPU, before JAX starts (jaxsched/devices.py)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64 nodes, batch 1/64/1024, ~1 minute")
    parser.add_argument("--nodes", type=int, nargs="+", default=[32, 64, 128, 1213])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256, 1024, 4096])
    parser.add_argument("--schedulers", nargs="+", default=["first-fit", "best-fit", "fgd"])
    parser.add_argument("--jobs", type=int, default=500, help="jobs per episode")
    parser.add_argument("--running-capacity", type=int, default=512)
    parser.add_argument("--ref-decisions", type=int, default=3000)
    parser.add_argument("--no-shard", dest="shard", action="store_false",
                        help="one device only (default: episodes split across one host device per core)")
    parser.add_argument("--no-frag", dest="track_frag", action="store_false",
                        help="EnvConfig.track_frag=False (and the reference's): no per-event FGD "
                             "fragmentation upkeep; frag metrics NaN. No benchmarked policy reads it")
    parser.add_argument("--name", default=None, help="output file stem (default: bench or bench_quick)")
    parser.add_argument("--out", default="results/bench")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    cache = compile_cache.enable_from_args(args)
    if args.quick:
        args.nodes, args.batches = [64], [1, 64, 1024]
    schedulers = [s for s in args.schedulers if s in policies.REGISTRY]
    rows = []
    for num_nodes in args.nodes:
        nodes, workload, frag, params, env_config = make_setup(num_nodes, args.jobs, args.running_capacity,
                                                                   args.track_frag)
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
            "processor": platform.processor(), "jax": jax.__version__,
            "compile_cache": str(cache) if cache else "off", "shard": args.shard, "track_frag": args.track_frag,
            "jobs_per_episode": args.jobs, "running_capacity": args.running_capacity,
            "command": "python scripts/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or ("bench_quick" if args.quick else "bench")
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [f"Command: `{meta['command']}` — devices: {meta['devices']}, JAX {meta['jax']}, compile cache "
             f"{'on (compile s: a cache read where the program was cached)' if cache else 'off'}", "",
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
