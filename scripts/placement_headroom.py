"""How much can node choice alone lower mean JCT on the GNN-DDQN preset? A headroom study.

Runs, on the held-out episodes of ``configs/gnn_ddqn.toml`` (same jobs and env keys as
``python -m jaxsched.train`` evaluates on), FIFO first-fit and hops beside hand-made
placement rules that are NOT registered schedulers (they exist to bound what a learned
placement policy can gain here). Every rule takes the first window job that fits somewhere
(like the registered heuristics) and ranks feasible nodes by a speed score, ties broken by
best-fit score, then rank:

  fastest        the fastest GPU model the job fits on (a speed-greedy rule)
  long-fast      jobs with work > 3,000 s to the fastest node, shorter ones to the slowest
  fractional-fast  fractional jobs (one GPU, gpu_milli < 1000) to the fastest node; every
                 other GPU job to the G2-speed (0.8) nodes first, then the others by speed,
                 so the few fast GPUs are kept for jobs that share them
  priced-p       the greedy choice under a GPU-time price p (what an agent maximising the
                 placement reward of tried.md row s would do one step ahead): least
                 run time x (1 + p x GPUs held x max(0, speed / 0.8 - 1)); CPU-only jobs'
                 run time does not depend on the node, so they go by best-fit. p = 0 is
                 "fastest" for GPU jobs only
  sjf-priced-p   priced-p on sjf's window (the queue least work first): the hand rule with the
                 view the GNN-DDQN preset's agent has (``[agent] queue_order = "sjf"``)

Every rule takes over from ``eval.warmup_scheduler``'s warm-up (first-fit in the preset), as the
main job's agent and heuristics do. It also reports the GPU allocation over the measurement window (``gpu_alloc``) beside the
offered load rho.

    python scripts/placement_headroom.py                # writes results/gnn_ddqn/headroom.md
    python scripts/placement_headroom.py --episodes 16 --out /tmp/headroom.md
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from jaxsched import compile_cache
from jaxsched import cluster as cl
from jaxsched import evaluate as ev
from jaxsched import experiment
from jaxsched import policies, report, train
from jaxsched.devices import configure_cpu
from jaxsched.policies.best_fit import best_fit_scores
from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job
from jaxsched.sim.env import ClusterEnv
from jaxsched.types import GPU_MILLI

LONG_WORK_S = 3000.0
COMMON_SPEED = 0.8  # G2, the model of most GPUs in the openb mix


def _rank_by(obs, slot, speed_score):
    """Node for ``slot``: highest int speed score, then best-fit score, then rank."""
    job = window_job(obs, slot)
    score = speed_score.astype(jnp.int32) * 100_000 + jnp.clip(best_fit_scores(obs, job), -99_999, 99_999)
    return best_node(score, obs.place_mask[slot], obs.node_rank)


def fastest(params, obs, key):
    slot = first_fitting_slot(obs)
    return place_or_wait(obs, slot, _rank_by(obs, slot, jnp.floor(100 * obs.cluster.speed)))


def long_fast(params, obs, key):
    slot = first_fitting_slot(obs)
    sign = jnp.where(obs.job_work_s[slot] > LONG_WORK_S, 1.0, -1.0)
    return place_or_wait(obs, slot, _rank_by(obs, slot, jnp.floor(sign * 100 * obs.cluster.speed)))


def fractional_fast(params, obs, key):
    slot = first_fitting_slot(obs)
    speed = obs.cluster.speed
    fractional = (obs.job_num_gpu[slot] == 1) & (obs.job_gpu_milli[slot] < GPU_MILLI)
    common_first = jnp.where(jnp.abs(speed - COMMON_SPEED) < 1e-3, 1000.0, 100 * speed)
    return place_or_wait(obs, slot, _rank_by(obs, slot, jnp.floor(jnp.where(fractional, 100 * speed, common_first))))


def priced(params, obs, key, price):
    """Greedy under a GPU-time price: least run time x (1 + price x GPUs held x premium)."""
    slot = first_fitting_slot(obs)
    speed = obs.cluster.speed
    held = obs.job_num_gpu[slot] * obs.job_gpu_milli[slot] / GPU_MILLI
    premium = jnp.maximum(speed / COMMON_SPEED - 1.0, 0.0)
    run_per_work = jnp.where(obs.job_num_gpu[slot] > 0, 1.0 / speed, 1.0)
    cost = (1 + price * held * premium) * run_per_work
    return place_or_wait(obs, slot, _rank_by(obs, slot, jnp.floor(-1000 * cost)))


RULES = {"fastest": fastest, "long-fast": long_fast, "fractional-fast": fractional_fast,
         "priced-0": functools.partial(priced, price=0.0), "priced-1": functools.partial(priced, price=1.0)}
SJF_RULES = {"sjf-priced-0": RULES["priced-0"], "sjf-priced-1": RULES["priced-1"]}  # on sjf's queue order


def _paired_pct(jct, base) -> str:
    """Mean of jct - base over the episodes, in % of base's mean, with its 95% CI."""
    diff, half = report.paired_difference(pd.Series(jct), pd.Series(base))
    diff, half = 100 * diff / base.mean(), 100 * half / base.mean()
    return f"{diff:+.1f}% [{diff - half:+.1f}%, {diff + half:+.1f}%]"


def main(argv=None) -> int:
    configure_cpu()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=train.DEFAULT_CONFIG)
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--out", default="results/gnn_ddqn/headroom.md")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compile_cache.enable_from_args(args)
    run = train.load(args.config, [f"eval.episodes={args.episodes}", f"eval.batch_size={args.episodes}"])
    config = run.base
    nodes = experiment.build_nodes(config)
    jobs, params, max_steps, env_keys, _ = experiment.episodes(config, nodes)
    rho = float(np.mean(report.offered_load(jobs, cl.work_capacity(nodes))))
    runs = [(name, policies.get(name).policy, ClusterEnv(policies.get(name).env_config(config.env)))
            for name in ("first-fit", "hops", "sjf")]
    runs += [(name, rule, ClusterEnv(config.env)) for name, rule in RULES.items()]
    sjf_env = ClusterEnv(policies.get("sjf").env_config(config.env))  # the window shows least work first
    runs += [(name, rule, sjf_env) for name, rule in SJF_RULES.items()]
    warmup = config.eval.warmup_scheduler  # each rule takes over from the same warm-up, as in the main job
    if warmup:
        runs = [(name, policies.warmed_up(policy, policies.get(warmup).policy), env) for name, policy, env in runs]
    rows = {}
    for name, policy, env in runs:
        t0 = time.perf_counter()
        metrics, _ = jax.device_get(ev._compiled_rollout(env, policy, max_steps)(None, params, jobs, env_keys))
        assert bool(np.all(metrics["done"])), f"{name}: an episode did not finish in {max_steps} steps"
        rows[name] = (np.asarray(metrics["jct_mean"], np.float64),
                      float(np.mean(metrics["queue_delay_mean"])),
                      float(np.mean(metrics["gpu_alloc"])))
        print(f"{name}: mean JCT {rows[name][0].mean():,.0f} s ({time.perf_counter() - t0:.1f} s)")
    lines = [f"Command: `python scripts/placement_headroom.py --episodes {args.episodes}` "
             f"({config.cluster.preset_nodes} nodes, {args.episodes} held-out episodes of "
             f"`{args.config}`, offered load rho {rho:.2f}); per episode: `{Path(args.out).stem}_per_episode.csv`",
             "", "| rule | mean JCT (s) | vs first-fit, 95% CI | vs sjf, 95% CI | queue delay (s) "
             "| GPU allocation (measured) |", "|---|---:|---|---|---:|---:|"]
    for name, (jct, delay, alloc) in rows.items():
        lines.append(f"| {name} | {jct.mean():,.0f} | {_paired_pct(jct, rows['first-fit'][0])} "
                     f"| {_paired_pct(jct, rows['sjf'][0])} | {delay:.1f} | {alloc:.2f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    per_episode = pd.DataFrame({"episode": np.arange(args.episodes)} | {name: row[0] for name, row in rows.items()})
    per_episode.to_csv(out.with_name(f"{out.stem}_per_episode.csv"), index=False, float_format="%.6g")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
