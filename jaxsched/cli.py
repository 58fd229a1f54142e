"""The ``jaxsched`` command: ``jaxsched evaluate|train|compare [options]``.

Each subcommand is the module of the same name (``python -m jaxsched.evaluate`` and the
others keep working); ``jaxsched COMMAND --help`` shows its options and, for evaluate and
train, the shipped presets (``configs/*.toml``, usable as ``--config NAME``).
"""

from __future__ import annotations

import sys

COMMANDS = {
    "evaluate": "run heuristic schedulers side by side on the same episodes",
    "train": "train a learned scheduler, then evaluate it beside the heuristics (the main job)",
    "compare": "pair two runs' episodes and test their difference",
}

USAGE = "usage: jaxsched {" + ",".join(COMMANDS) + "} [options]   (jaxsched COMMAND --help)\n\n" + "\n".join(
    f"  {name:9s} {text}" for name, text in COMMANDS.items())


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"jaxsched: unknown command {command!r}; one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if command == "evaluate":
        from jaxsched import evaluate as module
    elif command == "train":
        from jaxsched import train as module
    else:
        from jaxsched import compare as module
    return module.main(rest, prog=f"jaxsched {command}")


if __name__ == "__main__":
    sys.exit(main())
