"""Preemption and scheduling rounds in the JAX env (docs/semantics.md, "Preemption and
rounds"): job by job against ``jaxsched.reference`` (start, end, node, GPUs, preemptions,
attained service, the metrics) with the round policies las, las-gpu, tiresias, srtf and priority (jobs in
priority classes 0 and 1), restart costs constant and by size, gangs on and off; work and resources conserved round by round in the env; and
with ``round_s = 0`` no flat step is refused and no preemption field is kept."""

from __future__ import annotations

import dataclasses
import functools

import hypothesis as hyp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxsched import cluster as cl
from jaxsched import policies, reference
from jaxsched.policies import rounds as round_policies
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.sim.rounds import attained_now, remaining_now
from jaxsched.types import GPU_MILLI, EnvParams, to_device
from tests.settings import EXAMPLES, extended
from tests.sim import test_differential as td
from tests.sim.test_gangs import GANG_SIZES
from tests.strategies import FRAG_CLASSES, clusters, workloads
from tests.test_reference import ONE_GPU_CLASS, gpu_job, make_cluster, make_jobs
from tests.test_reference_preemption import backlog_case, one_gpu_nodes

TIRESIAS = {"tiresias_thresholds_gpu_s": (100.0, 600.0), "tiresias_promote_knob": 0.5}  # (test jobs: <= 5,440 GPU-s)
ROUND_CASES = [  # (round policies, {env settings}, gang workloads)
    # walk_slots 3: the candidates are sorted in 3 slots when they fit, else in J (both ways)
    pytest.param(("las", "tiresias"), {"round_s": 40.0, "restart_overhead_s": 10.0, "walk_slots": 3, **TIRESIAS},
                 False, id="las-tiresias"),
    pytest.param(("srtf", "priority", "las", "helios-srtf"), {"round_s": 25.0, "restart_overhead_s": (5.0, 30.0), "restart_above_gpus": (2,),
                             "max_span": 3, "walk_slots": 4, "gang_one_model": True, "round_reset_s": 55.0,
                             "round_ends_early": True}, True,
                 id="srtf-priority-las-gangs-one-model-resets-early-ends"),
    extended(("las-gpu", "tiresias"), {"round_s": 30.0, "restart_overhead_s": (0.0, 7.5, 20.0),
                                       "restart_above_gpus": (1, 4), "max_span": 3, "gang_rule": "spread",
                                       "spread_penalty": 0.7, "tiresias_thresholds_gpu_s": (300.0,)},
             True, id="las-gpu-tiresias-gangs-spread"),
    extended(("srtf", "las", "helios-srtf"), {"round_s": 30.0, "restart_overhead_s": 40.0, "max_span": 3, "gang_rule": "helios",
                               "restart_guard": False}, True, id="srtf-las-helios-gangs-unguarded"),
    extended(("srtf",), {"round_s": 60.0, "restart_overhead_s": 15.0, "gpu_rule": "first-fit",
                         "warmup_jobs": 3, "measured_jobs": 8}, False, id="srtf-measure"),
    extended(("las-gpu", "las"), {"round_s": 35.0, "restart_overhead_s": 100.0, "gpu_rule": "fgd",
                                  "running_capacity": 3}, False, id="las-gpu-las-fgd-running-cap"),
]
EXACT = td.EXACT_METRICS + ("preemptions",)


def round_env(settings, tie_break="permutation"):
    return ClusterEnv(EnvConfig(**{"window": td.WINDOW, "queue_capacity": td.QUEUE,
                                   "running_capacity": td.RUNNING, "tie_break": tie_break, **settings}))


def bound_policy(env, policy_name):
    """The registered round policy ``policy_name`` with the settings of ``env``'s config."""
    return round_policies.with_settings(policies.get(policy_name).policy, round_policies.settings(env.config))


@functools.lru_cache(maxsize=None)
def jitted_round_rollout(env, policy_name, max_steps):
    policy = bound_policy(env, policy_name)
    return jax.jit(lambda params, jobs, keys: rollout(env, policy, None, params, jobs, keys, max_steps))


def run_both(env, policy, cluster, jobs, seed, max_steps=300):
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
    state, got = jitted_round_rollout(env, policy, max_steps)(params, batch, jax.random.key(seed)[None])
    state = jax.tree.map(lambda x: x[0], state)
    ref_out = reference.run(cluster, jobs, FRAG_CLASSES, reference.RefConfig.like(env.config),
                            round_policy=policy, max_steps=max_steps, node_rank=np.asarray(state.node_rank))
    return state, {k: float(np.asarray(v)[0]) for k, v in got.items()}, ref_out


def assert_same_rounds(state, metrics, ref_out):
    gangs = ref_out["span_node"].shape[1] > 0  # (without gangs the env keeps a [1, 1] placeholder)
    for field in ("outcome", "node", "gpu_bits", "start_s", "end_s") + (("span_node", "span_bits") if gangs else ()):
        np.testing.assert_array_equal(np.asarray(getattr(state, field)), ref_out[field], err_msg=field)
    np.testing.assert_array_equal(np.asarray(state.segments.preemptions), ref_out["preemptions"])
    attained_s, attained_gpu_s = attained_now(state)
    np.testing.assert_array_equal(np.asarray(attained_s), ref_out["attained_s"])
    np.testing.assert_array_equal(np.asarray(attained_gpu_s), ref_out["attained_gpu_s"])
    assert set(metrics) == set(ref_out["metrics"])
    for name, ref_value in ref_out["metrics"].items():
        if name in EXACT:
            assert metrics[name] == ref_value, name
        else:
            np.testing.assert_allclose(metrics[name], ref_value, rtol=2e-4, atol=1e-3, err_msg=name)


@pytest.mark.parametrize("names, settings, gang_sizes", ROUND_CASES)
@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_round_episodes_match_reference(names, settings, gang_sizes, cluster, data, seed):
    jobs = data.draw(workloads(sizes=GANG_SIZES) if gang_sizes else workloads())
    qos = data.draw(st.lists(st.integers(0, 1), min_size=jobs.num_jobs, max_size=jobs.num_jobs))
    jobs = jobs.replace(qos_class=np.where(jobs.valid, qos, 0).astype(np.int32))  # (priority reads it)
    for name in names:
        state, metrics, ref_out = run_both(round_env(settings), name, cluster, jobs, seed)
        assert_same_rounds(state, metrics, ref_out)


SETTLED_CASES = [  # (round policy settings, gang workloads), run with the policies' settled_rounds
    pytest.param({"round_s": 7.0, "running_capacity": 3}, False, id="short-rounds-running-cap"),
    pytest.param({"round_s": 25.0, "restart_overhead_s": (5.0, 30.0), "restart_above_gpus": (2,), "max_span": 3,
                  "walk_slots": 4, "gang_one_model": True}, True, id="costs-gangs-one-model"),
    extended({"round_s": 10.0, "restart_overhead_s": 40.0, "max_span": 3, "gang_rule": "helios",
              "restart_guard": False}, True, id="helios-gangs-unguarded"),
    extended({"round_s": 25.0, "restart_overhead_s": 15.0, "max_span": 3, "round_ends_early": True,
              "round_reset_s": 55.0, "warmup_jobs": 3, "measured_jobs": 8}, True, id="early-ends-resets-measure"),
]


@pytest.mark.parametrize("settings, gang_sizes", SETTLED_CASES)
@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_settled_rounds_skipped_give_the_reference_schedules(settings, gang_sizes, cluster, data, seed):
    """srtf, priority and helios-srtf with their registry's ``settled_rounds`` against the
    reference, which decides every round: the same jobs, segments and metrics, in as many
    decided rounds or fewer (the dropped rounds would have changed nothing)."""
    jobs = data.draw(workloads(sizes=GANG_SIZES) if gang_sizes else workloads())
    qos = data.draw(st.lists(st.integers(0, 1), min_size=jobs.num_jobs, max_size=jobs.num_jobs))
    jobs = jobs.replace(qos_class=np.where(jobs.valid, qos, 0).astype(np.int32))
    for name in ("srtf", "priority", "helios-srtf"):
        env = ClusterEnv(policies.get(name).env_config(round_env(settings).config))
        assert env.config.settled_rounds != "decided"
        state, metrics, ref_out = run_both(env, name, cluster, jobs, seed, max_steps=1000)
        assert ref_out["metrics"]["done"] == 1  # (a step cap would stop the two at other times)
        assert metrics["decisions"] <= ref_out["metrics"]["decisions"]
        assert_same_rounds(state, {**metrics, "decisions": ref_out["metrics"]["decisions"]}, ref_out)


def test_settled_rounds_are_not_decided():
    """One 1-GPU node, rounds of 1 s, srtf: j0 (300 s) and j1 (400 s) arrive at 0; j0 runs
    0-300, j1 300-700. Every round is decided while j1 waits: 0, 1, ..., 300 (301; after 300
    nothing waits). With the skip: 0 (j0 starts), 1 (changes nothing: settled), then j0's end
    at 300 (j1 starts): 3 decisions, the same starts and ends."""
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 300), gpu_job(0, 400)])
    runs = {}
    for skip in (False, True):
        env = ClusterEnv(EnvConfig(window=2, queue_capacity=4, running_capacity=4, tie_break="identity",
                                   round_s=1.0, settled_rounds="skipped" if skip else "decided"))
        params = to_device(EnvParams(cluster, ONE_GPU_CLASS))
        batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
        state, metrics = jax.jit(lambda p, j, k: rollout(env, round_policies.srtf, None, p, j, k, 1000))(
            params, batch, jax.random.key(0)[None])
        runs[skip] = (np.asarray(state.start_s[0]), np.asarray(state.end_s[0]), int(metrics["decisions"][0]),
                      int(metrics["done"][0]))
    for skip in (False, True):
        np.testing.assert_array_equal(runs[skip][0][:2], [0.0, 300.0])
        np.testing.assert_array_equal(runs[skip][1][:2], [300.0, 700.0])
        assert runs[skip][3] == 1
    assert runs[False][2] == 301 and runs[True][2] == 3


def test_settled_rounds_are_refused_for_a_policy_that_cannot_skip_them_so():
    config = EnvConfig(round_s=60.0, settled_rounds="skipped")
    assert policies.get("srtf").env_config(config).settled_rounds == "skipped"
    assert policies.get("srtf").env_config(EnvConfig(round_s=60.0)).settled_rounds == "skipped"
    with pytest.raises(ValueError, match="env.settled_rounds = 'skipped': scheduler 'las' cannot skip rounds"):
        policies.get("las").env_config(config)
    with pytest.raises(ValueError, match="scheduler 'helios-srtf' skips them as 'skipped-by-policy'"):
        policies.get("helios-srtf").env_config(config)
    with pytest.raises(ValueError, match="EnvConfig.settled_rounds = 'always': must be one of"):
        EnvConfig(round_s=60.0, settled_rounds="always")


def test_helios_srtf_takes_jobs_by_the_gpu_count_and_places_after():
    """Two 4-GPU nodes, rounds of 10 s. j0 and j1 (3 GPUs, 1,000 s) start at 0 on nodes 0 and
    1; q (2 GPUs, 50 s) and r (1 GPU, 2,000 s) arrive at 5, leaving one GPU free on each node.
    At 10, helios-srtf takes q (2 of 8), j0 and j1 (3 each): the count is spent, so r is not
    taken, and q, taken, fits no node: nothing changes until j0 and j1 end at 1,000, when q
    (1,000-1,050) and r (1,000-3,000) start. Its priorities stay the same until j0 would pass
    q (990 s left against q's 50: at 950), less two rounds and a float margin: the rounds at
    20-920 are not decided, 930-960 are (until j0 and j1 have passed q, at 960; then no taken
    queued job is ahead of a running one, and 970-990 are not): 0, 10, 930-960 and 1,000, 7
    rounds decided. srtf instead gives q node 1 at 10, preempting j1, the last job in its order, and
    starts r on node 0's free GPU."""
    cluster = make_cluster(("V100", 4, 32000, 65536), ("V100", 4, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 1000, 3), gpu_job(0, 1000, 3), gpu_job(5, 50, 2), gpu_job(5, 2000, 1)])
    out = {}
    for name in ("helios-srtf", "srtf"):
        env = ClusterEnv(policies.get(name).env_config(EnvConfig(
            window=4, queue_capacity=8, running_capacity=8, tie_break="identity", round_s=10.0)))
        params = to_device(EnvParams(cluster, ONE_GPU_CLASS))
        batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
        state, metrics = jax.jit(lambda p, j, k: rollout(env, bound_policy(env, name), None, p, j, k, 500))(
            params, batch, jax.random.key(0)[None])
        out[name] = (np.asarray(state.start_s[0, :4]), np.asarray(state.node[0, :4]),
                     np.asarray(state.segments.preemptions[0, :4]), int(metrics["decisions"][0]))
    start, node, preemptions, decisions = out["helios-srtf"]
    np.testing.assert_array_equal(start, [0.0, 0.0, 1000.0, 1000.0])
    np.testing.assert_array_equal(preemptions, [0, 0, 0, 0])
    assert node[0] == 0 and node[1] == 1 and decisions == 7
    start, node, preemptions, _ = out["srtf"]
    np.testing.assert_array_equal(start, [0.0, 0.0, 10.0, 10.0])
    np.testing.assert_array_equal(preemptions, [0, 1, 0, 0])
    assert node[2] == 1 and node[3] == 0


def run_las_gpu_by_hand(cluster, jobs, **settings):
    """One episode of a hand-worked case, rounds of 100 s under las-gpu -> (state, metrics)
    of the episode (unbatched)."""
    env = ClusterEnv(EnvConfig(window=2, queue_capacity=4, running_capacity=4, tie_break="identity",
                               round_s=100.0, **settings))
    params = to_device(EnvParams(cluster, ONE_GPU_CLASS))
    batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
    state, metrics = jax.jit(lambda p, j, k: rollout(env, round_policies.las_gpu, None, p, j, k, 50))(
        params, batch, jax.random.key(0)[None])
    return jax.tree.map(lambda x: x[0], (state, metrics))


@hyp.settings(max_examples=4 * EXAMPLES, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 2, 3, 4, 8, 16, 64]), min_size=1, max_size=40),
       active=st.lists(st.booleans(), min_size=40, max_size=40), gpus=st.integers(1, 200))
def test_las_shares_are_the_references_water_fill(sizes, active, gpus):
    """las's histogram water-fill gives the reference's shares bit for bit (sizes up to the
    static bound 64: a gang of 8 nodes of 8 GPUs); CPU-only and inactive jobs get 1."""
    active = np.asarray(active[:len(sizes)])
    got = np.asarray(round_policies.max_min_share(jnp.asarray(sizes, jnp.int32), jnp.asarray(active),
                                                  jnp.int32(gpus), 64))
    gpu_jobs = [j for j, size in enumerate(sizes) if active[j] and size > 0]
    want = np.ones(len(sizes), np.float32)
    want[gpu_jobs] = reference.max_min_shares([sizes[j] for j in gpu_jobs], gpus)
    np.testing.assert_array_equal(got, want)


def test_las_gpu_hand_example_in_the_env():
    """The reference's hand-worked las-gpu timeline (tests/test_reference_preemption.py): two
    1-GPU nodes, round 100 s, restart 10 s; j1 is preempted at 100 and restarts at 200."""
    jobs = make_jobs([gpu_job(0, 250), gpu_job(0, 150), gpu_job(50, 100)])
    state, metrics = run_las_gpu_by_hand(one_gpu_nodes(2), jobs, restart_overhead_s=10.0)
    np.testing.assert_array_equal(state.start_s[:3], np.float32([0, 0, 100]))
    np.testing.assert_array_equal(state.end_s[:3], np.float32([250, 260, 200]))
    np.testing.assert_array_equal(state.node[:3], [0, 1, 1])
    np.testing.assert_array_equal(state.segments.preemptions[:3], [0, 1, 0])
    np.testing.assert_array_equal(attained_now(state)[0][:3], np.float32([250, 160, 100]))
    assert int(metrics["decisions"]) == 3 and int(metrics["preemptions"]) == 1
    assert float(metrics["restart_gpu_s"]) == pytest.approx(10.0)


def test_backlog_of_work_counts_a_preempted_jobs_work_left_in_the_env():
    """The reference's hand-worked backlog case (tests/test_reference_preemption.py): j0 waits
    with 100 s of work left through the measurement interval's last quarter."""
    cluster, jobs, growth = backlog_case()
    state, metrics = run_las_gpu_by_hand(cluster, jobs, measured_jobs=3)
    np.testing.assert_array_equal(state.end_s[:3], np.float32([600, 400, 410]))
    assert float(metrics["backlog_work_growth"]) == pytest.approx(growth, rel=1e-6)


@functools.lru_cache(maxsize=None)
def jitted_round_fns(env):
    return jax.jit(env.reset), jax.jit(env.step_round)


@pytest.mark.parametrize("policy, one_model", [("las-gpu", False), ("gavel-fifo", True)])
@hyp.settings(max_examples=EXAMPLES, deadline=None)
@given(cluster=clusters(), jobs=workloads(sizes=GANG_SIZES), seed=st.integers(0, 2**31 - 1))
def test_rounds_conserve_work_and_resources_in_the_env(policy, one_model, cluster, jobs, seed):
    """Round by round (gangs, restart by size; las-gpu, and gavel-fifo with its allocation kept
    between rounds and a gang on one GPU model): ``assert_round_invariants``."""
    env = round_env({"round_s": 30.0, "restart_overhead_s": (2.0, 5.0), "restart_above_gpus": (1,),
                     "max_span": 3, "gang_one_model": one_model}, tie_break="identity")
    assert_round_invariants(env, policy, cluster, jobs, seed)


def assert_round_invariants(env, policy, cluster, jobs, seed, max_rounds=150):
    """One episode under round policy ``policy``, checked after every round decision: no
    resource is overcommitted and the GPU milli held by running jobs plus the free milli is
    the cluster's; a job's remaining work never grows; a finished job's last segment did
    exactly the work it had left (so work is conserved across its suspensions); with
    ``gang_one_model`` every running gang's nodes are of one model."""
    reset, step_round = jitted_round_fns(env)
    params = to_device(EnvParams(cluster, FRAG_CLASSES))
    bound = bound_policy(env, policy)
    decide = jax.jit(functools.partial(bound, None))
    with_params = round_policies.reads_env_params(policies.get(policy).policy)
    key = jax.random.key(seed)
    state, _ = reset(key, params, to_device(jobs))
    capacity = int(np.asarray(cluster.gpu_exists).sum()) * GPU_MILLI
    remaining = np.asarray(remaining_now(state))
    for t in range(max_rounds):  # (las-gpu may thrash on a loaded cluster: not every episode ends)
        if bool(state.core.done):
            break
        priority = decide(state, None, params) if with_params else decide(state, None)
        state, _, _, _, _ = step_round(jax.random.fold_in(key, t), state, priority, params)
        core = state.core
        if env.config.gang_one_model:
            model = np.asarray(cluster.gpu_model)
            for j in np.asarray(core.run_job)[np.asarray(core.run_job) >= 0]:
                nodes = [int(state.node[j])] + [int(n) for n in np.asarray(state.span_node[j]) if n >= 0]
                assert len({model[n] for n in nodes}) == 1, (j, nodes)
        assert (np.asarray(core.free_milli) >= 0).all()
        assert (np.asarray(core.free_cpu) >= 0).all() and (np.asarray(core.free_mem) >= 0).all()
        ring = (int(core.run_head) + np.arange(int(core.num_running))) % core.run_job.shape[0]
        running = np.asarray(core.run_job)[ring]
        held = sum(int(jobs.num_gpu[j]) * int(jobs.gpu_milli[j]) for j in running)
        assert held + int(np.asarray(core.free_milli).sum()) == capacity
        now = np.asarray(remaining_now(state))
        in_system = ~(np.asarray(state.end_s) <= float(core.time_s))  # not finished
        assert (now[in_system] <= remaining[in_system] * (1 + 1e-6) + 1e-3).all()
        remaining = now
    seg = state.segments
    finished = (np.asarray(state.end_s) <= float(state.core.time_s)) & np.asarray(jobs.valid)
    done_work = (np.asarray(state.end_s)[finished] - np.asarray(seg.run_from_s)[finished]) * np.asarray(seg.seg_speed)[finished]
    np.testing.assert_allclose(done_work, np.asarray(seg.remaining_s)[finished], rtol=1e-4, atol=1e-2)
    assert (np.asarray(seg.remaining_s) <= np.asarray(jobs.work_s) * (1 + 1e-6)).all()


@pytest.mark.parametrize("early, starts", [(False, [0.0, 100.0, 300.0]), (True, [0.0, 30.0, 230.0])])
def test_rounds_that_end_early_by_hand_in_both_simulators(early, starts):
    """One GPU, rounds of 100 s, las. j0 (30 s of work) at 0, j1 (50 s) at 10, j2 (10 s) at
    230. Rounds every 100 s: j1 starts at 100, j2 at 300. Ending early (Gavel's rounds): the
    round at 0 ends when j0 does, at 30, where j1 starts; that round ends at 80 with j1; with
    nothing running the next round is at the next arrival, 230, where j2 starts."""
    cluster, jobs = one_gpu_nodes(1), make_jobs([gpu_job(0, 30), gpu_job(10, 50), gpu_job(230, 10)])
    env = round_env({"round_s": 100.0, "round_ends_early": early}, tie_break="identity")
    state, metrics, ref = run_both(env, "las", cluster, jobs, seed=0)
    assert_same_rounds(state, metrics, ref)
    assert np.asarray(state.start_s).tolist() == starts


@pytest.mark.parametrize("policy, starts", [("srtf", [5.0, 35.0, 65.0]), ("las", [5.0, 65.0, 65.0])])
def test_las_waits_for_the_next_allocation_reset_by_hand(policy, starts):
    """Three CPU-only jobs of 1.7 s at 5, 35 and 65; rounds of 25 s that end early, resets 55 s
    apart at least. The round at 5 is a reset (j0 arrived; not at time 0, so the next reset
    waits its 55 s); those at 35 are not (30 s since it), at 65 one is. las holds j1, which
    arrived after the reset at 5, until the reset at 65 (Gavel's jobs not in its allocation
    wait for it); srtf reads no resets and starts it at 35. 3 rounds decided either way (5,
    35, 65: the round at j0's end, 6.7, is dropped and the next is at the arrival, 35)."""
    nodes = cl.NodeTable(names=("c0",), model=np.asarray([cl.model_id("CPU")], np.int32),
                         num_gpus=np.zeros(1, np.int32), cpu_milli=np.full(1, 64000, np.int32),
                         mem_mib=np.full(1, 1 << 17, np.int32))
    jobs = make_jobs([(t, 1.7, 0, 0, 1000, 100) for t in (5.0, 35.0, 65.0)])
    env = round_env({"round_s": 25.0, "round_reset_s": 55.0, "round_ends_early": True}, tie_break="identity")
    state, metrics, ref = run_both(env, policy, cl.to_cluster(nodes), jobs, seed=0)
    assert_same_rounds(state, metrics, ref)
    assert np.asarray(state.start_s).tolist() == starts and metrics["decisions"] == 3


def test_rounds_refuse_flat_steps_and_bad_settings_name_the_field():
    env = round_env({"round_s": 10.0})
    with pytest.raises(ValueError, match="step_round"):
        env.step(None, None, 0, None)
    with pytest.raises(ValueError, match="round_s > 0"):
        round_env({}).step_round(None, None, None, None)
    for settings, field in (({"round_s": -1.0}, "round_s"), ({"round_s": float("inf")}, "round_s"),
                            ({"restart_overhead_s": (1.0, 2.0)}, "restart_above_gpus"),
                            ({"restart_overhead_s": (-1.0,)}, "restart_overhead_s"),
                            ({"restart_overhead_s": (1e9,)}, "restart_overhead_s"),
                            ({"round_s": 10.0, "restart_guard": 1}, "restart_guard"),
                            ({"restart_overhead_s": (1.0, 2.0), "restart_above_gpus": (-1,)}, "restart_above_gpus"),
                            ({"round_s": 10.0, "mode": "static"}, "round_s"),
                            ({"round_s": 10.0, "resched_interval_s": 60.0}, "round_s"),
                            ({"tiresias_thresholds_gpu_s": (7200.0, 3250.0)}, "tiresias_thresholds_gpu_s"),
                            ({"tiresias_thresholds_gpu_s": (-1.0,)}, "tiresias_thresholds_gpu_s"),
                            ({"tiresias_promote_knob": -0.5}, "tiresias_promote_knob"),
                            ({"round_s": 10.0, "round_reset_s": -1.0}, "round_reset_s"),
                            ({"round_s": 10.0, "round_reset_s": float("inf")}, "round_reset_s"),
                            ({"round_reset_s": 1920.0}, "round_reset_s"),
                            ({"round_s": 10.0, "round_ends_early": 1}, "round_ends_early"),
                            ({"round_s": 10.0, "round_model_order": ("V100", "X1")}, "round_model_order"),
                            ({"round_s": 10.0, "round_model_order": ("V100", "V100")}, "round_model_order")):
        with pytest.raises(ValueError, match=f"EnvConfig.{field}"):
            EnvConfig(**settings)
    config = EnvConfig(restart_overhead_s=[40.0, 60.0], restart_above_gpus=[8], round_s=10.0,
                       round_model_order=["V100", "K80"])  # TOML arrays
    assert config.restart_overhead_s == (40.0, 60.0) and config.restart_above_gpus == (8,)
    assert config.round_model_order == ("V100", "K80")
    hash(config)


def test_without_rounds_the_state_keeps_no_segments():
    """round_s = 0: no segment arrays and no round clock in the state (the programs are
    those of the env without rounds), and no preemption metric."""
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 10)])
    env = ClusterEnv(dataclasses.replace(EnvConfig(window=1, queue_capacity=2, running_capacity=2)))
    state, _ = env.reset(jax.random.key(0), to_device(EnvParams(cluster, ONE_GPU_CLASS)), to_device(jobs))
    assert state.segments is None and state.core.rounds is None
    assert "preemptions" not in env.metrics(state, to_device(EnvParams(cluster, ONE_GPU_CLASS)))


def test_registry_gives_round_policies_rounds_and_flat_schedulers_none():
    """Round policies run with the run's rounds (Gavel's 360 s when it sets none); a flat
    scheduler's env has no rounds even when the run sets them; a round policy cannot warm up
    a run or teach DRR."""
    assert policies.get("las").env_config(EnvConfig()).round_s == policies.ROUND_S
    assert policies.get("srtf").env_config(EnvConfig(round_s=120.0)).round_s == 120.0
    assert policies.get("first-fit").env_config(EnvConfig(round_s=120.0)).round_s == 0.0
    assert "las" not in policies.flat_names() and "first-fit" in policies.flat_names()
    with pytest.raises(ValueError, match="eval.warmup_scheduler 'srtf' is a round policy"):
        policies.get_flat("srtf", "eval.warmup_scheduler")
    # A round policy runs with the settings of its env: its round length, Tiresias's queues.
    config = EnvConfig(tiresias_thresholds_gpu_s=[60.0, 600.0], tiresias_promote_knob=2.0)
    assert config.tiresias_thresholds_gpu_s == (60.0, 600.0)
    bound = policies.get("tiresias").bound_policy(config)
    assert bound is policies.get("tiresias").bound_policy(config)  # cached: one compile
    assert bound is round_policies.with_settings(
        round_policies.tiresias, round_policies.RoundSettings(policies.ROUND_S, (60.0, 600.0), 2.0, 1))
    assert policies.get("first-fit").bound_policy(config) is policies.get("first-fit").policy
    with pytest.raises(ValueError, match="RoundSettings"):
        round_policies.las(None, None, None)
