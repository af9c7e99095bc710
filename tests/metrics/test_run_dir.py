"""``choose_run_dir``: where a run writes; a previous run, a file or an impossible place is one line."""

from __future__ import annotations

import pytest

from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics import choose_run_dir


def test_run_directory_refusals_are_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "metrics.jsonl").write_text("{}\n")
    for output, says in [("", "--output: an empty path"), (" ", "--output: an empty path"),
                         (str(tmp_path / "afile"), "is a file"),
                         (str(tmp_path / "used"), "directory exists and is not empty"),
                         (str(tmp_path / "afile" / "run"), "cannot create the run directory")]:
        with pytest.raises(ConfigError, match=says):
            choose_run_dir(output, str(tmp_path / "runs"), "job")
    with pytest.raises(ConfigError, match="output.dir: .*afile: cannot create the run directory"):
        choose_run_dir(None, str(tmp_path / "afile"), "job")  # a parent that is a file: refused, not retried
    assert (tmp_path / "used" / "metrics.jsonl").read_text() == "{}\n"
    first = choose_run_dir(None, str(tmp_path / "runs"), "job")
    second = choose_run_dir(None, str(tmp_path / "runs"), "job")  # the same second: a new name, never the same
    assert first != second and first.is_dir() and second.is_dir()
    assert choose_run_dir(str(tmp_path / "new" / "run"), "unused", "job").is_dir()
