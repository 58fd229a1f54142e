"""Preemption and scheduling rounds in the reference simulator (semantics.md, "Preemption
and rounds"), by hand and as properties of random episodes."""

import dataclasses
import math

import numpy as np
import pytest

from jaxsched import cluster as C
from jaxsched.reference import ROUND_POLICIES, ROUND_SETTINGS, RefConfig, ReferenceSim, max_min_shares, run
from jaxsched.types import GPU_MILLI, jobs_from_numpy

from tests.test_reference import ONE_GPU_CLASS, gpu_job, make_cluster, make_jobs


def one_gpu_nodes(count):
    return make_cluster(*[("V100", 1, 32000, 65536)] * count)


def run_rounds(cluster, jobs, config, round_policy, max_rounds=10_000):
    """The episode's sim after running it to done by ``round_policy`` (a name or a
    callable), checking after every round that no resource is overcommitted."""
    sim = ReferenceSim(cluster, jobs, ONE_GPU_CLASS, config)
    prioritise = ROUND_POLICIES.get(round_policy, round_policy)
    for _ in range(max_rounds):
        if sim.done:
            break
        sim.step_round(prioritise(sim))
        assert min(min(row) for row in sim.free_milli) >= 0
        assert min(sim.free_cpu) >= 0 and min(sim.free_mem) >= 0
    assert sim.done
    return sim


# ---------------------------------------------------------------- by hand

def test_las_gpu_two_nodes_three_jobs_round_100_restart_10_by_hand():
    # Two 1-GPU V100 nodes (speed 1); rounds every 100 s from t0 = 0; a restart costs 10 s.
    #   j0: 250 s of work, arrives 0    j1: 150 s, arrives 0    j2: 100 s, arrives 50
    # t=0   round: j0, j1 have attained 0 -> j0 on node 0 (0..250), j1 on node 1 (0..150).
    # t=50  j2 arrives and waits for the next round (no decision between rounds).
    # t=100 round: attained GPU-s j2 0, j0 100, j1 100 -> order j2, j0, j1 (tie: index).
    #       j2 fits nowhere; the running jobs after it are released from the last, j1 first:
    #       then j2 fits node 1 (first-fit) -> j1 is preempted with 150 - 100 = 50 s left;
    #       j0 keeps node 0. j2 runs 100..200 (a first start: no restart cost).
    # t=200 j2 ends, then the round: j1 (100) before j0 (200); j1 restarts on node 1:
    #       10 s of restart, then 50 s of work: 200..260. j0 runs on: ends 250.
    # Rounds decided: 0, 100, 200 (none is due after 260: nothing is left).
    cluster = one_gpu_nodes(2)
    jobs = make_jobs([gpu_job(0, 250), gpu_job(0, 150), gpu_job(50, 100)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(round_s=100, restart_overhead_s=10.0),
              round_policy="las-gpu")
    np.testing.assert_array_equal(out["start_s"], np.float32([0, 0, 100]))
    np.testing.assert_array_equal(out["end_s"], np.float32([250, 260, 200]))
    np.testing.assert_array_equal(out["node"], [0, 1, 1])
    np.testing.assert_array_equal(out["preemptions"], [0, 1, 0])
    np.testing.assert_array_equal(out["attained_s"], np.float32([250, 160, 100]))
    np.testing.assert_array_equal(out["attained_gpu_s"], np.float32([250, 160, 100]))
    assert out["segments"][1] == [(0, 0, 100, 1), (200, 210, 260, 1)]  # (start, run_from, stop, speed)
    m = out["metrics"]
    assert m["decisions"] == 3 and m["finished"] == 3 and m["placed"] == 3 and m["done"] == 1
    assert m["preemptions"] == 1 and m["preemptions_per_job"] == pytest.approx(1 / 3)
    assert m["restart_gpu_s"] == pytest.approx(10.0)
    assert m["jct_mean"] == pytest.approx((250 + 260 + 150) / 3)
    assert m["queue_delay_mean"] == pytest.approx((0 + 0 + 50) / 3)


def test_gavel_las_gives_the_max_min_share_over_time_received_by_hand():
    # One 2-GPU node, rounds every 100 s, no restart cost; Gavel's head start: 100 / 2 = 50 s.
    #   j0: 2 GPUs, 300 s, arrives 0    j1: 1 GPU, 150 s, arrives 0
    # Max-min shares (water-filling 2 GPUs over sizes 1 and 2): level 1, so x1 = 1, x0 = 1/2
    # while both are in the system. priority = x / (attained_s + 50).
    # t=0   j0 0.5/50 = 0.01 < j1 1/50 = 0.02: j1 runs (0..150); j0 does not fit the GPU left.
    #       (las-gpu would start j0 first: both have 0 GPU-seconds, ties by index.)
    # t=100 j0 0.5/50 = 0.01 > j1 1/150: j0 preempts j1 (50 s left) and runs 100..400.
    # t=200 j0 0.5/150 < j1 1/150: j1 preempts j0 (200 s left) and runs 200..250.
    # t=300 j0 alone (x = 1): 300..500; t=400 nothing waits: no round is decided.
    cluster = make_cluster(("V100", 2, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 300, num_gpu=2), gpu_job(0, 150)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(round_s=100), round_policy="las")
    np.testing.assert_array_equal(out["start_s"], np.float32([100, 0]))
    np.testing.assert_array_equal(out["end_s"], np.float32([500, 250]))
    np.testing.assert_array_equal(out["preemptions"], [1, 1])
    np.testing.assert_array_equal(out["attained_s"], np.float32([300, 150]))
    assert out["metrics"]["decisions"] == 4
    gpu_first = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(round_s=100), round_policy="las-gpu")
    assert gpu_first["start_s"][0] == 0


@pytest.mark.parametrize("sizes, gpus, shares", [
    ([1, 2], 2, [1, 1 / 2]),
    ([1, 8], 8, [1, 7 / 8]),
    ([4, 1, 1, 4], 6, [1 / 2, 1, 1, 1 / 2]),
    ([3, 5], 8, [1, 1]),  # the GPUs cover every job
    ([2, 2, 2], 3, [1 / 2, 1 / 2, 1 / 2]),
])
def test_max_min_shares_water_fill_the_gpus(sizes, gpus, shares):
    got = max_min_shares(sizes, gpus)
    np.testing.assert_array_equal(got, np.float32(shares))
    assert sum(s * x for s, x in zip(sizes, got)) == pytest.approx(min(gpus, sum(sizes)))


@pytest.mark.parametrize("knob, end_s, preemptions", [(1.0, [450, 320], [2, 1]), (0.0, [450, 220], [1, 0])])
def test_tiresias_queues_fifo_and_promotion_by_hand(knob, end_s, preemptions):
    # One 1-GPU node, rounds every 50 s, no restart cost, queues at 100 GPU-s (Q0 below, Q1
    # from it). priority = -2 * queue + running (a queue's running jobs first, then arrival).
    #   j0: 300 s, arrives 0      j1: 120 s, arrives 10
    # t=0   j0 (Q0) runs.
    # t=50  j0 Q0 running before j1 Q0 queued: j0 keeps (las-gpu would preempt it).
    # t=100 j0 reaches 100 GPU-s: Q1; j1 (Q0) preempts it (200 s left) and runs 100..220.
    # t=150 j0 waited 150 - 100 = 50 since its first start, < knob x 100 attained: Q1; j1 keeps.
    # knob 1:
    # t=200 j1 Q1 (100); j0 waited 200 - 100 = 100 >= 100: promoted to Q0, preempts j1 (20 s
    #       left) and runs 200..400.
    # t=250 j0 waited 100 < 150 attained: Q1, running; j1 waited 50 < 100: Q1, queued: j0 keeps.
    # t=300 j1 waited 100 >= 100: promoted, preempts j0 (100 s left): 300..320.
    # t=350 j0 alone: 350..450.
    # knob 0: at 200 both are in Q1, j1 running first: it ends at 220; j0 runs 250..450.
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 300), gpu_job(10, 120)])
    config = RefConfig(round_s=50, tiresias_thresholds_gpu_s=(100.0,), tiresias_promote_knob=knob)
    out = run_rounds(cluster, jobs, config, "tiresias").results()
    np.testing.assert_array_equal(out["start_s"], np.float32([0, 100]))
    np.testing.assert_array_equal(out["end_s"], np.float32(end_s))
    np.testing.assert_array_equal(out["preemptions"], preemptions)
    np.testing.assert_array_equal(out["attained_s"], np.float32([300, 120]))


def test_srtf_preempts_the_longer_job_and_the_restart_shifts_its_end():
    # One 1-GPU node, round 100 s, restart 10 s.
    # t=0   j0 (300 s) runs.   t=10 j1 (50 s) arrives, waits.
    # t=100 round: remaining j0 200, j1 50 -> j1 first; it preempts j0 (200 s left): 100..150.
    # t=150 j1 ends; the GPU idles until the next round.
    # t=200 round: j0 restarts: 200 + 10 + 200 = 410.
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 300), gpu_job(10, 50)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(round_s=100, restart_overhead_s=10.0),
              round_policy="srtf")
    np.testing.assert_array_equal(out["start_s"], np.float32([0, 100]))
    np.testing.assert_array_equal(out["end_s"], np.float32([410, 150]))
    np.testing.assert_array_equal(out["preemptions"], [1, 0])
    assert out["metrics"]["jct_mean"] == pytest.approx((410 + 140) / 2)
    assert out["segments"][0] == [(0, 0, 100, 1), (200, 210, 410, 1)]


def test_priority_classes_preempt_lower_classes_only_by_hand():
    # One 1-GPU node, round 100 s, restart 10 s; priority = 2 qos_class + running.
    #   j0: BE (class 0), 300 s, arrives 0    j1: LS (class 1), 250 s, arrives 50
    #   j2: LS (class 1), 100 s, arrives 60
    # t=0   j0 runs (0..300).
    # t=100 order j1 (2), j2 (2), j0 (1, running): j1 preempts j0 (200 s left), runs 100..350;
    #       j2 fits nowhere and the only running job, j1, is before it.
    # t=200, 300: j1 (3, running) before j2 (2): an LS job never preempts an LS job (las-gpu
    #       would: j2 has attained less).
    # t=400 j1 ended at 350: j2 (2) before j0 (0): j2 runs 400..500.
    # t=500 j0 restarts: 500 + 10 + 200 = 710. Rounds 0..500 decided (at 600 and 700 nothing
    #       waits: no decision).
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 300), gpu_job(50, 250), gpu_job(60, 100)])
    config = RefConfig(round_s=100, restart_overhead_s=10.0)
    out = run_rounds(cluster, jobs.replace(qos_class=np.int32([0, 1, 1])), config, "priority").results()
    np.testing.assert_array_equal(out["start_s"], np.float32([0, 100, 400]))
    np.testing.assert_array_equal(out["end_s"], np.float32([710, 350, 500]))
    np.testing.assert_array_equal(out["preemptions"], [1, 0, 0])
    assert out["segments"][0] == [(0, 0, 100, 1), (500, 510, 710, 1)]
    assert out["metrics"]["decisions"] == 6
    # One class (every job 0, as without a trace): running jobs always first, so no
    # preemption: FIFO, each job started at the first round after the GPU frees.
    fifo = run_rounds(cluster, jobs, config, "priority").results()
    np.testing.assert_array_equal(fifo["start_s"], np.float32([0, 300, 600]))
    np.testing.assert_array_equal(fifo["end_s"], np.float32([300, 550, 700]))
    assert not fifo["preemptions"].any()


def test_a_job_arriving_mid_round_waits_and_a_completion_at_a_round_frees_its_gpu_first():
    # One 1-GPU node, round 100 s, no restart cost. j0 runs 0..100; j1 arrives at 30 and
    # waits for the round at 100, where j0's end (same instant) has freed the GPU first;
    # j2 arrives exactly at the round at 200 and belongs to it, though j1 ends at 180 and
    # the GPU idles from 180 to 200.
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 100), gpu_job(30, 80), gpu_job(200, 10)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(round_s=100), round_policy="las-gpu")
    np.testing.assert_array_equal(out["start_s"], np.float32([0, 100, 200]))
    np.testing.assert_array_equal(out["end_s"], np.float32([100, 180, 210]))
    assert out["metrics"]["preemptions"] == 0 and out["metrics"]["decisions"] == 3


def alternate(sim):
    """A round policy that puts j1 first in rounds 1 and 3 and j0 first otherwise."""
    first = 1 if sim.decisions in (1, 3) else 0
    return [1.0 if j == first else 0.0 for j in range(sim.J)]


def test_a_preemption_during_the_restart_loses_it_and_the_next_start_pays_it_again():
    # Without the restart guard (Helios's rule). One 1-GPU node, round 100 s, restart 150 s;
    # two 200-s jobs arriving at 0; ``alternate``:
    #   t=0   j0 runs (0..200).
    #   t=100 j1 first: j0 preempted (100 s left); j1 runs 100..300 (first start).
    #   t=200 j0 first: j1 preempted (100 s left); j0 restarts: work from 350, end 450.
    #   t=300 j1 first: j0 preempted inside its restart (300 < 350): still 100 s left;
    #         j1 restarts: work from 450, end 550.
    #   t=400 j0 first: j1 preempted inside its restart; j0 restarts: 550, end 650.
    #   t=500, 600: j0 keeps running; j1 fits nowhere and there is no one after it.
    #   t=700 j1 restarts (j0 ended at 650): work from 850, end 950. Rounds 0..700 decided
    #         (at 800 and 900 nothing waits).
    # Restart time paid: j0 100 (cut) + 150, j1 100 (cut) + 150 = 500 GPU-seconds.
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 200), gpu_job(0, 200)])
    sim = run_rounds(cluster, jobs, RefConfig(round_s=100, restart_overhead_s=150.0, restart_guard=False), alternate)
    out = sim.results()
    np.testing.assert_array_equal(out["end_s"], np.float32([650, 950]))
    np.testing.assert_array_equal(out["preemptions"], [2, 2])
    assert out["segments"][0] == [(0, 0, 100, 1), (200, 350, 300, 1), (400, 550, 650, 1)]
    assert out["segments"][1] == [(100, 100, 200, 1), (300, 450, 400, 1), (700, 850, 950, 1)]
    assert out["metrics"]["restart_gpu_s"] == pytest.approx(500.0)
    assert out["metrics"]["decisions"] == 8
    np.testing.assert_array_equal(out["attained_s"], np.float32([100 + 100 + 250, 100 + 100 + 250]))


def test_the_restart_guard_keeps_a_restarted_job_until_it_has_run_as_long_as_its_restart():
    # The same jobs and policy with the guard (the default): a job restarted at t with cost
    # c keeps its GPU at every round before t + 2c, whatever its priority.
    #   t=0, 100, 200 as without it: j0 restarts at 200, work from 350, end 450, guarded
    #         until 500.
    #   t=300 j1 first, but j0 is guarded: it keeps the GPU and j1 stays queued.
    #   t=400 j0 first (and guarded). j0 ends at 450.
    #   t=500 j1 restarts: work from 650, end 750 (guarded until 800; nothing asks for it).
    # Each restart is paid once: 150 + 150 = 300 GPU-seconds, and 6 rounds decided.
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 200), gpu_job(0, 200)])
    out = run_rounds(cluster, jobs, RefConfig(round_s=100, restart_overhead_s=150.0), alternate).results()
    np.testing.assert_array_equal(out["end_s"], np.float32([450, 750]))
    np.testing.assert_array_equal(out["preemptions"], [1, 1])
    assert out["segments"][0] == [(0, 0, 100, 1), (200, 350, 450, 1)]
    assert out["segments"][1] == [(100, 100, 200, 1), (500, 650, 750, 1)]
    assert out["metrics"]["restart_gpu_s"] == pytest.approx(300.0)
    assert out["metrics"]["decisions"] == 6


def test_the_restart_guard_ignores_a_hold_and_ends_the_restart_livelock_of_las():
    # A held (-inf) restarting job is not preempted before it has run c past its restart.
    # And LAS with a restart cost far above the round (issue 56, item 9): restart time counts
    # as attained, so without the guard 3 jobs on 1 GPU preempt each other round after round
    # before any restart is paid; with it every job ends.
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 200), gpu_job(0, 200)])
    held = lambda sim: [-np.inf, 1.0] if sim.decisions == 3 else alternate(sim)  # noqa: E731  (j0 guarded at 3)
    out = run_rounds(cluster, jobs, RefConfig(round_s=100, restart_overhead_s=150.0), held).results()
    np.testing.assert_array_equal(out["end_s"], np.float32([450, 750]))
    jobs = make_jobs([gpu_job(0, 300), gpu_job(0, 300), gpu_job(0, 300)])
    config = RefConfig(round_s=100, restart_overhead_s=1000.0, restart_guard=False)
    out = run(cluster, jobs, ONE_GPU_CLASS, config, round_policy="las-gpu", max_steps=500)
    assert not np.isfinite(out["end_s"]).all() and out["metrics"]["decisions"] == 500
    out = run(cluster, jobs, ONE_GPU_CLASS, dataclasses.replace(config, restart_guard=True), round_policy="las-gpu",
              max_steps=500)
    assert np.isfinite(out["end_s"]).all() and out["metrics"]["decisions"] < 100


@pytest.mark.parametrize("nodes, num_gpu, cost_s", [(1, 8, 40.0), (2, 16, 60.0)])
def test_restart_cost_steps_by_job_size_and_a_gang_is_preempted_whole(nodes, num_gpu, cost_s):
    # Lucid's rule: 40 s, 60 s above 8 GPUs. A big job (one 8-GPU node, or a 16-GPU gang
    # over two) runs from 0; a 1-GPU job arriving at 50 has attained less (las-gpu) at the round at
    # 100 and needs GPU 0 of node 0: the big job is preempted whole (every part released;
    # 400 s left) and the small one runs 100..200. At 200 the big job restarts (on both
    # nodes again, for the gang): 200 + cost + 400.
    cluster = make_cluster(*[("V100", 8, 64000, 262144)] * nodes)
    jobs = make_jobs([gpu_job(0, 500, num_gpu=num_gpu, cpu_milli=8000), gpu_job(50, 100)])
    config = RefConfig(round_s=100, restart_overhead_s=(40.0, 60.0), restart_above_gpus=(8,), max_span=2)
    sim = run_rounds(cluster, jobs, config, "las-gpu")
    out = sim.results()
    np.testing.assert_array_equal(out["start_s"], np.float32([0, 100]))
    np.testing.assert_array_equal(out["end_s"], np.float32([200 + cost_s + 400, 200]))
    np.testing.assert_array_equal(out["preemptions"], [1, 0])
    assert out["metrics"]["restart_gpu_s"] == pytest.approx(num_gpu * cost_s)
    assert out["attained_gpu_s"][0] == np.float32(num_gpu * (100 + cost_s + 400))
    assert sim.free_milli == [[GPU_MILLI] * 8] * nodes  # everything given back


def test_a_held_job_is_preempted_and_stays_queued_until_released():
    # NaN or -inf holds a job back. j0 runs 0..100 of its 300 s; j1 (100 s) arrives at 50, so
    # a job waits at the rounds at 100 and 200, where both are held: j0 is preempted at 100
    # and the GPU idles. At 300 j0 (lower index) restarts with 200 s left (no cost), ending
    # at 500; j1 waits through the round at 400 and runs 500..600.
    def hold_all_twice(sim):
        return [np.nan if sim.decisions == 1 else -np.inf if sim.decisions == 2 else 0.0] * sim.J

    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 300), gpu_job(50, 100)])
    out = run_rounds(cluster, jobs, RefConfig(round_s=100), hold_all_twice).results()
    np.testing.assert_array_equal(out["end_s"], np.float32([500, 600]))
    np.testing.assert_array_equal(out["preemptions"], [1, 0])
    assert out["metrics"]["restart_gpu_s"] == 0


def test_a_held_running_job_is_not_preempted_while_nothing_waits():
    # A round where no job is queued is not decided (semantics.md, "The round clock"): the
    # policy that would hold j0 after its start is never asked again, and j0 runs 0..300.
    def hold_after_the_first(sim):
        return [np.nan if sim.decisions >= 1 else 0.0] * sim.J

    out = run_rounds(one_gpu_nodes(1), make_jobs([gpu_job(0, 300)]), RefConfig(round_s=100),
                     hold_after_the_first).results()
    np.testing.assert_array_equal(out["end_s"], np.float32([300]))
    assert out["metrics"]["decisions"] == 1 and out["metrics"]["preemptions"] == 0


def backlog_case():
    """One 1-GPU node, rounds of 100 s, las-gpu, every job measured: [ta, tb] = [0, 400], its
    quarters [0, 100] and [300, 400].
      j0: 400 s, arrives 0    j1: 100 s, arrives 250    j2: 10 s, arrives 400
    t=0   j0 runs.  t=250 j1 arrives and waits (until 300: outside both quarters).
    t=300 j1 (0 GPU-s) preempts j0 (300), which waits with 100 s left from 300; j1 runs 300..400.
    t=400 j1 ends; j2 (arriving now) runs 400..410 before j0.  t=500 j0 runs 500..600.
    The backlog of work: nothing in the first quarter; j0's 100 GPU-s of work left all through
    the last one, so backlog_work_growth = 100 * 100 / (100 s * 510 GPU-s of measured work)."""
    jobs = make_jobs([gpu_job(0, 400), gpu_job(250, 100), gpu_job(400, 10)])
    return one_gpu_nodes(1), jobs, 100.0 * 100.0 / (100.0 * 510.0)


def test_backlog_of_work_counts_a_preempted_jobs_work_left_while_it_waits():
    cluster, jobs, growth = backlog_case()
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(round_s=100, measured_jobs=3), round_policy="las-gpu")
    np.testing.assert_array_equal(out["start_s"], np.float32([0, 300, 400]))
    np.testing.assert_array_equal(out["end_s"], np.float32([600, 400, 410]))
    np.testing.assert_array_equal(out["preemptions"], [1, 0, 0])
    assert out["metrics"]["backlog_work_growth"] == pytest.approx(growth)


# ---------------------------------------------------------------- random episodes

def random_episode(seed, num_jobs=40):
    """Three 8-GPU nodes of different speeds and jobs of every kind (CPU-only, fractional,
    whole GPUs, gangs of up to 16), arriving over ~30 minutes, in priority classes 0 and 1."""
    rng = np.random.default_rng(seed)
    table = C._table([(f"n{i}", model, 8, 64000, 262144)
                      for i, model in enumerate(("V100", "T4", "V100"))])
    cluster = C.to_cluster(table, speeds={"V100": 1.0, "T4": 0.45})
    sizes = rng.choice([0, 1, 1, 2, 4, 8, 12, 16], num_jobs)
    gpu_milli = np.where(sizes == 1, rng.choice([300, 500, 1000], num_jobs), 1000)
    gpu_milli = np.where(sizes == 0, 0, gpu_milli)
    jobs = jobs_from_numpy(np.sort(rng.uniform(0, 1800, num_jobs)).astype(np.float32),
                           rng.uniform(10, 900, num_jobs).astype(np.float32),
                           sizes, gpu_milli, rng.integers(500, 4000, num_jobs),
                           rng.integers(512, 8192, num_jobs),
                           qos_class=rng.integers(0, 2, num_jobs))  # (drawn last: the rest as before)
    return cluster, jobs


@pytest.mark.parametrize("policy", sorted(ROUND_POLICIES))
@pytest.mark.parametrize("seed", [0, 1])
def test_every_job_does_its_work_exactly_once_under_preemption(policy, seed):
    cluster, jobs = random_episode(seed)
    config = RefConfig(round_s=120, restart_overhead_s=(20.0, 45.0), restart_above_gpus=(8,),
                       max_span=2, spread_penalty=0.8)
    sim = run_rounds(cluster, jobs, config, policy)
    out = sim.results()
    work = np.asarray(jobs.work_s)
    assert out["metrics"]["finished"] == sim.J_valid and out["metrics"]["preemptions"] > 0
    for j in range(sim.J_valid):
        segments = out["segments"][j]
        done = sum(max(float(stop) - float(run_from), 0.0) * float(s) for _, run_from, stop, s in segments)
        assert done == pytest.approx(float(work[j]), rel=1e-5, abs=1e-3), j
        # Segments follow one another: the first begins at the start, the last stops at the
        # end, each later one begins with the job's restart cost (by its size) and none
        # overlaps the one before.
        assert segments[0][0] == out["start_s"][j] and segments[-1][2] == out["end_s"][j]
        assert segments[0][1] == segments[0][0]
        cost = 45.0 if jobs.num_gpu[j] > 8 else 20.0
        for (_, _, stop, _), (start, run_from, _, _) in zip(segments, segments[1:]):
            assert start >= stop and run_from == np.float32(start + np.float32(cost))
        assert len(segments) == out["preemptions"][j] + 1
        held_s = sum(float(stop) - float(start) for start, _, stop, _ in segments)
        assert out["attained_s"][j] == pytest.approx(held_s, rel=1e-6)
        gpus = jobs.num_gpu[j] * jobs.gpu_milli[j] / GPU_MILLI
        assert out["attained_gpu_s"][j] == pytest.approx(gpus * held_s, rel=1e-6)
    # Everything taken was given back.
    assert sim.free_milli == [[GPU_MILLI] * 8] * 3 and sim.free_cpu == [64000] * 3
    restart_s = [min(float(run_from) - float(start), float(stop) - float(start))
                 for segs in out["segments"] for start, run_from, stop, _ in segs]
    assert sum(restart_s) > 0


def test_attained_service_of_a_job_never_preempted_is_its_work_over_its_speed():
    # Speed 0.45 (a T4): a job of 2 GPUs and 90 s of work holds them 200 s: 400 GPU-seconds.
    table = C._table([("n0", "T4", 8, 64000, 262144)])
    cluster = C.to_cluster(table, speeds={"T4": 0.45})
    out = run(cluster, make_jobs([gpu_job(0, 90, num_gpu=2)]), ONE_GPU_CLASS,
              RefConfig(round_s=100), round_policy="las-gpu")
    assert out["end_s"][0] == np.float32(np.float32(90) / np.float32(0.45))
    assert out["attained_s"][0] == out["end_s"][0]
    assert out["attained_gpu_s"][0] == np.float32(2 * out["end_s"][0])


@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "pack-resched"])
def test_round_s_zero_leaves_every_result_as_it_was(policy):
    # The settings of rounds and restarts do nothing while round_s is 0: results are equal
    # to the default config's, no job is preempted, and a job's attained service is the
    # time it held its resources (end - start, migration pauses included).
    cluster, jobs = random_episode(3)
    base = dict(max_span=2, resched_interval_s=300.0 if policy == "pack-resched" else 0.0,
                resched_util_threshold=0.9)  # (passes move jobs in this episode)
    default = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(**base), policy)
    costly = run(cluster, jobs, ONE_GPU_CLASS,
                 RefConfig(round_s=0, restart_overhead_s=(40.0, 60.0), restart_above_gpus=(8,), **base), policy)
    for key in ("outcome", "node", "gpu_bits", "span_node", "span_bits", "start_s", "end_s",
                "preemptions", "attained_s", "attained_gpu_s"):
        np.testing.assert_array_equal(default[key], costly[key], err_msg=key)
    assert default["metrics"] == costly["metrics"]
    assert not default["preemptions"].any()
    # Without rounds the metrics are today's, key for key (the env's have no preemption yet).
    assert not {"preemptions", "preemptions_per_job", "restart_gpu_s"} & set(default["metrics"])
    finished = np.isfinite(default["end_s"]) & (default["outcome"] == 1)
    np.testing.assert_allclose(default["attained_s"][finished],
                               (default["end_s"] - default["start_s"])[finished], rtol=1e-6)
    if policy == "pack-resched":
        assert default["metrics"]["migrations"] > 0


# ---------------------------------------------------------------- settings

@pytest.mark.parametrize("settings, field", [
    (dict(round_s=-1.0), "round_s"),
    (dict(round_s=math.nan), "round_s"),
    (dict(round_s=math.inf), "round_s"),
    (dict(round_s=60.0, mode="static"), "round_s"),
    (dict(round_s=60.0, resched_interval_s=300.0), "round_s"),
    (dict(restart_overhead_s=-5.0), "restart_overhead_s"),
    (dict(restart_overhead_s=math.nan), "restart_overhead_s"),
    (dict(restart_overhead_s=(40.0, -1.0), restart_above_gpus=(8,)), "restart_overhead_s"),
    (dict(restart_overhead_s=(40.0, 60.0)), "restart_above_gpus"),
    (dict(restart_overhead_s=(7.0, 30.0, 60.0), restart_above_gpus=(8, 8)), "restart_above_gpus"),
    (dict(tiresias_thresholds_gpu_s=(7200.0, 3250.0)), "tiresias_thresholds_gpu_s"),
    (dict(tiresias_thresholds_gpu_s=(0.0, 3250.0)), "tiresias_thresholds_gpu_s"),
    (dict(tiresias_promote_knob=-1.0), "tiresias_promote_knob"),
    (dict(tiresias_promote_knob=math.inf), "tiresias_promote_knob"),
])
def test_bad_round_and_restart_settings_are_refused_naming_the_field(settings, field):
    with pytest.raises(ValueError, match=field):
        RefConfig(**settings)


def test_rounds_take_priorities_not_flat_actions():
    cluster = one_gpu_nodes(1)
    jobs = make_jobs([gpu_job(0, 100)])
    sim = ReferenceSim(cluster, jobs, ONE_GPU_CLASS, RefConfig(round_s=100))
    assert not sim.action_mask().any()  # no flat action is legal with rounds
    with pytest.raises(ValueError, match="step_round"):
        sim.step(0)
    with pytest.raises(ValueError, match="round_policy"):
        run(cluster, jobs, ONE_GPU_CLASS, RefConfig(round_s=100))
    with pytest.raises(ValueError, match="round_s > 0"):
        ReferenceSim(cluster, jobs, ONE_GPU_CLASS, RefConfig()).step_round([0.0])


def test_like_keeps_rounds_off_for_a_config_without_them():
    class EnvLike:  # an env config from before rounds: every other setting, none of these
        pass

    env = EnvLike()
    for name, value in vars(RefConfig(window=3)).items():
        if name not in ROUND_SETTINGS:
            setattr(env, name, value)
    config = RefConfig.like(env)
    assert config.window == 3 and config.round_s == 0 and config.restart_overhead_s == (0.0,)
