"""Gang jobs (docs/semantics.md, "Gang jobs"): a schedule worked out by hand, run on both
simulators, and the gang rules on hand-picked capacities.

Cluster: 3 nodes x 4 V100 (speed 1.0), 8 cores, 32 GiB each; ranks = indices; first-fit,
FIFO, max_span 2, gang rule "consolidate", spread_penalty 0.5.
  j0  t=0   6 GPUs, 6 cores, 6 GiB, work 100. Node 0 can give 4 (< 6): a gang anchored on node 0,
            the other node of most capacity (nodes 1 and 2 both 4; rank) is node 1:
            node 0 GPUs 0-3 (4 cores, 4 GiB), node 1 GPUs 0-1 (2 cores, 2 GiB).
            Speed 1.0 x 0.5: runs 200 s, ends 200.
  j1  t=10  4 GPUs, 1 core, 1 GiB, work 50. First fit: node 0 has no GPU free; node 1 gives 2,
            and with node 2 (4) it fits: node 1 GPUs 2-3, node 2 GPUs 0-1 (although node 2
            alone could hold it: the policy chose node 1). Runs 100 s, ends 110.
  j2  t=20  3 GPUs, 0.5 core, work 30. Only node 2 has GPUs free (2 < 3): fits nowhere, waits.
  j3  t=30  0.5 GPU, 1 core, work 10 (one GPU: never a gang): node 2, GPU 2 (best fit among
            equals: the lowest index); ends 40.
  j4  t=40  9 GPUs: more than two nodes hold (2 x 4): never fits, fails at arrival.
  At 110 j1 ends: j2 on node 1 (GPUs 2-3, 334 milli-cores) + node 2 (GPU 0, 167: cores follow
            the GPUs, rounded up), runs 30 / 0.5 = 60 s, ends 170.
  j5  t=150 1 GPU, no cores, work 1: node 2, GPU 1 (node 0 and 1 are full); ends 151.
"""

import dataclasses

import hypothesis as hyp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from jaxsched import cluster as cl
from jaxsched import reference
from jaxsched.policies import get
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig, gangs
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from tests.settings import EXAMPLES, extended
from tests.sim import test_differential as td
from tests.strategies import FRAG_CLASSES, clusters, workloads

CLUSTER = cl.to_cluster(cl.NodeTable(
    names=("n0", "n1", "n2"), model=np.full(3, cl.model_id("V100M16"), np.int32),
    num_gpus=np.full(3, 4, np.int32), cpu_milli=np.full(3, 8000, np.int32),
    mem_mib=np.full(3, 32768, np.int32)))
JOBS = jobs_from_numpy(
    arrival_s=[0, 10, 20, 30, 40, 150], work_s=[100, 50, 30, 10, 10, 1], num_gpu=[6, 4, 3, 1, 9, 1],
    gpu_milli=[1000, 1000, 1000, 500, 1000, 1000], cpu_milli=[6000, 1000, 500, 1000, 1000, 0],
    mem_mib=[6144, 1024, 0, 0, 0, 0])
SETTINGS = {"max_span": 2, "gang_rule": "consolidate", "spread_penalty": 0.5}
EXPECTED = {
    "node": [0, 1, 1, 2, -1, 2],
    "gpu_bits": [0b1111, 0b1100, 0b1100, 0b0100, 0, 0b0010],
    "span_node": [[1], [2], [2], [-1], [-1], [-1]],
    "span_bits": [[0b0011], [0b0011], [0b0001], [0], [0], [0]],
    "start_s": [0, 10, 110, 30, np.inf, 150],
    "end_s": [200, 110, 170, 40, np.inf, 151],
}


def check_records(records):
    for field, want in EXPECTED.items():
        np.testing.assert_array_equal(np.asarray(records[field]), np.asarray(want, np.asarray(records[field]).dtype),
                                      err_msg=field)


def jax_run(settings=SETTINGS, policy="first-fit"):
    env = ClusterEnv(EnvConfig(tie_break="identity", **settings))
    params = to_device(EnvParams(CLUSTER, FRAG_CLASSES))
    jobs = jax.tree.map(lambda x: np.asarray(x)[None], JOBS)
    state, m = rollout(env, get(policy).policy, None, params, to_device(jobs), jax.random.key(0)[None], 50)
    records = {f: np.asarray(getattr(state, f))[0] for f in EXPECTED}
    return records, {k: float(np.asarray(v)[0]) for k, v in m.items()}


def reference_run(settings=SETTINGS, policy="first-fit"):
    out = reference.run(CLUSTER, JOBS, FRAG_CLASSES, reference.RefConfig(**settings), policy)
    return out, out["metrics"]


@pytest.mark.parametrize("run", [jax_run, reference_run], ids=["jax", "reference"])
def test_consolidate_puts_a_job_one_node_can_hold_on_that_node(run):
    """Where first-fit splits j1 over nodes 1 and 2, consolidate puts it on node 2 alone
    (it holds all 4 GPUs); j0 still spans nodes 0 and 1 (no node holds 6)."""
    records, _ = run(policy="consolidate")
    assert records["node"][1] == 2 and records["span_node"][1][0] == -1
    assert records["node"][0] in (0, 1) and records["span_node"][0][0] in (0, 1)


@pytest.mark.parametrize("run", [jax_run, reference_run], ids=["jax", "reference"])
def test_gang_schedule_matches_the_hand_worked_one(run):
    records, metrics = run()
    check_records(records)
    assert metrics["failed"] == 1 and metrics["finished"] == 5


def test_a_gang_counts_as_its_own_class_on_every_node_it_spans():
    """gpu-clustering's classes with gangs: a 10-GPU job on 4-GPU nodes is class "10 GPUs" on
    all three of its nodes (the class columns reach max_span x G, G the padded GPUs per node,
    past the 8 of one node)."""
    env = ClusterEnv(EnvConfig(window=1, tie_break="identity", track_job_classes=True, max_span=3))
    params = to_device(EnvParams(CLUSTER, FRAG_CLASSES))
    jobs = jobs_from_numpy(arrival_s=[0, 5], work_s=[100, 1], num_gpu=[10, 0], gpu_milli=[1000, 0],
                           cpu_milli=[0, 0], mem_mib=[0, 0])
    state, obs = env.reset(jax.random.key(0), params, to_device(jobs))
    state, obs, *_ = env.step(jax.random.key(0), state, 0, params)  # anchor on node 0
    assert float(obs.time_s) == 5.0 and np.asarray(state.span_node[0]).tolist() == [1, 2]
    want = np.zeros((3, 3 * CLUSTER.gpu_exists.shape[1] + 1), np.int32)
    want[:, 10] = 1
    np.testing.assert_array_equal(obs.node_class_jobs, want)


def test_reference_gang_parts_take_cpu_and_memory_in_proportion_rounded_up():
    seen = {}

    def first_fit(sim):  # at t=150 (j5's decision) j0 and j2 run
        if sim.time_s == 150:
            seen.update(parts=[(n, cpu) for n, _, cpu, _ in sim.parts[2]], free_cpu=list(sim.free_cpu))
        return reference.heuristic_action(sim, "first-fit")

    reference.run(CLUSTER, JOBS, FRAG_CLASSES, reference.RefConfig(**SETTINGS), first_fit)
    assert seen["parts"] == [(1, 334), (2, 167)]
    assert seen["free_cpu"] == [8000 - 4000, 8000 - 2000 - 334, 8000 - 167]


CAPS = np.array([3, 4, 0, 2, 4], np.int32)  # GPUs each node can give; ranks = indices


@pytest.mark.parametrize("k, span, anchor, rule, nodes, gpus", [
    (9, 3, 0, "consolidate", [0, 1, 4], [3, 4, 2]),
    (9, 3, 0, "spread", [0, 1, 4], [3, 3, 3]),
    (5, 4, 3, "spread", [3, 1, 4, 0], [2, 1, 1, 1]),
    (5, 8, 3, "consolidate", [3, 1] + [-1] * 6, [2, 3] + [0] * 6),
])
def test_gang_rules_pick_nodes_by_capacity_then_rank(k, span, anchor, rule, nodes, gpus):
    got = gangs.parts(CAPS, anchor, np.int32(k), np.arange(5, dtype=np.int32), span, rule)
    np.testing.assert_array_equal(got[0], nodes)
    np.testing.assert_array_equal(got[1], gpus)


HELIOS_CAPS = np.int32([8, 3, 8, 5, 8])  # nodes of G = 8 GPUs: what each can give the job


@pytest.mark.parametrize("k, span, nodes, gpus", [
    (12, 4, [0, 2, -1, -1], [8, 4, 0, 0]),  # one whole node, the remainder on the next whole one
    (16, 4, [0, 2, -1, -1], [8, 8, 0, 0]),
    (28, 4, [0, 2, 4, 3], [8, 8, 8, 4]),    # no whole node left: the fullest other (5 >= 4)
    (30, 4, None, None),                    # the fullest other gives 5 < 6
    (28, 3, None, None),                    # four nodes > max_span 3
    (32, 5, None, None),                    # four whole nodes needed, three exist
])
def test_helios_places_whole_nodes_by_index_then_the_remainder_on_the_fullest_next(k, span, nodes, gpus):
    """Helios's consolidating placer (semantics.md, "Gang jobs"): the plan, and the job fits
    the plan's first node only."""
    ok, first, *_ = gangs.helios_plan(jnp.asarray(HELIOS_CAPS), np.int32(k), np.int32(8), span)
    assert bool(ok) == (nodes is not None)
    if nodes is not None:
        assert int(first) == 0
        got = gangs.parts(jnp.asarray(HELIOS_CAPS), 3, np.int32(k), np.arange(5, dtype=np.int32), span, "helios",
                          np.int32(8))  # (the anchor given is ignored: the plan chooses)
        np.testing.assert_array_equal(got[0], nodes)
        np.testing.assert_array_equal(got[1], gpus)


@pytest.mark.parametrize("k, span, fits", [
    (7, 2, [1, 1, 0, 0, 1]),  # node 3: 2 + 4 < 7
    (9, 3, [1, 1, 0, 1, 1]),  # node 3: 2 + 4 + 4
    (12, 3, [0, 0, 0, 0, 0]),  # the best three hold 11
    (1, 1, [1, 1, 0, 1, 1]),
])
def test_anchor_fits_when_the_anchor_and_the_best_others_hold_the_job(k, span, fits):
    got = gangs.anchor_fits(jax.numpy.asarray(CAPS), np.int32(k), span)
    np.testing.assert_array_equal(got, np.asarray(fits, bool))


# ----- one GPU model per gang (gang_one_model) --------------------------------------------
# n0 V100 x 4, n1 K80 x 4, n2 V100 x 2; first-fit, max_span 3, consolidate, identity ranks.
MIXED = cl.to_cluster(cl.NodeTable(
    names=("n0", "n1", "n2"), model=np.asarray([cl.model_id("V100"), cl.model_id("K80"), cl.model_id("V100")], np.int32),
    num_gpus=np.asarray([4, 4, 2], np.int32), cpu_milli=np.full(3, 8000, np.int32),
    mem_mib=np.full(3, 32768, np.int32)), type_speeds={"V100": [1.0], "K80": [0.5]})
MIXED_JOBS = jobs_from_numpy(arrival_s=[0, 1], work_s=[100, 100], num_gpu=[6, 8], gpu_milli=[1000, 1000],
                             cpu_milli=[0, 0], mem_mib=[0, 0])


@pytest.mark.parametrize("one_model, node, span_node, end_s, failed", [
    # mixed: j0 takes n0's 4 V100s and 2 of n1's K80s (the other node of most capacity) and
    # runs at the K80's 0.5: ends 200; j1 (8 GPUs) fits the empty cluster (4 + 4 + 2), waits
    # for j0 and then takes n0 and n1 (4 + 4), at 0.5: 200 + 200 = 400.
    (False, [0, 0], [[1, -1], [1, -1]], [200.0, 400.0], False),
    # one model: j0 takes n0 and n2 (the V100s), at 1.0: ends 100; j1 fits no model's nodes
    # (6 V100s, 4 K80s): it fails at arrival.
    (True, [0, -1], [[2, -1], [-1, -1]], [100.0, np.inf], True),
])
def test_one_model_per_gang_keeps_a_gang_on_its_anchors_model(one_model, node, span_node, end_s, failed):
    settings = {"max_span": 3, "gang_one_model": one_model, "gpu_rule": "first-fit"}
    env = ClusterEnv(EnvConfig(tie_break="identity", **settings))
    params = to_device(EnvParams(MIXED, FRAG_CLASSES))
    jobs = jax.tree.map(lambda x: np.asarray(x)[None], MIXED_JOBS)
    state, m = rollout(env, get("first-fit").policy, None, params, to_device(jobs), jax.random.key(0)[None], 20)
    ref = reference.run(MIXED, MIXED_JOBS, FRAG_CLASSES, reference.RefConfig(**settings), "first-fit")
    for got in ({f: np.asarray(getattr(state, f))[0] for f in ("node", "span_node", "end_s")}, ref):
        np.testing.assert_array_equal(got["node"], node)
        np.testing.assert_array_equal(got["span_node"], span_node)
        np.testing.assert_array_equal(got["end_s"], end_s)
    assert int(np.asarray(m["failed"])[0]) == ref["metrics"]["failed"] == int(failed)


# ----- both simulators on random gang workloads, job by job ---------------------------------
GANG_SIZES = (0, 1, 2, 3, 4, 6, 8, 12, 16)  # on nodes of 0-8 GPUs: many jobs span nodes
GANG_CASES = [  # (policy, {env settings}); the registry's env config for the rest
    pytest.param("first-fit", {"max_span": 2}, id="first-fit"),
    pytest.param("consolidate", {"max_span": 3, "reserve_after_s": 10.0}, id="consolidate"),
    pytest.param("first-fit", {"max_span": 3, "gang_one_model": True, "reserve_after_s": 10.0},
                 id="first-fit-one-model"),
    pytest.param("best-fit", {"max_span": 4, "gang_rule": "helios", "window": 1, "backfill": False},
                 id="helios-strict-fifo"),
    extended("best-fit", {"max_span": 3, "gang_rule": "spread", "spread_penalty": 0.7, "reserve_after_s": 10.0},
             id="best-fit"),
    extended("spread", {"max_span": 4, "spread_penalty": 0.8, "backfill": False}, id="spread"),
    extended("hops", {"max_span": 2}, id="hops"),
    extended("elasticflow", {"max_span": 3, "gang_rule": "spread"}, id="elasticflow"),
    extended("r&p", {"max_span": 2}, id="r&p"),
    extended("fgd-window", {"max_span": 3}, id="fgd-window"),
    extended("gpu-clustering", {"max_span": 3, "gang_rule": "spread"}, id="gpu-clustering"),
    extended("fgd", {"max_span": 2, "reserve_after_s": 10.0}, id="fgd"),
    extended("pack-resched", {"max_span": 3, "resched_interval_s": 30.0, "resched_util_threshold": 0.9},
             id="pack-resched"),
    extended("sjf", {"max_span": 6, "gang_rule": "spread", "warmup_jobs": 2, "measured_jobs": 8}, id="sjf"),
]


def gang_env(policy, settings, tie_break="permutation"):
    base = EnvConfig(window=td.WINDOW, queue_capacity=td.QUEUE, running_capacity=td.RUNNING,
                     tie_break=tie_break)
    return ClusterEnv(dataclasses.replace(get(policy).env_config(base), **settings))


@pytest.mark.parametrize("policy, settings", GANG_CASES)
@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(sizes=GANG_SIZES), seed=st.integers(0, 2**31 - 1))
def test_gang_episodes_match_reference(policy, settings, cluster, jobs, seed):
    env = gang_env(policy, settings)
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
    state, got = td.jitted_rollout(env, policy, 200)(params, batch, jax.random.key(seed)[None])
    ref_out = reference.run(cluster, jobs, FRAG_CLASSES, td.ref_config(env), policy=policy,
                            max_steps=200, node_rank=np.asarray(state.node_rank)[0])
    for field in ("outcome", "node", "gpu_bits", "start_s", "end_s", "span_node", "span_bits"):
        np.testing.assert_array_equal(np.asarray(getattr(state, field))[0], ref_out[field], err_msg=field)
    td.assert_same_metrics(got, ref_out["metrics"])


@pytest.mark.parametrize("gang_rule", ["consolidate", extended("spread"), extended("helios")])
@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(sizes=GANG_SIZES), seed=st.integers(0, 2**31 - 1))
def test_random_actions_keep_both_simulators_in_lockstep_with_gangs(gang_rule, cluster, jobs, seed):
    """Random (legal and illegal) actions with gangs and reservations: masks, free
    resources and reservations agree after every step, and no GPU is held twice."""
    env = td.make_env("dynamic", "fifo", "best-fit", "identity", max_span=3, gang_rule=gang_rule,
                      reserve_after_s=10.0, spread_penalty=0.6)
    reset, step = td.jitted_env_fns(env)
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    key = jax.random.key(seed)
    state, obs = reset(key, params, to_device(jobs))
    sim = reference.ReferenceSim(cluster, jobs, FRAG_CLASSES, td.ref_config(env))
    rng = np.random.default_rng(seed)
    for _ in range(120):
        np.testing.assert_array_equal(np.asarray(obs.action_mask), sim.action_mask())
        assert (int(state.core.resv_job), int(state.core.resv_node)) == (sim.resv_job, sim.resv_node)
        assert float(obs.time_s) == sim.time_s
        np.testing.assert_array_equal(np.asarray(state.core.free_milli), np.array(sim.free_milli))
        np.testing.assert_array_equal(np.asarray(state.core.free_cpu), sim.free_cpu)
        np.testing.assert_array_equal(np.asarray(state.core.free_mem), sim.free_mem)
        assert_no_gpu_held_twice(sim)
        if sim.done:
            break
        legal = np.flatnonzero(sim.action_mask())
        action = int(rng.choice(legal)) if rng.random() < 0.8 and legal.size else int(
            rng.integers(-2, env.num_actions(params) + 2))
        state, obs, _, _, info = step(key, state, action, params)
        assert bool(info["legal"]) == sim.action_legal(action)
        sim.step(action)
    ref_out = sim.results()
    for field in ("outcome", "node", "gpu_bits", "start_s", "end_s", "span_node", "span_bits"):
        np.testing.assert_array_equal(np.asarray(getattr(state, field)), ref_out[field], err_msg=field)


def assert_no_gpu_held_twice(sim):
    """Every running job's parts hold distinct whole GPUs, and together with the free milli
    they account for every GPU exactly (a gang's parts all start and end together: the
    reference keeps one record per job)."""
    held = {}
    for _, j in sim.running:
        for n, gpus, _, _ in sim.parts[j]:
            for g in gpus:
                assert (n, g) not in held or sim.jobs[j].gpu_milli < 1000, (n, g, j, held.get((n, g)))
                held[(n, g)] = j
        if len(sim.parts[j]) > 1:
            assert all(sim.jobs[j].gpu_milli == 1000 for _ in sim.parts[j])
            assert sum(len(gpus) for _, gpus, _, _ in sim.parts[j]) == sim.jobs[j].num_gpu


def test_helios_placer_and_one_model_per_gang_are_refused_together_in_both_simulators():
    with pytest.raises(ValueError, match="gang_rule"):
        EnvConfig(max_span=2, gang_rule="helios", gang_one_model=True)
    with pytest.raises(ValueError, match="gang_rule"):
        reference.RefConfig(max_span=2, gang_rule="helios", gang_one_model=True)
