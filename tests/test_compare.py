"""jaxsched.compare: two runs paired by episode, after checking they are the same episodes."""

import math

import numpy as np
import pandas as pd
import pytest

from jaxsched import compare, report
from jaxsched.errors import DataError


def run_frame(scheduler, values, loads=None, offered=None, done=None):
    """A per-episode frame: one row per (load, episode), metric ``frag_rate`` = values."""
    n = len(values)
    frame = pd.DataFrame({"scheduler": scheduler, "episode": np.arange(n) % (n // len(loads or [0])),
                          "frag_rate": values, "jct_mean": np.asarray(values) * 1000,
                          "offered_load": offered if offered is not None else np.linspace(0.8, 0.9, n),
                          "jobs_total": 100, "done": done if done is not None else 1})
    if loads:
        frame.insert(1, "load", np.repeat(loads, n // len(loads)))
    return frame


def test_paired_difference_is_the_mean_and_normal_half_width_of_the_differences():
    a, b = pd.Series([1.0, 2.0, 4.0, np.nan]), pd.Series([0.5, 1.0, 1.0, 7.0])
    mean, half = report.paired_difference(a, b)
    diff = np.array([0.5, 1.0, 3.0])  # the NaN pair left out
    assert mean == pytest.approx(diff.mean())
    assert half == pytest.approx(1.96 * diff.std(ddof=1) / math.sqrt(3))
    assert report.paired_difference(pd.Series([2.0]), pd.Series([1.5])) == (0.5, 0.0)


def test_pair_matches_episodes_by_load_and_episode_not_by_row_order():
    a = run_frame("x", [0.5, 0.6, 0.7, 0.9, 1.0, 1.2], loads=[0.9, 0.95])
    b = run_frame("y", [0.4, 0.4, 0.5, 0.8, 0.9, 0.9], loads=[0.9, 0.95])
    b["offered_load"] = a["offered_load"]
    paired = compare.pair(a, b.iloc[::-1].reset_index(drop=True), ["frag_rate", "jct_mean"])
    rate = paired[paired.metric == "frag_rate"].set_index("load")
    assert rate.loc[0.9, "diff_mean"] == pytest.approx(np.mean([0.1, 0.2, 0.2]))
    assert rate.loc[0.95, "diff_mean"] == pytest.approx(np.mean([0.1, 0.1, 0.3]))
    assert rate.loc[0.95, "a_mean"] == pytest.approx(np.mean([0.9, 1.0, 1.2]))
    assert (paired["pairs"] == 3).all()
    jct = paired[paired.metric == "jct_mean"].set_index("load")
    assert jct.loc[0.9, "diff_mean"] == pytest.approx(1000 * rate.loc[0.9, "diff_mean"])


def test_pair_refuses_runs_that_are_not_the_same_episodes():
    a = run_frame("x", [0.5, 0.6, 0.7])
    b = a.assign(scheduler="y")
    b.loc[2, "offered_load"] = 0.99
    with pytest.raises(DataError, match="offered_load.*episode 2.*not the same episodes"):
        compare.pair(a, b, ["frag_rate"], "a.csv", "b.csv")
    with pytest.raises(DataError, match="1 episodes are in only one"):
        compare.pair(a, a.iloc[:2], ["frag_rate"])
    with pytest.raises(DataError, match="field 'queue_len_mean'"):
        compare.pair(a, a, ["queue_len_mean"])


def test_pair_leaves_out_episodes_cut_at_the_step_cap_in_either_run():
    a = run_frame("x", [0.5, 0.6, 0.7], done=[1, 0, 1])
    b = run_frame("y", [0.4, 0.4, 0.4], done=[1, 1, 1])
    paired = compare.pair(a, b, ["frag_rate"])
    assert paired["pairs"].item() == 2
    assert paired["diff_mean"].item() == pytest.approx(0.2)


def test_a_sweep_at_one_load_pairs_with_a_plain_run_and_one_over_several_does_not():
    plain = run_frame("x", [0.5, 0.6, 0.7])
    sweep = run_frame("y", [0.4, 0.5, 0.5], loads=[0.9])
    sweep["offered_load"] = plain["offered_load"]
    assert compare.pair(plain, sweep, ["frag_rate"])["diff_mean"].item() == pytest.approx(0.4 / 3)
    with pytest.raises(DataError, match="over 2 loads"):
        compare.pair(plain, run_frame("y", [0.4] * 6, loads=[0.9, 1.0]), ["frag_rate"])


def test_cli_prints_the_pairs_and_names_what_is_ambiguous(tmp_path, capsys):
    both = pd.concat([run_frame("fgd", [0.5, 0.6, 0.7]), run_frame("fgd-window", [0.4, 0.6, 0.6])])
    both.to_csv(tmp_path / "per_episode.csv", index=False)
    out = tmp_path / "pairs.csv"
    assert compare.main([str(tmp_path), str(tmp_path), "--a-scheduler", "fgd-window", "--b-scheduler", "fgd",
                         "--metrics", "frag_rate", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 paired episodes" in printed and "| frag_rate | 0.5333 | 0.6000 | -0.0667 |" in printed
    assert pd.read_csv(out)["diff_mean"].item() == pytest.approx(-0.2 / 3)
    assert compare.main([str(tmp_path), str(tmp_path)]) == 2
    assert "holds 2 schedulers (fgd, fgd-window)" in capsys.readouterr().err
    assert compare.main([str(tmp_path / "nowhere"), str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
