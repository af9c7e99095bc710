"""atomic_write: the file whole or as it was, no temporary left, synced, and (``replace=False``) never replacing."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys

import pytest

from hpcdgnn.atomic import atomic_write, remove_temporaries
from tests.synced import SyncLog


def test_the_file_is_written_synced_and_given_the_mode_open_would(tmp_path, monkeypatch):
    log = SyncLog(monkeypatch)
    path = tmp_path / "a.json"
    path.write_text("old\n")
    with atomic_write(path) as f:
        f.write("new\n")
        assert path.read_text() == "old\n"  # a reader sees the old file until the block ends
    assert path.read_text() == "new\n" and sorted(tmp_path.iterdir()) == [path]
    assert log.durable(path) == ""
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


@pytest.mark.parametrize("stop", [RuntimeError("a bug"), KeyboardInterrupt(),
                                  OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))])
def test_a_failure_in_the_block_leaves_the_file_as_it_was_and_no_temporary(tmp_path, stop):
    path = tmp_path / "a.pt"
    path.write_bytes(b"old")
    with pytest.raises(type(stop)), atomic_write(path, "wb") as f:
        f.write(b"half")
        raise stop
    assert path.read_bytes() == b"old" and sorted(tmp_path.iterdir()) == [path]


def test_a_full_disk_that_only_fsync_reports_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """NFS reports a write the server refused (a quota) at fsync or close, not at write."""
    path = tmp_path / "a.json"

    def refused(fd):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(os, "fsync", refused)
    with pytest.raises(OSError, match="quota"), atomic_write(path) as f:
        f.write("new\n")
    assert list(tmp_path.iterdir()) == []


def test_two_writers_with_the_same_pid_never_share_a_temporary(tmp_path):
    """Two ranks on two nodes sharing a file system may have the same pid: the temporary's name is mkstemp's."""
    path = tmp_path / "rates.json"
    with atomic_write(path) as a, atomic_write(path) as b:
        assert a.name != b.name and os.path.dirname(a.name) == str(tmp_path)
        a.write("a\n")
        b.write("b\n")
    assert path.read_text() == "a\n" and sorted(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "no-hard-links"])
def test_replace_false_never_replaces_a_file_even_one_made_during_the_write(tmp_path, monkeypatch, links):
    """A check before the write cannot see a file made while it runs: the link into place refuses it; a file
    system without hard links (vfat, some FUSE mounts) claims the name by an exclusive create instead."""
    if not links:
        def no_links(src, dst, *args, **kwargs):
            raise OSError(errno.EPERM, os.strerror(errno.EPERM))

        monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "model.pt"
    with atomic_write(path, "wb", replace=False) as f:
        f.write(b"mine")
    assert path.read_bytes() == b"mine" and sorted(tmp_path.iterdir()) == [path]
    other = tmp_path / "theirs.pt"
    with pytest.raises(FileExistsError) as e, atomic_write(other, "wb", replace=False) as f:
        f.write(b"export")
        other.write_text("the user's own file\n")
    assert str(other) in str(e.value)
    assert other.read_text() == "the user's own file\n" and sorted(tmp_path.iterdir()) == [path, other]


def test_replace_false_writes_durably(tmp_path, monkeypatch):
    log = SyncLog(monkeypatch)
    with atomic_write(tmp_path / "m.csv", "wb", replace=False) as f:
        f.write(b"epoch\n1\n")
    assert log.durable(tmp_path / "m.csv") == ""


def test_the_temporary_of_a_killed_write_is_removed_and_nothing_else(tmp_path):
    """A writer killed in the block (SIGKILL, a node's crash) leaves its temporary, under a name no later write
    reuses: :func:`remove_temporaries` removes it, never a user's file of another name or shape, nor another
    file's temporary."""
    path = tmp_path / "summary.json"
    path.write_text("old\n")
    script = ("import os, signal, sys\n"
              "from hpcdgnn.atomic import atomic_write\n"
              "with atomic_write(sys.argv[1]) as f:\n"
              "    f.write('half')\n"
              "    f.flush()\n"
              "    os.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", script, str(path)], timeout=60).returncode == -9
    (left,) = [p for p in tmp_path.iterdir() if p != path]
    assert left.name.startswith(".summary.json.tmp-") and left.read_text() == "half"
    theirs = [".summary.json.tmp-killed", ".summary.json.tmp-abcd1234.bak", "summary.json.tmp-abcd1234",
              ".plan.json.tmp-abcd1234", ".summary.json.tmp-abcd123"]
    for name in theirs:
        (tmp_path / name).write_text("the user's\n")
    (tmp_path / ".summary.json.tmp-abcdefgh").mkdir()
    remove_temporaries(tmp_path, ["summary.json", "metrics.jsonl"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, ".summary.json.tmp-abcdefgh", *theirs])
    assert path.read_text() == "old\n"


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077, 0o027, 0o000], ids=oct)
def test_the_mode_follows_the_umask_without_setting_it(tmp_path, monkeypatch, umask):
    """Setting the umask to read it back changed it for every thread a moment (a file the prefetch thread made then
    got the wrong mode): where /proc shows it, it is read there and never set."""
    if not os.path.exists("/proc/self/status") or "Umask:" not in open("/proc/self/status").read():
        pytest.skip("no Umask line in /proc/self/status")
    before = os.umask(umask)
    calls = []
    try:
        monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or umask)
        with atomic_write(tmp_path / "a.json") as f:
            f.write("{}\n")
        (tmp_path / "d").mkdir()
        from hpcdgnn.errors import umask_mode

        umask_mode(tmp_path / "d")
    finally:
        monkeypatch.undo()
        os.umask(before)
    assert calls == []
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o777 & ~umask


def test_without_proc_the_umask_is_read_by_setting_it_back(tmp_path, monkeypatch):
    import builtins

    from hpcdgnn.errors import umask_mode

    real_open = builtins.open

    def no_proc(file, *args, **kwargs):
        if str(file).startswith("/proc/"):
            raise FileNotFoundError(file)
        return real_open(file, *args, **kwargs)

    before = os.umask(0o027)
    try:
        monkeypatch.setattr(builtins, "open", no_proc)
        (tmp_path / "f").write_bytes(b"")
        umask_mode(tmp_path / "f")
        assert os.umask(0o027) == 0o027  # put back as it was
    finally:
        monkeypatch.undo()
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o640


def test_sync_path_syncs_a_file_or_directory_and_raises_only_when_strict(tmp_path, monkeypatch):
    """One helper for the dataset writer's files (a failed sync is a failed write) and the directories (best
    effort), which two near-copies did before."""
    from hpcdgnn.atomic import sync_directory, sync_path

    log = SyncLog(monkeypatch)
    (tmp_path / "shard.h5").write_bytes(b"data")
    sync_path(tmp_path / "shard.h5", strict=True)
    sync_directory(tmp_path)
    ino = [(st.st_dev, st.st_ino) for st in (os.stat(tmp_path / "shard.h5"), os.stat(tmp_path))]
    assert [(what, i) for what, i, _ in log.events] == [("sync", ino[0]), ("dir-sync", ino[1])]

    def refused(fd):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(os, "fsync", refused)
    with pytest.raises(OSError, match="quota"):
        sync_path(tmp_path / "shard.h5", strict=True)
    sync_path(tmp_path / "shard.h5", strict=False)
    sync_directory(tmp_path)
    with pytest.raises(FileNotFoundError):
        sync_path(tmp_path / "gone", strict=True)
