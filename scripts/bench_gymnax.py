"""Benchmark: env steps per second of the gymnax env (``jaxsched.gymnax_env``) beside the native rollout.

For each (nodes, envs), in one process, side by side on the same cluster and workload:

  step      ``jit(vmap(env.step))``: gymnax's step, which also computes ``reset_env`` (its
            auto-reset) at every step
  step_env  ``jit(vmap(env.step_env))``: one decision, no reset
  native    ``jaxsched.rollout.rollout`` with ``policies.get("first-fit")``: whole episodes
            in one jitted loop (the simulator's own API; its default CPU chunking)

The gymnax rows take the first legal action (``obs.action_mask.argmax(-1)``, first-fit's
choice) inside the jitted step, and run ``--steps`` steps from fresh resets, one Python call
per step, after a warm-up call that compiles (``--steps`` is below the shortest episode, every
job needs a decision, so each step is a live decision of each env; ``step`` still computes its
reset at each). An env step is one decision of one env. native: decisions of whole episodes
(padding steps not counted) over the rollout's time, after a warm-up run. Each is timed
``--repeats`` times, interleaved, and the best time kept (the machine may be shared).

    python scripts/bench_gymnax.py --quick          # 8 nodes, 64 envs: seconds
    python scripts/bench_gymnax.py                  # also 64 nodes, 1,024 envs
    python scripts/bench_gymnax.py --bank-size 0    # reset draws a fresh workload (the old way)

Plain JAX settings (no ``devices.configure_cpu``): what an outside JAX trainer gets.
Writes ``results/gymnax/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax

from jaxsched import gymnax_env, policies
from jaxsched.rollout import rollout
from jaxsched.sim.env import ClusterEnv


def time_steps(step, carry, steps: int) -> float:
    """Seconds for ``steps`` calls of ``carry = step(carry)`` from ``carry``."""
    start = time.perf_counter()
    for _ in range(steps):
        carry = step(carry)
    jax.block_until_ready(carry)
    return time.perf_counter() - start


def bench(num_nodes: int, num_envs: int, num_jobs: int, steps: int, bank_size: int | None, seed: int,
          repeats: int) -> dict:
    """One row: env steps/s of step, step_env and the native first-fit rollout."""
    kwargs = {} if bank_size is None else {"bank_size": bank_size}
    env, params = gymnax_env.make(num_nodes=num_nodes, num_jobs=num_jobs, seed=seed, **kwargs)
    keys = jax.random.split(jax.random.key(seed), num_envs)
    obs, state = jax.block_until_ready(jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params))

    def stepper(step):
        """One jitted call: every env takes its first legal action through ``step``."""
        @jax.jit
        def one(carry):
            key, obs, state = carry
            key, sub = jax.random.split(key)
            out = jax.vmap(step, in_axes=(0, 0, 0, None))(
                jax.random.split(sub, num_envs), state, obs.action_mask.argmax(-1), params)
            return key, out[0], out[1]
        return one

    gymnax_step, gymnax_step_env = stepper(env.step), stepper(env.step_env)
    start = (jax.random.key(seed + 1), obs, state)
    jax.block_until_ready((gymnax_step(start), gymnax_step_env(start)))  # compile
    step_s, step_env_s = float("inf"), float("inf")
    for _ in range(repeats):  # interleaved, best of each: the machine may be shared
        step_s = min(step_s, time_steps(gymnax_step, start, steps))
        step_env_s = min(step_env_s, time_steps(gymnax_step_env, start, steps))

    first_fit = policies.get("first-fit")
    native = ClusterEnv(first_fit.env_config(env.sim.config))
    jobs = jax.vmap(env.draw_jobs, in_axes=(0, None))(keys, params)
    run = jax.jit(lambda j, k: rollout(native, first_fit.policy, None, params.sim, j, k,
                                       params.max_steps_in_episode, turns=first_fit.turns))
    _, metrics = jax.block_until_ready(run(jobs, keys))
    native_s = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run(jobs, keys))
        native_s = min(native_s, time.perf_counter() - t0)
    decisions = int(metrics["decisions"].sum())

    row = {
        "nodes": num_nodes, "envs": num_envs, "jobs": num_jobs, "steps": steps,
        "bank_size": params.bank.arrival_s.shape[0] if params.bank is not None else 0,
        "step_per_s": num_envs * steps / step_s,
        "step_env_per_s": num_envs * steps / step_env_s,
        "native_per_s": decisions / native_s,
    }
    row["step_over_step_env"] = row["step_per_s"] / row["step_env_per_s"]
    return row


def markdown(rows: list[dict], command: str) -> str:
    lines = [
        f"`{command}` (JAX {jax.__version__}, {jax.devices()[0].platform}, {platform.processor() or platform.machine()}, "
        f"{time.strftime('%Y-%m-%d')}). Env steps per second (one decision of one env):",
        "",
        "| nodes | envs | jobs | bank | step | step_env | step / step_env | native first-fit |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['nodes']} | {r['envs']:,} | {r['jobs']} | {r['bank_size'] or 'fresh'} | "
                     f"{r['step_per_s']:,.0f} | {r['step_env_per_s']:,.0f} | {r['step_over_step_env']:.0%} | "
                     f"{r['native_per_s']:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="8 nodes, 64 envs only")
    parser.add_argument("--jobs", type=int, default=64, help="jobs per episode")
    parser.add_argument("--steps", type=int, default=48, help="timed steps (below --jobs)")
    parser.add_argument("--bank-size", type=int, default=None,
                        help="gymnax_env.make's bank_size (default: its default; 0: a fresh workload per reset)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each, the best kept")
    parser.add_argument("--name", default="", help="output name (default: bench_quick or bench)")
    parser.add_argument("--out", default="results/gymnax")
    args = parser.parse_args(argv)
    if not 1 <= args.steps < args.jobs:
        parser.error(f"--steps {args.steps}: must be in [1, --jobs) so that every timed step is a live decision")
    sizes = [(8, 64)] if args.quick else [(8, 64), (64, 1024)]
    name = args.name or ("bench_quick" if args.quick else "bench")
    command = "python scripts/bench_gymnax.py " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for nodes, envs in sizes:
        rows.append(bench(nodes, envs, args.jobs, args.steps, args.bank_size, args.seed, args.repeats))
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
        (out / f"{name}.json").write_text(json.dumps({"command": command.strip(), "rows": rows}, indent=1) + "\n")
        (out / f"{name}.md").write_text(markdown(rows, command.strip()))
    print(markdown(rows, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
