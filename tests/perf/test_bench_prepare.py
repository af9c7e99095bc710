"""perf/bench_prepare.py: its dataset comparison tells identical datasets from different ones, and a small run
against this same checkout reads identical (what its ``--before`` verdict rests on; no timing is asserted)."""

from __future__ import annotations

from tests.conftest import REPO, perf_script


def test_same_files_and_a_small_run(tmp_path, capsys):
    bench = perf_script("bench_prepare")
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        (d / "shards").mkdir(parents=True)
        (d / "shards" / "s.h5").write_bytes(b"xyz")
    assert bench.same_files(a, b)
    (b / "shards" / "s.h5").write_bytes(b"xyw")
    assert not bench.same_files(a, b)
    (b / "shards" / "s.h5").write_bytes(b"xyz")
    (b / "extra").write_text("")
    assert not bench.same_files(a, b)
    assert bench.main(["--events", "3000", "--vertices", "200", "--snapshots", "5", "--before", str(REPO)]) == 0
    assert "datasets identical" in capsys.readouterr().out
