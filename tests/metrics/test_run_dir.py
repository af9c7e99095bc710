"""``choose_run_dir``: where a run writes; a previous run, a file or an impossible place is one line."""

from __future__ import annotations

import pytest

from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics import choose_run_dir


def test_run_directory_refusals_are_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "metrics.jsonl").write_text("{}\n")
    for output, says in [("", "--output: an empty path"), (" ", "--output: an empty path"),
                         (str(tmp_path / "afile"), "is a file"),
                         (str(tmp_path / "used"), "directory exists and is not empty"),
                         (str(tmp_path / "afile" / "run"), "cannot create the run directory")]:
        with pytest.raises(ConfigError, match=says):
            choose_run_dir(output, str(tmp_path / "runs"), "job")
    with pytest.raises(ConfigError, match="output.dir: .*afile: cannot create the run directory"):
        choose_run_dir(None, str(tmp_path / "afile"), "job")  # a parent that is a file: refused, not retried
    assert (tmp_path / "used" / "metrics.jsonl").read_text() == "{}\n"
    first = choose_run_dir(None, str(tmp_path / "runs"), "job")
    second = choose_run_dir(None, str(tmp_path / "runs"), "job")  # the same second: a new name, never the same
    assert first != second and first.is_dir() and second.is_dir()
    assert choose_run_dir(str(tmp_path / "new" / "run"), "unused", "job").is_dir()


def test_an_output_dir_that_cannot_be_made_is_blamed_on_the_file_or_the_set(tmp_path, small_dataset):
    """``output.dir`` under a file: one line naming the job file's key, or the ``--set`` that gave it."""
    from tests.conftest import mpi_env, run_in_process, write_job

    (tmp_path / "afile").write_text("x")
    job = write_job(tmp_path / "job.yaml", small_dataset, output={"dir": str(tmp_path / "afile" / "runs")})
    for args, head in ((["run", str(job)], f"{job}: output.dir: {tmp_path / 'afile' / 'runs'}: cannot create"),
                       (["run", str(job), "--set", f"output.dir={tmp_path / 'afile'}"],
                        f"--set output.dir: {tmp_path / 'afile'}: cannot create")):
        proc = run_in_process(args, mpi_env(), tmp_path)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"hpcdgnn: error: {head}"), lines


def test_an_output_directory_another_run_makes_meanwhile_is_not_ours(tmp_path, monkeypatch):
    """--output names a directory that another run creates between our exists() and mkdir(): no plain OS error;
    the directory is not recorded as ours (a refusal must not remove it), and claim_run_dir then decides."""
    import pathlib

    from hpcdgnn.metrics.results import MADE_RUN_DIRS, choose_run_dir

    target = tmp_path / "out"
    real_mkdir = pathlib.Path.mkdir

    def raced(self, *args, **kwargs):
        if self == target:
            real_mkdir(self)  # the other run wins
            raise FileExistsError(17, "File exists", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", raced)
    assert choose_run_dir(str(target), "runs", "job") == target
    assert target.is_dir() and target.resolve() not in MADE_RUN_DIRS


def test_a_run_file_a_full_disk_refuses_is_one_line_naming_it(tmp_path, monkeypatch):
    """metrics.jsonl on a full disk (/dev/full answers every write with ENOSPC) was a traceback, exit 1: now the
    one-line DataError (exit 2) naming the file and the reason; summary.json likewise, its temporary file gone."""
    from hpcdgnn.errors import DataError
    from hpcdgnn.metrics.results import RunDirectory
    from tests.synced import full_disk

    rd = RunDirectory(tmp_path)
    rd._metrics.close()
    rd._metrics = open("/dev/full", "a", buffering=1)  # noqa: SIM115 (closed by rd.close)
    with pytest.raises(DataError) as e:
        rd.append_epoch({"epoch": 1, "loss": 0.5})
    assert str(e.value) == f"cannot write {tmp_path / 'metrics.jsonl'}: No space left on device (a full disk?)"
    rd._metrics = open(tmp_path / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
    full_disk(monkeypatch)
    with pytest.raises(DataError, match=r"^cannot write .*summary\.json: No space left on device \(a full disk\?\)$"):
        rd.save_summary({"status": "completed"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]  # no summary.json, no temporary
    rd.close()


def test_summary_json_reaches_the_disk_before_its_name(tmp_path, monkeypatch):
    """Renamed into place before its data reached the disk, summary.json could be empty after a node's crash (a
    resume reads it to tell a finished run from one stopped before its summary): synced first."""
    from hpcdgnn.metrics.results import RunDirectory
    from tests.synced import SyncLog

    rd = RunDirectory(tmp_path)
    log = SyncLog(monkeypatch)
    rd.save_summary({"status": "completed"})
    rd.close()
    assert log.durable(tmp_path / "summary.json") == ""


def test_a_run_directory_it_cannot_write_is_one_line(tmp_path, monkeypatch):
    """--output naming an existing empty directory on a read-only file system: claiming it (run_id) was a
    traceback, exit 1; now one line naming the file."""
    import errno
    import os

    from hpcdgnn.errors import DataError
    from hpcdgnn.train import checkpoint

    def read_only(path, *args, **kw):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(checkpoint.os, "open", read_only)
    with pytest.raises(DataError) as e:
        checkpoint.claim_run_dir(tmp_path)
    assert str(e.value) == f"cannot write {tmp_path / 'run_id'}: Read-only file system"


def test_a_metrics_file_that_cannot_be_opened_is_one_line(tmp_path):
    """Opening ``metrics.jsonl`` (no inode left, a read-only file system, a directory in its place) was a
    traceback, exit 1; now the one-line DataError naming it."""
    from hpcdgnn.errors import DataError
    from hpcdgnn.metrics.results import RunDirectory

    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(DataError, match=r"^cannot write .*metrics\.jsonl: Is a directory$"):
        RunDirectory(tmp_path)


def test_a_run_file_over_the_file_size_limit_says_so(tmp_path):
    """A batch system's file size limit (``ulimit -f``, EFBIG) cut metrics.jsonl with a bare "File too large";
    the line now names the limit, as a full disk's names the disk."""
    import errno
    import os

    from hpcdgnn.errors import DataError
    from hpcdgnn.metrics.results import writing

    with pytest.raises(DataError) as e, writing(tmp_path / "metrics.jsonl"):
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
    assert str(e.value) == (f"cannot write {tmp_path / 'metrics.jsonl'}: File too large "
                            "(over this process's file size limit, ulimit -f?)")


def test_a_discarded_new_run_leaves_none_of_the_parents_it_made(tmp_path):
    """A new run given ``--output a/b/run`` (a and b missing) and undone before its first epoch — refused after its
    claim, or stopped while it waited for its run.lock ("nothing of the run is left") — removed ``run`` but left the
    empty ``a/b`` that its creation made. Now those go too; a parent that was there before, or that holds something
    else by then, stays."""
    from types import SimpleNamespace

    from hpcdgnn.train.checkpoint import claim_run_dir
    from hpcdgnn.train.setup import _discard_new_run

    job = SimpleNamespace(checkpoint=SimpleNamespace(dir=None))
    (tmp_path / "kept").mkdir()
    run = choose_run_dir(str(tmp_path / "kept" / "a" / "b" / "run"), "unused", "job")
    assert claim_run_dir(run)
    _discard_new_run(run, job)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept"]

    run = choose_run_dir(str(tmp_path / "kept" / "a" / "b" / "run"), "unused", "job")
    (tmp_path / "kept" / "a" / "other").write_text("another's")  # made since, beside the run's parent
    _discard_new_run(run, job)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["kept", "kept/a", "kept/a/other"]

    user = tmp_path / "users"  # --output naming a directory the user made: it stays, as its parents
    user.mkdir()
    _discard_new_run(choose_run_dir(str(user), "unused", "job"), job)
    assert user.is_dir()
