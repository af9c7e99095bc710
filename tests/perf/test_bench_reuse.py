"""perf/bench_reuse.py's cache of runs 3 and 4 (and of the encoder–decoder's): one entry as the run counts it, the
default fraction raised to one entry on a small graph, and a given fraction below one entry refused in one line
that names the flag and a fraction that works. The MPI runs themselves are left out (their figures are what the
benchmark measures); ``hpcdgnn check`` stands for the run's set-up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from tests.conftest import perf_script


def _args(**kw):
    base = dict(model="cdgcn", epochs=2, window=3, stride=1, batch_vertices=32, fanout=10, teacher_forcing=1.0,
                decoder_horizon=1)
    return SimpleNamespace(**{**base, **kw})


def _check(job: dict, path) -> int:
    from hpcdgnn.__main__ import main

    path.write_text(yaml.safe_dump(job))
    return main(["check", str(path), "--ranks", "1"])


def test_one_entry_is_the_least_cache_a_run_accepts(tmp_path, capsys):
    from hpcdgnn.data.generate import generate_dataset

    bench = perf_script("bench_reuse")
    data, target = tmp_path / "graph", tmp_path / "decoder-graph"
    generate_dataset(data, 64, 6, 3.0, seed=1, edge_life=10)
    bench.degree_target_graph(target, 32, 6, 3.0, 10, 2)
    for job in (bench.job_of(data, _args(), reuse="on"), bench.decoder_job(target, _args())):
        entry = bench.entry_bytes(job)
        assert entry > 0
        job["strategy"]["cache_mb"] = entry / 2**20
        assert _check(job, tmp_path / "job.yaml") == 0, capsys.readouterr()
        job["strategy"]["cache_mb"] = (entry - 1) / 2**20
        assert _check(job, tmp_path / "job.yaml") == 2
        assert "strategy.cache_mb" in capsys.readouterr().err


def test_default_fraction_holds_one_entry_at_any_size_and_a_given_one_below_is_refused(capsys):
    bench = perf_script("bench_reuse")
    entry = 512
    assert bench.cache_mb(None, 100 * entry, 1, entry) * 2**20 == 10 * entry  # 10 % where that is an entry or more
    assert bench.cache_mb(None, 6 * entry, 1, entry) * 2**20 == entry  # a small graph: one entry, not 0.6
    assert bench.cache_mb(None, 6 * entry, 3, entry) * 2**20 == entry  # per rank
    assert bench.cache_mb(0.5, 6 * entry, 1, entry) * 2**20 == 3 * entry  # given, and enough: as given
    with pytest.raises(SystemExit) as stop:
        bench.cache_mb(0.1, 6 * entry, 1, entry)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--cache-fraction" in err
    least = float(err.split("give --cache-fraction ")[1].split()[0])
    assert bench.cache_mb(least, 6 * entry, 1, entry) * 2**20 >= entry  # the fraction it names works


@pytest.mark.mpi  # bench_reuse.py trains its four jobs under mpirun
def test_a_small_graph_runs_with_the_default_fraction():
    import subprocess
    import sys

    from tests.conftest import REPO

    cmd = [sys.executable, str(REPO / "perf" / "bench_reuse.py"), "--vertices", "64", "--snapshots", "6", "--window",
           "3", "--batch-vertices", "32", "--epochs", "2", "--decoder-horizon", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert [ln.split()[0] for ln in out.stdout.splitlines()[-2:]] == ["priority", "lru"], out.stdout
