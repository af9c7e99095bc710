"""The stall watchdog (comm.stall_timeout_s) under a real mpirun: SIGSTOP on one rank of three ends the job."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from hpcdgnn.comm.watchdog import _culprits
from hpcdgnn.errors import EXIT_STALLED
from tests.conftest import mpi_env, write_job


def _rank_pids(marker: str) -> dict[int, int]:
    """{MPI rank: pid} of the processes whose command line contains ``marker``."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in cmd and "hpcdgnn" in cmd:
            for item in env:
                if item.startswith((b"OMPI_COMM_WORLD_RANK=", b"PMI_RANK=")):
                    found[int(item.split(b"=", 1)[1])] = int(d.name)
    return found


def test_sigstop_on_one_rank_ends_the_job_naming_it(launcher, tmp_path, small_dataset):
    timeout = 4.0
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"}, train={"epochs": 100000},
                    comm={"stall_timeout_s": timeout})
    run = tmp_path / "run-stall"
    proc = subprocess.Popen(launcher.command(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    stopped = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # training under way
            m = run / "metrics.jsonl"
            if m.is_file() and len(m.read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        pids = _rank_pids(str(run))
        assert set(pids) == {0, 1, 2}, pids
        stopped = pids[2]
        os.kill(stopped, signal.SIGSTOP)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=timeout + 30)
        elapsed = time.monotonic() - t0
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)
                os.kill(stopped, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
    # Hydra (MPICH) reports the status it collects first after MPI_Abort: the code, or the stopped rank's SIGKILL
    hydra = () if launcher.open_mpi else (signal.SIGKILL,)
    assert proc.returncode in (EXIT_STALLED, *hydra), (proc.returncode, err[-2000:])
    assert elapsed < timeout + 10, f"the job took {elapsed:.1f}s to end after the stall"
    lines = [line for line in err.splitlines() if "hpcdgnn: error: stalled:" in line]
    assert lines and "rank 2 (" in lines[0] and "collective" in lines[0], err[-2000:]
    assert "not heard from" in lines[0]
    # the stopped rank, woken to be torn down, blamed rank 0 for the silence of its own freeze
    assert all("stalled: rank 2 (" in line for line in lines), lines


def test_watchdog_quiet_on_a_healthy_run(launcher, tmp_path, small_dataset):
    """A short timeout does not fire on a run that progresses, and the run ends normally (threads joined)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 30}, comm={"stall_timeout_s": 3.0})
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "stalled" not in proc.stderr


def _st(current: str, idle: float) -> dict:
    return {"completed": 7, "current": current, "in_call": idle if current else 0.0, "idle": idle}


def test_the_culprit_is_the_stopped_rank_not_the_one_waiting_for_it():
    """Which ranks the watchdog names, from (seconds since the last beat, progress): rank 0 waiting in a halo
    exchange passes the 4 s timeout while rank 2, stopped inside the previous exchange, has been silent 3.5 s
    (two 1 s beats missed, not yet the timeout): rank 2 is named (the race the mpirun test above can hit)."""
    race = {0: (0.0, _st("time_halo.bwd", 4.1)), 1: (0.3, _st("time_halo.fwd", 3.0)),
            2: (3.5, _st("time_halo.fwd", 3.5))}
    assert _culprits(race, 4.0, 2.0) == [2]
    # nobody past the timeout: nobody named, however long a beat is late
    assert _culprits({0: (0.0, _st("a", 1.0)), 1: (3.9, _st("a", 3.9))}, 4.0, 2.0) == []
    # silence past the timeout first, then a stalled rank computing, then every stalled rank (all waiting)
    assert _culprits({0: (0.0, _st("", 5.0)), 1: (4.5, _st("a", 4.5))}, 4.0, 2.0) == [1]
    assert _culprits({0: (0.0, _st("a", 5.0)), 1: (0.2, _st("", 4.5)), 2: (0.1, _st("a", 4.4))}, 4.0, 2.0) == [1]
    assert _culprits({0: (0.0, _st("a", 5.0)), 1: (0.2, _st("b", 4.5)), 2: (0.1, _st("a", 1.0))}, 4.0, 2.0) == [0, 1]


def test_the_culprit_is_the_straggler_computing_not_the_ranks_waiting_for_it():
    """A rank computing (``debug.delay_rank``, a loop that never ends) left the last collective a moment after the
    ranks now waiting for it in the next one, so they pass the 4 s timeout first: it is named, not rank 0 waiting
    in 'redistribute.bwd' (which the check named while the straggler's idle time was still 3.99 s)."""
    race = {0: (0.0, _st("redistribute.bwd", 4.01)), 1: (0.4, _st("", 3.99))}
    assert _culprits(race, 4.0, 2.0) == [1]
    three = {0: (0.0, _st("halo.fwd", 4.01)), 1: (0.2, _st("halo.fwd", 4.0)), 2: (0.9, _st("", 3.98))}
    assert _culprits(three, 4.0, 2.0) == [2]
    # a rank that computes between collectives as usual (progress 0.5 s ago) takes no blame from ranks stalled in one
    assert _culprits({0: (0.0, _st("a", 4.1)), 1: (0.2, _st("", 0.5))}, 4.0, 2.0) == [0]
