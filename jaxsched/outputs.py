"""Output folders that never mix two runs: files are written to a staging folder and moved in
only once all of them are written.

``publish(out_dir, write)`` calls ``write(staging)`` (which writes the run's files and returns
their names), then replaces the previous run's files in ``out_dir`` (those named in its
``MANIFEST``) with the new ones and writes a new manifest. A run killed while writing (or
plotting) leaves ``out_dir`` as the previous run left it, beside a stray
``.incomplete-<pid>`` folder; files of an earlier run that this run does not write are
removed, so the folder holds one run. Replacing an earlier run, or a run that is writing
into the same folder at the same time, is said on stderr.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import Callable

from jaxsched.errors import DataError

MANIFEST = "files.json"
STAGING_PREFIX = ".incomplete-"

# The packages whose versions a run's numbers depend on: a float-level change in any of them
# (e.g. a jaxlib release) changes a training run from its first updates on.
RECORDED_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "pandas", "jraph", "flashbax",
                     "orbax-checkpoint", "chex")


def package_versions() -> dict:
    """{package: version} of Python and ``RECORDED_PACKAGES`` (None where not installed), for
    a run's ``config.json``."""
    versions = {"python": platform.python_version()}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def write_atomically(path: Path, text: str) -> None:
    """Write a file so that a kill at any point leaves the old or the new one, never a cut one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def check_writable(out_dir: Path, key: str = "eval.out_dir") -> None:
    """Create ``out_dir`` and make sure files can be written there, before any work is done;
    a ``DataError`` naming ``key`` if not."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f"{STAGING_PREFIX}{os.getpid()}-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise DataError("config", None, key, f"cannot write to {out_dir}: {err.strerror or err}") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _others_writing(out_dir: Path) -> list:
    """Process ids of other live runs staging files in ``out_dir``."""
    pids = []
    for path in out_dir.glob(f"{STAGING_PREFIX}*"):
        pid = path.name[len(STAGING_PREFIX):].split("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            pids.append(int(pid))
    return pids


def previous_files(out_dir: Path) -> list:
    """The files the previous run published in ``out_dir`` (empty if none or unreadable)."""
    try:
        names = json.loads((Path(out_dir) / MANIFEST).read_text())["files"]
        return [n for n in names if isinstance(n, str) and "/" not in n and n not in ("", ".", "..")]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def publish(out_dir: Path, write: Callable[[Path], list]) -> list:
    """Write a run's files with ``write(staging) -> [file names]`` and move them into
    ``out_dir`` in place of the previous run's; returns the names written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for pid in _others_writing(out_dir):
        print(f"WARNING: another run (pid {pid}) is writing into {out_dir} too; the last to "
              "finish keeps the folder", file=sys.stderr)
    staging = out_dir / f"{STAGING_PREFIX}{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    written = write(staging)
    old = previous_files(out_dir)
    if old or (out_dir / "config.json").exists():
        print(f"WARNING: replacing the results of an earlier run in {out_dir}", file=sys.stderr)
    for name in set(old) - set(written):
        (out_dir / name).unlink(missing_ok=True)
    for name in written:
        os.replace(staging / name, out_dir / name)
    write_atomically(out_dir / MANIFEST, json.dumps({"files": written}, indent=1))
    shutil.rmtree(staging, ignore_errors=True)
    return written
