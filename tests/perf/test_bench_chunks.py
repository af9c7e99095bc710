"""perf/bench_chunks.py --before: rank 0's chunk plan of a revision against this tree."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "perf" / "bench_chunks.py"


def test_before_times_every_step_of_both_plans_and_compares_them():
    """A tiny generated graph, one round: a row per step with both sides' seconds, and the plans compared (this
    tree against HEAD: identical where the working tree leaves chunks.py as committed, and in any case compared)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run([sys.executable, str(SCRIPT), "--before", "HEAD", "--vertices", "300", "--snapshots", "4",
                          "--edges", "200", "--ranks", "3", "--repeat", "1"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()[2:-1]}
    assert set(rows) == {"plan_chunks", "build_supergraph", "label_propagation", "chunk_stats", "assign_chunks",
                         "assign_rnn_owners"}
    assert all(len(r) == 6 and float(r[0]) >= 0 and float(r[3]) >= 0 for r in rows.values())
    last = out.stdout.splitlines()[-1]
    assert last.startswith("identical: labels ") and "chunk_owner " in last and "rnn_owner " in last


def test_before_an_unknown_revision_is_one_line_and_exit_2():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run([sys.executable, str(SCRIPT), "--before", "no-such-revision", "--vertices", "50",
                          "--snapshots", "2", "--edges", "20"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no-such-revision" in out.stderr, out.stderr
