"""perf/bench_startup.py's order of fresh processes: one untimed process a side, then the two sides of each table
in turn, so that a slow spell of a shared machine falls on both (the processes are stood in for: which runs, in
what order, is asserted, never a time)."""

from __future__ import annotations

import sys

from tests.conftest import perf_script


def test_sides_alternate_process_by_process_after_one_untimed_each(monkeypatch, capsys):
    bench = perf_script("bench_startup")
    order: list[str] = []

    def fake_run(code: str, args: list[str], env: dict[str, str]) -> dict:
        if code == bench.STEP:
            order.append(args[0])
        else:
            order.append("^ofi" if env.get("OMPI_MCA_btl") == "^ofi" else "defaults")
        return {"wall": 1.0, "cpu": 1.0, "rss_mib": 100.0, "compiler": False, "library": "Open MPI v5.0.0"}

    monkeypatch.setattr(bench, "_run", fake_run)
    monkeypatch.setattr(sys, "argv", ["bench_startup.py", "--repeat", "3"])
    assert bench.main() == 0
    # the optimiser table: an untimed pair, then three timed pairs; MPI_Init: the library probe, then the same
    assert order == ["torch", "hpcdgnn"] * 4 + ["defaults"] + ["defaults", "^ofi"] * 4
    out = capsys.readouterr().out
    assert out.count("(median of 3, sides alternating)") == 2
    assert "defaults / ^ofi: 1.00x" in out


def test_a_repeat_below_one_is_refused_before_any_process(monkeypatch, capsys):
    """``--repeat 0`` ran the untimed processes, then ended in statistics.median's traceback; now argparse's one
    line, exit 2, and no process started."""
    import pytest

    bench = perf_script("bench_startup")
    started: list[str] = []
    monkeypatch.setattr(bench, "_run", lambda code, args, env: started.append(code) or {})
    with pytest.raises(SystemExit) as stop:
        bench.main(["--repeat", "0"])
    assert stop.value.code == 2 and not started
    assert "--repeat 0: a median needs at least one process a side" in capsys.readouterr().err
