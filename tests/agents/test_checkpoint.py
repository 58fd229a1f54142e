"""Checkpoints that cannot be read: moved aside, the newest intact step restored, said."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched.agents import checkpoint
from jaxsched.errors import DataError


def _runner(step):
    """A tiny runner-like pytree: params, a PRNG key and a weakly typed counter."""
    return {"params": {"w": jnp.full((2, 3), float(step))}, "key": jax.random.key(step),
            "update": jnp.asarray(step)}


def _series(directory, steps=(10, 20)):
    mgr = checkpoint.manager(directory, max_to_keep=3)
    for s in steps:
        checkpoint.save(mgr, s, _runner(s))
    mgr.close()


def _garble(step_dir):
    for f in step_dir.rglob("*"):
        if f.is_file():
            f.write_bytes(b"\0garbage")


def _empty(step_dir):
    for f in step_dir.iterdir():
        shutil.rmtree(f) if f.is_dir() else f.unlink()


@pytest.mark.parametrize("damage, reason", [(_garble, "JSONDecodeError"), (_empty, "its folder holds no files")])
def test_unreadable_latest_is_moved_aside_and_the_one_before_restored(tmp_path, capfd, damage, reason):
    folder = tmp_path / "ckpt"
    _series(folder)
    damage(folder / "20")
    mgr = checkpoint.manager(folder)
    step, restored = checkpoint.restore(mgr, _runner(0))
    err = capfd.readouterr().err
    assert step == 10
    np.testing.assert_array_equal(np.asarray(restored["params"]["w"]), np.full((2, 3), 10.0))
    assert f"{folder}/20 cannot be read ({reason}" in err and "moved aside to 20.corrupt" in err
    assert f"restored checkpoint {folder}/10, not the newer 20.corrupt" in err
    assert (folder / "20.corrupt").is_dir() and not (folder / "20").exists()
    assert list(mgr.all_steps()) == [10]
    checkpoint.save(mgr, 20, _runner(21))  # the step can be saved again (orbax skips a listed one)
    mgr.close()
    # A later reader (another process) restores the new step 20; the old copy stays aside.
    mgr = checkpoint.manager(folder)
    step, restored = checkpoint.restore(mgr, _runner(0))
    mgr.close()
    assert step == 20 and float(restored["params"]["w"][0, 0]) == 21.0
    assert checkpoint.corrupt_steps(folder) == [20]


def test_later_readers_see_the_same_step_and_are_told_of_the_newer_one_lost(tmp_path, capfd):
    folder = tmp_path / "ckpt"
    _series(folder)
    _garble(folder / "20")
    for _ in range(2):  # the first reader moves 20 aside; the second finds 10 the newest
        mgr = checkpoint.manager(folder)
        step, _ = checkpoint.restore(mgr, _runner(0))
        mgr.close()
        assert step == 10
        assert "not the newer 20.corrupt" in capfd.readouterr().err


def test_nothing_readable_is_refused_and_stays_refused(tmp_path, capfd):
    folder = tmp_path / "ckpt"
    _series(folder)
    _garble(folder / "10")
    _empty(folder / "20")
    for _ in range(2):
        mgr = checkpoint.manager(folder)
        with pytest.raises(DataError, match=r"no readable checkpoint.*moved aside: \[10, 20\]"):
            checkpoint.restore(mgr, _runner(0))
        mgr.close()
    assert checkpoint.corrupt_steps(folder) == [10, 20]


def test_a_checkpoint_of_another_structure_is_refused_not_moved_aside(tmp_path):
    folder = tmp_path / "ckpt"
    _series(folder, steps=(10,))
    mgr = checkpoint.manager(folder)
    with pytest.raises(DataError, match="holds 3 arrays, this config's runner 2"):
        checkpoint.restore(mgr, {"a": jnp.zeros(2), "b": jnp.zeros(3)})
    mgr.close()
    assert (folder / "10").is_dir() and checkpoint.corrupt_steps(folder) == []
