"""Checkpoint files that cannot be written or read: one line naming the file, never a traceback."""

from __future__ import annotations

import json
import shutil
import zipfile

import numpy as np
import pytest
import torch

from hpcdgnn.errors import DataError
from hpcdgnn.train import checkpoint


def test_a_short_write_is_one_line_naming_the_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    """torch reports a full disk as its own internals ("unexpected pos 19328 vs 19280"); we say the file and
    how much room is left, and clean the temporary file up."""
    def short_write(obj, f, **kwargs):
        f.write(b"x" * 10)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 19328 vs 19280")

    monkeypatch.setattr(torch, "save", short_write)
    with pytest.raises(DataError, match=r"cannot write checkpoint file .*state\.pt: the write fell short, "
                                        r"[\d.]+ MiB free there \(a full disk or quota\?\)"):
        checkpoint._atomic_save({"a": 1}, tmp_path / "state.pt")
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_file_reaches_the_disk_before_its_name_and_its_name_before_the_next_step(tmp_path, monkeypatch):
    """The file was synced before its rename, its directory never: after a node's crash the rename could be lost
    while ``COMPLETE`` (written next) vouched for the file. Now the directory is synced after the rename."""
    from tests.synced import SyncLog

    log = SyncLog(monkeypatch)
    digest = checkpoint._atomic_save({"a": torch.ones(3)}, tmp_path / "state.pt")
    assert log.durable(tmp_path / "state.pt") == ""
    assert digest == checkpoint._digest(tmp_path / "state.pt") and list(tmp_path.iterdir()) == [tmp_path / "state.pt"]


def test_a_complete_file_with_no_ranks_is_an_unreadable_checkpoint(tmp_path):
    ckpt = tmp_path / "epoch-000002"
    ckpt.mkdir()
    torch.save({"epoch": 2}, ckpt / "state.pt")
    torch.save({"rng": None, "strategy": {}}, ckpt / "rank-00000.pt")
    (ckpt / "COMPLETE").write_text(json.dumps({"epoch": 2, "num_ranks": 0}))
    with pytest.raises(DataError, match=r"epoch-000002/COMPLETE: not a checkpoint.s COMPLETE record \(num_ranks 0\)"):
        checkpoint.load_state(ckpt, 0, 1)


_RESUME = r"""
import sys
import torch
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.train.trainer import run_training

job, run_dir = sys.argv[1], sys.argv[2]
comm = Communicator()
run_training(job, ["train.epochs=2"], run_dir, comm)
reads, load = [], torch.load
def counted(f, *a, **k):
    reads.append(str(f))
    return load(f, *a, **k)
torch.load = counted
res = run_training(None, ["train.epochs=3"], None, comm, resume=run_dir)
print("READS", sum(r.endswith("state.pt") for r in reads), len(res.losses))
"""


@pytest.mark.mpi  # trains in a singleton MPI process (python -c)
def test_a_resume_reads_the_shared_state_once(tmp_path, small_dataset):
    """Rank 0 read ``state.pt`` for its checks of the resume and then again to restore it (twice the I/O of the
    largest checkpoint file, on the rank that every other waits for)."""
    import subprocess
    import sys

    from tests.conftest import REPO, mpi_env, write_job

    job = write_job(tmp_path / "job.yaml", small_dataset)
    proc = subprocess.run([sys.executable, "-c", _RESUME, str(job), str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=300, env=mpi_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "READS 1 1", proc.stdout[-2000:]  # one read, one epoch re-run


def test_a_checkpoint_directory_gone_is_not_called_a_full_disk(tmp_path):
    """ENOENT (the directory rank 0 made is not there: removed, or not shared with this rank's node) was reported
    as '(a full disk or quota?)'."""
    with pytest.raises(DataError, match=r"cannot write checkpoint file .*rank-00001\.pt: No such file or directory "
                                        r"\(removed meanwhile, or not on a file system this rank's node shares\?\)"):
        checkpoint._atomic_save({"a": 1}, tmp_path / "gone" / "rank-00001.pt")


def test_large_numpy_arrays_are_written_as_storages_and_read_back_as_numpy(tmp_path):
    """``torch.save`` pickles a numpy array after copying it whole several times (~6× a node memory's size in
    transient host memory); at 64 KiB or more a contiguous array of a tensor's dtype is written as a tensor
    storage instead — a record of its own bytes, streamed — and read back as the same numpy array, in a file
    and in a checkpoint held in memory. Small, strided and object arrays pickle as before."""
    big = np.arange(3 * 2**14, dtype=np.float32).reshape(-1, 3)
    times = np.linspace(0.0, 1.0, 2**14)
    state = {"memory": {"values": big, "times": times}, "rows": [np.arange(4), big[::2]],
             "objects": np.array([1, "a"], dtype=object)}
    checkpoint._atomic_save(state, tmp_path / "rank.pt")
    with zipfile.ZipFile(tmp_path / "rank.pt") as z:
        records = sorted(i.file_size for i in z.infolist() if "/data/" in i.filename)
    assert records == sorted([big.nbytes, times.nbytes])
    held = checkpoint._serialised(state)
    held.seek(0)
    for back in (torch.load(tmp_path / "rank.pt", weights_only=False), torch.load(held, weights_only=False)):
        pairs = [(back["memory"]["values"], big), (back["memory"]["times"], times), (back["rows"][0], np.arange(4)),
                 (back["rows"][1], big[::2]), (back["objects"], state["objects"])]
        for got, want in pairs:
            assert type(got) is np.ndarray and got.dtype == want.dtype and got.flags.writeable
            np.testing.assert_array_equal(got, want)


def test_arrays_that_alias_as_other_types_are_saved_as_before(tmp_path):
    """Storages cannot hold one memory under two types (torch refuses, which read as a full disk): a state with
    such views is written by plain ``torch.save`` instead, and reads back the same."""
    a = np.arange(2**14, dtype=np.float64)
    state = {"a": a, "bits": a.view(np.int64), "t": torch.arange(2**14, dtype=torch.int64)}
    state["t32"] = state["t"].numpy().view(np.int32)
    for path in (tmp_path / "rank.pt", None):
        if path is not None:
            checkpoint._atomic_save(state, path)
            back = torch.load(path, weights_only=False)
        else:
            buf = checkpoint._serialised(state)
            buf.seek(0)
            back = torch.load(buf, weights_only=False)
        np.testing.assert_array_equal(back["a"], a)
        np.testing.assert_array_equal(back["bits"], a.view(np.int64))
        np.testing.assert_array_equal(back["t32"], state["t32"])
        assert torch.equal(back["t"], state["t"])


def test_a_checkpoint_within_an_epoch_sorts_between_epochs_and_goes_when_a_newer_is_written(tmp_path):
    """Names sort in training order (after epoch 6, after 12 batches of epoch 7, after epoch 7); ``keep`` counts the
    epochs' ends; a checkpoint within an epoch serves only its resume: a newer one (within or at an end) removes
    it; a model's users (``epoch_end``) never take one."""
    from types import SimpleNamespace

    comm = SimpleNamespace(rank=0, size=1, barrier=lambda tag=None: None,  # one process: no collective to make
                           allgather_obj=lambda obj, tag=None: [obj])
    manager = checkpoint.CheckpointManager(tmp_path, keep=2, comm=comm)

    def names():
        return sorted(d.name for d in tmp_path.iterdir())

    for epoch in (5, 6):
        manager.save(epoch, {"epoch": epoch})
    within = manager.save(6, {"epoch": 6, "batch": 12}, batch=12, partial=np.ones(3))
    assert within.name == "epoch-000006+batch-000000012" and checkpoint.within_epoch(within)
    assert names() == ["epoch-000005", "epoch-000006", within.name]
    assert checkpoint.latest_checkpoint(tmp_path) == within
    assert checkpoint.latest_checkpoint(tmp_path, epoch_end=True).name == "epoch-000006"
    assert json.loads((within / "COMPLETE").read_text())["batch"] == 12
    _, mine = checkpoint.load_state(within, 0, 1)
    np.testing.assert_array_equal(mine["partial"], np.ones(3))
    manager.save(6, {"epoch": 6, "batch": 30}, batch=30, partial=np.ones(3))
    assert names() == ["epoch-000005", "epoch-000006", "epoch-000006+batch-000000030"]
    # written again under its name (a resume stopped there again): swapped in, the old one gone after
    manager.save(6, {"epoch": 6, "batch": 30, "again": True}, batch=30, partial=np.ones(3))
    assert names() == ["epoch-000005", "epoch-000006", "epoch-000006+batch-000000030"]
    assert checkpoint.load_shared(tmp_path / "epoch-000006+batch-000000030")["again"]
    # a damaged newest checkpoint names the next older complete one, never a directory still being written
    (tmp_path / "epoch-000006+batch-000000031.tmp").mkdir()
    (tmp_path / "epoch-000006+batch-000000031.tmp" / "COMPLETE").write_text("{}")
    (tmp_path / "epoch-000006+batch-000000040").mkdir()
    (tmp_path / "epoch-000006+batch-000000040" / "COMPLETE").write_text("{}")
    err = checkpoint.unreadable(tmp_path / "epoch-000006+batch-000000040", tmp_path / "x" / "state.pt", EOFError())
    assert "the next older complete checkpoint, epoch-000006+batch-000000030, is used" in str(err), err
    shutil.rmtree(tmp_path / "epoch-000006+batch-000000040")
    manager.save(7, {"epoch": 7})  # and the .tmp a killed write left goes with the next checkpoint
    assert names() == ["epoch-000006", "epoch-000007"]


def test_a_complete_record_a_full_disk_refuses_is_one_line_and_keeps_the_newest_checkpoint(tmp_path, monkeypatch):
    """``COMPLETE`` written on a full disk was a traceback (exit 1); now the one-line DataError naming it, and the
    checkpoint before stays the newest complete one."""
    import builtins
    import errno
    from types import SimpleNamespace

    comm = SimpleNamespace(rank=0, size=1, barrier=lambda tag=None: None, allgather_obj=lambda obj, tag=None: [obj])
    manager = checkpoint.CheckpointManager(tmp_path, keep=2, comm=comm)
    manager.save(1, {"epoch": 1})
    real_open = builtins.open

    def full(file, mode="r", *args, **kwargs):
        if str(file).endswith("COMPLETE") and "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full)
    with pytest.raises(DataError) as e:
        manager.save(2, {"epoch": 2})
    assert str(e.value) == (f"cannot write checkpoint file {tmp_path / 'epoch-000002.tmp' / 'COMPLETE'}: "
                            "No space left on device (a full disk or quota?)")
    monkeypatch.undo()
    assert checkpoint.latest_checkpoint(tmp_path).name == "epoch-000001"
    assert checkpoint.load_shared(tmp_path / "epoch-000001") == {"epoch": 1}


def _saved_under_limit(path, limit: int, before: str = "") -> str:
    """What ``_atomic_save`` of a 40 kB tensor to ``path`` says, in a process whose file size limit (``ulimit -f``)
    is ``limit`` bytes, after the statements ``before`` (e.g. a stand-in ``checkpoint._save``)."""
    import subprocess
    import sys

    script = ("import pathlib, resource, sys, torch\n"
              "from hpcdgnn.train import checkpoint\n"
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
              f"{before}"
              "try:\n"
              "    checkpoint._atomic_save({'w': torch.zeros(10000)}, pathlib.Path(sys.argv[1]))\n"
              "except Exception as e:\n"
              "    print(e)\n")
    return subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def test_a_file_size_limit_is_named_as_such(tmp_path):
    """Under ``ulimit -f`` (a batch system's file size limit) torch reports the refused write as a short one: the
    line said "N MiB free there (a full disk or quota?)" with the disk nearly empty; now it names the limit."""
    out = _saved_under_limit(tmp_path / "state.pt", 4096)
    assert out.startswith(f"cannot write checkpoint file {tmp_path / 'state.pt'}: "), out
    assert out.endswith("(over this process's file size limit, ulimit -f: 4096 bytes?)"), out
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_under_a_file_size_limit_is_still_named_a_full_disk(tmp_path):
    """torch reports a full disk's refused write as a short one, as it does the file size limit's: under a batch
    system's ``ulimit -f`` far above the file, a full disk was blamed on the limit; the limit is named only where
    the file stopped at it."""
    full = ("def full(obj, f):\n"
            "    f.write(b'x' * 5000)\n"
            "    raise RuntimeError('[enforce fail at inline_container.cc:603] . unexpected pos 5000 vs 4096')\n"
            "checkpoint._save = full\n")
    out = _saved_under_limit(tmp_path / "state.pt", 2**30, full)
    assert out.startswith(f"cannot write checkpoint file {tmp_path / 'state.pt'}: the write fell short, "), out
    assert out.endswith("(a full disk or quota?)"), out
    assert list(tmp_path.iterdir()) == []


def test_a_rotation_killed_midway_leaves_no_checkpoint_that_reads_complete(tmp_path, monkeypatch):
    """``checkpoint.keep`` removes an old checkpoint file by file: a job killed meanwhile left a directory with
    ``COMPLETE`` and files missing, which the next resume (the newest moved aside) or the advice of an unreadable
    one took for the next older complete checkpoint. Now it is renamed out of the way first, and the next
    checkpoint removes what is left."""
    from types import SimpleNamespace

    comm = SimpleNamespace(rank=0, size=1, barrier=lambda tag=None: None, allgather_obj=lambda obj, tag=None: [obj])
    manager = checkpoint.CheckpointManager(tmp_path, keep=1, comm=comm)
    manager.save(1, {"epoch": 1})
    real_rmtree = shutil.rmtree

    class Killed(BaseException):
        pass

    def killed_midway(path, *args, **kwargs):
        victims = sorted(p for p in checkpoint.Path(path).glob("*.pt")) if checkpoint.Path(path).is_dir() else []
        if victims:  # one file gone, then the job is killed
            victims[0].unlink()
            raise Killed
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed_midway)
    with pytest.raises(Killed):
        manager.save(2, {"epoch": 2})
    monkeypatch.undo()
    assert [d.name for d in checkpoint._complete(tmp_path)] == ["epoch-000002"]
    manager.save(3, {"epoch": 3})
    assert sorted(d.name for d in tmp_path.iterdir()) == ["epoch-000003"]


def test_a_checkpoint_s_name_reaches_the_disk_before_any_older_one_goes(tmp_path, monkeypatch):
    """The checkpoint directory was never synced after its renames: after a node's crash the new checkpoint's
    rename could be lost while an older one's removal (``checkpoint.keep``) was kept, leaving no checkpoint, or
    an old one's files gone beneath its ``COMPLETE``. Now ``COMPLETE``'s name is synced before the rename, the
    root after it, and again after the older ones are renamed away, before their files go."""
    from types import SimpleNamespace

    from tests.synced import SyncLog

    comm = SimpleNamespace(rank=0, size=1, barrier=lambda tag=None: None, allgather_obj=lambda obj, tag=None: [obj])
    root = tmp_path / "checkpoints"
    manager = checkpoint.CheckpointManager(root, keep=1, comm=comm)
    log = SyncLog(monkeypatch)
    real_rmtree = shutil.rmtree

    def removed(path, *args, **kwargs):
        if checkpoint.Path(path).exists():
            log.events.append(("remove", None, checkpoint.Path(path)))
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.shutil, "rmtree", removed)

    def at(what, dst=None, ino=None, after=-1):
        return next(i for i, (w, n, d) in enumerate(log.events)
                    if i > after and w == what and (dst is None or d == dst) and (ino is None or n == ino))

    def dir_synced(path, after, before):
        st = checkpoint.os.stat(path)
        return any(after < i < before for i, (w, n, _) in enumerate(log.events)
                   if w == "dir-sync" and n == (st.st_dev, st.st_ino))

    manager.save(1, {"epoch": 1})
    assert log.durable(root / "epoch-000001") == ""
    assert dir_synced(tmp_path, -1, len(log.events))  # the root's own name, made by the first checkpoint
    st = checkpoint.os.stat(root / "epoch-000001" / "COMPLETE")
    complete = at("sync", ino=(st.st_dev, st.st_ino))
    assert dir_synced(root / "epoch-000001", complete, at("name", root / "epoch-000001"))

    start = len(log.events)
    manager.save(2, {"epoch": 2})  # keep=1: epoch 1 goes
    new, away = at("name", root / "epoch-000002", after=start), at("name", root / "epoch-000001.old.tmp", after=start)
    gone = at("remove", root / "epoch-000001.old.tmp", after=start)
    assert dir_synced(root, new, away) and dir_synced(root, away, gone)

    start = len(log.events)
    manager.save(2, {"epoch": 2, "again": True})  # a resume re-ran the epoch: the old one swapped out, then removed
    new = at("name", root / "epoch-000002", after=start)
    assert dir_synced(root, new, at("remove", root / "epoch-000002.old.tmp", after=new))
    assert sorted(d.name for d in root.iterdir()) == ["epoch-000002"]
    assert checkpoint.load_shared(root / "epoch-000002")["again"]
