"""How the simulator's cost grows with episodes, nodes, jobs per episode and devices.

Each axis is varied alone around a base point (64 nodes, 500 jobs per episode, 256 episodes,
first-fit, one device, whole-loop kernels: ``devices.configure_cpu``); every point is one
compiled rollout timed on its second run (jaxsched.benchmark).
The device axis runs in subprocesses with ``--xla_force_host_platform_device_count`` (host
devices share the same CPU cores, so on a 2-core machine more than 2 devices cannot help;
on a multi-GPU host the same code splits episodes across GPUs).

    python scripts/scaling_study.py --quick          # a few minutes on 2 cores
    python scripts/scaling_study.py                  # the full grid

Writes results/scaling/scaling.csv, scaling.json and scaling.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from jaxsched import compile_cache  # noqa: E402
from jaxsched.benchmark import bench_jax, make_setup  # noqa: E402
from jaxsched.devices import CORES_FLAG, configure_cpu  # noqa: E402

BASE = {"nodes": 64, "jobs": 500, "batch": 256, "scheduler": "first-fit"}


def point(nodes: int, jobs: int, batch: int, scheduler: str, shard: bool = False) -> dict:
    _, workload, _, params, env_config = make_setup(nodes, jobs, running_capacity=512)
    result, _ = bench_jax(params, workload, env_config, scheduler, batch, 3 * jobs + 100, shard)
    return {"nodes": nodes, "jobs": jobs, "batch": batch, "scheduler": scheduler,
            "devices": len(jax.devices()), **result}


def device_point(devices: int, batch: int) -> dict:
    """One sharded measurement in a fresh process with ``devices`` host devices."""
    code = ("import json, sys; sys.path.insert(0, 'scripts'); from scaling_study import point; "
            f"print(json.dumps(point({BASE['nodes']}, {BASE['jobs']}, {batch}, 'first-fit', shard=True)))")
    env = dict(os.environ, XLA_FLAGS=f"{CORES_FLAG}={devices} {os.environ.get('XLA_FLAGS', '')}",
               JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="results/scaling")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compile_cache.enable_from_args(args)
    configure_cpu(every_core=False)  # one device here; the device axis sets its own count
    if args.quick:
        axes = {"batch": [1, 16, 256, 1024], "nodes": [32, 64, 128, 1213],
                "jobs": [100, 500, 2000], "devices": [1, 2]}
    else:
        axes = {"batch": [1, 4, 16, 64, 256, 1024, 4096], "nodes": [32, 64, 128, 256, 512, 1213],
                "jobs": [100, 300, 1000, 3000], "devices": [1, 2, 4]}
    rows = []
    for axis, values in axes.items():
        for value in values:
            if axis == "devices":
                row = device_point(value, 1024)
            else:
                settings = {**BASE, axis: value}
                row = point(settings["nodes"], settings["jobs"], settings["batch"], settings["scheduler"])
            row["axis"] = axis
            row["decisions_per_s_per_device"] = row["decisions_per_s"] / row["devices"]
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("axis", "nodes", "jobs", "batch", "devices",
                                                  "decisions_per_s", "compile_s")}), flush=True)
    frame = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "scaling.csv", index=False)
    (out / "scaling.json").write_text(json.dumps(
        {"command": "python scripts/scaling_study.py " + " ".join(argv or sys.argv[1:]),
         "base": BASE, "rows": rows}, indent=1))
    fig, axs = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, axis in zip(axs, axes):
        part = frame[frame["axis"] == axis]
        y = "decisions_per_s_per_device" if axis == "devices" else "decisions_per_s"
        ax.plot(part[axis], part[y], marker="o")
        ax.set_xscale("log" if axis != "devices" else "linear")
        ax.set_xlabel({"batch": "episodes in a batch", "nodes": "nodes", "jobs": "jobs per episode",
                       "devices": "host devices (sharded)"}[axis])
        ax.set_ylabel("decisions / s" + (" per device" if axis == "devices" else ""))
        ax.grid(alpha=0.3)
    fig.suptitle(f"jaxsched scaling (base: {BASE}) on {jax.devices()[0].platform}")
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=90)
    print(frame[["axis", "nodes", "jobs", "batch", "devices", "decisions_per_s"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
