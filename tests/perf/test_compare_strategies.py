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
