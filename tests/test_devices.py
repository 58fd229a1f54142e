"""``devices.configure_cpu`` adds its XLA flags without clobbering the user's."""

from __future__ import annotations

import pytest

from jaxsched import devices


@pytest.fixture
def flags(monkeypatch):
    def configure(before):
        if before is None:
            monkeypatch.delenv("XLA_FLAGS", raising=False)
        else:
            monkeypatch.setenv("XLA_FLAGS", before)
        monkeypatch.setattr(devices.os, "sched_getaffinity", lambda _: {0, 1, 2}, raising=False)
        devices.configure_cpu()
        return devices.os.environ["XLA_FLAGS"]
    return configure


def test_sets_a_device_per_core_and_whole_loop_kernels(flags):
    got = flags(None)
    assert f"{devices.CORES_FLAG}=3" in got
    assert f"{devices.EXTRA_FLAG}={devices.LOOP_OPTION}={devices.LOOP_BYTES}" in got
    assert devices.whole_loop_kernels()


def test_keeps_the_users_settings(flags):
    got = flags(f"{devices.CORES_FLAG}=8 {devices.EXTRA_FLAG}=xla_cpu_disable_slp_vectorizer=true")
    assert f"{devices.CORES_FLAG}=8" in got and f"{devices.CORES_FLAG}=3" not in got
    # one extra-options flag, holding both options
    assert got.count(devices.EXTRA_FLAG) == 1
    assert f"xla_cpu_disable_slp_vectorizer=true,{devices.LOOP_OPTION}={devices.LOOP_BYTES}" in got
    assert devices.whole_loop_kernels()


def test_a_users_small_threshold_is_kept_and_turns_the_loop_kernels_off(flags):
    got = flags(f"{devices.EXTRA_FLAG}={devices.LOOP_OPTION}=0")
    assert f"{devices.LOOP_OPTION}=0" in got and str(devices.LOOP_BYTES) not in got
    assert not devices.whole_loop_kernels()
