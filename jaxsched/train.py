"""Train a learned scheduler, then evaluate it beside every baseline:
``jaxsched train`` (or ``python -m jaxsched.train``; ``--config gnn_ddqn``, the default) or
``--config drr_64`` (a preset: ``configs/drr_64.toml``; ``--help`` lists them) or any TOML path.

The run config is a normal run config (``[cluster] [workload] [env] [eval]``, see
``jaxsched.config``) plus ``[agent]`` and ``[train]``. ``[agent] kind`` picks the learner
(``jaxsched.agents.LEARNERS``: "gnn-ddqn", the default, "drr" or "gnn-ppo"), whose settings
class reads the rest of ``[agent]`` (``agents.ddqn.AgentConfig``, ``agents.drr.DRRConfig``,
``agents.gnn_ppo.PPOConfig``);
``[train]`` is what every learner's loop shares (``agents.training.TrainConfig``).
``--set section.key=value`` overrides any of them; DRR's published flags (``--lr_actor
0.04``, ``--use_imitation True``, ``--num-node 64``, ...) work too (``published_overrides``).

Training runs ``train.num_seeds`` independent runs side by side (seeds ``train.seed + i``,
vmapped, split across local devices when their count divides it). At every checkpoint and at
the end, each run's greedy agent plays ``train.valid_episodes`` validation episodes (drawn
with ``train.valid_seed``; for a trace, windows of the training part ``train.trace_span``),
and the agent with the lowest validation mean JCT so far is the one evaluated: a choice of
seed and of checkpoint made without the held-out episodes.

Writes under ``eval.out_dir`` (``results/runs/<run>/``):
  train_log.csv       one row per (jitted chunk, run): return, env steps/s and the learner's
                      own fields (GNN-DDQN: loss, mean Q, epsilon; DRR: losses, entropy, beta;
                      GNN-PPO: losses, entropy, approx KL, clip fraction)
  valid_log.csv       one row per (validation, run): validation mean JCT, from update 0 (untrained)
  checkpoints/        orbax checkpoints every ``train.checkpoint_every`` updates and at the end
                      (every run and the agent kept so far)
  per_episode.csv, summary.csv, summary.md, paired.csv   held-out evaluation
  valid_baselines.csv first-fit, sjf and the best heuristic on the validation episodes (the curve's lines)
  learning_curve.png, comparison.png, paired.png (the agent minus each baseline, 95% CI), jct_cdf.png, config.json
  train_run.json      the settings the checkpoints are trained with (``run_identity``)
``--resume`` continues from the last checkpoint of the same folder; the result equals that
of an uninterrupted run (the checkpoint holds every bit of the runner, RNG key included).
It refuses a folder without checkpoints and a config that differs from ``train_run.json``
(e.g. another train.seed; train.total_updates may grow), falls back to the checkpoint
before a latest one that cannot be read, and says on stderr what a missing, cut or edited
log lost. A fresh run refuses a folder that holds checkpoints. Logs are written
atomically (a kill leaves the old or the new file).
``--checkpoint DIR`` skips training and evaluates the agent kept in DIR's last checkpoint.
With ``eval.sweep_loads`` set (``--eval-set eval.sweep_loads=[0.8,0.9,1.0]``) the agent and
``eval.schedulers`` run at each load instead, and the sweep's files (``jaxsched.evaluate
--sweep load``: sweep.csv, max_load.md with each one's maximum sustainable load, …) are written.
``--eval-set section.key=value`` changes the evaluation only, e.g. the agent trained on the
synthetic workload evaluated on windows of the openb trace at rho 0.9 (a transfer test)::

    python -m jaxsched.train --checkpoint results/runs/gnn_ddqn --out results/runs/transfer \\
        --eval-set workload.source=openb --eval-set workload.window_jobs=1000 \\
        --eval-set workload.trace=../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv

Workloads: synthetic (each training episode a fresh draw from the training key), or with
``workload.source = "openb"`` windows of the trace: training windows from the part
``train.trace_span`` of it, evaluation windows from ``workload.trace_span``
(``configs/gnn_ddqn_openb.toml`` splits the trace in halves).

Evaluation: the trained greedy policy, as a ``policies.Scheduler`` (``Trainer.scheduler``),
runs through ``evaluate.run_scheduler`` (the rollout of every heuristic) on exactly the
episodes ``jaxsched.evaluate`` builds from ``[eval]`` (its seed is not the training seed),
beside every registered scheduler.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import io
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
from jaxsched import agents, compile_cache
from jaxsched import config as cfg_lib
from jaxsched import evaluate as ev
from jaxsched import experiment, outputs, plots, policies, report
from jaxsched.agents import checkpoint, training
from jaxsched.errors import DataError
from jaxsched.rollout import default_chunk
from jaxsched.sim.env import ClusterEnv

DEFAULT_CONFIG = "configs/gnn_ddqn.toml"
COMMON_LOG_FIELDS = ("update", "run", "env_steps", "episodes_finished", "return", "train_mean_jct_s",
                     "reward_per_step")
TIMING_LOG_FIELDS = ("env_steps_per_s", "updates_per_s", "wall_s")
VALID_FIELDS = ("update", "env_steps", "run", "seed", "valid_jct_s")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    base: cfg_lib.Config
    agent: object                 # the learner's settings (agents.LEARNERS[agent.kind].config)
    train: training.TrainConfig

    @property
    def learner(self) -> agents.Learner:
        return agents.get(self.agent.kind)

    @property
    def log_fields(self) -> tuple:
        return COMMON_LOG_FIELDS + self.learner.log_fields + TIMING_LOG_FIELDS


def load(path=None, overrides=()) -> RunConfig:
    """A ``RunConfig`` from TOML (``[agent]`` and ``[train]`` beside the usual sections)."""
    data, where = {}, "config"
    if path is not None:
        path = cfg_lib.resolve(path)  # a preset name works too
        where, data = path, cfg_lib.read_toml(path)
    extra = {"agent": data.pop("agent", {}), "train": data.pop("train", {})}
    file_agent = dict(extra["agent"])
    base_overrides = []
    for text in overrides:
        head = text.split("=", 1)[0].strip().split(".")[0]
        if head in extra:
            parsed = cfg_lib.parse_override(text)
            extra[head].update(parsed[head])
        else:
            base_overrides.append(text)
    base = cfg_lib.apply_overrides(cfg_lib._merge(cfg_lib.Config(), data, where, ""), base_overrides)
    kind = extra["agent"].get("kind", agents.ddqn.AgentConfig.kind)
    if kind not in agents.LEARNERS:
        raise DataError(where, None, "agent.kind", f"unknown learner {kind!r}; known: {sorted(agents.LEARNERS)}")
    agent_cls = agents.LEARNERS[kind].config
    agent_fields = {f.name for f in dataclasses.fields(agent_cls)}
    file_kind = file_agent.get("kind", agents.ddqn.AgentConfig.kind)
    foreign = sorted(set(file_agent) - agent_fields)
    if kind != file_kind and foreign:  # --set agent.kind=... on another learner's preset
        raise DataError(where, None, f"agent.{foreign[0]}", f"is a setting of {file_kind!r}, not of {kind!r} "
                        f"(agent.kind was overridden): start from a {kind!r} preset instead")
    moved = sorted(set(extra["train"]) & agent_fields - {f.name for f in dataclasses.fields(training.TrainConfig)})
    if moved:
        raise DataError(where, None, f"train.{moved[0]}", f"is a setting of the learner: write it in [agent] "
                        f"(agent.{moved[0]}); [train] holds what every learner shares")
    run = RunConfig(base, cfg_lib.from_dict(agent_cls, extra["agent"], where, "agent."),
                    cfg_lib.from_dict(training.TrainConfig, extra["train"], where, "train."))
    try:
        run.learner.check(run.agent, run.train)
    except ValueError as err:
        raise DataError(where, None, "agent", str(err)) from None
    return run


def with_eval_overrides(run: RunConfig, overrides) -> RunConfig:
    """``run`` with ``section.key=value`` overrides applied to its evaluation only: the run
    config sections ``cluster``, ``workload``, ``env`` and ``eval``; ``agent`` and ``train`` are
    refused (the trained network and its training are fixed)."""
    for text in overrides:
        head = text.split("=", 1)[0].strip().split(".")[0]
        if head in ("agent", "train"):
            raise DataError("--eval-set", None, head, "evaluation overrides cannot change the agent or its training")
    return dataclasses.replace(run, base=cfg_lib.apply_overrides(run.base, overrides, "--eval-set"))


# DRR's published command line (../shared/SPEC.md, "DRR") -> run config keys. Flags naming
# a field of the learner's settings (``--lr_actor 0.04``, ``--use_imitation True``, ...) set
# ``agent.<flag>``; these others are checked or mapped here.
PUBLISHED_FLAGS = {"num_node": "cluster.preset_nodes", "interarrival_time": "workload.synthetic.mean_interarrival_s"}
DERIVED_FLAGS = ("init_dim", "action_space", "scheduler")


def published_overrides(tokens, agent_cls) -> tuple[list, dict]:
    """(``section.key=value`` overrides, flags to check against the built config) of DRR-style
    flags (``--name value`` or ``--name=value``; dashes and underscores alike), or a
    ``DataError`` naming an unknown flag."""
    overrides, derived, i = [], {}, 0
    fields = {f.name for f in dataclasses.fields(agent_cls)}
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            raise DataError("command line", None, token, "expected a --flag")
        name, eq, value = token[2:].partition("=")
        if not eq:
            if i + 1 >= len(tokens):
                raise DataError("command line", None, token, "needs a value")
            value, i = tokens[i + 1], i + 1
        i += 1
        key = name.replace("-", "_")
        value = {"true": "true", "false": "false"}.get(value.lower(), value)
        if key in PUBLISHED_FLAGS:
            overrides.append(f"{PUBLISHED_FLAGS[key]}={value}")
        elif key in DERIVED_FLAGS:
            derived[key] = value
        elif key in fields:
            overrides.append(f"agent.{key}={value if _is_toml_value(value) else json.dumps(value)}")
        else:
            raise DataError("command line", None, token, f"unknown flag; the learner's settings: {sorted(fields)}")
    return overrides, derived


def _is_toml_value(text: str) -> bool:
    try:
        cfg_lib.parse_override(f"x={text}")
        return True
    except (DataError, ValueError):
        return False


def check_derived(run: RunConfig, derived: dict) -> None:
    """Published flags that follow from the config (``--init_dim`` = 56 x nodes,
    ``--action_space`` = nodes, ``--scheduler DRR``) must agree with it. ``init_dim`` is
    checked as published (``drr.PUBLISHED_NODE_FEATURES`` x nodes): it names the node count,
    whatever this project's own feature count (``drr.NODE_FEATURES``)."""
    nodes = len(experiment.build_nodes(run.base))
    want = {"action_space": nodes, "init_dim": agents.drr.PUBLISHED_NODE_FEATURES * nodes}
    for key, value in derived.items():
        if key == "scheduler":
            if value.lower().replace("-", "") != run.agent.kind.replace("-", ""):
                raise DataError("command line", None, "--scheduler", f"{value!r}: this config trains {run.agent.kind!r}")
        elif int(value) != want[key]:
            raise DataError("command line", None, f"--{key}", f"{value}: this config's cluster needs {want[key]}")


class Selection(NamedTuple):
    """The agent that validation has picked so far (saved with every checkpoint)."""

    params: object           # its network parameters
    valid_jct_s: jax.Array   # [] float32: its mean JCT on the validation episodes (inf: none yet)
    run: jax.Array           # [] int32: which of the runs (training seed = train.seed + run)
    update: jax.Array        # [] int32: after how many updates


class Trained(NamedTuple):
    trainer: training.Trainer
    runners: object           # the learner's runner, every leaf with a leading [train.num_seeds] runs axis
    selection: Selection
    log: pd.DataFrame         # train_log.csv: one row per (chunk, run)
    valid_log: pd.DataFrame   # valid_log.csv: one row per (validation, run)


class Programs(NamedTuple):
    """A run's jitted programs (``_programs``)."""
    init: object                  # seed keys [S] -> runners (every leaf [S, ...])
    run_chunk: object             # runners -> (runners, summary); donates its argument
    validate: object              # agent_episodes on the validation episodes, or None


def _pick(runners, run: int, valid_jct_s: float) -> Selection:
    return Selection(params=jax.tree.map(lambda x: x[run], runners.params),
                     valid_jct_s=np.float32(valid_jct_s), run=np.int32(run),
                     update=np.int32(runners.update[run]))


def _checkpoint_tree(runners, selection) -> dict:
    return {"runners": runners, "selection": selection}


def make_trainer(run: RunConfig):
    """(trainer, env) of a run: its learner's ``make_train`` on the run's env and workload."""
    env, env_params, workload, _ = setup(run)
    return run.learner.make_train(env, env_params, workload, run.agent, run.train), env


def _programs(run: RunConfig) -> Programs:
    """The run's jitted programs, built once per process: a resumed, extended or evaluated
    run of the same settings reuses them instead of tracing them again. They do not depend on
    how long the run is or how often it checkpoints (only the Python loop reads those)."""
    tc = run.train
    return _programs_of(dataclasses.replace(run, train=dataclasses.replace(
        tc, total_updates=tc.chunk_updates, checkpoint_every=0)))


@functools.lru_cache(maxsize=4)
def _programs_of(run: RunConfig) -> Programs:
    tr, _ = make_trainer(run)
    tc = run.train
    return Programs(init=jax.jit(training.over_seeds(tr.init, tc.num_seeds)),
                    run_chunk=jax.jit(training.over_seeds(tr.run_chunk, tc.num_seeds), donate_argnums=0),
                    validate=agent_episodes(validation_config(run), tr.scheduler) if tc.valid_episodes else None)


def load_trained(run: RunConfig, run_dir: Path):
    """(trainer, selection) restored from the last checkpoint under ``run_dir``/checkpoints:
    the agent validation picked (with no validation, run 0's agent at that checkpoint)."""
    tr, _ = make_trainer(run)
    runners = _programs(run).init(training.seed_keys(run.train.seed, run.train.num_seeds))  # the structure to restore into
    like = _checkpoint_tree(runners, _pick(runners, 0, np.inf))
    mgr = checkpoint.manager(run_dir / "checkpoints")
    step, restored = checkpoint.restore(mgr, like)
    mgr.close()
    if step is None:
        raise DataError(str(run_dir / "checkpoints"), None, "checkpoint", "no checkpoint found")
    return tr, restored["selection"]


def setup(run: RunConfig):
    """(env, env_params, training workload, nodes) of a run. The env is the run's, as the
    learner needs it (``Learner.env_config``). The training workload is the synthetic
    config, or for ``workload.source = "openb"`` a bank of ``train.trace_windows`` trace
    windows of ``train.train_jobs`` jobs from the part ``train.trace_span`` of the trace
    (compressed to ``workload.target_load``; see ``training.make_reset``)."""
    config = run.base
    nodes = experiment.build_nodes(config)
    env_params, workload = experiment.training_workload(config, run.train, nodes)
    return ClusterEnv(run.learner.env_config(run.agent, config.env)), env_params, workload, nodes


def train(run: RunConfig, out_dir: Path, resume: bool = False, show_progress: bool = True,
          stop_after: int | None = None, max_train_s: float | None = None) -> Trained:
    """Run (or resume) training of ``train.num_seeds`` runs side by side; returns ``Trained``.

    Before the first update (the untrained agent: the learning curve's start), at every
    checkpoint and at the end, each run's greedy agent is validated (``train.valid_episodes``);
    of the trained ones, the best so far is kept in the selection.
    stop_after: stop after this many updates (simulates an interruption; tests use it).
    max_train_s: stop after the first chunk that ends past this many seconds of training; that
    chunk is validated and checkpointed as the last one (a run sized to a time budget).
    """
    tc, learner, fields = run.train, run.learner, run.log_fields
    tr, env = make_trainer(run)
    init, run_chunk, validate = _programs(run)
    runners = init(training.seed_keys(tc.seed, tc.num_seeds))
    selection = _pick(runners, 0, np.inf)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path, valid_path = out_dir / "train_log.csv", out_dir / "valid_log.csv"
    mgr = checkpoint.manager(out_dir / "checkpoints") if tc.checkpoint_every else None
    rows, valid_rows = [], []
    if resume:
        if mgr is None:
            raise DataError("config", None, "train.checkpoint_every",
                            "is 0: this run writes no checkpoints, so --resume has nothing to continue")
        check_same_run(out_dir, run)
        step, restored = checkpoint.restore(mgr, _checkpoint_tree(runners, selection))
        if step is None:
            raise DataError(str(out_dir / "checkpoints"), None, "--resume",
                            "no checkpoint to resume from (run without --resume to start afresh)")
        runners, selection = restored["runners"], restored["selection"]
        rows = _rows_until(log_path, step, tc.num_seeds * step // tc.chunk_updates)
        valid_rows = _rows_until(valid_path, step, None) if tc.valid_episodes else []  # never validated: no log
    else:
        if has_checkpoint(out_dir):
            raise DataError(str(out_dir / "checkpoints"), None, "--out",
                            "holds checkpoints of an earlier run: --resume continues it; "
                            "another --out (or deleting them) starts afresh")
        outputs.write_atomically(out_dir / RUN_FILE, json.dumps(run_identity(run), indent=1, default=str))
    start = int(runners.update[0])
    env_steps_per_update = tc.num_envs * learner_steps(run)
    if validate is not None and not resume:  # the untrained agent: where every learning curve starts
        _, valid_rows = _validate(validate, runners, selection, tc.seed, env_steps_per_update)
        _write_rows(valid_path, valid_rows, VALID_FIELDS)
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
                row = {"update": update, "run": i, "env_steps": update * tc.num_envs * learner_steps(run),
                       "episodes_finished": int(summary["episodes_finished"][i]), "return": ret,
                       "train_mean_jct_s": -ret / (tc.train_jobs * tc.reward_scale * env.config.reward_scale)
                       if math.isfinite(ret) and tc.reward_scale > 0 else float("nan"),
                       "reward_per_step": float(summary["reward_per_step"][i])}
                row.update({f: float(summary[f][i]) for f in learner.log_fields})
                row.update({"env_steps_per_s": tc.num_seeds * tc.chunk_updates * tc.num_envs * learner_steps(run) / dt,
                            "updates_per_s": tc.num_seeds * tc.chunk_updates / dt,
                            "wall_s": time.perf_counter() - started})
                rows.append(row)
            _write_rows(log_path, rows, fields)
            bar.update(tc.chunk_updates)
            mean_return = float(np.mean(summary["return"]))  # over runs; NaN: no episode ended
            bar.set_postfix(ret=f"{mean_return:.2f}" if math.isfinite(mean_return) else "-",
                            **{f: f"{float(np.mean(summary[f])):.3g}" for f in learner.progress_fields})
            at_checkpoint = tc.checkpoint_every and update % tc.checkpoint_every == 0
            out_of_time = max_train_s is not None and time.perf_counter() - started >= max_train_s
            last = update == tc.total_updates or out_of_time
            if at_checkpoint or last:
                if validate is None:
                    selection = _pick(runners, 0, np.nan)
                else:
                    selection, new_rows = _validate(validate, runners, selection, tc.seed, env_steps_per_update)
                    valid_rows += new_rows
                    _write_rows(valid_path, valid_rows, VALID_FIELDS)
                    bar.write(f"validation after {update} updates: mean JCT "
                              + ", ".join(f"{r['valid_jct_s']:.1f} s" for r in valid_rows[-tc.num_seeds:])
                              + f" (kept: run {int(selection.run)} after {int(selection.update)} updates)")
            if mgr is not None and (at_checkpoint or last):
                checkpoint.save(mgr, update, _checkpoint_tree(runners, selection))
            if out_of_time:
                bar.write(f"--max-train-s {max_train_s:g}: training stopped after {update} updates")
                break
    if mgr is not None:
        mgr.close()
    return Trained(tr, runners, selection, pd.DataFrame(rows, columns=fields),
                   pd.DataFrame(valid_rows, columns=VALID_FIELDS))


def learner_steps(run: RunConfig) -> int:
    """Env steps of each env per update (``Learner.steps_per_update``)."""
    return run.learner.steps_per_update(run.agent)


def _validate(play, runners, selection: Selection, seed: int, env_steps_per_update: int):
    """Each run's greedy agent on the validation episodes (``play``, see ``agent_episodes``)
    -> (the selection, replaced by a run that does better than it; valid_log rows). The
    caller drops the selection of update 0: the untrained agent is measured, never kept."""
    rows = []
    for i in range(runners.update.shape[0]):
        jct = float(np.mean(play(jax.tree.map(lambda x: x[i], runners.params))["jct_mean"]))
        update = int(runners.update[i])
        rows.append({"update": update, "env_steps": update * env_steps_per_update, "run": i, "seed": seed + i,
                     "valid_jct_s": jct})
        if jct < float(selection.valid_jct_s):
            selection = _pick(runners, i, jct)
    return selection, rows


def has_checkpoint(out_dir: Path) -> bool:
    """``out_dir`` holds a training checkpoint (a step folder under ``checkpoints/``)."""
    folder = Path(out_dir) / "checkpoints"
    return folder.is_dir() and any(p.is_dir() and p.name.isdigit() for p in folder.iterdir())


RUN_FILE = "train_run.json"  # what a run's checkpoints were trained with (``run_identity``)


def run_identity(run: RunConfig) -> dict:
    """The settings a resumed run must share with the checkpoints it continues: all but the
    evaluation and train.total_updates / checkpoint_every (a run may be extended), as JSON."""
    train_part = {k: v for k, v in dataclasses.asdict(run.train).items()
                  if k not in ("total_updates", "checkpoint_every")}
    base = cfg_lib.to_dict(run.base)
    base.pop("eval")
    return json.loads(json.dumps({**base, "agent": dataclasses.asdict(run.agent), "train": train_part},
                                 default=str))


def check_same_run(out_dir: Path, run: RunConfig) -> None:
    """A ``DataError`` naming the settings that differ if ``out_dir``'s checkpoints were
    trained with another config (e.g. another train.seed, which would mislabel the agent). A
    setting missing from ``train_run.json`` (newer than the checkpoints) counts as its default."""
    path = out_dir / RUN_FILE
    try:
        saved = json.loads(path.read_text())
    except FileNotFoundError:
        print(f"WARNING: {path} is missing: cannot check that --resume continues the same run",
              file=sys.stderr)
        return
    except (OSError, ValueError) as err:
        raise DataError(str(path), None, "--resume", f"cannot be read ({err}): cannot check the run") from None

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    now, then = flat(run_identity(run)), flat(saved)
    # A setting added since the checkpoints were written is absent from the file; at its default
    # (what the earlier code did) it is the same run.
    defaults = flat(run_identity(RunConfig(cfg_lib.Config(), type(run.agent)(), training.TrainConfig())))
    differ = sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k)
                    and not (k not in then and k in defaults and now[k] == defaults[k]))
    if differ:
        shown = "; ".join(f"{k} = {now.get(k)!r} now, {then.get(k)!r} in the checkpoints" for k in differ[:5])
        raise DataError(str(path), None, "--resume", f"these checkpoints were trained with other settings: {shown}"
                        + (f" (and {len(differ) - 5} more)" if len(differ) > 5 else ""))


def _rows_until(path: Path, update: int, expected: int | None) -> list:
    """The log's rows up to ``update`` (``expected`` of them, when known); a log that is
    missing, unreadable or short is said on stderr and continued from what it holds."""
    try:
        frame = pd.read_csv(path)
        frame = frame[pd.to_numeric(frame["update"], errors="coerce") <= update]
        frame = frame[frame[frame.columns[-1]].notna()]  # a row cut short lacks its last field
    except (OSError, ValueError, KeyError, pd.errors.ParserError) as err:  # EmptyDataError is a ValueError
        print(f"WARNING: {path} cannot be read ({type(err).__name__}: {err}); the log restarts at "
              f"update {update}, earlier rows are lost", file=sys.stderr)
        return []
    if expected is not None and len(frame) != expected:
        print(f"WARNING: {path} holds {len(frame)} rows up to update {update}, {expected} expected: "
              "it was changed after it was written", file=sys.stderr)
    return frame.to_dict("records")


def _write_rows(path: Path, rows, fields) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    outputs.write_atomically(path, out.getvalue())


def validation_config(run: RunConfig) -> cfg_lib.Config:
    """The run config of the validation episodes: ``train.valid_episodes`` episodes drawn with
    ``train.valid_seed`` (not the evaluation seed), for a trace windows of the training part
    ``train.trace_span`` (never the evaluation part ``workload.trace_span``)."""
    base, tc = run.base, run.train
    if tc.valid_episodes and tc.valid_seed == base.eval.seed:
        raise DataError("config", None, "train.valid_seed",
                        f"must differ from eval.seed ({base.eval.seed}): validation episodes must not be the held-out ones")
    workload = base.workload
    if workload.source in experiment.TRACES:
        workload = dataclasses.replace(workload, trace_span=tuple(tc.trace_span))
    return dataclasses.replace(base, workload=workload, eval=dataclasses.replace(
        base.eval, episodes=tc.valid_episodes, seed=tc.valid_seed,
        batch_size=min(base.eval.batch_size, max(tc.valid_episodes, 1))))


CURVE_BASELINES = ("first-fit", "sjf")  # drawn on every learning curve, beside the best heuristic


def validation_baselines(run: RunConfig, summary: pd.DataFrame, agent_name: str) -> dict:
    """{label: mean JCT (s) on the validation episodes} of first-fit, sjf and the heuristic
    with the lowest mean JCT in ``summary`` (the held-out evaluation): the learning curve's
    horizontal lines, on the episodes its points are measured on."""
    heuristics = summary[summary["scheduler"] != agent_name].sort_values("jct_mean")["scheduler"]
    best = heuristics.iloc[0] if len(heuristics) else None
    config = validation_config(run)
    levels = {}
    for name in dict.fromkeys((*CURVE_BASELINES, best)):
        if name in policies.REGISTRY:
            jct = float(np.mean(agent_episodes(config, policies.get(name))(None)["jct_mean"]))
            levels[f"{name} (best heuristic)" if name == best else name] = jct
    return levels


def agent_episodes(config: cfg_lib.Config, scheduler: policies.Scheduler):
    """``play(params) -> {metric: [E] numpy}``: the trained agent (``scheduler``, e.g.
    ``Trainer.scheduler``) on the episodes of ``config``, through ``evaluate.run_scheduler``:
    the episodes, env keys, rollout and batching of every heuristic in ``jaxsched.evaluate``.
    Compiled once, so it can be called for many ``params``."""
    jobs, env_params, max_steps, env_keys, _ = experiment.episodes(config, experiment.build_nodes(config))

    def play(params) -> dict:
        frame, _ = ev.run_scheduler(scheduler, config, env_params, jobs, env_keys, max_steps,
                                    policy_params=params)
        return {k: frame[k].to_numpy() for k in frame.columns if k not in ("scheduler", "episode")}

    return play


def evaluate_agent(run: RunConfig, trainer: training.Trainer, params, show_progress: bool = True,
                   baselines: tuple | None = None):
    """The agent and ``baselines`` (registry names; default every scheduler of flat actions) on the
    held-out episodes of ``[eval]``.

    Returns (per-episode frame, summary frame, info). Same jobs, env keys and rollout as
    ``jaxsched.evaluate`` (``experiment.episodes``).
    """
    config = dataclasses.replace(run.base, eval=dataclasses.replace(
        run.base.eval, schedulers=tuple(baselines or policies.flat_names())))
    # Per-episode metrics only: no per-job schedule and no timeline (a second stepped rollout
    # of each baseline, compiled apart: half the main job's compile time), which the main
    # job does not write.
    result = ev.evaluate(dataclasses.replace(config, eval=dataclasses.replace(
        config.eval, plots=False, per_job=False)), show_progress=show_progress)
    baseline_frame, info = result.per_episode, result.info
    start = time.perf_counter()
    name = trainer.scheduler.name
    agent_frame = pd.DataFrame(agent_episodes(_validation_batches(run, config), trainer.scheduler)(params))
    agent_frame.insert(0, "episode", np.arange(config.eval.episodes))
    agent_frame.insert(0, "scheduler", name)
    info.setdefault("seconds_per_scheduler", {})[name] = round(time.perf_counter() - start, 3)
    per_episode = pd.concat([agent_frame, baseline_frame], ignore_index=True)
    return per_episode, report.summarize(per_episode), info


def _validation_batches(run: RunConfig, config: cfg_lib.Config) -> cfg_lib.Config:
    """``config`` in batches of validation's size when every episode runs alone (a CPU,
    ``rollout.default_chunk() == 1``: the results do not depend on the batch): the agent's
    held-out episodes then reuse validation's compiled rollout instead of compiling it again
    for another batch shape."""
    if not run.train.valid_episodes or default_chunk() != 1:
        return config
    batch = validation_config(run).eval.batch_size
    return dataclasses.replace(config, eval=dataclasses.replace(config.eval, batch_size=batch))


def parse_baselines(text: str | None) -> tuple | None:
    """``--baselines a,b,...`` -> registry names (None: every registered scheduler)."""
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in policies.REGISTRY]
    if not names or unknown:
        raise ValueError(f"--baselines {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'names none'} "
                         f"(registered: {', '.join(policies.REGISTRY)})")
    return names


def paired_differences(per_episode: pd.DataFrame, agent_name: str, metric: str = "jct_mean") -> pd.DataFrame:
    """Agent minus each baseline on the same episodes: mean, 95% CI, and as % of the baseline."""
    agent = per_episode[per_episode.scheduler == agent_name].set_index("episode")[metric]
    rows = []
    for name, group in per_episode[per_episode.scheduler != agent_name].groupby("scheduler", sort=False):
        base = group.set_index("episode")[metric]
        diff, half = report.paired_difference(agent, base)
        mean_base = float(base.mean())  # float64 from here (the CSV columns are float32)
        rows.append({"baseline": name, "baseline_mean": mean_base, "agent_mean": agent.mean(),
                     "diff_mean": diff, "diff_ci95_lo": diff - half, "diff_ci95_hi": diff + half,
                     "diff_pct": 100 * diff / mean_base, "ci95_hi_pct": 100 * (diff + half) / mean_base})
    return pd.DataFrame(rows)


def learning_curve(learner: agents.Learner, log: pd.DataFrame, valid_log: pd.DataFrame,
                   valid_baselines: dict | None = None):
    """The learning curve's figure, one line per run against env steps: the validation mean
    JCT from the untrained agent on, with ``valid_baselines`` {label: mean JCT on the same
    validation episodes} as horizontal lines (when there is a validation); the training
    return, or the reward per env step where no training episode ended (loaded episodes of
    thousands of jobs); then the learner's own panels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_valid = len(valid_log) > 0
    panels = (1 if has_valid else 0) + 1 + len(learner.panels)
    cols = min(panels, 4)  # rows of at most 4 panels, so a learner with many stays readable
    rows = -(-panels // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(4.3 * cols, 3.5 * rows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[panels:]:
        fig.delaxes(ax)
    axes = axes[:panels]
    if has_valid:
        x = "env_steps" if valid_log.get("env_steps", pd.Series(dtype=float)).notna().all() else "update"
        for run, curve in valid_log.groupby("run"):
            axes[0].plot(curve[x], curve["valid_jct_s"], marker="o", label=f"run {run}")
        for (name, jct), style in zip((valid_baselines or {}).items(), ("--", ":", "-.", (0, (1, 3)))):
            axes[0].axhline(jct, color="gray", linestyle=style, linewidth=1, label=name)
        axes[0].set(xlabel=x.replace("_", " "), ylabel="mean JCT (s)", title="validation episodes")
        axes[0].legend(fontsize=7)
    train_axes = axes[1:] if has_valid else axes
    returns = "return" in log and log["return"].notna().any()
    field, ylabel, title = (("return", "episode return", "training return") if returns else
                            ("reward_per_step", "reward per env step", "training reward (no episode ended)"))
    for run, curve in log.groupby("run") if "run" in log else [(0, log)]:
        label = f"run {run}"
        train_axes[0].plot(curve["env_steps"], curve[field], marker=".", label=label)
        for ax, (panel_field, *_) in zip(train_axes[1:], learner.panels):
            ax.plot(curve["env_steps"], curve[panel_field], label=label)
    train_axes[0].set(xlabel="env steps", ylabel=ylabel, title=title)
    for ax, (_, panel_ylabel, panel_title, yscale) in zip(train_axes[1:], learner.panels):
        ax.set(xlabel="env steps", ylabel=panel_ylabel, yscale=yscale, title=panel_title)
    if not has_valid:
        train_axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def comparison(summary: pd.DataFrame, agent_name: str, outlier_factor: float = 2.0):
    """comparison.png's figure: each scheduler's mean JCT ± 95% CI as bars, lowest first, the
    agent in red. A scheduler above ``outlier_factor`` times the median (e.g. strict FIFO whose
    queue overflows at high load) would flatten every other bar: the axis stops above the
    others and such a bar is cut there, its value written on it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = summary.sort_values("jct_mean")
    means, cis = order["jct_mean"].to_numpy(), order["jct_mean_ci95"].to_numpy()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    colors = ["tab:red" if s == agent_name else "tab:blue" for s in order["scheduler"]]
    ax.bar(order["scheduler"], means, yerr=cis, color=colors)
    outlier = means > outlier_factor * np.median(means)
    if outlier.any() and not outlier.all():
        top = 1.15 * float(np.max(means[~outlier] + np.nan_to_num(cis[~outlier])))
        ax.set_ylim(0.0, top)
        for i in np.flatnonzero(outlier):
            ax.text(i, 0.97 * top, f"{means[i]:,.0f} ↑", ha="center", va="top", fontsize=7, rotation=90,
                    color="white")
    ax.set(ylabel="mean JCT (s)", title="held-out episodes (mean ± 95% CI)")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return fig


def plot(out_dir: Path, learner: agents.Learner, log: pd.DataFrame, valid_log: pd.DataFrame,
         per_episode: pd.DataFrame, summary: pd.DataFrame, valid_baselines: dict | None = None) -> None:
    """learning_curve.png (``learning_curve``), comparison.png (mean JCT ± CI per
    scheduler), jct_cdf.png (the distribution over episodes of each scheduler's mean JCT)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agent_name = learner.name
    fig = learning_curve(learner, log, valid_log, valid_baselines)
    fig.savefig(out_dir / "learning_curve.png", dpi=120)
    plt.close(fig)

    fig = comparison(summary, agent_name)
    fig.savefig(out_dir / "comparison.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, group in per_episode.groupby("scheduler", sort=False):
        values = np.sort(group["jct_mean"].to_numpy())
        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=name,
                linewidth=2.5 if name == agent_name else 1.0)
    ax.set(xlabel="episode mean JCT (s)", ylabel="fraction of episodes", title="JCT CDF over episodes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "jct_cdf.png", dpi=120)
    plt.close(fig)


def main(argv=None, prog: str = "python -m jaxsched.train") -> int:
    configure_cpu()  # XLA flags for the CPU, before JAX starts (jaxsched/devices.py)
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, epilog=cfg_lib.preset_help(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=DEFAULT_CONFIG,
                        help=f"a TOML run config or a preset's name (default {DEFAULT_CONFIG})")
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
    parser.add_argument("--max-train-s", type=float, metavar="S",
                        help="stop training after the chunk that passes S seconds (validated and "
                             "checkpointed as the last), then evaluate as usual")
    parser.add_argument("--baselines", metavar="A,B,...",
                        help="the heuristics evaluated beside the agent (default: every registered one)")
    compile_cache.add_arguments(parser)
    args, published = parser.parse_known_args(argv)
    compile_cache.enable_from_args(args)
    clock = compile_cache.CompileClock()
    overrides = list(args.set)
    if args.out:
        overrides.append(f"eval.out_dir={json.dumps(args.out)}")
    try:
        kind = load(args.config, overrides).agent.kind
        flag_overrides, derived = published_overrides(published, agents.get(kind).config)
        run = load(args.config, flag_overrides + overrides)  # --set wins over a published flag
        check_derived(run, derived)
        eval_run = with_eval_overrides(run, args.eval_set)
        baselines = parse_baselines(args.baselines)
        outputs.check_writable(Path(eval_run.base.eval.out_dir))  # before training, not after it
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
                          for name, fields in (("train_log.csv", run.log_fields), ("valid_log.csv", VALID_FIELDS)))
    else:
        try:
            tr, _, selection, log, valid_log = train(run, out_dir, resume=args.resume,
                                                     show_progress=not args.quiet, max_train_s=args.max_train_s)
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
          f"on {throughput['backend']}" if len(steady) else
          "training: one chunk only, which includes compiling: no throughput measured")
    selected = {"run": int(selection.run), "seed": run.train.seed + int(selection.run),
                "update": int(selection.update), "valid_jct_s": float(selection.valid_jct_s)}
    print(f"evaluating run {selected['run']} (seed {selected['seed']}) after {selected['update']} updates"
          + (f", validation mean JCT {selected['valid_jct_s']:.1f} s" if run.train.valid_episodes else ""))
    info = {"throughput": throughput, "selected": selected, "versions": outputs.package_versions(),
            "checkpoint": args.checkpoint or str(out_dir / "checkpoints"), "eval_overrides": list(args.eval_set)}
    if eval_run.base.eval.sweep_loads and not args.no_eval:  # the agent beside eval.schedulers at each load
        per_episode, summary, max_load, sweep_info = ev.sweep_load(
            eval_run.base, show_progress=not args.quiet, agents=[(tr.scheduler, selection.params)])
        ev.write_sweep(out_dir, eval_run.base, per_episode, summary, max_load, sweep_info)
        info.update(sweep=sweep_info)
        print(ev.max_load_text(per_episode, max_load))
    elif not args.no_eval:
        name = tr.scheduler.name
        per_episode, summary, eval_info = evaluate_agent(eval_run, tr, selection.params,
                                                         show_progress=not args.quiet, baselines=baselines)
        paired = {metric: paired_differences(per_episode, name, metric) for metric in run.learner.paired_metrics}
        per_episode.to_csv(out_dir / "per_episode.csv", index=False)
        summary.to_csv(out_dir / "summary.csv", index=False)
        pd.concat([frame.assign(metric=metric) for metric, frame in paired.items()]).to_csv(
            out_dir / "paired.csv", index=False)
        table = report.summary_markdown(summary)
        paired_md = "\n\n".join(f"Paired {PAIRED_TITLES.get(metric, metric)} difference, {name} minus baseline "
                                 f"(95% CI):\n\n{_paired_md(frame)}" for metric, frame in paired.items())
        (out_dir / "summary.md").write_text(
            f"{table}\n\n{paired_md}\n\n{name}: run {selected['run']} of {run.train.num_seeds} "
            f"(training seed {selected['seed']}) after {selected['update']} updates"
            + (f", picked on {run.train.valid_episodes} validation episodes (seed {run.train.valid_seed})"
               if run.train.valid_episodes else "")
            + f".\n\nTraining throughput: {throughput['env_steps_per_s']:.0f} env steps/s, "
            f"{throughput['updates_per_s']:.1f} updates/s, {run.train.num_seeds} runs together "
            f"({throughput['backend']}).\n")
        baselines_valid = validation_baselines(run, summary, name) if run.train.valid_episodes else {}
        if baselines_valid:
            pd.DataFrame({"scheduler": list(baselines_valid), "valid_jct_s": list(baselines_valid.values())}).to_csv(
                out_dir / "valid_baselines.csv", index=False)
        plot(out_dir, run.learner, log, valid_log, per_episode, summary, baselines_valid)
        first = run.learner.paired_metrics[0]  # the learner's headline metric (JCT; DRR: fragmentation rate)
        plots.paired(paired[first], name, out_dir / "paired.png", PAIRED_TITLES.get(first, first))
        info.update(eval=eval_info)
        print(table)
        print(paired_md)
        for line in report.warnings(per_episode, eval_run.base.env):  # drops, step caps, late starts
            print(f"WARNING: {line}", file=sys.stderr)
    info.update(compile=clock.since().as_dict())
    print(clock.since().describe())
    (out_dir / "config.json").write_text(json.dumps(
        {"config": cfg_lib.to_dict(run.base), "eval_config": cfg_lib.to_dict(eval_run.base), "agent": dataclasses.asdict(run.agent),
         "train": dataclasses.asdict(run.train), "info": info}, indent=2, default=str))
    print(f"wrote {out_dir}/")
    if run.agent.kind in LEARNER_DOCS:
        print(f"what it means, and the committed runs to compare with: {LEARNER_DOCS[run.agent.kind]}")
    return 0


LEARNER_DOCS = {"gnn-ddqn": "docs/learners/gnn-ddqn.md", "drr": "docs/learners/drr-results.md",
                "gnn-ppo": "docs/learners/gnn-ppo.md"}

PAIRED_TITLES = {"jct_mean": "mean-JCT (s)", "frag_rate": "fragmentation-rate", "gpu_alloc": "GPU-allocation",
                 "queue_delay_mean": "mean queueing delay (s)",
                 "frag_amount": "fragmentation (F over GPU capacity)",
                 "work_alloc": "work-allocation (speed-weighted)"}


def _paired_md(paired: pd.DataFrame) -> str:
    small = paired["baseline_mean"].abs().max() < 10  # ratios (allocation, fragmentation): more digits
    f = "{:.4f}" if small else "{:.1f}"
    d = "{:+.4f}" if small else "{:+.1f}"
    lines = ["| baseline | baseline mean | agent mean | diff | 95% CI | diff % | CI upper % |",
             "|---|---|---|---|---|---|---|"]
    for _, r in paired.iterrows():
        lines.append(f"| {r.baseline} | {f.format(r.baseline_mean)} | {f.format(r.agent_mean)} | {d.format(r.diff_mean)} | "
                     f"[{d.format(r.diff_ci95_lo)}, {d.format(r.diff_ci95_hi)}] | {r.diff_pct:+.1f}% | {r.ci95_hi_pct:+.1f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
