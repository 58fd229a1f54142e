"""random, spread, dot-product and sjf on hand-made states where the right node is known.

Cluster (states.cluster): n0 8 GPUs / 96 cores, n1 8 GPUs / 96 cores, n2 2 GPUs / 32 cores,
n3 1 GPU / 8 cores (all G2).
"""

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched import cluster as cl
from jaxsched import policies
from jaxsched.policies.dot_product import dot_product_scores
from jaxsched.policies.spread import spread_scores
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from tests.policies.states import chosen_node, observe

random_policy = jax.jit(policies.get("random").policy)
spread = jax.jit(policies.get("spread").policy)
dot_product = jax.jit(policies.get("dot-product").policy)
dot_scores = jax.jit(dot_product_scores)


def test_random_draws_every_feasible_node_and_never_an_infeasible_one():
    # A 2-GPU job fits n0, n1 (8 free) and n2 (2 free) but not n3 (1 GPU).
    obs = observe((2, 1000, 1000))
    keys = jax.random.split(jax.random.key(1), 600)
    actions = np.asarray(jax.vmap(random_policy, in_axes=(None, None, 0))(None, obs, keys))
    counts = np.bincount(actions, minlength=4)
    assert counts[3] == 0
    assert counts.sum() == 600
    assert (counts[:3] > 150).all(), counts  # uniform: ~200 each


def test_spread_takes_the_node_left_with_most_cpu_and_gpu():
    # n0: 4 GPUs and 10 cores free; n1: 2 GPUs and 90 cores free.
    # leftover score (x100): n0 (100*9000 + 1600*3000) / 256000 = 22; n1 (100*89000 + 1600*1000)
    # / 256000 = 41; n2 (100*31000 + 1600*1000) / 256000 = 18; n3 can't fit (1 core free).
    obs = observe((1, 1000, 1000), [[1000] * 4 + [0] * 4, [1000] * 2 + [0] * 6, [1000, 1000], [1000]],
                  [10000, 90000, 32000, 1000])
    assert np.asarray(spread_scores(obs, {"cpu_milli": 1000, "num_gpu": 1, "gpu_milli": 1000}))[:3].tolist() \
        == [22, 41, 18]
    assert chosen_node(spread(None, obs, None), obs) == 1


def test_dot_product_prefers_the_node_whose_free_vector_is_most_orthogonal():
    # Job: 8 cores, 1 GPU. Node vectors (free cpu / 128000, free gpu / 8000):
    #   n0 (96000, 8000): dot = 0.75*0.0625 + 1*0.125 = 0.171875 -> int(100*(1-0.0859375)) = 91
    #   n2 (32000, 2000): dot = 0.25*0.0625 + 0.25*0.125 = 0.046875 -> int(97.65625) = 97
    #   n3 (8000, 1000):  dot = 0.0625*0.0625 + 0.125*0.125 = 0.01953125 -> int(99.0234) = 99
    obs = observe((1, 1000, 8000))
    scores = np.asarray(dot_scores(obs, {"cpu_milli": 8000, "num_gpu": 1, "gpu_milli": 1000}))
    assert scores.tolist() == [91, 91, 97, 99]
    assert chosen_node(dot_product(None, obs, None), obs) == 3


def test_dot_product_score_is_exact_at_integer_boundaries():
    # int(100 * (1 - dot/2)) = 100 - ceil(X / 327,680,000) with X = cpu_f*cpu_r + 256*gpu_f*gpu_r;
    # X an exact multiple of the denominator is where float rounding would go wrong.
    rng = np.random.default_rng(0)
    cpu_free = rng.integers(0, 129, 4) * 1000
    gpu_free = rng.integers(0, 9, 4) * 1000
    cases = [(128000, 0), (64000, 8000), (32000, 1000), (96000, 2000), (1000, 470), (127999, 7999)]
    for cpu_req, gpu_total in cases:
        for cf, gf in [(128000, 8000), (64000, 4000), *zip(cpu_free, gpu_free)]:
            obs = observe((1, 500, 1000), free_cpu=[cf] * 4).replace(
                free_milli=jnp.full((4, 8), 0, jnp.int32).at[:, 0].set(gf))
            got = int(dot_scores(obs, {"cpu_milli": jnp.int32(cpu_req), "num_gpu": jnp.int32(1),
                                       "gpu_milli": jnp.int32(gpu_total)})[0])
            dot = Fraction(int(cf) * cpu_req, 128000**2) + Fraction(int(gf) * gpu_total, 8000**2)
            want = int(100 * (1 - dot / 2))  # floor: the value is >= 0
            assert got == want, (cpu_req, gpu_total, cf, gf)


def test_ties_go_to_the_lowest_rank():
    # Empty cluster: n0 and n1 tie for dot-product's and spread's score; rank decides.
    obs = observe((1, 1000, 8000), node_rank=[3, 0, 2, 1])
    assert chosen_node(spread(None, obs, None), obs) == 1
    obs = observe((1, 1000, 8000), node_rank=[0, 3, 2, 1])
    assert chosen_node(spread(None, obs, None), obs) == 0


def test_sjf_starts_the_shortest_queued_job_first():
    # One 1-GPU node. j0 holds the GPU over [0, 100); j1 (work 50) and j2 (work 10) queue.
    # SJF starts j2 at 100 (ends 110) and j1 at 110 (ends 160); FIFO would start j1 first.
    sched = policies.get("sjf")
    assert sched.env_config(EnvConfig()).queue_order == "sjf"
    table = cl.NodeTable(names=("n0",), model=np.array([cl.model_id("V100M16")], np.int32),
                         num_gpus=np.array([1], np.int32), cpu_milli=np.array([8000], np.int32),
                         mem_mib=np.array([32768], np.int32))
    jobs = jobs_from_numpy([0, 1, 2], [100, 50, 10], [1, 1, 1], [1000] * 3, [1000] * 3, [1024] * 3)
    params = to_device(EnvParams(cl.to_cluster(table), observe((1, 500, 1000)).frag_classes))
    batch = to_device(jax.tree.map(lambda x: np.asarray(x)[None], jobs))
    env = ClusterEnv(sched.env_config(EnvConfig(tie_break="identity")))
    state, _ = rollout(env, sched.policy, None, params, batch, jax.random.key(0)[None], 20)
    assert np.asarray(state.start_s)[0].tolist() == [0, 110, 100]
