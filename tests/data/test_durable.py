"""A prepared dataset outlives a node's crash whole: every file synced before the directory's rename, the parent
after it; a sync that fails is one line naming the output, nothing kept."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from hpcdgnn.__main__ import main
from hpcdgnn.data.events import load_event_manifest, save_event_manifest, write_events
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.errors import DataError
from tests.conftest import make_dataset
from tests.synced import SyncLog


def _inode(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _unsynced(log: SyncLog, root: Path) -> list[str]:
    """What under ``root`` (files, ``shards/``) had no sync before the rename that gave ``root`` its name, with
    SyncLog's own check of ``root`` (synced before, its parent after)."""
    named = [i for i, (what, _, dst) in enumerate(log.events) if what == "name" and dst == root]
    if not named:
        return [log.durable(root)]
    synced = {ino for what, ino, _ in log.events[:named[-1]] if what in ("sync", "dir-sync")}
    missing = [str(p.relative_to(root)) for p in sorted(root.rglob("*")) if _inode(p) not in synced]
    return missing + [why for why in [log.durable(root)] if why]


def _events(root: Path, **kw) -> None:
    """A 30-event stream in three shards, with TGB-style fixed evaluation negatives (eval_negatives.h5)."""
    rng = np.random.default_rng(3)
    negatives = {"val": (np.arange(6) * 2, rng.integers(0, 10, 10)), "test": (np.arange(5) * 2, rng.integers(0, 10, 8))}
    write_events(root, rng.integers(0, 10, 30), rng.integers(0, 10, 30), np.arange(30, dtype=np.float64), None,
                 num_vertices=10, bipartite=False, num_sources=None, feature_names=None, original_ids=None,
                 split=(0.7, 0.15, 0.15), shard_events=10, eval_negatives=negatives, **kw)


def test_every_file_of_a_snapshot_dataset_is_synced_before_its_rename(tmp_path, monkeypatch):
    """The shards, vertices.h5, manifest.json and shards/ reach the disk before the directory's name does; a
    dataset replaced with --force too."""
    root = tmp_path / "ds"
    log = SyncLog(monkeypatch)
    make_dataset(root, 7, 23, 40)
    assert len(list((root / "shards").iterdir())) == 3 and _unsynced(log, root) == []
    make_dataset(root, 4, 23, 40, force=True)
    assert load_manifest(root).num_snapshots == 4 and _unsynced(log, root) == []


def test_every_file_of_an_event_dataset_is_synced_before_its_rename(tmp_path, monkeypatch):
    log = SyncLog(monkeypatch)
    _events(tmp_path / "ev")
    assert (tmp_path / "ev" / "eval_negatives.h5").is_file() and _unsynced(log, tmp_path / "ev") == []


def test_an_event_manifest_is_rewritten_through_a_synced_temporary(tmp_path, monkeypatch):
    _events(tmp_path / "ev")
    m = load_event_manifest(tmp_path / "ev")
    log = SyncLog(monkeypatch)
    save_event_manifest(tmp_path / "ev", m)
    assert log.durable(tmp_path / "ev" / "manifest.json") == "" and load_event_manifest(tmp_path / "ev") == m
    assert sorted(p.name for p in (tmp_path / "ev").iterdir()) == ["eval_negatives.h5", "manifest.json", "shards",
                                                                    "vertices.h5"]


def test_directories_made_for_the_output_are_synced_in_their_parents(tmp_path, monkeypatch):
    """``--output new/deeper/ds``: ``new`` and ``deeper``, made by prepare, are on disk once their parents are."""
    log = SyncLog(monkeypatch)
    root = tmp_path / "new" / "deeper" / "ds"
    make_dataset(root, 3, 5, 4)
    dir_syncs = {ino for what, ino, _ in log.events if what == "dir-sync"}
    assert _unsynced(log, root) == []
    assert {_inode(tmp_path), _inode(tmp_path / "new")} <= dir_syncs


def _failing_h5_syncs(monkeypatch, code: int) -> None:
    """Make ``os.fsync`` of an HDF5 file (a shard, vertices.h5) fail with ``code``, as NFS reports a write the
    server refused; the manifest's and the directories' syncs go through."""
    fsync = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".h5"):
            raise OSError(code, os.strerror(code))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)


@pytest.mark.parametrize("code, words", [(errno.EIO, "Input/output error"), (errno.EDQUOT, "quota")])
def test_a_failed_sync_is_one_line_and_keeps_the_earlier_dataset(tmp_path, monkeypatch, code, words):
    """NFS reports a quota or an I/O error on a file's data at fsync: the dataset would be renamed into place with
    that file short. It is refused naming the output, nothing of it kept, an earlier dataset there untouched."""
    root = make_dataset(tmp_path / "ds", 3, 5, 4)
    before = sorted((p.name, p.stat().st_size) for p in root.rglob("*"))
    _failing_h5_syncs(monkeypatch, code)
    for write in (lambda: make_dataset(root, 7, 23, 40, force=True), lambda: _events(root, force=True)):
        with pytest.raises(DataError, match=rf"^{root}: cannot write the dataset: .*{words}.*nothing was kept"):
            write()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temporary directory left
        assert sorted((p.name, p.stat().st_size) for p in root.rglob("*")) == before


def test_prepare_exits_2_in_one_line_when_a_sync_fails(tmp_path, monkeypatch, capsys):
    raw = tmp_path / "e.txt"
    raw.write_text("".join(f"{i % 5} {(i + 1) % 5} {i}\n" for i in range(40)))
    _failing_h5_syncs(monkeypatch, errno.EIO)
    assert main(["prepare", str(raw), "--format", "snap", "--output", str(tmp_path / "out")]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines == [f"hpcdgnn: error: {tmp_path / 'out'}: cannot write the dataset: Input/output error (nothing "
                     "was kept; an earlier dataset there is untouched)"], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.txt"]


@pytest.mark.parametrize("kind", ["snapshots", "events"])
def test_a_failed_manifest_write_is_one_line(tmp_path, monkeypatch, capsys, kind):
    """An I/O error syncing manifest.json (what NFS reports of a write the server lost) was a traceback: now the
    output's one line, exit 2, nothing kept."""
    raw = tmp_path / "e.txt"
    raw.write_text("".join(f"{i % 5} {(i + 1) % 5} {i}\n" for i in range(40)))
    fsync = os.fsync

    def failing(fd: int) -> None:
        if ".manifest.json.tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    out = tmp_path / "out"
    assert main(["prepare", str(raw), "--format", "snap", "--kind", kind, "--output", str(out)]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines == [f"hpcdgnn: error: {out}: cannot write the dataset: Input/output error (nothing was kept; an "
                     "earlier dataset there is untouched)"], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.txt"]
