"""perf/bench_fusion.py's GRU timing over the active runs (temporal fusion alone, DGC §5.1 Fig. 9): one torch thread,
untimed calls of each side first, the padded and packed sides alternating call by call. Which calls are made and
on how many threads is asserted, never a time."""

from __future__ import annotations

import torch

from tests.conftest import perf_script


def test_gru_sides_run_on_one_thread_warmed_up_and_alternating(tmp_path, monkeypatch, capsys):
    from hpcdgnn.data.generate import generate_dataset

    bench = perf_script("bench_fusion")
    data = tmp_path / "graph"
    generate_dataset(data, 64, 6, 3.0, seed=1)
    calls: list[tuple[str, int]] = []
    inside_packed = []
    forward, fused = torch.nn.GRU.forward, bench.fused_gru

    def padded(self, *a, **k):
        if not inside_packed:
            calls.append(("padded", torch.get_num_threads()))
        return forward(self, *a, **k)

    def packed(*a, **k):
        calls.append(("packed", torch.get_num_threads()))
        inside_packed.append(1)
        try:
            return fused(*a, **k)
        finally:
            inside_packed.pop()

    monkeypatch.setattr(torch.nn.GRU, "forward", padded)
    monkeypatch.setattr(bench, "fused_gru", packed)
    threads = torch.get_num_threads()
    medians = bench.temporal(data, 4)  # --repeat's default
    assert torch.get_num_threads() == threads  # the caller's thread count is given back
    sides = [side for side, _ in calls]
    assert {n for _, n in calls} == {1}, calls
    assert all(a != b for a, b in zip(sides, sides[1:], strict=False)), sides  # ABAB: never one side twice running
    assert sides[:4] == ["padded", "packed", "padded", "packed"]
    # two untimed calls a side, then samples of at least two calls each
    assert sides.count("padded") == sides.count("packed") >= 2 + 2
    assert set(medians) == {"padded", "packed"} and all(v > 0 for v in medians.values())
    assert "sides alternating, median of" in capsys.readouterr().out


def test_a_repeat_below_one_is_refused_before_the_runs(monkeypatch, capsys):
    """``--repeat 0`` generated the graph and ran every spatial configuration, then printed the GRU's seconds and
    ratio as nan (numpy's median of no sample); now argparse's one line, exit 2, before anything runs."""
    import sys

    import pytest

    bench = perf_script("bench_fusion")
    ran: list[str] = []
    monkeypatch.setattr(bench, "generate_graph", lambda *a, **k: ran.append("generate"))
    monkeypatch.setattr(bench, "run", lambda *a, **k: ran.append("run"))
    monkeypatch.setattr(sys, "argv", ["bench_fusion.py", "--repeat", "0"])
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 2 and not ran
    assert "--repeat 0: the GRU's medians need at least one sample a side" in capsys.readouterr().err
