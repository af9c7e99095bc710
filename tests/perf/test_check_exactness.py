"""perf/check_exactness.py: which run each case must reproduce, and its verdict on real runs (P = 3)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO, mpi_env, perf_script


def _mod():
    return perf_script("check_exactness")


def test_full_batch_cases_against_snapshot_the_others_against_themselves():
    m = _mod()
    assert m.reference_of("tmgcn", "vertex") == ("tmgcn", "snapshot")
    assert m.reference_of("cdgcn", "chunk") == ("cdgcn", "snapshot")
    assert m.reference_of("tgcn", "sequences") == ("tgcn", "sequences")
    assert m.reference_of("tgn", "memory") == ("tgn", "memory")
    assert m.relative_difference([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert m.relative_difference([1.0, 2.2], [1.0, 2.0]) == pytest.approx(0.1)
    assert m.relative_difference([1.0], [1.0, 2.0]) == float("inf")  # a run that stopped early differs
    assert m.parse_case("tmgcn:pss") == ("tmgcn", "pss")
    with pytest.raises(SystemExit, match="MODEL:STRATEGY"):
        m.parse_case("tmgcn")
    with pytest.raises(SystemExit, match="bogus"):
        m.parse_case("tmgcn:bogus")
    # a chunk case's own option does not reach its snapshot reference (which would refuse it, and no case ran)
    sets = ["strategy.lookup=active", "comm.grad_buckets=3", "strategy.blocks=2"]
    assert m.taken_by("snapshot", sets) == ["comm.grad_buckets=3", "strategy.blocks=2"]
    assert m.taken_by("chunk", sets) == ["strategy.lookup=active", "comm.grad_buckets=3"]


@pytest.mark.mpi  # check_exactness.py runs P = 1, 2, 3 under mpirun
def test_reproducing_runs_pass_and_a_failing_run_makes_exit_1(small_dataset, tmp_path):
    def check(*cases: str, sets: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(REPO / "perf" / "check_exactness.py"), "--data", str(small_dataset), "--ranks", "3",
               "--epochs", "2", "--out", str(tmp_path), *(["--set", *sets] if sets else []), "--cases", *cases]
        return subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=300, cwd=tmp_path)

    out = check("tmgcn:vertex", "nosuchmodel:snapshot")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "tmgcn        vertex    P3: rel.diff" in out.stdout and " ok " in out.stdout
    assert "nosuchmodel  snapshot  P1 (reference): FAIL exit 2" in out.stdout
    assert "nosuchmodel  snapshot  P3: FAIL" in out.stdout
    assert "1 of 2 runs reproduce P = 1" in out.stdout
    # a second check into the same --out gets its own directory (a run never writes over another); --set
    # reaches every run: here bucketed gradient all-reduces and chunked exchanges, which change no loss
    again = check("cdgcn:snapshot", sets=("comm.grad_buckets=3", "strategy.overlap_chunks=2"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "--set comm.grad_buckets=3 strategy.overlap_chunks=2" in again.stdout
    assert "1 of 1 runs reproduce P = 1" in again.stdout
    assert len(list(tmp_path.iterdir())) == 2
    job = yaml.safe_load(next(tmp_path.glob("*/cdgcn-snapshot-cpu-p3-*/config.resolved.yaml")).read_text())
    assert job["strategy"]["overlap_chunks"] == 2


@pytest.mark.mpi
def test_a_tgn_memory_case_runs_minibatch_p_against_one_rank(tmp_path):
    """The docstring's ``memory`` case: TGN (no ``model.layers``) with i = P splits, against P = 1."""
    import gzip

    import numpy as np

    from hpcdgnn.data.events import write_events

    with gzip.open(REPO / "inputs" / "CollegeMsg.txt.gz", "rt") as f:
        rows = np.loadtxt(f, dtype=np.int64, max_rows=300)
    ids, inv = np.unique(rows[:, :2], return_inverse=True)
    inv = inv.reshape(-1, 2)
    write_events(tmp_path / "events", inv[:, 0], inv[:, 1], (rows[:, 2] - rows[0, 2]) / 86400.0, None,
                 num_vertices=ids.shape[0], bipartite=False, num_sources=None, feature_names=[],
                 original_ids=ids)
    data = tmp_path / "events"
    cmd = [sys.executable, str(REPO / "perf" / "check_exactness.py"), "--data", str(data), "--ranks", "2",
           "--epochs", "1", "--task", "temporal_link_prediction", "--out", str(tmp_path / "out"),
           "--set", "task.batch_events=50", "task.eval_negatives=4", "--cases", "tgn:memory"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tgn          memory    P2: rel.diff" in out.stdout and " ok " in out.stdout
    assert "1 of 1 runs reproduce P = 1" in out.stdout
