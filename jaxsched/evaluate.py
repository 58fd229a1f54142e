"""Evaluate schedulers side by side on the same episodes: ``python -m jaxsched.evaluate``.

Every scheduler runs over the same batch of episodes (same workloads, same tie-break keys)
in one jitted, vmapped rollout per batch. Writes, under ``eval.out_dir``:

- ``per_episode.csv`` (every metric of every episode, plus its offered load),
  ``summary.csv`` and ``summary.md`` (mean and 95% CI per scheduler), ``config.json``;
- ``per_job.csv`` with ``--per-job`` (eval.per_job): the complete schedule, one row per job;
- with plots on (eval.plots, default): ``jct_cdf.png``, ``queue_delay.png``, ``metrics.png``
  (a bar per scheduler and headline metric) and ``timeline.png`` + ``timeline.csv`` (the
  cluster after every decision of the first ``eval.timeline_episodes`` episodes).

With ``--sweep load`` (eval.sweep_loads) every scheduler runs at each offered load instead,
and ``sweep.csv`` (mean and CI per scheduler and load), ``sweep_per_episode.csv`` and
``sweep.png`` (each headline metric against load) are written.

Examples (``jaxsched evaluate`` is the same command)::

    python -m jaxsched.evaluate                                  # built-in synthetic workload
    python -m jaxsched.evaluate --config drr_32 --set eval.episodes=128   # a preset (--help lists them)
    python -m jaxsched.evaluate --config configs/drr_32.toml --per-job
    python -m jaxsched.evaluate --sweep load --loads 0.5,0.7,0.9,1.1
    python -m jaxsched.evaluate --set workload.source=openb \\
        --set workload.trace=../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv
    python -m jaxsched.evaluate --list                           # the registered schedulers
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd
from tqdm import tqdm

from jaxsched.devices import configure_cpu
from jaxsched import cluster as cl
from jaxsched import config as cfg_lib
from jaxsched import compile_cache, experiment, outputs, policies, report
from jaxsched.errors import DataError
from jaxsched.rollout import TURNS, rollout_timeline, sharded_rollout
from jaxsched.sim.env import ClusterEnv
from jaxsched.sim.rounds import attained_now
from jaxsched.types import EnvParams


DEFAULT_SWEEP_LOADS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1)


@functools.lru_cache(maxsize=None)
def _compiled_rollout(env: ClusterEnv, policy, max_steps: int, turns: int | None = TURNS):
    """Jitted ``run(policy_params, env_params, jobs, keys)`` -> (metrics, the final-state
    fields of ``report.RECORD_FIELDS``).

    Cached, so a sweep (or a second evaluation in one process) compiles once per scheduler.
    With several local devices the episodes are split across them (``sharded_rollout``).
    """
    def run(policy_params, params, jobs, keys):
        state, metrics = sharded_rollout(env, policy, policy_params, params, jobs, keys, max_steps, turns)
        records = {f: getattr(state, f) if hasattr(state, f) else getattr(state.core, f)
                   for f in report.RECORD_FIELDS}
        if env.config.rounds:  # per job: preemptions and attained service (report.ROUND_FIELDS)
            attained_s, attained_gpu_s = jax.vmap(attained_now)(state)
            records.update(preemptions=state.segments.preemptions, attained_s=attained_s,
                           attained_gpu_s=attained_gpu_s)
        return metrics, records
    return jax.jit(run)


@functools.lru_cache(maxsize=None)
def _compiled_timeline(env: ClusterEnv, policy, num_steps: int):
    return jax.jit(lambda p, j, k: rollout_timeline(env, policy, None, p, j, k, num_steps)[1])


def _scheduler(sched: str | policies.Scheduler) -> policies.Scheduler:
    return policies.get(sched) if isinstance(sched, str) else sched


def scheduler_policy(sched: str | policies.Scheduler, config: cfg_lib.Config):
    """A scheduler's policy (a registry name, or a ``Scheduler`` such as a trained agent's),
    after ``eval.warmup_scheduler``'s warm-up if set; a round policy with its settings bound
    (``Scheduler.bound_policy``)."""
    sched = _scheduler(sched)
    warmup = config.eval.warmup_scheduler
    if sched.round_policy:  # (a round policy plays its warm-up itself) with its settings
        return sched.bound_policy(config.env)
    if not warmup:
        return sched.policy
    return policies.warmed_up(sched.policy, policies.get_flat(warmup, "eval.warmup_scheduler").policy)


def run_scheduler(sched: str | policies.Scheduler, config: cfg_lib.Config, params: EnvParams, jobs,
                  env_keys, max_steps: int, progress=None, policy_params=None):
    """One scheduler over all episodes (batched): a registry name, or a ``Scheduler`` such as
    a trained agent's (``policy_params``: its network parameters), through the same rollout.

    Returns (per-episode metrics frame, records): records holds ``report.RECORD_FIELDS`` of
    the final states as host arrays with a leading [E] axis (for the per-job schedule), and
    with rounds ``report.ROUND_FIELDS`` too.
    """
    sched = _scheduler(sched)
    env = ClusterEnv(sched.env_config(config.env))  # its GPU rule and queue order
    if env.config.rounds and not config.eval.max_steps:  # a round is a decision
        max_steps = max(max_steps, experiment.round_cap(jobs, params, env.config.round_s))
    run = _compiled_rollout(env, scheduler_policy(sched, config), max_steps, sched.turns)
    episodes, batch = config.eval.episodes, config.eval.batch_size
    frames, records = [], []
    for lo in range(0, episodes, batch):
        hi = min(lo + batch, episodes)
        chunk = jax.tree.map(lambda x: x[lo:hi], jobs)
        metrics, recs = jax.device_get(run(policy_params, params, chunk, env_keys[lo:hi]))
        frame = pd.DataFrame({k: np.asarray(v) for k, v in metrics.items()})
        frame.insert(0, "episode", np.arange(lo, hi))
        frame = frame.assign(**report.never_started(jax.device_get(chunk), recs))
        frames.append(frame)
        records.append(recs)
        if progress is not None:
            progress.update(hi - lo)
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "scheduler", sched.name)
    return out, {k: np.concatenate([r[k] for r in records]) for k in records[0]}


def run_timeline(name: str, config: cfg_lib.Config, params: EnvParams, jobs, env_keys,
                 num_steps: int) -> pd.DataFrame:
    """The cluster after each of ``num_steps`` decisions of the given (few) episodes.

    Columns: scheduler, episode, step, time_s, alloc_milli, frag_milli, queue_len, done;
    rows after an episode's end are left out (its last row has done = True).
    """
    sched = policies.get(name)
    env = ClusterEnv(sched.env_config(config.env))
    rec = jax.device_get(_compiled_timeline(env, scheduler_policy(sched, config), num_steps)(
        params, jobs, env_keys))
    done = np.asarray(rec["done"])
    # Keep steps up to and including the first done one.
    keep = np.cumsum(np.cumsum(done, axis=1), axis=1) <= 1
    eps, steps = np.nonzero(keep)
    frame = pd.DataFrame({k: np.asarray(v)[eps, steps] for k, v in rec.items()})
    frame.insert(0, "step", steps)
    frame.insert(0, "episode", eps)
    frame.insert(0, "scheduler", name)
    return frame


@dataclasses.dataclass
class Evaluation:
    """What ``evaluate`` returns. schedule: the per-job frame (None unless eval.per_job or
    eval.plots); timeline: None unless plots are on and eval.timeline_episodes > 0."""

    per_episode: pd.DataFrame
    summary: pd.DataFrame
    info: dict
    schedule: pd.DataFrame | None = None
    timeline: pd.DataFrame | None = None


def check_schedulers(config: cfg_lib.Config) -> None:
    """Every configured scheduler is known and its env settings hold (a round policy with
    rescheduling passes, or in static mode, does not): a ``DataError`` naming the scheduler
    and the setting, before any scheduler runs, so no finished scheduler's results are lost."""
    warmup = (config.eval.warmup_scheduler,) if config.eval.warmup_scheduler else ()
    for name in config.eval.schedulers + warmup:
        sched = policies.get(name)
        try:
            sched.env_config(config.env)
        except ValueError as err:
            raise DataError("config", None, "eval.schedulers", f"{name!r} cannot run with these settings: {err}") from None


def evaluate(config: cfg_lib.Config, show_progress: bool = True) -> Evaluation:
    """Run every configured scheduler on the same episodes (see the module doc)."""
    check_schedulers(config)
    nodes = experiment.build_nodes(config)
    config = experiment.span_within(config, nodes)
    jobs, params, max_steps, env_keys, info = experiment.episodes(config, nodes)
    host_jobs = jax.device_get(jobs)
    rho = report.offered_load(host_jobs, cl.work_capacity(nodes), experiment.unschedulable(config, params, jobs))
    static = config.env.mode == "static"
    want_schedule = config.eval.per_job or config.eval.plots
    n_timeline = min(config.eval.timeline_episodes, config.eval.episodes) if config.eval.plots else 0
    total = config.eval.episodes * len(config.eval.schedulers)
    frames, schedules, timelines, timings = [], [], [], {}
    clock = compile_cache.CompileClock()
    interrupted = False
    with tqdm(total=total, desc="episodes", unit="ep", disable=not show_progress) as bar:
        for name in config.eval.schedulers:
            try:
                start = time.perf_counter()
                frame, records = run_scheduler(name, config, params, jobs, env_keys, max_steps, bar)
                frame["offered_load"] = rho
                jobs_frame = timeline = None
                if want_schedule:  # every job with --per-job; the plots need the measured ones
                    jobs_frame = report.schedule_frame(name, host_jobs, records, static, config.env.warmup_jobs)
                    jobs_frame = jobs_frame if config.eval.per_job else jobs_frame[jobs_frame["measured"]]
                if n_timeline > 0:
                    num_steps = max(int(frame["decisions"][:n_timeline].max()), 1)
                    few = jax.tree.map(lambda x: x[:n_timeline], jobs)
                    timeline = run_timeline(name, config, params, few, env_keys[:n_timeline], num_steps)
            except KeyboardInterrupt:  # keep the schedulers that finished
                if not frames:
                    raise
                interrupted = True
                break
            frames.append(frame)
            timings[name] = round(time.perf_counter() - start, 3)
            schedules += [] if jobs_frame is None else [jobs_frame]
            timelines += [] if timeline is None else [timeline]
    per_episode = pd.concat(frames, ignore_index=True)
    info.update(nodes=len(nodes), gpus=nodes.total_gpus, work_capacity=cl.work_capacity(nodes),
                episodes=config.eval.episodes, max_steps=max_steps, seconds_per_scheduler=timings,
                compile=clock.since().as_dict(), interrupted=interrupted,
                schedulers_done=list(timings))
    return Evaluation(per_episode, report.summarize(per_episode), info,
                      pd.concat(schedules, ignore_index=True) if schedules else None,
                      pd.concat(timelines, ignore_index=True) if timelines else None)


def check_loads(loads) -> tuple:
    """The sweep's loads as floats; a ``DataError`` naming eval.sweep_loads if one is bad."""
    out = []
    for x in loads:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < math.inf:
            raise DataError("config", None, "eval.sweep_loads",
                            f"loads must be finite numbers > 0, got {x!r}")
        if float(x) in out:  # its episodes would be pooled: a CI too narrow
            raise DataError("config", None, "eval.sweep_loads", f"load {x!r} is given twice")
        out.append(float(x))
    return tuple(out)


def sweep_load(config: cfg_lib.Config, show_progress: bool = True, agents=()):
    """Every scheduler at every load of ``eval.sweep_loads``, on the same episode keys:
    ``eval.schedulers`` and ``agents``, (``Scheduler``, policy params) pairs such as a
    trained agent's (``python -m jaxsched.train --checkpoint DIR --eval-set eval.sweep_loads=…``).

    Returns (per-episode frame with a ``load`` column, summary per (scheduler, load), the
    maximum sustainable load per scheduler (``report.max_sustainable_load``), info).
    """
    loads = check_loads(config.eval.sweep_loads)
    check_schedulers(config)
    nodes = experiment.build_nodes(config)
    config = experiment.span_within(config, nodes)
    for load in loads:  # every load's settings hold, before any runs
        experiment.with_load(config, load, nodes)
    runs = [(name, None) for name in config.eval.schedulers] + list(agents)
    total = config.eval.episodes * len(runs) * len(loads)
    frames, infos = [], {}
    clock = compile_cache.CompileClock()
    points_done = []  # "scheduler at load" of every sweep point run
    with tqdm(total=total, desc="sweep", unit="ep", disable=not show_progress) as bar:
        try:
            for load in loads:
                c = experiment.with_load(config, load, nodes)
                jobs, params, max_steps, env_keys, info = experiment.episodes(c, nodes)
                rho = report.offered_load(jax.device_get(jobs), cl.work_capacity(nodes),
                                          experiment.unschedulable(c, params, jobs))
                infos[str(load)] = info
                for sched, policy_params in runs:
                    frame, _ = run_scheduler(sched, c, params, jobs, env_keys, max_steps, bar,
                                             policy_params=policy_params)
                    frame.insert(1, "load", load)
                    frame["offered_load"] = rho
                    frames.append(frame)
                    points_done.append(f"{_scheduler(sched).name} at {load}")
        except KeyboardInterrupt:  # keep what finished
            if not frames:
                raise
    per_episode = pd.concat(frames, ignore_index=True)
    info = {"source": config.workload.source, "loads": list(loads), "nodes": len(nodes),
            "gpus": nodes.total_gpus, "work_capacity": cl.work_capacity(nodes),
            "episodes": config.eval.episodes, "saturation_growth": report.SATURATION_GROWTH,
            "per_load": infos, "compile": clock.since().as_dict(),
            "interrupted": len(points_done) < len(loads) * len(runs),
            "schedulers_done": points_done}
    return (per_episode, report.summarize(per_episode, by=["scheduler", "load"]),
            report.max_sustainable_load(per_episode), info)


def _write_config(out_dir: Path, config, info) -> None:
    (out_dir / "config.json").write_text(json.dumps(
        {"config": cfg_lib.to_dict(config), "info": {**info, "versions": outputs.package_versions()}},
        indent=2, default=str))


def write_outputs(out_dir: Path, config, result: Evaluation) -> list:
    """Write the CSVs, tables, config and plots of an evaluation; returns the file names."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result.per_episode.to_csv(out_dir / "per_episode.csv", index=False)
    result.summary.to_csv(out_dir / "summary.csv", index=False)
    (out_dir / "summary.md").write_text(report.summary_markdown(result.summary))
    _write_config(out_dir, config, result.info)
    written = ["per_episode.csv", "summary.csv", "summary.md", "config.json"]
    if config.eval.per_job and result.schedule is not None:
        result.schedule.to_csv(out_dir / "per_job.csv", index=False)
        written.append("per_job.csv")
    if result.timeline is not None:
        result.timeline.to_csv(out_dir / "timeline.csv", index=False)
        written.append("timeline.csv")
    if config.eval.plots:
        from jaxsched import plots  # matplotlib only when plotting

        total_milli = result.info["gpus"] * 1000
        made = [plots.jct_cdf(result.schedule, out_dir / "jct_cdf.png"),
                plots.queue_delay_cdf(result.schedule, out_dir / "queue_delay.png"),
                plots.metric_bars(result.summary, report.HEADLINE, out_dir / "metrics.png")]
        if result.timeline is not None:
            made.append(plots.timeline(result.timeline, total_milli, out_dir / "timeline.png"))
        written += [p.name for p in made if p is not None]
    return written


def has_load_grid(per_episode) -> bool:
    """A maximum sustainable load needs a grid: two loads or more (with one, every episode is
    below or above it and the table says nothing)."""
    return per_episode["load"].nunique() > 1


def max_load_text(per_episode, max_load) -> str:
    """``report.max_load_table``, or why there is none."""
    if has_load_grid(per_episode):
        return report.max_load_table(max_load)
    return "(one load: no maximum sustainable load, which needs a grid of loads)\n"


def write_sweep(out_dir: Path, config, per_episode, summary, max_load, info) -> list:
    """Write sweep.csv, sweep_per_episode.csv, config.json and (plots on) sweep.png (every
    headline metric); over two loads or more also max_load.csv / max_load.md,
    max_load_per_episode.csv (each episode's, to pair schedulers by episode) and (plots on)
    saturation.png (JCT, queueing delay, allocation and backlog growth against the load, with
    each scheduler's maximum sustainable load)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary.to_csv(out_dir / "sweep.csv", index=False)
    per_episode.to_csv(out_dir / "sweep_per_episode.csv", index=False)
    written = ["sweep.csv", "sweep_per_episode.csv"]
    grid = has_load_grid(per_episode)
    if grid:
        max_load.to_csv(out_dir / "max_load.csv", index=False)
        report.max_load_per_episode(per_episode).to_csv(out_dir / "max_load_per_episode.csv", index=False)
        (out_dir / "max_load.md").write_text(report.max_load_table(max_load))
        written += ["max_load.csv", "max_load_per_episode.csv", "max_load.md"]
    _write_config(out_dir, config, info)
    written.append("config.json")
    if config.eval.plots:
        from jaxsched import plots

        made = [plots.sweep(summary, report.HEADLINE, out_dir / "sweep.png")]
        if grid:
            made.append(plots.saturation(summary, max_load, out_dir / "saturation.png"))
        written += [m.name for m in made if m is not None]
    return written


def main(argv=None, prog: str = "python -m jaxsched.evaluate") -> int:
    configure_cpu()  # XLA flags for the CPU, before JAX starts (jaxsched/devices.py)
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, epilog=cfg_lib.preset_help(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="a TOML run config or a preset's name, e.g. drr_64 "
                                         "(default: built-in defaults, configs/default.toml's values)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. env.window=4 (repeatable)")
    parser.add_argument("--schedulers", help="comma-separated registry names")
    parser.add_argument("--episodes", type=int)
    parser.add_argument("--out", help="output folder (eval.out_dir)")
    parser.add_argument("--per-job", action="store_true",
                        help="also write per_job.csv, the complete schedule (eval.per_job)")
    parser.add_argument("--no-plots", action="store_true", help="no PNG plots (eval.plots=false)")
    parser.add_argument("--sweep", choices=["load"],
                        help="run every scheduler at each offered load (see --loads)")
    parser.add_argument("--loads", metavar="RHO,RHO,...",
                        help="offered loads of the sweep (eval.sweep_loads; default "
                             + ",".join(map(str, DEFAULT_SWEEP_LOADS)) + ")")
    parser.add_argument("--list", action="store_true", help="list the schedulers and exit")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    compile_cache.enable_from_args(args)
    clock = compile_cache.CompileClock()
    if args.list:
        for s in policies.REGISTRY.values():
            print(f"{s.name:16s} GPU rule {s.gpu_rule:10s} {s.description}")
        return 0
    overrides = list(args.set)
    if args.schedulers:
        overrides.append("eval.schedulers=" + json.dumps(args.schedulers.split(",")))
    if args.episodes is not None:
        overrides.append(f"eval.episodes={args.episodes}")
    if args.out:
        overrides.append(f"eval.out_dir={json.dumps(args.out)}")
    if args.per_job:
        overrides.append("eval.per_job=true")
    if args.no_plots:
        overrides.append("eval.plots=false")
    try:
        if args.loads is not None:
            try:
                loads = [float(x) for x in args.loads.split(",")]
            except ValueError:
                raise DataError("--loads", None, "eval.sweep_loads",
                                f"expected numbers separated by commas, got {args.loads!r}") from None
            bad = [x for x in loads if not 0 < x < math.inf]  # (nan, inf: not JSON either)
            if bad:
                raise DataError("--loads", None, "eval.sweep_loads", f"loads must be finite numbers > 0, got {bad[0]!r}")
            overrides.append(f"eval.sweep_loads={json.dumps(loads)}")
        elif args.sweep == "load":
            overrides.append(f"eval.sweep_loads={json.dumps(list(DEFAULT_SWEEP_LOADS))}")
        config = cfg_lib.load(args.config, overrides)
        check_schedulers(config)
        out_dir = Path(config.eval.out_dir)
        outputs.check_writable(out_dir)  # before the work, not after it
        if config.eval.sweep_loads:
            per_episode, summary, max_load, info = sweep_load(config, show_progress=not args.quiet)
            written = outputs.publish(out_dir, lambda d: write_sweep(d, config, per_episode, summary, max_load, info))
            print(f"{info['episodes']} episodes x {len(config.eval.schedulers)} schedulers x "
                  f"{len(info['loads'])} loads on {info['nodes']} nodes ({info['gpus']} GPUs), "
                  f"workload: {info['source']}")
            print(report.markdown_table(summary, by=["scheduler", "load"]))
            print(max_load_text(per_episode, max_load))
        else:
            result = evaluate(config, show_progress=not args.quiet)
            written = outputs.publish(out_dir, lambda d: write_outputs(d, config, result))
            per_episode, info = result.per_episode, result.info
            print(f"{info['episodes']} episodes x {len(config.eval.schedulers)} schedulers on "
                  f"{info['nodes']} nodes ({info['gpus']} GPUs), workload: {info['source']}")
            print(report.markdown_table(result.summary))
        for line in report.warnings(per_episode, config.env):
            print(f"WARNING: {line}", file=sys.stderr)
        print(clock.since().describe())
    except (DataError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before any scheduler finished (evaluate keeps those that did)
        print("interrupted before any scheduler finished: nothing written", file=sys.stderr)
        return 130
    print(f"wrote {out_dir}/" + ", ".join(written))
    if info.get("interrupted"):
        print(f"interrupted: the results above are those of {', '.join(info['schedulers_done'])} only",
              file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
