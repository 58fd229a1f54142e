"""Where a decision's time goes: the same rollout with one cost component shrunk at a time.

Side by side in one process (64 nodes, 500 jobs per episode, 1,024 episodes, first-fit):
the base setting, then each variant; the speed-up of a variant over the base bounds what
that component costs. Writes results/bench/profile.md.

    python scripts/profile_step.py
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import jax

from jaxsched import policies
from jaxsched.benchmark import make_setup
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv
from jaxsched.workload import synthetic


def measure(env_config, params, jobs, keys, chunk=-1, scheduler="first-fit", reps=2) -> float:
    sched = policies.get(scheduler)
    env = ClusterEnv(sched.env_config(env_config))
    run = jax.jit(lambda p, j, k: rollout(env, sched.policy, None, p, j, k, 1600, chunk=chunk)[1])
    compiled = run.lower(params, jobs, keys).compile()
    jax.block_until_ready(compiled(params, jobs, keys))
    best = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        metrics = jax.block_until_ready(compiled(params, jobs, keys))
        best = max(best, int(metrics["decisions"].sum()) / (time.perf_counter() - start))
    return best


def main() -> int:
    batch = 1024
    _, workload, frag, params, base = make_setup(64, 500, running_capacity=512)
    keys = jax.random.split(jax.random.key(0), batch)
    jobs = jax.vmap(lambda k: synthetic.generate(k, workload))(keys)
    one_class = params.replace(frag_classes=jax.tree.map(lambda x: x[:1], params.frag_classes))
    variants = [
        ("base (K=8, Q=256, R=512, M=%d FGD classes, chunk 16)" % frag.prob.shape[0], base, params, -1),
        ("window K=1 (fit masks K x N -> 1 x N)", dataclasses.replace(base, window=1), params, -1),
        ("1 FGD class (fragmentation upkeep)", base, one_class, -1),
        ("no fragmentation upkeep (track_frag=False)", dataclasses.replace(base, track_frag=False), params, -1),
        ("running capacity R=128 (ring insert)", dataclasses.replace(base, running_capacity=128), params, -1),
        ("queue capacity Q=16 (queue shifts)", dataclasses.replace(base, queue_capacity=16), params, -1),
        ("whole batch in one vmap (no chunks)", base, params, None),
        ("chunks of 64", base, params, 64),
    ]
    rows = []
    base_rate = None
    for label, config, p, chunk in variants:
        rate = measure(config, p, jobs, keys, chunk)
        base_rate = base_rate or rate
        rows.append((label, rate, rate / base_rate))
        print(f"{label:55s} {rate:>10,.0f} decisions/s  x{rate / base_rate:.2f}", flush=True)
    lines = ["Command: `python scripts/profile_step.py` (64 nodes, 500 jobs/episode, 1,024 episodes, "
             f"first-fit, {jax.devices()[0].platform})", "",
             "| variant | decisions/s | vs base |", "|---|---|---|"]
    lines += [f"| {label} | {rate:,.0f} | x{ratio:.2f} |" for label, rate, ratio in rows]
    out = Path("results/bench")
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
