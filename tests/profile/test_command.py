"""``python -m hpcdgnn profile`` end to end: the predictor file it writes, its one-line errors, a job that uses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hpcdgnn.partition.workload import MLPWorkload
from tests.conftest import write_job


@pytest.fixture(scope="module")
def predictor_file(tmp_path_factory, launcher) -> tuple[Path, str]:
    """A predictor made by ``python -m hpcdgnn profile`` for the jobs of ``write_job`` (cdgcn, hidden 6, float64)."""
    out = tmp_path_factory.mktemp("predictor") / "cdgcn.pt"
    proc = launcher.run(None, ["-m", "hpcdgnn", "profile", "--model", "cdgcn", "--features", "2", "--hidden", "6",
                               "--dtype", "float64", "--device", "cpu", "--samples", "40", "--vertices", "200",
                               "--snapshots", "6", "--max-size", "200", "--repeats", "1", "--fit-steps", "200",
                               "--out", str(out)], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc.stdout


def test_profile_command_writes_a_loadable_predictor(predictor_file):
    """``profile`` prints both encoders' held-out MAPE and saves a file that records where it was made."""
    path, stdout = predictor_file
    assert "structure encoder: 32 train / 8 held-out samples, held-out MAPE" in stdout
    assert "time encoder: 32 train / 8 held-out samples, held-out MAPE" in stdout
    assert f"saved {path}" in stdout
    pred = MLPWorkload.load(path)
    m = pred.meta
    assert m["model"] == "cdgcn" and m["hidden"] == [6] and m["features"] == [2] and m["dtype"] == "float64"
    assert m["machine"]["hostname"] and m["machine"]["cpu"] and m["torch"] == torch.__version__
    assert m["samples"]["structure"]["held_out"] == 8 and 0 <= m["mape"]["total"] < 10
    # what it prints is what it saved (timings of 8 chunks on a shared machine: the value itself is not pinned;
    # test_fit pins mape's arithmetic)
    for what, key in (("structure encoder", "structure"), ("time encoder", "time"), ("chunk total", "total")):
        line = next(s for s in stdout.splitlines() if s.startswith(what))
        assert f"held-out MAPE {100 * m['mape'][key]:.1f}%" in line, (line, m["mape"])
    assert pred.time is not None


def test_profile_rejects_bad_input_in_one_line(launcher, tmp_path):
    """Bad options: one error line, exit 2, no file."""
    proc = launcher.run(None, ["-m", "hpcdgnn", "profile", "--samples", "2", "--out", str(tmp_path / "x.pt")])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["hpcdgnn: error: profile: --samples must be >= 5 so some can be "
                                                "held out (got 2)"]
    assert not (tmp_path / "x.pt").exists()
    mine = tmp_path / "job.yaml"  # an existing file that is no predictor is never replaced
    mine.write_text("data: {path: here}\n")
    proc = launcher.run(None, ["-m", "hpcdgnn", "profile", "--out", str(mine)])
    assert proc.returncode == 2 and mine.read_text() == "data: {path: here}\n", proc.stderr
    assert proc.stderr.strip().splitlines() == [f"hpcdgnn: error: profile: --out {mine} exists and is not a "
                                                "predictor file (it would be replaced); choose another --out"]


def test_job_with_the_mlp_workload_trains_and_a_missing_predictor_is_one_line(launcher, small_dataset, tmp_path,
                                                                               predictor_file):
    """A job with ``workload: mlp`` plans with predicted seconds; a missing predictor is one error line."""
    path, _ = predictor_file
    # the predictor was profiled on the CPU (predictor_file): a job on a GPU would refuse it, rightly
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1, "device": "cpu"},
                    strategy={"name": "chunk", "chunk_size": 20, "workload": "mlp", "predictor": str(path)})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    work = [r["chunk_work"] for r in plan["ranks"][:2]]
    assert all(0 < w < 10 for w in work)  # predicted seconds, not vertex/edge counts
    missing = tmp_path / "nowhere" / "w.pt"
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run2"),
                               "--set", f"strategy.predictor={missing}"])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "python -m hpcdgnn profile --model cdgcn" in lines[0]
    assert lines[0].startswith(f"hpcdgnn: error: {job}: strategy.workload: mlp needs the workload predictor")
    assert not (tmp_path / "run2").exists()


def test_only_a_torch_archive_counts_as_a_predictor_to_replace(tmp_path):
    """``profile --out`` replaces a predictor of any format (one a run cannot read is re-made), never
    another file: the test is whether ``torch.save`` wrote it."""
    import zipfile

    from hpcdgnn.profile.command import _saved_by_torch

    torch.save({"format": "an older one"}, tmp_path / "old.pt")
    (tmp_path / "job.yaml").write_text("data: {path: here}\n")
    with zipfile.ZipFile(tmp_path / "mine.zip", "w") as z:
        z.writestr("notes.txt", "mine")
    assert _saved_by_torch(tmp_path / "old.pt")
    assert not _saved_by_torch(tmp_path / "job.yaml") and not _saved_by_torch(tmp_path / "mine.zip")
