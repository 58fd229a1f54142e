"""Per-job-type speeds (docs/semantics.md, "Job types"): ``Cluster.type_speed`` [N, T] and
``Jobs.job_type``. The JAX env against the reference on heterogeneous clusters whose speed
ratios between models differ by job type (Gavel's measured table when the data is there,
else a hand table), hand-worked run times, one type = today's speeds, and bad input.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, target

from jaxsched import cluster as cl
from jaxsched import reference
from jaxsched.errors import DataError
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from jaxsched.workload import gavel
from tests.settings import EXAMPLES, extended
from tests.sim import test_migration
from tests.sim.test_differential import (
    assert_episode_matches_reference, assert_same_metrics, assert_same_schedule, jitted_env_fns, make_env,
)
from tests.strategies import FRAG_CLASSES, MODELS, clusters, workloads
from tests.strategies import PAD_JOBS as STRATEGY_JOBS, PAD_NODES as STRATEGY_NODES

GAVEL_JSON = Path(__file__).resolve().parents[2].parent / "shared/data/gavel/simulation_throughputs.json"
needs_gavel = pytest.mark.skipif(not GAVEL_JSON.exists(), reason=f"no {GAVEL_JSON}")
GAVEL_MODELS = {"k80": "K80", "p100": "P100", "v100": "V100"}


def type_table() -> dict:
    """{model: [T] speeds} for ``strategies.MODELS``, T = 4 types whose speed-ups between
    models differ: Gavel's ResNet-50, Transformer, Recommendation and A3C at one GPU (k80 on
    T4, p100 on P100, v100 on A10, G2 between K80 and P100) when its data is here, else a
    hand table of the same kind."""
    if not GAVEL_JSON.exists():
        return {"T4": [0.45, 0.15, 1.4, 0.3], "P100": [0.6, 0.8, 2.1, 0.55],
                "A10": [1.1, 1.0, 1.0, 1.0], "G2": [0.8, 0.5, 1.7, 0.9]}
    thr = gavel.load_throughputs(GAVEL_JSON)
    rows = [thr.job_types.index(t) for t in ("ResNet-50 (batch size 32)", "Transformer (batch size 16)",
                                             "Recommendation (batch size 1024)", "A3C")]
    k80, p100, v100 = thr.speed(1)[rows].T
    table = {"T4": k80, "P100": p100, "A10": v100, "G2": (k80 + p100) / 2}
    assert set(table) == set(MODELS)
    return table


TYPE_TABLE = type_table()
NUM_TYPES = len(TYPE_TABLE["T4"])


def with_types(cluster) -> "cl.Cluster":
    """``cluster`` (a ``strategies.clusters`` draw) rebuilt with ``TYPE_TABLE``'s speeds."""
    valid = np.asarray(cluster.valid)
    table = cl.NodeTable(names=tuple(f"n{i}" for i in range(valid.sum())), model=cluster.gpu_model[valid],
                         num_gpus=cluster.num_gpus[valid], cpu_milli=cluster.cpu_milli[valid],
                         mem_mib=cluster.mem_mib[valid])
    return cl.to_cluster(table, pad_nodes=len(valid), type_speeds=TYPE_TABLE)


@st.composite
def typed_jobs(draw):
    """A ``strategies.workloads`` draw whose valid jobs get job types 0..T-1."""
    jobs = draw(workloads())
    kinds = np.array(draw(st.lists(st.integers(0, NUM_TYPES - 1), min_size=jobs.num_jobs,
                                   max_size=jobs.num_jobs)), np.int32)
    return jobs.replace(job_type=np.where(jobs.valid, kinds, 0).astype(np.int32))


def test_type_table_speed_ratios_differ_by_model():
    """The differential tests below mean something only if types do not share one ratio."""
    ratios = np.asarray(TYPE_TABLE["T4"]) / np.asarray(TYPE_TABLE["P100"])
    assert ratios.max() / ratios.min() > 2


TYPED_CASES = [  # (queue order, policy, gpu rule, tie break)
    ("fifo", "first-fit", "first-fit", "identity"),
    extended("sjf", "best-fit", "best-fit", "permutation"),
]


@pytest.mark.parametrize("order,policy,gpu_rule,tie_break", TYPED_CASES)
@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=typed_jobs(), seed=st.integers(0, 2**31 - 1))
def test_typed_episode_matches_reference(order, policy, gpu_rule, tie_break, cluster, jobs, seed):
    """Same node, GPUs, start and end for every job, and the same metrics."""
    env = make_env("dynamic", order, gpu_rule, tie_break)
    assert_episode_matches_reference(env, policy, with_types(cluster), jobs, seed)


# Passes every 50 s move jobs off nodes below 0.6 GPU allocation, after a 10 s pause
# (``test_migration``'s hand-worked move; one env, so the two tests below compile once).
MOVE_ENV = ClusterEnv(EnvConfig(window=2, queue_capacity=8, running_capacity=10, tie_break="identity",
                                resched_interval_s=50.0, resched_max_moves=5, resched_util_threshold=0.6,
                                migration_pause_s=10.0))


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=typed_jobs(), seed=st.integers(0, 2**31 - 1))
def test_typed_migrations_match_reference(cluster, jobs, seed):
    """A moved job's rest of work is rescaled by its type's speeds on source and destination."""
    state, got, ref = test_migration.run_both(MOVE_ENV, "first-fit", with_types(cluster), jobs, seed)
    target(float(ref["metrics"]["migrations"]))
    assert_same_schedule(state, ref)
    assert_same_metrics(got, ref["metrics"])


# ---------------------------------------------------------------------------- by hand


def test_hand_worked_move_rescales_by_the_jobs_types_speeds():
    """``test_migration``'s hand-worked move with job 3 of type 1, which runs at 2.0 on the
    A10 and 0.5 on the T4 (type 0: today's 1.1 and 0.45): it ends at 3 + 2000/2 = 1003 on
    the A10, moves at t=300 and runs its remaining (1003 - 300) * 2.0 / 0.5 s on the T4 after
    the 10 s pause."""
    base = test_migration.two_node_cluster()
    table = cl.NodeTable(names=("a", "b"), model=base.gpu_model, num_gpus=base.num_gpus,
                         cpu_milli=base.cpu_milli, mem_mib=base.mem_mib)
    speeds = {"A10": [1.1, 2.0], "T4": [0.45, 0.5]}  # padded to NUM_TYPES: the shapes of MOVE_ENV's test
    speeds = {m: v + [1.0] * (NUM_TYPES - 2) for m, v in speeds.items()}
    cluster = cl.to_cluster(table, pad_nodes=STRATEGY_NODES, type_speeds=speeds)
    jobs = jobs_from_numpy([0, 1, 2, 3], [330, 2000, 100, 2000], [2, 1, 1, 1], [1000] * 4, [0] * 4, [0] * 4,
                           model_mask=[-1, cl.model_mask(["T4"]), cl.model_mask(["T4"]), -1],
                           job_type=[0, 0, 0, 1], num_types=NUM_TYPES, pad_to=STRATEGY_JOBS)
    state, got, ref = test_migration.run_both(MOVE_ENV, "first-fit", cluster, jobs, 0)
    assert np.asarray(state.node)[0, :4].tolist() == [0, 1, 1, 1] and int(np.asarray(got["migrations"])[0]) == 1
    assert np.asarray(state.end_s)[0, 3] == np.float32(310 + (1003 - 300) * 2.0 / 0.5)
    assert_same_schedule(state, ref)

# The hand-worked episodes share shapes (3 nodes of <= 4 GPUs, 8 jobs) so that they compile
# once per number of types.
PAD_NODES, MAX_GPUS, PAD_JOBS = 3, 4, 8


def two_node_cluster(type_speeds=None, speeds=None):
    """Node 0: one T4 GPU; node 1: one V100 GPU (and a padding node)."""
    table = cl._table([("t4", "T4", 1, 8000, 8192), ("v100", "V100", 1, 8000, 8192)])
    return cl.to_cluster(table, pad_nodes=PAD_NODES, max_gpus=MAX_GPUS, type_speeds=type_speeds, speeds=speeds)


def run_first_fit(cluster, jobs):
    """Both simulators, first-fit (the first legal action: slot 0 on the lowest node it may
    use), identity ranks; the same records in both -> (env state, reference results, the
    (job, type) of window slot 0 at each decision)."""
    env = make_env("dynamic", "fifo", "first-fit", "identity")
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    reset, step = jitted_env_fns(env)
    state, obs = reset(jax.random.key(0), params, to_device(jobs))
    types_seen = []
    while not bool(state.core.done):
        slot0 = int(obs.window_job[0])
        types_seen.append((slot0, int(obs.job_type[0])))
        action = int(np.flatnonzero(np.asarray(obs.action_mask))[0])
        state, obs, _, _, _ = step(jax.random.key(0), state, action, params)
    ref = reference.run(cluster, jobs, FRAG_CLASSES, reference.RefConfig.like(env.config), "first-fit")
    assert_same_schedule(jax.tree.map(lambda x: np.asarray(x)[None], state), ref)
    return state, ref, types_seen


def test_run_time_is_work_over_the_job_types_speed_on_its_node():
    """Type 0 runs 4x longer on the T4 than on the V100, type 1 2x shorter (hand table);
    the observation shows each window job's type."""
    cluster = two_node_cluster(type_speeds={"T4": [0.25, 2.0, 1.0], "V100": [1.0, 1.0, 1.0]})
    assert cluster.type_speed.shape == (3, 3) and list(cluster.speed) == [0.25, 1.0, 1.0]
    # Four one-GPU jobs of 100 s: types 0, 0, 1, 1; model masks pin jobs 0, 2 to the T4.
    t4, v100 = cl.model_mask(["T4"]), cl.model_mask(["V100"])
    jobs = jobs_from_numpy([0, 0, 1000, 1000], [100] * 4, [1] * 4, [1000] * 4, [0] * 4, [0] * 4,
                           model_mask=[t4, v100, t4, v100], job_type=[0, 0, 1, 1], num_types=3,
                           pad_to=PAD_JOBS)
    state, _, types_seen = run_first_fit(cluster, jobs)
    run_s = np.asarray(state.end_s)[:4] - np.asarray(state.start_s)[:4]
    np.testing.assert_array_equal(np.asarray(state.node)[:4], [0, 1, 0, 1])
    np.testing.assert_array_equal(run_s, [400.0, 100.0, 50.0, 100.0])
    assert types_seen == [(0, 0), (1, 0), (2, 1), (3, 1)]


def test_one_type_of_todays_speeds_changes_nothing():
    """A type table whose type 0 is today's speeds and whose other types go unused gives
    bit for bit the schedule of the default (one-type) cluster."""
    default = two_node_cluster(speeds={"T4": 0.37})
    assert default.type_speed.shape == (3, 1)
    np.testing.assert_array_equal(default.type_speed[:, 0], default.speed)
    typed = two_node_cluster(type_speeds={"T4": [0.37, 5.0, 0.01], "V100": [1.0, 3.0, 0.02]})
    jobs = jobs_from_numpy([0, 0, 3, 7], [101.3, 77.7, 13.1, 29.9], [1] * 4, [1000, 1000, 500, 500],
                           [0] * 4, [0] * 4, pad_to=PAD_JOBS)
    state_default, ref_default, _ = run_first_fit(default, jobs)
    state_typed, _, _ = run_first_fit(typed, jobs)
    for field in ("node", "gpu_bits", "start_s", "end_s"):
        np.testing.assert_array_equal(np.asarray(getattr(state_typed, field)),
                                      np.asarray(getattr(state_default, field)), err_msg=field)
    assert ref_default["end_s"][0] == np.float32(np.float32(101.3) / np.float32(0.37))


@needs_gavel
def test_gavel_jobs_run_as_much_longer_on_k80_as_the_table_says():
    """Gavel's jobs through ``gavel.to_jobs``: each one's run time on a node is its V100
    duration over its (type, scale factor)'s throughput ratio there, read from the table
    directly; ResNet-50 is several times slower on the K80, Recommendation faster."""
    thr = gavel.load_throughputs(GAVEL_JSON)
    names = ("ResNet-50 (batch size 32)", "Recommendation (batch size 1024)", "Transformer (batch size 64)")
    kinds = np.array([thr.job_types.index(n) for n in names] * 2, np.int32)
    gpus = np.array([1, 1, 2, 1, 1, 4], np.int32)
    drawn = gavel.GavelJobs(arrival_s=np.arange(6, dtype=np.float32) * 10, work_s=np.full(6, 3600.0, np.float32),
                            num_gpus=gpus, job_type=kinds)
    jobs = gavel.to_jobs(drawn, thr, GAVEL_MODELS, gpus_per_node=4, pad_to=PAD_JOBS)
    table = cl._table([("k80", "K80", 4, 8000, 8192), ("v100", "V100", 4, 8000, 8192)])
    cluster = cl.to_cluster(table, pad_nodes=PAD_NODES, max_gpus=MAX_GPUS,
                            type_speeds=gavel.type_speeds(thr, GAVEL_MODELS))
    cl.check_job_types(cluster, jobs)
    state, _, _ = run_first_fit(cluster, jobs)
    node, run_s = np.asarray(state.node)[:6], np.asarray(state.end_s)[:6] - np.asarray(state.start_s)[:6]
    gpu_of_node = {0: "k80", 1: "v100"}
    for j in range(6):
        s = thr.scale_factors.index(gpus[j])
        steps = thr.steps_per_s[kinds[j], s]
        ratio = steps[thr.gpu_types.index("v100")] / steps[thr.gpu_types.index(gpu_of_node[node[j]])]
        np.testing.assert_allclose(run_s[j], 3600.0 * ratio, rtol=1e-6, err_msg=f"job {j}")
    assert set(node) == {0, 1}  # both GPU types ran jobs


@needs_gavel
def test_gavel_to_jobs_keeps_jobs_off_gpus_where_their_type_cannot_run_and_refuses_gangs():
    thr = gavel.load_throughputs(GAVEL_JSON)
    r50 = thr.job_types.index("ResNet-50 (batch size 128)")  # 0 steps/s on K80 at 2, 4, 8 GPUs
    drawn = gavel.GavelJobs(np.zeros(3, np.float32), np.ones(3, np.float32), np.array([1, 2, 8], np.int32),
                            np.full(3, r50, np.int32))
    jobs = gavel.to_jobs(drawn, thr, GAVEL_MODELS, gpus_per_node=8)
    assert list(jobs.model_mask) == [cl.model_mask(["K80", "P100", "V100"])] + [cl.model_mask(["P100", "V100"])] * 2
    assert list(jobs.job_type) == [gavel.type_row(r50, 1), gavel.type_row(r50, 2), gavel.type_row(r50, 8)]
    with pytest.raises(DataError, match=r"num_gpus.*1 of 3 jobs need more than the 4 GPUs.*job 2"):
        gavel.to_jobs(drawn, thr, GAVEL_MODELS, gpus_per_node=4)
    a3c = thr.job_types.index("A3C")  # not distributed: never measured at 2 GPUs
    with pytest.raises(DataError, match="did not measure"):
        gavel.to_jobs(drawn._replace(job_type=np.full(3, a3c, np.int32)), thr, GAVEL_MODELS, 8)
    with pytest.raises(DataError, match="unknown Gavel GPU type 'a100'"):
        gavel.to_jobs(drawn, thr, {"a100": "V100"}, 8)
    speeds = gavel.type_speeds(thr, GAVEL_MODELS)
    assert speeds["K80"][gavel.type_row(r50, 2)] == gavel.PLACEHOLDER_SPEED
    one_server = gavel.type_row(np.arange(len(thr.job_types))[:, None], np.asarray(gavel.SCALE_FACTORS)[None, :])
    assert len(speeds["V100"]) == len(thr.job_types) * 8 and (speeds["V100"][one_server] == 1.0).all()


@needs_gavel
def test_gavel_workload_end_to_end_matches_reference():
    """A generated multi-GPU Gavel workload (its jobs of <= 4 GPUs) on 4-GPU servers of K80,
    P100 and V100: both simulators place and time every job alike."""
    thr = gavel.load_throughputs(GAVEL_JSON)
    drawn = gavel.generate(jax.random.key(3), gavel.GavelConfig(jobs_per_hour=40.0, num_jobs=12, multi_gpu=True))
    keep = np.flatnonzero(np.asarray(drawn.num_gpus) <= 4)[:PAD_JOBS]
    drawn = gavel.GavelJobs(*(np.asarray(x)[keep] for x in drawn))
    jobs = gavel.to_jobs(drawn, thr, GAVEL_MODELS, gpus_per_node=4, pad_to=PAD_JOBS)
    assert len(set(jobs.job_type[jobs.valid])) >= 3 and (drawn.num_gpus > 1).any()
    table = cl._table([(f"n{i}", m, 4, 8000, 8192) for i, m in enumerate(["K80", "P100", "V100"])])
    cluster = cl.to_cluster(table, max_gpus=MAX_GPUS, type_speeds=gavel.type_speeds(thr, GAVEL_MODELS))
    state, ref, _ = run_first_fit(cluster, jobs)  # compares every job's record
    assert (ref["outcome"][: len(keep)] == 1).all()


# ---------------------------------------------------------------------------- bad input

def test_bad_type_speeds_are_refused_naming_the_model():
    table = cl._table([("a", "T4", 1, 1000, 1024), ("b", "V100", 2, 1000, 1024), ("c", "T4", 0, 1000, 1024)])
    ok = cl.to_cluster(table, type_speeds={"T4": [0.5, 2], "V100": [1, 1]})
    np.testing.assert_array_equal(ok.type_speed, [[0.5, 2], [1, 1], [1, 1]])  # CPU-only node: 1.0
    for bad, match in (({"T4": [0.5, 2]}, "'V100'.*no speeds"),
                       ({"T4": [0.5, 2], "V100": [1]}, "'V100'.*1 job types; the first model has 2"),
                       ({"T4": [0.5, 0], "V100": [1, 1]}, "'T4'.*job type 1: speed must be a finite number > 0"),
                       ({"T4": [0.5, np.nan], "V100": [1, 1]}, "'T4'.*job type 1"),
                       ({"T4": [], "V100": []}, "'T4'.*one per job type"),
                       ({"H100": [1], "T4": [1], "V100": [1]}, "'H100'.*unknown GPU model"),
                       ({}, "non-empty")):
        with pytest.raises(DataError, match=match):
            cl.to_cluster(table, type_speeds=bad)
    with pytest.raises(DataError, match="speeds or type_speeds, not both"):
        cl.to_cluster(table, speeds={"T4": 1.0}, type_speeds={"T4": [1], "V100": [1]})


def test_job_types_outside_the_cluster_are_refused_on_the_host():
    cluster = two_node_cluster(type_speeds={"T4": [0.5, 2], "V100": [1, 1]})
    args = ([0, 1, 2], [1, 1, 1], [1, 1, 1], [1000] * 3, [0] * 3, [0] * 3)
    with pytest.raises(DataError, match=r"'job_type'.*job 2: .* < 2 \(the cluster's job types\), got 2"):
        jobs_from_numpy(*args, job_type=[0, 1, 2], num_types=2)
    for bad in ([0, -1, 0], [0, 0.5, 0]):
        with pytest.raises(DataError, match="job 1: must be a whole number >= 0"):
            jobs_from_numpy(*args, job_type=bad)
    with pytest.raises(DataError, match="expected 3 job types"):
        jobs_from_numpy(*args, job_type=[0, 1])
    jobs = jobs_from_numpy(*args, job_type=[1, 0, 3], pad_to=5)  # no num_types: not checked here
    assert list(jobs.job_type) == [1, 0, 3, 0, 0]
    with pytest.raises(DataError, match="job 2: .* got 3"):
        cl.check_job_types(cluster, jobs)
    cl.check_job_types(cluster, jobs.replace(valid=np.array([1, 1, 0, 0, 0], bool)))
    with pytest.raises(ValueError, match="job 2: job_type 3 is not one of the cluster's 2 types"):
        reference.ReferenceSim(cluster, jobs, FRAG_CLASSES, reference.RefConfig())


def test_synthetic_workloads_have_one_job_type():
    from jaxsched.workload import synthetic
    jobs = synthetic.generate(jax.random.key(0), synthetic.SyntheticConfig(num_jobs=5, pad_to=7))
    assert jobs.job_type.shape == (7,) and jnp.all(jobs.job_type == 0)

