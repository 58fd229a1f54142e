"""GNN Double-DQN's training loop, whole inside ``jit`` (PureJaxRL style):
``make_train(...) -> training.Trainer`` (what the parts are: ``agents.training``).

One update = one env step of every vmapped env (epsilon-greedy, transitions into replay),
``grad_steps`` Double-DQN gradient steps once replay holds ``learning_starts`` transitions,
and the target network update (periodic copy or Polyak). Finished episodes reset in place
with a fresh workload drawn from the runner's key (training never sees the evaluation
seeds).

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
from typing import NamedTuple

import flashbax as fbx
import jax
import jax.numpy as jnp
import optax

from jaxsched import policies
from jaxsched.agents import ddqn, training
from jaxsched.sim.env import ClusterEnv
from jaxsched.types import EnvParams, Jobs, Observation
from jaxsched.workload import synthetic

NAME = "gnn-ddqn"
LOG_FIELDS = ("loss", "q_mean", "epsilon")  # besides every learner's (training.Trainer)
PROGRESS_FIELDS = ("loss", "epsilon")
PANELS = (("loss", "Huber loss", "TD loss", "log"), ("q_mean", "mean Q(s, a)", "Q", "linear"))


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


def strip_static(obs: Observation) -> Observation:
    """``obs`` without the static ``cluster``/``frag_classes`` (the same for every env): what
    a learner stores of each step."""
    return obs.replace(cluster=None, frag_classes=None)


def restore_static(obs: Observation, env_params: EnvParams) -> Observation:
    """A stripped batch of observations (one leading [B] axis) with the static parts back."""
    batch = obs.place_mask.shape[0]
    widen = lambda x: jnp.broadcast_to(x, (batch,) + x.shape)  # noqa: E731
    return obs.replace(cluster=jax.tree.map(widen, env_params.cluster),
                       frag_classes=jax.tree.map(widen, env_params.frag_classes))


def env_config(agent: ddqn.AgentConfig, config):
    """The env GNN-DDQN trains and is evaluated on: ``config`` with the agent's queue order."""
    return dataclasses.replace(config, queue_order=agent.queue_order) if agent.queue_order else config


def make_optimiser(agent: ddqn.AgentConfig):
    """The online network's optimiser: adam after global-norm clipping, at agent.lr, or with
    lr_decay > 0 at a rate falling linearly to lr_end over lr_decay updates (grad_steps
    optimiser steps each; the schedule's step count is then part of the optimiser state)."""
    lr = agent.lr
    if agent.lr_decay:
        lr = optax.linear_schedule(agent.lr, agent.lr_end, agent.lr_decay * agent.grad_steps)
    return optax.chain(optax.clip_by_global_norm(agent.max_grad_norm), optax.adam(lr))


def make_buffer(agent: ddqn.AgentConfig, num_envs: int):
    """The replay buffer of ``num_envs`` envs' streams (a flashbax ``TrajectoryBuffer``):
    ``add`` takes one step of every env (a time axis of 1), ``sample`` gives ``batch_size``
    runs of n + 1 consecutive steps."""
    # flashbax's flat buffer generalised to runs of n + 1 steps: the sizes the flat buffer
    # derived from (max_length=buffer_size, min_length=max(learning_starts // num_envs, 2)),
    # so n = 1 is that buffer. Learning itself waits for ``learning_starts`` (``can_learn``).
    n = agent.n_step
    return fbx.make_trajectory_buffer(
        max_length_time_axis=agent.buffer_size // num_envs,
        min_length_time_axis=max(max(agent.learning_starts // num_envs, 2) // num_envs + 1, n + 1),
        add_batch_size=num_envs, sample_batch_size=agent.batch_size,
        sample_sequence_length=n + 1, period=1)


def sample_batch(buffer, buffer_state, key, agent: ddqn.AgentConfig, env_params: EnvParams) -> dict:
    """A batch of n-step transitions from replay (``make_buffer``): ``obs`` and ``next_obs``
    (Observation [B], n steps apart, static parts restored), ``action``, ``reward`` (the
    n-step return, cut at the first episode end), ``done``, each [B]."""
    n = agent.n_step
    run = buffer.sample(buffer_state, key).experience  # [batch, n + 1, ...]
    reward, done = ddqn.n_step_return(run["reward"][:, :n], run["done"][:, :n], agent.gamma)
    return {"obs": restore_static(jax.tree.map(lambda x: x[:, 0], run["obs"]), env_params),
            "action": run["action"][:, 0], "reward": reward, "done": done,
            "next_obs": restore_static(jax.tree.map(lambda x: x[:, n], run["obs"]), env_params)}


def make_train(env: ClusterEnv, env_params: EnvParams, workload: synthetic.SyntheticConfig | Jobs,
               agent: ddqn.AgentConfig, config: training.TrainConfig) -> training.Trainer:
    """Build the pure training functions for one env, cluster, workload and config
    (workload: see ``training.make_reset``)."""
    num_envs = config.num_envs
    if agent.buffer_size // num_envs < agent.n_step + 1:
        raise ValueError(f"agent.buffer_size = {agent.buffer_size}: must hold at least n_step + 1 = "
                         f"{agent.n_step + 1} steps of each of the {num_envs} envs")
    reset_envs = training.make_reset(env, env_params, workload, config)
    optimiser = make_optimiser(agent)
    n = agent.n_step
    buffer = make_buffer(agent, num_envs)

    # The graphdef is static: build it once from an example observation, abstractly (an
    # eager network init compiled ~100 one-operation programs in every first run).
    example = training.example_obs(reset_envs)
    graphdef, _ = jax.eval_shape(lambda key: ddqn.create(agent, example, key), jax.random.key(0))

    def init(key) -> Runner:
        k_net, k_env, key = jax.random.split(key, 3)
        _, params = ddqn.create(agent, example, k_net)
        state, obs = reset_envs(k_env)
        item = {"obs": strip_static(jax.tree.map(lambda x: x[0], obs)), "action": jnp.int32(0),
                "reward": jnp.float32(0), "done": jnp.bool_(False)}
        return Runner(params=params, target_params=params, opt_state=optimiser.init(params),
                      buffer=buffer.init(item), env_state=state, obs=obs,
                      ep_return=jnp.zeros(num_envs), update=jnp.int32(0), key=key)

    def learn(runner: Runner, key):
        batch = sample_batch(buffer, runner.buffer, key, agent, env_params)
        (loss, q_mean), grads = jax.value_and_grad(ddqn.td_loss, has_aux=True)(
            runner.params, runner.target_params, graphdef, agent, batch, agent.gamma ** n)
        updates, opt_state = optimiser.update(grads, runner.opt_state, runner.params)
        params = optax.apply_updates(runner.params, updates)
        return runner._replace(params=params, opt_state=opt_state), (loss, q_mean)

    def one_update(runner: Runner, _):
        key, k_act, k_step, k_reset, k_learn = jax.random.split(runner.key, 5)
        obs = runner.obs
        eps = ddqn.epsilon_at(runner.update, agent.eps_start, agent.eps_end, agent.eps_decay)
        q = ddqn.q_values(graphdef, runner.params, obs)
        action = ddqn.epsilon_greedy(k_act, q, ddqn.legal_mask(agent, obs), eps)
        state, next_obs, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, num_envs), runner.env_state, action, env_params)
        reward = reward * config.reward_scale
        step = {"obs": strip_static(obs), "action": action, "reward": reward, "done": done}
        buf = buffer.add(runner.buffer, jax.tree.map(lambda x: x[:, None], step))  # time axis 1
        ep_return, finished_return, num_finished = training.finished_episodes(runner.ep_return, reward, done)
        state, next_obs = training.auto_reset(reset_envs, k_reset, done, state, next_obs)
        runner = runner._replace(buffer=buf, env_state=state, obs=next_obs, ep_return=ep_return)

        can_learn = buffer.can_sample(buf) & ((runner.update + 1) * num_envs >= agent.learning_starts)

        def learn_steps(r):
            def body(r, k):
                return learn(r, k)
            r, (loss, q_mean) = jax.lax.scan(body, r, jax.random.split(k_learn, agent.grad_steps))
            return r, (loss.mean(), q_mean.mean())

        runner, (loss, q_mean) = jax.lax.cond(
            can_learn, learn_steps, lambda r: (r, (jnp.float32(jnp.nan), jnp.float32(jnp.nan))), runner)
        update = runner.update + 1
        if agent.target == "periodic":
            copy = (update % agent.target_every) == 0
            target = jax.tree.map(lambda p, t: jnp.where(copy, p, t), runner.params, runner.target_params)
        else:
            target = optax.incremental_update(runner.params, runner.target_params, agent.tau)
        runner = runner._replace(target_params=target, update=update, key=key)
        logs = {"reward": reward.mean(), "loss": loss, "q_mean": q_mean, "epsilon": eps,
                "finished_return": finished_return, "finished": num_finished}
        return runner, logs

    def run_chunk(runner: Runner):
        runner, logs = jax.lax.scan(one_update, runner, None, length=config.chunk_updates)
        return runner, training.chunk_summary(runner.update, logs, nan_means=("loss", "q_mean"), lasts=("epsilon",))

    def train(key):
        runner = init(key)
        return jax.lax.scan(lambda r, _: run_chunk(r), runner, None,
                            length=config.total_updates // config.chunk_updates)

    scheduler = policies.Scheduler(NAME, ddqn.greedy_policy(graphdef, agent), env.config.gpu_rule,
                                   "GNN Double-DQN (trained)", turns=None,  # stepping: a network is a costly policy
                                   queue_order=env.config.queue_order)
    return training.Trainer(init=init, run_chunk=run_chunk, train=train, scheduler=scheduler)
