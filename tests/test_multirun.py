"""The harness's ``Launcher.run_many`` (tests/multirun.py): one launch, one finished process per command — a
refused command's status and line, the next command still run, each command's output its own."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import read_metrics, run_launched, write_job


def test_commands_of_one_launch_keep_their_own_status_and_output(launcher, small_dataset, tmp_path):
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    bad, good = launcher.run_many(2, [["run", str(job), "--output", str(tmp_path / "bad"), "--set", "model.hiden=3"],
                                      ["run", str(job), "--output", str(tmp_path / "good")]])
    assert bad.returncode == 2 and "model.hiden: unknown option" in bad.stderr and "epoch" not in bad.stdout
    assert good.returncode == 0, good.stderr
    assert good.stdout.count("done: 2 epochs") == 1 and "hiden" not in good.stderr  # rank 0 logs; its own lines
    assert len(read_metrics(tmp_path / "good")) == 2 and not (tmp_path / "bad").exists()


def test_a_launch_past_its_timeout_is_killed_whole_and_shows_its_output(tmp_path):
    """``run_launched``: a command that outlives its timeout raises ``TimeoutExpired`` (what hang tests catch)
    whose message carries the output so far, and the processes it started (here a background sleep, as a
    launcher's ranks) are killed with it."""
    pidfile = tmp_path / "pid"
    script = f"sleep 300 & echo $! > {pidfile}; echo rank-0-got-here; wait"
    with pytest.raises(subprocess.TimeoutExpired) as err:
        run_launched(["sh", "-c", script], timeout=2)
    assert "rank-0-got-here" in str(err.value)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # gone, or a zombie waiting for its new parent to reap it
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the launch's background process {pid} outlived the timeout")
