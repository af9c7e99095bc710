"""perf/bench_overlap.py: its configurations, and a real kernel run comparing ``comm.progress`` (P = 2)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from tests.conftest import REPO, mpi_env, perf_script


def test_configurations_are_progress_modes_times_chunks():
    m = perf_script("bench_overlap")
    args = SimpleNamespace(progress=["calls", "thread"], chunks=[1, 4])
    assert m.configs(args) == [("calls", 1), ("calls", 4), ("thread", 1), ("thread", 4)]
    assert m._label("auto", 2) == "auto:thread" and m._label("auto", 0) == "auto:calls"
    assert m._label("thread", 2) == "thread"


def test_kernel_rows_per_configuration_with_each_ranks_breakdown():
    cmd = [sys.executable, str(REPO / "perf" / "bench_overlap.py"), "--kernel", "--vertices", "96", "--snapshots", "5",
           "--chunks", "1", "3", "--progress", "calls", "thread", "--reps", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    table = [ln.split() for ln in lines[lines.index(next(ln for ln in lines if ln.split()[:2] == ["K", "progress"]))
                                        + 1:][:4]]
    assert [(r[0], r[1]) for r in table] == [("1", "calls"), ("3", "calls"), ("1", "thread"), ("3", "thread")]
    assert table[0][-1] == "1.00"  # the ratio is against the first configuration
    breakdown = [ln for ln in lines if "rank 0:" in ln and "rank 1:" in ln]
    assert len(breakdown) == 4
