"""A stop signal to prepare or generate as ``--force`` moves a finished dataset into place
(hpcdgnn.data.writer.replace_dir): held back for the renames and the earlier dataset's removal, then delivered to
a Python caller's handler."""

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

