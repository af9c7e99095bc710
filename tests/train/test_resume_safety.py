"""``run --resume`` refuses a different computation, with or without a job file, and leaves the run as it was."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_same_run, make_dataset, mpi_env, read_metrics, run_in_process, write_job


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


def _raced(function: str, first: str, args: list[str]) -> subprocess.CompletedProcess:
    """``python -m hpcdgnn ARGS`` with another run's claim (a run_id) written into the directory that
    ``hpcdgnn.train.setup.FUNCTION`` returns, just after it returns (``first``: code run before, ``d`` the path):
    the other run of a race, between the check and the claim."""
    code = ("import sys\n"
            "from hpcdgnn.train import setup\n"
            f"real = setup.{function}\n"
            "def racing(*a):\n"
            "    d = real(*a)\n"
            f"{first}"
            "    (d / 'run_id').write_text('the-other-run\\n')\n"
            "    return d\n"
            f"setup.{function} = racing\n"
            "from hpcdgnn.__main__ import main\n"
            f"sys.exit(main({args!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=mpi_env(),
                          cwd=REPO)


@pytest.mark.mpi  # a training run (python -c, hpcdgnn.__main__)
def test_two_runs_started_at_once_in_one_output_directory(small_dataset, tmp_path):
    """A job array given one RUNDIR: both runs found the directory empty and wrote over each other's files.
    The run id is claimed atomically (O_EXCL): exactly one run takes the directory, the other is refused. The
    other run is played by a run id written between this run's emptiness check and its claim."""
    from hpcdgnn.train.checkpoint import claim_run_dir, read_run_id

    assert claim_run_dir(tmp_path) and not claim_run_dir(tmp_path) and read_run_id(tmp_path)
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    out = tmp_path / "shared"
    proc = _raced("choose_run_dir", "", ["run", str(job), "--output", str(out)])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "another run started in this directory at the same moment" in proc.stderr, proc.stderr
    assert sorted(x.name for x in out.iterdir()) == ["run_id"] and read_run_id(out) == "the-other-run"


@pytest.mark.mpi  # training runs (python -m hpcdgnn, P = 1)
def test_one_job_at_a_time_trains_a_run(small_dataset, launcher, tmp_path):
    """Two resumes of one run at once (or a resume while the run, or a launcher's orphaned ranks, still train) both
    trained into it: epochs lost from metrics.jsonl, a summary that disagreed with it. Rank 0 now holds the run
    (a flock on its run_id) while it trains: another job is refused in one line, the run untouched; once the
    holder is gone the resume goes on. The holder is played by a process that locks run_id, then by a real run."""
    import signal
    import time

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    run = tmp_path / "run"
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)])
    assert proc.returncode == 0, proc.stderr
    def hold(seconds: float) -> subprocess.Popen:
        holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                                   f"fd = os.open({str(run / 'run.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
                                   "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\n"
                                   f"time.sleep({seconds})\n"],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        return holder

    resume = ["run", "--resume", str(run), "--set", "train.epochs=3"]
    holder = hold(300)
    try:
        before = _fingerprint(run)
        line = _one_error(run_in_process(resume, {**mpi_env(), "HPCDGNN_RUN_LOCK_WAIT": "1"}, REPO))
        assert f"--resume {run}: another job is training this run now (it holds {run / 'run.lock'}; waited 1 s" \
            in line, line
        assert _fingerprint(run) == before
    finally:
        holder.kill()
        holder.wait()
    holder = hold(300)  # the scheduler's SIGTERM while a resume waits: it stops at once, exit 75, nothing changed
    try:
        waiting = subprocess.Popen([sys.executable, "-m", "hpcdgnn", *resume], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env={**mpi_env(), "HPCDGNN_RUN_LOCK_WAIT": "300"},
                                   cwd=REPO)
        try:
            for line in waiting.stdout:
                if "another job holds" in line:
                    break
            waiting.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            err = waiting.communicate(timeout=60)[1]
            assert waiting.returncode == 75 and time.monotonic() - t0 < 10, (waiting.returncode, err)
        finally:
            waiting.kill()
        assert f"hpcdgnn: error: --resume {run}: stopped by a signal while waiting for another job to let go of " \
            f"{run / 'run.lock'}; nothing was changed" in err, err
        assert _fingerprint(run) == before
    finally:
        holder.kill()
        holder.wait()
    holder = hold(2)  # a holder that lets go while the resume waits (a requeued job's predecessor ending)
    try:
        proc = run_in_process(resume, {**mpi_env(), "HPCDGNN_RUN_LOCK_WAIT": "60"}, REPO)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, proc.stderr
    assert "another job holds" in proc.stdout and "waiting up to 60 s" in proc.stdout, proc.stdout
    assert [r["epoch"] for r in read_metrics(run)] == [1, 2, 3]
    # a run being trained holds it from its set-up to its end
    slow = subprocess.Popen([sys.executable, "-m", "hpcdgnn", "run", "--resume", str(run), "--set", "train.epochs=6",
                             "debug.delay_rank=0", "debug.delay_seconds=0.5"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=mpi_env(), cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while len(read_metrics(run)) < 4 and slow.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert slow.poll() is None, slow.communicate()
        line = _one_error(run_in_process(["run", "--resume", str(run), "--set", "train.epochs=7"],
                                         {**mpi_env(), "HPCDGNN_RUN_LOCK_WAIT": "0"}, REPO))
        assert "another job is training this run now" in line, line
        slow.send_signal(signal.SIGUSR1)
        out, err = slow.communicate(timeout=120)
    finally:
        slow.kill()
    assert slow.returncode in (0, 75), err
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", "train.epochs=7"])
    assert proc.returncode == 0, proc.stderr
    assert [r["epoch"] for r in read_metrics(run)] == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.mpi  # a training run (python -c, hpcdgnn.__main__)
def test_two_runs_started_at_once_with_one_checkpoint_dir(small_dataset, launcher, tmp_path):
    """Two new runs given one fresh checkpoint.dir both passed its check: one run's checkpoints were overwritten
    and pruned by the other, and embed read the other run's weights. The directory is now claimed atomically
    (its run_id, O_EXCL): the other run is played by a claim written between the check and the claim; it is
    refused in one line, its run directory gone, the other's claim kept. embed refuses another run's checkpoint."""
    from hpcdgnn.train.checkpoint import read_run_id

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    shared, out = tmp_path / "ck", tmp_path / "second"
    proc = _raced("check_checkpoint_dir", "    d.mkdir(parents=True)\n",
                  ["run", str(job), "--output", str(out), "--set", f"checkpoint.dir={shared}"])
    line = _one_error(proc)
    assert f"checkpoint.dir: {shared}: another run started with it at the same moment" in line, line
    assert not out.exists() and sorted(p.name for p in shared.iterdir()) == ["run_id"]
    assert read_run_id(shared) == "the-other-run"
    # a run's own checkpoint.dir holds its claim; a checkpoint of another run put there is not read by embed
    a, b = tmp_path / "A", tmp_path / "B"
    for run, ck in ((a, tmp_path / "ck-a"), (b, None)):
        proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(run),
                                   *(["--set", f"checkpoint.dir={ck}"] if ck else [])])
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ck-a" / "run_id").read_text() == f"{read_run_id(a)}\n{a.resolve()}\n"
    shutil.copytree(b / "checkpoints" / "epoch-000002", tmp_path / "ck-a" / "epoch-000003")
    for command in (["embed", str(a), "--output", str(tmp_path / "z.npz")],
                    ["export", str(a), "--model-only", str(tmp_path / "m.pt")]):
        line = _one_error(launcher.run(None, ["-m", "hpcdgnn", *command]))
        assert "was written by another run" in line and "epoch-000003" in line, (command, line)


@pytest.mark.mpi  # training runs (P = 1, in this process)
def test_a_checkpoint_dir_claimed_by_a_run_that_ended_is_taken(small_dataset, launcher, tmp_path):
    """A new run that ended before its first checkpoint (a crash, an OOM in epoch 1) left its claim on the
    checkpoint.dir, and the same job was then refused the directory. A claim whose run holds no lock (it ended)
    is taken over; one whose run trains now is refused, naming that run."""
    from hpcdgnn.train.checkpoint import read_run_id

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    ck = tmp_path / "ck"
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "A"), "--set",
                               f"checkpoint.dir={ck}"])
    assert proc.returncode == 0, proc.stderr
    shutil.rmtree(ck / "epoch-000001")  # as if A had ended before its first checkpoint
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, time\n"
                               f"fd = os.open({str(tmp_path / 'A' / 'run.lock')!r}, os.O_RDWR)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(300)\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # A trains (its lock held): B is refused
        line = _one_error(launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "B"),
                                              "--set", f"checkpoint.dir={ck}"]))
        assert f"checkpoint.dir: {ck} is claimed by the run in {(tmp_path / 'A').resolve()}, which trains now" \
            in line, line
        assert not (tmp_path / "B").exists()
    finally:
        holder.kill()
        holder.wait()
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "B"), "--set",
                               f"checkpoint.dir={ck}"])
    assert proc.returncode == 0, proc.stderr
    assert (ck / "run_id").read_text().splitlines()[0] == read_run_id(tmp_path / "B")
    assert sorted(p.name for p in ck.iterdir()) == ["epoch-000001", "run_id"]


def test_a_file_system_that_takes_no_lock_warns_and_trains(tmp_path, monkeypatch, caplog):
    """NFS's flock emulation answers EBADF (a read-only descriptor), Lustre without flock ENOSYS: the run goes on
    unguarded with a warning, not a traceback."""
    import errno
    import logging

    from hpcdgnn import run_lock
    from hpcdgnn.train import checkpoint

    def refused(fd, op):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(run_lock.fcntl, "flock", refused)
    monkeypatch.setattr(logging.getLogger("hpcdgnn"), "propagate", True)  # an earlier run in this process set it
    with caplog.at_level(logging.WARNING):
        checkpoint.hold_run(tmp_path, "--resume X")
    assert tmp_path.resolve() not in checkpoint._HELD
    assert "this file system takes no lock (Bad file descriptor)" in caplog.text, caplog.text


def test_a_resume_that_cannot_rewrite_metrics_is_one_line_and_keeps_them(tmp_path, monkeypatch):
    """A resume drops the re-run epochs' records through a temporary file: on a full disk that was a
    traceback, exit 1; now one line naming the file, the records as they were."""
    from hpcdgnn.errors import DataError
    from hpcdgnn.train.setup import truncate_metrics
    from tests.synced import full_disk

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"epoch": 1}\n{"epoch": 2}\n')
    full_disk(monkeypatch)
    with pytest.raises(DataError, match=r"^cannot write .*metrics\.jsonl: No space left on device \(a full disk\?\)$"):
        truncate_metrics(path, 1)
    assert path.read_text() == '{"epoch": 1}\n{"epoch": 2}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_the_run_files_a_resume_reads_reach_the_disk_before_their_names(tmp_path, monkeypatch):
    """config.resolved.yaml, plan.json and a resume's cut metrics.jsonl were renamed into place before their data
    reached the disk: after a node's crash they could be empty, and the requeued job's resume could not read its
    own run. Now each is synced before its rename and the run directory after it; a re-cut plan keeps the old one."""
    import json
    from types import SimpleNamespace

    from hpcdgnn.config.schema import JobConfig
    from hpcdgnn.train.setup import _save_run_files, truncate_metrics
    from tests.synced import SyncLog

    def plan(owner):
        data = {"kind": "snapshot", "owner": owner}
        return SimpleNamespace(to_json=lambda: data, save=lambda p: p.write_text(json.dumps(data, indent=1) + "\n"))

    log = SyncLog(monkeypatch)
    _save_run_files(tmp_path, JobConfig(), plan([0, 1]), 0, planner={"picked": "snapshot"})
    for name in ("config.resolved.yaml", "plan.json"):
        assert log.durable(tmp_path / name) == ""
    _save_run_files(tmp_path, JobConfig(), plan([1, 0]), 3)
    assert log.durable(tmp_path / "plan.json") == ""
    assert json.loads((tmp_path / "plan.json").read_text()) == {"kind": "snapshot", "owner": [1, 0],
                                                                 "planner": {"picked": "snapshot"}}
    assert json.loads((tmp_path / "plan.before-epoch-3.json").read_text())["owner"] == [0, 1]
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1}\n{"epoch": 2}\n')
    truncate_metrics(tmp_path / "metrics.jsonl", 1)
    assert log.durable(tmp_path / "metrics.jsonl") == ""
    assert (tmp_path / "metrics.jsonl").read_text() == '{"epoch": 1}\n'
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]


@pytest.mark.mpi  # training runs (python -m hpcdgnn in a singleton MPI process)
def test_a_run_stopped_while_writing_its_summary_is_completed_by_a_resume(small_dataset, tmp_path):
    """A job killed after its last checkpoint, while writing summary.json (its temporary, the attempt before's
    ``preempted`` summary left): the resume was refused ("already trained"), and the job scripts, which resume a
    run with a complete checkpoint, failed on it every time. Now the resume trains no epoch and writes the summary;
    a completed run is still refused. The killed write's temporary stayed in the run directory for ever (mkstemp's
    name is new each time); the resume removes it, and nothing of another name or shape."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    run = tmp_path / "run"
    proc = run_in_process(["run", str(job), "--output", str(run)], mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary, metrics = json.loads((run / "summary.json").read_text()), (run / "metrics.jsonl").read_text()
    (run / "summary.json").write_text(json.dumps({**summary, "status": "preempted", "final": {"epoch": 1}}))
    (run / ".summary.json.tmp-k1lled_x").write_text('{"job": ')  # as atomic_write names it
    users = [".summary.json.tmp-killed", ".summary.json.tmp-abcd1234.bak", ".notes.txt.tmp-abcd1234",
             "summary.json.tmp-abcd1234"]
    for name in users:
        (run / name).write_text("the user's\n")
    resume = ["run", "--resume", str(run)]
    proc = run_in_process(resume, mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "done: no epoch left after epoch 2, summary.json written" in proc.stdout + proc.stderr
    again = json.loads((run / "summary.json").read_text())
    assert again["status"] == "completed" and again["final"] == summary["final"] and again["epochs"] == 2
    assert (run / "metrics.jsonl").read_text() == metrics
    assert not (run / ".summary.json.tmp-k1lled_x").exists()
    assert all((run / name).read_text() == "the user's\n" for name in users)
    proc = run_in_process(resume, mpi_env(), tmp_path)
    assert proc.returncode == 2 and "the run has already trained 2 epochs" in proc.stderr, proc.stderr


@pytest.mark.mpi  # a training run (python -m hpcdgnn in a singleton MPI process)
def test_a_resume_of_a_run_killed_before_its_first_checkpoint_says_what_to_do(small_dataset, tmp_path):
    """A job killed while writing its first checkpoint leaves only ``epoch-000001.tmp``: the resume's line said
    "no complete checkpoint in DIR" and no more; now it says there is nothing to resume and how to start over."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    run = tmp_path / "run"
    assert run_in_process(["run", str(job), "--output", str(run)], mpi_env(), tmp_path).returncode == 0
    (run / "checkpoints" / "epoch-000001").rename(run / "checkpoints" / "epoch-000001.tmp")
    proc = run_in_process(["run", "--resume", str(run)], mpi_env(), tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr == (f"hpcdgnn: error: --resume {run}: no complete checkpoint in {run / 'checkpoints'} (the run "
                           "stopped before its first was written: nothing to resume; train the job again into another "
                           f"run directory, or after removing {run})\n")


def test_an_interrupt_as_another_job_lets_go_of_run_lock_stops_as_it_was_told(tmp_path, monkeypatch, capsys):
    """A library caller's interrupt during the wait for another job's ``run.lock`` is acknowledged as "stopping
    now, …; nothing was changed". One that came as that job let go (between the wait's last look at the flag and
    taking the lock) was told so too, but the run took the lock and went on into its set-up."""
    import os
    import signal
    import time

    from hpcdgnn import preemption, run_lock
    from hpcdgnn.errors import StoppedError
    from hpcdgnn.train import checkpoint

    tries = []

    def lock(path):
        tries.append(path)
        if len(tries) == 1:
            return None  # another job holds it: the wait begins
        os.kill(os.getpid(), signal.SIGINT)  # the caller's Ctrl-C as that job lets go
        deadline = time.monotonic() + 10
        while not preemption.requested() and time.monotonic() < deadline:  # the handler has run
            time.sleep(0.01)
        return run_lock._lock(path)

    monkeypatch.setattr(checkpoint, "_lock", lock)
    monkeypatch.setenv("HPCDGNN_RUN_LOCK_WAIT", "60")
    preemption.reset()
    preemption.install()
    try:
        with pytest.raises(StoppedError, match=r"^resume=X: stopped by a signal while waiting for another job"):
            checkpoint.hold_run(tmp_path, "resume=X")
    finally:
        preemption.reset()
        checkpoint.release_runs(tmp_path)
    assert len(tries) == 2
    assert "hpcdgnn: interrupted: stopping now, while waiting for another job" in capsys.readouterr().err
    assert run_lock.run_alive(tmp_path) is False  # let go again
