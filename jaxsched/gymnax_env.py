"""A gymnax ``Environment`` over ``sim.ClusterEnv``: each reset picks an episode of a bank drawn by ``make``.

For outside JAX RL code (PureJaxRL, gymnax-style loops)::

    env, params = gymnax_env.make(num_nodes=8, num_jobs=64, load=0.9, window=4)
    obs, state = env.reset(key, params)
    obs, state, reward, done, info = env.step_env(key, state, action, params)  # one decision
    # env.step(...) is gymnax's: it auto-resets, and truncates at params.max_steps_in_episode

Both jit and vmap like any gymnax env (``jax.vmap(env.reset, in_axes=(0, None))``).

Reset: a bank of episodes, each started once in ``make``. gymnax's ``step`` auto-resets, and
under ``vmap`` it computes ``reset_env`` at every step for every env (then keeps it only where
an episode ended), so a reset that drew a workload and ran the simulator to its first decision
point made ``env.step`` several times slower than ``env.step_env``. So by default ``make``
draws ``bank_size`` (1,024) synthetic episodes up front (from ``seed``), runs each to its first
decision point once, and keeps those (obs, state) in ``Params.starts``: a reset is a uniform
pick among them, a gather (results/gymnax/bench.md: ``step`` at 80 to 90% of ``step_env``,
about a quarter without it). The trade-off: training sees B distinct episodes, not a fresh draw each
time (1,024 episodes of J jobs each; the starts cost about 18 to 30 kB each at 4 to 64 nodes
and 12 to 64 jobs), and ``make`` compiles and runs the B resets (seconds, once per settings
and shapes in a process). ``bank_size=0``: each ``reset_env`` draws a fresh synthetic workload
(``synthetic.generate(key, params.synthetic)``) and runs the sim to its first decision point;
use it (or another ``seed``) for held-out evaluation. With ``workload="openb"`` the bank is
the trace windows (``trace_windows``), started once unless ``bank_size=0``.
``ClusterGymnax.with_bank`` builds such params from any bank of jobs.

Observation (``Obs``; A = K*N + K + 1 flat actions, ``jaxsched.actions``):
  features     [D] float32  ``features(obs)``, D = 8 N + 7 K + K N + 1: per node, free GPU
                            milli / 8000, wholly free GPUs / 8, the largest free milli on
                            one GPU / 1000, free CPU and memory / the node's, GPUs / 8, GPU
                            speed, a real node ([N, 8]); per window slot, occupied, GPUs / 8,
                            milli per GPU / 1000, CPU and memory / the cluster's largest node,
                            log(1 + work s) / 10, log(1 + wait s) / 10 ([K, 7]); the [K, N]
                            placement mask; log(1 + queue length) / 5.
  action_mask  [A] bool     the legal actions: the env's ``Observation.action_mask`` with
                            reject turned off unless ``allow_reject`` or nothing else is
                            legal (``agents.ddqn.legal_mask``: with a JCT reward, rejecting
                            every job would look best); wait is masked too while some job can
                            be placed, unless ``allow_wait`` (off by default: every outside
                            learner tried with it learned to wait and did worse than random
                            placement). All False once the episode is done.
The mask is in the observation, so it stays right across gymnax's auto-reset.

Illegal actions: an action outside ``action_mask`` (a reject too, while rejects are off;
an integer out of range; a float that is not a whole number: NaN, inf, 0.5) goes to the env
as an illegal action, which it treats as a wait when an event is pending
(the clock moves on to it), else as a no-op; either way the step counts, so an episode of
illegal actions ends by truncation at ``max_steps_in_episode`` decisions (default 3 x jobs
+ 100, the eval cap).
Outside trainers that want one array observation and gymnax's older 5-value ``step``
(rejax): ``jaxsched.gymnax_adapters``.

Reward: the env's (``EnvConfig.reward``; by default -(job-hours in the system during the
step), so an episode's return is -(total JCT, hours)). ``env.metrics(state, params)`` gives
the episode's metrics (``sim.metrics.summarize``: mean JCT and the rest) at its end.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from jaxsched import actions
from jaxsched import config as cfg_lib
from jaxsched import experiment
from jaxsched.agents import ddqn
from jaxsched.cluster import to_cluster
from jaxsched.sim.env import ClusterEnv, EnvConfig
from jaxsched.types import GPU_MILLI, EnvParams, Jobs, Observation, SimState, to_device
from jaxsched.workload import synthetic
from jaxsched.workload.synthetic import SyntheticConfig

NODE_FEATURES = 8
SLOT_FEATURES = 7
BANK_SIZE = 1024  # make's default: synthetic episodes drawn (and started) once, one per reset


@struct.dataclass
class Params:
    """gymnax env params: the simulator's params and where each episode's jobs come from.

    sim        types.EnvParams   cluster and FGD's target workload
    bank       Jobs [B, J] | None  episodes to pick from (None: draw synthetic jobs)
    starts     (Obs, State) [B] | None  the first decision point of each bank episode, as
                                 the env that made them sees it (``ClusterGymnax.with_bank``);
                                 when set, ``reset_env`` picks one (None: run the sim to it)
    synthetic  SyntheticConfig   the synthetic workload (static; used when bank is None)
    max_steps_in_episode  int    gymnax's truncation: decisions per episode at most
    """

    sim: EnvParams
    bank: Jobs | None = None
    starts: tuple | None = None
    synthetic: SyntheticConfig | None = struct.field(pytree_node=False, default=None)
    max_steps_in_episode: int = 10_000


@struct.dataclass
class State(environment.EnvState):
    """time [] int32: decisions taken this episode (gymnax's step count). sim: the episode.
    action_mask [A] bool: the legal actions now (the observation's)."""

    sim: SimState = None
    action_mask: jax.Array = None


@struct.dataclass
class Obs:
    """What an agent sees: ``features`` [D] float32 and the legal ``action_mask`` [A] bool."""

    features: jax.Array
    action_mask: jax.Array


def features(obs: Observation) -> jax.Array:
    """[D] float32 flat features of one (unbatched) observation (module docstring)."""
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    c = obs.cluster
    cpu_cap, mem_cap = jnp.maximum(f32(c.cpu_milli), 1.0), jnp.maximum(f32(c.mem_mib), 1.0)
    free = jnp.where(c.gpu_exists, obs.free_milli, 0)
    nodes = jnp.stack([
        f32(free.sum(-1)) / (8 * GPU_MILLI), f32((free == GPU_MILLI).sum(-1)) / 8,
        f32(free.max(-1)) / GPU_MILLI, f32(obs.free_cpu) / cpu_cap, f32(obs.free_mem) / mem_cap,
        f32(c.num_gpus) / 8, f32(c.speed), f32(c.valid),
    ], -1)
    slots = jnp.stack([
        f32(obs.window_job >= 0), f32(obs.job_num_gpu) / 8, f32(obs.job_gpu_milli) / GPU_MILLI,
        f32(obs.job_cpu_milli) / cpu_cap.max(), f32(obs.job_mem_mib) / mem_cap.max(),
        jnp.log1p(f32(obs.job_work_s)) / 10, jnp.log1p(jnp.maximum(f32(obs.job_wait_s), 0.0)) / 10,
    ], -1)
    queue = jnp.log1p(f32(obs.queue_len))[None] / 5
    return jnp.concatenate([nodes.ravel(), slots.ravel(), f32(obs.place_mask).ravel(), queue])


def num_features(num_slots: int, num_nodes: int) -> int:
    """D, the length of ``features``."""
    return NODE_FEATURES * num_nodes + SLOT_FEATURES * num_slots + num_slots * num_nodes + 1


class ClusterGymnax(environment.Environment):
    """gymnax ``Environment`` of one cluster episode per reset (module docstring).

    config: the simulator's settings (``EnvConfig``; window K). params: the default ``Params``
    (gymnax's ``default_params``; it fixes N for the spaces). allow_reject: leave reject
    actions in ``action_mask``. allow_wait: leave wait in it while a job can be placed.
    """

    def __init__(self, config: EnvConfig, params: Params, allow_reject: bool = False, allow_wait: bool = False):
        super().__init__()
        self.sim = ClusterEnv(config)
        self._default_params = params
        self.agent = ddqn.AgentConfig(allow_reject=allow_reject, allow_wait=allow_wait)

    @property
    def default_params(self) -> Params:
        return self._default_params

    def draw_jobs(self, key, params: Params) -> Jobs:
        """The jobs of a new episode: synthetic, or one of the bank's uniformly."""
        if params.bank is None:
            return synthetic.generate(key, params.synthetic)
        pick = jax.random.randint(key, (), 0, params.bank.arrival_s.shape[0])
        return jax.tree.map(lambda x: x[pick], params.bank)

    def reset_env(self, key, params: Params):
        """-> (obs, state) at the first decision point of a fresh episode: one of
        ``params.starts`` (the one whose jobs ``draw_jobs`` picks), else the sim run to it."""
        k_jobs, k_sim = jax.random.split(key)
        if params.starts is not None:
            pick = jax.random.randint(k_jobs, (), 0, params.bank.arrival_s.shape[0])
            return jax.tree.map(lambda x: x[pick], params.starts)
        return self.start(k_sim, params, self.draw_jobs(k_jobs, params))

    def start(self, key, params: Params, jobs: Jobs):
        """-> (obs, state) at the first decision point of the episode of ``jobs`` [J]."""
        sim, obs = self.sim.reset(key, params.sim, jobs)
        obs = self.observation(obs)
        return obs, State(time=jnp.int32(0), sim=sim, action_mask=obs.action_mask)

    def with_bank(self, params: Params, key, bank: Jobs | None = None, size: int = BANK_SIZE) -> Params:
        """``params`` whose episodes are a bank of B, each started once now (its first decision
        point), so that a reset only picks one. bank: their jobs (``Jobs`` [B, J]); None: B =
        ``size`` synthetic episodes of ``params.synthetic``. Episode b uses ``split(key, B)[b]``
        as ``reset_env`` would with no bank: so a synthetic bank's episode b is the one a fresh
        ``reset_env(split(key, B)[b])`` gives. Not jittable (it runs the B resets, compiled
        once per env settings and shapes)."""
        keys = jax.random.split(key, size if bank is None else bank.arrival_s.shape[0])
        starts = _started(self.sim.config, self.agent, params.replace(bank=None, starts=None), keys, bank)
        return params.replace(bank=starts[1].sim.jobs, starts=starts)

    def step_env(self, key, state: State, action, params: Params):
        """One decision -> (obs, state, reward, terminated, info); info["legal"]: the action
        was in ``action_mask``. One outside it (out of range, or a float that is not a
        whole number: NaN, inf, 0.5) goes to the env as an illegal action."""
        num_actions = state.action_mask.shape[-1]
        action = jnp.asarray(action)
        ok = (action >= 0) & (action < num_actions)  # compared before any cast: NaN fails both
        if jnp.issubdtype(action.dtype, jnp.floating):
            ok &= action == jnp.floor(action)
        action = jnp.where(ok, action, 0).astype(jnp.int32)
        ok &= state.action_mask[action]
        sim, obs, reward, done, info = self.sim.step(key, state.sim, jnp.where(ok, action, num_actions), params.sim)
        obs = self.observation(obs)
        state = State(time=state.time + 1, sim=sim, action_mask=obs.action_mask)
        return obs, state, reward, done, {"legal": info["legal"] & ok}

    def observation(self, obs: Observation) -> Obs:
        """The agent's ``Obs`` of the simulator's ``Observation``."""
        mask = ddqn.legal_mask(self.agent, obs)
        return Obs(features=features(obs), action_mask=mask)

    def is_terminated(self, state: State, params: Params):
        return state.sim.core.done

    def metrics(self, state: State, params: Params) -> dict:
        """The episode's metrics (``ClusterEnv.metrics``)."""
        return self.sim.metrics(state.sim, params.sim)

    @property
    def name(self) -> str:
        return "jaxsched/Cluster"

    @property
    def num_actions(self) -> int:
        return self.sim.num_actions(self.default_params.sim)

    def action_space(self, params: Params | None = None) -> spaces.Discrete:
        return spaces.Discrete(self.sim.num_actions((params or self.default_params).sim))

    def observation_space(self, params: Params | None = None) -> spaces.Dict:
        num_nodes = (params or self.default_params).sim.cluster.num_nodes
        k = self.sim.config.window
        return spaces.Dict({
            "features": spaces.Box(0.0, jnp.inf, (num_features(k, num_nodes),), jnp.float32),
            "action_mask": spaces.Box(0, 1, (actions.num_actions(k, num_nodes),), jnp.bool_),
        })


@functools.partial(jax.jit, static_argnames=("config", "agent"))
def _started(config: EnvConfig, agent: ddqn.AgentConfig, params: Params, keys, bank: Jobs | None):
    """(obs, state) [B] at the first decision point of each episode (``ClusterGymnax.with_bank``)."""
    env = ClusterGymnax(config, params, agent.allow_reject, agent.allow_wait)

    def one(args):
        key, jobs = args
        k_jobs, k_sim = jax.random.split(key)
        return env.start(k_sim, params, synthetic.generate(k_jobs, params.synthetic) if jobs is None else jobs)

    return jax.lax.map(one, (keys, bank))


def make(num_nodes: int = 8, num_jobs: int = 64, load: float = 0.9, window: int = 4,
         workload: str = "synthetic", trace: str = "", trace_windows: int = 128, seed: int = 0,
         max_steps: int = 0, allow_reject: bool = False, allow_wait: bool = False,
         config: cfg_lib.Config | str | None = None, bank_size: int = BANK_SIZE,
         **env) -> tuple[ClusterGymnax, Params]:
    """(env, params) of a cluster of ``num_nodes`` (the openb-mix preset), like ``gymnax.make``.

    workload "synthetic": ``num_jobs`` jobs per episode at offered load ``load`` (rho on the
    cluster's work capacity): a bank of ``bank_size`` episodes drawn now (from ``seed``), one
    per reset; ``bank_size`` 0: a fresh draw per reset. "openb": a bank of ``trace_windows``
    windows of ``num_jobs`` consecutive pods of the pod list ``trace``, each compressed to
    ``load`` (picked by ``seed``), one per reset. Unless ``bank_size`` is 0, every bank
    episode is started here, once, so that a reset is a pick (module docstring, "Reset").
    window: K. max_steps: decisions per episode
    before truncation (0: 3 x jobs + 100). allow_reject, allow_wait: see ``ClusterGymnax``.
    ``env``: further ``EnvConfig`` fields (e.g. ``reward="placed_jct"``). config: a run config
    (``jaxsched.config``, or a TOML path) to start from instead of the defaults; the other
    arguments still apply. A bad value is a ``ValueError`` naming it (an offered load the
    synthetic workload cannot reach, a negative ``max_steps`` or ``bank_size``).
    """
    for name, value, zero in (("max_steps", max_steps, "3 x jobs + 100"), ("bank_size", bank_size, "no bank")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"gymnax_env.make: {name} = {value!r}: must be an integer >= 0 (0: {zero})")
    base = cfg_lib.load(config) if isinstance(config, str) else (config or cfg_lib.Config())
    base_env = base.env if config is not None else EnvConfig()
    w = base.workload
    w = dataclasses.replace(w, source=workload, trace=trace or w.trace, window_jobs=num_jobs, target_load=load,
                            synthetic=w.synthetic.replace(num_jobs=num_jobs, target_load=load, cluster_capacity=None))
    run = dataclasses.replace(
        base, cluster=dataclasses.replace(base.cluster, preset_nodes=num_nodes), workload=w,
        env=dataclasses.replace(base_env, window=window, **env),
        eval=dataclasses.replace(base.eval, episodes=trace_windows if workload == "openb" else 1, seed=seed))
    nodes = experiment.build_nodes(run)
    jobs, frag, _ = experiment.build_workload(run, nodes)
    sim = to_device(EnvParams(to_cluster(nodes), frag))
    params = Params(sim=sim, bank=jobs if workload == "openb" else None,
                    synthetic=experiment.with_capacity(w.synthetic, nodes).validate(),
                    max_steps_in_episode=max_steps or 3 * num_jobs + 100)
    gx = ClusterGymnax(run.env, params, allow_reject, allow_wait)
    if bank_size:
        params = gx.with_bank(params, jax.random.key(seed), params.bank, bank_size)
        gx = ClusterGymnax(run.env, params, allow_reject, allow_wait)
    return gx, params
