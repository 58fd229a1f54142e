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


def _play_to_the_end(env, params, jobs, policy):
    """(final state, undiscounted return) of one episode played by ``policy`` until done."""
    def body(carry):
        state, obs, total, key = carry
        key, k = jax.random.split(key)
        state, obs, r, _, _ = env.step(k, state, policy(None, obs, k), params)
        return state, obs, total + r, key

    state, obs = env.reset(jax.random.key(1), params, jobs)
    state, _, total, _ = jax.jit(lambda c: jax.lax.while_loop(lambda c: ~c[0].core.done, body, c))(
        (state, obs, jnp.float32(0.0), jax.random.key(2)))
    return state, total


@pytest.mark.parametrize("reward", ["in_system", "placed_jct"])
def test_return_is_minus_total_jct(reward):
    env = ClusterEnv(EnvConfig(window=4, reward=reward, reward_scale=1.0))
    params = to_device(EnvParams(cl.to_cluster(cl.preset(4)), FRAG_CLASSES))
    jobs = synthetic.generate(jax.random.key(5), synthetic.SyntheticConfig(num_jobs=60, mean_interarrival_s=30.0))
    policy = get("best-fit").policy

    state, total = _play_to_the_end(env, params, jobs, policy)
    jct = np.asarray(state.end_s - jobs.arrival_s, np.float64)[np.asarray(jobs.valid)]
    assert int(env.metrics(state, params)["finished"]) == 60
    np.testing.assert_allclose(float(total), -jct.sum(), rtol=1e-4)


def test_gpu_price_charges_fast_gpu_time_held_on_top_of_the_jct():
    # reward_gpu_price p: each placement also pays p * (GPUs held) * (run time) * max(0,
    # speed / s_common - 1), s_common the GPU-weighted median speed. Recomputed here in numpy
    # from where the episode put every job.
    price = 0.5
    env = ClusterEnv(EnvConfig(window=4, reward="placed_jct", reward_gpu_price=price, reward_scale=1.0))
    params = to_device(EnvParams(cl.to_cluster(cl.preset(16)), FRAG_CLASSES))  # speeds 0.45 .. 1.2
    jobs = synthetic.generate(jax.random.key(5), synthetic.SyntheticConfig(num_jobs=60, mean_interarrival_s=30.0))
    policy = get("hops").policy  # hops puts jobs on the fast GPUs

    state, total = _play_to_the_end(env, params, jobs, policy)
    c = jax.device_get(params.cluster)
    valid = np.asarray(jobs.valid)
    speed, gpus = np.asarray(c.speed, np.float64), np.asarray(c.num_gpus, np.float64)
    order = np.argsort(speed, kind="stable")
    s_common = speed[order][np.argmax(np.cumsum(gpus[order]) >= gpus.sum() / 2)]
    node = np.asarray(state.node)[valid]
    num_gpu, milli = np.asarray(jobs.num_gpu)[valid], np.asarray(jobs.gpu_milli)[valid]
    run_s = np.where(num_gpu > 0, np.asarray(jobs.work_s, np.float64)[valid] / speed[node],
                     np.asarray(jobs.work_s)[valid])
    charge = price * num_gpu * milli / 1000 * run_s * np.maximum(speed[node] / s_common - 1, 0)
    jct = np.asarray(state.end_s - jobs.arrival_s, np.float64)[valid]
    assert charge.sum() > 0.05 * jct.sum()  # the price is a real part of the return here
    np.testing.assert_allclose(float(total), -(jct.sum() + charge.sum()), rtol=1e-4)


@pytest.mark.parametrize("bad", [{"reward_gpu_price": -1.0}, {"reward_gpu_price": float("nan")},
                                 {"reward_gpu_price": 1.0, "reward": "in_system"}])
def test_gpu_price_refuses_bad_values(bad):
    with pytest.raises(ValueError, match="reward_gpu_price"):
        EnvConfig(**{"reward": "placed_jct", **bad})
