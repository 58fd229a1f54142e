"""Orbax checkpoints of a whole training runner (params, optimiser, replay, envs, RNG key).

The runner is saved as a flat dict of its leaves (typed PRNG keys as their raw key data) and
restored into the structure of a freshly initialised runner, so any pytree (NNX state,
flashbax buffer, env state) round-trips without orbax knowing its node types.

A step that cannot be read (cut, corrupt or emptied files) is said on stderr and **moved
aside** to ``<step>.corrupt`` (a name orbax does not take for a step), and the one before it
is restored: every later reader (``--resume``, ``--checkpoint``) then finds the same newest
intact step, and a resumed run can save that step again. Whenever the step restored is older
than a step moved aside, that is said on stderr too.
"""

from __future__ import annotations

import re
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


CORRUPT_SUFFIX = ".corrupt"  # a step moved aside: "20.corrupt" (then "20.corrupt-1", ...)


def _read(directory: Path, step: int) -> dict:
    """The arrays of checkpoint ``step`` as saved (no target structure, so a failure means
    unreadable files, not another config). A throwaway manager: one that failed on a cut
    step folder keeps a wrong idea of its layout and fails on every step after it."""
    options = ocp.CheckpointManagerOptions(create=False)
    with ocp.CheckpointManager(directory, options=options) as reader:
        return reader.restore(step, args=ocp.args.StandardRestore())


def _move_aside(directory: Path, step: int) -> Path | None:
    """Rename step folder ``step`` to ``<step>.corrupt`` (``-1``, ``-2``, ... if taken); the
    new path, or None when it cannot be renamed (e.g. a read-only folder)."""
    target = directory / f"{step}{CORRUPT_SUFFIX}"
    k = 0
    while target.exists():
        k += 1
        target = directory / f"{step}{CORRUPT_SUFFIX}-{k}"
    try:
        (directory / str(step)).rename(target)
    except OSError:
        return None
    return target


def corrupt_steps(directory: str | Path) -> list[int]:
    """Steps under ``directory`` moved aside as unreadable (``<step>.corrupt*`` folders), sorted."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = (re.fullmatch(rf"(\d+){re.escape(CORRUPT_SUFFIX)}(-\d+)?", p.name) for p in folder.iterdir())
    return sorted({int(m.group(1)) for m in found if m})


def restore(mgr: ocp.CheckpointManager, like, step: int | None = None):
    """(step, runner) of checkpoint ``step`` (default: the latest that can be read), shaped
    like ``like``; (None, None) when there is none.

    A checkpoint that cannot be read (cut, corrupt or emptied files) is said on stderr,
    moved aside to ``<step>.corrupt`` and the one before it is tried; ``mgr`` is reloaded
    so that it no longer lists it (and can save that step again). Restoring a step older
    than one moved aside (now or by an earlier reader) is said on stderr, naming both.
    None readable, or none left but some moved aside, is a ``DataError``. A checkpoint of
    another shape (another config) is a ``DataError``, not a silent reshape, and no fallback.
    """
    directory = Path(mgr.directory)
    steps = [step] if step is not None else sorted(mgr.all_steps(), reverse=True)
    moved = False
    for s in steps:
        try:
            data = _read(directory, s)
        except Exception as err:  # orbax, tensorstore and zarr raise many kinds
            reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
            if not any(f.is_file() for f in (directory / str(s)).rglob("*")):
                reason = "its folder holds no files"  # orbax's own error would not say so
            aside = _move_aside(directory, s)
            moved = moved or aside is not None
            print(f"WARNING: checkpoint {directory}/{s} cannot be read ({reason}); "
                  + (f"moved aside to {aside.name}" if aside else "it could not be moved aside")
                  + ("; trying the one before" if s != steps[-1] else ""), file=sys.stderr)
            continue
        if moved:
            mgr.reload()
        newer = [c for c in corrupt_steps(directory) if c > s]
        if newer:
            print(f"WARNING: restored checkpoint {directory}/{s}, not the newer "
                  + ", ".join(f"{c}{CORRUPT_SUFFIX}" for c in newer)
                  + " (unreadable, moved aside): the runner is the one saved after "
                  + f"{s} updates", file=sys.stderr)
        return s, _from_dict(data, like, f"{directory}/{s}")
    if moved:
        mgr.reload()
    lost = corrupt_steps(directory)
    if steps or lost:
        raise DataError(str(directory), None, "checkpoint",
                        f"no readable checkpoint among steps {sorted(steps)}"
                        + (f"; unreadable steps moved aside: {lost} ({CORRUPT_SUFFIX} folders)" if lost else ""))
    return None, None
