"""``gavel-fifo``, Gavel's FIFO as its code runs (docs/semantics.md, "Policy memory",
"Allocation resets" and "Gavel's FIFO, read for gavel-fifo"): its allocation by hand,
over-subscription and the leftover type included, an episode with and without allocation
resets by hand, and its episodes job by job against the reference, the allocation kept
between rounds as the policy's memory (its episodes against the reference on random
clusters: ``tests/sim/test_las_perf.py``, with the other per-model policy)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched import reference
from jaxsched.policies.rounds import fifo_perf_allocation, gavel_fifo_allocation, gavel_pick
from jaxsched.sim import rounds as sim_rounds
from jaxsched.types import jobs_from_numpy
from tests.sim import test_preemption as tp

M = len(cl.MODEL_NAMES)
V100, P100, K80 = cl.model_id("V100"), cl.model_id("P100"), cl.model_id("K80")


def test_the_draw_is_a_fixed_hash_of_the_job():
    assert [int(gavel_pick(j, 3)) for j in range(6)] == [((j * 2654435761) % 2**32 >> 16) % 3 for j in range(6)]
    assert int(gavel_pick(1, 3)) == 0 and int(gavel_pick(4, 2)) == 1 and int(gavel_pick(7, 1)) == 0


def allocate(alloc, in_system, num_gpu, workers, runs_on=None):
    workers_m = np.zeros(M, np.int32)
    for m, w in workers.items():
        workers_m[m] = w
    runs = np.broadcast_to(workers_m > 0, (len(alloc), M)) if runs_on is None else runs_on
    out = gavel_fifo_allocation(jnp.asarray(alloc, jnp.int32), jnp.asarray(in_system), jnp.asarray(num_gpu, jnp.int32),
                                jnp.asarray(runs), jnp.asarray(workers_m))
    return np.asarray(out).tolist()


def test_allocation_gives_the_last_listed_type_and_over_subscribes_it_by_hand():
    """2 V100 + 1 P100 + 1 K80, four 1-GPU jobs, none allocated. The list is [K80, P100, V100]
    (Gavel sorts the type names). j0 gets the last, V100 (1 left); j1 too, V100 reaches 0 and
    the drawn type with room leaves the list: gavel_pick(1, 3) = 0, the K80 (not the V100). j2
    and j3: only the P100 has room, yet both get the list's last type, the V100 (-1, -2)."""
    got = allocate([-1] * 4, [True] * 4, [1] * 4, {V100: 2, P100: 1, K80: 1})
    assert got == [V100] * 4


def test_allocation_hands_a_finished_jobs_type_to_the_queue_head_and_stops_at_a_job_that_fits_no_type():
    """2 V100 + 1 P100 + 2 K80. j0 (V100) has finished, j1 holds the P100. The queue is j2 (2
    GPUs), j3, j4 (2 GPUs), j5. j0's V100 goes to the head j2 if it fits the V100s left so far
    (2: j1 is on the P100), so j2 gets it. Left: V100 0, P100 0, K80 2, so the list is [K80];
    j3 gets it (K80 1 left). j4 fits no listed type: the walk stops there, and j5 stays
    unallocated although the K80 has room (strict FIFO)."""
    got = allocate([V100, P100, -1, -1, -1, -1], [False, True, True, True, True, True], [1, 1, 2, 1, 2, 1],
                   {V100: 2, P100: 1, K80: 2})
    assert got == [-1, P100, V100, K80, -1, -1]


def test_allocation_gives_the_last_listed_type_a_job_runs_on_and_skips_a_job_that_runs_on_none():
    """The list is [P100, V100]. j0 cannot run on the V100: it gets the P100, the last listed
    type it runs on (not left waiting while the V100 is listed), and gavel_pick(0, 2) = 0
    drops the P100 from the list. j1 runs on the P100 only, now unlisted: it stays
    unallocated and j2 behind it gets the V100 (the walk goes on, as Gavel's does)."""
    runs = np.zeros((3, M), bool)
    runs[:, [V100, P100]] = True
    runs[0, V100] = runs[1, V100] = False
    got = allocate([-1, -1, -1], [True] * 3, [1, 1, 1], {V100: 1, P100: 1}, runs)
    assert got == [P100, -1, V100]


# ----------------------------------------------------------------------------- an episode by hand
NODES = cl.NodeTable(names=("v0", "v1", "p0", "k0"),
                     model=np.asarray([V100, V100, P100, K80], np.int32), num_gpus=np.ones(4, np.int32),
                     cpu_milli=np.full(4, 8000, np.int32), mem_mib=np.full(4, 32768, np.int32))
# j0-j3 at 0 (1,000 s, 1,000 s, 1,000 s, 50 s of work); j4 at 250 (30 s); the models' own
# speeds (V100 1.0, P100 0.6).
HAND_JOBS = jobs_from_numpy(arrival_s=[0, 0, 0, 0, 250], work_s=[1000, 1000, 1000, 50, 30], num_gpu=[1] * 5,
                            gpu_milli=[1000] * 5, cpu_milli=[0] * 5, mem_mib=[0] * 5)


def test_fifo_perf_allocation_gives_each_job_its_fastest_type_with_room_by_hand():
    """fifo-perf (Gavel's FIFO in perf mode), afresh: 2 V100 + 1 P100 + 3 K80, the list
    [K80, P100, V100]. j0 (1 GPU, fastest on the V100) gets the V100 (1 left). j1 (2 GPUs)
    has room on the K80s only: K80 (1 left). j2 cannot run on the V100 and is fastest on the
    K80: K80, now full and off the list. j3 runs as fast everywhere: the first with room in
    the list's order, the P100 (full, off). j4 runs nowhere (throughput 0): it waits and the
    walk goes on. j5 (2 GPUs) fits no listed type: the walk stops, and j6 stays unallocated
    although the V100 has room (strict FIFO). j7 has left the system."""
    throughput = np.zeros((8, M), np.float32)
    throughput[0, [V100, P100, K80]] = (3.0, 2.0, 1.0)
    throughput[1, [V100, P100, K80]] = (3.0, 2.0, 1.0)
    throughput[2, [P100, K80]] = (2.0, 5.0)
    throughput[3, [V100, P100, K80]] = 1.0
    throughput[5:8, [V100, P100, K80]] = 1.0
    workers = np.zeros(M, np.int32)
    workers[[V100, P100, K80]] = (2, 1, 3)
    in_system = np.array([True] * 7 + [False])
    got = fifo_perf_allocation(jnp.asarray(in_system), jnp.asarray([1, 2, 1, 1, 1, 2, 1, 1], jnp.int32),
                               jnp.asarray(throughput), jnp.asarray(workers))
    assert np.asarray(got).tolist() == [V100, K80, K80, P100, -1, -1, -1, -1]


def test_an_episode_by_hand_in_both_simulators():
    """Rounds of 100 s. At 0 all four jobs get the V100 (above): the two V100s run j0 and j1
    (equal priority 1 / 50, by index), the P100 and K80 stay idle. At 100 j2 and j3 have
    received nothing on the V100 and preempt j0 and j1; j3 ends at 150. At 300 j4 (arrived at
    250) is allocated: the V100s are over-subscribed (-1), the list is [K80, P100], j4 gets
    the last, the P100, and runs alone there at 0.6: 300 to 350. No job ever runs on the K80."""
    env = tp.round_env({"round_s": 100.0, "restart_overhead_s": 0.0}, tie_break="identity")
    state, metrics, ref = tp.run_both(env, "gavel-fifo", cl.to_cluster(NODES), HAND_JOBS, seed=0)
    tp.assert_same_rounds(state, metrics, ref)
    start, end, node = np.asarray(state.start_s), np.asarray(state.end_s), np.asarray(state.node)
    assert start[[0, 1, 2, 3, 4]].tolist() == [0, 0, 100, 100, 300] and end[3] == 150 and end[4] == 350
    assert node[4] == 2 and (node[:4] <= 1).all()
    assert (np.asarray(state.segments.preemptions)[:2] >= 1).all()  # time-shared with j2 and j3


def test_allocation_resets_by_hand_in_both_simulators():
    """Two V100s, rounds of 100 s. j0 (1,000 s of work) arrives at 0, j1 (100 s) at 50, j2
    (100 s) at 150. Without resets j1 is allocated at the next round and runs 100 to 200, j2
    200 to 300; 3 rounds decided (0, 100, 200). With resets every 250 s or more: 0 is a reset
    (j0 arrived), and since it was at time 0 the next one need not wait (Gavel's clock of the
    last reset starts at 0 and lets a reset through while it reads 0): 100 is a reset and j1
    runs 100 to 200. j2 then waits, held, for a round 250 s after 100: at 200 and 300 it is
    unallocated, at 400 it is allocated and runs 400 to 500; its end changes the job set, and
    the next round 250 s after 400, 700, is a reset too, decided although nothing waits: 6
    rounds decided (0, 100, 200, 300, 400, 700). j0 runs 0 to 1,000 either way."""
    nodes = cl.NodeTable(names=("v0", "v1"), model=np.asarray([V100, V100], np.int32), num_gpus=np.ones(2, np.int32),
                         cpu_milli=np.full(2, 8000, np.int32), mem_mib=np.full(2, 32768, np.int32))
    jobs = jobs_from_numpy(arrival_s=[0, 50, 150], work_s=[1000, 100, 100], num_gpu=[1, 1, 1], gpu_milli=[1000] * 3,
                           cpu_milli=[0] * 3, mem_mib=[0] * 3)
    for reset_s, start2, decisions in ((0.0, 200.0, 3), (250.0, 400.0, 6)):
        env = tp.round_env({"round_s": 100.0, "round_reset_s": reset_s}, tie_break="identity")
        state, metrics, ref = tp.run_both(env, "gavel-fifo", cl.to_cluster(nodes), jobs, seed=0)
        tp.assert_same_rounds(state, metrics, ref)
        assert np.asarray(state.start_s).tolist() == [0.0, 100.0, start2]
        assert np.asarray(state.end_s).tolist() == [1000.0, 200.0, start2 + 100.0]
        assert metrics["decisions"] == ref["metrics"]["decisions"] == decisions


def test_after_a_reset_the_job_with_the_largest_deficit_runs_first_in_both_simulators():
    """NODES, rounds of 100 s, resets 250 s apart. j0-j2 (300 s of work) at 0 all get the
    V100 (above: the K80 leaves the list, j2 over-subscribes the V100s). Round 0 runs j0, j1
    (all received 0: by index); 100 runs j2 (received 0) and j0 (j0, j1 at 100: by index).
    j3 (50 s) arrives at 150, and since the last reset was at time 0, 200 is a reset: j3 gets
    the P100 (200 to 283.3), and on the V100 every job has received 0 since it, so Gavel's
    deficit decides: j0 ran 200 of the 200 s since it got the type (deficit 0), j1 and j2 ran
    100 (deficit 100). j1 and j2 run 200 to 300, not j0 and j1 as the index would have it. At
    300 j0 (received 0) and j1 (100, the same as j2, deficit 100 each: by index) run, both end
    at 400; j2 runs 400 to 500."""
    jobs = jobs_from_numpy(arrival_s=[0, 0, 0, 150], work_s=[300, 300, 300, 50], num_gpu=[1] * 4,
                           gpu_milli=[1000] * 4, cpu_milli=[0] * 4, mem_mib=[0] * 4)
    env = tp.round_env({"round_s": 100.0, "round_reset_s": 250.0, "restart_overhead_s": 0.0}, tie_break="identity")
    state, metrics, ref = tp.run_both(env, "gavel-fifo", cl.to_cluster(NODES), jobs, seed=0)
    tp.assert_same_rounds(state, metrics, ref)
    end = np.asarray(state.end_s)
    assert end[:3].tolist() == [400.0, 400.0, 500.0] and np.asarray(state.node)[3] == 2
    assert end[3] == pytest.approx(200 + 50 / 0.6, abs=1e-3)


def test_a_job_only_some_models_can_hold_is_allocated_one_of_them_in_both_simulators():
    """A V100 node of 4 cores and a P100 node of 8. j0 wants 6 cores: only the P100 node holds
    it, so j0 gets the P100 although the V100 is the list's last (allocated the V100, it would
    wait there for ever); j1 (1 core) gets the V100. Both run from 0."""
    nodes = cl.NodeTable(names=("v0", "p0"), model=np.asarray([V100, P100], np.int32), num_gpus=np.ones(2, np.int32),
                         cpu_milli=np.asarray([4000, 8000], np.int32), mem_mib=np.full(2, 32768, np.int32))
    jobs = jobs_from_numpy(arrival_s=[0, 0], work_s=[600, 100], num_gpu=[1, 1], gpu_milli=[1000] * 2,
                           cpu_milli=[6000, 1000], mem_mib=[0] * 2)
    env = tp.round_env({"round_s": 100.0}, tie_break="identity")
    state, metrics, ref = tp.run_both(env, "gavel-fifo", cl.to_cluster(nodes), jobs, seed=0)
    tp.assert_same_rounds(state, metrics, ref)
    assert np.asarray(state.node).tolist() == [1, 0] and np.asarray(state.start_s).tolist() == [0.0, 0.0]
    assert metrics["done"] == 1


def test_a_policy_memory_other_than_its_fields_is_refused_by_both_simulators():
    """A round policy's memory is a dict of ``policy_model`` and ``policy_share`` only."""
    env = tp.round_env({"round_s": 100.0})
    seg = env._no_segments(jobs_from_numpy(arrival_s=[0], work_s=[1], num_gpu=[1], gpu_milli=[1000],
                                           cpu_milli=[0], mem_mib=[0]))
    assert sim_rounds.policy_memory({"policy_share": np.ones((1, M))}, seg)["policy_share"].shape == (1, M)
    for bad in ({"deficit": np.zeros(1)}, np.zeros(1, np.int32)):
        with pytest.raises(ValueError, match="memory must be a dict"):
            sim_rounds.policy_memory(bad, seg)
        with pytest.raises(ValueError, match="memory must be a dict"):
            reference.run(cl.to_cluster(NODES), HAND_JOBS, tp.FRAG_CLASSES, reference.RefConfig(round_s=100.0),
                          round_policy=lambda sim: (np.zeros(sim.J, np.float32), bad), max_steps=5)
