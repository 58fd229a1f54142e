"""Rescheduling (migration) passes: the JAX env against the reference, and hand-worked moves.

Definition: docs/schedulers.md, "Rescheduling". A short interval and a pause that is not a
round number make passes frequent and their float32 end times non-trivial.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, target

from jaxsched import cluster as cl
from jaxsched import reference
from jaxsched.policies import get
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from jaxsched.workload import synthetic
from tests.settings import EXAMPLES, extended
from tests.sim.test_differential import assert_same_metrics, assert_same_schedule, ref_config
from tests.strategies import FRAG_CLASSES, clusters, workloads

RESCHED = dict(resched_interval_s=25.0, resched_max_moves=2, resched_util_threshold=0.95,
               migration_pause_s=7.3)


def make_env(policy, **changes):
    settings = dict(window=3, queue_capacity=8, running_capacity=10, tie_break="identity",
                    track_job_classes=True) | RESCHED | changes
    base = EnvConfig(**settings)
    return ClusterEnv(get(policy).env_config(base))


@functools.lru_cache(maxsize=None)
def jitted_rollout(env, policy_name):
    policy = get(policy_name).policy
    return jax.jit(lambda params, jobs, keys: rollout(env, policy, None, params, jobs, keys, 300))


def run_both(env, policy, cluster, jobs, seed):
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
    state, got = jitted_rollout(env, policy)(params, batch, jax.random.key(seed)[None])
    ref = reference.run(cluster, jobs, FRAG_CLASSES, ref_config(env), policy=policy,
                        max_steps=300, node_rank=np.asarray(state.node_rank)[0])
    return state, got, ref


@pytest.mark.parametrize("policy", ["first-fit", extended("best-fit"), extended("pack-resched")])
@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**31 - 1))
def test_migrating_episode_matches_reference(policy, cluster, jobs, seed):
    state, got, ref = run_both(make_env(policy), policy, cluster, jobs, seed)
    target(float(ref["metrics"]["migrations"]))  # steer the search towards episodes that migrate
    assert_same_schedule(state, ref)
    assert_same_metrics(got, ref["metrics"])


def test_reference_config_carries_the_rescheduling_settings():
    config = ref_config(make_env("first-fit"))
    assert (config.resched_interval_s, config.resched_max_moves, config.resched_util_threshold,
            config.migration_pause_s) == (25.0, 2, 0.95, 7.3)


def two_node_cluster():
    """Node 0: 4 x A10 (speed 1.1); node 1: 2 x T4 (speed 0.45)."""
    table = cl.NodeTable(names=("a", "b"), model=np.array([cl.model_id("A10"), cl.model_id("T4")], np.int32),
                         num_gpus=np.array([4, 2], np.int32), cpu_milli=np.array([64000, 64000], np.int32),
                         mem_mib=np.array([65536, 65536], np.int32))
    return cl.to_cluster(table)


def test_hand_worked_move_to_the_more_allocated_node():
    """Node 0: 4 x A10, node 1: 2 x T4; passes every 50 s, threshold 0.6, pause 10 s.

    First-fit puts job 0 (2 GPUs) and job 3 (1 GPU) on node 0, jobs 1 and 2 (T4 only) on
    node 1. Until t=300 no job can move: node 1 is full or its jobs are T4-only, and node 0
    is at 0.75 or its jobs have nowhere to go. Job 0 ends at 330/1.1 = 300, then the pass at
    t=300 (completions first) sees node 0 at 1/4 < 0.6 and node 1 at 1/2: job 3 moves to
    node 1's free T4 and runs its remaining work at speed 0.45 after the pause.
    """
    jobs = jobs_from_numpy(
        arrival_s=np.array([0, 1, 2, 3], np.float32),
        work_s=np.array([330, 2000, 100, 2000], np.float32),
        num_gpu=np.array([2, 1, 1, 1]), gpu_milli=np.array([1000, 1000, 1000, 1000]),
        cpu_milli=np.zeros(4, np.int32), mem_mib=np.zeros(4, np.int32),
        model_mask=np.array([-1, cl.model_mask(["T4"]), cl.model_mask(["T4"]), -1], np.int32))
    env = ClusterEnv(EnvConfig(window=2, tie_break="identity", resched_interval_s=50.0,
                               resched_max_moves=5, resched_util_threshold=0.6, migration_pause_s=10.0))
    # Job 0 ends at 330/1.1 = 300 exactly (float32), so at t=300 node 0 holds only job 3
    # (1/4 = 0.25 < 0.6: a source) and node 1 holds job 1 (1/2 = 0.5, more allocated).
    # Completion first, then the pass at t=300: job 3 moves to node 1 (T4, speed 0.45):
    # remaining (3 + 2000/1.1 - 300) * 1.1 / 0.45, after a 10 s pause.
    state, got, ref = run_both(env, "first-fit", two_node_cluster(), jobs, 0)
    assert np.asarray(state.node)[0].tolist() == [0, 1, 1, 1]
    end3 = np.float32(3) + np.float32(2000) / np.float32(1.1)
    t = np.float32(300)
    want = np.float32(np.float32(t + np.float32(10)) + np.float32(np.float32((end3 - t) * np.float32(1.1)) / np.float32(0.45)))
    assert np.asarray(state.end_s)[0, 3] == want
    assert int(np.asarray(got["migrations"])[0]) == 1
    assert float(np.asarray(got["migration_gpu_s"])[0]) == pytest.approx(10.0)
    assert_same_schedule(state, ref)


@pytest.mark.slow
def test_rescheduling_off_changes_nothing_and_counts_nothing():
    cluster = cl.to_cluster(cl.preset(32))
    jobs = synthetic.generate(jax.random.key(3), synthetic.SyntheticConfig(num_jobs=120, mean_interarrival_s=4.0))
    params = to_device(EnvParams(cluster, jax.tree.map(jnp.asarray, FRAG_CLASSES)))
    batch = jax.tree.map(lambda x: x[None], jobs)
    keys = jax.random.key(1)[None]
    off = ClusterEnv(EnvConfig())
    on = ClusterEnv(EnvConfig(resched_interval_s=600.0, resched_util_threshold=1.0))
    run = jax.jit(rollout, static_argnums=(0, 1, 6))
    s_off, m_off = run(off, get("first-fit").policy, None, params, batch, keys, 2000)
    s_on, m_on = run(on, get("first-fit").policy, None, params, batch, keys, 2000)
    assert int(m_off["migrations"][0]) == 0
    assert int(m_on["migrations"][0]) > 0  # a busy 32-node cluster always has a node to drain
    total = np.asarray(cluster.gpu_exists).sum() * 1000
    assert np.asarray(s_on.core.free_milli).sum() == total  # every GPU came back
    assert int(m_on["finished"][0]) == int(m_off["finished"][0]) == 120


def test_static_mode_refuses_rescheduling():
    with pytest.raises(ValueError, match="resched_interval_s"):
        EnvConfig(mode="static", resched_interval_s=60.0)


def busy_episode(seed, nodes=5):
    """(cluster, jobs): 60 random jobs on ``nodes`` random nodes, busy enough to migrate."""
    rng = np.random.default_rng(seed)
    table = cl.NodeTable(names=tuple(f"n{i}" for i in range(nodes)),
                         model=rng.choice([cl.model_id(m) for m in ("T4", "A10", "G2")], nodes).astype(np.int32),
                         num_gpus=rng.choice([1, 2, 4, 8], nodes).astype(np.int32),
                         cpu_milli=np.full(nodes, 64000, np.int32), mem_mib=np.full(nodes, 262144, np.int32))
    cluster = cl.to_cluster(table, pad_nodes=nodes + 1)
    n = 60
    num_gpu = rng.choice([1, 1, 1, 2, 4], n)
    jobs = jobs_from_numpy(
        arrival_s=np.sort(rng.integers(0, 400, n)).astype(np.float32),
        work_s=(rng.integers(10, 400, n) * np.float32(1.7)).astype(np.float32),
        num_gpu=num_gpu, gpu_milli=np.where(num_gpu == 1, rng.choice([250, 500, 1000], n), 1000),
        cpu_milli=rng.integers(0, 8, n) * 1000, mem_mib=rng.integers(0, 8, n) * 1024, pad_to=64)
    return cluster, jobs


@pytest.mark.parametrize("seed", [0, extended(1), extended(2), extended(3)])
@pytest.mark.parametrize("queue", [pytest.param({"backfill": False}, id="strict"),
                                   extended({"reserve_after_s": 10.0}, id="reserve")])
def test_busy_episodes_migrate_and_match_reference(seed, queue):
    """Longer random episodes (60 jobs on 5 nodes) that do migrate, with the strict window or
    with frequent reservations (a reserved node takes no migrated job)."""
    cluster, jobs = busy_episode(seed)
    env = make_env("best-fit", running_capacity=64, queue_capacity=64, **queue)
    state, got, ref = run_both(env, "best-fit", cluster, jobs, seed)
    assert ref["metrics"]["migrations"] >= 1
    assert ref["metrics"]["reservations"] >= (1 if "reserve_after_s" in queue else 0)
    assert_same_schedule(state, ref)
    assert_same_metrics(got, ref["metrics"])


@pytest.mark.slow
def test_fgd_targeted_moves_match_reference_and_differ_from_the_most_allocated_target():
    """``resched_target = "fgd"``: a moved job goes to the node with FGD's top score for it
    (GPUs by the GPU rule "fgd"). Same moves as the reference, and other moves than "alloc"."""
    env = make_env("fgd", running_capacity=64, queue_capacity=64, resched_target="fgd")
    differs = []
    for seed in (0, 2):
        cluster, jobs = busy_episode(seed, nodes=10)
        state, got, ref = run_both(env, "fgd", cluster, jobs, seed)
        assert ref["metrics"]["migrations"] >= 1
        assert_same_schedule(state, ref)
        assert_same_metrics(got, ref["metrics"])
        alloc = reference.run(cluster, jobs, FRAG_CLASSES, dataclasses.replace(ref_config(env), resched_target="alloc"),
                              policy="fgd", max_steps=300, node_rank=np.asarray(state.node_rank)[0])
        differs.append(any(not np.array_equal(alloc[f], ref[f]) for f in ("node", "gpu_bits", "end_s")))
    assert any(differs)
    with pytest.raises(ValueError, match="resched_target"):
        EnvConfig(resched_target="nearest")


def test_pack_resched_turns_rescheduling_on_with_drr_values_unless_the_run_sets_its_own():
    drr = get("pack-resched").env_config(EnvConfig())
    assert (drr.resched_interval_s, drr.resched_max_moves, drr.resched_util_threshold) == (3600.0, 5, 0.5)
    assert drr.gpu_rule == "best-fit"
    assert get("pack-resched").policy is get("gpu-packing").policy
    assert get("pack-resched").env_config(EnvConfig(resched_interval_s=900.0)).resched_interval_s == 900.0
    assert get("gpu-packing").env_config(EnvConfig()).resched_interval_s == 0.0
    assert get("r&p").env_config(EnvConfig()).resched_interval_s == 0.0  # Reserving-and-Packing
