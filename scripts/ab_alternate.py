"""A/B speed of two source trees, rounds alternated between two live processes.

Each side compiles the benchmark's rollouts once (``jaxsched.benchmark``: 64 nodes, 500-job
episodes, first-fit and fgd at batch 1, 64 and 1,024), then the two processes take turns, one
round each, through flag files in ``TURN_DIR``: both sides run under the same machine load,
round by round, and neither pays a compile inside a round. Writes ``TURN_DIR/<side>.json``
(decisions per second of every program in every round).

    mkdir /tmp/turns
    (cd /old/tree && PYTHONPATH=$PWD python /new/tree/scripts/ab_alternate.py before /tmp/turns 6) &
    (cd /new/tree && PYTHONPATH=$PWD python scripts/ab_alternate.py after /tmp/turns 6) &
    touch /tmp/turns/before_0          # start round 0
"""

import json
import sys
import time
from pathlib import Path

from jaxsched.devices import configure_cpu

configure_cpu()  # XLA's CPU flags, before JAX starts

from jaxsched.benchmark import compile_program, lower_jax, make_setup, measure  # noqa: E402

SCHEDULERS = ("first-fit", "fgd")
BATCHES = (1, 64, 1024)


def main(side: str, turn_dir: Path, rounds: int) -> None:
    _, workload, _, params, env_config = make_setup(64, 500, 512)
    programs = {}
    for scheduler in SCHEDULERS:
        for batch in BATCHES:
            program = lower_jax(params, workload, env_config, scheduler, batch, 3 * 500, True)
            compiled, _ = compile_program(program)
            measure(compiled, program, 1)  # warm-up
            programs[(scheduler, batch)] = (compiled, program)
    other = "after" if side == "before" else "before"
    rows = []
    for r in range(rounds):
        while not (turn_dir / f"{side}_{r}").exists():
            time.sleep(0.05)
        for (scheduler, batch), (compiled, program) in programs.items():
            result, _ = measure(compiled, program, 1)
            rows.append({"side": side, "round": r, "sched": scheduler, "batch": batch,
                         "dps": result["decisions_per_s"]})
        (turn_dir / f"{other}_{r if side == 'before' else r + 1}").touch()  # the other side's turn
    (turn_dir / f"{side}.json").write_text(json.dumps(rows))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
