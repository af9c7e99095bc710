"""A prepare killed (SIGKILL, a node's crash) at any point after its hidden ``.NAME.tmp-*`` exists: the next prepare
to that output removes what it left, and never what a prepare still running holds."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.writer import RawSnapshot, write_dataset

REPO = Path(__file__).resolve().parents[2]

#: a prepare of two snapshots that SIGKILLs itself at the point ``sys.argv[2]`` names
_KILLED_AT = """
import os, signal, sys
from pathlib import Path
import numpy as np
import hpcdgnn.data.writer as writer

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

root, point = Path(sys.argv[1]), sys.argv[2]
rename, replace, sync_path = os.rename, os.replace, writer.sync_path
if point == "made":  # mkdtemp done, its writer's record not yet written
    writer._this_writer = die
elif point == "manifest":  # the manifest's temporary written and synced, not yet renamed
    os.replace = lambda src, dst: die() if str(dst).endswith("manifest.json") else replace(src, dst)
elif point == "sync":  # every file written, the tree being synced before the rename
    writer.sync_path = lambda path, strict: die() if str(path).endswith("vertices.h5") else sync_path(path, strict)
elif point == "rename":  # synced, about to be renamed into place
    os.rename = lambda src, dst: die() if Path(dst) == root else rename(src, dst)
snapshots = [writer.RawSnapshot(src=np.array([0]), dst=np.array([1])), writer.RawSnapshot(src=np.array([1]),
                                                                                      dst=np.array([2]))]
writer.write_dataset(root, snapshots, num_vertices=5, shard_snapshots=1)
"""

_DAY_S = 86400


def _killed_at(root: Path, point: str) -> Path:
    """Run a prepare to ``root`` killed at ``point``; its hidden directory."""
    done = subprocess.run([sys.executable, "-c", _KILLED_AT, str(root), point], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    [hidden] = root.parent.glob(f".{root.name}.tmp-*")
    return hidden


def _snapshots():
    return [RawSnapshot(src=np.array([0, 2]), dst=np.array([1, 3])) for _ in range(3)]


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _age_tree(path: Path, seconds: float) -> None:
    """Date ``path``, everything in it and it itself last, ``seconds`` back."""
    for p in sorted(path.rglob("*"), reverse=True):
        _age(p, seconds)
    _age(path, seconds)


@pytest.mark.parametrize("point", ["made", "manifest", "sync", "rename"])
def test_a_prepare_killed_at_any_point_leaves_nothing_the_next_one_keeps(tmp_path, point):
    """Killed before its writer's record was written (an empty directory), while the manifest was written (its
    ``.manifest.json.tmp-*`` inside), while the tree was synced or just before the rename (the record already
    removed for the rename): the next prepare did not recognise the directory and kept it for ever. Now a
    directory with its writer's record goes as soon as that writer is gone; one without goes once it has sat
    unchanged for minutes (a prepare holds it without its record only between two system calls)."""
    root = tmp_path / "d"
    hidden = _killed_at(root, point)
    if not (hidden / ".writer.json").is_file():
        _age(hidden, _DAY_S)
    write_dataset(root, _snapshots(), num_vertices=5)
    assert load_manifest(root).num_snapshots == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_an_unrecorded_directory_a_prepare_may_be_setting_up_stays(tmp_path):
    """A hidden directory without its writer's record, changed within the last minutes (a prepare between making
    it and writing its record, or between removing the record and the rename), stays, as does one of that shape
    holding anything else (a killed prepare's of an older version, a user's); an empty record (its writer killed
    between creating and writing it) is no record."""
    root = tmp_path / "d"
    made = _killed_at(root, "made")
    fresh = made.with_name(".d.tmp-fresh001")
    made.rename(fresh)
    empty_record = tmp_path / ".d.tmp-emptyrc1"
    empty_record.mkdir()
    (empty_record / ".writer.json").write_text("")
    _age(empty_record, _DAY_S)
    older = tmp_path / ".d.tmp-older001"  # shards but neither record nor manifest
    (older / "shards").mkdir(parents=True)
    _age(older, _DAY_S)
    write_dataset(root, _snapshots(), num_vertices=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".d.tmp-fresh001", ".d.tmp-older001", "d"]


def test_a_prepare_of_an_earlier_boot_of_this_host_goes_with_the_next_one(tmp_path):
    """A node that crashed and rebooted: the hidden directory its prepare left named a boot id no process has now,
    and stayed for ever (``boot_id`` alone cannot tell an earlier boot of this host from another host). The record
    names the host now: one of this host's earlier boot goes once unchanged for minutes (a running prepare on
    another machine of this name reads the same, and dates its directory afresh); one so recorded but changed
    lately, one of another host (a shared file system), one without a host (an older version's), one of a name many
    hosts share (``(none)``: the kernel's where none was set) and an unreadable record stay."""
    import json
    import shutil
    import socket

    root = tmp_path / "d"
    killed = _killed_at(root, "manifest")
    record = json.loads((killed / ".writer.json").read_text())
    assert record["host"] == socket.gethostname()
    records = {
        "rebooted": {**record, "boot": "an-earlier-boot"},
        "otherhst": {**record, "boot": "an-earlier-boot", "host": "another-node"},
        "nohost01": {k: v for k, v in {**record, "boot": "an-earlier-boot"}.items() if k != "host"},
        "localhst": {**record, "boot": "an-earlier-boot", "host": "localhost"},
        "nonehost": {**record, "boot": "an-earlier-boot", "host": "(none)"},
        "unreadbl": None,
        "rebootnw": {**record, "boot": "an-earlier-boot"},
    }
    for name, rec in records.items():
        shutil.copytree(killed, tmp_path / f".d.tmp-{name}")
        (tmp_path / f".d.tmp-{name}" / ".writer.json").write_text("{not json" if rec is None else json.dumps(rec))
        if name != "rebootnw":
            _age_tree(tmp_path / f".d.tmp-{name}", _DAY_S)
    shutil.rmtree(killed)
    write_dataset(root, _snapshots(), num_vertices=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".d.tmp-localhst", ".d.tmp-nohost01", ".d.tmp-nonehost",
                                                         ".d.tmp-otherhst", ".d.tmp-rebootnw", ".d.tmp-unreadbl", "d"]


#: a prepare of 8 snapshots, one every half second, with --force: a slow input
_SLOW = """
import sys, time
import numpy as np
from hpcdgnn.data.writer import RawSnapshot, write_dataset

def snapshots():
    for t in range(8):
        time.sleep(0.5)
        yield RawSnapshot(src=np.array([0]), dst=np.array([1]))

write_dataset(sys.argv[1], snapshots(), num_vertices=5, shard_snapshots=1, force=True)
"""


def test_a_running_prepare_on_another_machine_of_this_name_stays(tmp_path, monkeypatch):
    """Two machines of one host name (replicas of one image, cloned VMs) on one file system: a prepare on the
    second took the first's running prepare, its record naming this host and another boot, for one of an earlier
    boot and removed its hidden directory, and the first died of h5py's FileNotFoundError. Now a record of another
    boot counts only once its directory has sat unchanged for minutes; the running one finishes."""
    import json

    import hpcdgnn.data.writer as writer

    root = tmp_path / "d"
    running = subprocess.Popen([sys.executable, "-c", _SLOW, str(root)], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(6000):
            if any(tmp_path.glob(".d.tmp-*")) or running.poll() is not None:
                break
            time.sleep(0.01)
        mine = json.loads(writer._this_writer())
        monkeypatch.setattr(writer, "_this_writer", lambda: json.dumps({**mine, "boot": "the-other-machine-s"}))
        write_dataset(root, _snapshots(), num_vertices=5, force=True)
        out, _ = running.communicate(timeout=120)
    finally:
        running.kill()
    assert running.returncode == 0, out
    assert load_manifest(root).num_snapshots == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_a_prepare_syncing_without_a_record_stays(tmp_path, monkeypatch):
    """Where ``/proc`` cannot name the writer, a prepare has no record: through its sync (which may write nothing
    for minutes) its directory holds a manifest and no record, the state a killed prepare about to rename leaves,
    and another prepare removed it once it had sat unchanged that long. A running prepare dates its directory
    afresh meanwhile, and it stays."""
    import hpcdgnn.data.writer as writer

    root = tmp_path / "d"
    clock = tmp_path / "clock"
    sync_path = writer.sync_path
    monkeypatch.setattr(writer, "_this_writer", lambda: None)
    monkeypatch.setattr(writer, "_UNCHANGED_S", 1.0)
    monkeypatch.setattr(writer, "_FRESH_S", 0.1)

    def slow(path, strict):
        if str(path).endswith("vertices.h5"):
            time.sleep(2.0)  # the sync of a large dataset
            clock.write_text("")
            writer._remove_killed(root, clock.stat().st_mtime)  # another prepare to this output starts
        sync_path(path, strict)

    monkeypatch.setattr(writer, "sync_path", slow)
    write_dataset(root, _snapshots(), num_vertices=5)
    assert load_manifest(root).num_snapshots == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clock", "d"]


@pytest.mark.parametrize("where", ["snapshot", "sync"])
def test_a_hidden_directory_removed_mid_write_is_one_line(tmp_path, monkeypatch, capsys, where):
    """The hidden directory removed while the prepare wrote it (another prepare, a user): h5py's FileNotFoundError
    ended it with a traceback, or the sync's failure said only 'No such file or directory'. Now one line names the
    directory and what happened (exit 2 on the command line)."""
    import shutil

    import hpcdgnn.data.writer as writer
    from hpcdgnn.__main__ import main
    from hpcdgnn.errors import DataError

    root = tmp_path / "d"
    line = r"^.*/\.d\.tmp-\w+: removed while this prepare wrote it "
    if where == "snapshot":
        def snapshots():
            yield RawSnapshot(src=np.array([0]), dst=np.array([1]))
            [hidden] = tmp_path.glob(".d.tmp-*")
            shutil.rmtree(hidden)
            yield RawSnapshot(src=np.array([1]), dst=np.array([2]))

        with pytest.raises(DataError, match=line):
            write_dataset(root, snapshots(), num_vertices=5, shard_snapshots=1)
    else:
        sync_path = writer.sync_path

        def removed(path, strict):
            shutil.rmtree(Path(path).parent, ignore_errors=True)
            sync_path(path, strict)

        monkeypatch.setattr(writer, "sync_path", removed)
        assert main(["generate", "--output", str(root), "--vertices", "20", "--density", "2", "--snapshots", "2",
                     "--seed", "1"]) == 2
        [said] = capsys.readouterr().err.splitlines()
        assert re.match(f"^hpcdgnn: error: {line[1:]}", said), said
    assert sorted(tmp_path.iterdir()) == []


def test_the_stop_signals_are_one_tuple_for_the_command_and_the_writer():
    """prepare's writer held back its own tuple of stop signals, the command line passed on another, and pre-emption
    a third: a signal added to one would stop a command the writer did not hold it for. One tuple now, and the
    writer's removal of its unfinished datasets is no longer named like hpcdgnn.atomic's remove_temporaries, which
    removes another thing (a directory's atomic_write temporaries)."""
    import hpcdgnn.__main__ as cli
    import hpcdgnn.data.writer as writer
    from hpcdgnn import preemption

    assert cli._PASS_STOPS is preemption.STOP_SIGNALS and writer.STOP_SIGNALS is preemption.STOP_SIGNALS
    assert not hasattr(writer, "remove_temporaries") and callable(writer.remove_unfinished_datasets)


def test_a_killed_prepare_s_shards_go_before_the_next_one_makes_its_directory(tmp_path, monkeypatch):
    """A disk filled by the shards of a prepare killed mid-way: the next prepare made its own hidden directory
    first, which the full disk refused ('cannot create the output here: No space left on device'), and never came
    to remove the killed one's. A killed prepare known by its record goes before anything is made."""
    import errno
    import tempfile

    root = tmp_path / "d"
    killed = _killed_at(root, "manifest")
    mkdtemp = tempfile.mkdtemp

    def full(*args, **kwargs):
        if killed.exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return mkdtemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    write_dataset(root, _snapshots(), num_vertices=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
