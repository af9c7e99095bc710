"""The benchmarks that write into perf/results/ by default (bench_planner.py, bench_convergence.py) keep a results
file already there: the new one goes beside it (``TIME-2.*``), never over it. Their training runs are stood in for
(no strategy predicted; a refused run), so only the writing is exercised."""

from __future__ import annotations

import sys

from tests.conftest import perf_script

STAMP = "20260101-000000"


def test_write_results_keeps_what_is_there_and_pairs_share_a_stem(tmp_path):
    bench = perf_script("bench_epoch")
    (tmp_path / f"{STAMP}.txt").write_text("kept\n")
    written = bench.write_results(tmp_path, STAMP, {".json": "{}\n", ".txt": "new\n"})
    assert [p.name for p in written] == [f"{STAMP}-2.json", f"{STAMP}-2.txt"]
    assert (tmp_path / f"{STAMP}.txt").read_text() == "kept\n" and not (tmp_path / f"{STAMP}.json").exists()
    assert (tmp_path / f"{STAMP}-2.txt").read_text() == "new\n"
    again = bench.write_results(tmp_path, STAMP, {".json": "[]\n"})
    assert [p.name for p in again] == [f"{STAMP}.json"]  # free under the plain stem


def test_bench_planner_writes_beside_an_existing_result(tmp_path, monkeypatch, capsys):
    bench = perf_script("bench_planner")
    out = tmp_path / "planner"
    out.mkdir()
    for suffix in (".json", ".txt"):
        (out / f"{STAMP}{suffix}").write_text(f"earlier {suffix}\n")
    monkeypatch.setenv("HPCDGNN_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(bench, "dataset", lambda name, cache: tmp_path / "data")
    monkeypatch.setattr(bench, "predict", lambda *a, **k: [])
    monkeypatch.setattr(bench.time, "strftime", lambda fmt: STAMP)
    monkeypatch.setattr(sys, "argv", ["bench_planner.py", "--datasets", "uniform", "--ranks", "2", "--out", str(out)])
    assert bench.main() == 0
    for suffix in (".json", ".txt"):
        assert (out / f"{STAMP}{suffix}").read_text() == f"earlier {suffix}\n"
        assert (out / f"{STAMP}-2{suffix}").is_file()
    assert f"{STAMP}-2.json" in capsys.readouterr().out


def test_bench_convergence_writes_beside_an_existing_result(tmp_path, monkeypatch, capsys):
    bench = perf_script("bench_convergence")
    out = tmp_path / "convergence"
    out.mkdir()
    (out / f"{STAMP}.json").write_text("earlier\n")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(bench, "prepare", lambda name, cache: tmp_path / "data")
    monkeypatch.setattr(bench, "run", lambda *a, **k: "error: stood in for")
    monkeypatch.setattr(bench.time, "strftime", lambda fmt: STAMP)
    monkeypatch.setattr(sys, "argv", ["bench_convergence.py", "--datasets", "collegemsg", "--models", "tgcn_cell",
                                      "--systems", "snapshot", "--out", str(out)])
    assert bench.main() == 0
    assert (out / f"{STAMP}.json").read_text() == "earlier\n"
    assert '"refused": "error: stood in for"' in (out / f"{STAMP}-2.json").read_text()
    assert f"{STAMP}-2.json" in capsys.readouterr().out


def test_performance_md_says_which_scripts_write_into_perf_results():
    """A script whose ``--out`` defaults into perf/results/ says so in its row of docs/performance.md."""
    import re

    from tests.conftest import REPO

    rows = (REPO / "docs" / "performance.md").read_text().splitlines()
    writers = {}
    for script in sorted((REPO / "perf").glob("*.py")):
        found = re.search(r'default=(?:str\()?REPO / "perf" / "results" / "([^"]+)"', script.read_text())
        if found:
            writers[script.name] = found.group(1)
    assert set(writers) >= {"bench_planner.py", "bench_convergence.py"}, writers
    for name, where in writers.items():
        row = next(r for r in rows if r.startswith(f"| `python perf/{name}"))
        assert "writes" in row and f"`perf/results/{where}/`" in row and "beside" in row, (name, row)
