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


def fails_cleanly(capsys, *argv) -> str:
    """Run the CLI, expect exit code 2 with one ``error:`` line on stderr and nothing on stdout;
    return that line."""
    assert compare.main([str(a) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    return err


GOOD = "scheduler,episode,frag_rate,done,offered_load\nfgd,0,0.5,1,0.8\nfgd,1,0.6,1,0.8\n"


@pytest.mark.parametrize("content, problem", [
    (b"", "empty file"),
    (bytes(range(256)) * 8, "not UTF-8"),
    (GOOD.encode("utf-16"), "line 1: not UTF-8 but UTF-16"),
    (b"scheduler,episode,frag_rate\n", "no episodes in it"),
    (b"scheduler,episode\nfgd,0\n", "field 'frag_rate': no such metric column; it has no metric columns"),
    (b"scheduler,episode,frag_rate\nfgd,0,0.5\nfgd,1,0.6,7,8\n", "line 3: not a CSV table"),
    (b"scheduler,episode,frag_rate\nfgd,0,0.5\nfgd,one,0.6\n", "line 3, field 'episode': 'one' is not an integer"),
    (b"scheduler,episode,frag_rate\nfgd,0,0.5\n,1,0.6\n", "line 3, field 'scheduler': empty"),
    (b"scheduler,episode,frag_rate,done\nfgd,0,0.5,yes\n", "line 2, field 'done': 'yes' is not a number"),
], ids=["empty", "binary", "utf-16", "header-only", "no-metrics", "ragged", "text-episode", "no-scheduler",
        "text-done"])
def test_cli_names_a_file_that_is_not_a_run_csv(tmp_path, capsys, content, problem):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    (tmp_path / "good.csv").write_text(GOOD)
    err = fails_cleanly(capsys, bad, tmp_path / "good.csv", "--metrics", "frag_rate")
    assert f"{bad}" in err and problem in err


def test_cli_names_a_missing_file_a_folder_without_a_run_and_a_missing_scheduler(tmp_path, capsys):
    (tmp_path / "good.csv").write_text(GOOD)
    (tmp_path / "empty").mkdir()
    good = tmp_path / "good.csv"
    assert "no such file" in fails_cleanly(capsys, tmp_path / "nowhere.csv", good)
    assert f"{tmp_path / 'empty'}" in fails_cleanly(capsys, tmp_path / "empty", good)
    assert "no scheduler 'sjf' in it; it holds fgd" in fails_cleanly(capsys, good, good, "--b-scheduler", "sjf")
    (tmp_path / "numbers.csv").write_text("scheduler,episode,frag_rate\n1,0,0.5\n2,0,0.6\n")
    assert "holds 2 schedulers (1, 2)" in fails_cleanly(capsys, tmp_path / "numbers.csv", good)


def test_cli_refuses_runs_of_other_episodes(tmp_path, capsys):
    (tmp_path / "a.csv").write_text(GOOD)
    (tmp_path / "b.csv").write_text(GOOD.replace("fgd,1,0.6,1,0.8\n", ""))
    assert "(2 episodes)" in fails_cleanly(capsys, tmp_path / "a.csv", tmp_path / "b.csv", "--metrics", "frag_rate")
    (tmp_path / "c.csv").write_text(GOOD.replace("fgd,1,", "fgd,7,"))  # other seeds
    assert "not the same episodes" in fails_cleanly(capsys, tmp_path / "a.csv", tmp_path / "c.csv",
                                                    "--metrics", "frag_rate")


@pytest.mark.parametrize("metrics, problem", [
    ("", "--metrics: no metric named in ''"),
    (",", "--metrics: no metric named in ','"),
    ("scheduler", "field 'scheduler': a key column, not a metric"),
    ("episode", "field 'episode': a key column, not a metric"),
    ("note", "field 'note': not a number ('fast', episode 0)"),
    ("nosuch", "field 'nosuch': no such metric column; its metrics are: frag_rate, done, offered_load"),
])
def test_cli_names_a_bad_metric(tmp_path, capsys, metrics, problem):
    run = tmp_path / "run.csv"
    run.write_text(GOOD.replace(",offered_load\n", ",offered_load,note\n").replace(",0.8\n", ",0.8,fast\n"))
    assert problem in fails_cleanly(capsys, run, run, "--metrics", metrics)


def test_cli_metrics_may_have_spaces_and_repeats(tmp_path, capsys):
    run = tmp_path / "run.csv"
    run.write_text(GOOD)
    assert compare.main([str(run), str(run), "--metrics", " frag_rate, done,frag_rate"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("| frag_rate |") == 1 and "| done |" in printed


def test_cli_checks_out_before_the_work_and_never_overwrites_a_run(tmp_path, capsys):
    run = tmp_path / "run.csv"
    run.write_text(GOOD)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert f"{blocker} is a file, not a folder" in fails_cleanly(capsys, run, run, "--out", blocker / "x.csv")
    assert "is a folder: name a CSV file" in fails_cleanly(capsys, run, run, "--out", tmp_path)
    assert "--out: an empty path" in fails_cleanly(capsys, run, run, "--out", "")
    assert "is run A's CSV" in fails_cleanly(capsys, run, run, "--out", run)
    assert run.read_text() == GOOD
    assert compare.main([str(run), str(run), "--metrics", "frag_rate", "--out", str(tmp_path / "new" / "pairs.csv")]) == 0
    assert pd.read_csv(tmp_path / "new" / "pairs.csv")["pairs"].tolist() == [2]


def test_a_metric_with_nan_pairs_the_episodes_finite_in_both_and_says_so(tmp_path, capsys):
    a = run_frame("x", [0.5, np.nan, 0.7, 0.9])
    b = run_frame("y", [0.4, 0.4, np.inf, 0.6])
    b["offered_load"] = a["offered_load"]
    paired = compare.pair(a, b, ["frag_rate", "jct_mean"]).set_index("metric")
    rate = paired.loc["frag_rate"]
    assert rate["pairs"] == 2 and rate["left_out"] == 2  # episodes 0 and 3
    assert rate["a_mean"] == pytest.approx(0.7) and rate["b_mean"] == pytest.approx(0.5)
    assert rate["diff_mean"] == pytest.approx(rate["a_mean"] - rate["b_mean"])
    assert compare.warnings(paired.reset_index()) == [
        "frag_rate: 2 of 4 episodes left out (NaN or infinite in A or B)",
        "jct_mean: 2 of 4 episodes left out (NaN or infinite in A or B)"]
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    assert compare.main([str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--metrics", "frag_rate"]) == 0
    out, err = capsys.readouterr()
    assert "| frag_rate (2 pairs) | 0.7000 | 0.5000 | +0.2000 |" in out
    assert err == "WARNING: frag_rate: 2 of 4 episodes left out (NaN or infinite in A or B)\n"
