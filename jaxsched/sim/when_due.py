"""``when_due``: rare work that stays skipped under ``jax.vmap``.

Under ``vmap`` a ``lax.cond`` whose predicate differs across the batch becomes a select:
both branches run for every episode at every call. The env's rescheduling pass and
reservation are due once in hundreds of decisions, yet they cost more than the event loop
(at 128 nodes the env took 25-37% of DRR's training time with the pass run at every step and
discarded, 3% without: results/bench/drr_train_speed.md).
``when_due`` carries its own batching rule (``jax.custom_batching.custom_vmap``): batched,
it runs the work for the whole batch, each episode masked by its own ``due``, and only when
some episode of the batch is due (of the whole batch under nested ``vmap``s); unbatched it is
a plain ``lax.cond``. The results are the same either way, provided ``run`` leaves an
episode that is not due unchanged.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


def when_due(due: Callable, run: Callable, state, params):
    """``run(state, params)`` where ``due(state)`` ([] bool) holds, else ``state``.

    ``run`` must return ``state`` unchanged for an episode that is not due (it masks its
    own work by the same flags), so running it on a whole batch is exact."""

    @custom_vmap
    def maybe_run(state, params):
        return jax.lax.cond(due(state), lambda: run(state, params), lambda: state)

    @maybe_run.def_vmap
    def batched(axis_size, in_batched, state, params):
        state_batched, params_batched = in_batched
        state = jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))),
                             state, state_batched)
        params_axes = jax.tree.map(lambda b: 0 if b else None, params_batched)
        # when_due again, of the batch: under a further vmap (runs over seeds, say) the work
        # stays skipped unless some episode of the whole batch is due.
        out = when_due(lambda s: jax.vmap(due)(s).any(),
                       lambda s, p: jax.vmap(run, in_axes=(0, params_axes))(s, p), state, params)
        return out, jax.tree.map(lambda _: True, out)

    return maybe_run(state, params)
