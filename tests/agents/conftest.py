"""The training tests compile the same tiny trainer several times (one per run, as a user
would); a persistent compilation cache makes the repeats cache hits."""

import tempfile

import jax
import pytest


@pytest.fixture(scope="session", autouse=True)
def _compilation_cache():
    folder = tempfile.mkdtemp(prefix="jaxsched-agents-xla-")
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    yield
