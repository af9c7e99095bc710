"""The task where the rows live (issue 13 item 5): vertex and chunk strategies score in place, exactly,
and move fewer bytes than whole snapshots to their scoring ranks."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_dataset, read_metrics, write_job
from tests.train.test_exactness import _losses

HIDDEN = 6  # write_job's model.hidden; float64 rows


def _run(launcher, P, job, out):
    """(losses, records, stdout) of a run on P ranks."""
    proc = launcher.run(P, ["-m", "hpcdgnn", "run", str(job), "--output", str(out)])
    assert proc.returncode == 0, f"P={P} failed:\n{proc.stdout}\n{proc.stderr}"
    recs = read_metrics(out)
    return np.array([[r["loss"], r["grad_norm"]] for r in recs]), recs, proc.stdout


def _whole_snapshot_bytes(T: int, N: int, P: int) -> int:
    """Forward bytes of moving every step's rows to rank t mod P under a range partition (the old way)."""
    bounds = np.linspace(0, N, P + 1).astype(int)  # near enough: ranges differ by at most one vertex
    return sum(N - int(bounds[t % P + 1] - bounds[t % P]) for t in range(T)) * HIDDEN * 8


@pytest.mark.parametrize("strategy", ["vertex", "chunk"])
def test_sparse_steps_score_by_source_row_and_move_little(launcher, tmp_path, strategy):
    """Few pairs per step against N: each pair goes to its source row's rank, which fetches only the
    destination rows it lacks; exact against one process at P = 3 (T, N not divisible by 3)."""
    T, N = 5, 301
    data = make_dataset(tmp_path / "sparse", T=T, N=N, m=12)
    job = write_job(tmp_path / "job.yaml", data, model={"name": "tgcn"},
                    strategy={"name": strategy, **({"chunk_size": 40} if strategy == "chunk" else {})})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, recs, out = _run(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    assert "pairs scored by source row" in out
    lines = out.splitlines()  # the set-up's detail line follows the start line that says what the run is
    start = next(i for i, line in enumerate(lines) if line.startswith("hpcdgnn: tgcn x link_prediction"))
    assert start < next(i for i, line in enumerate(lines) if line.startswith("link prediction in place")), out
    tags = recs[-1]["bytes_by_tag"]
    assert "redistribute.fwd" not in tags
    assert 0 < tags["task.fwd"] < 0.25 * _whole_snapshot_bytes(T, N, 3), tags
    assert tags["task.bwd"] == tags["task.fwd"]  # each fetched row's gradient goes back to its owner


def test_dense_steps_score_by_step_and_never_move_more(launcher, tmp_path):
    """Pairs covering every row of a step: scoring by source row would fetch each row on P - 1 ranks,
    so pairs are scored on their step's rank, fetching at most what whole snapshots moved (+ indices)."""
    T, N = 5, 13
    data = make_dataset(tmp_path / "dense", T=T, N=N, m=60)
    job = write_job(tmp_path / "job.yaml", data, model={"name": "tgcn"}, strategy={"name": "vertex"})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, recs, out = _run(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    assert "pairs scored by step" in out
    tags = recs[-1]["bytes_by_tag"]
    assert 0 < tags["task.fwd"] <= _whole_snapshot_bytes(T, N, 3)
    # the rows asked of an owner are named by a bitmask over its rows where that is shorter than int32
    # positions: here every rank asks for most rows, so the index messages are the counts (8 bytes per
    # rank pair) and one bitmask per pair, not 4 bytes per fetched row
    P, fetched = 3, tags["task.fwd"] // (HIDDEN * 8)
    bitmasks = P * (P - 1) * (8 + -(-T * -(-N // P) // 8))
    assert tags["task.index"] <= bitmasks < P * (P - 1) * 8 + 4 * fetched, (tags, fetched)


def test_node_classification_in_place_moves_nothing(launcher, small_dataset, tmp_path):
    """Node tasks score each rank's own rows: no task traffic at all, same losses."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn"},
                    task={"name": "node_classification"}, strategy={"name": "vertex"})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, recs = _losses(launcher, 2, job, tmp_path / "p2")
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    assert not [t for t in recs[-1]["bytes_by_tag"] if t.startswith(("task", "redistribute"))]
