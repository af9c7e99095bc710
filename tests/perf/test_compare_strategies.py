"""perf/compare_strategies.py: the ``vs snap P=1`` column and the P = 1 verdict (issue 13), without runs."""

from __future__ import annotations

import pytest

from tests.conftest import perf_script


def _cmp():
    return perf_script("compare_strategies")


def test_ratio_column_is_against_snapshot_at_one_rank():
    cmp = _cmp()
    table = {"snapshot": {1: {"epoch": 2.0}, 2: {"epoch": 1.1}},
             "vertex": {1: {"epoch": 2.1}, 2: {"epoch": 1.0}},
             "chunk": {1: {"epoch": 2.5}, 2: {"epoch": 1.4}}}
    r = cmp.vs_snapshot_p1(table)
    assert r["snapshot"] == {1: 1.0, 2: pytest.approx(0.55)}
    assert r["vertex"] == {1: pytest.approx(1.05), 2: pytest.approx(0.5)}
    line = cmp.p1_verdict(r)
    assert "vertex 1.05" in line and "chunk 1.25" in line and line.endswith("slower than 1.10x: chunk")
    del table["chunk"]
    assert cmp.p1_verdict(cmp.vs_snapshot_p1(table)).endswith("(all within 10%)")
    assert cmp.vs_snapshot_p1({"vertex": {2: {"epoch": 1.0}}}) == {}  # no snapshot P = 1 run: no column


def test_default_strategies_are_the_model_s_regime_s_snapshot_first():
    """Every strategy a snapshot model trains under (not the event regime's ``memory``, which refused cdgcn and
    ended the documented command); TGN's alone for TGN."""
    from hpcdgnn.strategies.registry import available_strategies

    names = _cmp()._default_strategies("cdgcn")
    timeline = [s for s in available_strategies() if s not in ("auto", "memory")]
    assert names[0] == "snapshot" and sorted(names) == timeline
    assert _cmp()._default_strategies("tgn") == ["memory"]


def test_a_failed_strategy_does_not_discard_the_others(tmp_path):
    """One strategy's refusal (``sequences``' default window 4 leaves no training sequence on T = 4) ended the
    whole comparison with SystemExit before any table was printed: the runs that had completed were lost. Now
    the failure is printed, the table has the completed runs and a ``failed`` row, and the exit is 1 naming it."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(repo / "perf" / "compare_strategies.py"), "--vertices", "128",
                           "--snapshots", "4", "--ranks", "1", "--epochs", "2", "--model", "tmgcn",
                           "--strategies", "sequences", "snapshot"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.split()[:1] in
            (["snapshot"], ["sequences"])}
    assert rows["sequences"][2] == "failed" and rows["snapshot"][1] == "1", proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == (
        "compare_strategies.py: 1 run(s) failed (output above): tmgcn sequences P=1")


def test_volume_growth_starts_at_the_smallest_p_above_one():
    """One rank sends nothing: the default --ranks 1 2 4 8 printed every strategy's growth as 0.00 -> x MiB xnan."""
    table = {"vertex": {1: {"strategy": 0.0}, 2: {"strategy": 1.0}, 8: {"strategy": 3.0}},
             "snapshot": {1: {"strategy": 0.0}, 2: {"strategy": 0.0}, 8: {"strategy": 0.5}}}
    mod = _cmp()
    lines = mod.volume_growth(table, [1, 2, 8])
    assert lines[0].startswith("volume growth from P=2 to P=8")
    assert lines[1].split()[0] == "vertex" and lines[1].endswith("x3.00")
    assert lines[2].endswith("(nothing sent at P=2)") and "nan" not in "".join(lines)
    assert mod.volume_growth(table, [1, 2]) == []  # one P with traffic: no growth to show
