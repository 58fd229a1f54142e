"""Invariants of the JAX env on random clusters, workloads and (legal or not) actions."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxsched import cluster as cl
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.sim import resources
from jaxsched.sim.resources import bits_to_mask
from jaxsched.types import OUTCOME_PLACED, EnvParams, jobs_from_numpy, to_device
from tests.assertions import assert_trees_equal_to_rounding
from tests.sim.test_gangs import GANG_SIZES
from tests.settings import EXAMPLES, extended
from tests.strategies import FRAG_CLASSES, PAD_JOBS, PAD_NODES, clusters, workloads

ENV = ClusterEnv(EnvConfig(window=3, queue_capacity=8, running_capacity=10))
STATIC_ENV = ClusterEnv(EnvConfig(mode="static", window=3, queue_capacity=8))


def random_legal(params, obs, key):
    """Uniform over the legal actions (a policy that explores every kind of action)."""
    del params
    return jax.random.categorical(key, jnp.where(obs.action_mask, 0.0, -jnp.inf))


def random_any(params, obs, key):
    """Half the time any action at all (legal or not, out-of-range too), else a legal one."""
    k_coin, k_any, k_legal = jax.random.split(key, 3)
    anything = jax.random.randint(k_any, (), -3, obs.action_mask.shape[0] + 3)
    return jnp.where(jax.random.bernoulli(k_coin), anything, random_legal(params, obs, k_legal))


@functools.lru_cache(maxsize=None)
def reset_and_step(env):
    return jax.jit(env.reset), jax.jit(env.step)


@functools.lru_cache(maxsize=None)
def jitted(env, policy, chunk=-1):
    return jax.jit(lambda p, j, k: rollout(env, policy, None, p, j, k, 4 * PAD_JOBS + 20, chunk=chunk))


def held_by_running(state, cluster, t):
    """[N, G] milli, [N] cpu, [N] mem held by jobs running at time t, rebuilt from the records."""
    jobs = state.jobs
    running = np.asarray((state.outcome == OUTCOME_PLACED) & (state.start_s <= t) & (state.end_s > t))
    node = np.asarray(state.node)
    gpus = np.asarray(bits_to_mask(state.gpu_bits, cluster.max_gpus))
    n_nodes, g = cluster.gpu_exists.shape
    milli = np.zeros((n_nodes, g), np.int64)
    cpu = np.zeros(n_nodes, np.int64)
    mem = np.zeros(n_nodes, np.int64)
    for j in np.flatnonzero(running):
        milli[node[j]] += gpus[j] * int(jobs.gpu_milli[j])
        cpu[node[j]] += int(jobs.cpu_milli[j])
        mem[node[j]] += int(jobs.mem_mib[j])
    return milli, cpu, mem


def capacity(cluster):
    milli = np.where(np.asarray(cluster.gpu_exists), 1000, 0)
    valid = np.asarray(cluster.valid)
    return milli, np.asarray(cluster.cpu_milli) * valid, np.asarray(cluster.mem_mib) * valid


@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1),
       policy=st.sampled_from([random_legal, random_any]))
def test_resources_are_never_overcommitted_and_come_back_exactly(cluster, jobs, seed, policy):
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    reset, step = reset_and_step(ENV)
    key = jax.random.key(seed)
    state, obs = reset(key, params, to_device(jobs))
    cap_milli, cap_cpu, cap_mem = capacity(cluster)
    for t in range(20 * PAD_JOBS):
        core = state.core
        free = np.asarray(core.free_milli), np.asarray(core.free_cpu), np.asarray(core.free_mem)
        held = held_by_running(state, cluster, float(core.time_s))
        for f, h, c in zip(free, held, (cap_milli, cap_cpu, cap_mem)):
            assert (f >= 0).all()  # never over-committed
            np.testing.assert_array_equal(f + h, c)  # what is not free is held by a running job
        if bool(core.done):
            break
        action = policy(None, obs, jax.random.fold_in(key, t))
        state, obs, _, _, _ = step(key, state, action, params)
    assert bool(state.core.done)
    np.testing.assert_array_equal(np.asarray(state.core.free_milli), cap_milli)  # all back


@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1))
def test_every_job_is_accounted_for_once_and_starts_after_arrival(cluster, jobs, seed):
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
    state, m = jitted(ENV, random_legal)(params, batch, jax.random.key(seed)[None])
    state = jax.tree.map(lambda x: np.asarray(x)[0], state)
    m = {k: int(np.asarray(v)[0]) if k in ("finished", "rejected", "failed", "dropped_overflow",
                                           "jobs_total", "done", "placed", "unfinished") else None
         for k, v in m.items()}
    assert m["done"] == 1
    # dynamic mode: every job finishes, is rejected, fails or is dropped -- exactly one of them
    assert m["finished"] + m["rejected"] + m["failed"] + m["dropped_overflow"] == m["jobs_total"]
    assert m["unfinished"] == 0 and m["placed"] == m["finished"]
    placed = state.outcome == OUTCOME_PLACED
    assert (state.start_s[placed] >= state.jobs.arrival_s[placed]).all()
    assert (state.end_s[placed] >= state.start_s[placed]).all()
    assert (state.end_s[placed] <= state.core.time_s).all()


@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1),
       mode=st.sampled_from(["dynamic", "static"]))
def test_illegal_action_changes_no_resources_beyond_a_wait(cluster, jobs, seed, mode):
    env = ENV if mode == "dynamic" else STATIC_ENV
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    reset, step = reset_and_step(env)
    key = jax.random.key(seed)
    state, obs = reset(key, params, to_device(jobs))
    mask = np.asarray(obs.action_mask)
    illegal = np.flatnonzero(~mask[:-1])
    if bool(state.core.done) or illegal.size == 0:
        return
    after_illegal, *_ , info = step(key, state, int(illegal[seed % illegal.size]), params)
    after_wait, *_ = step(key, state, env.wait_action(params), params)
    assert not bool(info["legal"])
    for a, b in zip(jax.tree.leaves(after_illegal.core.replace(acc=None)),
                    jax.tree.leaves(after_wait.core.replace(acc=None))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(after_illegal.outcome), np.asarray(state.outcome))
    if mode == "static":  # no wait in static mode: nothing changes at all
        np.testing.assert_array_equal(np.asarray(after_illegal.core.free_milli),
                                      np.asarray(state.core.free_milli))
    assert int(after_illegal.core.acc.invalid_actions) == 1


@settings(max_examples=max(3, EXAMPLES // 5), deadline=None)
@given(cluster=clusters(), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_same_key_same_episode_and_vmap_equals_one_by_one(cluster, seed, data):
    jobs = [data.draw(workloads()) for _ in range(3)]
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    batch = jax.tree.map(lambda *x: jnp.stack([jnp.asarray(v) for v in x]), *jobs)
    keys = jax.random.split(jax.random.key(seed), 3)
    run = jitted(ClusterEnv(EnvConfig(window=3, queue_capacity=8, running_capacity=10)), random_legal)
    state_a, m_a = run(params, batch, keys)
    state_b, m_b = run(params, batch, keys)
    chex.assert_trees_all_equal(state_a, state_b)  # same keys -> identical episodes
    state_c, m_c = jitted(ClusterEnv(EnvConfig(window=3, queue_capacity=8, running_capacity=10)),
                          random_legal, chunk=2)(params, batch, keys)  # chunks of 2, one padded
    assert_trees_equal_to_rounding((state_c, m_c), (state_a, m_a))
    for i in range(3):  # a batch of 3 equals 3 batches of 1
        one = jax.tree.map(lambda x: x[i:i + 1], batch)
        state_i, m_i = run(params, one, keys[i:i + 1])
        assert_trees_equal_to_rounding(jax.tree.map(lambda x: x[0], (m_i, state_i.end_s, state_i.outcome)),
                                       jax.tree.map(lambda x: x[i], (m_a, state_a.end_s, state_a.outcome)))


SCHEDULE_CASES = {  # every code path the loop schedules treat differently: (env, turns)
    "dynamic": (ENV, 1),
    "static": (STATIC_ENV, 2),
    # A small queue and running set (drops, a full running set), SJF order, the strict window.
    "strict-sjf-small": (ClusterEnv(EnvConfig(window=2, queue_capacity=4, running_capacity=3,
                                              queue_order="sjf", backfill=False)), 3),
    # Both interrupts of the event loop (rescheduling passes and reservations), the measurement window.
    "interrupts": (ClusterEnv(EnvConfig(window=3, queue_capacity=8, running_capacity=10,
                                        resched_interval_s=40.0, migration_pause_s=7.0,
                                        reserve_after_s=15.0, warmup_jobs=3, measured_jobs=12)), 2),
    # Gangs (jobs of up to 16 GPUs over up to 3 nodes): their window refits and parts run only
    # when some episode of the batch has a gang (when_due), and a reservation.
    "gangs": (ClusterEnv(EnvConfig(window=3, queue_capacity=8, running_capacity=10, max_span=3,
                                   reserve_after_s=15.0)), 2),
}


@functools.lru_cache(maxsize=None)
def jitted_schedule(env, turns, chunk=-1):
    return jax.jit(lambda p, j, k, cap: rollout(env, random_any, None, p, j, k, cap, chunk, turns))


@pytest.mark.parametrize("case", ["dynamic", extended("gangs"), extended("static"), extended("strict-sjf-small"),
                                  extended("interrupts")])
@settings(max_examples=max(3, EXAMPLES // 5), deadline=None)
@given(cluster=clusters(), seed=st.integers(0, 2**31 - 1), data=st.data())
def test_every_loop_schedule_plays_the_same_episodes(case, cluster, seed, data):
    # Stepping the batch together, turn by turn, and each episode alone (chunk 1, unbatched).
    env, turns = SCHEDULE_CASES[case]
    jobs = [data.draw(workloads(sizes=GANG_SIZES) if case == "gangs" else workloads()) for _ in range(3)]
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    batch = jax.tree.map(lambda *x: jnp.stack([jnp.asarray(v) for v in x]), *jobs)
    keys = jax.random.split(jax.random.key(seed), 3)
    for cap in (4 * PAD_JOBS + 20, 3):  # to the end; and stopped by the step cap
        cap = jnp.int32(cap)  # traced: one compile serves both caps
        stepped = jitted_schedule(env, None)(params, batch, keys, cap)
        by_turns = jitted_schedule(env, turns)(params, batch, keys, cap)
        alone = jitted_schedule(env, None, chunk=1)(params, batch, keys, cap)
        assert_trees_equal_to_rounding(by_turns, stepped)  # every state field and every metric
        assert_trees_equal_to_rounding(alone, stepped)


def window_from_scratch(state, cluster, config):
    """([K] window jobs, [K, N] slot k's job may use node n), recomputed from the queue and
    the free resources alone (docs/semantics.md, "The window"): every queued job tested on
    every node, the reservation's node closed to all but its job, the first K that may use
    some node kept (all of the first K without backfill)."""
    core, jobs, k = state.core, state.jobs, config.window
    queued = np.asarray(core.queue[: int(core.queue_len)])
    max_free, whole_free = resources.node_summary(core.free_milli)
    fit = np.array(resources.fits(cluster, core.free_cpu, core.free_mem, max_free, whole_free,
                                    jobs.num_gpu[queued], jobs.gpu_milli[queued], jobs.cpu_milli[queued],
                                    jobs.mem_mib[queued], jobs.model_mask[queued])).reshape(len(queued), cluster.num_nodes)
    r, rj = int(core.resv_node), int(core.resv_job)
    if r >= 0:
        fit[:, r] &= queued == rj
    keep = np.flatnonzero(fit.any(-1)) if config.backfill and not config.static else np.arange(len(queued))
    keep = keep[:k]
    window = np.full(k, -1)
    window[: len(keep)] = queued[keep]
    mask = np.zeros((k, fit.shape[1]), bool)
    mask[: len(keep)] = fit[keep]
    return window, mask


@pytest.mark.parametrize("case", ["dynamic", "static", extended("strict-sjf-small"), "interrupts"])
@settings(max_examples=max(3, EXAMPLES // 5), deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1))
def test_carried_window_fit_equals_the_fit_test_after_every_step(case, cluster, jobs, seed):
    # The env keeps the window (its jobs, and ``core.window_fit``: the observation's place mask,
    # one bit per slot) per event instead of recomputing it: placements, completions and
    # migrations refit a node's bits and park or bring back queued jobs, queue entries and
    # exits move a slot. Any missed update shows up here.
    env = SCHEDULE_CASES[case][0]
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    reset, step = reset_and_step(env)
    key = jax.random.key(seed)
    state, obs = reset(key, params, to_device(jobs))
    for t in range(20 * PAD_JOBS):
        window, mask = window_from_scratch(state, params.cluster, env.config)
        np.testing.assert_array_equal(np.asarray(env._window(state.core)), window, err_msg=f"step {t}")
        carried = env._window_fit_mask(state.core)  # the int32 bits unpacked to [K, N]
        np.testing.assert_array_equal(np.asarray(carried), mask, err_msg=f"step {t}")
        if bool(state.core.done):
            break
        state, obs, *_ = step(key, state, random_any(None, obs, jax.random.fold_in(key, t)), params)
    assert bool(state.core.done)


@pytest.mark.parametrize("turns", [0, -1, 1.5])
def test_rollout_refuses_a_turn_count_that_cannot_advance(turns):
    with pytest.raises(ValueError, match="turns"):
        rollout(ENV, random_legal, None, None, None, None, 10, turns=turns)


def small_workload(seed, n=PAD_JOBS):
    rng = np.random.default_rng(seed)
    num_gpu = rng.choice([0, 1, 2], n)
    return jobs_from_numpy(np.sort(rng.integers(0, 100, n)), rng.integers(1, 50, n), num_gpu,
                           np.where(num_gpu == 1, 500, num_gpu * 500), rng.integers(0, 4, n) * 1000,
                           rng.integers(0, 4, n) * 1024, pad_to=PAD_JOBS)


def test_step_compiles_once_for_every_state_and_action():
    params = to_device(EnvParams(cl.to_cluster(cl.preset(PAD_NODES), pad_nodes=PAD_NODES), FRAG_CLASSES))

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(state, action):
        return ENV.step(jax.random.key(0), state, action, params)

    state, obs = jax.jit(ENV.reset)(jax.random.key(1), params, to_device(small_workload(0)))
    for t in range(12):
        action = random_legal(None, obs, jax.random.key(t))
        state, obs, *_ = step(state, action)
    state2, _ = jax.jit(ENV.reset)(jax.random.key(2), params, to_device(small_workload(1)))
    step(state2, jnp.int32(0))  # a new episode of the same shapes: still no retrace
