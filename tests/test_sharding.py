"""Sharded rollouts (episodes split across devices) give exactly the unsharded results.

The multi-device run needs XLA_FLAGS set before JAX starts, so it runs in a subprocess
with 4 host (CPU) devices and compares, per episode, metrics and schedules of
``sharded_rollout`` against ``rollout`` on one device. A second process also has whole-loop
kernels (``devices.configure_cpu``), where rollouts run each episode alone and XLA compiles
its loop into one kernel: the same episodes again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

SCRIPT = textwrap.dedent("""
    import json, sys
    from jaxsched import devices
    if "whole-loop" in sys.argv:
        devices.configure_cpu()  # as the CLIs do; keeps the device count set below
    import jax, numpy as np
    from jaxsched import cluster as cl
    from jaxsched.policies import get
    from jaxsched.rollout import default_chunk, rollout, sharded_rollout
    from jaxsched.sim import ClusterEnv, EnvConfig
    from jaxsched.types import EnvParams, to_device
    from jaxsched.workload import synthetic, classes

    nodes = cl.preset(8)
    syn = synthetic.SyntheticConfig(num_jobs=60, target_load=0.9, cluster_capacity=cl.work_capacity(nodes),
                                    mean_interarrival_s=30.0)
    frag = classes.target_workload([4000, 8000], [500, 1000], [1, 1], ["", ""])
    params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    keys = jax.random.split(jax.random.key(7), 6)          # 6 episodes: not a multiple of 4
    jobs = jax.vmap(lambda k: synthetic.generate(k, syn))(keys)
    out = {}
    for scheduler in ("fgd",):  # its GPU rule and scores: the most the env does per decision
        sched = get(scheduler)
        env = ClusterEnv(sched.env_config(EnvConfig(running_capacity=64)))
        for name, fn in (("plain", rollout), ("sharded", sharded_rollout)):
            compiled = jax.jit(lambda p, j, k: fn(env, sched.policy, None, p, j, k, 400, turns=sched.turns)
                               ).lower(params, jobs, keys).compile()
            state, m = compiled(params, jobs, keys)
            out["one-kernel loops"] = compiled.as_text().count('xla_cpu_small_call="true"')
            out[f"{scheduler} {name}"] = {
                "metrics": {k: np.asarray(v).tolist() for k, v in m.items()},
                "end_s": np.asarray(state.end_s).tolist(), "node": np.asarray(state.node).tolist(),
                "frag_node": np.asarray(state.core.frag_node).tolist()}
    out["devices"] = len(jax.devices())
    out["chunk"] = default_chunk()
    json.dump(out, sys.stdout)
""")


def start(devices: int, whole_loop: bool = False) -> subprocess.Popen:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               JAX_PLATFORMS="cpu")
    argv = ["whole-loop"] if whole_loop else []
    return subprocess.Popen([sys.executable, "-c", SCRIPT, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).resolve().parents[1])


def finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out)


@pytest.mark.slow
def test_sharded_rollout_matches_unsharded_episode_by_episode():
    processes = start(4), start(4, whole_loop=True)  # side by side: mostly compiling
    four, whole = map(finish, processes)
    assert (four["devices"], whole["devices"]) == (4, 4)
    assert four["chunk"] > 1 and whole["chunk"] == 1  # episodes batched; each alone
    assert whole["one-kernel loops"] > four["one-kernel loops"]  # the episode loops too
    for scheduler in ("fgd",):
        reference = four[f"{scheduler} plain"]  # on one device
        for process in (four, whole):
            for name in ("plain", "sharded"):
                result = process[f"{scheduler} {name}"]
                for field in ("end_s", "node", "frag_node"):
                    np.testing.assert_array_equal(result[field], reference[field], err_msg=field)
                for metric, values in reference["metrics"].items():
                    np.testing.assert_array_equal(result["metrics"][metric], values, err_msg=metric)
        assert sum(reference["metrics"]["finished"]) > 0  # the episodes did real work
