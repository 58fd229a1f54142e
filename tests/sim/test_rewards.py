"""Both reward definitions add up to minus the total JCT of an episode that runs to the end."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched.policies import get
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, to_device
from jaxsched.workload import synthetic
from tests.strategies import FRAG_CLASSES


@pytest.mark.parametrize("reward", ["in_system", "placed_jct"])
def test_return_is_minus_total_jct(reward):
    env = ClusterEnv(EnvConfig(window=4, reward=reward, reward_scale=1.0))
    params = to_device(EnvParams(cl.to_cluster(cl.preset(4)), FRAG_CLASSES))
    jobs = synthetic.generate(jax.random.key(5), synthetic.SyntheticConfig(num_jobs=60, mean_interarrival_s=30.0))
    policy = get("best-fit").policy

    def body(carry):
        state, obs, total, key = carry
        key, k = jax.random.split(key)
        state, obs, r, _, _ = env.step(k, state, policy(None, obs, k), params)
        return state, obs, total + r, key

    state, obs = env.reset(jax.random.key(1), params, jobs)
    state, _, total, _ = jax.jit(lambda c: jax.lax.while_loop(lambda c: ~c[0].core.done, body, c))(
        (state, obs, jnp.float32(0.0), jax.random.key(2)))
    jct = np.asarray(state.end_s - jobs.arrival_s, np.float64)[np.asarray(jobs.valid)]
    assert int(env.metrics(state, params)["finished"]) == 60
    np.testing.assert_allclose(float(total), -jct.sum(), rtol=1e-4)
