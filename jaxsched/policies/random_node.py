"""random: a node drawn uniformly among those where the job fits (FGD paper's Random).

The env's GPU rule for this entry is "random" too: a fractional job gets a GPU drawn
uniformly among those with room.
"""

import jax
import jax.numpy as jnp

from jaxsched.policies.common import first_fitting_slot, place_or_wait


def random_node(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params
    slot = first_fitting_slot(obs)
    node = jax.random.categorical(key, jnp.where(obs.place_mask[slot], 0.0, -jnp.inf))
    return place_or_wait(obs, slot, node)
