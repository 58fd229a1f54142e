"""Train the GNN Double-DQN scheduler, then evaluate it beside every baseline:
``python -m jaxsched.train`` (default config: configs/gnn_ddqn.toml).

The run config is a normal run config (``[cluster] [workload] [env] [eval]``, see
``jaxsched.config``) plus ``[agent]`` (``agents.ddqn.AgentConfig``) and ``[train]``
(``agents.trainer.TrainConfig``). ``--set section.key=value`` overrides any of them.

Training runs ``train.num_seeds`` independent runs side by side (seeds ``train.seed + i``,
vmapped, split across local devices when their count divides it). At every checkpoint and at
the end, each run's greedy agent plays ``train.valid_episodes`` validation episodes (drawn
with ``train.valid_seed``; for a trace, windows of the training part ``train.trace_span``),
and the agent with the lowest validation mean JCT so far is the one evaluated: a choice of
seed and of checkpoint made without the held-out episodes.

Writes under ``eval.out_dir`` (``results/runs/<run>/``):
  train_log.csv       one row per (jitted chunk, run): return, loss, mean Q, epsilon, env steps/s
  valid_log.csv       one row per (validation, run): validation mean JCT
  checkpoints/        orbax checkpoints every ``train.checkpoint_every`` updates and at the end
                      (every run and the agent kept so far)
  per_episode.csv, summary.csv, summary.md, paired.csv   held-out evaluation
  learning_curve.png, comparison.png, jct_cdf.png, config.json
``--resume`` continues from the last checkpoint of the same folder; the result equals that
of an uninterrupted run (the checkpoint holds every bit of the runner, RNG key included).
``--checkpoint DIR`` skips training and evaluates the agent kept in DIR's last checkpoint.
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
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd
from tqdm import tqdm

from jaxsched.devices import configure_cpu
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
LOG_FIELDS = ("update", "run", "env_steps", "episodes_finished", "return", "train_mean_jct_s",
              "reward_per_step", "loss", "q_mean", "epsilon", "env_steps_per_s", "updates_per_s",
              "wall_s")
VALID_FIELDS = ("update", "run", "seed", "valid_jct_s")


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


class Selection(NamedTuple):
    """The agent that validation has picked so far (saved with every checkpoint)."""

    params: object           # its network parameters
    valid_jct_s: jax.Array   # [] float32: its mean JCT on the validation episodes (inf: none yet)
    run: jax.Array           # [] int32: which of the runs (training seed = train.seed + run)
    update: jax.Array        # [] int32: after how many updates


class Trained(NamedTuple):
    trainer: trainer.Trainer
    runners: trainer.Runner   # every leaf with a leading [train.num_seeds] runs axis
    selection: Selection
    log: pd.DataFrame         # train_log.csv: one row per (chunk, run)
    valid_log: pd.DataFrame   # valid_log.csv: one row per (validation, run)


def _pick(runners: trainer.Runner, run: int, valid_jct_s: float) -> Selection:
    return Selection(params=jax.tree.map(lambda x: x[run], runners.params),
                     valid_jct_s=np.float32(valid_jct_s), run=np.int32(run),
                     update=np.int32(runners.update[run]))


def _checkpoint_tree(runners, selection) -> dict:
    return {"runners": runners, "selection": selection}


def load_trained(run: RunConfig, run_dir: Path):
    """(trainer, selection) restored from the last checkpoint under ``run_dir``/checkpoints:
    the agent validation picked (with no validation, run 0's agent at that checkpoint)."""
    env, env_params, workload, _ = setup(run)
    tr = trainer.make_train(env, env_params, workload, run.agent, run.train)
    runners = jax.jit(trainer.over_seeds(tr.init, run.train.num_seeds))(  # the structure to restore into
        trainer.seed_keys(run.train.seed, run.train.num_seeds))
    like = _checkpoint_tree(runners, _pick(runners, 0, np.inf))
    mgr = checkpoint.manager(run_dir / "checkpoints")
    step, restored = checkpoint.restore(mgr, like)
    mgr.close()
    if step is None:
        raise DataError(str(run_dir / "checkpoints"), None, "checkpoint", "no checkpoint found")
    return tr, restored["selection"]


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
                                        tc.seed, w.target_load, "train.trace_span", w.max_work_s, w.replay)
        frag = trace.frag_classes()  # as ev.build_workload's
    else:
        _, frag, _ = ev.build_workload(dataclasses.replace(
            config, eval=dataclasses.replace(config.eval, episodes=1)), nodes)
        workload = w.synthetic
        if workload.target_load is not None and workload.cluster_capacity is None:
            workload = workload.replace(cluster_capacity=cl.work_capacity(nodes))
    env_params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    return ClusterEnv(config.env), env_params, workload, nodes


def train(run: RunConfig, out_dir: Path, resume: bool = False, show_progress: bool = True,
          stop_after: int | None = None) -> Trained:
    """Run (or resume) training of ``train.num_seeds`` runs side by side; returns ``Trained``.

    At every checkpoint and at the end, each run's greedy agent is validated
    (``train.valid_episodes``) and the best so far is kept in the selection.
    stop_after: stop after this many updates (simulates an interruption; tests use it).
    """
    env, env_params, workload, _ = setup(run)
    tc = run.train
    tr = trainer.make_train(env, env_params, workload, run.agent, tc)
    init = jax.jit(trainer.over_seeds(tr.init, tc.num_seeds))
    run_chunk = jax.jit(trainer.over_seeds(tr.run_chunk, tc.num_seeds), donate_argnums=0)
    runners = init(trainer.seed_keys(tc.seed, tc.num_seeds))
    selection = _pick(runners, 0, np.inf)
    validate = agent_episodes(validation_config(run), run.agent, tr.graphdef) if tc.valid_episodes else None
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path, valid_path = out_dir / "train_log.csv", out_dir / "valid_log.csv"
    mgr = checkpoint.manager(out_dir / "checkpoints") if tc.checkpoint_every else None
    rows, valid_rows = [], []
    if resume and mgr is not None:
        step, restored = checkpoint.restore(mgr, _checkpoint_tree(runners, selection))
        if step is not None:
            runners, selection = restored["runners"], restored["selection"]
            rows = _rows_until(log_path, step)
            valid_rows = _rows_until(valid_path, step)
    start = int(runners.update[0])
    end = tc.total_updates if stop_after is None else min(tc.total_updates, stop_after)
    started = time.perf_counter()
    with tqdm(total=tc.total_updates, initial=start, desc="updates", unit="upd",
              disable=not show_progress) as bar:
        while int(runners.update[0]) < end:
            t0 = time.perf_counter()
            runners, summary = run_chunk(runners)
            summary = jax.device_get(summary)  # every value [S]
            dt = time.perf_counter() - t0
            update = int(summary["update"][0])
            for i in range(tc.num_seeds):
                ret = float(summary["return"][i])
                rows.append({
                    "update": update, "run": i, "env_steps": update * tc.num_envs,
                    "episodes_finished": int(summary["episodes_finished"][i]), "return": ret,
                    "train_mean_jct_s": -ret / (tc.train_jobs * tc.reward_scale * env.config.reward_scale)
                    if math.isfinite(ret) and tc.reward_scale > 0 else float("nan"),
                    "reward_per_step": float(summary["reward_per_step"][i]),
                    "loss": float(summary["loss"][i]), "q_mean": float(summary["q_mean"][i]),
                    "epsilon": float(summary["epsilon"][i]),
                    "env_steps_per_s": tc.num_seeds * tc.chunk_updates * tc.num_envs / dt,
                    "updates_per_s": tc.num_seeds * tc.chunk_updates / dt,
                    "wall_s": time.perf_counter() - started})
            _write_rows(log_path, rows, LOG_FIELDS)
            bar.update(tc.chunk_updates)
            bar.set_postfix(ret=f"{float(np.mean(summary['return'])):.2f}",  # mean over runs
                            loss=f"{float(np.mean(summary['loss'])):.3g}", eps=f"{rows[-1]['epsilon']:.2f}")
            at_checkpoint = tc.checkpoint_every and update % tc.checkpoint_every == 0
            if at_checkpoint or update == tc.total_updates:
                if validate is None:
                    selection = _pick(runners, 0, np.nan)
                else:
                    selection, new_rows = _validate(validate, runners, selection, tc.seed)
                    valid_rows += new_rows
                    _write_rows(valid_path, valid_rows, VALID_FIELDS)
                    bar.write(f"validation after {update} updates: mean JCT "
                              + ", ".join(f"{r['valid_jct_s']:.1f} s" for r in valid_rows[-tc.num_seeds:])
                              + f" (kept: run {int(selection.run)} after {int(selection.update)} updates)")
            if mgr is not None and (at_checkpoint or update == tc.total_updates):
                checkpoint.save(mgr, update, _checkpoint_tree(runners, selection))
    if mgr is not None:
        mgr.close()
    return Trained(tr, runners, selection, pd.DataFrame(rows, columns=LOG_FIELDS),
                   pd.DataFrame(valid_rows, columns=VALID_FIELDS))


def _validate(play, runners: trainer.Runner, selection: Selection, seed: int):
    """Each run's greedy agent on the validation episodes (``play``, see ``agent_episodes``)
    -> (the selection, replaced by a run that does better than it; valid_log rows)."""
    rows = []
    for i in range(runners.update.shape[0]):
        jct = float(np.mean(play(jax.tree.map(lambda x: x[i], runners.params))["jct_mean"]))
        rows.append({"update": int(runners.update[i]), "run": i, "seed": seed + i, "valid_jct_s": jct})
        if jct < float(selection.valid_jct_s):
            selection = _pick(runners, i, jct)
    return selection, rows


def _rows_until(path: Path, update: int) -> list:
    if not path.exists():
        return []
    frame = pd.read_csv(path)
    return frame[frame["update"] <= update].to_dict("records")


def _write_rows(path: Path, rows, fields) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def validation_config(run: RunConfig) -> cfg_lib.Config:
    """The run config of the validation episodes: ``train.valid_episodes`` episodes drawn with
    ``train.valid_seed`` (not the evaluation seed), for a trace windows of the training part
    ``train.trace_span`` (never the evaluation part ``workload.trace_span``)."""
    base, tc = run.base, run.train
    if tc.valid_episodes and tc.valid_seed == base.eval.seed:
        raise DataError("config", None, "train.valid_seed",
                        f"must differ from eval.seed ({base.eval.seed}): validation episodes must not be the held-out ones")
    workload = base.workload
    if workload.source == "openb":
        workload = dataclasses.replace(workload, trace_span=tuple(tc.trace_span))
    return dataclasses.replace(base, workload=workload, eval=dataclasses.replace(
        base.eval, episodes=tc.valid_episodes, seed=tc.valid_seed,
        batch_size=min(base.eval.batch_size, max(tc.valid_episodes, 1))))


def agent_episodes(config: cfg_lib.Config, agent: ddqn.AgentConfig, graphdef):
    """``play(params) -> {metric: [E] numpy}``: the greedy agent on the episodes of ``config``.

    The episodes, env keys and rollout of ``jaxsched.evaluate`` (``build_workload``,
    ``episode_keys(seed, E, stream=1)``), run in batches of ``eval.batch_size`` and split
    across local devices; compiled once, so it can be called for many ``params``.
    """
    nodes = ev.build_nodes(config)
    jobs, frag, _ = ev.build_workload(config, nodes)
    env_params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    max_steps = config.eval.max_steps or 3 * jobs.num_jobs + 100
    env_keys = ev.episode_keys(config.eval.seed, config.eval.episodes, stream=1)
    env = ClusterEnv(config.env)
    policy = ddqn.greedy_policy(graphdef, agent)
    if config.eval.warmup_scheduler:  # as ``evaluate`` runs every other scheduler
        policy = policies.warmed_up(policy, policies.get(config.eval.warmup_scheduler).policy)
    fn = jax.jit(lambda p, pp, j, k: sharded_rollout(  # stepping: a network is a costly policy
        env, policy, pp, p, j, k, max_steps, turns=None)[1])
    batch, episodes = config.eval.batch_size, config.eval.episodes

    def play(params) -> dict:
        parts = [jax.device_get(fn(env_params, params, jax.tree.map(lambda x: x[lo:lo + batch], jobs),
                                   env_keys[lo:lo + batch]))
                 for lo in range(0, episodes, batch)]
        return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}

    return play


def evaluate_agent(run: RunConfig, graphdef, params, show_progress: bool = True):
    """The agent and every registered scheduler on the held-out episodes of ``[eval]``.

    Returns (per-episode frame, summary frame, info). Same jobs and env keys as
    ``jaxsched.evaluate`` (``build_workload``, ``episode_keys(seed, E, stream=1)``).
    """
    config = dataclasses.replace(run.base, eval=dataclasses.replace(
        run.base.eval, schedulers=tuple(policies.REGISTRY)))
    result = ev.evaluate(config, show_progress=show_progress)
    baseline_frame, info = result.per_episode, result.info
    start = time.perf_counter()
    agent_frame = pd.DataFrame(agent_episodes(config, run.agent, graphdef)(params))
    agent_frame.insert(0, "episode", np.arange(config.eval.episodes))
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


def plot(out_dir: Path, log: pd.DataFrame, valid_log: pd.DataFrame, per_episode: pd.DataFrame,
         summary: pd.DataFrame) -> None:
    """learning_curve.png (one line per run; validation JCT when there is one), comparison.png
    (mean JCT ± CI per scheduler), jct_cdf.png (the distribution over episodes of each
    scheduler's mean JCT)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 4 if len(valid_log) else 3
    fig, axes = plt.subplots(1, panels, figsize=(4.3 * panels, 3.5))
    for run, curve in log.groupby("run") if "run" in log else [(0, log)]:
        label = f"run {run}"
        axes[0].plot(curve["env_steps"], curve["return"], marker=".", label=label)
        axes[1].plot(curve["env_steps"], curve["loss"], label=label)
        axes[2].plot(curve["env_steps"], curve["q_mean"], label=label)
    axes[0].set(xlabel="env steps", ylabel="episode return", title="training return")
    axes[1].set(xlabel="env steps", ylabel="Huber loss", yscale="log", title="TD loss")
    axes[2].set(xlabel="env steps", ylabel="mean Q(s, a)", title="Q")
    if len(valid_log):
        for run, curve in valid_log.groupby("run"):
            axes[3].plot(curve["update"], curve["valid_jct_s"], marker="o", label=f"run {run}")
        axes[3].set(xlabel="updates", ylabel="mean JCT (s)", title="validation episodes")
    axes[0].legend(fontsize=7)
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
    configure_cpu()  # XLA flags for the CPU, before JAX starts (jaxsched/devices.py)
    parser = argparse.ArgumentParser(prog="python -m jaxsched.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"TOML run config ({DEFAULT_CONFIG})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. train.total_updates=200 (repeatable)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--out", help="output folder (eval.out_dir)")
    parser.add_argument("--no-eval", action="store_true", help="train only")
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="skip training: evaluate the agent kept in DIR's last checkpoint (DIR's config.json "
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
            tr, selection = load_trained(run, source)
        except DataError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        out_dir.mkdir(parents=True, exist_ok=True)
        log, valid_log = (pd.read_csv(source / name) if (source / name).exists() else pd.DataFrame(columns=fields)
                          for name, fields in (("train_log.csv", LOG_FIELDS), ("valid_log.csv", VALID_FIELDS)))
    else:
        try:
            tr, _, selection, log, valid_log = train(run, out_dir, resume=args.resume,
                                                     show_progress=not args.quiet)
        except DataError as err:  # e.g. --resume from a checkpoint of another config
            print(f"error: {err}", file=sys.stderr)
            return 2
    steady = log[log["update"] > log["update"].min()] if len(log) else log  # the first chunk includes compilation
    throughput = {"env_steps_per_s": float(steady["env_steps_per_s"].mean()),
                  "updates_per_s": float(steady["updates_per_s"].mean()),
                  "train_wall_s": float(log["wall_s"].max()) if len(log) else 0.0,
                  "runs": run.train.num_seeds, "backend": jax.default_backend(), "devices": len(jax.devices())}
    print(f"training: {throughput['env_steps_per_s']:.0f} env steps/s, "
          f"{throughput['updates_per_s']:.1f} updates/s ({run.train.num_seeds} runs together) "
          f"on {throughput['backend']}")
    selected = {"run": int(selection.run), "seed": run.train.seed + int(selection.run),
                "update": int(selection.update), "valid_jct_s": float(selection.valid_jct_s)}
    print(f"evaluating run {selected['run']} (seed {selected['seed']}) after {selected['update']} updates"
          + (f", validation mean JCT {selected['valid_jct_s']:.1f} s" if run.train.valid_episodes else ""))
    info = {"throughput": throughput, "selected": selected,
            "checkpoint": args.checkpoint or str(out_dir / "checkpoints"), "eval_overrides": list(args.eval_set)}
    if not args.no_eval:
        per_episode, summary, eval_info = evaluate_agent(eval_run, tr.graphdef, selection.params,
                                                         show_progress=not args.quiet)
        paired = paired_differences(per_episode)
        per_episode.to_csv(out_dir / "per_episode.csv", index=False)
        summary.to_csv(out_dir / "summary.csv", index=False)
        paired.to_csv(out_dir / "paired.csv", index=False)
        table = report.markdown_table(summary)
        (out_dir / "summary.md").write_text(
            f"{table}\n\nPaired mean-JCT difference, {AGENT_NAME} minus baseline (s; 95% CI):\n\n"
            f"{_paired_md(paired)}\n\n{AGENT_NAME}: run {selected['run']} of {run.train.num_seeds} "
            f"(training seed {selected['seed']}) after {selected['update']} updates"
            + (f", picked on {run.train.valid_episodes} validation episodes (seed {run.train.valid_seed})"
               if run.train.valid_episodes else "")
            + f".\n\nTraining throughput: {throughput['env_steps_per_s']:.0f} env steps/s, "
            f"{throughput['updates_per_s']:.1f} updates/s, {run.train.num_seeds} runs together "
            f"({throughput['backend']}).\n")
        plot(out_dir, log, valid_log, per_episode, summary)
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
