"""EnvConfig.track_frag=False skips the fragmentation upkeep and changes nothing else."""

import dataclasses

import jax
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched.policies import get
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, to_device
from jaxsched.workload import synthetic
from tests.strategies import FRAG_CLASSES

FRAG_METRICS = ("frag_amount", "frag_rate")


@pytest.mark.slow
def test_untracked_fragmentation_leaves_the_schedule_and_other_metrics_unchanged():
    name = "best-fit"  # a GPU rule that reads free resources, not fragmentation
    params = to_device(EnvParams(cl.to_cluster(cl.preset(8)), FRAG_CLASSES))
    syn = synthetic.SyntheticConfig(num_jobs=80, target_load=1.2, cluster_capacity=cl.work_capacity(cl.preset(8)))
    keys = jax.random.split(jax.random.key(4), 6)
    jobs = jax.vmap(lambda k: synthetic.generate(k, syn))(keys)
    sched = get(name)
    tracked = sched.env_config(EnvConfig(window=4))
    results = []
    for config in (tracked, dataclasses.replace(tracked, track_frag=False)):
        env = ClusterEnv(config)
        state, metrics = jax.jit(lambda j, k: rollout(env, sched.policy, None, params, j, k, 400))(jobs, keys)
        results.append((jax.device_get(state), jax.device_get(metrics)))
    (on_state, on), (off_state, off) = results
    assert np.all(on["done"]) and np.all(off["done"])
    assert np.all(np.asarray(on["frag_rate"]) > 0)  # fragmentation was there to track
    for metric in FRAG_METRICS:
        assert np.all(np.isnan(off[metric]))
    for metric in set(on) - set(FRAG_METRICS):
        np.testing.assert_array_equal(on[metric], off[metric], err_msg=metric)
    np.testing.assert_array_equal(off_state.core.frag_node, 0.0)
    for field in ("node", "gpu_bits", "start_s", "end_s"):
        np.testing.assert_array_equal(getattr(on_state, field), getattr(off_state, field), err_msg=field)
