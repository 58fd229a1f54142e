"""Where a decision's time goes: the same rollout with one cost component shrunk at a time.

Side by side in one process (64 nodes, 500 jobs per episode, 1,024 episodes, first-fit, on
every CPU core with whole-loop kernels, ``devices.configure_cpu``): the base setting (each
episode alone, the default), then each variant; the speed-up of a variant over the base
bounds what that component costs. Writes results/bench/profile.md.

``--schedules`` compares the rollout's loop schedules (``rollout.rollout``: each episode
alone, or vmapped chunks stepping or turn by turn) for first-fit and FGD, on every CPU core
and on one device with the whole batch in one ``vmap`` (as on a GPU). Writes
results/bench/rollout_schedule.md.

``--turns`` instead counts event-loop turns (no timing): per decision on average, and the
mean over steps of the most turns any episode of a chunk takes -- under ``vmap`` a chunk's
loop runs that many turns, so the ratio is the work lost to waiting for the slowest
episode. Writes results/bench/turns.md.

    python scripts/profile_step.py
    python scripts/profile_step.py --turns
    python scripts/profile_step.py --schedules
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import jax
import numpy as np

from jaxsched import compile_cache
from jaxsched import policies
from jaxsched.benchmark import make_setup
from jaxsched.devices import configure_cpu
from jaxsched.rollout import rollout, sharded_rollout
from jaxsched.sim import ClusterEnv
from jaxsched.workload import synthetic


def measure(env_config, params, jobs, keys, chunk=-1, scheduler="first-fit", reps=2, turns=-1,
            shard=True) -> float:
    sched = policies.get(scheduler)
    env = ClusterEnv(sched.env_config(env_config))
    turns = sched.turns if turns == -1 else turns  # -1: the scheduler's own loop schedule
    if shard:  # every device, each with ``chunk``
        run = jax.jit(lambda p, j, k: sharded_rollout(env, sched.policy, None, p, j, k, 1600, turns, chunk)[1])
    else:  # the first device only
        run = jax.jit(lambda p, j, k: rollout(env, sched.policy, None, p, j, k, 1600, chunk, turns)[1])
    compiled = run.lower(params, jobs, keys).compile()
    jax.block_until_ready(compiled(params, jobs, keys))
    best = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        metrics = jax.block_until_ready(compiled(params, jobs, keys))
        best = max(best, int(metrics["decisions"].sum()) / (time.perf_counter() - start))
    return best


class TurnCountingEnv(ClusterEnv):
    """The env, counting event-loop turns in the (otherwise unused) ``acc.migrations``."""

    def _dynamic_turn(self, state, core, params, active=True):
        core = core.replace(acc=core.acc.replace(migrations=core.acc.migrations + 1))
        return super()._dynamic_turn(state, core, params, active)


def count_turns(env_config, params, jobs, steps: int, chunks=(1, 16, 64, 256)) -> list[str]:
    """Markdown rows: turns per decision, and per step the most turns in a chunk."""
    sched = policies.get("first-fit")
    env = TurnCountingEnv(sched.env_config(env_config))
    keys = jax.random.split(jax.random.key(1), jobs.num_gpu.shape[0])
    state, obs = jax.vmap(env.reset, in_axes=(0, None, 0))(keys, params, jobs)

    def body(carry, _):
        state, obs = carry
        action = jax.vmap(lambda o: sched.policy(None, o, None))(obs)
        state, obs, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)
        return (state, obs), (state.core.acc.migrations, state.core.done)

    _, (turns, done) = jax.jit(lambda s, o: jax.lax.scan(body, (s, o), None, length=steps))(state, obs)
    turns, live = np.diff(np.asarray(turns), axis=0), ~np.asarray(done)[:-1]
    batch = turns.shape[1]
    rows = []
    for c in chunks:
        t = turns[:, :batch // c * c].reshape(turns.shape[0], -1, c)
        chunk_live = live[:, :batch // c * c].reshape(live.shape[0], -1, c).any(-1)
        rows.append(f"| {c} | {t.max(-1)[chunk_live].mean():.2f} |")
    return [f"Turns per decision, mean over episodes: {turns[live].mean():.2f}", "",
            "| chunk (episodes stepped together) | turns per step (most in the chunk, mean over steps) |",
            "|---|---|", *rows]


def compare_schedules(base, params, jobs, keys) -> int:
    """Decisions/s of both loop schedules, side by side (results/bench/rollout_schedule.md)."""
    devices = len(jax.devices())
    variants = [  # (label, turns, shard, chunk)
        (f"{devices} devices, each episode alone (one-kernel loop)", None, True, 1),
        (f"{devices} devices, chunks of 16, stepping", None, True, 16),
        (f"{devices} devices, chunks of 16, turn by turn, 2 turns", 2, True, 16),
        (f"{devices} devices, chunks of 16, turn by turn, 4 turns", 4, True, 16),
        ("1 device, whole batch, stepping", None, False, None),
        ("1 device, whole batch, turn by turn, 2 turns", 2, False, None),
        ("1 device, whole batch, turn by turn, 4 turns", 4, False, None),
    ]
    lines = ["Command: `python scripts/profile_step.py --schedules` (64 nodes, 500 jobs/episode, "
             f"1,024 episodes, R=512, {jax.devices()[0].platform}; the same episodes every row)", "",
             "| scheduler | loop | decisions/s | vs the first row |", "|---|---|---|---|"]
    for scheduler in ("first-fit", "fgd"):
        first = None
        for label, turns, shard, chunk in variants:
            rate = measure(base, params, jobs, keys, chunk, scheduler, turns=turns, shard=shard)
            first = first or rate
            lines.append(f"| {scheduler} | {label} | {rate:,.0f} | x{rate / first:.2f} |")
            print(lines[-1], flush=True)
    lines += ["", "CPU rollouts run each episode alone (`rollout.default_chunk`, with the whole-loop",
              "kernels of `devices.configure_cpu`); vmapped chunks hold scatters, so XLA runs them",
              "kernel by kernel. GPU rollouts run the whole batch in one `vmap`, turn by turn with 2",
              "turns (`Scheduler.turns`) except FGD, which steps; the '1 device, whole batch' rows are",
              "the CPU stand-in for that."]
    Path("results/bench").mkdir(parents=True, exist_ok=True)
    Path("results/bench/rollout_schedule.md").write_text("\n".join(lines) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", action="store_true", help="count event-loop turns instead of timing")
    parser.add_argument("--schedules", action="store_true", help="each episode alone vs vmapped stepping vs turn by turn")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compile_cache.enable_from_args(args)
    if not args.turns:
        configure_cpu()  # before JAX starts its backend (make_setup below)
    batch = 1024
    _, workload, frag, params, base = make_setup(64, 500, running_capacity=512)
    keys = jax.random.split(jax.random.key(0), batch)
    jobs = jax.vmap(lambda k: synthetic.generate(k, workload))(keys)
    if args.turns:
        lines = ["Command: `python scripts/profile_step.py --turns` (64 nodes, 500 jobs/episode, "
                 "256 episodes, first-fit, 520 steps)", ""]
        lines += count_turns(base, params, jax.tree.map(lambda x: x[:256], jobs), 520)
        print("\n".join(lines))
        Path("results/bench").mkdir(parents=True, exist_ok=True)
        Path("results/bench/turns.md").write_text("\n".join(lines) + "\n")
        return 0
    if args.schedules:
        return compare_schedules(base, params, jobs, keys)
    one_class = params.replace(frag_classes=jax.tree.map(lambda x: x[:1], params.frag_classes))
    variants = [
        ("base (K=8, Q=256, R=512, M=%d FGD classes, each episode alone)" % frag.prob.shape[0], base, params, -1),
        ("window K=1 (everything sized by the window)", dataclasses.replace(base, window=1), params, -1),
        ("1 FGD class (fragmentation upkeep)", base, one_class, -1),
        ("no fragmentation upkeep (track_frag=False)", dataclasses.replace(base, track_frag=False), params, -1),
        ("running capacity R=128 (ring insert)", dataclasses.replace(base, running_capacity=128), params, -1),
        ("queue capacity Q=16 (queue shifts)", dataclasses.replace(base, queue_capacity=16), params, -1),
        ("chunks of 16 vmapped, turn by turn (kernel by kernel)", base, params, 16),
    ]
    rows = []
    base_rate = None
    for label, config, p, chunk in variants:
        rate = measure(config, p, jobs, keys, chunk)
        base_rate = base_rate or rate
        rows.append((label, rate, rate / base_rate))
        print(f"{label:55s} {rate:>10,.0f} decisions/s  x{rate / base_rate:.2f}", flush=True)
    lines = ["Command: `python scripts/profile_step.py` (64 nodes, 500 jobs/episode, 1,024 episodes, "
             f"first-fit, {len(jax.devices())} {jax.devices()[0].platform} devices, whole-loop kernels)", "",
             "| variant | decisions/s | vs base |", "|---|---|---|"]
    lines += [f"| {label} | {rate:,.0f} | x{ratio:.2f} |" for label, rate, ratio in rows]
    out = Path("results/bench")
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
