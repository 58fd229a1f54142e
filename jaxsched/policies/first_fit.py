"""first-fit: the lowest-index node where the job fits."""

import jax.numpy as jnp

from jaxsched.policies.common import first_fitting_slot, place_or_wait


def first_fit(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    slot = first_fitting_slot(obs)
    return place_or_wait(obs, slot, jnp.argmax(obs.place_mask[slot]))
