"""fifo: strict arrival order, a GPU model drawn at random (Gavel's FIFO baseline).

docs/schedulers.md, "fifo". Only the oldest queued job may start: the registry entry turns
the env's backfilling off (``backfill=False``: window slot 0 is the head of the queue, in
arrival order), and while that job fits nowhere every job waits behind it. When it fits, its
GPU model is drawn uniformly (from ``key``) among the models that have a node where it fits
now, and it goes to the lowest-index such node; a gang's anchor is that node and the env's
``gang_rule`` places its other parts, as for every flat policy. Non-preemptive and
event-driven (no rounds).
"""

import jax
import jax.numpy as jnp

from jaxsched import actions
from jaxsched.cluster import MODEL_NAMES


def fifo(params, obs, key):
    """policy(params, obs, key) -> flat action: place the head of the queue (slot 0) on a
    uniformly drawn model with room, lowest-index node of it; else wait."""
    del params
    num_slots, num_nodes = obs.place_mask.shape
    fits = obs.place_mask[0]                                  # [N] the head fits node n now
    model = obs.cluster.gpu_model                             # [N] index into MODEL_NAMES
    has_room = jnp.zeros(len(MODEL_NAMES), bool).at[model].max(fits)  # [M] a node of model m fits
    drawn = jax.random.categorical(key, jnp.where(has_room, 0.0, -jnp.inf))
    node = jnp.argmax(fits & (model == drawn))
    return jnp.where(fits.any(), actions.place(0, node, num_nodes),
                     actions.wait(num_slots, num_nodes)).astype(jnp.int32)
