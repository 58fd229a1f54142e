"""Measuring the simulator's speed: shared by scripts/bench.py and scripts/scaling_study.py.

A decision is one env step of an episode that has not ended (padding steps do not count).
Compile time is measured separately (AOT ``lower().compile()``); the run time is the last of
``runs`` executions of the compiled rollout (by default the second), so it holds no
compilation (and, with runs >= 2, no warm-up).
"""

from __future__ import annotations

import time
from typing import NamedTuple

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


class Program(NamedTuple):
    """One benchmark point, lowered: its compiled rollout comes from ``compile_program``."""

    scheduler: str
    batch: int
    lowered: object          # jax.stages.Lowered
    args: tuple              # (params, jobs, keys)


def lower_jax(params, workload, env_config, scheduler: str, batch: int, max_steps: int, shard: bool) -> Program:
    """Trace and lower the rollout of ``batch`` synthetic episodes under ``scheduler``
    (the jobs are generated here, on the device)."""
    sched = policies.get(scheduler)
    env = ClusterEnv(sched.env_config(env_config))
    run_fn = sharded_rollout if shard else rollout
    gen = jax.jit(jax.vmap(lambda k: synthetic.generate(k, workload)))
    run = jax.jit(lambda p, j, k: run_fn(env, sched.bound_policy(env_config), None, p, j, k, max_steps, turns=sched.turns))
    keys = jax.random.split(jax.random.key(0), batch)
    jobs = jax.block_until_ready(gen(keys))
    return Program(scheduler, batch, run.lower(params, jobs, keys), (params, jobs, keys))


def compile_program(program: Program):
    """-> (compiled, seconds). XLA compiles with the GIL released, so threads overlap."""
    start = time.perf_counter()
    compiled = program.lowered.compile()
    return compiled, time.perf_counter() - start


def program_bytes(compiled) -> int | None:
    """Device memory the compiled rollout needs: its arguments, outputs and temporaries (XLA's
    own accounting, ``memory_analysis``; None where the backend gives none)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
               - stats.alias_size_in_bytes)


def device_bytes() -> int | None:
    """Memory of the first device (None where the backend does not say, e.g. a CPU)."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("bytes_limit")


def measure(compiled, program: Program, runs: int = 2):
    """Run the compiled rollout ``runs`` times and time the last (runs = 2: a warm-up, then
    the timed run). -> (result dict, the first two episodes' jobs as numpy, for the reference)."""
    for _ in range(runs - 1):
        jax.block_until_ready(compiled(*program.args))
    start = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(*program.args))
    run_s = time.perf_counter() - start
    decisions = int(metrics["decisions"].sum())
    jobs_done = int((metrics["finished"] + metrics["failed"] + metrics["rejected"]).sum())
    return {
        "run_s": round(run_s, 4), "runs": runs,
        "decisions": decisions, "decisions_per_s": decisions / run_s,
        "jobs_per_s": jobs_done / run_s, "episodes_done": int(metrics["done"].sum()),
        "state_bytes_per_episode": state_bytes_per_episode(state, program.batch),
    }, jax.tree.map(lambda x: np.asarray(x[:2]), state.jobs)


def out_of_memory(err: Exception) -> bool:
    """An XLA allocation failure (the batch does not fit on the device)."""
    return "RESOURCE_EXHAUSTED" in str(err) or "Out of memory" in str(err)


def bench_jax(params, workload, env_config, scheduler: str, batch: int, max_steps: int, shard: bool,
              runs: int = 2):
    """One benchmark point: compile (timed apart, AOT), then ``measure``."""
    program = lower_jax(params, workload, env_config, scheduler, batch, max_steps, shard)
    compiled, compile_s = compile_program(program)
    result, sample_jobs = measure(compiled, program, runs)
    return {"compile_s": round(compile_s, 3), **result}, sample_jobs


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


