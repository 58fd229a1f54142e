"""fgd: fragmentation numbers worked out by hand, the node and GPU it picks, and its
vectorised per-GPU scores checked against a from-scratch NumPy computation.

Cluster (states.cluster): n0 8 GPUs / 96 cores, n1 8 GPUs / 96 cores, n2 2 GPUs / 32 cores,
n3 1 GPU / 8 cores.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched import policies
from jaxsched.policies.fgd import fgd_drops, fgd_scores
from jaxsched.sim import ClusterEnv, EnvConfig, frag
from jaxsched.types import ALL_MODELS, GPU_MILLI, OUTCOME_PLACED, EnvParams, jobs_from_numpy, to_device
from jaxsched.workload import classes as workload_classes
from tests.policies.states import N_NODES, chosen_node, cluster, frag_classes, observe
from tests.settings import extended

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


# ----- the env's drop table (EnvConfig.fgd_table) against the pass over every node --------

TABLE_NODES = 64  # the first openb nodes: a cluster that long pod lists fill and fragment
TABLE_LISTS = ("default", extended("gpuspec33"), extended("multigpu50"))  # real lists when ../shared/data has them


def _pod_list(name, seed):
    """(cluster, jobs, target workload): pods drawn from openb list ``name`` until they ask for
    130% of the cluster's GPUs (the FGD experiment's load), or synthetic pods of the same
    kinds (fractional, whole-GPU, multi-GPU, CPU-only, GPU-model bound) without the data."""
    from jaxsched import paths
    from jaxsched.workload import alibaba
    rng = np.random.default_rng(seed)
    root = paths.data_dir()
    openb = None if root is None else root / "alibaba-gpu-v2023"
    if openb is not None and (openb / f"openb_pod_list_{name}.csv").exists():
        table = cl.load_openb_nodes(openb / "openb_node_list_gpu_node.csv")
        table = cl.NodeTable(*(x[:TABLE_NODES] for x in dataclasses.astuple(table)))
        trace = alibaba.load_openb_pods(openb / f"openb_pod_list_{name}.csv", mode="static")
        pods = [trace.num_gpu, trace.gpu_milli, trace.cpu_milli, trace.mem_mib, trace.model_mask]
        classes = trace.frag_classes()
    else:  # synthetic: 40 nodes of 8/4/2 GPUs of two models
        table = cl.NodeTable(tuple(f"n{i}" for i in range(40)), np.asarray([i % 2 for i in range(40)], np.int32),
                             np.asarray([8, 4, 2, 8] * 10, np.int32), np.full(40, 64000, np.int32),
                             np.full(40, 1 << 19, np.int32))
        kinds = np.asarray([(1, 250, 4000), (1, 500, 8000), (1, 700, 2000), (1, 1000, 8000),
                            (2, 1000, 16000), (4, 1000, 24000), (0, 0, 12000), (1, 300, 1000)])
        pick = rng.integers(0, len(kinds), 4000)
        pods = [kinds[pick, 0], kinds[pick, 1], kinds[pick, 2], np.full(4000, 1024),
                np.where(pick % 3 == 0, 1, ALL_MODELS)]
        classes = workload_classes.target_workload(pods[2], pods[1], pods[0], [""] * 4000)
    order = rng.permutation(len(pods[0]))
    request = np.cumsum(pods[0][order].astype(np.int64) * pods[1][order])
    take = order[:int(np.searchsorted(request, 1.3 * table.total_gpus * GPU_MILLI)) + 1]
    num_gpu, gpu_milli, cpu_milli, mem_mib, model_mask = (np.asarray(x)[take] for x in pods)
    jobs = jobs_from_numpy(np.arange(len(take)), np.zeros(len(take)), num_gpu, gpu_milli, cpu_milli,
                           mem_mib, model_mask=model_mask)
    return cl.to_cluster(table), jobs, classes


def _oracle_table(obs):
    """[N, 2S] every row of the env's table, scored by the pass over every node."""
    def column(shape):
        return fgd_drops(obs, {"num_gpu": shape[0], "gpu_milli": shape[1], "cpu_milli": shape[2]})
    return jax.vmap(column)(obs.fgd_shape).T


@functools.partial(jax.jit, static_argnums=0)
def _episode_both_ways(env, key, params, jobs):
    """A whole episode of fgd on its table -> (its actions, the full pass's action at every
    same decision, the table and its oracle at reset and at the end, the final state)."""
    full_pass = functools.partial(policies.get("fgd").policy, drops=fgd_drops)
    state, obs = env.reset(key, params, jobs)
    first = (obs.fgd_drop, _oracle_table(obs))

    def body(carry, t):
        state, obs = carry
        k = jax.random.fold_in(key, t)
        action, oracle = fgd(None, obs, k), full_pass(None, obs, k)
        state, obs, *_ = env.step(k, state, action, params)
        return (state, obs), (action, oracle)

    (state, obs), (actions, oracles) = jax.lax.scan(body, (state, obs), jnp.arange(jobs.num_jobs))
    return actions, oracles, first, (obs.fgd_drop, _oracle_table(obs)), state


@pytest.mark.parametrize("name", TABLE_LISTS)
def test_drop_table_makes_the_decisions_of_the_full_pass_over_long_static_episodes(name):
    clus, jobs, classes = _pod_list(name, seed=len(name))
    sched = policies.get("fgd")
    env = ClusterEnv(sched.env_config(EnvConfig(mode="static", window=1, queue_capacity=1,
                                                running_capacity=1)))
    assert env.config.fgd_table > 0  # the registry entry turns the table on
    actions, oracles, first, last, state = jax.device_get(_episode_both_ways(
        env, jax.random.key(3), to_device(EnvParams(clus, classes)), to_device(jobs)))
    live = np.asarray(actions) != env.wait_action(EnvParams(clus, classes))
    # A long episode: several placements per node (the openb lists on 64 nodes make 250 or
    # more, the synthetic pods used without ../shared/data about 200 on 40 nodes).
    assert live.sum() > 3 * int(np.asarray(clus.valid).sum()) and bool(state.core.done)
    np.testing.assert_array_equal(actions, oracles)
    # Real shapes only (int32-max rows are unused); every job's shape is in the table.
    shape = np.asarray(jax.device_get(env.reset(jax.random.key(3), to_device(EnvParams(clus, classes)),
                                                to_device(jobs))[1].fgd_shape))
    used = shape[:, 0] < np.iinfo(np.int32).max
    assert {tuple(r) for r in shape[used]} == set(zip(jobs.num_gpu[jobs.valid], jobs.gpu_milli[jobs.valid],
                                                      jobs.cpu_milli[jobs.valid]))
    for table, oracle in (first, last):
        np.testing.assert_array_equal(np.asarray(table)[:, used], np.asarray(oracle)[:, used])
    # The episode filled and fragmented the cluster: jobs failed, GPUs were shared.
    assert int(state.core.acc.failed) > 0
    assert (np.asarray(state.core.free_milli) % GPU_MILLI != 0).any()


def test_drop_table_follows_completions_in_dynamic_mode():
    # Jobs arrive and leave: every completion redoes its node's row.
    clus, jobs, classes = _pod_list("synthetic", seed=5)
    rng = np.random.default_rng(5)
    n = min(jobs.num_jobs, 600)
    jobs = jobs_from_numpy(np.sort(rng.uniform(0, 2000, n)), rng.uniform(50, 400, n), jobs.num_gpu[:n],
                           jobs.gpu_milli[:n], jobs.cpu_milli[:n], jobs.mem_mib[:n],
                           model_mask=jobs.model_mask[:n])
    env = ClusterEnv(policies.get("fgd").env_config(EnvConfig(window=4, queue_capacity=64,
                                                              running_capacity=256)))
    actions, oracles, _, (table, oracle), state = jax.device_get(_episode_both_ways(
        env, jax.random.key(1), to_device(EnvParams(clus, classes)), to_device(jobs)))
    np.testing.assert_array_equal(actions, oracles)
    finished = (state.outcome == OUTCOME_PLACED) & (state.end_s <= state.core.time_s)
    assert finished.sum() > 100
    used = np.asarray(jax.device_get(state.core.fgd_shape))[:, 0] < np.iinfo(np.int32).max
    np.testing.assert_array_equal(np.asarray(table)[:, used], np.asarray(oracle)[:, used])


@pytest.mark.parametrize("table_size", [16, 6])
def test_drop_table_scores_only_the_episodes_shapes_and_falls_back_past_its_size(table_size):
    # 11 fractional and 10 other shapes. S = 16: two blocks of 8 per kind, the second one
    # partly used; S = 6 (blocks of 2): 5 and 4 shapes miss the table and are scored by the
    # full pass. Either way the same decisions as the full pass at every step, the table's
    # used columns equal to it, and its unused ones 0.
    rng = np.random.default_rng(table_size)
    fractional = [(1, m, c) for m, c in zip(range(100, 1000, 80), rng.integers(1, 16, 11) * 1000)]
    other = [(g, 1000, c) for g, c in zip([1, 2, 4, 8, 1, 2, 0, 0, 4, 1], rng.integers(1, 32, 10) * 1000)]
    kinds = np.asarray(fractional + other)
    pick = rng.integers(0, len(kinds), 400)
    table = cl.NodeTable(tuple(f"n{i}" for i in range(24)), np.asarray([i % 2 for i in range(24)], np.int32),
                         np.asarray([8, 4, 2, 8] * 6, np.int32), np.full(24, 96000, np.int32),
                         np.full(24, 1 << 19, np.int32))
    jobs = jobs_from_numpy(np.arange(400), np.zeros(400), kinds[pick, 0], kinds[pick, 1], kinds[pick, 2],
                           np.full(400, 1024))
    classes = workload_classes.target_workload(kinds[pick, 2], kinds[pick, 1], kinds[pick, 0], [""] * 400)
    config = policies.get("fgd").env_config(EnvConfig(mode="static", window=1, queue_capacity=1,
                                                      running_capacity=1))
    env = ClusterEnv(dataclasses.replace(config, fgd_table=table_size))
    actions, oracles, first, last, state = jax.device_get(_episode_both_ways(
        env, jax.random.key(7), to_device(EnvParams(cl.to_cluster(table), classes)), to_device(jobs)))
    np.testing.assert_array_equal(actions, oracles)
    assert int(state.core.acc.failed) > 0  # the cluster filled up
    used = np.asarray(state.core.fgd_shape)[:, 0] < np.iinfo(np.int32).max
    assert used.sum() == min(table_size, 11) + min(table_size, 10)
    for drops, oracle in (first, last):
        np.testing.assert_array_equal(np.asarray(drops)[:, used], np.asarray(oracle)[:, used])
        assert (np.asarray(drops)[:, ~used] == 0).all()


def test_table_lookup_and_full_pass_side_by_side_under_vmap():
    # Two episodes in one vmapped call: the first job's shape is in the table, the second's
    # is not. The table holds a marker (not the true drops), so the first result proves the
    # lookup was used and the second that the full pass ran for the missing shape alone.
    from jaxsched.policies.fgd import table_drops
    free = [FULL, FULL, [1000, 600], [1000]]
    found, missing = observe((1, 400, 1000), free, classes=HALF_AND_WHOLE), observe((1, 300, 1000), free,
                                                                                    classes=HALF_AND_WHOLE)
    shapes = jnp.array([[1, 400, 1000], [2, 1000, 2000]], jnp.int32)
    marker = jnp.full((N_NODES, 2), 12345, jnp.int32)
    batch = jax.tree.map(lambda a, b: jnp.stack([a, b]), found, missing)
    batch = batch.replace(fgd_shape=jnp.stack([shapes, shapes]), fgd_drop=jnp.stack([marker, marker]))
    got = jax.jit(jax.vmap(lambda o: table_drops(o, job(o.job_num_gpu[0], o.job_gpu_milli[0]))))(batch)
    assert np.asarray(got[0]).tolist() == [12345] * N_NODES
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(fgd_drops(missing, job(1, 300))))
    assert int(np.asarray(got[1])[2]) != 12345
