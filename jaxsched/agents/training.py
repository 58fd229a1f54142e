"""What every learner's training loop shares: its settings (``[train]``), the batch of
training envs with auto-reset over fresh workloads, and runs side by side over seeds.

A learner (``jaxsched.agents.LEARNERS``) builds, with ``make_train(env, env_params,
workload, agent_config, train_config)``, a ``Trainer``:
  init(key) -> runner                  fresh networks, optimisers, envs, RNG (a pytree)
  run_chunk(runner) -> (runner, summary)   ``chunk_updates`` updates in one ``lax.scan``
  train(key) -> (runner, summaries)    init + every chunk: pure, jittable, vmappable over seeds
  scheduler                            the trained greedy agent as a ``policies.Scheduler``
                                       (``policy(params, obs, key)``), evaluated through the
                                       same rollout as every heuristic
Every runner has ``params`` (what the scheduler's policy takes) and ``update`` (updates
done); ``summary`` holds ``update``, ``episodes_finished``, ``return`` (mean return of the
episodes finished in the chunk, NaN if none), ``reward_per_step`` and the learner's own log
fields (``Learner.log_fields``). The runner holds everything, the RNG key included, so a
run restored from a checkpoint continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxsched import policies
from jaxsched.config import check_positive_ints, check_seeds
from jaxsched.rollout import warm_up_batch
from jaxsched.sim.env import ClusterEnv
from jaxsched.types import EnvParams, Jobs
from jaxsched.workload import synthetic


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings every learner's training loop shares (hashable; the ``[train]`` TOML table).
    The learner's own settings (networks, optimiser, loss) are in ``[agent]``.

    seed: training RNG seed. num_envs: vmapped envs. total_updates: updates in the run
    (a multiple of chunk_updates). chunk_updates: updates per jitted call (log/progress row).
    checkpoint_every: updates between checkpoints (a multiple of chunk_updates; 0 = none).
    train_jobs: jobs per training episode (the workload otherwise follows [workload.synthetic]).
    reward_scale: multiplies the env reward (``EnvConfig.reward``, in job-hours by default).
    trace_span, trace_windows: with a trace workload (``workload.source = "openb"``),
    training episodes are ``trace_windows`` windows of ``train_jobs`` jobs cut from the part
    ``trace_span`` of the trace (keep it disjoint from ``workload.trace_span``, where the
    evaluation windows come from). warmup_scheduler: "" (default), the agent plays every
    episode from its first arrival; a registry name (e.g. "first-fit"): that heuristic plays
    each episode until its first measured job arrives (``env.warmup_jobs``) and the agent
    learns from there, on a loaded cluster. num_seeds: runs side by side (seeds seed + i).
    valid_episodes, valid_seed: validation episodes at every checkpoint (they pick the run
    and checkpoint evaluated; 0 = none, the last agent of run 0).
    """

    seed: int = 0
    num_envs: int = 16
    total_updates: int = 2000
    chunk_updates: int = 100
    checkpoint_every: int = 500
    train_jobs: int = 300
    reward_scale: float = 1.0
    trace_span: tuple = (0.0, 1.0)
    trace_windows: int = 128
    warmup_scheduler: str = ""
    num_seeds: int = 1
    valid_episodes: int = 0
    valid_seed: int = 2000

    def __post_init__(self):
        check_positive_ints(self, ("num_envs", "total_updates", "chunk_updates", "train_jobs", "trace_windows",
                                   "num_seeds"))
        if self.total_updates % self.chunk_updates:
            raise ValueError("TrainConfig.total_updates must be a multiple of chunk_updates")
        if not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 0 \
                or self.checkpoint_every % self.chunk_updates:
            raise ValueError("TrainConfig.checkpoint_every must be 0 or a multiple of chunk_updates")
        if not isinstance(self.valid_episodes, int) or self.valid_episodes < 0:
            raise ValueError(f"TrainConfig.valid_episodes = {self.valid_episodes!r}: must be an integer >= 0")
        if self.num_seeds > 1 and self.valid_episodes == 0:
            raise ValueError("TrainConfig.num_seeds > 1 needs valid_episodes > 0 (validation picks the run)")
        check_seeds(self, ("seed", "valid_seed"), offset=self.num_seeds - 1)  # runs use seed + i
        if isinstance(self.reward_scale, bool) or not isinstance(self.reward_scale, (int, float)) \
                or not 0 < self.reward_scale < math.inf:
            raise ValueError(f"TrainConfig.reward_scale = {self.reward_scale!r}: must be a finite number > 0")


class Trainer(NamedTuple):
    init: Callable
    run_chunk: Callable
    train: Callable
    scheduler: policies.Scheduler   # the greedy agent; its policy takes the runner's params


def make_reset(env: ClusterEnv, env_params: EnvParams, workload: synthetic.SyntheticConfig | Jobs,
               config: TrainConfig) -> Callable:
    """``reset_envs(key) -> (state [E], obs [E])``: ``num_envs`` fresh training episodes.

    workload: a ``SyntheticConfig`` (each reset draws a fresh workload of ``train_jobs`` jobs)
    or a bank of episodes, a ``Jobs`` with a leading [B] axis (e.g. trace windows; each reset
    picks one of the B uniformly). With ``warmup_scheduler`` set, that heuristic plays each
    episode up to its measurement window first.
    """
    num_envs = config.num_envs
    if isinstance(workload, synthetic.SyntheticConfig):
        workload = workload.replace(num_jobs=config.train_jobs, pad_to=None)

        def draw_jobs(key):
            return jax.vmap(lambda k: synthetic.generate(k, workload))(jax.random.split(key, num_envs))
    else:
        bank = jax.tree.map(jnp.asarray, workload)

        def draw_jobs(key):
            pick = jax.random.randint(key, (num_envs,), 0, bank.arrival_s.shape[0])
            return jax.tree.map(lambda x: x[pick], bank)

    def reset_envs(key):
        k_jobs, k_env, k_warm = jax.random.split(key, 3)
        jobs = draw_jobs(k_jobs)
        state, obs = jax.vmap(env.reset, in_axes=(0, None, 0))(jax.random.split(k_env, num_envs), env_params, jobs)
        if config.warmup_scheduler:
            warm = policies.get_flat(config.warmup_scheduler, "train.warmup_scheduler").policy
            # Each env alone on a CPU, all together on a GPU (``warm_up_batch``).
            state, obs = warm_up_batch(env, warm, env_params, state, obs, jax.random.split(k_warm, num_envs))
        return state, obs

    return reset_envs


def example_obs(reset_envs: Callable):
    """One (unbatched) observation of zeros shaped like the training envs' (to size networks)."""
    _, obs = jax.eval_shape(reset_envs, jax.random.key(0))
    # One program for every field (eager zeros compiled one per field's shape).
    return jax.jit(lambda: jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), obs))()


def auto_reset(reset_envs: Callable, key, done, state, obs):
    """(state, obs) with every env whose episode is ``done`` [E] replaced by a fresh one
    (``reset_envs(key)``; computed only when some env is done)."""
    def reset_done(carry):
        fresh = reset_envs(key)
        pick = lambda new, old: jnp.where(  # noqa: E731
            done.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
        return jax.tree.map(pick, fresh, carry)

    return jax.lax.cond(done.any(), reset_done, lambda c: c, (state, obs))


def finished_episodes(ep_return, reward, done):
    """Episode bookkeeping of one step of every env -> (return so far of each env's current
    episode [E], sum of the returns of the episodes that ended [], how many ended [])."""
    ep_return = ep_return + reward
    return jnp.where(done, 0.0, ep_return), jnp.where(done, ep_return, 0.0).sum(), done.sum()


def chunk_summary(update, logs: dict, nan_means=(), means=(), lasts=()) -> dict:
    """A chunk's summary from its per-update logs (each [chunk_updates]; ``finished_return``,
    ``finished`` and ``reward`` among them): every learner's fields, then the learner's own
    (the NaN-skipping mean, the mean or the last value of each)."""
    finished = logs["finished"].sum()
    summary = {
        "update": update,
        "episodes_finished": finished,
        "return": jnp.where(finished > 0, logs["finished_return"].sum() / jnp.maximum(finished, 1), jnp.nan),
        "reward_per_step": logs["reward"].mean(),
    }
    summary.update({f: jnp.nanmean(logs[f]) for f in nan_means})
    summary.update({f: logs[f].mean() for f in means})
    summary.update({f: logs[f][-1] for f in lasts})
    return summary


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """[S] training keys: run i gets ``key(seed + i)``, the key of the single run ``seed + i``."""
    return jax.vmap(jax.random.key)(jnp.arange(seed, seed + num_seeds))


def over_seeds(fn: Callable, num_seeds: int) -> Callable:
    """``fn`` of one run mapped over a leading [S] runs axis of every argument and output.

    When the local device count divides S, the runs are split across the devices
    (``shard_map``; runs never talk to each other); otherwise they stay on one device. A
    device holding a single run runs ``fn`` itself, not a ``vmap`` of it (a vmapped
    ``lax.cond`` runs both branches: the env resets and learning steps at every update).
    Either way run i is the single run ``seed + i``, up to float rounding (XLA compiles the
    batched or split program a little differently: parameters agree to ~1e-7 after a short
    run, tests/agents/test_training.py).
    """
    devices = jax.devices()
    split = len(devices) > 1 and num_seeds % len(devices) == 0
    per_device = num_seeds // len(devices) if split else num_seeds
    if per_device == 1:
        def local(*args):
            out = fn(*jax.tree.map(lambda x: x[0], args))
            return jax.tree.map(lambda x: x[None], out)
    else:
        local = jax.vmap(fn)
    if not split:
        return local
    mesh = jax.make_mesh((len(devices),), ("runs",), axis_types=(jax.sharding.AxisType.Auto,))
    runs = jax.sharding.PartitionSpec("runs")
    return jax.shard_map(local, mesh=mesh, in_specs=runs, out_specs=runs, check_vma=False)
