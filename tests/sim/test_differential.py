"""The JAX env against ``jaxsched.reference`` (the oracle) on random clusters and workloads.

For each scheduler, mode and queue discipline: same node, GPUs, start and end for every
job, and the same metrics; every deterministic scheduler of the registry also runs with the
registry's env config (its GPU rule, queue order and other settings). A second test drives
both with the same random actions (legal, illegal, reject, wait) and compares the whole
visible state after every step.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxsched import reference
from jaxsched.policies import get
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, to_device
from tests.strategies import FRAG_CLASSES, clusters, workloads

from tests.settings import EXAMPLES, extended

WINDOW, QUEUE, RUNNING = 3, 8, 10

CASES = [  # (mode, queue order, policy, gpu rule, tie break)
    extended("dynamic", "fifo", "best-fit", "best-fit", "permutation"),
    ("dynamic", "fifo", "first-fit", "first-fit", "identity"),
    extended("dynamic", "sjf", "best-fit", "best-fit", "identity"),
    extended("dynamic", "edf", "first-fit", "best-fit", "permutation"),
    extended("static", "fifo", "best-fit", "best-fit", "permutation"),
    ("static", "fifo", "first-fit", "first-fit", "identity"),
]
REGISTRY_CASES = [  # (mode, scheduler, tie break); the rest of the config is the registry's
    extended("dynamic", "spread", "permutation"),
    extended("dynamic", "dot-product", "identity"),
    extended("dynamic", "gpu-packing", "permutation"),
    ("dynamic", "gpu-clustering", "permutation"),
    ("dynamic", "fgd", "permutation"),
    extended("dynamic", "fgd-window", "permutation"),
    extended("dynamic", "sjf", "permutation"),
    ("dynamic", "fifo-strict", "identity"),
    extended("dynamic", "sjf-strict", "identity"),
    extended("dynamic", "elasticflow", "permutation"),
    extended("dynamic", "hops", "identity"),
    extended("dynamic", "r&p", "permutation"),
    extended("static", "dot-product", "permutation"),
    extended("static", "gpu-packing", "identity"),
    extended("static", "gpu-clustering", "permutation"),
    extended("static", "best-fit", "identity"),
    ("static", "fgd", "identity"),
    extended("static", "fgd-window", "identity"),
    extended("static", "r&p", "identity"),
]
EXACT_METRICS = ("decisions", "invalid_actions", "jobs_total", "placed", "finished", "rejected",
                 "failed", "dropped_overflow", "unfinished", "running_full", "done", "migrations",
                 "measured_jobs", "measured_finished", "reservations", "started_after_arrivals")


# Queue and measurement settings beside the defaults (backfilling window, no reservation in
# episodes this short, the whole episode measured). Reservations after 10 s happen in most
# examples; the measured jobs end the episode early.
VARIANTS = {
    "strict": {"backfill": False},
    "reserve": {"reserve_after_s": 10.0},
    "measure": {"warmup_jobs": 4, "measured_jobs": 10},
    "reserve-measure-strict": {"backfill": False, "reserve_after_s": 10.0, "warmup_jobs": 2,
                               "measured_jobs": 6},
}


def make_env(mode, order, gpu_rule, tie_break, **settings):
    return ClusterEnv(EnvConfig(mode=mode, window=WINDOW, queue_capacity=QUEUE,
                                running_capacity=RUNNING, queue_order=order, gpu_rule=gpu_rule,
                                tie_break=tie_break, **settings))


def registry_env(mode, name, tie_break):
    """The env as the registry runs scheduler ``name`` (``Scheduler.env_config``)."""
    return ClusterEnv(get(name).env_config(EnvConfig(mode=mode, window=WINDOW, queue_capacity=QUEUE,
                                                     running_capacity=RUNNING, tie_break=tie_break)))


def ref_config(env: ClusterEnv) -> reference.RefConfig:
    return reference.RefConfig.like(env.config)


@functools.lru_cache(maxsize=None)
def jitted_rollout(env, policy_name, max_steps):
    policy = get(policy_name).policy
    return jax.jit(lambda params, jobs, keys: rollout(env, policy, None, params, jobs, keys, max_steps))


def assert_same_schedule(state, ref_out):
    for field in ("outcome", "node", "gpu_bits", "start_s", "end_s"):
        np.testing.assert_array_equal(np.asarray(getattr(state, field))[0], ref_out[field],
                                      err_msg=field)


def assert_same_metrics(jax_metrics, ref_metrics):
    for name, ref_value in ref_metrics.items():
        got = float(np.asarray(jax_metrics[name])[0])
        if name in EXACT_METRICS:
            assert got == ref_value, name
        else:
            np.testing.assert_allclose(got, ref_value, rtol=2e-4, atol=1e-6, err_msg=name)


def assert_episode_matches_reference(env, policy, cluster, jobs, seed):
    """Roll the registry's ``policy`` out in ``env`` and the reference's in the same config
    (same tie-break ranks); compare every job's record and the metrics."""
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
    state, got = jitted_rollout(env, policy, 200)(params, batch, jax.random.key(seed)[None])
    ref_out = reference.run(cluster, jobs, FRAG_CLASSES, ref_config(env), policy=policy,
                            max_steps=200, node_rank=np.asarray(state.node_rank)[0])
    assert_same_schedule(state, ref_out)
    assert_same_metrics(got, ref_out["metrics"])


@pytest.mark.parametrize("mode,order,policy,gpu_rule,tie_break", CASES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1))
def test_heuristic_episode_matches_reference(mode, order, policy, gpu_rule, tie_break, cluster, jobs, seed):
    assert_episode_matches_reference(make_env(mode, order, gpu_rule, tie_break), policy, cluster, jobs, seed)


@pytest.mark.parametrize("mode,policy,tie_break", REGISTRY_CASES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(slack_deadlines=True), seed=st.integers(0, 2**31 - 1))
def test_registry_scheduler_matches_reference(mode, policy, tie_break, cluster, jobs, seed):
    assert_episode_matches_reference(registry_env(mode, policy, tie_break), policy, cluster, jobs, seed)


VARIANT_CASES = [  # (variant, queue order, policy, gpu rule, tie break)
    ("strict", "fifo", "first-fit", "first-fit", "identity"),
    extended("strict", "sjf", "best-fit", "best-fit", "permutation"),
    extended("reserve", "fifo", "first-fit", "best-fit", "permutation"),
    extended("reserve", "sjf", "best-fit", "best-fit", "identity"),
    ("reserve", "edf", "fgd", "fgd", "permutation"),
    extended("measure", "fifo", "best-fit", "best-fit", "permutation"),
    ("reserve-measure-strict", "fifo", "first-fit", "first-fit", "identity"),
]


@pytest.mark.parametrize("variant,order,policy,gpu_rule,tie_break", VARIANT_CASES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1))
def test_queue_and_measurement_settings_match_reference(variant, order, policy, gpu_rule, tie_break,
                                                        cluster, jobs, seed):
    """The strict window, reservations and measurement windows: the same schedule and
    metrics (reservations counted alike) in both simulators."""
    env = make_env("dynamic", order, gpu_rule, tie_break, **VARIANTS[variant])
    assert_episode_matches_reference(env, policy, cluster, jobs, seed)


@functools.lru_cache(maxsize=None)
def jitted_env_fns(env):
    return jax.jit(env.reset), jax.jit(env.step)


LOCKSTEP_CASES = [  # (mode, queue order, gpu rule, variant)
    ("dynamic", "fifo", "best-fit", None),
    extended("dynamic", "sjf", "best-fit", None),
    ("static", "fifo", "best-fit", None),
    ("dynamic", "fifo", "fgd", None),
    extended("dynamic", "edf", "buddy", None),
    extended("dynamic", "fifo", "best-fit", "reserve"),
    ("dynamic", "sjf", "first-fit", "reserve-measure-strict"),
    extended("dynamic", "edf", "best-fit", "measure"),
]


@pytest.mark.parametrize("mode,order,gpu_rule,variant", LOCKSTEP_CASES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1))
def test_random_actions_keep_both_simulators_in_lockstep(mode, order, gpu_rule, variant, cluster, jobs, seed):
    env = make_env(mode, order, gpu_rule, "identity", **VARIANTS.get(variant, {}))
    reset, step = jitted_env_fns(env)
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    key = jax.random.key(seed)
    state, obs = reset(key, params, to_device(jobs))
    sim = reference.ReferenceSim(cluster, jobs, FRAG_CLASSES, ref_config(env))
    rng = np.random.default_rng(seed)
    num_actions = env.num_actions(params)
    for _ in range(120):
        np.testing.assert_array_equal(np.asarray(obs.action_mask), sim.action_mask())
        np.testing.assert_array_equal(np.asarray(obs.window_job)[: len(sim.window())], sim.window())
        assert (int(state.core.resv_job), int(state.core.resv_node)) == (sim.resv_job, sim.resv_node)
        assert float(obs.time_s) == sim.time_s
        np.testing.assert_array_equal(np.asarray(state.core.free_milli), np.array(sim.free_milli))
        np.testing.assert_array_equal(np.asarray(state.core.free_cpu), sim.free_cpu)
        np.testing.assert_array_equal(np.asarray(state.core.free_mem), sim.free_mem)
        np.testing.assert_allclose(np.asarray(state.core.frag_node), sim.frag_node, rtol=1e-5)
        assert bool(state.core.done) == sim.done
        if sim.done:
            break
        legal = np.flatnonzero(sim.action_mask())
        if rng.random() < 0.7 and legal.size:
            action = int(rng.choice(legal))
        else:
            action = int(rng.integers(-2, num_actions + 2))
        state, obs, _, _, info = step(key, state, action, params)
        assert bool(info["legal"]) == sim.action_legal(action)
        sim.step(action)
    ref_out = sim.results()
    for field in ("outcome", "node", "gpu_bits", "start_s", "end_s"):
        np.testing.assert_array_equal(np.asarray(getattr(state, field)), ref_out[field], err_msg=field)
    got = env.metrics(state, params)
    assert_same_metrics(jax.tree.map(lambda x: np.asarray(x)[None], got), ref_out["metrics"])


@pytest.mark.parametrize("mode", ["dynamic", extended("static")])
@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1))
def test_untracked_fragmentation_matches_reference(mode, cluster, jobs, seed):
    """EnvConfig.track_frag=False against RefConfig.track_frag=False: same schedule, same
    metrics, fragmentation metrics NaN in both."""
    env = make_env(mode, "fifo", "best-fit", "permutation")
    env = ClusterEnv(dataclasses.replace(env.config, track_frag=False))
    assert ref_config(env).track_frag is False
    assert_episode_matches_reference(env, "best-fit", cluster, jobs, seed)
