"""Iterations of the turn-by-turn loop a batch takes, counted on the CPU.

A GPU runs a benchmark batch in one ``vmap``, turn by turn (``rollout._rollout_turns``): its
run time over these iterations is the time of one iteration, which says whether the loop is
bound by its launches (flat in the batch) or by the bytes it moves (growing with it)
(results/gpu/README.md). The same episodes as ``scripts/bench.py`` (its setup and keys).

    python scripts/turn_iterations.py --nodes 64 --jobs 500 --batches 1024 4096
"""

from __future__ import annotations

import argparse
import sys

import jax

from jaxsched import policies
from jaxsched.benchmark import make_setup
from jaxsched.rollout import TURNS, _rollout_turns
from jaxsched.sim import ClusterEnv
from jaxsched.workload import synthetic


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=500, help="jobs per episode (bench.py's --jobs)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1024])
    parser.add_argument("--schedulers", nargs="+", default=["first-fit"])
    args = parser.parse_args(argv)
    _, workload, _, params, env_config = make_setup(args.nodes, args.jobs, 512)
    for name in args.schedulers:
        sched = policies.get(name)
        env = ClusterEnv(sched.env_config(env_config))
        run = jax.jit(lambda j, k: _rollout_turns(env, sched.policy, None, params, j, k, 3 * args.jobs + 100,
                                                  sched.turns or TURNS, count=True))
        for batch in args.batches:
            keys = jax.random.split(jax.random.key(0), batch)  # bench.py's episodes
            jobs = jax.vmap(lambda k: synthetic.generate(k, workload))(keys)
            _, metrics, iterations = run(jobs, keys)
            print(f"{name}, {args.nodes} nodes, {batch} episodes: {int(iterations)} iterations, "
                  f"{int(metrics['decisions'].sum()):,} decisions", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
