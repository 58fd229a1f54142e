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
from), bank_size (0 here, unlike the gymnax env's bank: every reset draws a fresh synthetic
episode from its key, so the episodes of ``reset(seed=s)`` are new ones; these envs reset only
when an episode ends, so a bank would not speed them up), and any ``EnvConfig`` field (e.g. reward="placed_jct"). Any other keyword is a
``TypeError`` naming it and listing the valid ones.

Observation: the flat ``gymnax_env.features`` vector, a Box [D] float32 with finite bounds,
0 to ``feature_high`` (what each feature's definition allows on this cluster and workload).
Action: Discrete(A),
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

Compiling: the jitted reset, step and metrics functions are shared by every env of equal
settings (the gymnax env's static config; the ``Params`` arrays are arguments), so only the
first env of a kind compiles (~15-30 s on a CPU), and ``gymnasium.make_vec(...,
vectorization_mode="sync")`` compiles once for all its envs.

Vector env: autoreset mode NEXT_STEP (gymnasium 1.x's default): the step that ends an
episode returns its last observation; the next ``step`` call resets that env (its action is
ignored; reward 0, terminated and truncated False) and returns the new episode's first
observation. Between the two, ``metrics()`` shows the finished episodes. Every env is stepped
in one jitted ``vmap``; the resets (``reset``'s jitted vmap, for all envs, kept where due)
run only when some env is due. Its ``info`` is the single envs' in Gymnasium's vector
convention (what ``vectorization_mode="sync"`` gives): each key with a ``"_key"`` [E] bool
companion marking the envs that have it; ``info["metrics"]`` (each metric [E] float64 with its
own ``"_name"`` mask) and ``info["_metrics"]`` appear on a step where some episode ended.

Processes: ``vectorization_mode="async"`` needs ``vector_kwargs={"context": "spawn"}`` (or
"forkserver"): a process forked after JAX started deadlocks (JAX is multithreaded), so an
env built for a fork-started ``AsyncVectorEnv``, or in any process forked after an env was
built, raises a ``RuntimeError`` that says so. Pickling (``pickle``, ``copy.deepcopy``)
keeps the constructor's kwargs and the episode arrays as numpy and builds the env again:
the copy plays the same next steps.

Rendering: ``render_mode="ansi"`` (the only mode): ``render()`` returns a short text view of
the clock, queue, window and each node's free GPUs (vector env: one per env).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import multiprocessing
import os
import sys

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnasium.vector.utils import batch_space

from jaxsched import gymnax_env
from jaxsched.sim.env import EnvConfig
from jaxsched.types import GPU_MILLI


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


# ----- compiled once per kind of env ------------------------------------------------------

class Settings:
    """A gymnax env as a static ``jit`` argument: equal (and equally hashed) for envs of equal
    settings, so envs built apart share their compiled functions. The key is the env's class
    and attributes (its ``ClusterEnv``, with the ``EnvConfig``, and mask settings) but not its
    default params: those are passed to every call as traced arguments."""

    def __init__(self, env: gymnax_env.ClusterGymnax):
        self.env = env
        self.key = (type(env),) + tuple(sorted((k, v) for k, v in vars(env).items() if k != "_default_params"))

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, Settings) and self.key == other.key


def _shared(fn):
    """``fn(env, params, *arrays)`` jitted with the env static (``Settings``): one compile per
    kind of env and shape of params, for every env instance."""
    return jax.jit(lambda settings, params, *arrays: fn(settings.env, params, *arrays), static_argnums=0)


def _batched(fn):
    """``fn(env, params, *arrays)`` over a leading env axis of the arrays."""
    return lambda env, params, *arrays: jax.vmap(functools.partial(fn, env, params))(*arrays)


def _metrics(env, params, state):
    return env.metrics(state, params)


def _observe(env, params, state):
    return env.sim.observe(state.sim, params.sim)


start_one, advance_one, metrics_one, observe_one = map(_shared, (start, advance, _metrics, _observe))
start_all, advance_all, metrics_all, observe_all = (
    _shared(_batched(fn)) for fn in (start, advance, _metrics, _observe))


@jax.jit
def _pick(due, new, old):
    """``new`` where ``due`` [E] else ``old`` (trees of [E, ...] arrays)."""
    return jax.tree.map(lambda n, o: jnp.where(due.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old)


# ----- spaces, arguments and processes ----------------------------------------------------

def _largest_job(params: gymnax_env.Params) -> tuple:
    """(J, num_gpu, cpu_milli, mem_mib, work_s): jobs per episode and the largest of each
    request among the jobs ``reset`` can draw (the bank's, or the synthetic job classes and
    work cap ``max_work_s``, maybe +inf)."""
    if params.bank is not None:
        b = jax.tree.map(np.asarray, params.bank)
        return b.arrival_s.shape[-1], b.num_gpu.max(), b.cpu_milli.max(), b.mem_mib.max(), b.work_s.max()
    syn = params.synthetic
    rows = np.array(syn.job_classes)  # rows (num_gpu, gpu_milli, cpu_milli, mem_mib, weight)
    return syn.pad_to or syn.num_jobs, rows[:, 0].max(), rows[:, 2].max(), rows[:, 3].max(), syn.max_work_s


def feature_high(env: gymnax_env.ClusterGymnax, params: gymnax_env.Params) -> np.ndarray:
    """[D] float32: the largest value each of ``gymnax_env.features`` can take in an episode
    of (env, params) (every feature is >= 0), from its definition (gymnax_env's docstring).

    Per node: free GPU milli / 8000, wholly free GPUs / 8 and GPUs / 8 are at most G / 8 (G:
    GPUs per node); the largest free milli / 1000, free CPU and memory shares, a real node 1;
    GPU speed the fastest node's. Per slot: occupied and milli per GPU / 1000 are at most 1;
    GPUs / 8, CPU and memory / the largest node's are those of the largest job the workload
    draws; log(1 + work s) / 10 the work cap's; log(1 + wait s) / 10 float32's largest (no
    cap on waiting), as for uncapped work. The placement mask 1; log(1 + queue length) / 5
    at most log(1 + J) / 5 (J jobs per episode).
    """
    c = jax.tree.map(np.asarray, params.sim.cluster)
    f32 = np.float32
    gpus = f32(c.gpu_exists.shape[-1]) / f32(8)
    num_jobs, num_gpu, cpu, mem, work = _largest_job(params)

    def log_high(x, scale):  # 2**-20 up (8 ulps): numpy's and XLA's log1p may round apart
        return f32(np.log1p(f32(min(x, np.finfo(f32).max))) / scale * (1 + 2**-20))

    node = [gpus, gpus, 1, 1, 1, gpus, c.speed.max(), 1]
    slot = [1, f32(num_gpu) / f32(8), 1, f32(cpu) / f32(max(c.cpu_milli.max(), 1)),
            f32(mem) / f32(max(c.mem_mib.max(), 1)), log_high(work, 10), log_high(np.inf, 10)]
    k, n = env.sim.config.window, c.num_gpus.shape[-1]
    high = np.concatenate([np.tile(np.asarray(node, f32), n), np.tile(np.asarray(slot, f32), k),
                           np.ones(k * n, f32), [log_high(num_jobs, 5)]]).astype(f32)
    assert high.shape == (gymnax_env.num_features(k, n),)
    return high


def _spaces(env: gymnax_env.ClusterGymnax, params: gymnax_env.Params):
    high = feature_high(env, params)
    return (gymnasium.spaces.Box(np.zeros_like(high), high, dtype=np.float32),
            gymnasium.spaces.Discrete(env.num_actions))


def valid_kwargs() -> list[str]:
    """The keywords the envs take: ``gymnax_env.make``'s and the ``EnvConfig`` fields."""
    names = [k for k, p in inspect.signature(gymnax_env.make).parameters.items() if p.kind != p.VAR_KEYWORD]
    return names + [f.name for f in dataclasses.fields(EnvConfig) if f.name not in names]


def _check_kwargs(kwargs: dict, own: tuple = ()):
    """A one-line ``TypeError`` naming the first keyword that is not one of ``valid_kwargs``."""
    valid = list(own) + ["render_mode"] + valid_kwargs()
    bad = [k for k in kwargs if k not in valid]
    if bad:
        close = difflib.get_close_matches(bad[0], valid, 1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(f"jaxsched/Cluster-v0: unknown keyword {bad[0]!r}{hint}; valid: {', '.join(valid)}")


def _check_render_mode(render_mode):
    if render_mode not in (None, "ansi"):
        raise ValueError(f"jaxsched/Cluster-v0: render_mode={render_mode!r}: the only mode is 'ansi' (text)")


_FORK = {"env_built": False, "forked_after_build": False}
os.register_at_fork(after_in_child=lambda: _FORK.update(forked_after_build=_FORK["env_built"]))
_FORK_FIX = ("JAX is multithreaded, and a process forked after it started deadlocks; use "
             "gymnasium.make_vec(..., vectorization_mode='async', vector_kwargs={'context': 'spawn'}) "
             "(or 'forkserver'), or vectorization_mode='vector_entry_point'")


def _check_not_forked():
    """A ``RuntimeError`` naming the fix instead of a deadlock: when this env is built for a
    fork-started ``AsyncVectorEnv`` (which builds one env in this process, then forks the
    workers), or in a process forked after an env was built."""
    if _FORK["forked_after_build"]:
        raise RuntimeError(f"jaxsched/Cluster-v0 built in a forked process: {_FORK_FIX}")
    frame = sys._getframe(1)
    while frame is not None:  # gymnasium's AsyncVectorEnv.__init__ has set self.context by now
        owner = frame.f_locals.get("self")
        if isinstance(owner, gymnasium.vector.AsyncVectorEnv):
            if multiprocessing.get_context(owner.context).get_start_method() == "fork":
                raise RuntimeError(f"jaxsched/Cluster-v0 in an AsyncVectorEnv with the 'fork' start method: {_FORK_FIX}")
            break
        frame = frame.f_back


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


# ----- pickling and rendering -------------------------------------------------------------

class _HostKey:
    """A JAX key array on the host, for pickling: its key data and implementation's name."""

    def __init__(self, key):
        self.data, self.impl = np.asarray(jax.random.key_data(key)), str(jax.random.key_impl(key))


def _to_host(tree):
    """``tree`` with numpy leaves (key arrays as ``_HostKey``)."""
    is_key = lambda x: jnp.issubdtype(x.dtype, jax.dtypes.prng_key)  # noqa: E731
    return jax.tree.map(lambda x: _HostKey(x) if is_key(x) else np.asarray(x), tree)


def _to_device(tree):
    """The inverse of ``_to_host``."""
    return jax.tree.map(lambda x: jax.random.wrap_key_data(x.data, impl=x.impl)
                        if isinstance(x, _HostKey) else jnp.asarray(x), tree)


class _Rebuilt:
    """Pickling of an env: its ``__dict__`` without the JAX objects, the episode arrays named
    in ``_arrays`` as numpy; unpickling builds the env again from ``_init`` (the constructor's
    kwargs; its compiled functions are shared, so nothing compiles again) and puts them back."""

    _arrays: tuple = ()

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("gx", "params", "settings")}
        return {**state, **{k: _to_host(state[k]) for k in self._arrays}}

    def __setstate__(self, state):
        self.__init__(**state["_init"])
        self.__dict__.update(state)
        for k in self._arrays:
            setattr(self, k, _to_device(state[k]))


def render_text(obs, decisions: int, max_decisions: int) -> str:
    """A short text view of one env's ``Observation`` (numpy leaves) after ``decisions``
    decisions: the clock, the queue, each window slot's job, each node's free GPUs."""
    c = obs.cluster
    slots = [f"k{k}: job {j}, {obs.job_num_gpu[k]} GPU x {obs.job_gpu_milli[k]} milli, "
             f"work {obs.job_work_s[k]:.0f} s, waited {obs.job_wait_s[k]:.0f} s" if j >= 0 else f"k{k}: empty"
             for k, j in enumerate(obs.window_job)]
    nodes = [f"{n:4d}  {(free[has] == GPU_MILLI).sum()}/{has.sum()} whole, milli {' '.join(map(str, free[has]))}"
             for n, (free, has) in enumerate(zip(obs.free_milli, c.gpu_exists)) if c.valid[n]]
    return "\n".join([f"time {obs.time_s:.1f} s, decision {decisions}/{max_decisions}, queue {obs.queue_len}",
                      "window: " + "; ".join(slots), "node  free GPUs", *nodes])


NOT_RESET = "jaxsched/Cluster: not reset yet"


class ClusterGymEnv(_Rebuilt, gymnasium.Env):
    """One cluster env, stepped by a jitted JAX step (module docstring)."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    _arrays = ("_chain", "_ep")

    def __init__(self, render_mode=None, **kwargs):
        _check_kwargs(kwargs)
        _check_render_mode(render_mode)
        _check_not_forked()
        self._init = dict(kwargs, render_mode=render_mode)
        self.render_mode = render_mode
        self.gx, self.params = gymnax_env.make(**{"bank_size": 0, **kwargs})
        _FORK["env_built"] = True
        self.settings = Settings(self.gx)
        self.observation_space, self.action_space = _spaces(self.gx, self.params)
        self._chain, self._ep = None, None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None or self._chain is None:
            self._chain = _seed_key(seed)
        self._ep = start_one(self.settings, self.params, self._chain)
        self._chain = self._ep.chain
        return np.array(self._ep.obs.features), {"action_mask": self.action_masks()}

    def step(self, action):
        if self._ep is None:
            raise RuntimeError("jaxsched/Cluster: step() before reset(): call reset() first")
        action = checked_actions(action, self.action_space.n, ())
        self._ep, reward, terminated, truncated, legal = advance_one(
            self.settings, self.params, self._ep, jnp.int32(action))
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
        return {k: float(v) for k, v in metrics_one(self.settings, self.params, self._ep.state).items()}

    def render(self):
        """render_mode "ansi": the text view of ``render_text``; None: nothing."""
        if self.render_mode is None:
            return None
        if self._ep is None:
            return NOT_RESET
        obs = _to_host(observe_one(self.settings, self.params, self._ep.state))
        return render_text(obs, int(self._ep.state.time), self.params.max_steps_in_episode)


class ClusterGymVectorEnv(_Rebuilt, gymnasium.vector.VectorEnv):
    """``num_envs`` cluster envs batched in JAX (one jitted vmap); autoreset NEXT_STEP."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4, "autoreset_mode": gymnasium.vector.AutoresetMode.NEXT_STEP}
    _arrays = ("_eps",)

    def __init__(self, num_envs: int = 64, render_mode=None, **kwargs):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"jaxsched/Cluster: num_envs must be an integer >= 1, got {num_envs!r}")
        _check_kwargs(kwargs, own=("num_envs",))
        _check_render_mode(render_mode)
        _check_not_forked()
        self._init = dict(kwargs, num_envs=num_envs, render_mode=render_mode)
        self.num_envs, self.render_mode = num_envs, render_mode
        self.gx, self.params = gymnax_env.make(**{"bank_size": 0, **kwargs})
        _FORK["env_built"] = True
        self.settings = Settings(self.gx)
        self.single_observation_space, self.single_action_space = _spaces(self.gx, self.params)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._eps, self._autoreset = None, None

    def reset(self, *, seed=None, options=None):
        if seed is None and self._eps is not None:
            chains = self._eps.chain
        else:
            seeds = seed if isinstance(seed, (list, tuple)) else (
                [None] * self.num_envs if seed is None else [seed + i for i in range(self.num_envs)])
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset(seed={seed!r}): {len(seeds)} seeds for {self.num_envs} envs; "
                                 "give one seed per env, one int (env i gets seed + i) or None")
            chains = jnp.stack([_seed_key(s) for s in seeds])
        self._eps = start_all(self.settings, self.params, chains)
        self._autoreset = np.zeros(self.num_envs, bool)
        every = np.ones(self.num_envs, bool)
        return np.array(self._eps.obs.features), {"action_mask": self.action_masks(), "_action_mask": every}

    def step(self, actions):
        """Step every env; an env whose episode ended at the last step starts a new one
        instead (NEXT_STEP: its action is ignored; reward 0, not terminated or truncated)."""
        if self._eps is None:
            raise RuntimeError("jaxsched/Cluster: step() before reset(): call reset() first")
        actions = jnp.asarray(checked_actions(actions, self.single_action_space.n, (self.num_envs,)), jnp.int32)
        eps, reward, terminated, truncated, legal = advance_all(self.settings, self.params, self._eps, actions)
        due = self._autoreset
        if due.any():  # the resets run only then, all envs' kept where due
            eps = _pick(due, start_all(self.settings, self.params, self._eps.chain), eps)
        self._eps = eps
        reward, legal = np.where(due, 0.0, np.array(reward)), np.array(legal) & ~due
        terminated, truncated = np.array(terminated) & ~due, np.array(truncated) & ~due
        ended = self._autoreset = terminated | truncated
        # Gymnasium's vector info: each key with its "_key" mask of the envs that have it; a
        # reset env has its reset's info (no "legal"), an ended one its metrics.
        info = {"action_mask": self.action_masks(), "_action_mask": np.ones(self.num_envs, bool),
                "legal": legal, "_legal": ~due}
        if ended.any():
            info["metrics"] = {}
            for k, v in self.metrics().items():
                info["metrics"][k], info["metrics"]["_" + k] = np.where(ended, v, 0.0).astype(np.float64), ended
            info["_metrics"] = ended
        return np.array(self._eps.obs.features), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """[E, A] int8: each env's legal actions now (1 where legal)."""
        return np.asarray(self._eps.obs.action_mask, dtype=np.int8)

    def metrics(self) -> dict:
        """Each env's current episode's metrics ([E] numpy arrays)."""
        return {k: np.asarray(v) for k, v in metrics_all(self.settings, self.params, self._eps.state).items()}

    def render(self):
        """render_mode "ansi": a tuple of each env's text view (``render_text``); None: nothing."""
        if self.render_mode is None:
            return None
        if self._eps is None:
            return (NOT_RESET,) * self.num_envs
        obs = _to_host(observe_all(self.settings, self.params, self._eps.state))
        time = np.asarray(self._eps.state.time)
        return tuple(render_text(jax.tree.map(lambda x: x[i], obs), int(time[i]), self.params.max_steps_in_episode)
                     for i in range(self.num_envs))
