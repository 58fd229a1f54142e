"""The ``jaxsched`` command and config presets: what a user types first."""

from __future__ import annotations

import importlib.metadata

import pytest

from jaxsched import cli
from jaxsched import config as cfg_lib
from jaxsched import train as train_lib
from jaxsched.errors import DataError


def test_console_script_is_installed_and_points_at_the_cli():
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts.get("jaxsched") == "jaxsched.cli:main"


def test_no_command_prints_usage_and_an_unknown_one_is_refused(capsys):
    assert cli.main([]) == 2
    assert "jaxsched {evaluate,train,compare}" in capsys.readouterr().out
    assert cli.main(["--help"]) == 0
    assert cli.main(["evalute"]) == 2
    assert "unknown command 'evalute'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["evaluate", "train"])
def test_help_names_the_command_and_lists_every_preset(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: jaxsched {command}")
    assert set(cfg_lib.presets()) >= {"default", "gnn_ddqn", "drr_64"}
    for name in cfg_lib.presets():
        assert f"\n  {name} " in out


def test_compare_help_names_the_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    assert capsys.readouterr().out.startswith("usage: jaxsched compare")


def test_a_preset_loads_by_name_and_by_its_checkout_path_from_any_folder(tmp_path, monkeypatch):
    by_path = cfg_lib.load("configs/drr_32.toml")
    monkeypatch.chdir(tmp_path)  # no configs/ here
    assert cfg_lib.load("drr_32") == by_path
    assert cfg_lib.load("configs/drr_32.toml") == by_path
    assert train_lib.load("gnn_ddqn") == train_lib.load(train_lib.DEFAULT_CONFIG)
    assert train_lib.load("drr_32").agent.kind == "drr"


def test_switching_learner_on_another_learners_preset_names_the_foreign_setting():
    with pytest.raises(DataError, match=r"gnn_ddqn\.toml.*'agent\.batch_size'.*setting of 'gnn-ddqn', not of 'gnn-ppo'"):
        train_lib.load("gnn_ddqn", ['agent.kind="gnn-ppo"'])
    assert train_lib.load("gnn_ppo", ["agent.lr=1e-3"]).agent.kind == "gnn-ppo"  # the learner's own preset
    assert train_lib.load(None, ['agent.kind="gnn-ppo"']).agent.kind == "gnn-ppo"  # no file: nothing foreign


def test_an_unknown_config_names_itself_and_the_presets(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["evaluate", "--config", "drr_33"]) == 2
    err = capsys.readouterr().err
    assert "drr_33: config file not found" in err and "drr_32" in err


@pytest.mark.parametrize("command", ["evaluate", "train"])
def test_an_output_folder_under_a_file_is_refused_before_any_work(command, tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert cli.main([command, "--out", str(tmp_path / "afile" / "run")]) == 2
    err = capsys.readouterr().err
    assert "afile is a file, not a folder" in err and "Traceback" not in err


def test_every_learner_points_to_a_docs_page_that_exists():
    """The main job ends by naming the page that explains its result."""
    from pathlib import Path

    from jaxsched import agents

    root = Path(__file__).resolve().parent.parent
    for kind in agents.LEARNERS:
        assert (root / train_lib.LEARNER_DOCS[kind]).is_file(), kind
