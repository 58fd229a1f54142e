"""Adapters of the gymnax env (``gymnax_env``) for outside JAX trainers that want an array
observation and gymnax's older 5-value ``step`` (e.g. rejax 0.1.3).

    env, params = gymnax_env.make(num_nodes=8, num_jobs=64)
    flat = gymnax_adapters.FlatObs(env)            # obs: one [D + A] float32 array
    legacy = gymnax_adapters.FiveValueStep(flat)   # step -> (obs, state, reward, done, info)
    legacy = gymnax_adapters.for_rejax(env)        # the two together

``FlatObs``: a gymnax ``Environment`` whose observation is the flat array
``concatenate([features, action_mask])`` [D + A] float32, a ``spaces.Box`` with that shape
(what networks built from ``observation_space(params).shape`` need):
  [0, D)      ``gymnax_env.features`` (the module docstring of ``gymnax_env``)
  [D, D + A)  the legal action mask as 0.0 / 1.0 (A = K*N + K + 1, ``jaxsched.actions``)
``features(obs)`` and ``action_mask(obs)`` split it again (any leading batch axes), so a
masked policy can read its mask from the observation; the mask stays right across gymnax's
auto-reset. Everything else (actions, illegal actions, rewards, ``metrics``, ``Params``) is
the wrapped env's. Note: an observation normaliser over the whole array (e.g. rejax's
``normalize_observations``) also rescales the mask part.

``FiveValueStep``: gymnax before 0.0.9 returned ``(obs, state, reward, done, info)`` from
``step``; gymnax 1.x returns ``(obs, state, reward, terminated, truncated, info)``. This
wrapper returns the five, with ``done = terminated | truncated`` (a truncated episode looks
ended, as it did then) and ``info["terminated"]``, ``info["truncated"]`` kept. It still
auto-resets. ``reset``, ``step_env`` and the spaces are the wrapped env's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from gymnax.environments import environment, spaces

from jaxsched import gymnax_env


def features(obs: jax.Array, num_actions: int) -> jax.Array:
    """[..., D] the features of a flat observation [..., D + A]."""
    return obs[..., :-num_actions]


def action_mask(obs: jax.Array, num_actions: int) -> jax.Array:
    """[..., A] bool, the legal actions of a flat observation [..., D + A]."""
    return obs[..., -num_actions:] > 0.5


def flatten(obs: gymnax_env.Obs) -> jax.Array:
    """[..., D + A] float32: ``obs.features`` then ``obs.action_mask`` as 0.0 / 1.0."""
    return jnp.concatenate([obs.features, obs.action_mask.astype(jnp.float32)], -1)


class FlatObs(environment.Environment):
    """``env`` (a ``gymnax_env.ClusterGymnax``) with the flat array observation (module docstring)."""

    def __init__(self, env: gymnax_env.ClusterGymnax):
        super().__init__()
        self.env = env

    @property
    def default_params(self) -> gymnax_env.Params:
        return self.env.default_params

    def reset_env(self, key, params: gymnax_env.Params):
        obs, state = self.env.reset_env(key, params)
        return flatten(obs), state

    def step_env(self, key, state: gymnax_env.State, action, params: gymnax_env.Params):
        obs, state, reward, done, info = self.env.step_env(key, state, action, params)
        return flatten(obs), state, reward, done, info

    def is_terminated(self, state: gymnax_env.State, params: gymnax_env.Params):
        return self.env.is_terminated(state, params)

    def metrics(self, state: gymnax_env.State, params: gymnax_env.Params) -> dict:
        """The episode's metrics (``ClusterGymnax.metrics``)."""
        return self.env.metrics(state, params)

    @property
    def name(self) -> str:
        return self.env.name + "-flat"

    @property
    def num_actions(self) -> int:
        return self.env.num_actions

    def action_space(self, params: gymnax_env.Params | None = None) -> spaces.Discrete:
        return self.env.action_space(params)

    def observation_space(self, params: gymnax_env.Params | None = None) -> spaces.Box:
        size = sum(s.shape[0] for s in self.env.observation_space(params).spaces.values())
        return spaces.Box(0.0, jnp.inf, (size,), jnp.float32)


class FiveValueStep(environment.Environment):
    """``env`` (any gymnax env) whose ``step`` returns gymnax's older five values (module docstring)."""

    def __init__(self, env: environment.Environment):
        super().__init__()
        self.env = env

    @property
    def default_params(self):
        return self.env.default_params

    def step(self, key, state, action, params=None):
        """-> (obs, state, reward, done, info): gymnax's auto-resetting ``step`` with
        done = terminated | truncated; info["terminated"], info["truncated"] as gymnax's."""
        obs, state, reward, terminated, truncated, info = self.env.step(key, state, action, params)
        return obs, state, reward, terminated | truncated, info

    def reset(self, key, params=None):
        return self.env.reset(key, params)

    def reset_env(self, key, params):
        return self.env.reset_env(key, params)

    def step_env(self, key, state, action, params):
        return self.env.step_env(key, state, action, params)

    def is_terminated(self, state, params):
        return self.env.is_terminated(state, params)

    def metrics(self, state, params) -> dict:
        return self.env.metrics(state, params)

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def num_actions(self) -> int:
        return self.env.num_actions

    def action_space(self, params=None):
        return self.env.action_space(params)

    def observation_space(self, params=None):
        return self.env.observation_space(params)


def for_rejax(env: gymnax_env.ClusterGymnax) -> FiveValueStep:
    """``FiveValueStep(FlatObs(env))``: an array observation with a shape and the 5-value
    ``step`` that rejax 0.1.3's algorithms and ``rejax.evaluate`` unpack."""
    return FiveValueStep(FlatObs(env))
