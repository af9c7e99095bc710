"""perf/bench_convergence.py's order of runs: one untimed one-epoch run of the first system before the timed runs
of each (dataset, model, P), whose records no row reads, so that a fresh sweep's one-off costs do not fall on the
full batch that sets every system's target. The training runs are stood in for; which runs are made is asserted,
never a time."""

from __future__ import annotations

import json
import sys

from tests.conftest import perf_script


def _records(epochs: int, epoch_s: float) -> list[dict]:
    return [{"time": {"epoch": {"max": epoch_s}}, "val_loss": 1.0 / (e + 1), "test_loss": 1.0, "loss": 1.0}
            for e in range(epochs)]


def test_an_untimed_run_of_the_first_system_precedes_the_timed_ones(tmp_path, monkeypatch, capsys):
    bench = perf_script("bench_convergence")
    calls: list[tuple[str, int, int, str]] = []

    def fake_run(data, model, strategy, ranks, epochs, out, seed=0):
        calls.append((strategy["name"], ranks, epochs, out.name))
        # a warm-up's records would be the slowest: a row that read them would show ST 100
        return _records(epochs, 100.0 if len(calls) == 1 else 1.0)

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(bench, "prepare", lambda name, cache: tmp_path / "data")
    monkeypatch.setattr(bench, "run", fake_run)
    monkeypatch.setattr(sys, "argv", ["bench_convergence.py", "--datasets", "collegemsg", "--models", "tgcn_cell",
                                      "--systems", "snapshot", "vertex", "--ranks", "1", "2", "--epochs", "2",
                                      "--out", str(tmp_path / "out")])
    assert bench.main() == 0
    for P, at in ((1, 0), (2, 3)):
        warm, *timed = calls[at:at + 3]
        assert warm[:3] == ("snapshot", P, 1) and warm[3].endswith("warmup"), calls
        assert [c[:3] for c in timed] == [("snapshot", P, 2), ("vertex", P, 2)], calls
    assert len(calls) == 6
    rows = json.loads(next((tmp_path / "out").glob("*.json")).read_text())["rows"]
    assert [(r["system"], r["P"]) for r in rows] == [("snapshot", 1), ("vertex", 1), ("snapshot", 2), ("vertex", 2)]
    assert all(r["ST"] == 1.0 for r in rows)
