"""The persistent compilation cache (``jaxsched/compile_cache.py``): a second process reads
what the first compiled, a corrupt entry is compiled again, and off means off.

Each run is a fresh Python process (the cache only matters across processes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jaxsched import compile_cache

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = """
import json, sys
import jax, jax.numpy as jnp
from jaxsched import compile_cache
folder = compile_cache.enable(None if sys.argv[1] == "default" else sys.argv[1])
clock = compile_cache.CompileClock()
f = jax.jit(lambda x: jnp.cumsum(jnp.sin(x) * 3.0) @ jnp.cos(x))
print(json.dumps({"value": float(f(jnp.arange(500.0))), "folder": str(folder), **clock.since().as_dict()}))
"""


def run_program(folder, env_var=None) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items() if k != compile_cache.ENV_VAR}
    if env_var is not None:
        env[compile_cache.ENV_VAR] = env_var
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(folder)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_second_process_reads_what_the_first_compiled(tmp_path):
    first, _ = run_program(tmp_path)
    assert first["programs"] >= 1 and first["cache_hits"] == 0
    assert list(tmp_path.glob("*-cache"))  # entries written
    second, _ = run_program(tmp_path)
    assert second["cache_hits"] == second["programs"] == first["programs"]
    assert second["value"] == first["value"]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_entry_is_compiled_again(tmp_path, damage):
    clean, _ = run_program(tmp_path)
    for entry in tmp_path.glob("*-cache"):
        data = entry.read_bytes()
        entry.write_bytes({"garbage": os.urandom(len(data)), "truncated": data[: len(data) // 2],
                           "empty": b""}[damage])
    again, _ = run_program(tmp_path)
    assert again["value"] == clean["value"]
    assert again["cache_hits"] < again["programs"]  # compiled afresh, not read


def test_off_writes_nothing_and_the_env_var_picks_the_folder(tmp_path):
    off, _ = run_program("default", env_var="off")
    assert off["folder"] == "None" and off["cache_hits"] == 0
    chosen = tmp_path / "chosen"
    on, _ = run_program("default", env_var=str(chosen))
    assert on["folder"] == str(chosen) and list(chosen.glob("*-cache"))


def test_an_unusable_folder_warns_and_runs_uncached(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result, stderr = run_program(blocker / "cache")
    assert result["folder"] == "None" and "compile cache off" in stderr


def test_default_folder_follows_xdg_and_the_env_var(monkeypatch, tmp_path):
    monkeypatch.delenv(compile_cache.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_dir() == tmp_path / "jaxsched" / "xla"
    monkeypatch.setenv(compile_cache.ENV_VAR, "OFF")
    assert compile_cache.default_dir() is None
    monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / "x"))
    assert compile_cache.default_dir() == tmp_path / "x"


@pytest.mark.slow
def test_evaluate_cli_second_run_compiles_from_the_cache(tmp_path):
    """The CLI's flags: ``--compile-cache DIR`` fills DIR, the second identical run reads every
    program back (and says so), ``--no-compile-cache`` compiles everything."""
    tiny = ["--set", "cluster.preset_nodes=4", "--set", "workload.synthetic.num_jobs=40",
            "--set", "env.warmup_jobs=0", "--set", "env.measured_jobs=0", "--set", "eval.episodes=2",
            "--set", "eval.batch_size=2", "--schedulers", "first-fit", "--no-plots", "--quiet"]

    def evaluate(*flags):
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        done = subprocess.run([sys.executable, "-m", "jaxsched.evaluate", *tiny, "--out", str(out), *flags],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads((out / "config.json").read_text())["info"]["compile"], done.stdout

    cache = tmp_path / "cache"
    first, _ = evaluate("--compile-cache", str(cache))
    second, stdout = evaluate("--compile-cache", str(cache))
    assert first["cache_hits"] == 0 and first["programs"] > 0
    assert second["cache_hits"] == second["programs"] == first["programs"]
    printed = re.search(r"compiled (\d+) programs in \S+ s \((\d+) from the cache\)", stdout)
    assert printed and printed.group(1) == printed.group(2)  # the whole run, workload draws included
    uncached, _ = evaluate("--no-compile-cache")
    assert uncached["cache_hits"] == 0 and uncached["programs"] == first["programs"]
