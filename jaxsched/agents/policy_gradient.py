"""What the policy-gradient learners share (DRR's A2C, GNN-PPO): the masked categorical
policy's log-probabilities and entropy, and GAE(lambda) advantages of a rollout.

A masked action has log-probability 0 here (not -inf) so that sums and products over the
action axis stay finite; every caller weights by the mask or picks only legal actions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def masked_log_softmax(logits, legal):
    """[..., A] log-probabilities over the legal actions (0 elsewhere: never taken).
    legal: [..., A] bool. A row with no legal action gives 0 everywhere."""
    logp = jax.nn.log_softmax(jnp.where(legal, logits, -1e9), axis=-1)
    return jnp.where(legal, logp, 0.0)


def entropy(logp, legal):
    """[...] entropy of the masked policy (nats); logp from ``masked_log_softmax``."""
    return -(jnp.where(legal, jnp.exp(logp) * logp, 0.0)).sum(-1)


def gae(rewards, values, dones, last_value, gamma: float, lam: float):
    """(advantages, returns) [T, E] of a rollout: rewards, values, dones [T, E] (done[t]: step
    t ended its episode, so nothing after it is bootstrapped), last_value [E] = V(s_T)."""
    def back(carry, x):
        next_adv, next_value = carry
        reward, value, done = x
        live = 1.0 - done.astype(jnp.float32)
        delta = reward + gamma * next_value * live - value
        adv = delta + gamma * lam * live * next_adv
        return (adv, value), adv

    _, adv = jax.lax.scan(back, (jnp.zeros_like(last_value), last_value), (rewards, values, dones), reverse=True)
    return adv, adv + values
