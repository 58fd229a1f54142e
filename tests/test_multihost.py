"""Across processes (the multi-host setting, here two processes on one machine).

Each process runs ``jax.distributed.initialize``; ``sharded_rollout`` then splits episodes
over the devices of all processes. Every process must gather exactly the per-episode metrics
of a plain single-process ``rollout``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched.policies import get
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, to_device
from jaxsched.workload import classes, synthetic
from tests.settings import COMPILE_FLAGS

ROOT = Path(__file__).resolve().parents[1]


def episode_setup():
    """The env, params, jobs [4, J] and keys every process builds identically."""
    nodes = cl.preset(8)
    syn = synthetic.SyntheticConfig(num_jobs=40, target_load=0.9, cluster_capacity=cl.work_capacity(nodes),
                                    mean_interarrival_s=30.0)
    params = to_device(EnvParams(cl.to_cluster(nodes), classes.target_workload([4000], [500], [1], [""])))
    keys = jax.random.split(jax.random.key(7), 4)
    jobs = jax.vmap(lambda k: synthetic.generate(k, syn))(keys)
    return ClusterEnv(EnvConfig(running_capacity=64)), params, jobs, keys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_gather_the_single_process_results():
    port, n = str(free_port()), 2
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env["XLA_FLAGS"] = COMPILE_FLAGS  # no host-device flags; the tests' compile flag
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "multihost_worker.py"), str(i), str(n), port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for i in range(n)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]

    run_env, params, jobs, keys = episode_setup()
    _, expected = jax.jit(lambda p, j, k: rollout(run_env, get("best-fit").policy, None, p, j, k, 300))(
        params, jobs, keys)
    for result in results:
        assert result["devices"] == n and result["local_devices"] == 1
        for name, values in expected.items():
            values = np.asarray(values)
            if np.issubdtype(values.dtype, np.floating):  # the tests' compile flag: a float sum's last bit may differ
                np.testing.assert_allclose(result["metrics"][name], values, rtol=1e-6, atol=0, err_msg=name)
            else:  # counts, outcomes: exactly
                np.testing.assert_array_equal(result["metrics"][name], values, err_msg=name)
