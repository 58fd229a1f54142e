"""GNN-PPO: a GNN actor-critic trained with PPO, and its training loop (PureJaxRL style,
whole inside ``jit`` over vmapped envs): ``make_train(...) -> training.Trainer``.

Network (Flax NNX). GNN-DDQN's network (``ddqn.QNetwork``: the jraph encoder of
``agents.gnn`` and a score for every flat action of ``sim.env``, K*N place + K reject + 1
wait), its scores read as the policy's logits, plus a value head: an MLP on the pooled graph
embedding (mean of the valid nodes' embeddings, mean of the window jobs'). Actor and critic
share the encoder (one message-passing pass per observation).

Policy: a categorical over the flat actions, masked to the legal ones (``ddqn.legal_mask``:
the env's mask minus what ``allow_reject`` / ``allow_wait`` turn off), so a masked action
has probability 0 and is never sampled. The trained agent is the greedy one (the most
likely legal action), evaluated through the rollout of every heuristic.

One update (PPO, clipped objective):
  rollout   ``rollout_steps`` steps of every env with the current policy (auto-reset envs
            of ``agents.training``), storing action, log-probability, value, reward, done
  GAE       advantages and returns (``policy_gradient.gae``, gamma and gae_lambda)
  learn     ``epochs`` passes over the num_envs x rollout_steps samples, each shuffled into
            ``num_minibatches`` minibatches; on each, one adam step (global-norm clipped)
            of  clipped surrogate + vf_coef x value MSE - ent_coef x entropy, advantages
            normalised within the minibatch
Reward: the env's (``env.reward``, times ``train.reward_scale``), as GNN-DDQN's.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxsched import policies
from jaxsched.agents import ddqn, gnn, training
from jaxsched.agents.gnn_ddqn import restore_static, strip_static
from jaxsched.agents.policy_gradient import entropy, gae, masked_log_softmax
from jaxsched.config import check_positive_ints
from jaxsched.sim.env import QUEUE_ORDERS, ClusterEnv
from jaxsched.types import EnvParams, Jobs, Observation
from jaxsched.workload import synthetic

NAME = "gnn-ppo"
LOG_FIELDS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "value_mean")
PROGRESS_FIELDS = ("entropy", "approx_kl", "clip_frac")
PANELS = (("policy_loss", "clipped surrogate loss", "policy", "linear"),
          ("value_loss", "value MSE", "critic", "log"),
          ("entropy", "policy entropy (nats)", "entropy", "linear"),
          ("approx_kl", "approx. KL(old || new)", "policy change per update", "log"),
          ("clip_frac", "share of ratios clipped", "clipping", "linear"))


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """GNN-PPO's settings (hashable; the ``[agent]`` TOML table with ``kind = "gnn-ppo"``).
    The training loop's shared settings are ``training.TrainConfig``.

    Network and actions (as GNN-DDQN's ``ddqn.AgentConfig``). hidden: embedding width;
    num_layers: message-passing rounds. allow_reject, allow_wait: let the policy reject a job
    / wait while a job fits. queue_order: the order of the queue the agent's window shows
    ("" keeps ``[env] queue_order``).
    PPO. rollout_steps: env steps of every env per update (T). epochs: passes over each
    rollout's num_envs x T samples. num_minibatches: minibatches per pass (must divide
    num_envs x T). gamma, gae_lambda: discount and GAE's lambda. clip_eps: the ratio's clip
    range (1 - eps, 1 + eps). vf_coef: weight of the value loss. ent_coef: weight of the
    entropy bonus. lr, max_grad_norm: adam and global-norm clipping.
    """

    kind: str = "gnn-ppo"
    hidden: int = 32
    num_layers: int = 2
    allow_reject: bool = False
    allow_wait: bool = True
    queue_order: str = ""
    rollout_steps: int = 16
    epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    lr: float = 3e-4
    max_grad_norm: float = 0.5

    def __post_init__(self):
        def bad(field, why):
            raise ValueError(f"PPOConfig.{field} = {getattr(self, field)!r}: {why}")

        if self.kind != NAME:
            bad("kind", "this is GNN-PPO's config")
        if self.queue_order not in ("",) + QUEUE_ORDERS:
            bad("queue_order", f"must be one of {QUEUE_ORDERS} or '' (the env's)")
        check_positive_ints(self, ("hidden", "num_layers", "rollout_steps", "epochs", "num_minibatches"))
        for field in ("clip_eps", "lr", "max_grad_norm"):
            if not getattr(self, field) > 0:
                bad(field, "must be > 0")
        for field in ("vf_coef", "ent_coef"):
            if not getattr(self, field) >= 0:
                bad(field, "must be >= 0")
        for field in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, field) <= 1.0:
                bad(field, "must be in [0, 1]")


def check_batch(agent: PPOConfig, config: training.TrainConfig):
    """A ``ValueError`` unless ``num_minibatches`` divides the num_envs x rollout_steps batch."""
    batch = config.num_envs * agent.rollout_steps
    if batch % agent.num_minibatches:
        raise ValueError(f"PPOConfig.num_minibatches = {agent.num_minibatches!r}: must divide the batch of "
                         f"train.num_envs x rollout_steps = {config.num_envs} x {agent.rollout_steps} = {batch}")


# ----- network ------------------------------------------------------------------------------

class ActorCritic(nnx.Module):
    """GNN-DDQN's action scorer as the actor, a value head on its pooled embedding."""

    def __init__(self, config: PPOConfig, node_in: int, edge_in: int, rngs: nnx.Rngs):
        h = config.hidden
        self.actor = ddqn.QNetwork(config, node_in, edge_in, rngs)
        self.value_head = gnn.MLP([2 * h, h, 1], rngs)

    def __call__(self, obs: Observation):
        """(logits [K*N + K + 1] unmasked, value []) of one (unbatched) observation."""
        graph = self.actor.encoder(gnn.build_graph(obs))
        logits, pooled = self.actor.scores(obs, graph)
        return logits, self.value_head(pooled)[0]


def create(config: PPOConfig, example_obs: Observation, key):
    """(graphdef, params) of a fresh actor-critic sized for ``example_obs`` (one observation)."""
    graph = gnn.build_graph(example_obs)
    return nnx.split(ActorCritic(config, graph.nodes.shape[-1], graph.edges.shape[-1], nnx.Rngs(key)))


def evaluate(graphdef, params, obs: Observation):
    """(logits [..., A], values [...]); ``obs`` may carry any number of leading batch axes."""
    fn = nnx.merge(graphdef, params).__call__
    for _ in range(obs.place_mask.ndim - 2):
        fn = jax.vmap(fn)
    return fn(obs)


def sample_action(key, logits, legal):
    """[...] int32 action drawn from the policy masked to ``legal`` [..., A] (a masked action
    gets logit -inf: probability exactly 0); the wait action where nothing is legal."""
    action = jax.random.categorical(key, jnp.where(legal, logits, -jnp.inf))
    return jnp.where(legal.any(-1), action, legal.shape[-1] - 1).astype(jnp.int32)


@functools.lru_cache(maxsize=None)
def greedy_policy(graphdef, config: PPOConfig):
    """``policy(params, obs, key) -> flat action``: the most likely legal action. Cached, as
    ``ddqn.greedy_policy``: every trainer of a run shares one jitted rollout."""

    def policy(params, obs, key):
        del key
        logits, _ = evaluate(graphdef, params, obs)
        return ddqn.masked_argmax(logits, ddqn.legal_mask(config, obs))

    return policy


# ----- loss ---------------------------------------------------------------------------------

def clipped_policy_loss(logp, old_logp, advantages, clip_eps: float):
    """PPO's clipped surrogate over a batch -> (loss, clip fraction, approx KL), each [].

    logp, old_logp, advantages: [B]. ratio = exp(logp - old_logp); loss = -mean(min(ratio x A,
    clip(ratio, 1 - eps, 1 + eps) x A)). The clip fraction is the share of |ratio - 1| > eps;
    approx KL is mean((ratio - 1) - log ratio), an estimate of KL(old || new) >= 0.
    """
    log_ratio = logp - old_logp
    ratio = jnp.exp(log_ratio)
    surrogate = jnp.minimum(ratio * advantages, jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages)
    clip_frac = (jnp.abs(ratio - 1.0) > clip_eps).mean()
    return -surrogate.mean(), clip_frac, ((ratio - 1.0) - log_ratio).mean()


def ppo_loss(params, graphdef, agent: PPOConfig, batch):
    """The loss of one minibatch -> (loss, logs). batch: ``obs`` (Observation [B]),
    ``action``, ``logp`` (at sampling), ``advantage``, ``target`` (GAE return), each [B]."""
    logits, values = evaluate(graphdef, params, batch["obs"])
    legal = ddqn.legal_mask(agent, batch["obs"])
    logp_all = masked_log_softmax(logits, legal)
    logp = jnp.take_along_axis(logp_all, batch["action"][:, None], -1)[:, 0]
    adv = batch["advantage"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    policy_loss, clip_frac, approx_kl = clipped_policy_loss(logp, batch["logp"], adv, agent.clip_eps)
    value_loss = ((values - batch["target"]) ** 2).mean()
    ent = entropy(logp_all, legal).mean()
    loss = policy_loss + agent.vf_coef * value_loss - agent.ent_coef * ent
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": ent,
                  "approx_kl": approx_kl, "clip_frac": clip_frac}


# ----- training -----------------------------------------------------------------------------

class Runner(NamedTuple):
    """Everything a GNN-PPO training run carries from one update to the next (a pytree)."""

    params: object
    opt_state: object
    env_state: object       # SimState [E]
    obs: object             # Observation [E]
    ep_return: jax.Array    # [E] return so far of each env's current episode
    update: jax.Array       # [] updates done
    key: jax.Array


def make_train(env: ClusterEnv, env_params: EnvParams, workload: synthetic.SyntheticConfig | Jobs,
               agent: PPOConfig, config: training.TrainConfig) -> training.Trainer:
    """Build GNN-PPO's pure training functions (workload: see ``training.make_reset``)."""
    check_batch(agent, config)
    num_envs, steps = config.num_envs, agent.rollout_steps
    batch_size = num_envs * steps
    minibatch = batch_size // agent.num_minibatches
    reset_envs = training.make_reset(env, env_params, workload, config)
    optimiser = optax.chain(optax.clip_by_global_norm(agent.max_grad_norm), optax.adam(agent.lr))
    example = training.example_obs(reset_envs)  # abstract init, as GNN-DDQN's
    graphdef, _ = jax.eval_shape(lambda key: create(agent, example, key), jax.random.key(0))

    def init(key) -> Runner:
        k_net, k_env, key = jax.random.split(key, 3)
        _, params = create(agent, example, k_net)
        state, obs = reset_envs(k_env)
        return Runner(params=params, opt_state=optimiser.init(params), env_state=state, obs=obs,
                      ep_return=jnp.zeros(num_envs), update=jnp.int32(0), key=key)

    def env_step(carry, _):
        runner, finished_return, finished = carry
        key, k_act, k_step, k_reset = jax.random.split(runner.key, 4)
        obs = runner.obs
        logits, value = evaluate(graphdef, runner.params, obs)
        legal = ddqn.legal_mask(agent, obs)
        action = sample_action(k_act, logits, legal)
        logp = jnp.take_along_axis(masked_log_softmax(logits, legal), action[:, None], -1)[:, 0]
        state, next_obs, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, num_envs), runner.env_state, action, env_params)
        reward = reward * config.reward_scale
        ep_return, ended_return, ended = training.finished_episodes(runner.ep_return, reward, done)
        state, next_obs = training.auto_reset(reset_envs, k_reset, done, state, next_obs)
        step = {"obs": strip_static(obs), "action": action, "logp": logp, "value": value,
                "reward": reward, "done": done}
        runner = runner._replace(env_state=state, obs=next_obs, ep_return=ep_return, key=key)
        return (runner, finished_return + ended_return, finished + ended), step

    def learn_minibatch(carry, batch):
        params, opt_state = carry
        batch = {**batch, "obs": restore_static(batch["obs"], env_params)}
        (_, logs), grads = jax.value_and_grad(ppo_loss, has_aux=True)(params, graphdef, agent, batch)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), logs

    def learn_epoch(carry, key, samples):
        order = jax.random.permutation(key, batch_size)
        shuffled = jax.tree.map(lambda x: x[order].reshape((agent.num_minibatches, minibatch) + x.shape[1:]), samples)
        return jax.lax.scan(learn_minibatch, carry, shuffled)

    def one_update(runner: Runner, _):
        key, k_epochs = jax.random.split(runner.key)
        (runner, finished_return, finished), batch = jax.lax.scan(
            env_step, (runner._replace(key=key), jnp.float32(0), jnp.int32(0)), None, length=steps)  # [T, E, ...]
        _, last_value = evaluate(graphdef, runner.params, runner.obs)
        adv, target = gae(batch["reward"], batch["value"], batch["done"], last_value, agent.gamma, agent.gae_lambda)
        samples = {"obs": batch["obs"], "action": batch["action"], "logp": batch["logp"],
                   "advantage": adv, "target": target}
        samples = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), samples)
        (params, opt_state), logs = jax.lax.scan(
            lambda c, k: learn_epoch(c, k, samples), (runner.params, runner.opt_state),
            jax.random.split(k_epochs, agent.epochs))  # every log [epochs, num_minibatches]
        runner = runner._replace(params=params, opt_state=opt_state, update=runner.update + 1)
        logs = {name: value.mean() for name, value in logs.items()}
        logs.update({"reward": batch["reward"].mean(), "value_mean": batch["value"].mean(),
                     "finished_return": finished_return, "finished": finished})
        return runner, logs

    def run_chunk(runner: Runner):
        runner, logs = jax.lax.scan(one_update, runner, None, length=config.chunk_updates)
        return runner, training.chunk_summary(runner.update, logs, means=LOG_FIELDS)

    def train(key):
        runner = init(key)
        return jax.lax.scan(lambda r, _: run_chunk(r), runner, None,
                            length=config.total_updates // config.chunk_updates)

    scheduler = policies.Scheduler(NAME, greedy_policy(graphdef, agent), env.config.gpu_rule,
                                   "GNN-PPO (trained)", turns=None,  # stepping: a network is a costly policy
                                   queue_order=env.config.queue_order)
    return training.Trainer(init=init, run_chunk=run_chunk, train=train, scheduler=scheduler)

