"""Sharded rollouts (episodes split across devices) give exactly the unsharded results.

The multi-device run needs XLA_FLAGS set before JAX starts, so it runs in a subprocess
with 4 host (CPU) devices and compares, per episode, metrics and schedules of
``sharded_rollout`` against ``rollout`` on one device and against a 1-device process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

SCRIPT = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    from jaxsched import cluster as cl
    from jaxsched.policies import get
    from jaxsched.rollout import rollout, sharded_rollout
    from jaxsched.sim import ClusterEnv, EnvConfig
    from jaxsched.types import EnvParams, to_device
    from jaxsched.workload import synthetic, classes

    nodes = cl.preset(8)
    syn = synthetic.SyntheticConfig(num_jobs=60, target_load=0.9, cluster_gpus=nodes.total_gpus,
                                    mean_interarrival_s=30.0)
    frag = classes.target_workload([4000, 8000], [500, 1000], [1, 1], ["", ""])
    params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    keys = jax.random.split(jax.random.key(7), 6)          # 6 episodes: not a multiple of 4
    jobs = jax.vmap(lambda k: synthetic.generate(k, syn))(keys)
    env = ClusterEnv(EnvConfig(running_capacity=64))
    out = {}
    for name, fn in (("plain", rollout), ("sharded", sharded_rollout)):
        state, m = jax.jit(lambda p, j, k: fn(env, get("best-fit").policy, None, p, j, k, 400))(
            params, jobs, keys)
        out[name] = {"metrics": {k: np.asarray(v).tolist() for k, v in m.items()},
                     "end_s": np.asarray(state.end_s).tolist(), "node": np.asarray(state.node).tolist()}
    out["devices"] = len(jax.devices())
    json.dump(out, sys.stdout)
""")


def run(devices: int) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_sharded_rollout_matches_unsharded_episode_by_episode():
    four, one = run(4), run(1)
    assert four["devices"] == 4 and one["devices"] == 1
    reference = one["plain"]
    for result in (four["plain"], four["sharded"], one["sharded"]):
        for field in ("end_s", "node"):
            np.testing.assert_array_equal(result[field], reference[field])
        for name, values in reference["metrics"].items():
            np.testing.assert_array_equal(result["metrics"][name], values, err_msg=name)
    assert sum(reference["metrics"]["finished"]) > 0  # the episodes did real work
