"""Shared fixtures. Tests that read the real traces take ``data_dir`` and are skipped without them."""

from __future__ import annotations

import os

from tests.settings import COMPILE_FLAGS

# Several xdist workers may share one GPU: none may grab most of its memory up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The suite compiles far more than it runs: with LLVM's optimisation passes off, an env's
# rollout compiles in about three quarters of the time (measured 19-24 s against 29-31 s).
# XLA's own HLO passes still run; the differential tests compare the env with the reference
# exactly either way (the schedules; a float sum may differ in its last bit). The CLIs and
# subprocesses the tests start inherit the flag.
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), COMPILE_FLAGS]).strip()

import jax  # noqa: E402
import pytest  # noqa: E402

from jaxsched import compile_cache, paths  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def compilation_cache(request, tmp_path_factory):
    """One persistent XLA compilation cache for the whole run, shared by the xdist workers.

    Many modules compile the same env and rollout (same config, same padded shapes), and
    ``release_compiled_programs`` drops the in-memory copies after each module; with the
    cache a repeat is a disk read instead of a compile. The folder lives under pytest's base
    temp (``.parent`` is the folder every worker of one run shares), so runs never share it.
    """
    root = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker
        root = root.parent
    folder = root / "xla-cache"
    folder.mkdir(exist_ok=True)
    os.environ[compile_cache.ENV_VAR] = str(folder)  # CLIs run in-process enable this folder, not the user's
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    yield


XLA_FLAGS_AT_START = os.environ.get("XLA_FLAGS")


@pytest.fixture(autouse=True)
def restore_xla_flags():
    """Give every test the XLA_FLAGS the run started with.

    A CLI called in-process (``evaluate.main``, ``train.main``) adds its CPU flags to
    ``XLA_FLAGS`` (``devices.configure_cpu``), and those stayed for every later test of that
    xdist worker: its rollouts then ran each episode alone (``rollout.default_chunk``), and
    since JAX keys the persistent cache by ``XLA_FLAGS`` too, nothing it compiled from then
    on was shared with the other worker or with its own earlier tests.
    """
    yield
    if XLA_FLAGS_AT_START is None:
        os.environ.pop("XLA_FLAGS", None)
    else:
        os.environ["XLA_FLAGS"] = XLA_FLAGS_AT_START


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
