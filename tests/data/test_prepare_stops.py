"""A stop signal to prepare or generate as ``--force`` moves a finished dataset into place
(hpcdgnn.data.writer.replace_dir): held back for the renames and the earlier dataset's removal, then delivered to
a Python caller's handler; and, under mpirun, the ranks waiting for rank 0 (hpcdgnn.rank_zero.await_rank_0) end as
rank 0 did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import hpcdgnn.data.writer as writer
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.writer import RawSnapshot, write_dataset
from tests.conftest import REPO, mpi_env


def _snapshots(T: int):
    for t in range(T):
        yield RawSnapshot(src=np.array([0, 1]), dst=np.array([1, 2]), time=(float(t), float(t + 1)))


def _signalled_while_removing(monkeypatch) -> None:
    """SIGTERM to this process as the earlier dataset, set aside, is being removed (scancel during a long rmtree)."""
    remove = writer._remove_asides

    def signalled(root):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the signal delivered, by whichever thread
        remove(root)

    monkeypatch.setattr(writer, "_remove_asides", signalled)


def test_a_python_callers_stop_during_the_replacement_is_delivered(tmp_path):
    """``write_dataset(force=True)`` from a script, SIGTERM (its default action) while the earlier dataset is being
    removed: the signal was held back and never delivered, and the script went on to its next step (exit 0). Now
    the process ends by the signal once the new dataset is in place, the earlier one removed."""
    root = tmp_path / "d"
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        import numpy as np
        import hpcdgnn.data.writer as w
        from hpcdgnn.data.writer import RawSnapshot, write_dataset
        def snaps(T):
            for t in range(T):
                yield RawSnapshot(src=np.array([0, 1]), dst=np.array([1, 2]), time=(float(t), float(t + 1)))
        write_dataset({str(root)!r}, snaps(3), num_vertices=3)
        remove = w._remove_asides
        def signalled(root):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            remove(root)
        w._remove_asides = signalled
        write_dataset({str(root)!r}, snaps(2), num_vertices=3, force=True)
        print("went on", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=mpi_env())
    assert (done.returncode, done.stdout) == (-signal.SIGTERM, ""), done.stderr
    assert load_manifest(root).num_snapshots == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_a_python_callers_stop_leaves_no_late_line_to_a_later_command(tmp_path, monkeypatch, capsys):
    """The Python caller's signal, with a handler that unwinds: ``write_dataset`` returned as if none came, and a
    later ``main(["generate", ...])`` in the process printed 'SIGTERM came after <the API's dataset> was written'.
    Now the handler unwinds out of ``write_dataset`` (the dataset in place) and the command says nothing of it."""
    from hpcdgnn.__main__ import main

    root = tmp_path / "d"
    write_dataset(root, _snapshots(3), num_vertices=3)

    def unwinds(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, unwinds)
    try:
        with monkeypatch.context() as m:
            _signalled_while_removing(m)
            with pytest.raises(KeyboardInterrupt):
                write_dataset(root, _snapshots(2), num_vertices=3, force=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert load_manifest(root).num_snapshots == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    capsys.readouterr()
    other = tmp_path / "g"
    assert main(["generate", "--output", str(other), "--vertices", "20", "--density", "2", "--snapshots", "2",
                 "--seed", "1"]) == 0
    assert "came after" not in capsys.readouterr().err


#: ``python SCRIPT MARK WHERE ARGS...``: ``python -m hpcdgnn ARGS`` on each rank; rank 1 says on entering its wait for
#: rank 0 (``MARK/waiting``), and rank 0, at WHERE (``_sync_tree``: writing; ``_remove_asides``: its dataset in
#: place), signals every rank as a launcher does (scancel), once rank 1 waits
_SIGNALLED_JOB = """
import os, signal, sys, time
from pathlib import Path
mark, where, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
(mark / f"pid.{rank}").write_text(str(os.getpid()))
import hpcdgnn.data.writer as w
import hpcdgnn.rank_zero as rz
wait = rz.await_rank_0
def waiting(*a, **k):
    (mark / "waiting").write_text("")
    return wait(*a, **k)
rz.await_rank_0 = waiting
step = getattr(w, where)
def signalled(path):
    for _ in range(6000):
        if (mark / "waiting").exists():
            break
        time.sleep(0.01)
    time.sleep(0.5)  # rank 1 in its wait loop
    for r in (0, 1):
        os.kill(int((mark / f"pid.{r}").read_text()), signal.SIGTERM)
    time.sleep(1.0)  # rank 1's signal lands while rank 0 is still at work
    step(path)
setattr(w, where, signalled)
from hpcdgnn.__main__ import main
sys.exit(main(argv))
"""


@pytest.mark.parametrize(("where", "code", "line"), [
    ("_remove_asides", 0, "hpcdgnn: generate: SIGTERM came after {out} was written; the dataset is complete"),
    ("_sync_tree", 143, "hpcdgnn: generate: stopped by SIGTERM; nothing it was writing is left"),
])
def test_every_rank_ends_as_rank_0_on_a_job_s_stop(launcher, tmp_path, where, code, line):
    """``mpirun -np 2 ... generate --force``, SIGTERM to every rank: where it came once rank 0 had put the dataset
    in place, rank 0 said so and exited 0, but rank 1, waiting for rank 0, exited 143 on its own signal and the job
    with it (a job script requeueing on 143 reran a prepare that then refused the existing output). Now rank 1 waits
    for rank 0's word: the job exits 0 and rank 0's line is the one printed; where the stop came while rank 0 was
    writing, every rank exits 143, rank 0's line alone, nothing hidden left."""
    out = tmp_path / "g"
    write_dataset(out, _snapshots(3), num_vertices=20)
    script, mark = tmp_path / "job.py", tmp_path / "mark"
    script.write_text(_SIGNALLED_JOB)
    mark.mkdir()
    done = launcher.run(2, [str(script), str(mark), where, "generate", "--output", str(out), "--vertices", "20",
                            "--density", "2", "--snapshots", "2", "--seed", "1", "--force"], timeout=120)
    ours = [x for x in done.stderr.splitlines() if x.startswith(("hpcdgnn", "Traceback"))]  # not mpirun's box
    assert (done.returncode, ours) == (code, [line.format(out=out)]), done.stdout + done.stderr
    assert load_manifest(out).num_snapshots == (2 if code == 0 else 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g", "job.py", "mark"]


class _QuietRank0:
    """``MPI.COMM_WORLD`` as a waiting rank sees it: rank 0 started the call, then says ``word`` once this process
    got SIGTERM (``signalled``) and ``after_s`` went by; never where ``word`` is None."""

    def __init__(self, key: str, word, after_s: float) -> None:
        self.said = [(key, None)]
        self.key, self.word, self.after_s, self.signalled = key, word, after_s, None

    def Iprobe(self, source: int, tag: int) -> bool:  # noqa: N802 -- mpi4py's name
        if self.signalled is None:
            os.kill(os.getpid(), signal.SIGTERM)
            self.signalled = time.monotonic()
        if self.word is not None and time.monotonic() > self.signalled + self.after_s:
            self.said.append((self.key, self.word))
            self.word = None
        return bool(self.said)

    def recv(self, source: int, tag: int):
        return self.said.pop(0)


@pytest.mark.parametrize(("word", "outcome"), [("fingerprint", "done: fingerprint"), (("stopped", 2), 2),
                                               (None, 15)])
def test_a_stopped_rank_waits_a_grace_for_rank_0(monkeypatch, word, outcome):
    """A waiting rank's stop signal (a command's handler that unwinds) ended its wait at once. Now rank 0's word
    within the grace decides (done, or rank 0's own signal); none within it, this rank's signal stops it."""
    import hpcdgnn.comm.world as world
    from hpcdgnn.preemption import Stopped, forget_stop, stop
    from hpcdgnn.rank_zero import Words, await_rank_0

    monkeypatch.setattr(world, "STOP_GRACE_S", 0.5)
    words = Words("generate", "writing", "wrote", "output", "rank 0 writes the dataset")
    previous = signal.signal(signal.SIGTERM, stop)
    t0 = time.monotonic()
    try:
        try:
            with writer.stops_after_written():  # the command line's
                got = await_rank_0(_QuietRank0("out", word, 0.2), 7, "out", words, lambda made: f"done: {made}")
        except Stopped as e:
            got = e.signum
    finally:
        signal.signal(signal.SIGTERM, previous)
        forget_stop()
    assert got == outcome and time.monotonic() - t0 >= (0.5 if word is None else 0.2)


@pytest.mark.parametrize(("word", "outcome"), [("fingerprint", "done: fingerprint"), (("stopped", 2), "stopped 2")])
def test_a_python_script_s_handler_runs_on_a_waiting_rank(monkeypatch, word, outcome):
    """A script under mpirun (``from_arrays`` on every rank) whose SIGTERM handler sets a flag: on a rank waiting for
    rank 0, the signal was dropped once rank 0's word came within the grace, so the flag was set on rank 0 alone
    and the ranks parted at the script's next collective. Now the handler runs after rank 0's word, as on rank 0;
    the word still decides what the call returns or raises."""
    import hpcdgnn.comm.world as world
    from hpcdgnn.preemption import Stopped
    from hpcdgnn.rank_zero import Words, await_rank_0

    monkeypatch.setattr(world, "STOP_GRACE_S", 0.5)
    words = Words("from_arrays", "writing", "wrote", "output", "rank 0 writes the dataset")
    flags: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: flags.append(signum))
    try:
        try:
            got = await_rank_0(_QuietRank0("out", word, 0.2), 7, "out", words, lambda made: f"done: {made}")
        except Stopped as e:
            got = f"stopped {e.signum}"
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (got, flags) == (outcome, [signal.SIGTERM])


def test_the_command_line_s_rank_0_commands_end_as_rank_0_did(monkeypatch):
    """export, report, inspect, ... under mpirun (``__main__._on_rank_0``): a waiting rank's signal that rank 0's
    word answers within the grace ends as rank 0 did, as under prepare; outside the command line's context (which
    the Python API's handler needs) it would go to this rank's handler, exit 143 beside rank 0's 0."""
    import argparse

    import hpcdgnn.__main__ as cli
    import hpcdgnn.rank_zero as rank_zero
    from hpcdgnn.data.writer import stops_end_as_done

    seen = []
    monkeypatch.setattr(rank_zero, "on_rank_0", lambda *a, **k: seen.append(stops_end_as_done()) or 0)
    assert cli._on_rank_0("export", 7, argparse.Namespace(run="r"), lambda: 0) == 0
    assert seen == [True] and not stops_end_as_done()
