"""The quick subset (`bash tests/run.sh --quick`): defined once, in tests/quick.txt, and what it must hold."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import QUICK_LIST, REPO, quick_match, quick_patterns


@pytest.mark.parametrize(
    ("nodeid", "pattern", "hit"),
    [
        ("tests/config/test_load.py::test_x", "tests/config/", True),
        ("tests/config/test_load.py::test_x[a-b]", "tests/config/test_load.py", True),
        ("tests/config/test_load.py::test_x[a-b]", "tests/config/test_load.py::test_x", True),
        ("tests/config/test_load.py::test_x[a-b]", "tests/config/test_load.py::test_x[a-b]", True),
        ("tests/config/test_load.py::test_xy", "tests/config/test_load.py::test_x", False),
        ("tests/config/test_load.py::test_x[a-c]", "tests/config/test_load.py::test_x[a-b]", False),
        ("tests/config/test_load.py::test_x", "tests/conf", False),
        ("tests/train/test_exactness.py::test_more", "tests/train/test_*.py::test_more", True),
    ],
)
def test_patterns(nodeid, pattern, hit):
    """A line names a directory, a file, a test with all its parameters, one case; `*` is a wildcard."""
    assert quick_match(nodeid, pattern) is hit


def _collect(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [ln for ln in proc.stdout.splitlines() if "::" in ln]


def test_quick_holds_what_it_promises_and_takes_other_arguments():
    """--quick holds config and data unit tests, a P = 3 exactness run, a bad-input run, README and launcher.

    Every line of tests/quick.txt still names a test (else --quick is a usage error), and other pytest
    arguments (-k, paths) narrow the subset further.
    """
    ids = _collect("--quick")
    assert all(any(quick_match(i, p) for p in quick_patterns()) for i in ids)
    assert any(i.startswith("tests/config/") for i in ids) and any(i.startswith("tests/data/") for i in ids)
    assert "tests/train/test_exactness.py::test_losses_match_single_process[cdgcn-float64]" in ids
    assert any(i.startswith("tests/data/test_validate.py::test_run_p3_exits_2_with_one_line") for i in ids)
    assert "tests/readme/test_readme.py::test_readme_commands_run_as_written" in ids
    narrowed = _collect("--quick", "-k", "exactness")
    assert narrowed and set(narrowed) < set(ids) and all("exactness" in i for i in narrowed)
    assert set(_collect("--quick", "tests/config")) == {i for i in ids if i.startswith("tests/config/")}
    assert "$@" in (REPO / "tests" / "run.sh").read_text()  # run.sh hands its arguments to pytest


def test_a_stale_line_is_a_usage_error(tmp_path):
    """A line naming a test that is gone fails the --quick run instead of shrinking the subset silently."""
    conftest = (REPO / "tests" / "conftest.py").read_text()
    assert "quick.txt" in conftest and QUICK_LIST.is_file()
    code = (
        "import sys, pytest, tests.conftest as c\n"
        f"c.QUICK_LIST = __import__('pathlib').Path({str(tmp_path / 'quick.txt')!r})\n"
        "sys.exit(pytest.main(['-q', '--collect-only', '-p', 'no:cacheprovider', '--quick', 'tests/config']))\n"
    )
    (tmp_path / "quick.txt").write_text("tests/config/test_load.py::test_that_was_renamed\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage-error status
    assert "test_that_was_renamed" in proc.stdout + proc.stderr
