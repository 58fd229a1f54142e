"""DRR training speed: env steps per second while training, and the share of it spent in the
env, measured side by side in one process.

    python scripts/bench_drr.py --config configs/drr_64.toml --chunks 3

Three jitted loops over the same ``train.num_envs`` envs, each timed over ``--chunks`` calls
after a warm-up call (compilation excluded, reported apart):
  train     DRR's ``run_chunk`` (``train.chunk_updates`` updates of ``rollout_steps`` steps)
  env+feat  the same env steps with DRR's features computed and a uniform feasible node
            chosen (no networks, no learning)
  env       the same env steps with a uniform feasible node (the env alone, auto-reset
            included)
The share of training time in the env is env / train; features / train is what DRR's state
costs on top. ``--out`` writes the table as markdown.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from jaxsched import compile_cache
from jaxsched.devices import configure_cpu


def main(argv=None) -> int:
    configure_cpu()
    import jax
    import jax.numpy as jnp

    from jaxsched import train as train_lib
    from jaxsched.agents import drr, training
    from jaxsched.policies.common import first_fitting_slot, place_or_wait

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/drr_64.toml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--out", help="write the table here (markdown)")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compile_cache.enable_from_args(args)
    run = train_lib.load(args.config, args.set)
    tc, agent = run.train, run.agent
    env, env_params, workload, nodes = train_lib.setup(run)
    tr = run.learner.make_train(env, env_params, workload, agent, tc)
    reset_envs = training.make_reset(env, env_params, workload, tc)
    steps = tc.chunk_updates * train_lib.learner_steps(run)

    def env_loop(with_features: bool):
        def body(carry, _):
            state, obs, key = carry
            key, k_act, k_step, k_reset = jax.random.split(key, 4)
            if with_features:  # DRR's job at hand (agent.job_at_hand) and its features
                feat = jax.vmap(lambda o: drr.features(o, agent.job_at_hand))(obs)
                slot, feasible = feat.slot, feat.feasible
            else:
                slot = jax.vmap(first_fitting_slot)(obs)
                feasible = obs.place_mask[jnp.arange(tc.num_envs), slot]
            node = jax.random.categorical(k_act, jnp.where(feasible, 0.0, -1e9))
            action = jax.vmap(place_or_wait)(obs, slot, node)
            state, obs, _, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, tc.num_envs), state, action, env_params)
            state, obs = training.auto_reset(reset_envs, k_reset, done, state, obs)
            return (state, obs, key), done.sum()

        def chunk(carry):
            carry, done = jax.lax.scan(body, carry, None, length=steps)
            return carry, done.sum()
        return jax.jit(chunk, donate_argnums=0)

    def timed(fn, carry):
        t0 = time.perf_counter()
        carry, out = fn(carry)
        jax.block_until_ready(out)
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(args.chunks):
            carry, out = fn(carry)
            jax.block_until_ready(out)
        return compile_s, (time.perf_counter() - t0) / args.chunks

    runner = jax.jit(tr.init)(jax.random.key(tc.seed))
    rows = {"train": timed(jax.jit(tr.run_chunk, donate_argnums=0), runner)}
    state, obs = jax.jit(reset_envs)(jax.random.key(1))
    rows["env+feat"] = timed(env_loop(True), (state, obs, jax.random.key(2)))
    state, obs = jax.jit(reset_envs)(jax.random.key(1))
    rows["env"] = timed(env_loop(False), (state, obs, jax.random.key(2)))
    env_steps = steps * tc.num_envs
    train_s = rows["train"][1]
    lines = [f"`python scripts/bench_drr.py --config {args.config}" + "".join(f" --set {s}" for s in args.set)
             + f" --chunks {args.chunks}` ({len(nodes)} nodes, {tc.num_envs} envs, {steps} steps per chunk, "
             f"backend {jax.default_backend()}, {len(jax.devices())} devices)", "",
             "| loop | first call (compile + run) s | s per chunk | env steps/s | share of train |",
             "|---|---:|---:|---:|---:|"]
    for name, (compile_s, per_chunk) in rows.items():
        lines.append(f"| {name} | {compile_s:.1f} | {per_chunk:.2f} | {env_steps / per_chunk:,.0f} | "
                     f"{per_chunk / train_s:.0%} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
