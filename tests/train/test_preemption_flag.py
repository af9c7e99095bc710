"""The pre-emption flag's escalation (hpcdgnn/preemption.py): only a repeated SIGINT/SIGTERM stops at once; a
scheduler's SIGUSR1 warning followed by its SIGTERM must still checkpoint (the repeat itself: test_sigterm.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from hpcdgnn.preemption import PreemptionFlag


@pytest.mark.parametrize("first", [signal.SIGUSR1])
@pytest.mark.parametrize("then", [signal.SIGTERM, signal.SIGINT])
def test_a_warning_then_the_schedulers_signal_is_still_a_preemption(first, then):
    flag = PreemptionFlag(at_once=True)
    flag.handle(first, None)
    flag.handle(then, None)  # os._exit here would end this test process
    assert flag.raised and flag.name == then.name


def test_a_library_callers_second_interrupt_raises_keyboard_interrupt():
    flag = PreemptionFlag(at_once=False)
    flag.handle(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        flag.handle(signal.SIGINT, None)
    flag = PreemptionFlag(at_once=False)
    flag.handle(signal.SIGTERM, None)
    flag.handle(signal.SIGTERM, None)  # recorded, nothing else
    assert flag.name == "SIGTERM"


def test_a_run_names_what_hpcdgnn_mpirun_passed_on_as_sigusr1(tmp_path, monkeypatch, capfd):
    """The launcher writes the SIGTERM/SIGINT it turns into SIGUSR1 into the file its job's environment names; a
    SIGUSR1 it did not make (a scheduler's warning: the file empty), a signal the rank got itself, and a rank
    without the file (another node, another launcher) keep the signal's own name. A stopped embed's line on several
    ranks names it so too."""
    from hpcdgnn.preemption import RELAYED_VAR

    note = tmp_path / "note"
    note.write_text("")
    monkeypatch.setenv(RELAYED_VAR, str(note))
    flag = PreemptionFlag(at_once=True)
    assert flag.describe() == ""
    flag.handle(signal.SIGUSR1, None)
    assert flag.describe() == "SIGUSR1"
    note.write_text("SIGTERM")
    assert flag.describe() == "SIGTERM, passed on by hpcdgnn-mpirun as SIGUSR1"
    note.write_text("SIGINT")
    assert flag.describe() == "SIGINT, passed on by hpcdgnn-mpirun as SIGUSR1"
    note.write_text("SIGTERM job-script")  # a job script's (jobs/lib.sh), as hpcdgnn-mpirun copies it too
    assert flag.describe() == "SIGTERM, passed on by the job script as SIGUSR1"
    from hpcdgnn.__main__ import _JobStop

    stop = object.__new__(_JobStop)  # its line alone (the watch itself runs under mpirun: tests/test_cli_mpirun.py)
    stop.command = "embed"
    stop._say(signal.SIGUSR1)
    assert capfd.readouterr().err == ("hpcdgnn: embed: stopped by SIGTERM, passed on by the job script as SIGUSR1; "
                                      "nothing it was writing is left\n")
    note.write_text("SIGTERM someone")  # nobody this knows
    assert flag.describe() == "SIGUSR1"
    direct = PreemptionFlag(at_once=True)
    direct.handle(signal.SIGTERM, None)
    assert direct.describe() == "SIGTERM"
    note.unlink()
    assert flag.describe() == "SIGUSR1"
    monkeypatch.delenv(RELAYED_VAR)
    note.write_text("SIGTERM")
    assert flag.describe() == "SIGUSR1"


@pytest.mark.parametrize("settled", [False, True])
def test_a_second_signal_after_the_clean_stop_keeps_its_75(settled):
    """A second Ctrl-C once the run had stopped cleanly (checkpoint and summary.json written, the process exiting)
    ended it with 130 and "no checkpoint of this epoch", though that checkpoint was written: a wrapper requeueing
    on 75 left the run stopped. After :meth:`PreemptionFlag.settle` it is 75; before, still 130."""
    code = ("import os, signal\nfrom hpcdgnn.preemption import PreemptionFlag\nflag = PreemptionFlag(at_once=True)\n"
            "flag.handle(signal.SIGINT, None)\n" + ("flag.settle()\n" if settled else "")
            + "flag.handle(signal.SIGINT, None)\nos._exit(9)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if settled:
        assert proc.returncode == 75, proc.stderr
        assert "SIGINT again: the run had stopped with its checkpoint and summary.json written: exit 75" in proc.stderr
        assert "no checkpoint" not in proc.stderr, proc.stderr
    else:
        assert proc.returncode == 130 and "no checkpoint of this epoch" in proc.stderr, proc.stderr


def test_a_relay_path_that_is_not_the_relays_own_file_is_not_read(tmp_path, monkeypatch):
    """On another node than hpcdgnn-mpirun's, ``/proc/PID/fd/N`` is some other process's file, or none: a regular
    file there that said "SIGTERM" was read as the launcher's relay, and a stat/open of one on a hung NFS mount
    would have blocked the rank in its stop. Only a link showing the relay's own name for this launch
    (RELAYED_NAME_VAR) is read; anything else is left untouched."""
    from hpcdgnn.preemption import RELAYED_NAME_VAR, RELAYED_VAR, relayed

    other = tmp_path / "someone-elses"
    other.write_text("SIGTERM")
    with other.open() as f, subprocess.Popen(["sleep", "60"], stdin=f) as holder:  # PID reused by a stranger
        try:
            path = f"/proc/{holder.pid}/fd/0"
            monkeypatch.setenv(RELAYED_VAR, path)
            monkeypatch.setenv(RELAYED_NAME_VAR, "/memfd:hpcdgnn-mpirun-signal-0123456789abcdef (deleted)")
            flag = PreemptionFlag(at_once=True)
            flag.handle(signal.SIGUSR1, None)
            assert relayed() is None and flag.describe() == "SIGUSR1"
            monkeypatch.setenv(RELAYED_NAME_VAR, "")  # no name: a /proc path is never read
            assert relayed() is None
            monkeypatch.setenv(RELAYED_NAME_VAR, str(other))  # the relay's own (its link shows that)
            assert relayed() == ("SIGTERM", "")

            def untouched(*args, **kwargs):
                raise AssertionError(f"touched {args[0]}")

            monkeypatch.setenv(RELAYED_NAME_VAR, "/memfd:hpcdgnn-mpirun-signal-0123456789abcdef (deleted)")
            monkeypatch.setattr("os.open", untouched)
            monkeypatch.setattr("os.stat", untouched)
            assert relayed() is None  # nothing of a stranger's file is opened or stat'ed
        finally:
            holder.kill()


def test_a_relay_path_that_names_a_fifo_or_terminal_is_not_read(tmp_path):
    """A named relay file (no memfd) that is a FIFO when the rank looks is opened without waiting and left."""
    from hpcdgnn.preemption import relayed

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert relayed(str(fifo)) is None


_SETTLED_SCRIPT = """
import signal, sys, time
from pathlib import Path
from hpcdgnn import preemption
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.metrics import results
from hpcdgnn.train import trainer

comm, run = Communicator(), Path(sys.argv[2])
save, epoch = results.RunDirectory.save_summary, trainer.train_epoch

def slow_save(self, summary):  # rank 0's file system, slow to write summary.json
    time.sleep(3)
    save(self, summary)

def stopped_epoch(*a, **k):  # a SIGTERM during the first epoch
    preemption._FLAG.handle(signal.SIGTERM, None)
    return epoch(*a, **k)

seen = []
results.RunDirectory.save_summary = slow_save
trainer.train_epoch = stopped_epoch
preemption.PreemptionFlag.settle = lambda self: seen.append((run / "summary.json").is_file())
res = trainer.run_training(sys.argv[1], [], sys.argv[2], comm)
print(f"RESULT rank {comm.rank} preempted {res.preempted} settled with summary.json {seen}", flush=True)
"""


@pytest.mark.mpi
def test_no_rank_settles_before_rank_0_wrote_summary_json(small_dataset, tmp_path, launcher):
    """At P = 2 rank 1 settled its stop flag (a second signal: exit 75, "the run had stopped with its checkpoint
    and summary.json written") as soon as it left write_summary's gather, while rank 0 was still writing
    summary.json: its line was false, and its 75 could stand for the job's with no summary.json. Every rank
    settles once rank 0 has written it."""
    from tests.conftest import write_job

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 3})
    proc = launcher.run(2, ["-c", _SETTLED_SCRIPT, str(job), str(tmp_path / "run")], timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for rank in (0, 1):
        assert f"RESULT rank {rank} preempted True settled with summary.json [True]" in proc.stdout, proc.stdout
