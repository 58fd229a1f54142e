"""Gymnasium envs over the gymnax env (``gymnax_env``): ``jaxsched/Cluster-v0``.

``ClusterGymEnv`` and ``ClusterGymVectorEnv``, registered by ``import jaxsched`` (its
``__init__``) when gymnasium is installed, so ``gymnasium.make`` needs no import first::

    env = gymnasium.make("jaxsched:jaxsched/Cluster-v0", num_nodes=8, num_jobs=64)
    obs, info = env.reset(seed=0)                 # obs: [D] float32; info["action_mask"]: [A] int8
    obs, reward, terminated, truncated, info = env.step(action)
    envs = gymnasium.make_vec("jaxsched:jaxsched/Cluster-v0", num_envs=64,
                              vectorization_mode="vector_entry_point")   # batched in JAX

kwargs (both): those of ``gymnax_env.make``: num_nodes (openb-mix preset), num_jobs, load
(offered load rho), window (K), workload ("synthetic" or "openb" with trace=path,
trace_windows), seed (picks the trace windows), max_steps (decisions per episode before
truncation; 0: 3 x jobs + 100), allow_reject, allow_wait, config (a run config or TOML path to start
from), and any ``EnvConfig`` field (e.g. reward="placed_jct").

Observation: the flat ``gymnax_env.features`` vector, a Box [D] float32. Action: Discrete(A),
the flat layout of ``jaxsched.actions`` (A = K*N + K + 1). The legal actions are in
``info["action_mask"]`` [A] int8, Gymnasium's mask convention, so
``env.action_space.sample(info["action_mask"])`` draws a legal action (vector env: [E, A]),
and ``env.action_masks()`` (what sb3-contrib's MaskablePPO calls); rejects are masked off
unless ``allow_reject``, and wait while a job can be placed unless ``allow_wait``. An action
outside the mask is a wait when an event is pending, else a no-op; it counts as a step, so
an episode can't hang: it is truncated at ``max_steps`` decisions. At the end of an episode (terminated
or truncated) the single env's ``info["metrics"]`` holds its metrics (``sim.metrics``: mean
JCT in seconds is ``metrics["jct_mean"]``); ``env.metrics()`` gives them at any time.

Seeding: ``reset(seed=s)`` starts the env's JAX key chain at ``key(s)``; each reset takes the
next episode key from the chain (so ``reset()`` without a seed draws a new episode). Decision
t of an episode uses ``fold_in(step key, t)``: the same seed gives the same episodes. The
vector env's env i with ``reset(seed=s)`` plays the episodes of the single env seeded s + i.

Vector env: autoreset mode NEXT_STEP (gymnasium 1.x's default): the step that ends an
episode returns its last observation; the next ``step`` call resets that env (its action is
ignored; reward 0, terminated and truncated False) and returns the new episode's first
observation. Between the two, ``metrics()`` shows the finished episodes. Every env is stepped
in one jitted ``vmap``; the resets (``reset``'s jitted vmap, for all envs, kept where due)
run only when some env is due.
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnasium.vector.utils import batch_space

from jaxsched import gymnax_env


@struct.dataclass
class Episode:
    """One env between steps: its key chain, this episode's step key, state and observation."""

    chain: jax.Array
    step_key: jax.Array
    state: gymnax_env.State
    obs: gymnax_env.Obs


def start(env: gymnax_env.ClusterGymnax, params: gymnax_env.Params, chain) -> Episode:
    """A fresh episode from the next key of ``chain``."""
    chain, key = jax.random.split(chain)
    k_reset, k_steps = jax.random.split(key)
    obs, state = env.reset_env(k_reset, params)
    return Episode(chain, k_steps, state, obs)


def advance(env: gymnax_env.ClusterGymnax, params: gymnax_env.Params, ep: Episode, action):
    """One decision -> (episode, reward, terminated, truncated, legal)."""
    obs, state, reward, terminated, info = env.step_env(
        jax.random.fold_in(ep.step_key, ep.state.time), ep.state, action, params)
    truncated = env.is_truncated(state, params) & ~terminated
    return ep.replace(state=state, obs=obs), reward, terminated, truncated, info["legal"]


def _spaces(env: gymnax_env.ClusterGymnax, params: gymnax_env.Params):
    size = env.observation_space(params).spaces["features"].shape
    return (gymnasium.spaces.Box(0.0, np.inf, size, np.float32),
            gymnasium.spaces.Discrete(env.num_actions))


def checked_actions(action, num_actions: int, shape: tuple) -> np.ndarray:
    """``action`` as int64 of ``shape``; a ``ValueError`` naming it unless every entry is an
    integer (not a bool, float or string) in [0, num_actions): Gymnasium's ``Discrete`` range.
    (The gymnax env keeps its documented behaviour under ``jit``: out-of-range is illegal.)"""
    arr = np.asarray(action)
    if arr.shape != shape or arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"action {action!r}: must be {'an integer' if not shape else f'{shape[0]} integers'} "
                         f"in [0, {num_actions}) (the flat actions of jaxsched.actions)")
    if ((arr < 0) | (arr >= num_actions)).any():
        raise ValueError(f"action {action!r}: out of range [0, {num_actions})")
    return arr.astype(np.int64)


def _seed_key(seed) -> jax.Array:
    """A key from a gymnasium seed; None: fresh entropy."""
    return jax.random.key(np.random.SeedSequence(seed).generate_state(1)[0] if seed is None else seed)


class ClusterGymEnv(gymnasium.Env):
    """One cluster env, stepped by a jitted JAX step (module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, render_mode=None, **kwargs):
        self.gx, self.params = gymnax_env.make(**kwargs)
        self.observation_space, self.action_space = _spaces(self.gx, self.params)
        self._start = jax.jit(lambda chain: start(self.gx, self.params, chain))
        self._advance = jax.jit(lambda ep, action: advance(self.gx, self.params, ep, action))
        self._metrics = jax.jit(lambda state: self.gx.metrics(state, self.params))
        self._chain, self._ep = None, None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None or self._chain is None:
            self._chain = _seed_key(seed)
        self._ep = self._start(self._chain)
        self._chain = self._ep.chain
        return np.array(self._ep.obs.features), {"action_mask": self.action_masks()}

    def step(self, action):
        action = checked_actions(action, self.action_space.n, ())
        self._ep, reward, terminated, truncated, legal = self._advance(self._ep, jnp.int32(action))
        terminated, truncated = bool(terminated), bool(truncated)
        info = {"action_mask": self.action_masks(), "legal": bool(legal)}
        if terminated or truncated:
            info["metrics"] = self.metrics()
        return np.array(self._ep.obs.features), float(reward), terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """[A] int8 (Gymnasium's mask convention, ``action_space.sample(mask)``): 1 where legal now."""
        return np.asarray(self._ep.obs.action_mask, dtype=np.int8)

    def metrics(self) -> dict:
        """The current episode's metrics (``sim.metrics.summarize``), as Python floats."""
        return {k: float(v) for k, v in self._metrics(self._ep.state).items()}


class ClusterGymVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` cluster envs batched in JAX (one jitted vmap); autoreset NEXT_STEP."""

    metadata = {"render_modes": [], "autoreset_mode": gymnasium.vector.AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 64, render_mode=None, **kwargs):
        self.num_envs = num_envs
        self.gx, self.params = gymnax_env.make(**kwargs)
        self.single_observation_space, self.single_action_space = _spaces(self.gx, self.params)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        gx, params = self.gx, self.params
        self._start = jax.jit(jax.vmap(lambda chain: start(gx, params, chain)))
        self._step = jax.jit(jax.vmap(lambda ep, action: advance(gx, params, ep, action)))
        self._pick = jax.jit(lambda due, new, old: jax.tree.map(
            lambda n, o: jnp.where(due.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old))
        self._metrics = jax.jit(jax.vmap(lambda state: gx.metrics(state, params)))
        self._eps, self._autoreset = None, None

    def reset(self, *, seed=None, options=None):
        if seed is None and self._eps is not None:
            chains = self._eps.chain
        else:
            seeds = seed if isinstance(seed, (list, tuple)) else (
                [None] * self.num_envs if seed is None else [seed + i for i in range(self.num_envs)])
            chains = jnp.stack([_seed_key(s) for s in seeds])
        self._eps = self._start(chains)
        self._autoreset = np.zeros(self.num_envs, bool)
        return np.array(self._eps.obs.features), {"action_mask": self.action_masks()}

    def step(self, actions):
        """Step every env; an env whose episode ended at the last step starts a new one
        instead (NEXT_STEP: its action is ignored; reward 0, not terminated or truncated)."""
        actions = jnp.asarray(checked_actions(actions, self.single_action_space.n, (self.num_envs,)), jnp.int32)
        eps, reward, terminated, truncated, legal = self._step(self._eps, actions)
        due = self._autoreset
        if due.any():  # the resets run only then, all envs' kept where due
            eps = self._pick(due, self._start(self._eps.chain), eps)
        self._eps = eps
        reward, legal = np.where(due, 0.0, np.array(reward)), np.array(legal) & ~due
        terminated, truncated = np.array(terminated) & ~due, np.array(truncated) & ~due
        self._autoreset = terminated | truncated
        return (np.array(self._eps.obs.features), reward, terminated, truncated,
                {"action_mask": self.action_masks(), "legal": legal})

    def action_masks(self) -> np.ndarray:
        """[E, A] int8: each env's legal actions now (1 where legal)."""
        return np.asarray(self._eps.obs.action_mask, dtype=np.int8)

    def metrics(self) -> dict:
        """Each env's current episode's metrics ([E] numpy arrays)."""
        return {k: np.asarray(v) for k, v in self._metrics(self._eps.state).items()}
