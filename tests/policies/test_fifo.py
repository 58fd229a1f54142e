"""fifo (docs/schedulers.md, "fifo"): strict arrival order, and a GPU model drawn uniformly
among the models with a node where the head of the queue fits, its lowest-index node; and the
field's strict FIFO and SJF (``fifo-strict``, ``sjf-strict``: a window of one, no backfill)."""

import jax
import numpy as np

from jaxsched import cluster as cl
from jaxsched import policies
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from jaxsched.workload import classes

FIFO = policies.get("fifo")
ENV = ClusterEnv(FIFO.env_config(EnvConfig(window=4, queue_capacity=8, running_capacity=8)))
CLASSES = classes.target_workload([0], [1000], [1], [""])


def params_of(models, gpus):
    """EnvParams of one node per (model, GPUs) pair, in that order."""
    table = cl.NodeTable(names=tuple(f"n{i}" for i in range(len(models))),
                         model=np.asarray([cl.model_id(m) for m in models], np.int32),
                         num_gpus=np.asarray(gpus, np.int32), cpu_milli=np.full(len(models), 8000, np.int32),
                         mem_mib=np.full(len(models), 1 << 16, np.int32))
    return to_device(EnvParams(cl.to_cluster(table), CLASSES))


def whole_gpu_jobs(arrival_s, work_s, num_gpu):
    n = len(arrival_s)
    return to_device(jobs_from_numpy(arrival_s, work_s, num_gpu, np.full(n, 1000), np.zeros(n), np.zeros(n)))


def models_drawn(params, num_gpu, draws=900):
    """[draws] the model of the node fifo picks for one job of ``num_gpu`` GPUs on the empty
    cluster, one draw per key; -1 for a wait."""
    _, obs = ENV.reset(jax.random.key(0), params, whole_gpu_jobs([0.0], [10.0], [num_gpu]))
    keys = jax.random.split(jax.random.key(7), draws)
    action = np.asarray(jax.vmap(FIFO.policy, in_axes=(None, None, 0))(None, obs, keys))
    num_nodes = obs.place_mask.shape[1]
    node = np.where(action < num_nodes, action, -1)  # slot 0's place actions are 0..N-1
    model = np.asarray(params.cluster.gpu_model)
    return np.where(node >= 0, model[node], -1), node


def test_fifo_keeps_a_small_job_waiting_behind_a_big_one_that_does_not_fit():
    # One 2-GPU node. Job 0 holds one GPU until t = 1000; job 1 needs both; job 2 needs one,
    # which is free from t = 2, but job 1 is ahead of it: job 1 starts at 1000, job 2 at 1010.
    params = params_of(["V100"], [2])
    jobs = jax.tree.map(lambda x: x[None], whole_gpu_jobs([0.0, 1.0, 2.0], [1000.0, 10.0, 10.0], [1, 2, 1]))
    keys = jax.random.split(jax.random.key(0), 1)
    starts = {}
    for name in ("fifo", "fifo-strict", "sjf-strict", "first-fit"):
        sched = policies.get(name)
        env = ClusterEnv(sched.env_config(EnvConfig(window=4, queue_capacity=8, running_capacity=8)))
        state, _ = jax.jit(lambda j, k: rollout(env, sched.policy, None, params, j, k, 20))(jobs, keys)
        starts[name] = np.asarray(state.start_s)[0]
    assert starts["fifo"].tolist() == starts["fifo-strict"].tolist() == [0.0, 1000.0, 1010.0]
    # strict SJF: job 2 (work 10) is no shorter than job 1 (10): arrival order breaks the tie
    assert starts["sjf-strict"].tolist() == [0.0, 1000.0, 1010.0]
    assert starts["first-fit"].tolist() == [0.0, 1000.0, 2.0]  # backfilling: the test tells them apart


def test_strict_sjf_starts_the_shortest_queued_job_first_or_nothing():
    # One 2-GPU node held by job 0 until 100. Queued: job 1 (2 GPUs, 50 s), job 2 (1 GPU, 30 s),
    # job 3 (2 GPUs, 5 s). At 100 strict SJF starts job 3 (shortest), then job 2 at 105 (it fits
    # beside nothing else: job 1 needs both), then job 1 at 135; it never backfills.
    params = params_of(["V100"], [2])
    jobs = jax.tree.map(lambda x: x[None], whole_gpu_jobs([0.0, 1.0, 2.0, 3.0], [100.0, 50.0, 30.0, 5.0],
                                                          [2, 2, 1, 2]))
    sched = policies.get("sjf-strict")
    env = ClusterEnv(sched.env_config(EnvConfig(window=4, queue_capacity=8, running_capacity=8)))
    assert (env.config.window, env.config.backfill, env.config.tie_break) == (1, False, "identity")
    state, _ = jax.jit(lambda j, k: rollout(env, sched.policy, None, params, j, k, 20))(
        jobs, jax.random.split(jax.random.key(0), 1))
    assert np.asarray(state.start_s)[0].tolist() == [0.0, 135.0, 105.0, 100.0]


def test_fifo_draws_the_model_uniformly_not_the_node_nor_the_first():
    # Three V100 nodes, one P100, one K80, all free: each model 1/3 of the time (300 of 900,
    # sd 14). Uniform over nodes would give V100 540, first-fit 900.
    params = params_of(["V100", "V100", "V100", "P100", "K80"], [1, 1, 1, 1, 1])
    model, node = models_drawn(params, 1)
    counts = {m: int((model == cl.model_id(m)).sum()) for m in ("V100", "P100", "K80")}
    assert all(abs(c - 300) < 60 for c in counts.values()), counts
    assert set(node[model == cl.model_id("V100")].tolist()) == {0}  # the model's lowest-index node


def test_fifo_never_draws_a_model_without_room():
    # A 2-GPU job: the V100 node has one GPU, so only P100 and K80 have room (450 each).
    params = params_of(["V100", "P100", "K80"], [1, 2, 2])
    model, _ = models_drawn(params, 2)
    counts = {m: int((model == cl.model_id(m)).sum()) for m in ("V100", "P100", "K80")}
    assert counts["V100"] == 0, counts
    assert abs(counts["P100"] - 450) < 65 and abs(counts["K80"] - 450) < 65, counts


def test_fifo_waits_when_the_head_fits_nowhere():
    # The head needs 2 GPUs on a cluster of 1-GPU nodes (max_span 1): never placed anywhere.
    params = params_of(["V100", "P100"], [1, 2])
    _, obs = ENV.reset(jax.random.key(0), params, whole_gpu_jobs([0.0], [10.0], [2]))
    # Fill the P100 node by hand: the head then fits nowhere, and fifo waits.
    obs = obs.replace(place_mask=obs.place_mask.at[0, 1].set(False).at[1, 0].set(True))
    num_slots, num_nodes = obs.place_mask.shape
    assert int(FIFO.policy(None, obs, jax.random.key(3))) == num_slots * num_nodes + num_slots
