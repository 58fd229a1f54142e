"""Train the GNN Double-DQN scheduler, then evaluate it beside every baseline:
``python -m jaxsched.train`` (default config: configs/gnn_ddqn.toml).

The run config is a normal run config (``[cluster] [workload] [env] [eval]``, see
``jaxsched.config``) plus ``[agent]`` (``agents.ddqn.AgentConfig``) and ``[train]``
(``agents.trainer.TrainConfig``). ``--set section.key=value`` overrides any of them.

Writes under ``eval.out_dir`` (``results/runs/<run>/``):
  train_log.csv       one row per jitted chunk: return, loss, mean Q, epsilon, env steps/s
  checkpoints/        orbax checkpoints every ``train.checkpoint_every`` updates
  per_episode.csv, summary.csv, summary.md, paired.csv   held-out evaluation
  learning_curve.png, comparison.png, jct_cdf.png, config.json
``--resume`` continues from the last checkpoint of the same folder; the result equals that
of an uninterrupted run (the checkpoint holds every bit of the runner, RNG key included).
``--checkpoint DIR`` skips training and evaluates the agent of DIR's last checkpoint.
``--eval-set section.key=value`` changes the evaluation only, e.g. the agent trained on the
synthetic workload evaluated on windows of the openb trace at rho 0.9 (a transfer test)::

    python -m jaxsched.train --checkpoint results/runs/gnn_ddqn --out results/runs/transfer \\
        --eval-set workload.source=openb --eval-set workload.window_jobs=1000 \\
        --eval-set workload.trace=../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv

Workloads: synthetic (each training episode a fresh draw from the training key), or with
``workload.source = "openb"`` windows of the trace: training windows from the part
``train.trace_span`` of it, evaluation windows from ``workload.trace_span``
(``configs/gnn_ddqn_openb.toml`` splits the trace in halves).

Evaluation: the trained greedy policy runs through ``jaxsched.rollout.rollout`` on exactly
the episodes ``jaxsched.evaluate`` builds from ``[eval]`` (its seed is not the training
seed), beside every registered scheduler.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd
from tqdm import tqdm

from jaxsched.devices import use_all_cpu_cores
from jaxsched import cluster as cl
from jaxsched import config as cfg_lib
from jaxsched import evaluate as ev
from jaxsched import policies, report
from jaxsched.agents import checkpoint, ddqn, trainer
from jaxsched.errors import DataError
from jaxsched.rollout import sharded_rollout
from jaxsched.sim.env import ClusterEnv
from jaxsched.types import EnvParams, to_device

DEFAULT_CONFIG = "configs/gnn_ddqn.toml"
AGENT_NAME = "gnn-ddqn"
LOG_FIELDS = ("update", "env_steps", "episodes_finished", "return", "train_mean_jct_s",
              "reward_per_step", "loss", "q_mean", "epsilon", "env_steps_per_s", "updates_per_s",
              "wall_s")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    base: cfg_lib.Config
    agent: ddqn.AgentConfig
    train: trainer.TrainConfig


def load(path=None, overrides=()) -> RunConfig:
    """A ``RunConfig`` from TOML (``[agent]`` and ``[train]`` beside the usual sections)."""
    data, where = {}, "config"
    if path is not None:
        where, data = Path(path), cfg_lib.read_toml(path)
    extra = {"agent": data.pop("agent", {}), "train": data.pop("train", {})}
    base_overrides = []
    for text in overrides:
        head = text.split("=", 1)[0].strip().split(".")[0]
        if head in extra:
            parsed = cfg_lib.parse_override(text)
            extra[head].update(parsed[head])
        else:
            base_overrides.append(text)
    base = cfg_lib._merge(cfg_lib.Config(), data, where, "")
    for text in base_overrides:
        base = cfg_lib._merge(base, cfg_lib.parse_override(text), "--set", "")
    return RunConfig(base, cfg_lib.from_dict(ddqn.AgentConfig, extra["agent"], where, "agent."),
                     cfg_lib.from_dict(trainer.TrainConfig, extra["train"], where, "train."))


def with_eval_overrides(run: RunConfig, overrides) -> RunConfig:
    """``run`` with ``section.key=value`` overrides applied to its evaluation only: the run
    config sections ([cluster] [workload] [env] [eval]); [agent] and [train] are refused (the
    trained network and its training are fixed)."""
    base = run.base
    for text in overrides:
        head = text.split("=", 1)[0].strip().split(".")[0]
        if head in ("agent", "train"):
            raise DataError("--eval-set", None, head, "evaluation overrides cannot change the agent or its training")
        base = cfg_lib._merge(base, cfg_lib.parse_override(text), "--eval-set", "")
    return dataclasses.replace(run, base=base)


def load_trained(run: RunConfig, run_dir: Path):
    """(trainer, runner) restored from the last checkpoint under ``run_dir``/checkpoints."""
    env, env_params, workload, _ = setup(run)
    tr = trainer.make_train(env, env_params, workload, run.agent, run.train)
    like = jax.jit(tr.init)(jax.random.key(run.train.seed))  # the structure to restore into
    mgr = checkpoint.manager(run_dir / "checkpoints")
    step, runner = checkpoint.restore(mgr, like)
    mgr.close()
    if step is None:
        raise DataError(str(run_dir / "checkpoints"), None, "checkpoint", "no checkpoint found")
    return tr, runner


def setup(run: RunConfig):
    """(env, env_params, training workload, nodes) of a run. The training workload is the
    synthetic config, or for ``workload.source = "openb"`` a bank of ``train.trace_windows``
    trace windows of ``train.train_jobs`` jobs from the part ``train.trace_span`` of the trace
    (compressed to ``workload.target_load``; see ``trainer.make_train``)."""
    config, tc = run.base, run.train
    nodes = ev.build_nodes(config)
    w = config.workload
    if w.source == "openb":
        trace = ev.load_trace(w)
        trace.check_schedulable(nodes, strict=w.strict)  # as ev.build_workload: strict refuses
        workload, _ = ev.trace_episodes(trace, nodes, tc.trace_span, tc.train_jobs, tc.trace_windows,
                                        tc.seed, w.target_load, "train.trace_span")
        frag = trace.frag_classes()  # as ev.build_workload's
    else:
        _, frag, _ = ev.build_workload(dataclasses.replace(
            config, eval=dataclasses.replace(config.eval, episodes=1)), nodes)
        workload = w.synthetic
        if workload.target_load is not None and workload.cluster_gpus is None:
            workload = workload.replace(cluster_gpus=nodes.total_gpus)
    env_params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    return ClusterEnv(config.env), env_params, workload, nodes


def train(run: RunConfig, out_dir: Path, resume: bool = False, show_progress: bool = True,
          stop_after: int | None = None):
    """Run (or resume) training; returns (trainer, final runner, log frame).

    stop_after: stop after this many updates (simulates an interruption; tests use it).
    """
    env, env_params, workload, _ = setup(run)
    tc = run.train
    tr = trainer.make_train(env, env_params, workload, run.agent, tc)
    init = jax.jit(tr.init)
    run_chunk = jax.jit(tr.run_chunk, donate_argnums=0)
    runner = init(jax.random.key(tc.seed))
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "train_log.csv"
    mgr = checkpoint.manager(out_dir / "checkpoints") if tc.checkpoint_every else None
    rows = []
    if resume and mgr is not None:
        step, restored = checkpoint.restore(mgr, runner)
        if step is not None:
            runner = restored
            if log_path.exists():
                old = pd.read_csv(log_path)
                rows = old[old["update"] <= step].to_dict("records")
    start = int(runner.update)
    end = tc.total_updates if stop_after is None else min(tc.total_updates, stop_after)
    started = time.perf_counter()
    with tqdm(total=tc.total_updates, initial=start, desc="updates", unit="upd",
              disable=not show_progress) as bar:
        while int(runner.update) < end:
            t0 = time.perf_counter()
            runner, summary = run_chunk(runner)
            summary = jax.device_get(summary)
            dt = time.perf_counter() - t0
            update = int(summary["update"])
            ret = float(summary["return"])
            rows.append({
                "update": update, "env_steps": update * tc.num_envs,
                "episodes_finished": int(summary["episodes_finished"]), "return": ret,
                "train_mean_jct_s": -ret / (tc.train_jobs * tc.reward_scale * env.config.reward_scale)
                if math.isfinite(ret) and tc.reward_scale > 0 else float("nan"),
                "reward_per_step": float(summary["reward_per_step"]), "loss": float(summary["loss"]),
                "q_mean": float(summary["q_mean"]), "epsilon": float(summary["epsilon"]),
                "env_steps_per_s": tc.chunk_updates * tc.num_envs / dt,
                "updates_per_s": tc.chunk_updates / dt, "wall_s": time.perf_counter() - started})
            _write_log(log_path, rows)
            bar.update(tc.chunk_updates)
            bar.set_postfix(ret=f"{ret:.2f}", loss=f"{rows[-1]['loss']:.3g}", eps=f"{rows[-1]['epsilon']:.2f}")
            if mgr is not None and update % tc.checkpoint_every == 0:
                checkpoint.save(mgr, update, runner)
    if mgr is not None:
        mgr.close()
    return tr, runner, pd.DataFrame(rows, columns=LOG_FIELDS)


def _write_log(path: Path, rows) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def evaluate_agent(run: RunConfig, graphdef, params, show_progress: bool = True):
    """The agent and every registered scheduler on the held-out episodes of ``[eval]``.

    Returns (per-episode frame, summary frame, info). Same jobs and env keys as
    ``jaxsched.evaluate`` (``build_workload``, ``episode_keys(seed, E, stream=1)``).
    """
    config = dataclasses.replace(run.base, eval=dataclasses.replace(
        run.base.eval, schedulers=tuple(policies.REGISTRY)))
    result = ev.evaluate(config, show_progress=show_progress)
    baseline_frame, info = result.per_episode, result.info
    nodes = ev.build_nodes(config)
    jobs, frag, _ = ev.build_workload(config, nodes)
    env_params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    max_steps = config.eval.max_steps or 3 * jobs.num_jobs + 100
    env_keys = ev.episode_keys(config.eval.seed, config.eval.episodes, stream=1)
    env = ClusterEnv(config.env)
    policy = ddqn.greedy_policy(graphdef, run.agent)
    fn = jax.jit(lambda p, pp, j, k: sharded_rollout(  # stepping: a network is a costly policy
        env, policy, pp, p, j, k, max_steps, turns=None)[1])
    frames, batch = [], config.eval.batch_size
    start = time.perf_counter()
    for lo in range(0, config.eval.episodes, batch):
        hi = min(lo + batch, config.eval.episodes)
        metrics = jax.device_get(fn(env_params, params, jax.tree.map(lambda x: x[lo:hi], jobs),
                                    env_keys[lo:hi]))
        frame = pd.DataFrame({k: np.asarray(v) for k, v in metrics.items()})
        frame.insert(0, "episode", np.arange(lo, hi))
        frames.append(frame)
    agent_frame = pd.concat(frames, ignore_index=True)
    agent_frame.insert(0, "scheduler", AGENT_NAME)
    info.setdefault("seconds_per_scheduler", {})[AGENT_NAME] = round(time.perf_counter() - start, 3)
    per_episode = pd.concat([agent_frame, baseline_frame], ignore_index=True)
    return per_episode, report.summarize(per_episode), info


def paired_differences(per_episode: pd.DataFrame, metric: str = "jct_mean") -> pd.DataFrame:
    """Agent minus each baseline on the same episodes: mean, 95% CI, and as % of the baseline."""
    agent = per_episode[per_episode.scheduler == AGENT_NAME].set_index("episode")[metric]
    rows = []
    for name, group in per_episode[per_episode.scheduler != AGENT_NAME].groupby("scheduler", sort=False):
        base = group.set_index("episode")[metric]
        diff = (agent - base).dropna().to_numpy(np.float64)
        half = 1.96 * diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
        mean_base = base.mean()
        rows.append({"baseline": name, "baseline_mean": mean_base, "agent_mean": agent.mean(),
                     "diff_mean": diff.mean(), "diff_ci95_lo": diff.mean() - half,
                     "diff_ci95_hi": diff.mean() + half,
                     "diff_pct": 100 * diff.mean() / mean_base,
                     "ci95_hi_pct": 100 * (diff.mean() + half) / mean_base})
    return pd.DataFrame(rows)


def plot(out_dir: Path, log: pd.DataFrame, per_episode: pd.DataFrame, summary: pd.DataFrame) -> None:
    """learning_curve.png, comparison.png (mean JCT ± CI per scheduler), jct_cdf.png
    (the distribution over episodes of each scheduler's mean JCT)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    axes[0].plot(log["env_steps"], log["return"], marker=".")
    axes[0].set(xlabel="env steps", ylabel="episode return", title="training return")
    axes[1].plot(log["env_steps"], log["loss"])
    axes[1].set(xlabel="env steps", ylabel="Huber loss", yscale="log", title="TD loss")
    axes[2].plot(log["env_steps"], log["q_mean"])
    axes[2].set(xlabel="env steps", ylabel="mean Q(s, a)", title="Q")
    fig.tight_layout()
    fig.savefig(out_dir / "learning_curve.png", dpi=120)
    plt.close(fig)

    order = summary.sort_values("jct_mean")
    fig, ax = plt.subplots(figsize=(8, 3.5))
    colors = ["tab:red" if s == AGENT_NAME else "tab:blue" for s in order["scheduler"]]
    ax.bar(order["scheduler"], order["jct_mean"], yerr=order["jct_mean_ci95"], color=colors)
    ax.set(ylabel="mean JCT (s)", title="held-out episodes (mean ± 95% CI)")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(out_dir / "comparison.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, group in per_episode.groupby("scheduler", sort=False):
        values = np.sort(group["jct_mean"].to_numpy())
        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=name,
                linewidth=2.5 if name == AGENT_NAME else 1.0)
    ax.set(xlabel="episode mean JCT (s)", ylabel="fraction of episodes", title="JCT CDF over episodes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "jct_cdf.png", dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    use_all_cpu_cores()  # one host device per core, before JAX starts (jaxsched/devices.py)
    parser = argparse.ArgumentParser(prog="python -m jaxsched.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"TOML run config ({DEFAULT_CONFIG})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. train.total_updates=200 (repeatable)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--out", help="output folder (eval.out_dir)")
    parser.add_argument("--no-eval", action="store_true", help="train only")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="skip training: evaluate the agent of DIR's last checkpoint (DIR's config.json "
                             "is not read: pass the same --config/--set it was trained with)")
    parser.add_argument("--eval-set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value for the evaluation only (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    overrides = list(args.set)
    if args.out:
        overrides.append(f"eval.out_dir={json.dumps(args.out)}")
    try:
        run = load(args.config, overrides)
        eval_run = with_eval_overrides(run, args.eval_set)
    except (DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out_dir = Path(eval_run.base.eval.out_dir)
    if args.checkpoint:
        source = Path(args.checkpoint)
        try:
            tr, runner = load_trained(run, source)
        except DataError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        out_dir.mkdir(parents=True, exist_ok=True)
        log_path = source / "train_log.csv"
        log = pd.read_csv(log_path) if log_path.exists() else pd.DataFrame(columns=LOG_FIELDS)
    else:
        tr, runner, log = train(run, out_dir, resume=args.resume, show_progress=not args.quiet)
    steady = log.iloc[1:] if len(log) > 1 else log  # the first chunk includes compilation
    throughput = {"env_steps_per_s": float(steady["env_steps_per_s"].mean()),
                  "updates_per_s": float(steady["updates_per_s"].mean()),
                  "train_wall_s": float(log["wall_s"].iloc[-1]) if len(log) else 0.0,
                  "backend": jax.default_backend(), "devices": len(jax.devices())}
    print(f"training: {throughput['env_steps_per_s']:.0f} env steps/s, "
          f"{throughput['updates_per_s']:.1f} updates/s on {throughput['backend']}")
    info = {"throughput": throughput, "checkpoint": args.checkpoint or str(out_dir / "checkpoints"),
            "eval_overrides": list(args.eval_set)}
    if not args.no_eval:
        per_episode, summary, eval_info = evaluate_agent(eval_run, tr.graphdef, runner.params,
                                                         show_progress=not args.quiet)
        paired = paired_differences(per_episode)
        per_episode.to_csv(out_dir / "per_episode.csv", index=False)
        summary.to_csv(out_dir / "summary.csv", index=False)
        paired.to_csv(out_dir / "paired.csv", index=False)
        table = report.markdown_table(summary)
        (out_dir / "summary.md").write_text(
            f"{table}\n\nPaired mean-JCT difference, {AGENT_NAME} minus baseline (s; 95% CI):\n\n"
            f"{_paired_md(paired)}\n\nTraining throughput: {throughput['env_steps_per_s']:.0f} env steps/s, "
            f"{throughput['updates_per_s']:.1f} updates/s ({throughput['backend']}).\n")
        plot(out_dir, log, per_episode, summary)
        info.update(eval=eval_info)
        print(table)
        print(_paired_md(paired))
    (out_dir / "config.json").write_text(json.dumps(
        {"config": cfg_lib.to_dict(run.base), "eval_config": cfg_lib.to_dict(eval_run.base), "agent": dataclasses.asdict(run.agent),
         "train": dataclasses.asdict(run.train), "info": info}, indent=2, default=str))
    print(f"wrote {out_dir}/")
    return 0


def _paired_md(paired: pd.DataFrame) -> str:
    lines = ["| baseline | baseline mean JCT | agent mean JCT | diff | 95% CI | diff % | CI upper % |",
             "|---|---|---|---|---|---|---|"]
    for _, r in paired.iterrows():
        lines.append(f"| {r.baseline} | {r.baseline_mean:.1f} | {r.agent_mean:.1f} | {r.diff_mean:+.1f} | "
                     f"[{r.diff_ci95_lo:+.1f}, {r.diff_ci95_hi:+.1f}] | {r.diff_pct:+.1f}% | {r.ci95_hi_pct:+.1f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
