"""Use every CPU core: one XLA host device per core, so sharded rollouts run in parallel.

XLA runs a jitted while loop on one thread per device, so on a CPU a single device leaves
all but one core idle. ``use_all_cpu_cores()`` asks XLA for one host device per core (the
``--xla_force_host_platform_device_count`` flag); ``rollout.sharded_rollout`` then splits
episodes across them. It must run before JAX creates its CPU backend (first array or
computation), so the CLIs call it before importing anything that touches JAX; it changes
nothing when the flag is already set, and per-episode results do not depend on the device
count (tests/test_sharding.py). On 2 cores it measured 2.6x the single-device throughput
(scripts/scaling_study.py, devices axis).
"""

from __future__ import annotations

import os

FLAG = "--xla_force_host_platform_device_count"


def use_all_cpu_cores() -> None:
    """Set XLA_FLAGS for one host device per CPU core, unless a device count is already set."""
    flags = os.environ.get("XLA_FLAGS", "")
    if FLAG in flags:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores > 1:
        os.environ["XLA_FLAGS"] = f"{flags} {FLAG}={cores}".strip()
