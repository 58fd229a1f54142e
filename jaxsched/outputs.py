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


# Files every evaluation or training run writes into its out folder (a folder in their place
# is refused before the work; ``publish`` keeps the results of any other clash).
RUN_FILES = ("per_episode.csv", "summary.csv", "summary.md", "config.json")


def check_writable(out_dir: Path, key: str | None = "eval.out_dir", source: str = "config") -> None:
    """Create ``out_dir`` and make sure files can be written there, before any work is done;
    a ``DataError`` naming ``source`` (the config, or a command-line option) and ``key`` if
    not, and why: a component of the path is a file, a folder on it is not writable, or the
    system refused (e.g. a read-only disk)."""
    out_dir = Path(out_dir)

    def refuse(problem):
        raise DataError(source, None, key, f"cannot write to {out_dir}: {problem}") from None

    try:
        for part in (*reversed(out_dir.parents), out_dir):
            if os.path.exists(part) and not os.path.isdir(part):
                refuse(f"{part} is a file, not a folder")
        for name in RUN_FILES:
            if (out_dir / name).is_dir():
                refuse(f"{out_dir / name} is a folder where the run writes its {name}")
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f"{STAGING_PREFIX}{os.getpid()}-probe"
        probe.write_text("")
        probe.unlink()
    except PermissionError:
        refuse(f"{_nearest_folder(out_dir)} is not writable (permission denied)")
    except OSError as err:
        refuse(err.strerror or str(err))


def _nearest_folder(path: Path) -> Path:
    """``path`` or its nearest parent that exists (the folder a write under ``path`` needs)."""
    return next((p for p in (path, *path.parents) if os.path.exists(p)), path)


def check_out_file(path, option: str = "--out") -> None:
    """Make sure a file can be written at ``path`` (its folder created), before any work is
    done; a ``DataError`` naming ``option`` (e.g. ``--out``) if the path is empty or a folder,
    or its folder cannot be written (``check_writable``)."""
    if str(path) == "":
        raise DataError(option, None, None, "an empty path")
    path = Path(path)
    if path.is_dir():
        raise DataError(option, None, None, f"{path} is a folder: name a CSV file in it, e.g. {path / 'pairs.csv'}")
    check_writable(path.parent, None, source=option)


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
    blocked = [name for name in written if (out_dir / name).is_dir()]
    if blocked:  # keep the results where they are rather than lose them
        kept = out_dir / f"results-{os.getpid()}"
        shutil.rmtree(kept, ignore_errors=True)
        os.replace(staging, kept)
        raise DataError("outputs", None, str(out_dir / blocked[0]),
                        f"is a folder, so the run's {blocked[0]} cannot go there; its files are in {kept}")
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
