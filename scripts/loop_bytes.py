"""Bytes the turn-by-turn loop moves per episode per iteration, read from the compiled program.

On a GPU a benchmark batch runs as one ``vmap``, turn by turn (``rollout._rollout_turns``), and
past a few thousand episodes an iteration's time is the bytes it moves (results/gpu/README.md:
143 KB an episode an iteration at 64 nodes, where 100 million decisions/s allows 31 KB). For a
batch of B episodes of ``bench.py``'s setup, on this machine's backend, two counts
(``jaxsched.hlo_bytes``), each over B:

- XLA's cost analysis ("bytes accessed") of the loop's body compiled alone
  (``rollout.turn_loop_body``: a decision where one is due, then ``TURNS`` masked event turns,
  for every episode), its carry donated as the loop's is. XLA charges a kernel its whole
  operands: one entry written into a [Q] array costs 2 Q.
- The in-place count of the body of the rollout's own loop, as compiled in the rollout: gathers
  and in-place updates charged only the entries they touch, as a GPU runs them; an iteration
  without the rare work (a reservation or a rescheduling pass: ``run_interrupt``, ``when_due``),
  and beside it one with it.

Beside them, the bytes of one episode's loop state (the cursor). Neither count sees caches, and
the CPU backend fuses less than the GPU's: a stand-in for the GPU figure, not the figure.

    python scripts/loop_bytes.py --nodes 64 1213 --schedulers first-fit best-fit fgd
    python scripts/loop_bytes.py --nodes 64 --schedulers first-fit --parts --where 12
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

from jaxsched import hlo_bytes, policies
from jaxsched.benchmark import make_setup, state_bytes_per_episode
from jaxsched.rollout import TURNS, _rollout_turns, turn_loop_body, turn_loop_start
from jaxsched.sim import ClusterEnv
from jaxsched.workload import synthetic

JOBS = {64: 500, 1213: 300}  # jobs per episode, as results/gpu's runs


def _setup(nodes: int, scheduler: str, batch: int):
    jobs_per_episode = JOBS.get(nodes, 300)
    _, workload, _, params, env_config = make_setup(nodes, jobs_per_episode, 512)
    sched = policies.get(scheduler)
    env = ClusterEnv(sched.env_config(env_config))
    keys = jax.random.split(jax.random.key(0), batch)  # bench.py's episodes
    jobs = jax.vmap(lambda k: synthetic.generate(k, workload))(keys)
    return env, sched, params, jobs, keys, 3 * jobs_per_episode + 100


def measure(nodes: int, scheduler: str, batch: int, where: int = 0) -> dict:
    """One row: both counts per episode and iteration, the loop state's bytes per episode,
    and (``where`` > 0) the in-place count's ``where`` costliest source lines."""
    env, sched, params, jobs, keys, max_steps = _setup(nodes, scheduler, batch)
    turns = sched.turns or TURNS
    cursor, step_keys = jax.jit(lambda j, k: turn_loop_start(env, params, j, k))(jobs, keys)
    body = turn_loop_body(env, sched.policy, None, params, step_keys, max_steps, turns)
    alone = jax.jit(body, donate_argnums=0).lower(cursor).compile()
    loop = jax.jit(lambda j, k: _rollout_turns(env, sched.policy, None, params, j, k, max_steps, turns)
                   ).lower(jobs, keys).compile()
    hlo = loop.as_text()
    counts = hlo_bytes.inplace_bytes(hlo, hlo_bytes.source_label(hlo), loop_body=True)
    rare = hlo_bytes.inplace_bytes(hlo, loop_body=True, branch="costlier")
    return {"xla": hlo_bytes.xla_bytes(alone) / batch, "inplace": sum(counts.values()) / batch,
            "rare": sum(rare.values()) / batch, "state": state_bytes_per_episode(cursor, batch),
            "where": [(label, n / batch) for label, n in counts.most_common(where)]}


def measure_parts(nodes: int, scheduler: str, batch: int) -> dict:
    """The body's parts compiled alone, each vmapped over the batch, its input donated: the
    observation and the policy, ``act_at`` (the decision's write), and ``turns`` with 1 and
    with ``TURNS`` event turns -> {part: (XLA bytes, in-place bytes) per episode}."""
    env, sched, params, jobs, keys, _ = _setup(nodes, scheduler, batch)
    cursor, step_keys = jax.jit(lambda j, k: turn_loop_start(env, params, j, k))(jobs, keys)
    turns = sched.turns or TURNS
    parts = {
        "observe + policy": (lambda c, k: (c, sched.policy(None, env.observe(c.state, params), k))),
        "act_at": (lambda c, k: env.act_at(k, c, jnp.int32(0), params, c.stop)),
        "turns(1)": (lambda c, k: env.turns(c, params, 1)),
        f"turns({turns})": (lambda c, k: env.turns(c, params, turns)),
    }
    out = {}
    for name, f in parts.items():
        compiled = jax.jit(jax.vmap(f), donate_argnums=0).lower(cursor, step_keys).compile()
        out[name] = (hlo_bytes.xla_bytes(compiled) / batch,
                     sum(hlo_bytes.inplace_bytes(compiled.as_text()).values()) / batch)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 1213])
    parser.add_argument("--schedulers", nargs="+", default=["first-fit", "best-fit", "fgd"])
    parser.add_argument("--batch", type=int, default=64, help="episodes in the compiled batch")
    parser.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    parser.add_argument("--parts", action="store_true",
                        help="also each part of the body alone: observe + policy, act_at, the event turns")
    parser.add_argument("--where", type=int, default=0, metavar="N",
                        help="also the N source lines the in-place count charges most")
    args = parser.parse_args(argv)
    kb = lambda x: f"{x / 1e3:,.1f} KB"  # noqa: E731
    lines = [f"backend: {jax.default_backend()}, {args.batch} episodes compiled as one batch, "
             f"{TURNS} event turns an iteration", "",
             "| nodes | scheduler | XLA bytes accessed / episode / iteration | in-place / episode / iteration "
             "| in-place, with the rare work | loop state / episode |", "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for nodes in args.nodes:
        for name in args.schedulers:
            row = measure(nodes, name, args.batch, args.where)
            lines.append(f"| {nodes} | {name} | {kb(row['xla'])} | {kb(row['inplace'])} | {kb(row['rare'])} "
                         f"| {kb(row['state'])} |")
            print(lines[-1], flush=True)
            for label, moved in row["where"]:
                lines.append(f"| {nodes} | {name}: `{label}` | | {kb(moved)} | | |")
                print(lines[-1], flush=True)
            if args.parts:
                for part, (xla, inplace) in measure_parts(nodes, name, args.batch).items():
                    lines.append(f"| {nodes} | {name}: {part} alone | {kb(xla)} | {kb(inplace)} | | |")
                    print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
