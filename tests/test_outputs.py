"""Output folders hold one run: staged writes, the previous run's files replaced, a run that
dies while writing leaves the folder as it was (``jaxsched/outputs.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jaxsched import outputs
from jaxsched.errors import DataError


def writer(files: dict):
    def write(folder):
        for name, text in files.items():
            (folder / name).write_text(text)
        return list(files)
    return write


def test_a_second_run_replaces_the_first_and_says_so(tmp_path, capsys):
    outputs.publish(tmp_path, writer({"a.csv": "1", "per_job.csv": "old"}))
    assert capsys.readouterr().err == ""
    outputs.publish(tmp_path, writer({"a.csv": "2"}))
    assert "replacing the results of an earlier run" in capsys.readouterr().err
    assert (tmp_path / "a.csv").read_text() == "2"
    assert not (tmp_path / "per_job.csv").exists()  # the earlier run's file is not left behind
    assert json.loads((tmp_path / outputs.MANIFEST).read_text())["files"] == ["a.csv"]
    assert not list(tmp_path.glob(f"{outputs.STAGING_PREFIX}*"))


def test_a_run_that_dies_while_writing_leaves_the_previous_run(tmp_path):
    outputs.publish(tmp_path, writer({"a.csv": "1", "plot.png": "p"}))

    def dies(folder):
        (folder / "a.csv").write_text("half")
        raise KeyboardInterrupt  # e.g. killed while plotting

    with pytest.raises(KeyboardInterrupt):
        outputs.publish(tmp_path, dies)
    assert (tmp_path / "a.csv").read_text() == "1" and (tmp_path / "plot.png").read_text() == "p"
    assert json.loads((tmp_path / outputs.MANIFEST).read_text())["files"] == ["a.csv", "plot.png"]


def test_a_manifest_cannot_name_files_outside_the_folder(tmp_path):
    outside = tmp_path / "keep.txt"
    outside.write_text("x")
    out = tmp_path / "out"
    out.mkdir()
    (out / outputs.MANIFEST).write_text(json.dumps({"files": ["../keep.txt", "", "b.csv"]}))
    assert outputs.previous_files(out) == ["b.csv"]
    outputs.publish(out, writer({"a.csv": "1"}))
    assert outside.exists()


def test_an_unwritable_folder_is_found_before_the_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(DataError, match="eval.out_dir.*cannot write"):
        outputs.check_writable(blocker / "results")


@pytest.mark.parametrize("under", ["", "x", "x/y/z"])
def test_a_path_through_a_file_names_the_file(tmp_path, under):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / under if under else blocker
    with pytest.raises(DataError, match=f"field 'eval.out_dir': cannot write to {out}: {blocker} is a file, not a folder"):
        outputs.check_writable(out)
    assert blocker.is_file()


def test_a_folder_that_is_not_writable_is_named(tmp_path, monkeypatch):
    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refused)  # as a read-only folder refuses (root is never refused)
    with pytest.raises(DataError, match=f"cannot write to {tmp_path / 'new'}: {tmp_path / 'new'} is not writable"):
        outputs.check_writable(tmp_path / "new")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_folder_is_named(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(DataError, match=f"{locked} is not writable"):
        outputs.check_writable(locked / "results")


def test_an_out_file_must_be_a_file_in_a_writable_folder(tmp_path):
    with pytest.raises(DataError, match="^--out: an empty path$"):
        outputs.check_out_file("")
    with pytest.raises(DataError, match=f"^--out: {tmp_path} is a folder: name a CSV file in it"):
        outputs.check_out_file(tmp_path)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(DataError, match="^--out: cannot write .*a-file is a file, not a folder"):
        outputs.check_out_file(tmp_path / "a-file" / "pairs.csv")
    outputs.check_out_file(tmp_path / "new" / "pairs.csv")
    assert (tmp_path / "new").is_dir() and not list((tmp_path / "new").iterdir())


@pytest.mark.parametrize("how", ["--out", "--set"])
def test_evaluate_refuses_an_out_dir_under_a_file_before_any_work(tmp_path, monkeypatch, capsys, how):
    from jaxsched import evaluate

    def no_work(*args, **kwargs):
        raise AssertionError("evaluated before checking the output folder")

    monkeypatch.setattr(evaluate, "evaluate", no_work)
    monkeypatch.setattr(evaluate, "sweep_load", no_work)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = ["--out", str(blocker / "x")] if how == "--out" else ["--set", f"eval.out_dir={json.dumps(str(blocker / 'x'))}"]
    assert evaluate.main([*out, "--quiet", "--set", "cluster.preset_nodes=4",
                          "--set", "eval.episodes=1"]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: config, field 'eval.out_dir': cannot write to {blocker / 'x'}: "
                   f"{blocker} is a file, not a folder\n")


def test_package_versions_name_what_is_installed_and_none_for_what_is_not(monkeypatch):
    import jax
    import numpy

    monkeypatch.setattr(outputs, "RECORDED_PACKAGES", ("jax", "numpy", "no-such-package-here"))
    versions = outputs.package_versions()
    assert versions["jax"] == jax.__version__ and versions["numpy"] == numpy.__version__
    assert versions["no-such-package-here"] is None
    assert versions["python"].count(".") == 2
