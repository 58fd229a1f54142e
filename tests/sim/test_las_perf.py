"""Per-model round priorities and ``las-perf``, Gavel's heterogeneity-aware LAS
(docs/semantics.md, "Per-model priorities" and "Round policies"): the walk over (job, GPU
model) pairs by hand in both simulators; ``las-perf``, ``gavel-fifo`` and ``fifo-perf`` job by job against the reference on
clusters whose job types run at different speed-ups by model, gangs on and off; and the
max-min LP (``jaxsched.max_min_lp``) against what it must give: the water-filled share on one
model for jobs of one size, at least the agnostic allocation's smallest normalised
throughput, within the GPUs."""

from __future__ import annotations

import functools

import hypothesis as hyp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from jaxsched import cluster as cl
from jaxsched import max_min_lp, reference
from jaxsched.policies import rounds as round_policies
from jaxsched.rollout import rollout
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from tests.settings import EXAMPLES, extended
from tests.sim import test_preemption as tp
from tests.sim.test_gangs import GANG_SIZES
from tests.sim.test_job_types import NUM_TYPES, TYPE_TABLE, with_types
from tests.strategies import FRAG_CLASSES, PAD_JOBS, PAD_NODES, clusters, workloads

M = len(cl.MODEL_NAMES)
T4, A10 = cl.model_id("T4"), cl.model_id("A10")


@st.composite
def typed_workloads(draw, sizes):
    """A ``strategies.workloads`` draw (GPUs per job from ``sizes``) with job types 0..T-1."""
    jobs = draw(workloads(sizes=sizes))
    kinds = draw(st.lists(st.integers(0, NUM_TYPES - 1), min_size=jobs.num_jobs, max_size=jobs.num_jobs))
    return jobs.replace(job_type=np.where(jobs.valid, kinds, 0).astype(np.int32))


PER_MODEL_CASES = [  # (the per-model round policy, {env settings}, job sizes)
    extended("las-perf", {"round_s": 40.0, "restart_overhead_s": 10.0, "walk_slots": 5}, (0, 1, 1, 1, 2, 4, 8),
             id="las-perf-slots-5"),
    pytest.param("las-perf", {"round_s": 25.0, "restart_overhead_s": (5.0, 30.0), "restart_above_gpus": (2,),
                              "max_span": 3}, GANG_SIZES, id="las-perf-gangs-by-size"),
    extended("las-perf", {"round_s": 60.0, "restart_overhead_s": 0.0, "gpu_rule": "first-fit", "warmup_jobs": 3,
                          "measured_jobs": 8, "running_capacity": 4}, (0, 1, 1, 1, 2, 4, 8),
             id="las-perf-measure-running-cap"),
    # Gavel's rules: the LP at resets only, kept as the policy's memory; the walk model by model
    pytest.param("las-perf", {"round_s": 30.0, "restart_overhead_s": 0.0, "max_span": 3, "gang_one_model": True,
                              "round_reset_s": 75.0, "round_ends_early": True, "round_model_order": ("A10", "T4"),
                              "walk_slots": 6},
                 GANG_SIZES, id="las-perf-gavel-rules"),
    extended("las-perf", {"round_s": 40.0, "restart_overhead_s": 10.0, "round_reset_s": 100.0, "walk_slots": 5},
             (0, 1, 1, 1, 2, 4, 8), id="las-perf-resets-slots-5"),
    # gavel-fifo (tests/sim/test_gavel_fifo.py): its allocation kept between rounds
    pytest.param("gavel-fifo", {"round_s": 30.0, "restart_overhead_s": 0.0, "max_span": 3, "gang_one_model": True,
                                "round_reset_s": 75.0, "round_ends_early": True}, GANG_SIZES,
                 id="gavel-fifo-gangs-one-model-resets-early-ends"),
    extended("gavel-fifo", {"round_s": 40.0, "restart_overhead_s": 10.0, "walk_slots": 4}, (0, 1, 1, 1, 2, 4),
             id="gavel-fifo-slots-4"),
    # fifo-perf (Gavel-FIFO): its allocation made afresh, kept between resets
    pytest.param("fifo-perf", {"round_s": 30.0, "restart_overhead_s": 0.0, "max_span": 3, "gang_one_model": True,
                               "round_reset_s": 75.0, "round_ends_early": True}, GANG_SIZES,
                 id="fifo-perf-gangs-one-model-resets-early-ends"),
    extended("fifo-perf", {"round_s": 40.0, "restart_overhead_s": 25.0, "walk_slots": 4}, (0, 1, 1, 1, 2, 4),
             id="fifo-perf-slots-4"),
    extended("gavel-fifo", {"round_s": 40.0, "restart_overhead_s": 10.0, "round_model_order": ("G2", "P100", "T4"),
                            "walk_slots": 4},
             (0, 1, 1, 1, 2, 4), id="gavel-fifo-model-order"),
]


@pytest.mark.parametrize("policy, settings, sizes", PER_MODEL_CASES)
@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_per_model_policy_episodes_match_reference(policy, settings, sizes, cluster, data, seed):
    jobs = data.draw(typed_workloads(sizes))
    state, metrics, ref_out = tp.run_both(tp.round_env(settings), policy, with_types(cluster), jobs, seed)
    tp.assert_same_rounds(state, metrics, ref_out)


# ----------------------------------------------------------------------------- by hand

def two_models():
    """Node 0: one T4 GPU; node 1: one A10 GPU (first-fit alone would try node 0 first)."""
    table = cl.NodeTable(names=("t4", "a10"), model=np.array([T4, A10], np.int32), num_gpus=np.array([1, 1]),
                         cpu_milli=np.array([8000, 8000]), mem_mib=np.array([65536, 65536]))
    return cl.to_cluster(table, pad_nodes=PAD_NODES)


# Per (job, model) priorities, fixed: job 0 prefers the A10, job 1 the T4 but ranks below job
# 0's A10 pair, job 2 (arriving at 50) prefers the A10 above everything and the T4 last.
PAIRS = {(0, A10): 3.0, (0, T4): 1.0, (1, T4): 2.0, (1, A10): 0.5, (2, A10): 5.0, (2, T4): 0.1}


def pair_priority_np():
    p = np.full((PAD_JOBS, M), -np.inf, np.float32)
    for (j, m), v in PAIRS.items():
        p[j, m] = v
    return p


@functools.lru_cache(maxsize=None)
def jitted_rollout(settings: tuple, env_policy, max_steps: int):
    """A jitted rollout of ``env_policy(policy_params, state) -> priority`` with the round
    settings ``settings`` (cached: one compile per policy, its params an argument)."""
    env = tp.round_env(dict(settings))
    policy = lambda policy_params, state, key: env_policy(policy_params, state)  # noqa: E731
    return env, jax.jit(lambda pp, p, j, k: rollout(env, policy, pp, p, j, k, max_steps))


def run_callables_both(cluster, jobs, settings, env_policy, policy_params, ref_policy, seed=0, max_steps=300):
    """(final env state, reference results) of one episode under round policies given as
    callables: ``env_policy(policy_params, state) -> priority`` (jitted) and ``ref_policy(sim)``."""
    env, run = jitted_rollout(tuple(sorted(settings.items())), env_policy, max_steps)
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    state, _ = run(jnp.asarray(policy_params), params, jax.tree.map(lambda x: jnp.asarray(x)[None], jobs),
                   jax.random.key(seed)[None])
    state = jax.tree.map(lambda x: x[0], state)
    ref_out = reference.run(cluster, jobs, FRAG_CLASSES, reference.RefConfig.like(env.config),
                            round_policy=ref_policy, max_steps=max_steps, node_rank=np.asarray(state.node_rank))
    return state, ref_out


def fixed_priority(priority, state):
    return priority


def run_pairs_both():
    jobs = jobs_from_numpy([0, 0, 50], [300, 300, 100], [1, 1, 1], [1000] * 3, [1000] * 3, [1024] * 3,
                           pad_to=PAD_JOBS)
    return run_callables_both(two_models(), jobs, {"round_s": 100.0}, fixed_priority, pair_priority_np(),
                              lambda sim: pair_priority_np(), max_steps=50)


def test_the_walk_goes_model_by_model_in_round_model_order_by_hand():
    """Job 0 ranks the T4 (5) above the A10 (1); job 1 may run on the T4 only (2). By priority
    alone job 0 takes the T4 (300 s of work at 0.45: to 666.7) and job 1 waits while the A10
    idles, to the round at 700. Model by model, the A10
    first (Gavel's round for its Perf policies): job 0 takes the A10 at its A10 pair, and job 1
    the T4. Both simulators, each way."""
    p = np.full((PAD_JOBS, M), -np.inf, np.float32)
    p[0, T4], p[0, A10], p[1, T4] = 5.0, 1.0, 2.0
    jobs = jobs_from_numpy([0, 0], [300, 90], [1, 1], [1000] * 2, [1000] * 2, [1024] * 2, pad_to=PAD_JOBS)
    for order, nodes, starts in (((), [0, 0], [0.0, 700.0]), (("A10", "T4"), [1, 0], [0.0, 0.0])):
        settings = {"round_s": 100.0, "round_model_order": order}
        state, ref_out = run_callables_both(two_models(), jobs, settings, fixed_priority, p, lambda sim: p, max_steps=50)
        assert ref_out["node"][:2].tolist() == nodes
        assert ref_out["start_s"][:2].tolist() == starts
        for field in ("node", "start_s", "end_s"):
            np.testing.assert_array_equal(np.asarray(getattr(state, field)), ref_out[field], err_msg=field)


@pytest.mark.parametrize("walk_slots", [4, 512])
def test_model_by_model_with_few_walk_slots_matches_the_reference(walk_slots):
    """Eight jobs queued (the test queue's capacity) at 0 on one T4 and one A10, fixed random pair priorities, the walk model
    by model (T4 first), jobs 2-7 on the A10 only: with 4 slots the round lists the running pairs and the first queued
    pairs in (model, priority) order (whole models, then the boundary model's best), and must
    decide as the reference's walk over every pair."""
    rng = np.random.default_rng(7)
    p = np.full((PAD_JOBS, M), -np.inf, np.float32)
    order = rng.permutation(16).astype(np.float32)
    p[:8, T4], p[:8, A10] = order[:8], order[8:]
    p[2:8, T4] = -np.inf  # few T4 pairs: the slots take every T4 pair and the A10's best
    jobs = jobs_from_numpy([0] * 8, rng.integers(50, 400, 8).astype(np.float32), [1] * 8, [1000] * 8, [1000] * 8,
                           [1024] * 8, pad_to=PAD_JOBS)
    settings = {"round_s": 100.0, "round_model_order": ("T4", "A10"), "walk_slots": walk_slots}
    state, ref_out = run_callables_both(two_models(), jobs, settings, fixed_priority, p, lambda sim: p, max_steps=300)
    assert (ref_out["end_s"][:8] < np.inf).all()
    for field in ("node", "start_s", "end_s"):
        np.testing.assert_array_equal(np.asarray(getattr(state, field)), ref_out[field], err_msg=field)


def test_a_job_takes_the_first_of_its_pairs_whose_model_has_room_by_hand():
    # Round at t=0: pairs (0, A10) 3 > (1, T4) 2 > (0, T4) 1 > (1, A10) 0.5: job 0 on the A10
    # (node 1, though node 0 comes first), job 1 on the T4. Round at t=100 (job 2 arrived at
    # 50): (2, A10) 5 comes first; the A10 holds job 0, whose own pair (0, A10) 3 comes after,
    # so job 2 preempts it; (1, T4) keeps the T4; job 0's own pair then finds no A10 free
    # (it may not move to the T4 within the round). Job 2 ends at 200, job 0 restarts on the
    # A10 at the round at 200 and ends at 200 + (300 - 100 * 1.1) / 1.1.
    state, ref_out = run_pairs_both()
    node, start, end = ref_out["node"][:3].tolist(), ref_out["start_s"][:3], ref_out["end_s"][:3]
    assert node == [1, 0, 1]
    assert ref_out["preemptions"][:3].tolist() == [1, 0, 0]
    speed_a10, speed_t4 = np.float32(1.1), np.float32(0.45)
    assert start.tolist() == [0.0, 0.0, 100.0]
    left = np.float32(300) - np.float32(100) * speed_a10
    assert end[2] == np.float32(100 + np.float32(100) / speed_a10)
    assert end[0] == np.float32(np.float32(200) + left / speed_a10)
    assert end[1] == np.float32(np.float32(300) / speed_t4)
    for field in ("node", "start_s", "end_s"):
        np.testing.assert_array_equal(np.asarray(getattr(state, field)), ref_out[field], err_msg=field)
    np.testing.assert_array_equal(np.asarray(state.segments.preemptions), ref_out["preemptions"])


@st.composite
def model_preferences(draw):
    """[J, M] float32 fixed per-(job, model) preferences: 0-3 in steps of 0.5 (many ties), or
    -inf (the pair is never listed)."""
    cells = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]), st.just(-np.inf))
    return np.array(draw(st.lists(cells, min_size=PAD_JOBS * M, max_size=PAD_JOBS * M)),
                     np.float32).reshape(PAD_JOBS, M)


PREFERENCE_SCALE = np.float32(1000)


def preferred_least_served(prefs, state):
    return prefs * PREFERENCE_SCALE - round_policies.attained_now(state)[1][:, None]


@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(sizes=GANG_SIZES), prefs=model_preferences(), seed=st.integers(0, 2**31 - 1))
def test_per_model_priorities_match_reference(cluster, jobs, prefs, seed):
    """The walk over (job, model) pairs, gangs on, few slots: priority[j, m] = preference[j, m]
    * 1000 - attained_gpu_s (the least served first, on the models each prefers; a job held
    on its running model is preempted)."""
    def ref_policy(sim):
        gpu_s = np.array([sim.attained_now(j)[1] for j in range(sim.J)], np.float32)
        return prefs * PREFERENCE_SCALE - gpu_s[:, None]

    settings = {"round_s": 30.0, "restart_overhead_s": (5.0, 20.0), "restart_above_gpus": (2,), "max_span": 3,
                "walk_slots": 6}
    state, ref_out = run_callables_both(cluster, jobs, settings, preferred_least_served, prefs, ref_policy, seed)
    for field in ("outcome", "node", "gpu_bits", "start_s", "end_s", "span_node", "span_bits"):
        np.testing.assert_array_equal(np.asarray(getattr(state, field)), ref_out[field], err_msg=field)
    np.testing.assert_array_equal(np.asarray(state.segments.preemptions), ref_out["preemptions"])


def test_attained_service_is_split_by_the_anchors_model():
    state, _ = run_pairs_both()
    by_model = np.asarray(round_policies.attained_by_model_now(state, two_models()))
    total = np.asarray(round_policies.attained_now(state)[0])
    np.testing.assert_array_equal(by_model.sum(1)[:3], total[:3])  # (one model each: exact)
    assert by_model[1, T4] == total[1] and by_model[0, A10] == total[0] and by_model[0, T4] == 0


def test_per_model_priorities_of_the_wrong_shape_are_refused_by_the_reference():
    jobs = jobs_from_numpy([0], [10], [1], [1000], [1000], [1024])
    sim = reference.ReferenceSim(two_models(), jobs, FRAG_CLASSES, reference.RefConfig(round_s=10.0))
    with pytest.raises(ValueError, match=r"priority has shape \(1, 2, 3\)"):
        sim.step_round(np.zeros((1, 2, 3), np.float32))


# ----------------------------------------------------------------------------- the LP

@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(size=st.sampled_from([1, 2, 4, 8]), n=st.integers(1, 40), gpus=st.integers(8, 64))
def test_on_one_model_jobs_of_one_size_get_the_water_filled_share(size, n, gpus):
    """(With sizes that differ, Gavel's objective weighs a job's normalised throughput by its
    size once more, so the shares differ from the agnostic ones.)"""
    num_gpu = np.full(n, size, np.int32)
    sizes = num_gpu
    share = np.asarray(round_policies.max_min_share(jnp.asarray(num_gpu), jnp.ones(len(sizes), bool),
                                                    jnp.int32(gpus), 8))
    throughput = np.zeros((len(sizes), M), np.float32)
    throughput[:, A10] = 1.7  # any one speed
    workers = np.zeros(M, np.int64)
    workers[A10] = gpus
    x = max_min_lp.allocation(throughput, num_gpu, share, workers)
    np.testing.assert_allclose(x[:, A10], share, atol=2e-6)
    assert (np.delete(x, A10, axis=1) == 0).all()


@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 2**16))
def test_the_smallest_normalised_throughput_is_at_least_the_agnostic_allocations_within_the_gpus(n, seed):
    """The agnostic allocation (each job's share spread over the models by their GPUs) is
    feasible, with normalised throughput s_j (Gavel's objective: size x throughput over the
    isolated throughput), so the optimum's smallest is at least min s_j; and the allocation
    fits the GPUs."""
    rng = np.random.default_rng(seed)
    models = [cl.model_id(m) for m in TYPE_TABLE]
    workers = np.zeros(M, np.int64)
    workers[models] = rng.integers(0, 40, len(models))
    hyp.assume(workers.sum() > 0)
    sizes = rng.choice([1, 2, 4, 8], n)
    throughput = np.zeros((n, M), np.float32)
    kinds = rng.integers(0, NUM_TYPES, n)
    for m, name in zip(models, TYPE_TABLE):
        throughput[:, m] = np.where(workers[m] > 0, np.asarray(TYPE_TABLE[name], np.float32)[kinds], 0)
    share = np.asarray(round_policies.max_min_share(jnp.asarray(sizes), jnp.ones(n, bool), jnp.int32(workers.sum()),
                                                    8))
    x = max_min_lp.allocation(throughput, sizes, share, workers).astype(np.float64)
    assert (x >= 0).all() and (x.sum(1) <= 1 + 1e-6).all()
    assert ((sizes[:, None] * x).sum(0) <= workers + 1e-5).all()
    iso = share * (throughput.astype(np.float64) @ workers) / workers.sum()
    normalised = (throughput * x).sum(1) * sizes / iso
    assert normalised.min() >= sizes.min() * (1 - 1e-5)
