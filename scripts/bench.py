"""Benchmark: scheduling decisions per second of the JAX env vs the reference simulator.

For every (cluster size, scheduler, batch size): one jitted rollout of a batch of synthetic
episodes (openb-like mix at offered load 0.9), compiled ahead of time (timed apart;
``--compile-threads`` compiles a cluster size's programs side by side), then run ``--runs``
times with the last run timed (by default a warm-up, then the timed run). In the same process, the same workloads run
through ``jaxsched/reference/`` one episode at a time (capped at ``--ref-decisions``
decisions per cluster size and scheduler), so speed-ups are ratios measured side by side.
A decision is one env step of an episode that has not ended (padding steps are not counted).

    python scripts/bench.py --quick                 # about a minute
    python scripts/bench.py                         # the full grid (batch 1..4096)
    python scripts/bench.py --quick --no-shard      # one XLA device (one core) only
    python scripts/bench.py --quick --no-frag       # fragmentation upkeep off (env and reference)
    python scripts/bench.py --nodes 64 --batches 1024 16384 65536 --runs 1 --compile-threads 9 \
        --ref-decisions 0                           # a GPU (scripts/gpu_check.sh)

"program GiB" is the device memory XLA says the compiled rollout needs (arguments, outputs,
temporaries); a batch that needs more than the device has, or fails to allocate, is a row
marked "out of memory" and is not run.

Writes ``results/bench/<name>.json`` and ``.md`` (after every row).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax

from jaxsched import compile_cache
from jaxsched.devices import configure_cpu
from jaxsched import outputs, policies
from jaxsched.benchmark import (bench_reference, compile_program, device_bytes, lower_jax, make_setup, measure,
                                out_of_memory, program_bytes)

def main(argv=None) -> int:
    configure_cpu()  # XLA flags for the CPU, before JAX starts (jaxsched/devices.py)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64 nodes, batch 1/64/1024, ~1 minute")
    parser.add_argument("--nodes", type=int, nargs="+", default=[32, 64, 128, 1213])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256, 1024, 4096])
    parser.add_argument("--schedulers", nargs="+", default=["first-fit", "best-fit", "fgd"])
    parser.add_argument("--jobs", type=int, default=500, help="jobs per episode")
    parser.add_argument("--running-capacity", type=int, default=512)
    parser.add_argument("--ref-decisions", type=int, default=3000,
                        help="reference decisions per cluster size and scheduler (0: no reference)")
    parser.add_argument("--compile-threads", type=int, default=1,
                        help="programs compiled at a time (a GPU run: all of one cluster size at once)")
    parser.add_argument("--runs", type=int, default=2,
                        help="runs of each compiled rollout, the last timed (1: no warm-up run)")
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
    meta = {"devices": [str(d) for d in jax.devices()], "device_kind": jax.devices()[0].device_kind,
            "platform": platform.platform(), "processor": platform.processor(),
            "versions": outputs.package_versions(),
            "compile_cache": str(cache) if cache else "off", "shard": args.shard, "track_frag": args.track_frag,
            "jobs_per_episode": args.jobs, "running_capacity": args.running_capacity,
            "compile_threads": args.compile_threads, "runs": args.runs, "device_bytes": device_bytes(),
            "command": "python scripts/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or ("bench_quick" if args.quick else "bench")
    rows = []
    limit = device_bytes()
    for num_nodes in args.nodes:
        nodes, workload, frag, params, env_config = make_setup(num_nodes, args.jobs, args.running_capacity,
                                                                   args.track_frag)
        max_steps = 3 * args.jobs + 100
        points = [(s, b) for s in schedulers for b in args.batches]
        # Lower each point while the ones before it compile (XLA releases the GIL).
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, args.compile_threads)) as pool:
            pending = []
            for scheduler, batch in points:
                program = lower_jax(params, workload, env_config, scheduler, batch, max_steps, args.shard)
                pending.append((program, pool.submit(compile_program, program)))
                if args.compile_threads <= 1:
                    pending[-1][1].result()  # one at a time: compile seconds are each program's own
            compiled = [(program, future.result()) for program, future in pending]
        print(f"{num_nodes} nodes: {len(points)} programs traced and compiled in "
              f"{time.perf_counter() - started:.1f} s ({args.compile_threads} compile threads)", flush=True)
        ref = {}
        for program, (run, compile_s) in compiled:
            row = {"nodes": num_nodes, "gpus": nodes.total_gpus, "scheduler": program.scheduler,
                   "batch": program.batch, "compile_s": round(compile_s, 3), "program_bytes": program_bytes(run)}
            fits = not (row["program_bytes"] and limit and row["program_bytes"] > limit)  # else it cannot allocate
            result = None
            try:
                if fits:
                    result, sample_jobs = measure(run, program, args.runs)
            except Exception as err:  # noqa: BLE001 - an OOM is a result; anything else re-raised
                if not out_of_memory(err):
                    raise
            if result is None:
                row.update(error="out of memory", decisions_per_s=None)
            else:
                row.update(result)
                if (program.scheduler not in ref and program.scheduler in ("first-fit", "best-fit")
                        and args.ref_decisions > 0):
                    ref[program.scheduler] = bench_reference(nodes, sample_jobs, frag, env_config,
                                                             program.scheduler, args.ref_decisions)
            ref_rate = ref[program.scheduler]["decisions_per_s"] if program.scheduler in ref else None
            row["reference_decisions_per_s"] = ref_rate
            row["speedup_vs_reference"] = (row["decisions_per_s"] / ref_rate
                                           if ref_rate and row.get("decisions_per_s") else None)
            rows.append(row)
            print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}),
                  flush=True)
            write(out, stem, meta, rows, cache)  # after every row: a run cut short keeps what it measured
    print(markdown(meta, rows, cache))
    return 0


def write(out: Path, stem: str, meta: dict, rows: list, cache) -> None:
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / f"{stem}.md").write_text(markdown(meta, rows, cache))


def markdown(meta: dict, rows: list, cache) -> str:
    lines = [f"Command: `{meta['command']}` — devices: {meta['devices']} ({meta['device_kind']}), "
             f"JAX {meta['versions'].get('jax')}, compile cache "
             f"{'on (compile s: a cache read where the program was cached)' if cache else 'off'}"
             + (f"; {meta['compile_threads']} programs compiled at a time (compile s overlap)"
                if meta["compile_threads"] > 1 else "")
             + ("; one run per point, timed" if meta["runs"] == 1 else ""), "",
             "| nodes | scheduler | batch | decisions/s | jobs/s | vs reference | compile s | state bytes/episode "
             "| program GiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gib = f"{r['program_bytes'] / 2**30:.2f}" if r.get("program_bytes") else "n/a"
        if r.get("error"):
            lines.append(f"| {r['nodes']} | {r['scheduler']} | {r['batch']} | {r['error']} | | | {r['compile_s']} | | {gib} |")
            continue
        ratio = f"{r['speedup_vs_reference']:.0f}x" if r["speedup_vs_reference"] else "n/a"
        lines.append(f"| {r['nodes']} | {r['scheduler']} | {r['batch']} | {r['decisions_per_s']:,.0f} | "
                     f"{r['jobs_per_s']:,.0f} | {ratio} | {r['compile_s']} | {r['state_bytes_per_episode']:,} | {gib} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
