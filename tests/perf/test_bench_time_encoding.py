"""perf/bench_time_encoding.py on a stream shorter than its default batch of 600 events: every job it would train
passes the run's own set-up checks (``hpcdgnn check``, the batch size against the stream included), at 1×1×1
and at i×1×1. The training runs themselves (MPI) are left out: their figures are what the benchmark measures."""

from __future__ import annotations

import sys

import yaml

from tests.conftest import perf_script


def test_a_tiny_stream_gets_batches_every_job_check_accepts(tmp_path, monkeypatch, capsys):
    from hpcdgnn.__main__ import main as hpcdgnn_main

    bench = perf_script("bench_time_encoding")
    checked = []

    def check_instead_of_training(job, P, work, tag):
        path = work / f"{tag}.yaml"
        path.write_text(yaml.safe_dump(job))
        rc = hpcdgnn_main(["check", str(path), "--ranks", str(P)])
        assert rc == 0, (tag, capsys.readouterr())
        checked.append((tag, P, job["task"]["batch_events"]))
        return [{"loss": 1.0, "val_mrr": 0.0, "test_mrr": 0.0, "val_ap": 0.0, "test_ap": 0.0}]  # the table's cells

    monkeypatch.setattr(bench, "run_job", check_instead_of_training)
    monkeypatch.setattr(sys, "argv", ["bench_time_encoding.py", "--max-events", "400", "--epochs", "1",
                                      "--minibatch", "2"])
    bench.main()
    out = capsys.readouterr().out
    assert len(checked) == 8 and {P for _, P, _ in checked} == {1, 2}, checked  # 2 units × 2 encodings × i = 1, 2
    batches = {b for _, _, b in checked}
    assert len(batches) == 1 and 2 <= batches.pop() < 600, checked  # a quarter of the stream's training events
    assert "events per batch" in out


def test_batch_events_default_explicit_and_floor():
    bench = perf_script("bench_time_encoding")
    assert bench.batch_events(14000, 3) == 600  # the default where the stream holds four batches of it
    assert bench.batch_events(280, 3) == 70  # four batches of a short stream
    assert bench.batch_events(5, 3) == 3  # every rank of the largest i gets an event
    assert bench.batch_events(280, 3, 50) == 50  # given: as it is
