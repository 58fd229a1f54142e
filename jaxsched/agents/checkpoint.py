"""Orbax checkpoints of a whole training runner (params, optimiser, replay, envs, RNG key).

The runner is saved as a flat dict of its leaves (typed PRNG keys as their raw key data) and
restored into the structure of a freshly initialised runner, so any pytree (NNX state,
flashbax buffer, env state) round-trips without orbax knowing its node types.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from jaxsched.errors import DataError


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_dict(tree) -> dict:
    leaves = jax.tree.leaves(tree)
    return {f"leaf_{i:05d}": np.asarray(jax.random.key_data(x) if _is_key(x) else x)
            for i, x in enumerate(leaves)}


def _from_dict(data: dict, like, where: str):
    leaves, treedef = jax.tree.flatten(like)
    if len(data) != len(leaves):
        raise DataError(where, None, "checkpoint", f"holds {len(data)} arrays, this config's runner "
                        f"{len(leaves)}: saved by another version or config")
    out = []
    for i, ref in enumerate(leaves):
        value = jnp.asarray(data[f"leaf_{i:05d}"])
        want = jax.random.key_data(ref).shape if _is_key(ref) else np.shape(ref)
        if value.shape != want:
            raise DataError(where, None, "checkpoint", f"array {i} has shape {value.shape}, this config "
                            f"needs {want}: trained with another config (train.num_seeds, network or env sizes?)")
        if _is_key(ref):
            value = jax.random.wrap_key_data(value, impl=jax.random.key_impl(ref))
        elif getattr(ref, "weak_type", False):  # e.g. flashbax's write index: keep its type, or
            value = ref.at[...].set(value)     # jitted code compiles again for the restored runner
        else:
            value = value.astype(ref.dtype)
        out.append(value)
    return jax.tree.unflatten(treedef, out)


def manager(directory: str | Path, max_to_keep: int = 2) -> ocp.CheckpointManager:
    """A checkpoint manager over ``directory`` (created if missing), keeping the last few."""
    return ocp.CheckpointManager(Path(directory).absolute(),
                                 options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep))


def save(mgr: ocp.CheckpointManager, step: int, runner) -> None:
    """Save ``runner`` as checkpoint ``step`` and wait until it is on disk."""
    mgr.save(step, args=ocp.args.StandardSave(_to_dict(runner)))
    mgr.wait_until_finished()


def restore(mgr: ocp.CheckpointManager, like, step: int | None = None):
    """(step, runner) of checkpoint ``step`` (default: the latest that can be read), shaped
    like ``like``; (None, None) when there is none. A latest checkpoint that cannot be read
    (cut or corrupt files) is said on stderr and the one before it is tried; none readable
    is a ``DataError``. A checkpoint of another shape (another config) is a ``DataError``,
    not a silent reshape, and no fallback."""
    steps = [step] if step is not None else sorted(mgr.all_steps(), reverse=True)
    for s in steps:
        try:
            data = mgr.restore(s, args=ocp.args.StandardRestore(_to_dict(like)))
        except Exception as err:  # orbax, tensorstore and zarr raise many kinds
            reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
            print(f"WARNING: checkpoint {mgr.directory}/{s} cannot be read ({reason})"
                  + ("; trying the one before" if s != steps[-1] else ""), file=sys.stderr)
            continue
        return s, _from_dict(data, like, f"{mgr.directory}/{s}")
    if steps:
        raise DataError(str(mgr.directory), None, "checkpoint",
                        f"no readable checkpoint among steps {sorted(steps)}")
    return None, None
