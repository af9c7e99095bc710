"""``report`` without ``--out``: one run's figures go into its own ``RUNDIR/report/`` (replaced by its next report),
not the current directory; several runs need ``--out``; a named ``--out`` is never overwritten."""

import pytest

from hpcdgnn.__main__ import main
from tests.metrics.test_export import _train


def test_report_defaults_to_the_runs_own_directory_and_replaces_only_that(tmp_path, small_dataset, capsys,
                                                                          monkeypatch):
    """A second report of the same run replaces the first (derived data), and nothing lands in the cwd."""
    pytest.importorskip("matplotlib")
    a = _train(tmp_path, small_dataset, name="a")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["report", str(a)]) == 0
    first = (a / "report" / "curves.png").stat().st_mtime_ns
    assert main(["report", str(a)]) == 0, capsys.readouterr().err
    assert (a / "report" / "curves.png").stat().st_mtime_ns >= first
    assert (a / "report" / "time_split.png").is_file() and not any(cwd.iterdir())
    capsys.readouterr()
    assert main(["report", str(a), str(a)]) == 2  # several runs: none of their directories is the report's
    assert "give --out DIR" in capsys.readouterr().err
    assert main(["report", str(a), "--out", str(a / "report")]) == 2  # a named directory is never overwritten
    assert "curves.png exists" in capsys.readouterr().err
