"""``run --resume`` refuses a different computation, with or without a job file, and leaves the run as it was."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import make_dataset, read_metrics, write_job


def _fingerprint(run: Path) -> dict[str, str]:
    """Hashes of everything in the run directory (checkpoints included)."""
    return {str(f.relative_to(run)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(run.rglob("*")) if f.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, small_dataset, launcher):
    """A 2-epoch run on 2 ranks and a second dataset of other N and T."""
    root = tmp_path_factory.mktemp("resume")
    job = write_job(root / "job.yaml", small_dataset, train={"epochs": 2})
    run = root / "run"
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)])
    assert proc.returncode == 0, proc.stderr
    other = make_dataset(root / "other", 5, 17, 30)
    return root, job, run, other


@pytest.mark.parametrize("with_job_file", [False, True])
@pytest.mark.parametrize(("key", "value", "old"), [
    ("train.lr", "0.5", "0.01"),
    ("model.hidden", "8", "6"),
    ("data.path", None, None),  # the other dataset
])
def test_resume_refuses_changes(finished_run, launcher, with_job_file, key, value, old):
    root, job, run, other = finished_run
    if key == "data.path":
        value = str(other)
    before = _fingerprint(run)
    args = ["-m", "hpcdgnn", "run", *([str(job)] if with_job_file else []), "--resume", str(run),
            "--set", "train.epochs=4", f"{key}={value}"]
    proc = launcher.run(2 if key == "train.lr" else None, args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "hpcdgnn: error:" in line]
    assert len(errors) == 1, proc.stderr
    line = errors[0]
    assert f"--set {key}: is " in line and "a resumed run may change only" in line, line
    assert repr(value) in line or value in line, line
    if key != "data.path":
        assert f"used {old}" in line, line
    assert "Traceback" not in proc.stderr
    assert _fingerprint(run) == before, "a refused resume changed the run directory"


def test_resume_allowed_change_then_refused_one_keeps_run_usable(finished_run, launcher):
    """A refused resume must not spoil a correct one afterwards (it used to rewrite the saved config)."""
    root, job, run, other = finished_run
    bad = launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", "model.hidden=8",
                              "train.epochs=3"], timeout=60)
    assert bad.returncode == 2
    good = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", "train.epochs=3"])
    assert good.returncode == 0, good.stderr
    assert [r["epoch"] for r in read_metrics(run)] == [1, 2, 3]
    assert "epochs: 3" in (run / "config.resolved.yaml").read_text()  # saved once the resume was accepted
