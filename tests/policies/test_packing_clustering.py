"""gpu-packing and gpu-clustering on hand-made states where the right node is known.

Cluster (states.cluster): n0 8 GPUs / 96 cores, n1 8 GPUs / 96 cores, n2 2 GPUs / 32 cores,
n3 1 GPU / 8 cores.
"""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched import policies
from jaxsched.policies.gpu_clustering import class_index, gpu_clustering_scores
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from jaxsched.policies.gpu_packing import gpu_packing_scores
from tests.policies.states import DEFAULT_CLASSES, chosen_node, cluster, observe

packing = jax.jit(policies.get("gpu-packing").policy)
clustering = jax.jit(policies.get("gpu-clustering").policy)
packing_scores = jax.jit(gpu_packing_scores)
clustering_scores = jax.jit(gpu_clustering_scores)

# n0: one GPU partly used (free 600), n1: empty, n2: one GPU fully used, n3: empty.
USED = [[600] + [1000] * 7, [1000] * 8, [0, 1000], [1000]]


def job(num_gpu, gpu_milli, cpu_milli=1000):
    return {"num_gpu": jnp.int32(num_gpu), "gpu_milli": jnp.int32(gpu_milli),
            "cpu_milli": jnp.int32(cpu_milli)}


def test_packing_fills_a_partly_used_gpu_first():
    # 0.5 GPU: n0's tightest fitting GPU has 600 free -> tier 1: 100 - (600*100//1000)//10 = 94;
    # n1 empty 8-GPU node -> tier 3: max(33 - 8, 8) = 25; n2 used node, the job needs a free
    # GPU -> tier 2: 50 - 1 = 49; n3 empty 1-GPU node -> max(33 - 1, 1) = 32.
    obs = observe((1, 500, 1000), USED)
    assert np.asarray(packing_scores(obs, job(1, 500))).tolist() == [94, 25, 49, 32]
    assert chosen_node(packing(None, obs, None), obs) == 0


def test_packing_puts_whole_gpu_jobs_on_used_nodes_then_small_empty_ones():
    # 1 whole GPU: n0 and n2 are used nodes -> tier 2: 49 (n0 wins on rank over n2);
    # with those gone, the smallest empty node (n3, 32) beats the 8-GPU one (25).
    obs = observe((1, 1000, 1000), USED)
    assert np.asarray(packing_scores(obs, job(1, 1000))).tolist() == [49, 25, 49, 32]
    assert chosen_node(packing(None, obs, None), obs) == 0
    obs = observe((1, 1000, 1000), [[1000] * 8, [1000] * 8, [1000, 1000], [1000]])
    assert chosen_node(packing(None, obs, None), obs) == 3
    # 4 GPUs on a used node: max(50 - 4, 33) = 46.
    assert int(packing_scores(obs.replace(free_milli=obs.free_milli.at[0, 7].set(0)), job(4, 1000))[0]) == 46


def test_packing_scores_cpu_only_jobs_zero_everywhere():
    obs = observe((0, 0, 1000), USED, node_rank=[2, 1, 3, 0])
    assert np.asarray(packing_scores(obs, job(0, 0))).tolist() == [0, 0, 0, 0]
    assert chosen_node(packing(None, obs, None), obs) == 3  # lowest rank


def class_jobs(per_node, classes=9):
    """[N, C] int32 node_class_jobs from one {class: jobs} dict per node (C = share + 1..8)."""
    out = np.zeros((len(per_node), classes), np.int32)
    for n, counts in enumerate(per_node):
        for c, jobs in counts.items():
            out[n, c] = jobs
    return jnp.asarray(out)


def test_clustering_prefers_nodes_hosting_only_the_jobs_class():
    # Classes: n0 hosts only "share", n1 "share" and "2 GPUs", n2 nothing, n3 only "1 GPU".
    share, two, one = (int(class_index(jnp.int32(k), jnp.int32(m))) for k, m in ((1, 500), (2, 1000), (1, 1000)))
    assert (share, two, one) == (0, 2, 1)
    classes = class_jobs([{share: 2}, {share: 1, two: 1}, {}, {one: 3}])
    free = [[500] + [1000] * 7, [500, 0, 0] + [1000] * 5, [1000, 1000], [0]]
    obs = observe((1, 300, 1000), free)
    # used term 25 * (8000 - node's free milli) // 8000 (8000 is the published normaliser, whatever
    # the node's size): n0 (free 7500) 1, n1 (5500) 7, n2 (2000) 18, n3 (0) 25.
    # share job: n0 only-share 1 + 75 = 76; n1 mixed 7 + 50 = 57; n2 empty 18 + 25 = 43; n3 other 25.
    assert np.asarray(clustering_scores(obs, job(1, 300), classes)).tolist() == [76, 57, 43, 25]
    assert chosen_node(clustering(None, obs.replace(node_class_jobs=classes), None), obs) == 0
    # a 2-GPU job: n0 other class 1; n1 mixed with its class 57; n2 empty 43; n3 can't fit.
    obs2 = observe((2, 1000, 1000), free)
    assert np.asarray(clustering_scores(obs2, job(2, 1000), classes))[:3].tolist() == [1, 57, 43]
    assert chosen_node(clustering(None, obs2.replace(node_class_jobs=classes), None), obs2) == 1


def test_env_tracks_the_classes_each_node_hosts_exactly():
    # At t=0: two 1-GPU jobs on n0, a 2-GPU job and a share job on n1, a CPU-only job on n2
    # (the GPUs alone could not tell two 1-GPU jobs from one 2-GPU job). CPU-only jobs
    # arriving at t=5 and t=20 make decision points; job 0 ends at 10 / 0.8 = 12.5.
    env = ClusterEnv(EnvConfig(window=1, tie_break="identity", track_job_classes=True))
    jobs = jobs_from_numpy(arrival_s=[0, 0, 0, 0, 0, 5, 20], work_s=[10] + [99] * 6,
                           num_gpu=[1, 1, 2, 1, 0, 0, 0], gpu_milli=[1000, 1000, 1000, 300, 0, 0, 0],
                           cpu_milli=[0] * 7, mem_mib=[0] * 7)
    params = to_device(EnvParams(cluster(), DEFAULT_CLASSES))
    state, obs = env.reset(jax.random.key(0), params, to_device(jobs))
    for node in (0, 0, 1, 1, 2):  # slot 0 on ``node``
        state, obs, *_ = env.step(jax.random.key(0), state, node, params)
    assert float(obs.time_s) == 5.0
    np.testing.assert_array_equal(obs.node_class_jobs, class_jobs([{1: 2}, {0: 1, 2: 1}, {}, {}]))
    state, obs, *_ = env.step(jax.random.key(0), state, 2, params)
    assert float(obs.time_s) == 20.0  # job 0 has ended; job 1 (1 GPU) is still on n0
    np.testing.assert_array_equal(obs.node_class_jobs, class_jobs([{1: 1}, {0: 1, 2: 1}, {}, {}]))


def test_clustering_scores_cpu_only_jobs_zero_everywhere():
    obs = observe((0, 0, 1000), USED, node_rank=[1, 0, 2, 3])
    assert np.asarray(clustering_scores(obs, job(0, 0), jnp.ones((4, 9), jnp.int32))).tolist() == [0, 0, 0, 0]
    assert chosen_node(clustering(None, obs, None), obs) == 1
