"""Agent quality against training budget: one learner's curve of held-out mean JCT, paired
with the best heuristic, at log-spaced env-step budgets.

One run of a learner's preset (one seed, no validation) trains to each budget in turn
(10^4, 3 x 10^4, 10^5, ... env steps, each rounded up to whole chunks of updates); after each,
the agent as it is then plays the preset's held-out episodes ([eval]: the same jobs, env keys
and first-fit warm-up as ``python -m jaxsched.train`` evaluates on) and the row

    label, env_steps, updates, train_s, agent_jct_s, baseline, baseline_jct_s,
    diff_pct, ci95_lo_pct, ci95_hi_pct, first_fit_diff_pct, eval_s

joins ``results/budget/budget.csv`` (paired mean-JCT difference, agent minus baseline, in %
of the baseline's mean, with its 95% CI). ``budget_curve.png`` plots every label's curve, and
``logs/<label>.csv`` keeps the run's training log (loss, Q or entropy, reward per env step,
per chunk of updates), committed beside the curve so that a curve that turns can be examined.

    python scripts/budget_curve.py --config gnn_ddqn --label gnn-ddqn-gamma0
    python scripts/budget_curve.py --config gnn_ddqn --set agent.gamma=0.97 --label gnn-ddqn-gamma0.97
    python scripts/budget_curve.py --config gnn_ppo --label gnn-ppo
    python scripts/budget_curve.py --config drr_64 --baseline fgd --label drr-64
    python scripts/budget_curve.py --plot-only          # redraw the plot from the CSV

A run stopped at any point continues with ``--resume`` (same arguments): the budgets already
in the CSV are skipped and training goes on from the run's last checkpoint (every
``--checkpoint-every`` updates, and at each budget) under ``results/budget/runs/<label>``
(not committed). ``--max-train-s`` stops a long one at a checkpoint after that many seconds.
``train_s`` is the training time summed over the sessions that ran it, a session stopped or
killed between two budgets included (its logged time, up to the run's last checkpoint).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

from jaxsched import policies, report
from jaxsched import train as tr
from jaxsched.devices import configure_cpu
from jaxsched.errors import DataError

FIELDS = ["label", "config", "overrides", "env_steps", "updates", "train_s", "agent_jct_s", "baseline",
          "baseline_jct_s", "diff_pct", "ci95_lo_pct", "ci95_hi_pct", "first_fit_diff_pct", "eval_s"]
GOAL_PCT = -3.0  # issue 38: at least 3% below the best heuristic's mean JCT


def budget_updates(budgets, env_steps_per_update: int, chunk_updates: int) -> list[int]:
    """Each env-step budget as updates, rounded up to whole chunks (ascending, no repeats)."""
    chunk_steps = env_steps_per_update * chunk_updates
    return sorted({chunk_updates * max(1, math.ceil(b / chunk_steps)) for b in budgets})


def load_run(config: str | None, sets=(), episodes: int | None = None):
    """The learner's run config: ``config`` (None: the main job's preset, as
    ``python -m jaxsched.train`` loads it) with ``sets`` applied, one seed and no validation."""
    overrides = [*sets, "train.num_seeds=1", "train.valid_episodes=0"]
    if episodes:
        overrides.append(f"eval.episodes={episodes}")
    return tr.load(config or tr.DEFAULT_CONFIG, overrides)


def interrupted_train_s(run_dir: Path, after_updates: int) -> float:
    """Seconds of training that ``run_dir``'s log holds past ``after_updates`` (the last budget
    in the CSV), up to the run's last checkpoint: the sessions stopped before the next budget.
    Each session's ``wall_s`` counts from its own start, so where it drops a new one begins."""
    log_path, folder = run_dir / "train_log.csv", run_dir / "checkpoints"
    if not log_path.exists() or not folder.is_dir():
        return 0.0
    last = max((int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), default=0)
    log = pd.read_csv(log_path)
    wall = log.loc[(log["run"] == 0) & (log["update"] > after_updates) & (log["update"] <= last),
                   "wall_s"].to_numpy()
    session_ends = [i for i in range(len(wall)) if i + 1 == len(wall) or wall[i + 1] < wall[i]]
    return float(sum(wall[i] for i in session_ends))


def read_rows(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.exists() else pd.DataFrame(columns=FIELDS)


def per_episode_jct(config, scheduler, params=None) -> pd.Series:
    """Mean JCT (s) of each of ``config``'s held-out episodes, indexed by episode."""
    return pd.Series(tr.agent_episodes(config, scheduler)(params)["jct_mean"])


def paired_pct(agent: pd.Series, base: pd.Series) -> tuple[float, float, float]:
    """(mean difference, CI low, CI high) of agent minus base, in % of base's mean."""
    diff, half = report.paired_difference(agent, base)
    scale = 100.0 / float(base.mean())
    return diff * scale, (diff - half) * scale, (diff + half) * scale


def plot(rows: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, curve in rows.groupby("label", sort=False):
        curve = curve.sort_values("env_steps")
        err = [curve["diff_pct"] - curve["ci95_lo_pct"], curve["ci95_hi_pct"] - curve["diff_pct"]]
        ax.errorbar(curve["env_steps"], curve["diff_pct"], yerr=err, marker="o", capsize=3,
                    label=f"{label} vs {curve['baseline'].iloc[0]}")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.axhline(GOAL_PCT, color="tab:green", linestyle="--", linewidth=0.8, label="goal (-3%)")
    ax.set(xscale="log", xlabel="training env steps", ylabel="mean JCT vs baseline (%)",
           title="held-out loaded episodes (paired, 95% CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    configure_cpu()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="a learner's preset or TOML (default: the main job's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--label", help="the curve's name in the CSV (default: the learner's kind)")
    parser.add_argument("--budgets", default="1e4,3e4,1e5,3e5,1e6", help="env-step budgets (comma-separated)")
    parser.add_argument("--baseline", default="sjf", help="the heuristic paired with (default sjf)")
    parser.add_argument("--episodes", type=int, help="held-out episodes (default the preset's eval.episodes)")
    parser.add_argument("--checkpoint-every", type=int, default=1000, help="updates between checkpoints")
    parser.add_argument("--out", default="results/budget", help="folder of budget.csv and the plot")
    parser.add_argument("--resume", action="store_true", help="continue this label's run")
    parser.add_argument("--max-train-s", type=float, metavar="S",
                        help="stop training at a checkpoint after about S seconds (--resume continues)")
    parser.add_argument("--plot-only", action="store_true", help="only redraw the plot from the CSV")
    args = parser.parse_args(argv)
    out = Path(args.out)
    csv_path, plot_path = out / "budget.csv", out / "budget_curve.png"
    if args.plot_only:
        plot(read_rows(csv_path), plot_path)
        return 0

    try:
        run = load_run(args.config, args.set, args.episodes)
        budgets = [float(b) for b in args.budgets.split(",")]
        if args.baseline not in policies.REGISTRY:
            raise DataError("--baseline", None, None, f"{args.baseline!r} is not a registered scheduler")
    except (DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    label = args.label or run.learner.name
    tc = run.train
    steps_per_update = tc.num_envs * tr.learner_steps(run)
    every = max(tc.chunk_updates, args.checkpoint_every // tc.chunk_updates * tc.chunk_updates)
    run_dir = out / "runs" / label
    rows = read_rows(csv_path)
    done = set(rows.loc[rows["label"] == label, "updates"].astype(int))
    if done and not args.resume:
        print(f"error: {csv_path} already holds rows of {label!r}: --resume continues its run, "
              "another --label starts a new one", file=sys.stderr)
        return 2
    train_s = float(rows.loc[rows["label"] == label, "train_s"].max()) if done else 0.0
    if args.resume:
        train_s += interrupted_train_s(run_dir, max(done, default=0))

    config = run.base  # the preset's held-out episodes, as python -m jaxsched.train evaluates them
    base_jct = per_episode_jct(config, policies.get(args.baseline))
    first_fit_jct = per_episode_jct(config, policies.get("first-fit"))
    play = None
    resume = args.resume and tr.has_checkpoint(run_dir)
    invocation_start = time.perf_counter()
    for updates in budget_updates(budgets, steps_per_update, tc.chunk_updates):
        if updates in done:
            continue
        segment = dataclasses.replace(run, train=dataclasses.replace(
            tc, total_updates=updates, checkpoint_every=every))
        start = time.perf_counter()
        time_left = None if args.max_train_s is None else args.max_train_s - (start - invocation_start)
        try:
            trained = tr.train(segment, run_dir, resume=resume, max_train_s=time_left)
        except DataError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        train_s += time.perf_counter() - start
        resume = True
        if int(trained.runners.update[0]) < updates:  # --max-train-s ran out: checkpointed there
            print(f"{label}: stopped after {int(trained.runners.update[0])} of {updates} updates "
                  f"(--max-train-s {args.max_train_s:g}); --resume continues", flush=True)
            return 0
        if int(trained.runners.update[0]) != updates:
            print(f"error: the checkpoint in {run_dir} is past {updates} updates: start another --label",
                  file=sys.stderr)
            return 2
        start = time.perf_counter()
        if play is None:
            play = tr.agent_episodes(config, trained.trainer.scheduler)
        params = trained.selection.params  # run 0's agent as it is now (no validation: nothing else is kept)
        agent_jct = pd.Series(play(params)["jct_mean"])
        diff, lo, hi = paired_pct(agent_jct, base_jct)
        row = {"label": label, "config": args.config or tr.DEFAULT_CONFIG, "overrides": " ".join(args.set),
               "env_steps": updates * steps_per_update, "updates": updates, "train_s": round(train_s, 1),
               "agent_jct_s": float(agent_jct.mean()), "baseline": args.baseline,
               "baseline_jct_s": float(base_jct.mean()), "diff_pct": diff, "ci95_lo_pct": lo, "ci95_hi_pct": hi,
               "first_fit_diff_pct": paired_pct(agent_jct, first_fit_jct)[0],
               "eval_s": round(time.perf_counter() - start, 1)}
        rows = pd.concat([read_rows(csv_path), pd.DataFrame([row])], ignore_index=True)
        out.mkdir(parents=True, exist_ok=True)
        rows.to_csv(csv_path, index=False, float_format="%.6g")
        plot(rows, plot_path)
        (out / "logs").mkdir(exist_ok=True)
        shutil.copyfile(run_dir / "train_log.csv", out / "logs" / f"{label}.csv")
        print(f"{label}: {row['env_steps']:,} env steps ({train_s:.0f} s of training): "
              f"{diff:+.2f}% [{lo:+.2f}, {hi:+.2f}] vs {args.baseline}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
