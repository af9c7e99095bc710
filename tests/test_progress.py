"""Progress of long work (hpcdgnn/progress.py): a bar on a terminal (a pseudo-terminal here), plain periodic lines
without carriage returns in a log, nothing for short work; wired into generate/prepare, the shard check and
epochs of mini-batches."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from hpcdgnn.errors import ConfigError
from hpcdgnn.progress import Progress, default_seconds
from tests.conftest import REPO, mpi_env, run_in_process, write_job


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _work(progress: Progress, units: int, pause: float) -> None:
    with progress:
        for _ in range(units):
            time.sleep(pause)
            progress.update()


def test_a_log_gets_plain_periodic_lines_and_the_final_count():
    log = io.StringIO()
    _work(Progress("prepare x: snapshots written", 8, seconds=0.02, stream=log), 8, 0.012)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and 2 <= len(lines) <= 8, lines
    assert all(ln.startswith("prepare x: snapshots written: ") for ln in lines)
    assert lines[-1].startswith("prepare x: snapshots written: 8/8 (100 %)") and lines[-1].endswith("(done)")


def test_short_work_and_zero_seconds_print_nothing():
    log = io.StringIO()
    _work(Progress("quick", 100, seconds=30, stream=log), 100, 0)
    _work(Progress("off", 5, seconds=0, stream=_Tty()), 5, 0.001)
    assert log.getvalue() == ""


def test_a_terminal_gets_one_redrawn_bar():
    tty = _Tty()
    _work(Progress("generate g", 12, seconds=0.01, stream=tty), 12, 0.11)
    text = tty.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and text.count("\r") >= 2
    assert text.rstrip("\n").rsplit("\r", 1)[1].startswith("[" + "#" * 30 + "] generate g: 12/12 (100 %)")


def test_a_bad_period_is_one_line(monkeypatch):
    monkeypatch.setenv("HPCDGNN_PROGRESS_SECONDS", "soon")
    with pytest.raises(ConfigError, match="HPCDGNN_PROGRESS_SECONDS: 'soon'"):
        default_seconds()


def _generate(out, stderr_fd: int | None):
    env = dict(os.environ, HPCDGNN_PROGRESS_SECONDS="0.001")
    cmd = [sys.executable, "-m", "hpcdgnn", "generate", "--output", str(out), "--vertices", "3000", "--snapshots",
           "40", "--density", "2", "--seed", "1"]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=stderr_fd if stderr_fd is not None else subprocess.PIPE)


def test_generate_draws_a_bar_on_a_pseudo_terminal_and_lines_in_a_pipe(tmp_path):
    master, slave = pty.openpty()
    proc = _generate(tmp_path / "tty", slave)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=60) == 0
    os.close(master)
    text = seen.decode()
    assert "\r[" in text and "snapshots written: 40/40 (100 %)" in text, text[-500:]

    piped = _generate(tmp_path / "pipe", None)
    _, err = piped.communicate(timeout=60)
    assert piped.returncode == 0
    lines = err.decode().splitlines()
    assert "\r" not in err.decode() and len(lines) >= 2, lines
    assert "snapshots written: 40/40 (100 %)" in lines[-1] and lines[-1].endswith("(done)"), lines[-3:]


def test_an_epoch_of_mini_batches_reports_them(tmp_path, small_dataset):
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1},
                    strategy={"name": "sequences", "window": 3, "stride": 1, "batch_vertices": 4},
                    output={"progress_seconds": 0.000001})
    proc = run_in_process(["run", str(job), "--output", str(tmp_path / "run")], mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("epoch 1: batches trained: ")]
    assert len(lines) >= 2 and lines[-1].endswith("(done)"), proc.stderr[-2000:]
    assert "epoch    1  loss" in proc.stdout  # the epoch line stays on stdout
