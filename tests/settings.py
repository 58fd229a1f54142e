"""Test-run knobs and the two tiers of the suite.

JAXSCHED_EXAMPLES=200 (say) runs the property tests deeper than CI does.

``python -m pytest`` runs the default tier (``-m "not slow"`` in ``pyproject.toml``): every
behaviour once, under about 15 minutes on 2 cores. ``python -m pytest -m slow`` runs the
extended tier: the same differential and property tests on the other schedulers and
settings, the learning-quality runs and the multi-process checks. CI (``.ci/run``) runs both.
"""

import os

import pytest

EXAMPLES = int(os.environ.get("JAXSCHED_EXAMPLES", "25"))
# The tests' compile flag (set in tests/conftest.py): a subprocess whose results are compared
# with the test's bit for bit must compile with it too (LLVM's passes change float sums' last bits).
COMPILE_FLAGS = "--xla_backend_optimization_level=0"


def extended(*values, id=None):
    """One parametrize case that runs in the extended tier only (``-m slow``)."""
    return pytest.param(*values, marks=pytest.mark.slow, id=id)
