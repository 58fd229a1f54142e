"""elasticflow, hops and the buddy GPU rule on hand-made states where the answer is known.

Definitions: docs/schedulers.md. Cluster (``het_cluster``), speeds chosen for round numbers:
  n0 V100  8 GPUs, 96 cores, speed 1.0      n1 A10  4 GPUs, 64 cores, speed 2.0
  n2 T4    2 GPUs, 32 cores, speed 0.5      n3 G3   8 GPUs, 128 cores, speed 4.0
The window holds K = 4 slots, so flat actions are: place k*4 + n, reject 16 + k, wait 20.
BestFit scores below are SPEC.md's integer ``(25,600,000 - 100*cpu_left - 1,600*gpu_left)
// 256,000``.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched import cluster as cl
from jaxsched import policies
from jaxsched.policies.hops import pressure_scores
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig, resources
from jaxsched.sim.resources import choose_gpus
from jaxsched.types import ALL_MODELS, GPU_MILLI, OUTCOME_REJECTED, EnvParams, jobs_from_numpy, to_device
from tests.policies.states import DEFAULT_CLASSES

K, N, G = 4, 4, 8
REJECT, WAIT = K * N, K * N + K
ENV = ClusterEnv(EnvConfig(window=K, queue_capacity=8, running_capacity=8, tie_break="identity"))
_reset = jax.jit(ENV.reset)
elasticflow = jax.jit(policies.get("elasticflow").policy)
hops = jax.jit(policies.get("hops").policy)
pressure = jax.jit(pressure_scores)
INF = float("inf")


def het_cluster():
    table = cl.NodeTable(
        names=("n0", "n1", "n2", "n3"),
        model=np.asarray([cl.model_id(m) for m in ("V100", "A10", "T4", "G3")], np.int32),
        num_gpus=np.asarray([8, 4, 2, 8], np.int32),
        cpu_milli=np.asarray([96000, 64000, 32000, 128000], np.int32),
        mem_mib=np.full(4, 1 << 20, np.int32))
    return cl.to_cluster(table, pad_nodes=N, max_gpus=G,
                         speeds={"V100": 1.0, "A10": 2.0, "T4": 0.5, "G3": 4.0})


HET = het_cluster()
PARAMS = to_device(EnvParams(HET, DEFAULT_CLASSES))


def job(num_gpu, gpu_milli, work=1.0, wait=0.0, deadline=INF, cpu=1000, models=ALL_MODELS):
    return dict(num_gpu=num_gpu, gpu_milli=gpu_milli, work=work, wait=wait, deadline=deadline,
                cpu=cpu, models=models)


def window_obs(jobs, free_milli=None, free_cpu=None, t=100.0, queue_len=None):
    """The observation of window ``jobs`` (up to K, FIFO) at clock ``t`` on HET with the given
    free GPU milli (rows per node, missing GPUs left out) and free CPU; default: empty cluster.
    Deadlines go through the env's ``observe``; waits and the queue length are set by hand."""
    col = lambda f: [j[f] for j in jobs]  # noqa: E731
    batch = jobs_from_numpy([0.0] * len(jobs), col("work"), col("num_gpu"), col("gpu_milli"),
                            col("cpu"), [1024] * len(jobs), np.asarray(col("models"), np.int32),
                            np.asarray(col("deadline"), np.float32), pad_to=K)
    _, obs = _reset(jax.random.key(0), PARAMS, to_device(batch))
    assert int(obs.queue_len) == len(jobs)
    free = np.where(np.asarray(HET.gpu_exists), GPU_MILLI, 0).astype(np.int32)
    for n, row in enumerate(free_milli or []):
        free[n, :len(row)] = row
    free = jnp.asarray(free)
    cpu = jnp.asarray(HET.cpu_milli if free_cpu is None else free_cpu, jnp.int32)
    max_free, whole_free = resources.node_summary(free)
    mask = resources.fits(PARAMS.cluster, cpu, obs.free_mem, max_free, whole_free, obs.job_num_gpu,
                          obs.job_gpu_milli, obs.job_cpu_milli, obs.job_mem_mib, obs.job_model_mask)
    mask = mask & (obs.window_job >= 0)[:, None]
    wait = jnp.asarray(col("wait") + [0.0] * (K - len(jobs)), jnp.float32)
    return obs.replace(
        free_milli=free, free_cpu=cpu, place_mask=mask, time_s=jnp.float32(t), job_wait_s=wait,
        action_mask=jnp.concatenate([mask.ravel(), obs.action_mask[K * N:]]),
        queue_len=jnp.int32(len(jobs) if queue_len is None else queue_len))


# ----- elasticflow -------------------------------------------------------------------------

# n1 and n3 (the fast nodes) fully used; n0 and n2 empty.
FAST_BUSY = [[1000] * 8, [0] * 4, [1000] * 2, [0] * 8]


def test_elasticflow_rejects_the_first_hopeless_slot():
    # t = 100, work 100: a 1-GPU job would end at 200 (n0), 150 (n1), 300 (n2), 125 (n3).
    # slot 0 (deadline 160) meets it only on the busy n1/n3: not hopeless (empty cluster).
    # slot 1 (same, but not allowed on A10 or G3): misses everywhere it can run -> hopeless.
    # slot 2 CPU-only, work 50, deadline 140: ends at 150 on every node (no speed-up) -> hopeless.
    no_fast = cl.model_mask(["V100", "T4"])
    jobs = [job(1, 1000, 100, deadline=160), job(1, 1000, 100, deadline=160, models=no_fast),
            job(0, 0, 50, deadline=140)]
    obs = window_obs(jobs, FAST_BUSY)
    assert np.asarray(obs.job_deadline_s).tolist() == [160, 160, 140, INF]
    assert int(elasticflow(None, obs, None)) == REJECT + 1
    # Allowed on the A10 again, slot 1 could meet its deadline there: slot 2 is the first hopeless.
    jobs[1] = job(1, 1000, 100, deadline=160, models=cl.model_mask(["V100", "T4", "A10"]))
    assert int(elasticflow(None, window_obs(jobs, FAST_BUSY), None)) == REJECT + 2
    # slot 0 alone: not hopeless, fits only where it would be late -> wait.
    assert int(elasticflow(None, window_obs(jobs[:1], FAST_BUSY), None)) == WAIT


def test_elasticflow_places_on_the_best_fit_node_that_meets_the_deadline():
    # 1 GPU, work 100 at t = 100: ends n0 200, n1 150, n2 300, n3 125 (n3 full: fits nowhere).
    # BestFit: n0 (1 GPU, 1 core free): cpu_left 0, gpu_left 0 -> 100;
    #          n1 (4 GPUs, 64 cores): 63000, 3000 -> 56;  n2 (1 GPU, 2 cores): 1000, 0 -> 99.
    # Neither the fastest nor the slowest node that meets the deadline is BestFit's choice.
    free = [[0] * 7 + [1000], [1000] * 4, [0, 1000], [0] * 8]
    cpu = [1000, 64000, 2000, 128000]
    # Deadlines 150 (n1 ends exactly then: meets) and 180: only n1; 250: n0, n1; 1000: all.
    for deadline, node in ((150, 1), (180, 1), (250, 0), (1000, 0)):
        obs = window_obs([job(1, 1000, 100, deadline=deadline)], free, cpu)
        assert int(elasticflow(None, obs, None)) == node, deadline


def test_elasticflow_waits_when_only_too_slow_nodes_fit_and_backfills_behind():
    # slot 0 (deadline 180) fits only n0 and n2, where it would end at 200 and 300.
    late = job(1, 1000, 100, deadline=180)
    assert int(elasticflow(None, window_obs([late], FAST_BUSY), None)) == WAIT
    # A job behind it without a deadline is placed meanwhile (BestFit: n2, the smaller node:
    # n0 cpu_left 95000, gpu_left 7000 -> 19; n2 31000, 1000 -> 81).
    obs = window_obs([late, job(1, 1000, 100)], FAST_BUSY)
    assert int(elasticflow(None, obs, None)) == 1 * N + 2


def test_elasticflow_end_to_end_edf_admission_and_buddy_blocks():
    # One 7-GPU node. EDF puts j2 (deadline 5, needs 10 s) first: hopeless, rejected; then j3
    # (fractional, deadline 400) takes GPU 0; j0 (2 GPUs) the aligned block {2, 3}, as block
    # {0, 1} has only GPU 1 free (first-free would be {1, 2}); j1 (3 GPUs, blocks of 4): block
    # {0..3} has one free GPU and {4..7} is not within the node, so the fallback {1, 4, 5}.
    sched = policies.get("elasticflow")
    cfg = sched.env_config(EnvConfig(tie_break="identity"))
    assert (cfg.queue_order, cfg.gpu_rule) == ("edf", "buddy")
    table = cl.NodeTable(names=("n0",), model=np.array([cl.model_id("V100")], np.int32),
                         num_gpus=np.array([7], np.int32), cpu_milli=np.array([64000], np.int32),
                         mem_mib=np.array([1 << 20], np.int32))
    jobs = jobs_from_numpy([0, 0, 0, 0], [100, 100, 10, 50], [2, 3, 1, 1], [1000, 1000, 1000, 500],
                           [1000] * 4, [1024] * 4, deadline_s=np.array([INF, INF, 5, 400], np.float32))
    params = to_device(EnvParams(cl.to_cluster(table), DEFAULT_CLASSES))
    batch = to_device(jax.tree.map(lambda x: np.asarray(x)[None], jobs))
    state, _ = rollout(ClusterEnv(cfg), sched.policy, None, params, batch, jax.random.key(0)[None], 20)
    assert int(state.outcome[0, 2]) == OUTCOME_REJECTED
    assert np.asarray(state.gpu_bits)[0].tolist() == [0b1100, 0b110010, 0, 0b1]
    assert np.asarray(state.start_s)[0].tolist() == [0, 0, INF, 0]


# ----- buddy GPU rule ----------------------------------------------------------------------

def buddy(row, k, num_gpus=8):
    return np.flatnonzero(np.asarray(choose_gpus(jnp.asarray(row, jnp.int32), k, 1000 if k else 0,
                                                 "buddy", num_gpus=num_gpus))).tolist()


def test_buddy_takes_the_first_aligned_block_with_room():
    row = [0] + [1000] * 7  # GPU 0 used
    assert buddy(row, 1) == [1]
    assert buddy(row, 2) == [2, 3]  # block [0, 2) has one free GPU; [2, 4) has two
    assert buddy(row, 3) == [1, 2, 3]  # b = 4: block [0, 4) has 3 free GPUs
    assert buddy(row, 4) == [4, 5, 6, 7]
    assert buddy([1000] * 8, 8) == list(range(8))


def test_buddy_falls_back_to_the_lowest_free_gpus_and_ignores_blocks_past_the_node():
    # Every 2-block has one free GPU: fall back to the two lowest free ones.
    assert buddy([0, 1000, 1000, 0, 1000, 0, 0, 1000], 2) == [1, 2]
    # 7-GPU node (GPU 7 missing): block [4, 8) sticks out, so no block fits 3 GPUs.
    row = [0, 1000, 0, 1000, 1000, 1000, 1000, 0]
    assert buddy(row, 3, num_gpus=7) == [1, 3, 4]
    assert buddy(row, 3, num_gpus=8) == [4, 5, 6]  # had GPU 7 existed (and been in use)
    # 6-GPU node: [4, 6) lies within it.
    assert buddy([0, 1000, 1000, 0, 1000, 1000], 2, num_gpus=6) == [4, 5]


def test_buddy_treats_fractional_jobs_by_best_fit_and_cpu_jobs_take_nothing():
    row = jnp.array([1000, 300, 600, 0], jnp.int32)
    assert np.flatnonzero(np.asarray(choose_gpus(row, 1, 500, "buddy", num_gpus=4))).tolist() == [2]
    assert buddy([1000] * 8, 0) == []


# ----- hops --------------------------------------------------------------------------------

def test_hops_fills_fragments_smallest_job_first_on_the_tightest_partly_used_gpu():
    # n0: GPUs with 600 and 400 free, 2 cores free; n1: one GPU with 350 free; n2, n3 empty.
    free = [[600, 400] + [1000] * 6, [350, 1000, 1000, 1000], [1000] * 2, [1000] * 8]
    cpu = [2000, 64000, 32000, 128000]
    # slot 0 whole GPU (no filler); slot 1 0.5 GPU (filler: n0's 600); slot 2 0.3 GPU (filler:
    # n0's 400, n1's 350); slot 3 0.2 GPU but only on T4 (n2, no partly used GPU: no filler).
    jobs = [job(1, 1000), job(1, 500), job(1, 300), job(1, 200, models=cl.model_mask(["T4"]))]
    obs = window_obs(jobs, free, cpu)
    # slot 2 on n1 (tightest fragment 350 < 400), though BestFit prefers n0 (57 vs 56).
    assert int(hops(None, obs, None)) == 2 * N + 1
    # The best-fit GPU rule then takes n1's partly used GPU 0.
    assert np.flatnonzero(np.asarray(choose_gpus(obs.free_milli[1], 1, 300, "best-fit"))).tolist() == [0]
    # Equal gpu_milli: the earlier slot (slot 1, now 0.3 GPU) wins, again on n1.
    jobs[1] = job(1, 300)
    assert int(hops(None, window_obs(jobs, free, cpu), None)) == 1 * N + 1


def test_hops_without_fragments_takes_the_largest_latency_ratio():
    # One GPU used on n0 and n3 (wholly), so no partly used GPU and no 8-GPU fit.
    free = [[0] + [1000] * 7, [1000] * 4, [1000] * 2, [0] + [1000] * 7]
    jobs = [job(1, 1000, work=1000, wait=100),  # (100 + 1000) / 1000 = 1.1
            job(1, 1000, work=10, wait=50),  # 60 / 10 = 6
            job(1, 1000, work=0.5, wait=4),  # 4.5 / max(0.5, 1) = 4.5
            job(8, 1000, work=1, wait=1000)]  # 1001, but fits nowhere
    # q = 4 = K: the node is BestFit's: n2 (cpu_left 31000, gpu_left 1000 -> 81).
    assert int(hops(None, window_obs(jobs, free), None)) == 1 * N + 2


def test_hops_queue_pressure_switches_from_fastest_to_best_packed_node():
    # n0 and n1 full; n2 (T4, 0.5) has 1 GPU and 2 cores free; n3 (G3, 4.0) empty.
    # speed_score: n2 floor(100 * 0.5 / 4) = 12, n3 100. BestFit: n2 (1000, 0) -> 99,
    # n3 (127000, 7000) -> 6. Score (4 - q) * speed + q * bestfit:
    #   q = 1: n2 135, n3 306 -> n3;  q = 2: n2 222, n3 212 -> n2;  q = 4 (9 queued): n2 396, n3 24.
    free = [[0] * 8, [0] * 4, [0, 1000], [1000] * 8]
    cpu = [96000, 64000, 2000, 128000]
    for queue_len, n2, n3, node in ((1, 135, 306, 3), (2, 222, 212, 2), (9, 396, 24, 2)):
        obs = window_obs([job(1, 1000)], free, cpu, queue_len=queue_len)
        scores = np.asarray(pressure(obs, dict(num_gpu=1, gpu_milli=1000, cpu_milli=1000),
                                     jnp.ones(N, bool)))
        assert scores[2:].tolist() == [n2, n3], queue_len
        assert int(hops(None, obs, None)) == node, queue_len
    # best_speed is over the nodes the job can run on, a full one included: with the G3 full
    # and n1 (A10, 4 GPUs and 64 cores free: BestFit 56) open, q = 2 gives n1 2 * 50 + 2 * 56 = 212 and
    # n2 2 * 12 + 2 * 99 = 222 -> n2 (normalised by the A10's 2.0 instead, n1 would win 312 to 248).
    free[1], free[3] = [1000] * 4, [0] * 8
    obs = window_obs([job(1, 1000)], free, cpu, queue_len=2)
    scores = np.asarray(pressure(obs, dict(num_gpu=1, gpu_milli=1000, cpu_milli=1000), jnp.ones(N, bool)))
    assert scores[1:3].tolist() == [212, 222]
    assert int(hops(None, obs, None)) == 2
    # CPU-only jobs have no speed term: q = 1 gives BestFit alone (n2: 1000, 1000 -> 93).
    cpu_job = window_obs([job(0, 0)], free, cpu)
    assert int(pressure(cpu_job, dict(num_gpu=0, gpu_milli=0, cpu_milli=1000), jnp.ones(N, bool))[2]) == 93
