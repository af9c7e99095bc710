"""``ruff check hpcdgnn tests perf`` stays clean under pyproject.toml's ``[tool.ruff]`` rules (tests and benchmarks
with the few exceptions its ``per-file-ignores`` give them).

ruff is pinned in the ``test`` extras (``pip install -e '.[test]'``, what ``install.sh`` and so
``tests/run.sh`` run); without it the test fails, saying so, rather than skipping.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO

PATHS = ("hpcdgnn", "tests", "perf")


def test_ruff_check_is_clean():
    """``python -m ruff check hpcdgnn tests perf`` from the repository root exits 0; its findings show on failure."""
    if importlib.util.find_spec("ruff") is None:
        pytest.fail(f"ruff is not installed for {sys.executable}: install the test extras "
                    "(pip install -e '.[test]', or bash install.sh), which pin it", pytrace=False)
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", *PATHS], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"ruff check {' '.join(PATHS)} (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
