"""Count the XLA programs a main job (``python -m jaxsched.train``) builds, by phase and by name.

    python scripts/compile_count.py [--json OUT] -- <python -m jaxsched.train arguments>

Runs ``jaxsched.train.main`` with the given arguments in this process and records every
program JAX builds (XLA compile or persistent-cache read: JAX's
``/jax/core/compile/backend_compile_duration`` event, the one ``compile_cache.CompileClock``
counts) with its function name, its seconds, the phase it was built in and the scheduler
being run. Phases (by the function of ``jaxsched.train`` / ``jaxsched.evaluate`` on the
stack): "training" (``train.train`` but not its validations), "validation"
(``train._validate``), "baselines" (``evaluate.evaluate``, every heuristic), "final eval"
(the rest of ``train.evaluate_agent``: the agent on the held-out episodes), "other".

Prints a table of programs and compile seconds per phase, then every (phase, scheduler,
function) built more than once. Use a fresh compile cache (``--compile-cache $(mktemp -d)``)
so every program is compiled; a program built twice with the same key is then read back
from the cache the second time (counted in "cache hits"). A short run compiles the same
set as the full job: the programs depend on the code path and the shapes' structure, not
on how many updates, jobs or episodes there are (docs/performance.md, "The first run's
compile"), e.g.::

    python scripts/compile_count.py -- --compile-cache $(mktemp -d) --quiet --max-train-s 1 \\
        --out /tmp/cc --set workload.synthetic.num_jobs=600 --set env.warmup_jobs=300 \\
        --set env.measured_jobs=100 --set train.train_jobs=600 --set eval.episodes=4 \\
        --set eval.batch_size=4 --set train.valid_episodes=2
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import sys
import time

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
PHASES = ("training", "validation", "baselines", "final eval", "other")


class Recorder:
    """Every program built: (phase, scheduler, function name, seconds, cache hit)."""

    def __init__(self):
        self.phase, self.scheduler = ["other"], [""]
        self.builds: list[dict] = []
        self._hit = False

    def on_duration(self, event: str, seconds: float, fun_name: str = "?", **_):
        if event == BACKEND_COMPILE_EVENT:
            self.builds.append({"phase": self.phase[-1], "scheduler": self.scheduler[-1],
                                "name": fun_name, "seconds": seconds, "hit": self._hit})
            self._hit = False

    def on_event(self, event: str, **_):
        if event == CACHE_HIT_EVENT:  # recorded inside the build it belongs to, before its duration
            self._hit = True

    @contextlib.contextmanager
    def within(self, stack: list, value: str):
        stack.append(value)
        try:
            yield
        finally:
            stack.pop()

    def wrap(self, module, attr: str, stack: list, label):
        """Replace ``module.attr`` by a function that runs it under ``label`` (a string, or a
        function of its arguments) on ``stack``; a name that no longer exists is skipped."""
        fn = getattr(module, attr, None)
        if fn is None:
            print(f"compile_count: {module.__name__}.{attr} not found: phase not separated", file=sys.stderr)
            return

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self.within(stack, label(*args, **kwargs) if callable(label) else label):
                return fn(*args, **kwargs)
        setattr(module, attr, wrapped)

    def table(self) -> str:
        lines = ["| phase | programs | cache hits | compile s |", "|---|---|---|---|"]
        for phase in PHASES + ("total",):
            rows = [b for b in self.builds if phase in (b["phase"], "total")]
            lines.append(f"| {phase} | {len(rows)} | {sum(b['hit'] for b in rows)} | "
                         f"{sum(b['seconds'] for b in rows):.1f} |")
        return "\n".join(lines)

    def repeats(self) -> str:
        counts = collections.Counter((b["phase"], b["scheduler"], b["name"]) for b in self.builds)
        seconds = collections.defaultdict(float)
        for b in self.builds:
            seconds[b["phase"], b["scheduler"], b["name"]] += b["seconds"]
        lines = ["| phase | scheduler | function | builds | compile s |", "|---|---|---|---|---|"]
        for (phase, sched, name), n in sorted(counts.items(), key=lambda kv: -seconds[kv[0]]):
            lines.append(f"| {phase} | {sched} | {name} | {n} | {seconds[phase, sched, name]:.1f} |")
        return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write every build (phase, scheduler, name, seconds, hit) here")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then python -m jaxsched.train's arguments")
    args = parser.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args

    import jax.monitoring

    from jaxsched import evaluate as ev
    from jaxsched import train

    rec = Recorder()
    jax.monitoring.register_event_duration_secs_listener(rec.on_duration)
    jax.monitoring.register_event_listener(rec.on_event)
    rec.wrap(train, "train", rec.phase, "training")
    rec.wrap(train, "_validate", rec.phase, "validation")
    rec.wrap(train, "evaluate_agent", rec.phase, "final eval")
    rec.wrap(ev, "evaluate", rec.phase, "baselines")
    rec.wrap(ev, "run_scheduler", rec.scheduler,
             lambda sched, *a, **k: sched if isinstance(sched, str) else sched.name)
    start = time.perf_counter()
    code = train.main(train_args)
    print(f"\nmain job: exit {code} after {time.perf_counter() - start:.0f} s")
    print(rec.table())
    print("\nPrograms by (phase, scheduler, function), most compile seconds first:\n")
    print(rec.repeats())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec.builds, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
