"""One rollout for every policy: heuristics and learned agents run through the same code.

``rollout`` resets a batch of episodes and steps them (vmapped) until every episode is done
or a step cap is reached, then returns the final states and per-episode metrics.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jaxsched.sim.env import ClusterEnv
from jaxsched.types import EnvParams, Jobs


def rollout(env: ClusterEnv, policy: Callable, policy_params, env_params: EnvParams,
            jobs: Jobs, keys, max_steps: int):
    """Run a batch of episodes to the end.

    env_params: one ``EnvParams`` shared by the batch. jobs: ``Jobs`` with a leading batch
    axis [B, J]. keys: [B] per-episode keys (results do not depend on how a batch is split).
    max_steps: step cap; an episode still running then has metrics["done"] == 0.
    Returns (final states [B], metrics dict of [B] arrays). Jit it with ``env`` and
    ``policy`` static (``jax.jit(rollout, static_argnums=(0, 1, 6))``).
    """
    reset_keys, step_keys = jax.vmap(lambda k: jax.random.split(k))(keys).swapaxes(0, 1)
    state, obs = jax.vmap(env.reset, in_axes=(0, None, 0))(reset_keys, env_params, jobs)

    def one_step(key, state, obs, t):
        k_policy, k_env = jax.random.split(jax.random.fold_in(key, t))
        action = policy(policy_params, obs, k_policy)
        state, obs, _, _, _ = env.step(k_env, state, action, env_params)
        return state, obs

    batched_step = jax.vmap(one_step, in_axes=(0, 0, 0, None))

    def cond(carry):
        state, _, t = carry
        return (t < max_steps) & ~state.core.done.all()

    def body(carry):
        state, obs, t = carry
        state, obs = batched_step(step_keys, state, obs, t)
        return state, obs, t + 1

    state, _, _ = jax.lax.while_loop(cond, body, (state, obs, jnp.int32(0)))
    return state, jax.vmap(env.metrics, in_axes=(0, None))(state, env_params)
