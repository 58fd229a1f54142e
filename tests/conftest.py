"""Shared fixtures. Tests that read the real traces take ``data_dir`` and are skipped without them."""

from __future__ import annotations

import jax
import pytest

from jaxsched import paths


@pytest.fixture(scope="module", autouse=True)
def release_compiled_programs():
    """Drop JAX's compiled programs after each test module.

    Every compiled XLA-CPU program keeps a few memory mappings; the whole suite compiles
    thousands (hypothesis draws many shapes), and one process passed Linux's default
    ``vm.max_map_count`` (65,530) and segfaulted inside the XLA compiler.
    """
    yield
    jax.clear_caches()


@pytest.fixture(scope="session")
def data_dir():
    """The real-trace folder (``$JAXSCHED_DATA`` or ``../shared/data``); skip when absent."""
    found = paths.data_dir()
    if found is None:
        pytest.skip("real traces not found: set JAXSCHED_DATA or provide ../shared/data "
                    "(see shared/data/README.md)")
    if not (found / "alibaba-gpu-v2023").is_dir():
        pytest.skip(f"real traces not found under {found} (no alibaba-gpu-v2023/)")
    return found


@pytest.fixture(scope="session")
def openb_dir(data_dir):
    return data_dir / "alibaba-gpu-v2023"


@pytest.fixture(scope="session")
def pai_dir(data_dir):
    return data_dir / "alibaba-gpu-v2020"
