"""The Double-DQN training loop, whole inside ``jit`` (PureJaxRL style).

``make_train(...)`` returns ``Trainer(init, run_chunk, train)``:
  init(key) -> runner state            fresh params, optimiser, replay, envs, RNG
  run_chunk(runner) -> (runner, logs)  ``chunk_updates`` updates in one ``lax.scan``
  train(key) -> (runner, logs)         init + every chunk: pure, jittable, vmappable over seeds
One update = one env step of every vmapped env (epsilon-greedy, transitions into replay),
``grad_steps`` Double-DQN gradient steps once replay holds ``learning_starts`` transitions,
and the target network update (periodic copy or Polyak). Finished episodes reset in place
with a fresh synthetic workload drawn from the runner's key (training never sees the
evaluation seeds). The runner state holds everything (the RNG key included), so a run
restored from a checkpoint continues exactly as the uninterrupted one.

Replay is flashbax's trajectory buffer (``add_batch_size = num_envs``): it stores each env's
stream of (obs, action, reward, done) and samples runs of n + 1 consecutive steps
(n = ``n_step``; n = 1 is flashbax's flat buffer of pairs (t, t+1)), so every observation is
stored once. The target of step t is the n-step return r_t + g r_{t+1} + ... + g^(n-1)
r_{t+n-1}, cut at the first episode end, plus g^n times the Double-DQN value of the
observation n steps on when no episode ended in between. Observations are stored without
the static ``cluster``/``frag_classes`` (the same for every env) and get them back when
sampled.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import flashbax as fbx
import jax
import jax.numpy as jnp
import optax

from jaxsched import policies
from jaxsched.agents import ddqn
from jaxsched.rollout import warm_up
from jaxsched.sim.env import ClusterEnv
from jaxsched.types import EnvParams, Jobs, Observation
from jaxsched.workload import synthetic


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings of the training loop (hashable; loaded from the ``[train]`` TOML table).

    seed: training RNG seed. num_envs: vmapped envs. total_updates: updates in the run
    (a multiple of chunk_updates). chunk_updates: updates per jitted call (log/progress row).
    checkpoint_every: updates between checkpoints (a multiple of chunk_updates; 0 = none).
    train_jobs: jobs per training episode (the workload otherwise follows [workload.synthetic]).
    buffer_size: replay transitions. batch_size: sampled per gradient step. grad_steps: per
    update. learning_starts: transitions in replay before learning. gamma: discount.
    n_step: steps of reward summed before bootstrapping (1 = one-step Double DQN).
    lr, max_grad_norm: adam and global-norm clipping. target: "periodic" (copy every
    target_every updates) or "polyak" (rate tau each update). eps_start/eps_end/eps_decay:
    linear epsilon schedule over eps_decay updates. reward_scale: multiplies the env reward
    (``EnvConfig.reward``, in job-hours by default). trace_span, trace_windows: with a trace
    workload (``workload.source = "openb"``), training episodes are ``trace_windows`` windows
    of ``train_jobs`` jobs cut from the part ``trace_span`` of the trace (keep it disjoint from
    ``workload.trace_span``, where the evaluation windows come from). warmup_scheduler: ""
    (default), the agent plays every episode from its first arrival; a registry name (e.g.
    "first-fit"): that heuristic plays each episode until its first measured job arrives
    (``env.warmup_jobs``) and the agent learns from there, on a loaded cluster.
    """

    seed: int = 0
    num_envs: int = 16
    total_updates: int = 2000
    chunk_updates: int = 100
    checkpoint_every: int = 500
    train_jobs: int = 300
    buffer_size: int = 20000
    batch_size: int = 32
    grad_steps: int = 1
    learning_starts: int = 1000
    gamma: float = 0.99
    n_step: int = 1
    lr: float = 3e-4
    max_grad_norm: float = 10.0
    target: str = "periodic"
    target_every: int = 200
    tau: float = 0.005
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay: int = 1000
    reward_scale: float = 1.0
    trace_span: tuple = (0.0, 1.0)
    trace_windows: int = 128
    warmup_scheduler: str = ""
    num_seeds: int = 1
    valid_episodes: int = 0
    valid_seed: int = 2000

    def __post_init__(self):
        if self.target not in ("periodic", "polyak"):
            raise ValueError(f"TrainConfig.target = {self.target!r}: must be 'periodic' or 'polyak'")
        if self.total_updates % self.chunk_updates:
            raise ValueError("TrainConfig.total_updates must be a multiple of chunk_updates")
        if self.checkpoint_every % self.chunk_updates:
            raise ValueError("TrainConfig.checkpoint_every must be a multiple of chunk_updates")
        if not isinstance(self.n_step, int) or self.n_step < 1:
            raise ValueError(f"TrainConfig.n_step = {self.n_step!r}: must be a positive integer")
        if not isinstance(self.num_seeds, int) or self.num_seeds < 1:
            raise ValueError(f"TrainConfig.num_seeds = {self.num_seeds!r}: must be a positive integer")
        if not isinstance(self.valid_episodes, int) or self.valid_episodes < 0:
            raise ValueError(f"TrainConfig.valid_episodes = {self.valid_episodes!r}: must be an integer >= 0")
        if self.num_seeds > 1 and self.valid_episodes == 0:
            raise ValueError("TrainConfig.num_seeds > 1 needs valid_episodes > 0 (validation picks the run)")


class Runner(NamedTuple):
    """Everything a training run carries from one update to the next (a pytree)."""

    params: object
    target_params: object
    opt_state: object
    buffer: object
    env_state: object       # SimState [E]
    obs: object             # Observation [E]
    ep_return: jax.Array    # [E] return so far of each env's current episode
    update: jax.Array       # [] updates done
    key: jax.Array


class Trainer(NamedTuple):
    init: Callable
    run_chunk: Callable
    train: Callable
    graphdef: object


def _strip(obs: Observation) -> Observation:
    return obs.replace(cluster=None, frag_classes=None)


def _restore(obs: Observation, env_params: EnvParams) -> Observation:
    batch = obs.place_mask.shape[0]
    widen = lambda x: jnp.broadcast_to(x, (batch,) + x.shape)  # noqa: E731
    return obs.replace(cluster=jax.tree.map(widen, env_params.cluster),
                       frag_classes=jax.tree.map(widen, env_params.frag_classes))


def make_train(env: ClusterEnv, env_params: EnvParams, workload: synthetic.SyntheticConfig | Jobs,
               agent: ddqn.AgentConfig, config: TrainConfig) -> Trainer:
    """Build the pure training functions for one env, cluster, workload and config.

    workload: a ``SyntheticConfig`` (each reset draws a fresh workload of ``train_jobs`` jobs)
    or a bank of episodes, a ``Jobs`` with a leading [B] axis (e.g. trace windows; each reset
    picks one of the B uniformly).
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
    optimiser = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.lr))
    # flashbax's flat buffer generalised to runs of n + 1 steps: the sizes the flat buffer
    # derived from (max_length=buffer_size, min_length=max(learning_starts // num_envs, 2)),
    # so n = 1 is that buffer. Learning itself waits for ``learning_starts`` (``can_learn``).
    n = config.n_step
    buffer = fbx.make_trajectory_buffer(
        max_length_time_axis=config.buffer_size // num_envs,
        min_length_time_axis=max(max(config.learning_starts // num_envs, 2) // num_envs + 1, n + 1),
        add_batch_size=num_envs, sample_batch_size=config.batch_size,
        sample_sequence_length=n + 1, period=1)

    def reset_envs(key):
        k_jobs, k_env, k_warm = jax.random.split(key, 3)
        jobs = draw_jobs(k_jobs)
        state, obs = jax.vmap(env.reset, in_axes=(0, None, 0))(jax.random.split(k_env, num_envs), env_params, jobs)
        if config.warmup_scheduler:
            warm = policies.get(config.warmup_scheduler).policy
            state, obs = jax.vmap(lambda s, o, k: warm_up(env, warm, env_params, s, o, k))(
                state, obs, jax.random.split(k_warm, num_envs))
        return state, obs

    # The graphdef is static: build it once from an example observation.
    _, example_obs = jax.eval_shape(reset_envs, jax.random.key(0))
    example = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], s.dtype), example_obs)
    graphdef, _ = ddqn.create(agent, example, jax.random.key(0))

    def init(key) -> Runner:
        k_net, k_env, key = jax.random.split(key, 3)
        _, params = ddqn.create(agent, example, k_net)
        state, obs = reset_envs(k_env)
        item = {"obs": _strip(jax.tree.map(lambda x: x[0], obs)), "action": jnp.int32(0),
                "reward": jnp.float32(0), "done": jnp.bool_(False)}
        return Runner(params=params, target_params=params, opt_state=optimiser.init(params),
                      buffer=buffer.init(item), env_state=state, obs=obs,
                      ep_return=jnp.zeros(num_envs), update=jnp.int32(0), key=key)

    def learn(runner: Runner, key):
        run = buffer.sample(runner.buffer, key).experience  # [batch, n + 1, ...]
        reward, done = ddqn.n_step_return(run["reward"][:, :n], run["done"][:, :n], config.gamma)
        batch = {"obs": _restore(jax.tree.map(lambda x: x[:, 0], run["obs"]), env_params),
                 "action": run["action"][:, 0], "reward": reward, "done": done,
                 "next_obs": _restore(jax.tree.map(lambda x: x[:, n], run["obs"]), env_params)}
        (loss, q_mean), grads = jax.value_and_grad(ddqn.td_loss, has_aux=True)(
            runner.params, runner.target_params, graphdef, agent, batch, config.gamma ** n)
        updates, opt_state = optimiser.update(grads, runner.opt_state, runner.params)
        params = optax.apply_updates(runner.params, updates)
        return runner._replace(params=params, opt_state=opt_state), (loss, q_mean)

    def one_update(runner: Runner, _):
        key, k_act, k_step, k_reset, k_learn = jax.random.split(runner.key, 5)
        obs = runner.obs
        eps = ddqn.epsilon_at(runner.update, config.eps_start, config.eps_end, config.eps_decay)
        q = ddqn.q_values(graphdef, runner.params, obs)
        action = ddqn.epsilon_greedy(k_act, q, ddqn.legal_mask(agent, obs), eps)
        state, next_obs, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, num_envs), runner.env_state, action, env_params)
        reward = reward * config.reward_scale
        step = {"obs": _strip(obs), "action": action, "reward": reward, "done": done}
        buf = buffer.add(runner.buffer, jax.tree.map(lambda x: x[:, None], step))  # time axis 1
        ep_return = runner.ep_return + reward
        finished_return = jnp.where(done, ep_return, 0.0).sum()
        num_finished = done.sum()

        def reset_done(carry):
            fresh = reset_envs(k_reset)
            pick = lambda new, old: jnp.where(  # noqa: E731
                done.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
            return jax.tree.map(pick, fresh, carry)

        state, next_obs = jax.lax.cond(done.any(), reset_done, lambda c: c, (state, next_obs))
        runner = runner._replace(buffer=buf, env_state=state, obs=next_obs,
                                 ep_return=jnp.where(done, 0.0, ep_return))

        can_learn = buffer.can_sample(buf) & ((runner.update + 1) * num_envs >= config.learning_starts)

        def learn_steps(r):
            def body(r, k):
                return learn(r, k)
            r, (loss, q_mean) = jax.lax.scan(body, r, jax.random.split(k_learn, config.grad_steps))
            return r, (loss.mean(), q_mean.mean())

        runner, (loss, q_mean) = jax.lax.cond(
            can_learn, learn_steps, lambda r: (r, (jnp.float32(jnp.nan), jnp.float32(jnp.nan))), runner)
        update = runner.update + 1
        if config.target == "periodic":
            copy = (update % config.target_every) == 0
            target = jax.tree.map(lambda p, t: jnp.where(copy, p, t), runner.params, runner.target_params)
        else:
            target = optax.incremental_update(runner.params, runner.target_params, config.tau)
        runner = runner._replace(target_params=target, update=update, key=key)
        logs = {"reward": reward.mean(), "loss": loss, "q_mean": q_mean, "epsilon": eps,
                "finished_return": finished_return, "finished": num_finished}
        return runner, logs

    def run_chunk(runner: Runner):
        runner, logs = jax.lax.scan(one_update, runner, None, length=config.chunk_updates)
        finished = logs["finished"].sum()
        summary = {
            "update": runner.update,
            "episodes_finished": finished,
            "return": jnp.where(finished > 0, logs["finished_return"].sum() / jnp.maximum(finished, 1),
                                jnp.nan),
            "reward_per_step": logs["reward"].mean(),
            "loss": jnp.nanmean(logs["loss"]),
            "q_mean": jnp.nanmean(logs["q_mean"]),
            "epsilon": logs["epsilon"][-1],
        }
        return runner, summary

    def train(key):
        runner = init(key)
        return jax.lax.scan(lambda r, _: run_chunk(r), runner, None,
                            length=config.total_updates // config.chunk_updates)

    return Trainer(init=init, run_chunk=run_chunk, train=train, graphdef=graphdef)


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
