"""perf/bench_pygt.py's record: ``--csv`` appends (header once, earlier rows kept), ``--plot`` draws the newest
row of each (data, model, counterpart). Rows are built as the script builds them, with chosen times, so neither
PyGT nor a run is needed and nothing depends on timing."""

from __future__ import annotations

import argparse
import csv

import pytest

from tests.conftest import perf_script


def _bench():
    return perf_script("bench_pygt")


def _side(epoch_s: float, runs: list[float], loss: float) -> dict:
    return {"epoch_s": epoch_s, "runs": runs, "losses": [0.7, loss], "params": 10}


def test_csv_appends_and_plot_takes_newest(tmp_path):
    bench = _bench()
    man = {"num_vertices": 986, "num_snapshots": 64}
    args = argparse.Namespace(epochs=5, repeat=2)
    path = tmp_path / "results" / "pygt.csv"
    first = [("evolvegcn_o", "evolvegcno", _side(0.04, [0.05, 0.04], 0.65), _side(0.12, [0.12, 0.13], 0.61)),
             ("cdgcn", "dygrae", _side(0.10, [0.10, 0.11], 0.62), _side(0.30, [0.30, 0.31], 0.65))]
    bench.append_csv(path, first, "email64", man, args)
    bench.append_csv(path, [("evolvegcn_o", "evolvegcno", _side(0.02, [0.02, 0.03], 0.64),
                             _side(0.11, [0.11, 0.12], 0.60))], "email64", man, args)
    lines = path.read_text().splitlines()
    assert lines[0].split(",") == bench.CSV_FIELDS and sum(line.startswith("date,") for line in lines) == 1
    rows = list(csv.DictReader(path.open()))
    assert [(r["model"], r["ratio"], r["met"]) for r in rows] == [
        ("evolvegcn_o", "3.00", "False"), ("cdgcn", "3.00", "True"), ("evolvegcn_o", "5.50", "True")]
    assert rows[0]["hpcdgnn_runs_s"] == "0.0500 0.0400" and rows[0]["pygt_model"] == "EvolveGCNO"
    assert rows[2]["goal"] == "5.0" and rows[2]["N"] == "986"

    newest = bench.newest_rows(path)
    assert {k: r["ratio"] for k, r in newest.items()} == {("cpu", "email64", "evolvegcn_o", "EvolveGCNO"): "5.50",
                                                          ("cpu", "email64", "cdgcn", "DyGrEncoder"): "3.00"}
    # a GPU run's rows are their own: the newest row per device
    gpu = dict(_side(0.01, [0.01], 0.64), device="NVIDIA H100 80GB HBM3")
    bench.append_csv(path, [("evolvegcn_o", "evolvegcno", _side(0.005, [0.005], 0.64), gpu)], "email64", man, args)
    newest = bench.newest_rows(path)
    assert newest[("cpu", "email64", "evolvegcn_o", "EvolveGCNO")]["ratio"] == "5.50"
    assert newest[("NVIDIA H100 80GB HBM3", "email64", "evolvegcn_o", "EvolveGCNO")]["ratio"] == "2.00"

    png = tmp_path / "pygt.png"
    bench.plot_csv(path, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_csv_refuses_other_columns(tmp_path):
    """An older CSV (other columns) is left as it is: the append stops with a message naming the file."""
    bench = _bench()
    path = tmp_path / "old.csv"
    path.write_text("date,commit,data\n2026-11-24T17:44Z,e9e358b,email64\n")
    before = path.read_text()
    rows = [("evolvegcn_o", "evolvegcno", _side(0.04, [0.04], 0.65), _side(0.12, [0.12], 0.61))]
    with pytest.raises(SystemExit, match="old.csv: its columns are"):
        bench.append_csv(path, rows, "email64", {"num_vertices": 986, "num_snapshots": 64},
                         argparse.Namespace(epochs=5, repeat=1))
    assert path.read_text() == before
