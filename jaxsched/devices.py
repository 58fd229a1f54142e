"""Set XLA up for CPU runs before JAX starts: every core, and each episode's loop as one kernel.

``configure_cpu()`` adds two XLA flags to ``XLA_FLAGS``. It must run before JAX creates its
CPU backend (first array or computation), so the CLIs call it before importing anything
that touches JAX. A flag that is already set is left as it is, and per-episode results
depend on neither (tests/test_sharding.py).

- One host device per core (``--xla_force_host_platform_device_count``). XLA runs a jitted
  while loop on one thread per device, so one device leaves all but one core idle;
  ``rollout.sharded_rollout`` splits episodes across the devices (measured:
  docs/performance.md; scripts/scaling_study.py, devices axis).
- Whole-loop kernels (``xla_cpu_small_while_loop_byte_threshold``). XLA:CPU runs a program
  as a sequence of kernels with a dispatch cost each, and an env step is hundreds of small
  ones. Its small-while-loop pass instead compiles a while loop into a single kernel when
  the loop holds no scatter, sort or custom call and touches fewer bytes than this
  threshold (1 kB by default). ``LOOP_BYTES`` admits one episode's loop at 1,213 nodes.
  Unbatched, the env's indexed writes are dynamic-update-slices, not scatters, so
  ``rollout.default_chunk`` then runs each CPU episode alone, about twice as fast as vmapped
  chunks of 16 episodes (measured: results/bench/rollout_schedule.md, docs/performance.md).
"""

from __future__ import annotations

import os
import re

CORES_FLAG = "--xla_force_host_platform_device_count"
EXTRA_FLAG = "--xla_backend_extra_options"
LOOP_OPTION = "xla_cpu_small_while_loop_byte_threshold"
LOOP_BYTES = 100_000_000


def configure_cpu(every_core: bool = True) -> None:
    """Set XLA_FLAGS for whole-loop kernels and (``every_core``) one host device per CPU core,
    unless set already."""
    flags = os.environ.get("XLA_FLAGS", "")
    if every_core and CORES_FLAG not in flags:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if cores > 1:
            flags = f"{flags} {CORES_FLAG}={cores}"
    if LOOP_OPTION not in flags:
        option = f"{LOOP_OPTION}={LOOP_BYTES}"
        if EXTRA_FLAG in flags:  # one flag holds every extra option, comma-separated
            flags = re.sub(rf"{EXTRA_FLAG}=(\S*)", lambda m: f"{EXTRA_FLAG}={m.group(1)},{option}", flags)
        else:
            flags = f"{flags} {EXTRA_FLAG}={option}"
    os.environ["XLA_FLAGS"] = flags.strip()


def whole_loop_kernels() -> bool:
    """XLA_FLAGS lets a whole episode loop compile into one kernel (``configure_cpu``)."""
    found = re.search(rf"{LOOP_OPTION}=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return found is not None and int(found.group(1)) >= LOOP_BYTES
