"""Compile once: JAX's persistent compilation cache, on by default in the CLIs and scripts.

XLA compiles every scheduler's rollout for 2-5 s in every process. With the cache on, a
compiled program is written to a folder and the next process that builds the same program
(same code, shapes, flags, JAX version and machine) reads it back instead of compiling.

The folder: ``--compile-cache DIR``, else ``$JAXSCHED_COMPILE_CACHE``, else
``$XDG_CACHE_HOME/jaxsched/xla`` (``~/.cache/jaxsched/xla``). Off: ``--no-compile-cache``
or ``JAXSCHED_COMPILE_CACHE=off``. JAX keys each entry by a hash of the program with its
debug information stripped, the compile options and the JAX/XLA versions, so an entry of
another version or program is never used for this one; an entry that cannot be read
(truncated, corrupt) is warned about and compiled again (JAX's own handling, kept: the
cache never raises, ``jax_raise_persistent_cache_errors`` stays off). Every program is
cached, however fast it compiled.

``CompileClock`` measures what a run spent building programs, so the CLIs report compile
time apart from run time: XLA's compile (or cache read) and JAX's tracing and lowering.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

ENV_VAR = "JAXSCHED_COMPILE_CACHE"
OFF = ("off", "0", "false", "no", "none")

# jax/_src/dispatch.py's event names (recorded around each step of building a program).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # XLA compile, or cache read
TRACE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration")
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def default_dir() -> Path | None:
    """The cache folder when no flag says otherwise (None: ``$JAXSCHED_COMPILE_CACHE`` is off)."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return None if env.lower() in OFF else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxsched" / "xla"


def enable(folder: Path | str | None = None) -> Path | None:
    """Turn the persistent cache on in ``folder`` (default ``default_dir()``); returns the
    folder, or None when it is off or cannot be created (said on stderr: the run goes on,
    compiling as usual). Call before the first compile."""
    import jax

    folder = default_dir() if folder is None else Path(folder).expanduser()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(f"cannot write to {folder}")
    except OSError as err:
        print(f"WARNING: compile cache off: {err} (set {ENV_VAR} or --compile-cache DIR)", file=sys.stderr)
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--compile-cache DIR`` and ``--no-compile-cache`` (for every CLI and script)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--compile-cache", metavar="DIR",
                       help=f"persistent XLA compilation cache folder (default ${ENV_VAR} or "
                            "~/.cache/jaxsched/xla)")
    group.add_argument("--no-compile-cache", action="store_true",
                       help=f"compile everything afresh (also {ENV_VAR}=off)")


def enable_from_args(args: argparse.Namespace) -> Path | None:
    """``enable`` as the flags of ``add_arguments`` say."""
    if args.no_compile_cache:
        return None
    return enable(args.compile_cache)


@dataclasses.dataclass
class CompileTotals:
    """What building programs cost: compile_s (XLA compile or cache read), trace_s (JAX
    tracing and lowering to XLA), programs (XLA compiles or reads), cache_hits."""

    compile_s: float = 0.0
    trace_s: float = 0.0
    programs: int = 0
    cache_hits: int = 0

    def __sub__(self, other: "CompileTotals") -> "CompileTotals":
        return CompileTotals(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def as_dict(self) -> dict:
        return {"compile_s": round(self.compile_s, 3), "trace_s": round(self.trace_s, 3),
                "programs": self.programs, "cache_hits": self.cache_hits}

    def describe(self) -> str:
        return (f"compiled {self.programs} programs in {self.compile_s:.2f} s "
                f"({self.cache_hits} from the cache), tracing {self.trace_s:.2f} s")


class CompileClock:
    """Process-wide totals of JAX's compile events since the first ``CompileClock()``.

    ``clock = CompileClock(); ...; spent = clock.since()`` gives a ``CompileTotals`` of what
    was built in between. JAX's listeners cannot be removed, so one is installed per process.
    """

    _totals: CompileTotals | None = None

    def __init__(self):
        if CompileClock._totals is None:
            CompileClock._install()
        self.start = dataclasses.replace(CompileClock._totals)

    @classmethod
    def _install(cls) -> None:
        import jax.monitoring

        totals = cls._totals = CompileTotals()

        def on_duration(event: str, seconds: float, **_):
            if event == BACKEND_COMPILE_EVENT:
                totals.compile_s += seconds
                totals.programs += 1
            elif event in TRACE_EVENTS:
                totals.trace_s += seconds

        def on_event(event: str, **_):
            if event == CACHE_HIT_EVENT:
                totals.cache_hits += 1

        jax.monitoring.register_event_duration_secs_listener(on_duration)
        jax.monitoring.register_event_listener(on_event)

    def since(self) -> CompileTotals:
        return dataclasses.replace(CompileClock._totals) - self.start
