"""Nonsense settings and unreadable configs are refused before anything runs: a ``DataError``
naming the config key (or file), and exit code 2 from the CLIs."""

from __future__ import annotations

import pytest

from jaxsched import config as cfg_lib
from jaxsched import evaluate
from jaxsched import train as train_lib
from jaxsched.errors import DataError


@pytest.mark.parametrize("override, field", [
    ("eval.episodes=0", "EvalConfig.episodes"),
    ("eval.batch_size=-1", "EvalConfig.batch_size"),
    ("eval.schedulers=[]", "EvalConfig.schedulers"),
    ('eval.schedulers=[""]', "EvalConfig.schedulers"),
    ("eval.max_steps=-5", "EvalConfig.max_steps"),
    ("eval.timeline_episodes=-1", "EvalConfig.timeline_episodes"),
    ("eval.seed=2147483648", "EvalConfig.seed"),
    ("cluster.preset_nodes=0", "ClusterConfig.preset_nodes"),
    ('cluster={node_list="a.csv", pai_machines="b.csv"}', "both given"),
])
def test_bad_eval_and_cluster_settings_name_the_key(override, field):
    with pytest.raises(DataError, match=field):
        cfg_lib.load(None, [override])


def test_settings_checked_together_may_come_in_separate_overrides():
    # Each order works: the overrides are applied at once, then checked (a later one wins a key).
    pair = ["env.restart_overhead_s=[40.0, 60.0]", "env.restart_above_gpus=[8]"]
    for overrides in (pair, pair[::-1]):
        env = cfg_lib.load(None, overrides).env
        assert env.restart_overhead_s == (40.0, 60.0) and env.restart_above_gpus == (8,)
    assert cfg_lib.load(None, ["env.window=4", "env.window=6"]).env.window == 6
    run = train_lib.load("configs/gnn_ddqn.toml", pair[::-1])
    assert train_lib.with_eval_overrides(run, pair).base.env.restart_above_gpus == (8,)
    with pytest.raises(DataError, match="restart_above_gpus"):
        cfg_lib.load(None, pair[:1])  # two costs need one threshold


@pytest.mark.parametrize("config, override, field", [
    ("gnn_ddqn", "train.chunk_updates=0", "TrainConfig.chunk_updates"),
    ("gnn_ddqn", "train.num_envs=0", "TrainConfig.num_envs"),
    ("gnn_ddqn", "train.total_updates=0", "TrainConfig.total_updates"),
    ("gnn_ddqn", "train.reward_scale=-1.0", "TrainConfig.reward_scale"),
    ("gnn_ddqn", "train.reward_scale=nan", "TrainConfig.reward_scale"),
    ("gnn_ddqn", "train.seed=2147483647", "TrainConfig.seed"),  # its second run would be 2**31
    ("gnn_ddqn", "agent.hidden=0", "AgentConfig.hidden"),
    ("gnn_ddqn", "agent.batch_size=0", "AgentConfig.batch_size"),
    ("gnn_ddqn", "agent.buffer_size=8", "AgentConfig.buffer_size"),
    ("gnn_ddqn", "agent.learning_starts=-1", "AgentConfig.learning_starts"),
    ("gnn_ddqn", "agent.lr=-0.001", "AgentConfig.lr"),
    ("gnn_ddqn", "agent.gamma=1.5", "AgentConfig.gamma"),
    ("gnn_ddqn", "agent.tau=0", "AgentConfig.tau"),
    ("drr_64", "agent.lr_actor=-1", "DRRConfig.lr_actor"),
    ("drr_64", "agent.gamma=1.5", "DRRConfig.gamma"),
    ("drr_64", "agent.hidden=0", "DRRConfig.hidden"),
])
def test_bad_training_settings_name_the_key(config, override, field):
    with pytest.raises(DataError, match=field):
        train_lib.load(f"configs/{config}.toml", [override])


def test_unreadable_configs_name_the_file(tmp_path):
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00\x01 not text")
    with pytest.raises(DataError, match="binary.toml.*not a UTF-8"):
        cfg_lib.read_toml(binary)
    with pytest.raises(DataError, match="is a folder"):
        cfg_lib.read_toml(tmp_path)


@pytest.mark.parametrize("cli", [evaluate.main, train_lib.main], ids=["evaluate", "train"])
def test_clis_exit_2_on_a_bad_config(cli, tmp_path, capsys):
    assert cli(["--config", str(tmp_path), "--quiet"]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert cli(["--set", "eval.episodes=0", "--quiet"]) == 2
    assert "EvalConfig.episodes" in capsys.readouterr().err


def test_reproduce_fgd_names_a_bad_data_file_and_exits_2(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "reproduce_fgd", Path(__file__).parents[1] / "scripts" / "reproduce_fgd.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    nodes = tmp_path / "openb_node_list_gpu_node.csv"
    args = ["--data", str(tmp_path), "--out", str(tmp_path / "out"), "--no-compile-cache"]
    assert script.main(args) == 2
    assert f"{nodes}: file not found" in capsys.readouterr().err
    nodes.write_bytes(b"\x1f\x8b\x08 gzip")
    assert script.main(args) == 2
    assert "gzip-compressed" in capsys.readouterr().err
