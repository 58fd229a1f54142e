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
