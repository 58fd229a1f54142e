"""Output folders hold one run: staged writes, the previous run's files replaced, a run that
dies while writing leaves the folder as it was (``jaxsched/outputs.py``)."""

from __future__ import annotations

import json

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


def test_package_versions_name_what_is_installed_and_none_for_what_is_not(monkeypatch):
    import jax
    import numpy

    monkeypatch.setattr(outputs, "RECORDED_PACKAGES", ("jax", "numpy", "no-such-package-here"))
    versions = outputs.package_versions()
    assert versions["jax"] == jax.__version__ and versions["numpy"] == numpy.__version__
    assert versions["no-such-package-here"] is None
    assert versions["python"].count(".") == 2
