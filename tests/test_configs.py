"""Every shipped config in configs/ loads (unknown keys or wrong types would raise)."""

from pathlib import Path

import pytest

from jaxsched import config as cfg_lib
from jaxsched import experiment
from jaxsched import train as train_lib

CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_config_loads(path):
    data = cfg_lib.read_toml(path)
    if "train" in data or "agent" in data:
        run = train_lib.load(path)
        config = run.base
        if run.base.workload.source == "openb":  # evaluation windows never seen in training
            train_lo, train_hi = run.train.trace_span
            eval_lo, eval_hi = run.base.workload.trace_span
            assert train_hi <= eval_lo or eval_hi <= train_lo
        assert cfg_lib.load(path) == config  # evaluate reads a training config's heuristics setting
    else:
        config = cfg_lib.load(path)
    experiment.check_measurement(config)  # the measured jobs lie inside its episodes


def test_configs_found():
    assert {"gnn_ddqn", "gnn_ddqn_openb", "default"} <= {p.stem for p in CONFIGS}
