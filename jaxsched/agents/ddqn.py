"""Double DQN on the env's flat action space: Q network, masked greedy / epsilon-greedy
action choice, the Double-DQN target and the Huber TD loss.

The Q network scores every flat action of ``sim.env`` (K*N place + K reject + 1 wait):
  place (k, n)  MLP(edge embedding, job k embedding, node n embedding)   [K*N]
  reject k      MLP(job k embedding)                                     [K]
  wait          MLP(mean of node embeddings, mean of job embeddings)     [1]
Illegal actions (``obs.action_mask`` False, and reject / wait when the agent config turns
them off) get -inf before any argmax, so they are never chosen, greedy or exploring.

Models are Flax NNX modules, split once into (graphdef, params); every pure function here
takes ``params`` and merges them with the graphdef inside.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxsched import actions
from jaxsched.agents import gnn
from jaxsched.config import check_positive_ints
from jaxsched.sim.env import QUEUE_ORDERS
from jaxsched.types import Observation

NEG_INF = -1e9  # "minus infinity" that stays finite under arithmetic (masked Q values)


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """GNN-DDQN's settings (hashable: a static argument; the ``[agent]`` TOML table with
    ``kind = "gnn-ddqn"``). The training loop's shared settings are ``training.TrainConfig``.

    Network and actions. hidden: embedding width; num_layers: message-passing rounds.
    allow_reject: let the agent reject jobs. Off by default: a rejected job leaves the system,
      so with a JCT reward rejecting everything would look good.
    allow_wait: let the agent wait while a job fits somewhere (it always may when nothing fits).
    queue_order: the order of the queue the agent's window shows ("fifo", "sjf", "edf"; ""
      keeps ``[env] queue_order``, the order of the heuristics that have none of their own).
      The agent trains and is evaluated with it, as the ``sjf`` heuristic is with "sjf".
    Double DQN. buffer_size: replay transitions. batch_size: sampled per gradient step.
    grad_steps: per update. learning_starts: transitions in replay before learning. gamma:
    discount. n_step: steps of reward summed before bootstrapping (1 = one-step Double DQN).
    lr, max_grad_norm: adam and global-norm clipping. lr_decay: updates over which the learning
    rate falls linearly from lr to lr_end, then stays there (0: lr throughout; a budget curve's
    horizon, e.g. 18,800 updates for 3 x 10^5 env steps at 16 envs). target: "periodic" (copy every
    target_every updates) or "polyak" (rate tau each update). eps_start/eps_end/eps_decay:
    linear epsilon schedule over eps_decay updates.
    """

    kind: str = "gnn-ddqn"
    hidden: int = 32
    num_layers: int = 2
    allow_reject: bool = False
    allow_wait: bool = True
    queue_order: str = ""
    buffer_size: int = 20000
    batch_size: int = 32
    grad_steps: int = 1
    learning_starts: int = 1000
    gamma: float = 0.99
    n_step: int = 1
    lr: float = 3e-4
    lr_decay: int = 0
    lr_end: float = 0.0
    max_grad_norm: float = 10.0
    target: str = "periodic"
    target_every: int = 200
    tau: float = 0.005
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay: int = 1000

    def __post_init__(self):
        if self.kind != "gnn-ddqn":
            raise ValueError(f"AgentConfig.kind = {self.kind!r}: this is GNN-DDQN's config")
        if self.queue_order not in ("",) + QUEUE_ORDERS:
            raise ValueError(f"AgentConfig.queue_order = {self.queue_order!r}: must be one of "
                             f"{QUEUE_ORDERS} or '' (the env's)")
        if self.target not in ("periodic", "polyak"):
            raise ValueError(f"AgentConfig.target = {self.target!r}: must be 'periodic' or 'polyak'")
        check_positive_ints(self, ("hidden", "num_layers", "buffer_size", "batch_size", "grad_steps", "n_step",
                                   "target_every", "eps_decay"))

        def bad(field, why):
            raise ValueError(f"AgentConfig.{field} = {getattr(self, field)!r}: {why}")

        if self.buffer_size < self.batch_size:
            bad("buffer_size", f"must hold at least one batch (batch_size {self.batch_size})")
        if not isinstance(self.learning_starts, int) or isinstance(self.learning_starts, bool) \
                or not 0 <= self.learning_starts <= self.buffer_size:
            bad("learning_starts", f"must be an integer in [0, buffer_size = {self.buffer_size}]")
        for field in ("lr", "max_grad_norm"):
            if not getattr(self, field) > 0:
                bad(field, "must be > 0")
        if not isinstance(self.lr_decay, int) or isinstance(self.lr_decay, bool) or self.lr_decay < 0:
            bad("lr_decay", "must be an integer >= 0 (updates; 0 keeps lr constant)")
        if not 0.0 <= self.lr_end <= self.lr:
            bad("lr_end", f"must be in [0, lr = {self.lr}]")
        for field in ("gamma", "eps_start", "eps_end"):
            if not 0.0 <= getattr(self, field) <= 1.0:
                bad(field, "must be in [0, 1]")
        if not 0.0 < self.tau <= 1.0:
            bad("tau", "must be in (0, 1]")


class QNetwork(nnx.Module):
    """GNN encoder plus the three Q heads (see module docstring)."""

    def __init__(self, config: AgentConfig, node_in: int, edge_in: int, rngs: nnx.Rngs):
        h = config.hidden
        self.encoder = gnn.GraphEncoder(node_in, edge_in, h, config.num_layers, rngs)
        # place head = MLP(edge, job, node) with its first layer split like the encoder's edges
        self.place_edge = nnx.Linear(h, h, rngs=rngs)
        self.place_job = nnx.Linear(h, h, use_bias=False, rngs=rngs)
        self.place_node = nnx.Linear(h, h, use_bias=False, rngs=rngs)
        self.place_norm = nnx.LayerNorm(h, rngs=rngs)
        self.place_out = nnx.Linear(h, 1, rngs=rngs)
        self.reject_head = gnn.MLP([h, h, 1], rngs)
        self.wait_head = gnn.MLP([2 * h, h, 1], rngs)

    def __call__(self, obs: Observation) -> jax.Array:
        """[K*N + K + 1] Q values of one (unbatched) observation, unmasked."""
        return self.scores(obs, self.encoder(gnn.build_graph(obs)))[0]

    def scores(self, obs: Observation, graph) -> tuple:
        """(scores [K*N + K + 1] of every flat action, pooled embedding [2 * hidden]) of one
        observation from its encoded graph. The pooled embedding (mean of the valid nodes'
        embeddings, mean of the window jobs') is what the wait score reads; GNN-PPO's value
        head reads it too (``agents.gnn_ppo``)."""
        k, n = obs.place_mask.shape
        h_node, h_job = graph.nodes[:n], graph.nodes[n:n + k]
        h = h_node.shape[-1]
        pair = (self.place_edge(graph.edges).reshape(k, n, h)
                + self.place_job(h_job)[:, None] + self.place_node(h_node)[None])
        q_place = self.place_out(jax.nn.relu(self.place_norm(pair))).reshape(k * n)
        q_reject = self.reject_head(h_job).reshape(k)
        valid = obs.cluster.valid[:, None]
        node_mean = (h_node * valid).sum(0) / jnp.maximum(valid.sum(), 1)
        pooled = jnp.concatenate([node_mean, h_job.mean(0)])
        q_wait = self.wait_head(pooled)
        return jnp.concatenate([q_place, q_reject, q_wait]), pooled


def create(config: AgentConfig, example_obs: Observation, key):
    """(graphdef, params) of a fresh Q network sized for ``example_obs`` (one observation)."""
    graph = gnn.build_graph(example_obs)
    model = QNetwork(config, graph.nodes.shape[-1], graph.edges.shape[-1], nnx.Rngs(key))
    graphdef, params = nnx.split(model)
    return graphdef, params


def q_values(graphdef, params, obs: Observation) -> jax.Array:
    """[..., A] Q values; ``obs`` may carry any number of leading batch axes."""
    model = nnx.merge(graphdef, params)
    fn = model.__call__
    for _ in range(obs.place_mask.ndim - 2):
        fn = jax.vmap(fn)
    return fn(obs)


def legal_mask(config: AgentConfig, obs: Observation) -> jax.Array:
    """[..., A] bool: the actions the agent may take (env mask minus what the config turns off).

    Wait stays legal when no job fits anywhere (then it is the only way on), and reject
    stays legal if nothing else is (so the mask is never empty while the env is live).
    """
    mask = obs.action_mask
    k, n = obs.place_mask.shape[-2:]
    place_any = mask[..., :k * n].any(-1, keepdims=True)
    idx = jnp.arange(mask.shape[-1])
    is_reject, is_wait = actions.is_reject(idx, k, n), actions.is_wait(idx, k, n)
    if not config.allow_wait:
        mask = mask & ~(is_wait & place_any)
    if not config.allow_reject:
        others = (mask & ~is_reject).any(-1, keepdims=True)
        mask = mask & ~(is_reject & others)
    return mask


def masked_argmax(q: jax.Array, mask: jax.Array) -> jax.Array:
    """Argmax of ``q`` over legal actions only (an all-False mask gives the wait action)."""
    best = jnp.argmax(jnp.where(mask, q, -jnp.inf), axis=-1)
    return jnp.where(mask.any(-1), best, mask.shape[-1] - 1).astype(jnp.int32)


def epsilon_greedy(key, q: jax.Array, mask: jax.Array, epsilon) -> jax.Array:
    """With probability ``epsilon`` a uniform legal action, else the greedy legal action."""
    k_explore, k_action = jax.random.split(key)
    random_action = jax.random.categorical(k_action, jnp.where(mask, 0.0, -jnp.inf))
    random_action = jnp.where(mask.any(-1), random_action, mask.shape[-1] - 1)
    explore = jax.random.uniform(k_explore, q.shape[:-1]) < epsilon
    return jnp.where(explore, random_action, masked_argmax(q, mask)).astype(jnp.int32)


def epsilon_at(step, start: float, end: float, decay_steps: int):
    """Linear schedule from ``start`` to ``end`` over ``decay_steps`` env steps, then ``end``."""
    frac = jnp.clip(step / max(decay_steps, 1), 0.0, 1.0)
    return start + frac * (end - start)


def double_dqn_target(reward, done, gamma, q_next_online, q_next_target, next_mask):
    """r + gamma * (1 - done) * Q_target(s', argmax_a Q_online(s', a)), the argmax over legal a.

    reward, done: [B]; q_next_online, q_next_target: [B, A]; next_mask: [B, A] bool.
    A next state with no legal action (only terminal states) contributes nothing.
    """
    best = masked_argmax(q_next_online, next_mask)
    q_best = jnp.take_along_axis(q_next_target, best[:, None], axis=-1)[:, 0]
    bootstrap = jnp.where(next_mask.any(-1), q_best, 0.0)
    return reward + gamma * (1.0 - done.astype(jnp.float32)) * bootstrap


def n_step_return(reward, done, gamma: float):
    """(return [B], done [B]) of runs of n steps: reward, done [B, n] (step t first).

    return = r_0 + gamma r_1 + ... + gamma^(n-1) r_(n-1), cut after the first step that ends
    its episode; done = some step of the run ended it (then nothing is bootstrapped). The
    caller bootstraps from the observation n steps on with discount gamma^n. With n = 1 this
    is (r_0, done_0) exactly.
    """
    if reward.shape[1] == 1:
        return reward[:, 0], done[:, 0]
    # A step counts while no earlier step of the run ended the episode.
    earlier_ended = jnp.concatenate([jnp.zeros_like(done[:, :1]), done[:, :-1]], 1)
    alive = jnp.cumprod(~earlier_ended, 1).astype(jnp.float32)
    discounts = gamma ** jnp.arange(reward.shape[1], dtype=jnp.float32)
    return (reward * alive * discounts).sum(1), done.any(1)


def td_loss(params, target_params, graphdef, config: AgentConfig, batch, gamma: float):
    """Mean Huber loss of Q(s, a) against the (stopped) Double-DQN target -> (loss, mean Q).

    batch: dict with obs, action [B], reward [B], done [B], next_obs.
    """
    q = q_values(graphdef, params, batch["obs"])
    q_taken = jnp.take_along_axis(q, batch["action"][:, None], axis=-1)[:, 0]
    next_mask = legal_mask(config, batch["next_obs"])
    q_next_online = q_values(graphdef, params, batch["next_obs"])
    q_next_target = q_values(graphdef, target_params, batch["next_obs"])
    target = jax.lax.stop_gradient(double_dqn_target(
        batch["reward"], batch["done"], gamma, q_next_online, q_next_target, next_mask))
    loss = optax.huber_loss(q_taken, target).mean()
    return loss, q_taken.mean()


@functools.lru_cache(maxsize=None)
def greedy_policy(graphdef, config: AgentConfig):
    """``policy(params, obs, key) -> flat action``: the trained agent for ``rollout``.
    Cached: equal networks and settings give the same function, so every trainer of a run
    (validation's, the final evaluation's) shares one jitted rollout."""

    def policy(params, obs, key):
        del key
        return masked_argmax(q_values(graphdef, params, obs), legal_mask(config, obs))

    return policy
