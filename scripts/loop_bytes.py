"""Bytes the turn-by-turn loop moves per episode per iteration, read from the compiled program.

On a GPU a benchmark batch runs as one ``vmap``, turn by turn (``rollout._rollout_turns``), and
past a few thousand episodes an iteration's time is the bytes it moves (results/gpu/README.md:
143 KB an episode an iteration at 64 nodes, where 100 million decisions/s allows 31 KB). This
compiles the loop's body alone (``rollout.turn_loop_body``: a decision where one is due, then
``TURNS`` masked event turns, for every episode) for a batch of B episodes of ``bench.py``'s
setup, on this machine's backend, and reads XLA's cost analysis of it: its "bytes accessed"
over B is the figure, beside the bytes of one episode's loop state (the cursor). XLA counts
each fused kernel's operands and results once; it does not see caches, so on a GPU it bounds
the traffic from above, and the CPU backend fuses differently from the GPU's (the same HLO
before fusion, other kernels after): a stand-in for the GPU figure, not the figure.

    python scripts/loop_bytes.py --nodes 64 1213 --schedulers first-fit best-fit fgd
    python scripts/loop_bytes.py --nodes 64 --schedulers first-fit --parts   # where they go
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax

from jaxsched import policies
from jaxsched.benchmark import make_setup, state_bytes_per_episode
from jaxsched.rollout import TURNS, turn_loop_body, turn_loop_start
from jaxsched.sim import ClusterEnv
from jaxsched.workload import synthetic

JOBS = {64: 500, 1213: 300}  # jobs per episode, as results/gpu's runs


def bytes_accessed(compiled) -> float:
    """XLA's "bytes accessed" of a compiled program (a dict, or a list of one per module)."""
    cost = compiled.cost_analysis()
    costs = cost if isinstance(cost, (list, tuple)) else [cost]
    return float(sum(c.get("bytes accessed", 0.0) for c in costs))


def measure(nodes: int, scheduler: str, batch: int, jobs_per_episode: int) -> dict:
    """One row: the loop body's bytes accessed per episode, and the loop state's bytes per episode."""
    _, workload, _, params, env_config = make_setup(nodes, jobs_per_episode, 512)
    sched = policies.get(scheduler)
    env = ClusterEnv(sched.env_config(env_config))
    keys = jax.random.split(jax.random.key(0), batch)  # bench.py's episodes
    jobs = jax.vmap(lambda k: synthetic.generate(k, workload))(keys)
    cursor, step_keys = jax.jit(lambda j, k: turn_loop_start(env, params, j, k))(jobs, keys)
    body = turn_loop_body(env, sched.policy, None, params, step_keys, 3 * jobs_per_episode + 100, sched.turns or TURNS)
    compiled = jax.jit(body).lower(cursor).compile()
    return {"nodes": nodes, "scheduler": scheduler, "batch": batch,
            "bytes_per_episode_iteration": bytes_accessed(compiled) / batch,
            "state_bytes_per_episode": state_bytes_per_episode(cursor, batch)}


def measure_parts(nodes: int, scheduler: str, batch: int, jobs_per_episode: int) -> dict:
    """The body's parts compiled alone, each vmapped over the batch: the observation and the
    policy, ``act_at`` (the decision's write), and ``turns`` with 1 and with ``TURNS`` event
    turns -> {part: bytes accessed per episode}."""
    import jax.numpy as jnp

    _, workload, _, params, env_config = make_setup(nodes, jobs_per_episode, 512)
    sched = policies.get(scheduler)
    env = ClusterEnv(sched.env_config(env_config))
    keys = jax.random.split(jax.random.key(0), batch)
    jobs = jax.vmap(lambda k: synthetic.generate(k, workload))(keys)
    cursor, step_keys = jax.jit(lambda j, k: turn_loop_start(env, params, j, k))(jobs, keys)
    turns = sched.turns or TURNS
    parts = {
        "observe + policy": (lambda c, k: sched.policy(None, env.observe(c.state, params), k)),
        "act_at": (lambda c, k: env.act_at(k, c, jnp.int32(0), params, c.stop)),
        "turns(1)": (lambda c, k: env.turns(c, params, 1)),
        f"turns({turns})": (lambda c, k: env.turns(c, params, turns)),
    }
    return {name: bytes_accessed(jax.jit(jax.vmap(f)).lower(cursor, step_keys).compile()) / batch
            for name, f in parts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 1213])
    parser.add_argument("--schedulers", nargs="+", default=["first-fit", "best-fit", "fgd"])
    parser.add_argument("--batch", type=int, default=256, help="episodes in the compiled batch")
    parser.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    parser.add_argument("--parts", action="store_true",
                        help="also each part of the body alone: observe + policy, act_at, the event turns")
    args = parser.parse_args(argv)
    lines = [f"backend: {jax.default_backend()}, {args.batch} episodes compiled as one batch, "
             f"{TURNS} event turns an iteration", "",
             "| nodes | scheduler | bytes accessed / episode / iteration | loop state / episode | ratio |",
             "|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for nodes in args.nodes:
        for name in args.schedulers:
            row = measure(nodes, name, args.batch, JOBS.get(nodes, 300))
            moved, state = row["bytes_per_episode_iteration"], row["state_bytes_per_episode"]
            lines.append(f"| {nodes} | {name} | {moved / 1e3:,.1f} KB | {state / 1e3:,.1f} KB | {moved / state:.2f} |")
            print(lines[-1], flush=True)
            if args.parts:
                for part, moved in measure_parts(nodes, name, args.batch, JOBS.get(nodes, 300)).items():
                    lines.append(f"| {nodes} | {name}: {part} alone | {moved / 1e3:,.1f} KB | | |")
                    print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
