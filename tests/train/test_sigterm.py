"""SIGTERM / SIGINT to the launcher of a 3-rank job (hpcdgnn-mpirun over the real mpirun): exit 75, a complete
checkpoint, the last epoch lines and the resume hint on stdout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hpcdgnn.errors import EXIT_PREEMPTED
from hpcdgnn.train.checkpoint import latest_checkpoint
from tests.conftest import REPO, mpi_env, read_metrics, write_job


@pytest.mark.mpi  # hpcdgnn-mpirun -np 3
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_launcher_checkpoints_and_exits_75(tmp_path, small_dataset, sig):
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"}, train={"epochs": 100000})
    run = tmp_path / "run"
    env = mpi_env()
    for var in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        env.pop(var)  # the launcher adds what this machine needs
    proc = subprocess.Popen([sys.executable, "-m", "hpcdgnn.launch", "-np", "3", sys.executable, "-m", "hpcdgnn",
                             "run", str(job), "--output", str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = run / "metrics.jsonl"
            if m.is_file() and len(m.read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, (proc.returncode, err[-3000:])
    ckpt = latest_checkpoint(run / "checkpoints")
    assert ckpt is not None and (ckpt / "COMPLETE").is_file()
    stopped = int(ckpt.name.split("-")[1])
    assert [r["epoch"] for r in read_metrics(run)] == list(range(1, stopped + 1))
    assert f"pre-empted ({sig.name}, passed on by hpcdgnn-mpirun as SIGUSR1)" in out  # what was sent, and how
    assert f"resume with --resume {run}" in out
    assert f"epoch {stopped:4d}" in out  # the last epoch's line was not lost


_HELD = """
import os, signal, sys, time
from hpcdgnn import preemption
if sys.argv[1] == "start":
    if sys.argv[2] == "hold":
        preemption.hold()
    os.kill(os.getpid(), signal.SIGUSR1)  # the scheduler's warning, before any handler
    os.execv(sys.executable, [sys.executable, "-c", sys.argv[3], "after-exec", "-", sys.argv[3]])
flag = preemption.install()
for _ in range(100):
    if flag.raised:
        break
    time.sleep(0.01)
print(flag.raised, flag.name)
"""


@pytest.mark.parametrize("held", [True, False])
def test_a_signal_before_the_handlers_waits_for_them(held):
    """``run`` installs its handlers only after seconds of imports; a stop signal sent meanwhile, held by
    :func:`hpcdgnn.preemption.hold`, reaches the handler once installed (exit 75 at the next epoch boundary)
    instead of killing the rank (exit 138 through mpirun), even across an exec (a wrapper that execs python
    keeps the mask). Unheld, it kills."""
    proc = subprocess.run([sys.executable, "-c", _HELD, "start", "hold" if held else "no", _HELD],
                          capture_output=True, text=True, timeout=60)
    if held:
        assert proc.returncode == 0 and proc.stdout.split() == ["True", "SIGUSR1"], proc.stdout + proc.stderr
    else:
        assert proc.returncode == -signal.SIGUSR1, proc.stdout + proc.stderr


def test_a_signal_during_the_set_up_stops_before_the_first_epoch(launcher, tmp_path, small_dataset):
    """SIGUSR1 on rank 1 of 3 before its set-up (tests/mpi/preempted_in_setup.py): every rank stops right
    after the set-up — no epoch, no checkpoint — and the job exits 75 with a hint to run it again (before,
    the ranks noticed only at the end of epoch 1: within a scheduler's grace period there may be no time
    for a whole epoch)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 3})
    run = tmp_path / "run"
    proc = launcher.run(3, [str(REPO / "tests" / "mpi" / "preempted_in_setup.py"), "1", "--", "run", str(job),
                            "--output", str(run)])
    assert proc.returncode == EXIT_PREEMPTED, proc.stdout + proc.stderr
    assert ("pre-empted (a signal to another rank) during the set-up, before any epoch; no checkpoint yet: run the"
            f" job again with another --output, or after removing {run}" in proc.stdout)
    assert read_metrics(run) == []
    assert latest_checkpoint(run / "checkpoints") is None
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "preempted" and summary["epochs"] == 0


@pytest.mark.mpi  # hpcdgnn-mpirun -np 2
def test_a_stop_while_a_new_run_waits_for_its_lock_is_a_clean_pre_emption(tmp_path, small_dataset):
    """A new run whose rank 0 waits for its run directory's run.lock (another process holds it: a probe of the same
    RUNDIR) when a SIGTERM comes: it said "hpcdgnn: error: --output RUNDIR: stopped by a signal while waiting ...;
    nothing was changed: resume once that job has ended" — no checkpoint to resume, and its claim (run_id) left in
    RUNDIR, which a new run then refused. Now the run's own pre-emption line for a stop in its set-up, exit 75, and
    nothing of the run is left: the same command can run again."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    run = tmp_path / "run"
    env = mpi_env()
    for var in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        env.pop(var)  # the launcher adds what this machine needs
    env.update(HPCDGNN_RUN_LOCK_WAIT="60", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "hpcdgnn.launch", "-np", "2", sys.executable,
                             str(REPO / "tests" / "mpi" / "new_run_waits_for_its_lock.py"), "--", "run", str(job),
                             "--output", str(run)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=REPO, start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "another job holds" in line:
                break
        proc.send_signal(signal.SIGTERM)
        out = "".join(lines) + proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == EXIT_PREEMPTED, out
    assert ("pre-empted (SIGTERM, passed on by hpcdgnn-mpirun as SIGUSR1) during the set-up, before any epoch, while "
            f"it waited for another job to let go of {run / 'run.lock'}; nothing of the run is left: run the job "
            "again") in out, out
    assert "error" not in out and "Traceback" not in out, out
    assert not run.exists()  # the same --output is a new run's again


@pytest.mark.mpi  # a training run (P = 1)
def test_a_signal_during_the_last_epoch_completes_the_run(tmp_path, small_dataset):
    """The last epoch (one batch: it runs to its end) ends after the signal: the run is complete — exit 0, status
    completed, the final checkpoint — not pre-empted with nothing left to resume (a resume was refused, exit 2, and
    a job script's requeue then failed)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2},
                    debug={"delay_rank": 0, "delay_seconds": 0.5})  # epoch 2 lasts seconds: the signal lands in it
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    try:
        _until_epochs(run, proc, 1)
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, (proc.returncode, out, err)
    assert "a stop signal (SIGUSR1) came during the last epoch, which ended first" in out, out
    assert [r["epoch"] for r in read_metrics(run)] == [1, 2] and "pre-empted" not in out
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert latest_checkpoint(run / "checkpoints").name == "epoch-000002"


def _until_epochs(run, proc, n: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        m = run / "metrics.jsonl"
        if m.is_file() and len(m.read_text().splitlines()) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"no {n} epochs in {run}: {proc.poll()}")


@pytest.mark.mpi  # a training run (P = 1), or hpcdgnn-mpirun -np 2
@pytest.mark.parametrize(("sig", "ranks"), [(signal.SIGINT, 1), (signal.SIGTERM, 2)])
def test_a_second_signal_stops_at_once_with_its_own_code(tmp_path, small_dataset, sig, ranks):
    """The first signal asks for a checkpoint at the epoch boundary; a second one, before it, stops the run at once
    with 128 + n (130, 143), not a crash's 1, and says so; the newest checkpoint stays. Each epoch sleeps 2 s
    (debug.delay_seconds) so the second signal lands inside it. P = 1: the rank's own handler; P = 2: through
    hpcdgnn-mpirun, whose mpirun would say 1."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1000},
                    checkpoint={"every": 1}, debug={"delay_rank": 0, "delay_seconds": 2.0})
    env = mpi_env()
    for var in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"):
        env.pop(var)  # the launcher adds what this machine needs
    launch = [] if ranks == 1 else [sys.executable, "-m", "hpcdgnn.launch", "-np", str(ranks)]
    run = tmp_path / "run"
    proc = subprocess.Popen([*launch, sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(run)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        _until_epochs(run, proc, 1)
        proc.send_signal(sig)
        time.sleep(0.5)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, (proc.returncode, err[-3000:])
    assert f"{sig.name} again" in err, err[-2000:]
    assert latest_checkpoint(run / "checkpoints") is not None  # epoch 1's, untouched


@pytest.mark.mpi  # hpcdgnn-mpirun -np 2
def test_a_stop_signal_after_the_run_is_done_is_no_failure(tmp_path, small_dataset):
    """A SIGTERM to the launcher (relayed as SIGUSR1: a scheduler's early warning, too) once the run had printed
    "done:" killed the ranks in their interpreter's shutdown (Python puts the default handler back, and
    SIGUSR1's default ends the process): a completed run's job exited 138. The work is done: exit 0."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "hpcdgnn.launch", "-np", "2", sys.executable, "-m", "hpcdgnn",
                             "run", str(job), "--output", str(run)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=mpi_env())
    try:
        for line in proc.stdout:
            if line.startswith("done:"):
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_a_run_called_in_process_leaves_sigusr1_as_it_was(tmp_path, small_dataset):
    """The ignore set once a command's work is done is for its own interpreter's exit: main() called in-process
    (a script, the tests) goes on, and every later child process inherited the ignore (an unheld SIGUSR1 then
    failed to end a test's subprocess, by test order)."""
    from hpcdgnn.__main__ import main
    from tests.conftest import run_in_process

    before = signal.getsignal(signal.SIGUSR1)
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    proc = run_in_process(["run", str(job), "--output", str(tmp_path / "run")], mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert main(["embed", str(tmp_path / "run"), "--output", str(tmp_path / "z.npz")]) == 0  # no harness around it
    assert signal.getsignal(signal.SIGUSR1) == before != signal.SIG_IGN
