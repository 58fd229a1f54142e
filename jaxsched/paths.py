"""Where the optional real-trace data lives.

The traces are never copied into the repository (see ``shared/data/README.md``); the project
runs without them and finds them, when present, through :func:`data_dir`.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "JAXSCHED_DATA"


def data_dir() -> Path | None:
    """The folder holding ``alibaba-gpu-v2023/`` and ``alibaba-gpu-v2020/``, or None.

    ``$JAXSCHED_DATA`` when set (returned as given, even if it does not exist, so that a
    wrong setting fails loudly where the files are opened); otherwise
    ``<repo root>/../shared/data`` if that folder exists (repo root = the folder holding the
    ``jaxsched`` package); otherwise None.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    candidate = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


DATA_MARKER = ("shared", "data")  # configs name traces as ../shared/data/<family>/<file>


def resolve_data_path(path: str | Path) -> Path:
    """Where a trace or node-list path from a config points.

    A path through ``shared/data/`` (as the shipped configs write them:
    ``../shared/data/alibaba-gpu-v2023/...``) is looked up under ``$JAXSCHED_DATA`` when that
    is set; otherwise (and for any other relative path) it is taken from the working
    directory if it exists there, else from the repository root, so a run started from
    another folder finds the same files. A path found nowhere is returned as given (opening
    it then fails naming it).
    """
    path = Path(path).expanduser()
    parts = path.parts
    inside = [i for i in range(len(parts) - 1) if parts[i:i + 2] == DATA_MARKER]
    if inside and os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]) / Path(*parts[inside[-1] + 2:])
    if path.is_absolute() or path.exists():
        return path
    from_root = Path(__file__).resolve().parent.parent / path
    return from_root if from_root.exists() else path
