"""Measuring the simulator's speed: shared by scripts/bench.py and scripts/scaling_study.py.

A decision is one env step of an episode that has not ended (padding steps do not count).
Compile time is measured separately (AOT ``lower().compile()``); the run time is the second
execution of the compiled rollout, so it holds neither compilation nor warm-up.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from jaxsched import cluster as cl
from jaxsched import paths, policies, reference
from jaxsched.rollout import rollout, sharded_rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, to_device
from jaxsched.workload import classes, synthetic

# DRR's published mean inter-arrival times; other sizes scale 8 s at 64 nodes.
INTERARRIVAL_S = {32: 16.0, 64: 8.0, 128: 3.8}


def make_nodes(num_nodes: int) -> cl.NodeTable:
    """The openb-mix preset; 1213 = the real openb GPU-node list when the data is present."""
    data = paths.data_dir()
    if num_nodes == 1213 and data is not None:
        path = data / "alibaba-gpu-v2023" / "openb_node_list_gpu_node.csv"
        if path.exists():
            return cl.load_openb_nodes(path)
    return cl.preset(num_nodes)


def make_setup(num_nodes: int, jobs_per_episode: int, running_capacity: int, track_frag: bool = True):
    nodes = make_nodes(num_nodes)
    workload = synthetic.SyntheticConfig(
        num_jobs=jobs_per_episode, target_load=0.9, cluster_capacity=cl.work_capacity(nodes),
        mean_interarrival_s=INTERARRIVAL_S.get(num_nodes, 8.0 * 64 / num_nodes))
    rows = np.repeat(np.asarray(workload.job_classes), np.asarray(workload.job_classes)[:, 4], axis=0)
    frag = classes.target_workload(rows[:, 2], rows[:, 1], rows[:, 0], [""] * len(rows))
    params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    env_config = EnvConfig(running_capacity=running_capacity, track_frag=track_frag)
    return nodes, workload, frag, params, env_config


def state_bytes_per_episode(state, batch: int) -> int:
    return sum(x.nbytes for x in jax.tree.leaves(state)) // batch


def bench_jax(params, workload, env_config, scheduler: str, batch: int, max_steps: int, shard: bool):
    sched = policies.get(scheduler)
    env = ClusterEnv(sched.env_config(env_config))
    run_fn = sharded_rollout if shard else rollout
    gen = jax.jit(jax.vmap(lambda k: synthetic.generate(k, workload)))
    run = jax.jit(lambda p, j, k: run_fn(env, sched.policy, None, p, j, k, max_steps, turns=sched.turns))

    keys = jax.random.split(jax.random.key(0), batch)
    jobs = jax.block_until_ready(gen(keys))
    start = time.perf_counter()
    compiled = run.lower(params, jobs, keys).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(params, jobs, keys))  # warm-up run
    start = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(params, jobs, keys))
    run_s = time.perf_counter() - start
    decisions = int(metrics["decisions"].sum())
    jobs_done = int((metrics["finished"] + metrics["failed"] + metrics["rejected"]).sum())
    return {
        "compile_s": round(compile_s, 3), "run_s": round(run_s, 4),
        "decisions": decisions, "decisions_per_s": decisions / run_s,
        "jobs_per_s": jobs_done / run_s, "episodes_done": int(metrics["done"].sum()),
        "state_bytes_per_episode": state_bytes_per_episode(state, batch),
    }, jax.tree.map(lambda x: np.asarray(x[:2]), state.jobs)


def bench_reference(nodes, jobs_np, frag, env_config, scheduler: str, cap: int):
    """Reference decisions per second over a few episodes, at most ``cap`` decisions."""
    config = reference.RefConfig.like(policies.get(scheduler).env_config(env_config))
    cluster = cl.to_cluster(nodes)
    decisions, elapsed = 0, 0.0
    for i in range(jobs_np.arrival_s.shape[0]):
        one = jax.tree.map(lambda x: x[i], jobs_np)
        start = time.perf_counter()
        sim = reference.ReferenceSim(cluster, one, frag, config)
        while not sim.done and decisions < cap:
            sim.step(reference.heuristic_action(sim, scheduler))
            decisions += 1
        elapsed += time.perf_counter() - start
        if decisions >= cap:
            break
    return {"decisions": decisions, "run_s": round(elapsed, 3), "decisions_per_s": decisions / elapsed}


