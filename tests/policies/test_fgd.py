"""fgd: fragmentation numbers worked out by hand, the node and GPU it picks, and its
vectorised per-GPU scores checked against a from-scratch NumPy computation.

Cluster (states.cluster): n0 8 GPUs / 96 cores, n1 8 GPUs / 96 cores, n2 2 GPUs / 32 cores,
n3 1 GPU / 8 cores.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched import policies
from jaxsched.policies.fgd import fgd_scores
from jaxsched.sim import ClusterEnv, EnvConfig, frag
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from tests.policies.states import N_NODES, chosen_node, cluster, frag_classes, observe

fgd = jax.jit(policies.get("fgd").policy)
scores_of = jax.jit(fgd_scores)

# Target workload: half the jobs want 0.5 GPU, half a whole GPU (1 core each).
HALF_AND_WHOLE = frag_classes([(1000, 500, 1, 1), (1000, 1000, 1, 1)])
FULL = [0] * 8  # an 8-GPU node with nothing free: no GPU job fits


def job(num_gpu, gpu_milli, cpu_milli=1000):
    return {"num_gpu": jnp.int32(num_gpu), "gpu_milli": jnp.int32(gpu_milli),
            "cpu_milli": jnp.int32(cpu_milli)}


def test_fragmentation_of_a_node_by_hand():
    # n2 free [1000, 600]: the 0.5 class fits and no GPU is too small for it -> 0; the whole-GPU
    # class fits GPU 0 and GPU 1's 600 are too small for it -> 600. F = 0.5*0 + 0.5*600 = 300.
    # n3 free [1000]: both classes fit, nothing too small -> 0.
    # A CPU-only class would count all idle milli: F(n2) with it at weight 1/3 each -> 200 + 533.3.
    obs = observe((1, 400, 1000), [FULL, FULL, [1000, 600], [1000]], classes=HALF_AND_WHOLE)
    got = frag.node_frag(obs.free_milli, obs.free_cpu, obs.cluster.gpu_model, HALF_AND_WHOLE)
    assert np.allclose(np.asarray(got), [0, 0, 300, 0])
    with_cpu_only = frag_classes([(1000, 500, 1, 1), (1000, 1000, 1, 1), (4000, 0, 0, 1)])
    got = frag.node_frag(obs.free_milli, obs.free_cpu, obs.cluster.gpu_model, with_cpu_only)
    assert np.isclose(float(got[2]), 1600 / 3 + 200, atol=1e-3)


def test_fractional_job_goes_where_its_best_gpu_lowers_fragmentation():
    # Job 0.4 GPU. n2 [1000, 600] (F = 300):
    #   on GPU 0 -> [600, 600]: 0.5 class 0; whole class fits nowhere -> all 1200. F = 600,
    #      delta = 300 - 600 = -300 -> int(100 * sigmoid(-0.3)) = 42
    #   on GPU 1 -> [1000, 200]: 200 too small for both -> F = 200, delta = +100 -> 52
    #   node score = the best GPU's = 52.
    # n3 [1000] (F = 0) -> [600]: whole class fits nowhere -> F = 300, delta = -300 -> 42.
    assert int(100 / (1 + math.exp(0.3))) == 42 and int(100 / (1 + math.exp(-0.1))) == 52
    obs = observe((1, 400, 1000), [FULL, FULL, [1000, 600], [1000]], classes=HALF_AND_WHOLE)
    assert np.asarray(scores_of(obs, job(1, 400)))[2:].tolist() == [52, 42]
    assert chosen_node(fgd(None, obs, None), obs) == 2


def test_cpu_only_job_avoids_starving_a_node_of_cpu():
    # 7.5 cores, no GPU. On n3 (8 cores) 0.5 cores would be left: neither class fits any more,
    # so all 1000 idle milli become fragment: delta = -1000 -> int(100 * sigmoid(-1)) = 26.
    # On n2 (32 cores) nothing changes: delta = 0 -> 50.
    obs = observe((0, 0, 7500), [FULL, FULL, [1000, 600], [1000]], classes=HALF_AND_WHOLE)
    assert np.asarray(scores_of(obs, job(0, 0, 7500))).tolist() == [50, 50, 50, 26]
    obs = observe((0, 0, 7500), [FULL, FULL, [1000, 600], [1000]], classes=HALF_AND_WHOLE,
                  node_rank=[3, 2, 1, 0])  # n3 ranks first but scores lower
    assert chosen_node(fgd(None, obs, None), obs) == 2  # the top score with the lowest rank


def test_env_gives_the_fractional_job_the_gpu_fgd_chose():
    # Target: only 0.5-GPU jobs. j0 (0.4 GPU) is put on n2 -> [600, 1000] (GPU 0: a tie at 50,
    # lowest index). j1 (0.2 GPU) on n2: GPU 0 -> [400, 1000] leaves 400 too small for 0.5:
    # delta = -400 -> 40; GPU 1 -> [600, 800] leaves nothing too small -> 50. FGD takes GPU 1,
    # where best-fit would take GPU 0 (least free with room).
    only_half = frag_classes([(1000, 500, 1, 1)])
    env = ClusterEnv(policies.get("fgd").env_config(EnvConfig(
        mode="static", window=1, queue_capacity=1, running_capacity=1, tie_break="identity")))
    params = to_device(EnvParams(cluster(), only_half))
    jobs = to_device(jobs_from_numpy([0, 1], [0, 0], [1, 1], [400, 200], [1000, 1000], [1024, 1024]))
    key = jax.random.key(0)
    state, obs = env.reset(key, params, jobs)
    state, obs, *_ = env.step(key, state, 2, params)  # j0 on n2
    state, obs, *_ = env.step(key, state, 2, params)  # j1 on n2
    assert np.asarray(state.gpu_bits).tolist() == [0b01, 0b10]
    assert np.asarray(state.core.free_milli)[2, :2].tolist() == [600, 800]


def numpy_frag(free_row, cpu, classes):
    """F_n from scratch (float64), straight from SPEC.md's definition."""
    total = 0.0
    for c, g, k, p in zip(classes.cpu_milli, classes.gpu_milli, classes.num_gpu, classes.prob):
        fits = k > 0 and cpu >= c and (free_row >= g).sum() >= k
        total += p * (free_row[free_row < g].sum() if fits else free_row.sum())
    return total


def test_vectorised_scores_match_a_from_scratch_computation_on_random_states():
    rng = np.random.default_rng(7)
    clus = cluster()
    exists = np.asarray(clus.gpu_exists)
    # Two classes share gpu_milli 300 (fgd_scores orders classes by it, ties by index).
    classes = frag_classes([(2000, 300, 1, 3), (8000, 1000, 2, 3), (4000, 700, 1, 2), (16000, 0, 0, 2),
                            (12000, 300, 1, 1)])
    jobs = [(1, 250, 2000), (1, 600, 1000), (1, 1000, 4000), (2, 1000, 8000), (4, 1000, 1000), (0, 0, 30000)]
    checked = 0
    for trial in range(12):
        free = np.where(exists, rng.choice([0, 100, 300, 450, 700, 1000], size=exists.shape), 0)
        cpu = rng.integers(0, 33, N_NODES) * 1000
        for num_gpu, gpu_milli, cpu_milli in jobs:
            obs = observe((num_gpu, gpu_milli, cpu_milli), [r[:n] for r, n in zip(free, clus.num_gpus)],
                          cpu, classes=classes)
            got = np.asarray(scores_of(obs, job(num_gpu, gpu_milli, cpu_milli)))
            feasible = np.asarray(obs.place_mask[0])
            for n in np.flatnonzero(feasible):
                row = free[n, :clus.num_gpus[n]].astype(np.int64)
                before = numpy_frag(row, cpu[n], classes)
                if num_gpu == 1 and gpu_milli < 1000:
                    candidates = [row - gpu_milli * (np.arange(len(row)) == g)
                                  for g in range(len(row)) if row[g] >= gpu_milli]
                else:
                    take = (row == 1000) & (np.cumsum(row == 1000) <= num_gpu)
                    candidates = [row - 1000 * take]
                want = max(int(100 / (1 + math.exp(-(before - numpy_frag(c, cpu[n] - cpu_milli, classes)) / 1000)))
                           for c in candidates)
                assert got[n] == want, (trial, n, (num_gpu, gpu_milli, cpu_milli), row, cpu[n])
                checked += 1
    assert checked > 100
