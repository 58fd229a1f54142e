"""Hand-checked tests of the reference simulator alone (the oracle must be right first)."""

import numpy as np
import pytest

from jaxsched import cluster as C
from jaxsched.reference import RefConfig, ReferenceSim, _fgd_int_score, heuristic_action, run
from jaxsched.types import ALL_MODELS, OUTCOME_PLACED, OUTCOME_REJECTED, FragClasses, jobs_from_numpy

V100, T4 = C.model_id("V100"), C.model_id("T4")


def make_cluster(*rows, pad_nodes=None, max_gpus=8):
    """rows: (model, gpus, cpu_milli, mem_mib)."""
    table = C._table([(f"n{i}", *row) for i, row in enumerate(rows)])
    return C.to_cluster(table, pad_nodes=pad_nodes, max_gpus=max_gpus)


def make_jobs(rows, model_mask=None, deadline_s=None, pad_to=None):
    """rows: (arrival_s, work_s, num_gpu, gpu_milli, cpu_milli, mem_mib)."""
    cols = list(zip(*rows))
    return jobs_from_numpy(*[np.asarray(c) for c in cols], model_mask=model_mask,
                           deadline_s=deadline_s, pad_to=pad_to)


def frag_classes(*rows):
    """rows: (cpu_milli, gpu_milli, num_gpu, weight), every model allowed."""
    cpu, gpu, num, weight = (np.asarray(c) for c in zip(*rows))
    return FragClasses(cpu_milli=cpu.astype(np.int32), gpu_milli=gpu.astype(np.int32),
                       num_gpu=num.astype(np.int32),
                       model_mask=np.full(len(rows), ALL_MODELS, np.int32),
                       weight=weight.astype(np.int32))


ONE_GPU_CLASS = frag_classes((0, 1000, 1, 1))


def gpu_job(arrival_s, work_s, num_gpu=1, gpu_milli=1000, cpu_milli=1000, mem_mib=1024):
    return (arrival_s, work_s, num_gpu, gpu_milli, cpu_milli, mem_mib)


# ---------------------------------------------------------------- dynamic mode, by hand

def test_fifo_queueing_delay_matches_hand_computation():
    # One 1-GPU node, three 1-GPU jobs: they run back to back in arrival order.
    #   j0: arrives 0,  starts 0,   ends 100  -> delay 0,   JCT 100
    #   j1: arrives 10, starts 100, ends 150  -> delay 90,  JCT 140
    #   j2: arrives 20, starts 150, ends 180  -> delay 130, JCT 160
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(10, 50), gpu_job(20, 30)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "first-fit")
    np.testing.assert_array_equal(out["start_s"], np.float32([0, 100, 150]))
    np.testing.assert_array_equal(out["end_s"], np.float32([100, 150, 180]))
    m = out["metrics"]
    assert m["decisions"] == 3 and m["finished"] == 3 and m["done"] == 1 and m["unfinished"] == 0
    assert m["queue_delay_mean"] == pytest.approx((0 + 90 + 130) / 3)
    assert m["jct_mean"] == pytest.approx((100 + 140 + 160) / 3)
    assert m["jct_p50"] == pytest.approx(140)
    assert m["makespan_s"] == pytest.approx(180)
    assert m["throughput_per_h"] == pytest.approx(3 / (180 / 3600))
    # Bounded slowdown: 100/100, 140/50, 160/30.
    assert m["slowdown_mean"] == pytest.approx((1 + 140 / 50 + 160 / 30) / 3)
    assert m["gpu_alloc"] == pytest.approx(1.0)  # the only GPU is busy all along


def test_end_time_is_float32_start_plus_work_over_speed():
    # A T4 (speed 0.45) at a non-round start time: end must be float32 arithmetic exactly.
    # (Chosen so that float64 arithmetic rounded at the end gives a different float32.)
    cluster = make_cluster(("T4", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(3.7, 100.7), (3.7, 77.7, 0, 0, 1000, 1024)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "first-fit")
    t = np.float32(3.7)
    assert out["end_s"][0] == t + np.float32(100.7) / np.float32(0.45)
    assert out["end_s"][0] != np.float32(float(t) + float(np.float32(100.7)) / float(np.float32(0.45)))
    assert out["end_s"][1] == t + np.float32(77.7)  # CPU-only: speed does not apply


def test_time_weighted_alloc_and_fragmentation_by_hand():
    # One 1-GPU node, two half-GPU jobs and a CPU-only one at 150 s (the last arrival ends
    # the measurement interval [0, 150]); FGD class: one GPU at 600 milli.
    #   [0, 50):    free [500] -> class can't fit, F = 500, idle 500, alloc 500
    #   [50, 100):  free [0]   -> F = 0, idle 0, alloc 1000
    #   [100, 150): free [500] -> F = 500, idle 500, alloc 500
    # span 150 s, cluster 1000 milli.
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100, gpu_milli=500), gpu_job(50, 100, gpu_milli=500),
                      (150, 1, 0, 0, 1000, 1024)])
    out = run(cluster, jobs, frag_classes((0, 600, 1, 1)), RefConfig(), "first-fit")
    m = out["metrics"]
    assert m["measure_span_s"] == 150
    assert m["gpu_alloc"] == pytest.approx(100000 / 150000)
    assert m["work_alloc"] == pytest.approx(100000 / 150000)  # speed 1.0: the same
    assert m["frag_amount"] == pytest.approx(50000 / 150000)
    assert m["frag_rate"] == pytest.approx(1.0)
    # Jobs in the system: 1 on [0, 50), 2 on [50, 100), 1 on [100, 150).
    assert m["jobs_in_system"] == pytest.approx(200 / 150)


def test_measured_jobs_and_interval_by_hand():
    # One 1-GPU node, FIFO; jobs 1 and 2 are measured (warm-up 1, measured 2), so the
    # interval is [10, 20] (their arrivals):
    #   j0: 0-100, j1: arrives 10, runs 100-150, j2: arrives 20, runs 150-180; j3 at 200.
    # Over [10, 20): j0 runs, j1 waits -> 2 jobs in the system, 1 queued, GPU busy.
    # Once j2 has finished (180 s) every measured job has left: the episode ends before j3.
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(10, 50), gpu_job(20, 30), gpu_job(200, 10)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(warmup_jobs=1, measured_jobs=2), "first-fit")
    m = out["metrics"]
    assert m["done"] == 1 and m["measured_jobs"] == 2 and m["measured_finished"] == 2
    assert m["finished"] == 3 and m["unfinished"] == 1  # j3 never arrived
    assert m["jct_mean"] == pytest.approx((140 + 160) / 2)
    assert m["queue_delay_mean"] == pytest.approx((90 + 130) / 2)
    assert m["time_in_system_mean"] == pytest.approx(150)
    assert m["episode_jct_mean"] == pytest.approx((100 + 140 + 160) / 3)
    assert m["measure_span_s"] == 10 and m["gpu_alloc"] == pytest.approx(1.0)
    assert m["jobs_in_system"] == pytest.approx(2.0) and m["queue_len_mean"] == pytest.approx(1.0)
    assert m["backlog_growth"] == 0.0 and m["started_after_arrivals"] == 0


def test_completion_frees_resources_for_a_waiting_job_at_that_instant():
    # j1 arrives exactly when j0 ends: it starts then, with zero queueing delay.
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(100, 10)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "first-fit")
    assert out["start_s"][1] == np.float32(100)
    assert out["metrics"]["queue_delay_mean"] == 0.0


# ---------------------------------------------------------------- GPU rule inside a node

@pytest.mark.parametrize("gpu_rule, expected_bits", [
    # A(500) -> g0; B(700) -> g1; C(300): room on g0 (500), g1 (300), g2, g3 (1000)
    ("best-fit", [0b0001, 0b0010, 0b0010, 0b1100]),  # C takes the least free: g1
    ("first-fit", [0b0001, 0b0010, 0b0001, 0b1100]),  # C takes the lowest index: g0
])
def test_gpu_rule_chooses_gpus_inside_the_node(gpu_rule, expected_bits):
    # D (2 whole GPUs) always gets the lowest-index wholly free GPUs: g2, g3.
    cluster = make_cluster(("V100", 4, 64000, 262144))
    jobs = make_jobs([gpu_job(0, 1000, gpu_milli=500), gpu_job(1, 1000, gpu_milli=700),
                      gpu_job(2, 1000, gpu_milli=300), gpu_job(3, 1000, num_gpu=2)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(gpu_rule=gpu_rule), "first-fit")
    assert out["gpu_bits"].tolist() == expected_bits
    assert out["node"].tolist() == [0, 0, 0, 0]


def test_whole_gpu_jobs_take_the_lowest_index_wholly_free_gpus():
    # j0 takes g0; j1 (half GPU) takes g1 under best-fit (all equal, lowest index);
    # j2 (2 whole GPUs) must then get g2 and g3, and j3 (1 whole) waits: none left.
    # On a fresh 4-GPU node a 2-GPU job gets g0, g1 - not the last two.
    cluster = make_cluster(("V100", 4, 64000, 262144), ("V100", 4, 64000, 262144))
    jobs = make_jobs([gpu_job(0, 1000), gpu_job(1, 1000, gpu_milli=500), gpu_job(2, 1000, num_gpu=2),
                      gpu_job(3, 1000, num_gpu=2)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "first-fit")
    assert out["node"].tolist() == [0, 0, 0, 1]
    assert out["gpu_bits"].tolist() == [0b0001, 0b0010, 0b1100, 0b0011]


def test_fractional_jobs_never_overcommit_a_gpu():
    # Two 600-milli jobs cannot share one GPU: the second waits for the first to end.
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100, gpu_milli=600), gpu_job(0, 100, gpu_milli=600)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "best-fit")
    assert out["start_s"].tolist() == [0, 100]


# ---------------------------------------------------------------- failures and overflow

def test_job_that_fits_no_node_fails_at_arrival_and_is_counted():
    # Nodes have at most 2 GPUs; a 4-GPU job and a T4-only job (no T4 here) are unschedulable.
    cluster = make_cluster(("V100", 2, 32000, 65536), ("V100", 1, 32000, 65536))
    mask = np.array([ALL_MODELS, ALL_MODELS, 1 << T4, ALL_MODELS], np.int32)
    jobs = make_jobs([gpu_job(0, 10), gpu_job(1, 10, num_gpu=4), gpu_job(2, 10), gpu_job(3, 10)],
                     model_mask=mask)
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "first-fit")
    m = out["metrics"]
    assert m["failed"] == 2 and m["placed"] == 2 and m["finished"] == 2 and m["unfinished"] == 0
    assert out["outcome"].tolist() == [1, 0, 0, 1]
    assert out["node"].tolist()[1:3] == [-1, -1]
    assert np.isinf(out["start_s"][1]) and np.isinf(out["end_s"][2])


def test_static_mode_fails_a_job_that_does_not_fit_now():
    # No departures: the second 1-GPU job finds the only GPU taken and fails;
    # the CPU-only job after it still fits.
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(5, 100), gpu_job(6, 100), (7, 100, 0, 0, 1000, 1024)])
    sim = ReferenceSim(cluster, jobs, ONE_GPU_CLASS, RefConfig(mode="static"))
    assert sim.window() == [0] and not sim.action_legal(sim.wait_action())
    sim.step(sim.wait_action())  # wait is illegal in static mode: counted, changes nothing
    assert sim.window() == [0] and sim.invalid_actions == 1
    while not sim.done:
        sim.step(heuristic_action(sim, "first-fit"))
    out = sim.results()
    m = out["metrics"]
    assert out["outcome"].tolist() == [1, 0, 1]
    assert out["start_s"].tolist() == [5, np.inf, 7]
    assert np.isinf(out["end_s"]).all()  # placed jobs hold their resources forever
    assert m["failed"] == 1 and m["placed"] == 2 and m["finished"] == 2 and m["unfinished"] == 0
    assert m["decisions"] == 3
    assert m["gpu_alloc"] == 1.0 and m["jct_mean"] == 0.0


def test_static_fragmentation_snapshot_by_hand():
    # 2 GPUs, one half-GPU job on g0 -> free [500, 1000], idle 1500, CPU free 31000.
    # Class A (1 GPU at 600, p=0.5) fits (g1): F_A = 500 (g0 is too small for it).
    # Class B (CPU-only, p=0.5) can't use GPUs: F_B = 1500.  F = 1000.
    cluster = make_cluster(("V100", 2, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100, gpu_milli=500)])
    classes = frag_classes((0, 600, 1, 1), (1000, 0, 0, 1))
    m = run(cluster, jobs, classes, RefConfig(mode="static"), "best-fit")["metrics"]
    assert m["gpu_alloc"] == pytest.approx(500 / 2000)
    assert m["frag_amount"] == pytest.approx(1000 / 2000)
    assert m["frag_rate"] == pytest.approx(1000 / 1500)


def test_queue_overflow_drops_and_counts():
    # Q = 2 and four 1-GPU jobs at t = 0: all arrivals at an instant are processed before the
    # first decision, so j2 and j3 find the queue full and are dropped.
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 10) for _ in range(4)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(queue_capacity=2), "first-fit")
    m = out["metrics"]
    assert m["dropped_overflow"] == 2 and m["finished"] == 2 and m["unfinished"] == 0
    assert out["outcome"].tolist() == [1, 1, 0, 0]


def test_running_capacity_blocks_placement_until_a_completion():
    # R = 1 on a 2-GPU node: j1 fits at t=0 but the running set is full, so it waits for j0.
    cluster = make_cluster(("V100", 2, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(0, 100)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(running_capacity=1), "first-fit")
    assert out["start_s"].tolist() == [0, 100]
    assert out["metrics"]["running_full"] == 1


# ---------------------------------------------------------------- actions

def test_wait_is_legal_only_while_a_future_event_exists():
    cluster = make_cluster(("V100", 1, 32000, 65536))
    alone = ReferenceSim(cluster, make_jobs([gpu_job(0, 10)]), ONE_GPU_CLASS, RefConfig(window=2))
    assert not alone.action_legal(alone.wait_action())  # nothing running, nothing to come
    alone.step(alone.wait_action())
    assert alone.invalid_actions == 1 and alone.decisions == 1
    assert alone.window() == [0] and alone.time_s == 0  # an illegal action changed nothing

    pair = ReferenceSim(cluster, make_jobs([gpu_job(0, 10), gpu_job(50, 10)]), ONE_GPU_CLASS,
                        RefConfig(window=2))
    assert pair.action_legal(pair.wait_action())
    pair.step(pair.wait_action())
    assert pair.invalid_actions == 0
    assert pair.time_s == 50 and pair.window() == [0, 1]  # the clock jumped to the arrival


def test_invalid_action_is_counted_and_treated_as_wait():
    # Slot 1 is empty, so placing it is illegal; wait is legal (j1 arrives at 50).
    cluster = make_cluster(("V100", 1, 32000, 65536))
    sim = ReferenceSim(cluster, make_jobs([gpu_job(0, 10), gpu_job(50, 10)]), ONE_GPU_CLASS,
                       RefConfig(window=2))
    N = sim.N
    assert sim.window() == [0] and not sim.action_legal(1 * N + 0)
    sim.step(1 * N + 0)
    assert sim.invalid_actions == 1 and sim.time_s == 50 and sim.window() == [0, 1]
    assert not sim.action_legal(-1) and not sim.action_legal(sim.wait_action() + 1)


def test_reject_removes_the_job_and_counts_it():
    cluster = make_cluster(("V100", 1, 32000, 65536))
    sim = ReferenceSim(cluster, make_jobs([gpu_job(0, 10), gpu_job(0, 20)]), ONE_GPU_CLASS,
                       RefConfig(window=2))
    K, N = sim.K, sim.N
    assert not sim.action_legal(sim.wait_action())  # nothing running, nothing to come
    sim.step(K * N + 0)  # reject slot 0 (j0)
    assert sim.window() == [1]
    assert not sim.action_legal(K * N + 1)  # slot 1 is now empty
    while not sim.done:
        sim.step(heuristic_action(sim, "first-fit"))
    out = sim.results()
    assert out["outcome"].tolist() == [2, 1]
    assert out["start_s"][1] == 0  # j1 is placed at once
    m = out["metrics"]
    assert m["rejected"] == 1 and m["finished"] == 1 and m["unfinished"] == 0


def test_step_after_done_is_a_no_op_and_not_counted():
    cluster = make_cluster(("V100", 1, 32000, 65536))
    sim = ReferenceSim(cluster, make_jobs([gpu_job(0, 10)]), ONE_GPU_CLASS, RefConfig())
    sim.step(0)
    assert sim.done
    sim.step(0)
    sim.step(sim.wait_action())
    assert sim.decisions == 1 and sim.invalid_actions == 0
    assert not sim.place_mask().any()


def test_step_cap_leaves_the_episode_unfinished_and_flags_it():
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(10, 100)])
    m = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "first-fit", max_steps=1)["metrics"]
    # Placing j0 at t=0 runs the clock to the next decision point, t=100 (j0 ended, j1 fits);
    # the cap stops there: j0 finished, j1 was never placed.
    assert m["done"] == 0 and m["decisions"] == 1 and m["placed"] == 1
    assert m["finished"] == 1 and m["unfinished"] == 1
    assert m["gpu_alloc"] == pytest.approx(1.0)  # over [0, 100) the GPU was busy


# ---------------------------------------------------------------- queue order

def test_sjf_orders_the_window_by_work_and_keeps_index_order_on_ties():
    # The node is busy until 100, so jobs 1..4 pile up in the queue.
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(1, 30), gpu_job(2, 10), gpu_job(3, 30), gpu_job(4, 5)])
    sim = ReferenceSim(cluster, jobs, ONE_GPU_CLASS, RefConfig(queue_order="sjf"))
    sim.step(0)  # place j0, then the clock runs to 100
    assert sim.time_s == 100
    assert sim.window() == [4, 2, 1, 3]


def test_edf_orders_the_window_by_deadline():
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(1, 10), gpu_job(2, 10), gpu_job(3, 10)],
                     deadline_s=np.float32([1000, np.inf, 300, 200]))
    sim = ReferenceSim(cluster, jobs, ONE_GPU_CLASS, RefConfig(queue_order="edf"))
    sim.step(0)
    assert sim.window() == [3, 2, 1]


# ---------------------------------------------------------------- heuristics

def test_best_fit_prefers_the_tightest_node_and_first_fit_the_lowest_index():
    # Job: 1 GPU, 4000 CPU. Scores:
    #   n0 (8 GPU, 96000 CPU): int(100*(1 - (0.5*92000/128000 + 0.5*7000/8000))) = int(20.31) = 20
    #   n1 (2 GPU, 16000 CPU): int(100*(1 - (0.5*12000/128000 + 0.5*1000/8000))) = int(89.06) = 89
    cluster = make_cluster(("V100", 8, 96000, 393216), ("V100", 2, 16000, 65536))
    jobs = make_jobs([gpu_job(0, 10, cpu_milli=4000)])
    assert run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "best-fit")["node"][0] == 1
    assert run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "first-fit")["node"][0] == 0


def test_best_fit_breaks_ties_by_node_rank():
    cluster = make_cluster(*[("V100", 2, 32000, 65536)] * 3)
    jobs = make_jobs([gpu_job(0, 10)])
    assert run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "best-fit")["node"][0] == 0
    ranked = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "best-fit", node_rank=np.array([2, 0, 1]))
    assert ranked["node"][0] == 1


def test_window_skips_jobs_that_fit_nowhere_and_the_strict_window_does_not():
    # At t=1 the queue is [j1 (2 GPUs, can't fit: one GPU busy), j2 (1 GPU, fits)].
    cluster = make_cluster(("V100", 2, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(1, 10, num_gpu=2), gpu_job(1, 10)])
    sim = ReferenceSim(cluster, jobs, ONE_GPU_CLASS, RefConfig(window=4))
    sim.step(heuristic_action(sim, "first-fit"))  # j0 at t=0
    assert sim.time_s == 1 and sim.queue == [1, 2] and sim.window() == [2]
    assert heuristic_action(sim, "best-fit") == 0 * sim.N + 0
    # The strict head-of-queue window shows j1 too; heuristics backfill within it.
    strict = ReferenceSim(cluster, jobs, ONE_GPU_CLASS, RefConfig(window=4, backfill=False))
    strict.step(heuristic_action(strict, "first-fit"))
    assert strict.window() == [1, 2]
    mask = strict.place_mask()
    assert not mask[0].any() and mask[1, 0]
    assert heuristic_action(strict, "best-fit") == 1 * strict.N + 0


def test_a_starving_job_reserves_the_node_it_fits_first():
    # Two 2-GPU nodes: n0 busy until 100 (one GPU) and 110 (the other), n1 one GPU until 300.
    # j3 needs a whole node from t=5, and 1-GPU jobs (25 s) arrive every 10 s from t=10.
    # Greedy backfilling (no reservation) lets them take every GPU that frees, so j3 waits
    # until they stop (325 s). With reserve_after_s = 50, j3 reserves n0 at 55 s (the node
    # it fits first, at 110) and nothing else starts there until j3 does, at 110.
    cluster = make_cluster(("V100", 2, 32000, 65536), ("V100", 2, 32000, 65536))
    rows = [gpu_job(0, 100), gpu_job(0, 110), gpu_job(0, 300), gpu_job(5, 10, num_gpu=2)]
    rows += [gpu_job(10 + 10 * i, 25) for i in range(30)]
    jobs = make_jobs(rows)
    greedy = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(reserve_after_s=np.inf), "first-fit")
    guarded = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(reserve_after_s=50.0), "first-fit")
    assert greedy["metrics"]["reservations"] == 0 and greedy["start_s"][3] == 325
    assert guarded["metrics"]["reservations"] >= 1
    assert guarded["start_s"][3] == 110 and guarded["node"][3] == 0
    small = np.arange(len(rows)) >= 4
    on_n0 = small & (guarded["node"] == 0) & (guarded["start_s"] >= 55) & (guarded["start_s"] <= 110)
    assert not on_n0.any() and (small & (greedy["node"] == 0) & (greedy["start_s"] == 100)).any()


# ---------------------------------------------------------------- the other registry heuristics

def test_spread_and_dot_product_by_hand():
    # 1 GPU and 4 cores on n0 (8 GPUs, 96 cores) or n1 (2 GPUs, 16 cores):
    #   spread: n0 int(100 * (0.5*92000/128000 + 0.5*7000/8000)) = int(79.69) = 79,
    #           n1 int(100 * (0.5*12000/128000 + 0.5*1000/8000)) = int(10.94) = 10 -> n0;
    #   dot-product: n0 dot = 96000*4000/128000^2 + 8000*1000/8000^2 = 0.1484 -> int(92.58) = 92,
    #                n1 dot = 16000*4000/128000^2 + 2000*1000/8000^2 = 0.0352 -> int(98.24) = 98 -> n1.
    cluster = make_cluster(("V100", 8, 96000, 393216), ("V100", 2, 16000, 65536))
    jobs = make_jobs([gpu_job(0, 10, cpu_milli=4000)])
    assert run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "spread")["node"][0] == 0
    assert run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "dot-product")["node"][0] == 1
    # 16 cores, no GPU, on n0 (no GPU, 64 cores) or n1 (8 free GPUs, 32 cores):
    #   best-fit: n0 int(100 * (1 - 0.5*48000/128000)) = 81, n1 int(100 * (1 - 0.0625 - 0.5)) = 43 -> n0;
    #   dot-product ignores the unrequested GPUs: n0 int(100 * (1 - 0.0625/2)) = 96,
    #   n1 int(100 * (1 - 0.03125/2)) = 98 -> n1.
    cluster = make_cluster(("V100", 0, 64000, 65536), ("V100", 8, 32000, 65536))
    jobs = make_jobs([(0, 10, 0, 0, 16000, 1024)])
    assert run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "best-fit")["node"][0] == 0
    assert run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "dot-product")["node"][0] == 1


def test_gpu_packing_tiers_by_hand():
    # Static mode, n0 4 GPUs, n1 2 GPUs, n2 8 GPUs, all empty at first.
    #   j0 0.5: every node empty -> tier 3 max(33 - g, g): 29, 31, 25 -> n1 (g0 -> 500 free)
    #   j1 0.4: n1's tightest GPU with room (500) is partly used -> tier 1
    #           max(100 - (500*100//1000)//10, 50) = 95 -> n1 (g0 -> 100 free)
    #   j2 1 GPU: n1 has a used GPU -> tier 2 max(50 - 1, 33) = 49 -> n1 g1
    #   j3 2 GPUs: n1 is full; n0 29, n2 25 -> n0 g0 g1
    #   j4 0.3: n0's tightest GPU with room is wholly free -> tier 2, 49 -> n0 g2
    #   j5 CPU-only: 0 everywhere -> the lowest rank, n0
    cluster = make_cluster(("V100", 4, 64000, 262144), ("V100", 2, 64000, 262144), ("V100", 8, 64000, 262144))
    jobs = make_jobs([gpu_job(0, 10, gpu_milli=500), gpu_job(1, 10, gpu_milli=400), gpu_job(2, 10),
                      gpu_job(3, 10, num_gpu=2), gpu_job(4, 10, gpu_milli=300), (5, 10, 0, 0, 1000, 1024)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(mode="static"), "gpu-packing")
    assert out["node"].tolist() == [1, 1, 1, 0, 0, 0]
    assert out["gpu_bits"].tolist() == [0b1, 0b1, 0b10, 0b11, 0b100, 0]



def test_reserving_packing_by_hand():
    # Static mode; n0 V100 8 GPUs (speed 1.0: high-end), n1 T4 2 GPUs, n2 P100 2 GPUs (weak),
    # n3 a CPU-only node (weak, though the CPU "model" has speed 1.0). Jobs of >= 2 GPUs go
    # high-end, the rest weak; gpu-packing inside the pool, then the least allocated share.
    #   j0 2 GPUs: high-end n0 (gpu-packing alone: an empty 2-GPU node, 31 against 25) g0 g1
    #   j1 0.5: n1, n2 both empty, 31, share 0 -> rank: n1 g0 (500 free)
    #   j2 1 GPU: n1 used (49) against n2 empty (31) -> n1 g1
    #   j3 1 GPU: n1 has no wholly free GPU; n2 -> g0
    #   j4 0.5: n1's partly used g0 (500 free): tier 1, 95; n2 49 -> n1 g0
    #   j5 2 GPUs: n0 g2 g3;  j6 1 GPU: the weak pool's last GPU, n2 g1
    #   j7 1 GPU: the weak pool is full: falls back to n0 (g4)
    #   j8 CPU-only: packing 0 everywhere in its pool; n1 and n2 are fully allocated, n3 (no
    #      GPUs) counts 0 -> n3
    cluster = make_cluster(("V100", 8, 64000, 262144), ("T4", 2, 64000, 262144),
                           ("P100", 2, 64000, 262144), ("CPU", 0, 64000, 262144))
    jobs = make_jobs([gpu_job(0, 10, num_gpu=2), gpu_job(1, 10, gpu_milli=500), gpu_job(2, 10),
                      gpu_job(3, 10), gpu_job(4, 10, gpu_milli=500), gpu_job(5, 10, num_gpu=2),
                      gpu_job(6, 10), gpu_job(7, 10), (8, 10, 0, 0, 1000, 1024)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(mode="static"), "r&p")
    assert out["node"].tolist() == [0, 1, 1, 2, 1, 0, 2, 0, 3]
    assert out["gpu_bits"].tolist() == [0b11, 0b1, 0b10, 0b1, 0b1, 0b1100, 0b10, 0b10000, 0]
    assert run(cluster, jobs, ONE_GPU_CLASS, RefConfig(mode="static"), "gpu-packing")["node"][0] == 1

def test_gpu_clustering_uses_exact_job_classes():
    # Static mode, two 2-GPU nodes. Score: 25 * (8000 - free) // 8000 + class bonus.
    #   j0 0.5: both 18 + 25 (no GPU job) = 43 -> n0 (rank), g0
    #   j1 0.5: n0 20 + 75 (only "share") = 95, n1 43 -> n0, g0 (now full)
    #   j2 1 GPU: n0 21 + 0 (only another class) = 21, n1 43 -> n1. Read off the GPUs, n0's
    #      full g0 would look like a "1 GPU" job: 21 + 75.
    #   j3 0.5: n0 21 + 75 = 96, n1 21 + 0 -> n0
    cluster = make_cluster(("V100", 2, 32000, 65536), ("V100", 2, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 10, gpu_milli=500), gpu_job(1, 10, gpu_milli=500), gpu_job(2, 10),
                      gpu_job(3, 10, gpu_milli=500)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(mode="static"), "gpu-clustering")
    assert out["node"].tolist() == [0, 0, 1, 0]
    # Dynamic mode: a class leaves with its job. j0 (1 GPU) runs on n0 over [0, 10); at 20
    # n0 hosts nothing again, so the half-GPU j1 scores 18 + 25 on both nodes -> n0 (rank).
    jobs = make_jobs([gpu_job(0, 10), gpu_job(20, 10, gpu_milli=500)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "gpu-clustering")
    assert out["node"].tolist() == [0, 0]


def test_fgd_node_score_and_gpu_choice_by_hand():
    # Target workload: only 0.5-GPU jobs with 1 core. Static mode, n0 2 GPUs / 32 cores,
    # n1 1 GPU / 8 cores.
    #   j0 0.4: no GPU becomes too small for 0.5 anywhere -> delta 0 -> 50 on every GPU;
    #      n0 by rank, GPU g0 (tie, lowest index) -> n0 free [600, 1000].
    #   j1 0.2: on n0 g0 -> [400, 1000]: 400 too small, delta -400 -> int(100 sigmoid(-0.4)) = 40;
    #      on n0 g1 -> [600, 800]: delta 0 -> 50; n1 -> [800]: 50. n0 (rank) on g1, where
    #      best-fit would take g0 (least free).
    #   j2 7.5 cores, no GPU: n0 keeps 22.5 cores -> 50; n1 would keep 0.5 < 1 core, so its
    #      1000 idle milli become fragment: delta -1000 -> int(100 sigmoid(-1)) = 26.
    cluster = make_cluster(("V100", 2, 32000, 65536), ("V100", 1, 8000, 65536))
    only_half = frag_classes((1000, 500, 1, 1))
    cpu_only = (2, 10, 0, 0, 7500, 1024)
    jobs = make_jobs([gpu_job(0, 10, gpu_milli=400), gpu_job(1, 10, gpu_milli=200), cpu_only])
    out = run(cluster, jobs, only_half, RefConfig(mode="static", gpu_rule="fgd"), "fgd")
    assert out["node"].tolist() == [0, 0, 0]
    assert out["gpu_bits"].tolist() == [0b01, 0b10, 0]
    out = run(cluster, jobs, only_half, RefConfig(mode="static", gpu_rule="best-fit"), "fgd")
    assert out["gpu_bits"].tolist() == [0b01, 0b01, 0]
    # The CPU-only job alone, with n1 ranked first: the score (50 vs 26) still picks n0.
    out = run(cluster, make_jobs([cpu_only]), only_half, RefConfig(mode="static", gpu_rule="fgd"), "fgd",
              node_rank=np.array([1, 0]))
    assert out["node"][0] == 0


def test_fgd_integer_score_is_float32_like_the_env():
    # int(100 * sigmoid(delta / 1000)) in float32 (checked against jaxsched.sim.frag.fgd_score):
    # delta -1.2e-4 gives exp(1.2e-7) = 1 + 2^-23, and 1 + that rounds to 2 (ties to even):
    # exactly 0.5 -> 50 (NumPy's float32 exp is one ulp high there: 49). From about -1.8e-4
    # on the sum no longer rounds back to 2: 49.
    assert [_fgd_int_score(np.float32(d)) for d in (0, -1.2e-4, -2e-4, 100, -300, -400, -1000)] == \
        [50, 50, 49, 52, 42, 40, 26]


def test_buddy_gpu_rule_keeps_multi_gpu_jobs_in_aligned_blocks():
    # One 8-GPU node, static mode: j0 1 GPU -> g0; j1 2 GPUs: block [0, 2) has one free GPU,
    # so block [2, 4); j2 1 GPU -> g1; j3 3 GPUs (blocks of 4): [0, 4) is full -> g4 g5 g6.
    # best-fit's rule takes the lowest-index free GPUs instead: g1 g2 for j1, g3 for j2.
    cluster = make_cluster(("V100", 8, 96000, 393216))
    jobs = make_jobs([gpu_job(0, 10), gpu_job(1, 10, num_gpu=2), gpu_job(2, 10), gpu_job(3, 10, num_gpu=3)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(mode="static", gpu_rule="buddy"), "first-fit")
    assert out["gpu_bits"].tolist() == [0b1, 0b1100, 0b10, 0b1110000]
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(mode="static"), "first-fit")
    assert out["gpu_bits"].tolist() == [0b1, 0b110, 0b1000, 0b1110000]
    # No aligned block with room: on a 4-GPU node g0 and g2 are busy when the 2-GPU j3 can
    # start (t = 10, j1 done), so it takes the lowest-index free GPUs, g1 and g3.
    cluster = make_cluster(("V100", 4, 64000, 262144))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(0, 10), gpu_job(0, 100), gpu_job(0, 10, num_gpu=2)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(gpu_rule="buddy"), "first-fit")
    assert out["gpu_bits"].tolist() == [0b1, 0b10, 0b100, 0b1010]
    assert out["start_s"][3] == 10


ELASTICFLOW = RefConfig(queue_order="edf", gpu_rule="buddy")


def test_elasticflow_rejects_a_job_that_can_no_longer_meet_its_deadline():
    # A T4 (speed 0.45) runs j0 (work 100, deadline 100) in 222 s: hopeless, rejected at once.
    cluster = make_cluster(("T4", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(0, 100)], deadline_s=np.float32([100, np.inf]))
    out = run(cluster, jobs, ONE_GPU_CLASS, ELASTICFLOW, "elasticflow")
    assert out["outcome"].tolist() == [OUTCOME_REJECTED, OUTCOME_PLACED]
    assert out["metrics"]["rejected"] == 1


def test_elasticflow_waits_for_a_node_that_meets_the_deadline():
    # n0 T4 (0.45), n1 A10 (1.1). j0 (work 11, deadline 11) meets it only on n1 (ends at 10).
    # j1 and j2 (work 110, deadline 165) would miss it on n0 (244 s) and wait for n1:
    # j1 gets it at 10 (ends 110 <= 165); at 110 j2 would end at 210 on n1: hopeless, rejected.
    cluster = make_cluster(("T4", 1, 32000, 65536), ("A10", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 11), gpu_job(0, 110), gpu_job(0, 110)],
                     deadline_s=np.float32([11, 165, 165]))
    out = run(cluster, jobs, ONE_GPU_CLASS, ELASTICFLOW, "elasticflow")
    assert out["outcome"].tolist() == [OUTCOME_PLACED, OUTCOME_PLACED, OUTCOME_REJECTED]
    assert out["node"].tolist()[:2] == [1, 1]
    assert out["start_s"].tolist()[:2] == [0, 10]


def test_hops_weighs_speed_against_packing_by_queue_pressure():
    # n0 T4 (0.45) 1 GPU / 8 cores, n1 A10 (1.1) 8 GPUs / 96 cores; jobs 1 GPU, no CPU; K = 3.
    #   speed_score: n0 floor(100 * 0.45 / 1.1) = 40, n1 100; best_fit_score: n0 96, n1 18.
    #   One queued job (q = 1): 2 * speed + 1 * best-fit: n0 176, n1 218 -> n1, the fast model.
    #   Three queued (q = 3): best-fit only -> n0 for the first; then n0 is full.
    cluster = make_cluster(("T4", 1, 8000, 65536), ("A10", 8, 96000, 393216))
    config = RefConfig(window=3)
    out = run(cluster, make_jobs([gpu_job(0, 10, cpu_milli=0)]), ONE_GPU_CLASS, config, "hops")
    assert out["node"].tolist() == [1]
    out = run(cluster, make_jobs([gpu_job(0, 10, cpu_milli=0)] * 3), ONE_GPU_CLASS, config, "hops")
    assert out["node"].tolist() == [0, 1, 1]


def test_hops_fills_partly_used_gpus_with_the_smallest_job_first():
    # Two 2-GPU nodes, K = 3. j0 (0.3) lands on n0 g0 -> 700 free. At t = 1 the window is
    # [j1 (1 GPU), j2 (0.6), j3 (0.5)]: j2 and j3 both fit g0; the smaller, j3, goes first
    # (g0 -> 200 free), so j2 no longer fits there. Then by latency ratio (all equal) j1,
    # on n0 (q = 2: 100 + 2*86 beats n1's 100 + 2*81), and j2 on n1.
    cluster = make_cluster(("V100", 2, 32000, 65536), ("V100", 2, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 1000, gpu_milli=300, cpu_milli=0), gpu_job(1, 50, cpu_milli=0),
                      gpu_job(1, 50, gpu_milli=600, cpu_milli=0), gpu_job(1, 50, gpu_milli=500, cpu_milli=0)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(window=3), "hops")
    assert out["node"].tolist() == [0, 0, 1, 0]
    assert out["gpu_bits"].tolist() == [0b01, 0b10, 0b01, 0b01]


def test_hops_serves_the_largest_latency_ratio_first():
    # One GPU, busy with j0 over [0, 100). At 100: j1 (arrived 0, work 1000) has ratio
    # (100 + 1000) / 1000 = 1.1, j2 (arrived 50, work 10) (50 + 10) / 10 = 6: j2 first.
    cluster = make_cluster(("V100", 1, 32000, 65536))
    jobs = make_jobs([gpu_job(0, 100), gpu_job(0, 1000), gpu_job(50, 10)])
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "hops")
    assert out["start_s"].tolist() == [0, 110, 100]


def test_padding_nodes_and_jobs_are_ignored():
    cluster = make_cluster(("V100", 1, 32000, 65536), pad_nodes=3)
    jobs = make_jobs([gpu_job(0, 10), gpu_job(10, 10)], pad_to=5)
    out = run(cluster, jobs, ONE_GPU_CLASS, RefConfig(), "best-fit")
    assert out["node"].tolist() == [0, 0, -1, -1, -1]
    m = out["metrics"]
    assert m["jobs_total"] == 2 and m["finished"] == 2 and m["unfinished"] == 0
    assert m["gpu_alloc"] == pytest.approx(1.0)  # padding nodes add no capacity


def test_random_workload_conserves_resources_and_accounts_for_every_job():
    rng = np.random.default_rng(0)
    cluster = C.to_cluster(C.preset(8))
    n = 120
    num_gpu = rng.choice([0, 1, 1, 2, 4, 8], n)
    gpu_milli = np.where(num_gpu == 1, rng.choice([200, 500, 1000], n), np.where(num_gpu == 0, 0, 1000))
    jobs = jobs_from_numpy(np.sort(rng.uniform(0, 500, n)), rng.uniform(1, 300, n), num_gpu, gpu_milli,
                           rng.integers(500, 20000, n), rng.integers(500, 60000, n))
    classes = frag_classes((0, 500, 1, 1), (0, 1000, 2, 1))
    for policy in ("first-fit", "best-fit"):
        sim = ReferenceSim(cluster, jobs, classes, RefConfig(window=4, queue_capacity=16))
        while not sim.done:
            sim.step(heuristic_action(sim, policy))
            assert all(0 <= f <= 1000 for row in sim.free_milli for f in row)
            assert all(c >= 0 for c in sim.free_cpu) and all(m >= 0 for m in sim.free_mem)
        m = sim.results()["metrics"]
        assert sim.idle_milli() == sim.cluster_milli  # everything released at the end
        assert m["invalid_actions"] == 0 and m["unfinished"] == 0 and m["done"] == 1
        assert m["finished"] + m["failed"] + m["dropped_overflow"] == n
        assert 0 < m["gpu_alloc"] <= 1 and 0 <= m["frag_amount"] <= 1
