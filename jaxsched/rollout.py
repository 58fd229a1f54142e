"""One rollout for every policy: heuristics and learned agents run through the same code.

``rollout`` resets a batch of episodes and runs them (each alone, or vmapped: stepping, or
turn by turn) until every episode is done or a step cap is reached, then returns the final
states and per-episode metrics.
``rollout_timeline`` steps the same episodes a fixed number of steps and records the cluster
after each one (for plots over time).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from jaxsched import devices
from jaxsched.sim.env import ClusterEnv
from jaxsched.sim.reduce import ordered_sum
from jaxsched.types import GPU_MILLI, EnvParams, Jobs


CPU_CHUNK = 16  # 1,024 episodes, 2 CPU cores: best for stepping of 8..128; turn by turn 16 ~ 32 > 8, 64
TURNS = 2  # event turns per iteration of the turn-by-turn loop (see rollout's docstring)


def default_chunk() -> int | None:
    """Episodes run together: on a CPU one (each episode alone, its loop one kernel) when
    ``devices.configure_cpu`` enabled whole-loop kernels, else a few (cache, slowest-episode
    waits); on a GPU all of them."""
    if jax.default_backend() != "cpu":
        return None
    return 1 if devices.whole_loop_kernels() else CPU_CHUNK


def rollout(env: ClusterEnv, policy: Callable, policy_params, env_params: EnvParams,
            jobs: Jobs, keys, max_steps: int, chunk: int | None = -1, turns: int | None = TURNS):
    """Run a batch of episodes to the end.

    env_params: one ``EnvParams`` shared by the batch. jobs: ``Jobs`` with a leading batch
    axis [B, J]. keys: [B] per-episode keys (results do not depend on how a batch is split).
    max_steps: step cap (decisions per episode); an episode still running then has
    metrics["done"] == 0.
    chunk: episodes run together (-1: ``default_chunk()``, None: the whole batch); a
    larger batch runs as a sequence of chunks (``lax.map``). 1: each episode alone,
    unbatched and stepped (``turns`` does not apply): no episode waits for another, and
    XLA:CPU can compile its whole loop into one kernel (``devices.py``).
    turns: how a chunk's loop advances its episodes; either way the episodes are exactly the
    same (same states, same keys):
      None  step: each iteration, every episode takes a decision and runs to its next one
            (``env.step``). Under ``vmap`` the event loop runs as long as the slowest
            episode of the chunk, so chunks stay small (throughput falls as chunks grow:
            docs/performance.md).
      int   turn by turn: each iteration, an episode at a decision point decides, then every
            episode runs ``turns`` event turns, masked off once it reaches its next stop. No
            episode waits for another, so a whole batch runs well in one ``vmap``, but the
            policy runs every iteration (about two per decision with 2 turns).
    Measured side by side: results/bench/rollout_schedule.md.
    Returns (final states [B], metrics dict of [B] arrays). Jit it with ``env``, ``policy``,
    ``max_steps``, ``chunk`` and ``turns`` static.
    """
    if turns is not None and not (isinstance(turns, int) and turns >= 1):
        raise ValueError(f"rollout: turns = {turns!r} must be None (stepping) or an integer >= 1")
    if env.config.rounds:  # a round policy, stepped (``_decide_and_step``)
        turns = None
    batch = keys.shape[0]
    chunk = default_chunk() if chunk == -1 else chunk
    loop = _rollout_steps if turns is None else functools.partial(_rollout_turns, turns=turns)
    run = lambda j, k: loop(env, policy, policy_params, env_params, j, k, max_steps)  # noqa: E731
    if chunk == 1:
        state = jax.lax.map(
            lambda c: _episode_alone(env, policy, policy_params, env_params, *c, max_steps), (jobs, keys))
        # Metrics vmapped, as in the batched loops: XLA rounds some divisions differently unbatched.
        return state, jax.vmap(env.metrics, in_axes=(0, None))(state, env_params)
    if chunk is None or batch <= chunk:
        return run(jobs, keys)
    padded = -(-batch // chunk) * chunk  # repeat the last episode up to a multiple of chunk
    split = lambda x: jnp.concatenate(  # noqa: E731
        [x, jnp.repeat(x[-1:], padded - batch, axis=0)]).reshape(padded // chunk, chunk, *x.shape[1:])
    out = jax.lax.map(lambda c: run(*c), (jax.tree.map(split, jobs), split(keys)))
    return jax.tree.map(lambda x: x.reshape(padded, *x.shape[2:])[:batch], out)


def warm_up(env: ClusterEnv, policy: Callable, env_params: EnvParams, state, obs, key):
    """One episode from ``state`` stepped by ``policy`` (a heuristic: no params) until its
    measurement interval begins (the first measured job has arrived) or it ends ->
    (state, obs). Decision t uses ``fold_in(key, t)``. For a learner trained on a loaded
    cluster: its episodes start where the warm-up leaves them (``train.warmup_scheduler``)."""
    def warming(carry):
        state = carry[0]
        return (state.core.time_s < state.core.measure_from_s) & ~state.core.done

    def body(carry):
        state, obs, t = carry
        state, obs = _decide_and_step(env, policy, None, env_params, key, state, obs, t)
        return state, obs, t + 1

    state, obs, _ = jax.lax.while_loop(warming, body, (state, obs, jnp.int32(0)))
    return state, obs


def warm_up_batch(env: ClusterEnv, policy: Callable, env_params: EnvParams, state, obs, keys,
                  alone: bool | None = None):
    """``warm_up`` of every episode of a batch (state, obs, keys [E]) -> (state, obs) [E].

    alone: each episode's warm-up on its own (``lax.map``), or all of them in one ``vmap``;
    None: alone on a CPU (XLA:CPU compiles one episode's loop into one kernel, devices.py;
    16 first-fit warm-ups of 10,800 jobs at 64 nodes: ~80 s vmapped), together elsewhere (a
    GPU runs ``lax.map``'s episodes one after another, thousands of small kernels each step).
    The episodes are the same either way (tests/agents/test_training.py)."""
    if alone is None:
        alone = default_chunk() is not None  # the rollout's own CPU/GPU choice
    one = lambda s, o, k: warm_up(env, policy, env_params, s, o, k)  # noqa: E731
    if alone:
        return jax.lax.map(lambda c: one(*c), (state, obs, keys))
    return jax.vmap(one)(state, obs, keys)


def _decide_and_step(env, policy, policy_params, env_params, step_key, state, obs, t):
    """Decision t of one episode: the policy acts on ``obs`` and the env steps.
    The key schedule every loop shares: ``fold_in(step_key, t)`` split for policy and env.
    With rounds (``EnvConfig.round_s`` > 0) the policy is a round policy,
    ``policy(params, state, key) -> priority [J]`` (``jaxsched.policies.rounds``; one that
    ``reads_env_params`` also gets ``env_params``, and may give [J, M]), and the env takes the
    round (``step_round``)."""
    k_policy, k_env = jax.random.split(jax.random.fold_in(step_key, t))
    if env.config.rounds:
        if getattr(policy, "reads_env_params", False):
            priority = policy(policy_params, state, k_policy, env_params)
        else:
            priority = policy(policy_params, state, k_policy)
        state, obs, _, _, _ = env.step_round(k_env, state, priority, env_params)
        return state, obs
    action = policy(policy_params, obs, k_policy)
    state, obs, _, _, _ = env.step(k_env, state, action, env_params)
    return state, obs


def _episode_alone(env, policy, policy_params, env_params, jobs, key, max_steps):
    """One episode, unbatched, stepped until it is done or has taken ``max_steps`` decisions
    -> its final state."""
    reset_key, step_key = jax.random.split(key)
    state, _ = env.reset(reset_key, env_params, jobs)

    # The observation is made afresh from the state each step, not carried: a carried one is
    # a second copy of the state's arrays (fgd's drop table among them) written every step.
    def body(carry):
        state, t = carry
        obs = env.observe(state, env_params)
        state, _ = _decide_and_step(env, policy, policy_params, env_params, step_key, state, obs, t)
        return state, t + 1

    state, _ = jax.lax.while_loop(lambda c: (c[1] < max_steps) & ~c[0].core.done, body,
                                  (state, jnp.int32(0)))
    return state


def _rollout_steps(env, policy, policy_params, env_params, jobs, keys, max_steps):
    """All episodes of the batch stepped together (vmap) until every one is done."""
    reset_keys, step_keys = jax.vmap(lambda k: jax.random.split(k))(keys).swapaxes(0, 1)
    state, obs = jax.vmap(env.reset, in_axes=(0, None, 0))(reset_keys, env_params, jobs)
    batched_step = jax.vmap(functools.partial(_decide_and_step, env, policy, policy_params, env_params),
                            in_axes=(0, 0, 0, None))

    def cond(carry):
        state, _, t = carry
        return (t < max_steps) & ~state.core.done.all()

    def body(carry):
        state, obs, t = carry
        state, obs = batched_step(step_keys, state, obs, t)
        return state, obs, t + 1

    state, _, _ = jax.lax.while_loop(cond, body, (state, obs, jnp.int32(0)))
    return state, jax.vmap(env.metrics, in_axes=(0, None))(state, env_params)


def turn_loop_start(env, env_params, jobs, keys):
    """The turn-by-turn loop's start: (cursor [B], step keys [B]) of the reset episodes."""
    reset_keys, step_keys = jax.vmap(lambda k: jax.random.split(k))(keys).swapaxes(0, 1)
    state, _ = jax.vmap(env.reset, in_axes=(0, None, 0))(reset_keys, env_params, jobs)
    return jax.vmap(env.cursor, in_axes=(0, None))(state, env_params), step_keys


def turn_loop_body(env, policy, policy_params, env_params, step_keys, max_steps: int, turns: int):
    """One iteration of the turn-by-turn loop, ``cursor [B] -> cursor [B]`` (``_rollout_turns``;
    ``scripts/loop_bytes.py`` compiles it alone to count the bytes it moves)."""
    def decide(key, cur):
        core = cur.state.core
        t = core.acc.decisions
        go = cur.stop & ~core.done & ~env.interrupted(core) & (t < max_steps)
        k_policy, k_env = jax.random.split(jax.random.fold_in(key, t))
        action = policy(policy_params, env.observe(cur.state, env_params), k_policy)
        return env.turns(env.act_at(k_env, cur, action, env_params, go), env_params, turns)

    def body(cur):
        if env.config.interrupts:
            cur = jax.lax.cond(env.interrupted(cur.state.core).any(),
                               jax.vmap(env.run_interrupt, in_axes=(0, None)), lambda c, _: c,
                               cur, env_params)
        return jax.vmap(decide)(step_keys, cur)
    return body


def _rollout_turns(env, policy, policy_params, env_params, jobs, keys, max_steps, turns, count=False):
    """All episodes of the batch run together (vmap), turn by turn, until every one is done.
    count: also return the loop's iterations (scripts/turn_iterations.py).

    Each iteration, per episode (``ClusterEnv.cursor`` and friends): a rescheduling pass or a
    reservation if one is due; a decision if the episode is at a decision point below the step cap; then
    ``turns`` masked event turns. Decision t of an episode uses ``fold_in(step_key, t)``,
    as in ``_rollout_steps``, so the episodes are the same.
    """
    cursor, step_keys = turn_loop_start(env, env_params, jobs, keys)
    body = turn_loop_body(env, policy, policy_params, env_params, step_keys, max_steps, turns)

    def finished(cur):
        core = cur.state.core
        return core.done | (cur.stop & ~env.interrupted(core) & (core.acc.decisions >= max_steps))

    cursor, iterations = jax.lax.while_loop(lambda c: ~finished(c[0]).all(), lambda c: (body(c[0]), c[1] + 1),
                                            (cursor, jnp.int32(0)))
    out = cursor.state, jax.vmap(env.metrics, in_axes=(0, None))(cursor.state, env_params)
    return (*out, iterations) if count else out


def sharded_rollout(env: ClusterEnv, policy: Callable, policy_params, env_params: EnvParams,
                    jobs: Jobs, keys, max_steps: int, turns: int | None = TURNS, chunk: int | None = -1):
    """``rollout`` with the episode batch split across every local device (``shard_map``).

    Each device runs its own shard to the end (no cross-device sync per step). Episodes
    are padded to a multiple of the device count and the padding is dropped, so results
    are per-episode identical to ``rollout``. With one device, or a policy that
    ``calls_host`` (a ``jax.pure_callback``: in JAX 0.10's CPU client a callback from two
    host devices at once deadlocks once its inputs are large, as las-perf's are at thousands
    of jobs), this is ``rollout``.
    """
    devices = jax.devices()
    if len(devices) == 1 or getattr(policy, "calls_host", False):
        return rollout(env, policy, policy_params, env_params, jobs, keys, max_steps, chunk, turns)
    batch = keys.shape[0]
    padded = -(-batch // len(devices)) * len(devices)
    pad = lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], padded - batch, axis=0)])  # noqa: E731
    mesh = jax.make_mesh((len(devices),), ("episodes",), axis_types=(jax.sharding.AxisType.Auto,))
    split, whole = jax.sharding.PartitionSpec("episodes"), jax.sharding.PartitionSpec()
    place = lambda x, spec: jax.lax.with_sharding_constraint(  # noqa: E731
        x, jax.sharding.NamedSharding(mesh, spec))
    run = jax.shard_map(
        lambda p, pp, j, k: rollout(env, policy, pp, p, j, k, max_steps, chunk, turns),
        mesh=mesh, in_specs=(whole, whole, split, split), out_specs=split, check_vma=False)
    jobs = jax.tree.map(lambda x: place(pad(x), split), jobs)
    env_params, policy_params = jax.tree.map(lambda x: place(x, whole), (env_params, policy_params))
    state, metrics = run(env_params, policy_params, jobs, place(pad(keys), split))
    return jax.tree.map(lambda x: x[:batch], (state, metrics))


def rollout_timeline(env: ClusterEnv, policy: Callable, policy_params, env_params: EnvParams,
                     jobs: Jobs, keys, num_steps: int):
    """Step a (small) batch for exactly ``num_steps`` decisions and record the cluster each step.

    The same episodes as ``rollout`` (either schedule) on the same ``keys``: the same reset
    and step keys and ``env.step``, so once ``num_steps`` covers every episode's decisions
    the final states agree. Steps after an episode ends change nothing (its records repeat, done=True).
    Use a few episodes: the records are [B, num_steps].
    Returns (final states [B], timeline dict of [B, num_steps] arrays, the state after step t):
      time_s          float32  the clock
      alloc_milli     int32    allocated milli-GPU in the cluster
      frag_milli      float32  cluster fragmentation F = sum of ``core.frag_node``
      queue_len       int32    queued jobs
      done            bool     the episode has ended
    Jit it with ``env``, ``policy`` and ``num_steps`` static.
    """
    reset_keys, step_keys = jax.vmap(lambda k: jax.random.split(k))(keys).swapaxes(0, 1)
    state, obs = jax.vmap(env.reset, in_axes=(0, None, 0))(reset_keys, env_params, jobs)
    total_milli = env_params.cluster.gpu_exists.sum(dtype=jnp.int32) * GPU_MILLI

    def one_step(key, state, obs, t):
        state, obs = _decide_and_step(env, policy, policy_params, env_params, key, state, obs, t)
        core = state.core
        record = {"time_s": core.time_s,
                  "alloc_milli": total_milli - core.free_milli.sum(dtype=jnp.int32),
                  "frag_milli": ordered_sum(core.frag_node),
                  "queue_len": core.queue_len,
                  "done": core.done}
        return state, obs, record

    batched_step = jax.vmap(one_step, in_axes=(0, 0, 0, None))

    def body(carry, t):
        state, obs = carry
        state, obs, record = batched_step(step_keys, state, obs, t)
        return (state, obs), record

    (state, _), records = jax.lax.scan(body, (state, obs), jnp.arange(num_steps, dtype=jnp.int32))
    return state, jax.tree.map(lambda x: x.swapaxes(0, 1), records)
