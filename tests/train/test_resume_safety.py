"""``run --resume`` refuses a different computation, with or without a job file, and leaves the run as it was."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_same_run, make_dataset, mpi_env, read_metrics, write_job


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
    ("strategy.name", "vertex", "'snapshot'"),  # the saved run's other strategy keys do not fit vertex
    ("model.hiden", "8", None),  # a misspelt key: the loader's own line, not a resume refusal
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
    if key == "data.path":  # a resume may name its dataset anew (it moved), not other data
        assert f"data.path: {value} is not the dataset the run trained on" in line, line
    elif old is None:
        assert "did you mean 'hidden'" in line and "a resumed run may change only" not in line, line
    else:
        assert f"--set {key}: is " in line and "a resumed run may change only" in line, line
        assert repr(value) in line or value in line, line
        assert f"used {old}" in line, line
    assert "Traceback" not in proc.stderr
    assert _fingerprint(run) == before, "a refused resume changed the run directory"


def test_resume_with_another_models_job_file_names_the_model(finished_run, launcher, small_dataset):
    """A job file of another model brings other model keys: the refusal names model.name (it named the first
    key the other model lacks, e.g. ``model.heads: is None``)."""
    root, job, run, other = finished_run
    gru = write_job(root / "gru.yaml", small_dataset, model={"name": "tgcn_cell", "hidden": 4}, train={"epochs": 4})
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(gru), "--resume", str(run)], timeout=60)
    errors = [line for line in proc.stderr.splitlines() if "hpcdgnn: error:" in line]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert f"{gru}: model.name: is 'tgcn_cell' but the run in {run} used " in errors[0], errors[0]


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


def _one_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "hpcdgnn: error:" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


def test_resume_follows_a_moved_dataset_and_refuses_other_data_at_its_path(small_dataset, launcher, tmp_path):
    """The checkpoint records the dataset (its manifest's sha256): a dataset that moved is named anew with
    ``--set data.path`` and the run continues as the straight one; other data under the old path (regenerated,
    or a relative path read from elsewhere) is refused in one line, the run left as it was."""
    data = Path(shutil.copytree(small_dataset, tmp_path / "d1"))
    job = write_job(tmp_path / "job.yaml", data, train={"epochs": 4}, checkpoint={"every": 1})
    straight = tmp_path / "straight"
    assert launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(straight)]).returncode == 0
    run = tmp_path / "run"
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(run), "--set", "train.epochs=2"])
    assert proc.returncode == 0, proc.stderr
    before = _fingerprint(run)
    moved = data.rename(tmp_path / "d2")
    line = _one_error(launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", "train.epochs=4"]))
    assert f"data.path: {data}: no dataset there" in line and "--set data.path=NEW" in line, line
    make_dataset(data, 7, 23, 40, seed=9)  # other data, same shape, under the old path
    line = _one_error(launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", "train.epochs=4"]))
    assert f"data.path: {data} is not the dataset the run trained on" in line, line
    assert _fingerprint(run) == before
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", "train.epochs=4",
                               f"data.path={moved}"])
    assert proc.returncode == 0, proc.stderr
    got, ref = read_metrics(run), read_metrics(straight)
    assert [r["epoch"] for r in got] == [1, 2, 3, 4]
    assert_same_run([[r["loss"], r["grad_norm"]] for r in got], [[r["loss"], r["grad_norm"]] for r in ref])


def test_a_new_run_refuses_a_used_or_impossible_checkpoint_dir_before_training(small_dataset, launcher, tmp_path):
    """``checkpoint.dir`` holding anything (another run's checkpoints would be rotated away and resumed by
    mistake) or under a file: one line, exit 2, before any epoch, no run directory made, nothing touched;
    likewise ``--output`` under a file."""
    used = tmp_path / "used"
    (used / "epoch-000001").mkdir(parents=True)
    (used / "notes.txt").write_text("mine")
    (tmp_path / "afile").write_text("x")
    job = write_job(tmp_path / "job.yaml", small_dataset, checkpoint={"every": 1})
    for ck, says in [(used, f"--set checkpoint.dir: {used} exists and is not empty"),
                     (tmp_path / "afile", f"--set checkpoint.dir: {tmp_path / 'afile'} is a file, not a directory"),
                     (tmp_path / "afile" / "ck", f"checkpoint.dir: cannot create {tmp_path / 'afile' / 'ck'}"),
                     # the pre-check passes it (a directory root may write), the mkdir after the run
                     # directory's claim fails: the claimed directory goes again
                     (Path("/proc/hpcdgnn-nope"), "--set checkpoint.dir: cannot create /proc/hpcdgnn-nope")]:
        out = tmp_path / f"run-{ck.name}"
        line = _one_error(launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(out),
                                              "--set", f"checkpoint.dir={ck}"]))
        assert says in line, line
        assert not out.exists()
    assert sorted(p.name for p in used.iterdir()) == ["epoch-000001", "notes.txt"]
    line = _one_error(launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output",
                                          str(tmp_path / "afile" / "run")]))
    assert "cannot create the run directory" in line, line
    inside = tmp_path / "inside"  # in the run's own --output directory: made after it
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(inside),
                               "--set", f"checkpoint.dir={inside / 'ck'}"])
    assert proc.returncode == 0, proc.stderr
    assert (inside / "ck" / "epoch-000003" / "COMPLETE").is_file()
    fresh = tmp_path / "fresh"  # a new directory is made at the start, and used
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "ok"),
                               "--set", f"checkpoint.dir={fresh}"])
    assert proc.returncode == 0, proc.stderr
    assert (fresh / "epoch-000003" / "COMPLETE").is_file()


def test_the_dataset_fingerprint_is_the_data_not_where_it_was_prepared(small_dataset, tmp_path):
    """Checkpoints record :func:`dataset_fingerprint`: the manifest without ``source`` (the input's path and
    options), so the same data prepared elsewhere resumes, and other data under any path does not."""
    import json

    from hpcdgnn.train.setup import dataset_fingerprint

    here = Path(shutil.copytree(small_dataset, tmp_path / "here"))
    m = json.loads((here / "manifest.json").read_text())
    m["source"] = {"input": "/elsewhere/edges.txt", "options": {"snapshots": 7}}
    (here / "manifest.json").write_text(json.dumps(m, indent=2))
    assert dataset_fingerprint(here) == dataset_fingerprint(small_dataset)
    other = make_dataset(tmp_path / "other", 7, 23, 40, seed=9)
    assert dataset_fingerprint(other) != dataset_fingerprint(small_dataset)


def test_a_resume_refuses_another_run_s_checkpoints_and_follows_its_own_moved(small_dataset, launcher, tmp_path):
    """``--resume A --set checkpoint.dir=<B's checkpoints>`` continued B's weights in A and rotated B's checkpoint
    away: now one line, exit 2, both runs untouched. A's own checkpoints copied elsewhere still resume, and the
    rotation there deletes only A's (a foreign checkpoint put beside them stays)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    a, b = tmp_path / "A", tmp_path / "B"
    for out, seed in ((b, 1), (a, 0)):
        proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(out),
                                   "--set", f"train.seed={seed}"])
        assert proc.returncode == 0, proc.stderr
    assert (a / "run_id").read_text() != (b / "run_id").read_text()
    before = {r: _fingerprint(r) for r in (a, b)}
    line = _one_error(launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(a), "--set", "train.epochs=4",
                                          f"checkpoint.dir={b / 'checkpoints'}", "checkpoint.every=1"]))
    assert "was written by another run" in line and str(b / "checkpoints" / "epoch-000002") in line, line
    assert {r: _fingerprint(r) for r in (a, b)} == before, "a refused resume changed a run"

    moved = tmp_path / "moved"  # A's checkpoints copied to another file system, say, plus a foreign one
    shutil.copytree(a / "checkpoints", moved)
    shutil.copytree(b / "checkpoints" / "epoch-000002", moved / "epoch-000001")
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(a), "--set", "train.epochs=5",
                               f"checkpoint.dir={moved}", "checkpoint.every=1", "checkpoint.keep=1"])
    assert proc.returncode == 0, proc.stderr
    assert [r["epoch"] for r in read_metrics(a)] == [1, 2, 3, 4, 5]
    assert sorted(p.name for p in moved.iterdir()) == ["epoch-000001", "epoch-000005"]  # B's kept, A's rotated
    assert json.loads((moved / "epoch-000005" / "COMPLETE").read_text())["run_id"] == (a / "run_id").read_text().strip()


@pytest.mark.mpi  # a training run (python -c, hpcdgnn.__main__)
def test_two_runs_started_at_once_in_one_output_directory(small_dataset, tmp_path):
    """A job array given one RUNDIR: both runs found the directory empty and wrote over each other's files.
    The run id is claimed atomically (O_EXCL): exactly one run takes the directory, the other is refused. The
    other run is played by a run id written between this run's emptiness check and its claim."""
    from hpcdgnn.train.checkpoint import claim_run_dir, read_run_id

    assert claim_run_dir(tmp_path) and not claim_run_dir(tmp_path) and read_run_id(tmp_path)
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    out = tmp_path / "shared"
    code = ("import sys\n"
            "from hpcdgnn.train import setup\n"
            "real = setup.choose_run_dir\n"
            "def racing(*a):\n"
            "    d = real(*a)\n"
            "    (d / 'run_id').write_text('the-other-run\\n')\n"
            "    return d\n"
            "setup.choose_run_dir = racing\n"
            "from hpcdgnn.__main__ import main\n"
            f"sys.exit(main(['run', {str(job)!r}, '--output', {str(out)!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=mpi_env(),
                          cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "another run started in this directory at the same moment" in proc.stderr, proc.stderr
    assert sorted(x.name for x in out.iterdir()) == ["run_id"] and read_run_id(out) == "the-other-run"
