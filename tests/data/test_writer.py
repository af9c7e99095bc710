"""Tests of hpcdgnn.data.writer: dedupe/weights, smoothing (IBM §5.4) against dense numpy, shards."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.data.writer import (
    RawSnapshot,
    _dedupe,
    _sum_sparse,
    edge_keys,
    human_bytes,
    stops_after_written,
    write_dataset,
)
from hpcdgnn.errors import DataError

N = 5
# Hand-made events per snapshot: (src, dst) with a repeated pair in t = 0 and t = 2.
EVENTS = [
    [(0, 1), (0, 1), (1, 2), (3, 0)],
    [(0, 1), (2, 4)],
    [],
    [(4, 3), (1, 2), (1, 2), (1, 2), (0, 4)],
    [(3, 0), (2, 4)],
]


def _raw(events=EVENTS, weights=None):
    for t, ev in enumerate(events):
        src = np.array([s for s, _ in ev], dtype=np.int64)
        dst = np.array([d for _, d in ev], dtype=np.int64)
        w = None if weights is None else np.asarray(weights[t], dtype=np.float64)
        yield RawSnapshot(src=src, dst=dst, weight=w, time=(float(t), float(t + 1)))


def _dense_raw(events=EVENTS, mode="ones", weights=None):
    """A_t before smoothing as dense (T, N, N) float64, straight from the definition."""
    a = np.zeros((len(events), N, N))
    for t, ev in enumerate(events):
        for i, (s, d) in enumerate(ev):
            if mode == "ones":
                a[t, s, d] = 1.0
            elif mode == "count":
                a[t, s, d] += 1.0
            else:
                a[t, s, d] += weights[t][i]
    return a


def _dense_degrees(a_raw):
    """IBM §6.1 features [in_degree, out_degree] of each raw snapshot (distinct neighbours)."""
    b = (a_raw != 0).astype(np.float64)
    return np.stack([b.sum(axis=1), b.sum(axis=2)], axis=-1)  # in = column sums, out = row sums


def _read_dense(root):
    m = load_manifest(root)
    adj, xs = [], []
    with ShardReader(root, m) as r:
        for t in range(m.num_snapshots):
            s = r.read(t)
            d = np.zeros((m.num_vertices, m.num_vertices))
            d[s.rows(), s.indices] = s.weights
            adj.append(d)
            xs.append(s.x)
    return m, np.stack(adj), np.stack(xs)


@pytest.mark.parametrize("mode", ["ones", "count", "given"])
def test_weights_modes_match_dense(tmp_path, mode):
    """Weights ones / count / given and degree features equal a dense computation."""
    weights = [np.arange(len(ev), dtype=np.float64) + 0.5 for ev in EVENTS]
    m = write_dataset(tmp_path / "d", _raw(weights=weights), num_vertices=N, weights=mode, shard_snapshots=2)
    _, adj, x = _read_dense(tmp_path / "d")
    want = _dense_raw(mode=mode, weights=weights)
    np.testing.assert_allclose(adj, want, rtol=1e-6)
    np.testing.assert_array_equal(x, _dense_degrees(want))
    assert m.snapshot_edges == [int((w != 0).sum()) for w in want]
    assert m.snapshot_time == [[float(t), float(t + 1)] for t in range(len(EVENTS))]


@pytest.mark.parametrize("life", [2, 3])
def test_edge_life_matches_dense(tmp_path, life):
    """IBM §5.4: A_t = sum_{i=t-l+1}^{t} A_i (features unchanged)."""
    m, adj, x = _read_dense(_write(tmp_path, edge_life=life))
    raw = _dense_raw()
    want = np.stack([raw[max(0, t - life + 1) : t + 1].sum(axis=0) for t in range(len(EVENTS))])
    np.testing.assert_allclose(adj, want)
    np.testing.assert_array_equal(x, _dense_degrees(raw))
    assert m.snapshot_nnz == [int((w != 0).sum()) for w in want]
    assert m.smoothed


@pytest.mark.parametrize("window", [2, 3])
def test_mtransform_matches_dense(tmp_path, window):
    """IBM §5.3/§5.4: A_t = sum_k M_tk A_k, X_t = sum_k M_tk X_k with M_tk = 1/min(w, t+1) on the band."""
    T = len(EVENTS)
    M = np.zeros((T, T))
    for t in range(T):
        lo = max(0, t - window + 1)
        M[t, lo : t + 1] = 1.0 / min(window, t + 1)
    raw = _dense_raw()
    _, adj, x = _read_dense(_write(tmp_path, mtransform_window=window))
    np.testing.assert_allclose(adj, np.einsum("tk,kij->tij", M, raw), rtol=1e-6)
    np.testing.assert_allclose(x, np.einsum("tk,kvf->tvf", M, _dense_degrees(raw)), rtol=1e-6)


def _write(tmp_path, **kw):
    root = tmp_path / "d"
    write_dataset(root, _raw(), num_vertices=N, shard_snapshots=2, **kw)
    return root


def test_smoothed_dataset_keeps_raw_targets(tmp_path):
    """After smoothing, read_target still returns the raw edges of each window."""
    root = _write(tmp_path, edge_life=3)
    m = load_manifest(root)
    raw = _dense_raw()
    with ShardReader(root, m) as r:
        for t in range(m.num_snapshots):
            src, dst = r.read_target(t)
            assert set(zip(src.tolist(), dst.tolist(), strict=True)) == set(zip(*np.nonzero(raw[t]), strict=True))


def test_undirected_is_symmetric_and_self_loop_counted_once(tmp_path):
    """Undirected storage is symmetric and a self-loop event is counted once."""
    events = [[(0, 1), (2, 2), (3, 1)], [(1, 0), (4, 4), (4, 4)]]
    root = tmp_path / "u"
    write_dataset(root, _raw(events), num_vertices=N, directed=False, weights="count")
    _, adj, x = _read_dense(root)
    for a in adj:
        np.testing.assert_array_equal(a, a.T)
    assert adj[0, 2, 2] == 1.0  # one event on the diagonal counts once, not twice
    assert adj[1, 4, 4] == 2.0
    assert adj[0, 0, 1] == adj[0, 1, 0] == 1.0
    np.testing.assert_array_equal(x[..., 0], x[..., 1])  # in = out degree when undirected


@pytest.mark.parametrize("T,per", [(8, 8), (16, 8), (7, 3), (1, 1), (5, 10)])
def test_shard_boundaries(tmp_path, T, per):
    """Every snapshot is readable whatever T and the shard size (the last group of a full shard included)."""
    rng = np.random.default_rng(T)
    snaps = [RawSnapshot(src=rng.integers(0, 6, 9), dst=rng.integers(0, 6, 9)) for _ in range(T)]
    m = write_dataset(tmp_path / "d", iter(snaps), num_vertices=6, shard_snapshots=per)
    assert [(s.t_start, s.t_stop) for s in m.shards] == [(a, min(a + per, T)) for a in range(0, T, per)]
    with ShardReader(tmp_path / "d", m) as r:
        for t, raw in enumerate(snaps):
            s = r.read(t)
            assert set(zip(s.rows().tolist(), s.indices.tolist(), strict=True)) == set(
                zip(raw.src.tolist(), raw.dst.tolist(), strict=True)
            )
    assert m.snapshot_time is None  # the snapshots carried no times


def test_dedupe_bit_identical_to_unique_add_at():
    """The sort/bincount dedupe equals the np.unique + np.add.at formulation bit for bit."""
    rng = np.random.default_rng(0)
    for trial in range(30):
        keys = rng.integers(0, 40, int(rng.integers(0, 300)))
        vals = rng.normal(size=keys.shape[0]) * 10 ** rng.uniform(-3, 3, keys.shape[0])
        uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        ref = np.zeros(uniq.shape[0])
        np.add.at(ref, inverse, vals)
        for mode, want in (("ones", np.ones(uniq.shape[0])), ("count", counts.astype(np.float64)), ("given", ref)):
            k, w = _dedupe(keys, vals, mode)
            np.testing.assert_array_equal(k, uniq)
            assert w.tobytes() == want.tobytes(), (trial, mode)
        parts = [(np.unique(rng.integers(0, 30, 20)), None, s) for s in (1.0, 1 / 3, 0.25)]
        parts = [(k, rng.normal(size=k.shape[0]), s) for k, _, s in parts]
        cat = np.concatenate([k for k, _, _ in parts])
        u, inv = np.unique(cat, return_inverse=True)
        ref = np.zeros(u.shape[0])
        np.add.at(ref, inv, np.concatenate([v * s for _, v, s in parts]))
        k, w = _sum_sparse(parts)
        np.testing.assert_array_equal(k, u)
        assert w.tobytes() == ref.tobytes()


def test_edge_keys_are_csr_order():
    """Ascending keys src*N+dst are row-major CSR order."""
    src, dst = np.array([2, 0, 1, 0]), np.array([0, 3, 1, 1])
    assert np.argsort(edge_keys(src, dst, 4)).tolist() == [3, 1, 2, 0]


def test_vertex_ids_and_string_ids(tmp_path):
    """String vertex ids round-trip through vertices.h5."""
    ids = np.array(["u:a", "u:b", "i:7", "i:8", "i:9"])
    write_dataset(tmp_path / "d", _raw(), num_vertices=N, vertex_ids=ids)
    with h5py.File(tmp_path / "d" / "vertices.h5") as f:
        assert [s.decode() for s in f["original_id"][()]] == ids.tolist()


def test_errors_leave_nothing_behind(tmp_path):
    """A failing write leaves neither the output nor its temporary directory."""
    root = tmp_path / "bad"
    bad = [RawSnapshot(src=np.array([0]), dst=np.array([1])), RawSnapshot(src=np.array([0]), dst=np.array([N]))]
    with pytest.raises(DataError, match=r"snapshot 1: vertex id outside \[0, 5\)"):
        write_dataset(root, iter(bad), num_vertices=N)
    assert list(tmp_path.iterdir()) == []  # neither the output nor the temporary directory remains
    with pytest.raises(DataError, match="no weights"):
        write_dataset(root, _raw(), num_vertices=N, weights="given")
    with pytest.raises(DataError, match="weights must be"):
        write_dataset(root, _raw(), num_vertices=N, weights="sum")
    with pytest.raises(DataError, match="not both"):
        write_dataset(root, _raw(), num_vertices=N, edge_life=2, mtransform_window=2)
    with pytest.raises(DataError, match="no snapshots"):
        write_dataset(root, iter([]), num_vertices=N)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def sigterm_unwinds():
    """SIGTERM raises KeyboardInterrupt in the main thread, as the commands' handler unwinds; put back after. A
    second thread runs meanwhile, as numpy's BLAS threads do in a command: one the signal can be delivered to."""
    import threading

    def stop(signum, frame):
        raise KeyboardInterrupt

    done = threading.Event()
    beside = threading.Thread(target=done.wait)
    beside.start()
    previous = signal.signal(signal.SIGTERM, stop)
    yield
    signal.signal(signal.SIGTERM, previous)
    done.set()
    beside.join()


def test_a_stop_signal_waits_until_the_hidden_directory_is_listed(tmp_path, monkeypatch, sigterm_unwinds):
    """SIGTERM sent as the hidden ``.d.tmp-*`` directory is made waits until it is on the list the unwinding
    clears. A signal mask held it back in the main thread only: numpy's threads took the signal, Python ran the
    handler in the main thread at once, and the directory stayed."""
    mkdtemp = tempfile.mkdtemp

    def signalled(*args, **kwargs):
        made = mkdtemp(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the signal delivered, by whichever thread
        return made

    monkeypatch.setattr(tempfile, "mkdtemp", signalled)
    with pytest.raises(KeyboardInterrupt):
        write_dataset(tmp_path / "d", _raw(), num_vertices=N)
    assert list(tmp_path.iterdir()) == []


def test_force_replaces_and_refuses_without(tmp_path):
    """A non-empty output is refused without force and replaced with it."""
    root = tmp_path / "d"
    write_dataset(root, _raw(), num_vertices=N)
    with pytest.raises(DataError, match="--force"):
        write_dataset(root, _raw(), num_vertices=N)
    m = write_dataset(root, _raw(EVENTS[:2]), num_vertices=N, force=True)
    assert load_manifest(root).num_snapshots == m.num_snapshots == 2


def _tree(root):
    return sorted((str(p.relative_to(root)), p.read_bytes() if p.is_file() else b"") for p in root.rglob("*"))


def _asides(parent: Path, name: str = "d") -> list[Path]:
    return sorted(parent.glob(f".{name}.old-*"))


def test_force_keeps_a_dataset_at_the_output_while_it_replaces_it(tmp_path, monkeypatch):
    """--force removed the earlier dataset, then renamed the new one in: a crash or SIGKILL between the two left no
    dataset at all. In every state the replacement passes through, the earlier dataset or the new one is whole at
    the output, or (between the two renames) the earlier one whole at its hidden name beside it."""
    root = tmp_path / "d"
    write_dataset(root, _raw(), num_vertices=N)
    old = _tree(root)
    states = []  # before each rename and removal: the output's tree, and the hidden earlier ones'
    rename, rmtree = os.rename, shutil.rmtree

    def seen():
        states.append((_tree(root) if root.is_dir() else None, [_tree(p) for p in _asides(tmp_path)]))

    def renamed(src, dst, *args, **kwargs):
        seen()
        return rename(src, dst, *args, **kwargs)

    def removed(path, *args, **kwargs):
        seen()
        return rmtree(path, *args, **kwargs)

    monkeypatch.setattr(os, "rename", renamed)
    monkeypatch.setattr(shutil, "rmtree", removed)
    write_dataset(root, _raw(EVENTS[:2]), num_vertices=N, force=True)
    seen()
    new = _tree(root)
    assert new != old and states[-1] == (new, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    for at_root, aside in states:
        assert at_root in (old, new) or (at_root is None and aside == [old]), (at_root, aside)


class _Crash(BaseException):
    """A process's end where it stands (SIGKILL, a node's crash): no ``except OSError`` puts anything back."""


def test_an_earlier_dataset_a_crash_left_aside_goes_with_the_next_prepare(tmp_path, monkeypatch):
    """A crash between the two renames leaves the earlier dataset at its hidden name, whole; the next prepare to
    that output removes it once its own dataset is in place, and one a crash left half removed; a user's folder of
    a like name stays."""
    root = tmp_path / "d"
    write_dataset(root, _raw(), num_vertices=N)
    old = _tree(root)
    rename = os.rename

    def crashing(src, dst, *args, **kwargs):
        if ".d.tmp-" in str(src):
            raise _Crash
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", crashing)
    with pytest.raises(_Crash):
        write_dataset(root, _raw(EVENTS[:2]), num_vertices=N, force=True)
    monkeypatch.setattr(os, "rename", rename)
    [aside] = _asides(tmp_path)
    assert not root.exists() and _tree(aside) == old
    half = tmp_path / ".d.old-0123abcd"  # a removal stopped part way: manifest.json gone first
    shutil.copytree(aside, half)
    (half / "manifest.json").unlink()
    mine = [tmp_path / ".d.old-89abcdef", tmp_path / ".d.old-mine"]
    for folder in mine:
        folder.mkdir()
        (folder / "notes.txt").write_text("mine")
    write_dataset(root, _raw(EVENTS[:3]), num_vertices=N)
    assert load_manifest(root).num_snapshots == 3
    assert _asides(tmp_path) == mine and sorted(p.name for p in tmp_path.iterdir()) == [p.name for p in mine] + ["d"]


def test_a_stop_signal_waits_for_the_renames(tmp_path, monkeypatch, sigterm_unwinds):
    """SIGTERM sent as the earlier dataset is set aside waits for the renames (not between them, where the output
    is empty); then the new dataset is whole in place and nothing is left to stop: the earlier one is removed and
    the command (:func:`stops_after_written`) ends as done, told of the signal (it unwound and said nothing was
    written, the earlier one left aside)."""
    root = tmp_path / "d"
    write_dataset(root, _raw(), num_vertices=N)
    rename = os.rename

    def signalled(src, dst, *args, **kwargs):
        if Path(src) == root:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the signal delivered, by whichever thread
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", signalled)
    with stops_after_written() as late:
        write_dataset(root, _raw(EVENTS[:2]), num_vertices=N, force=True)
    monkeypatch.setattr(os, "rename", rename)
    assert late == [(signal.SIGTERM, root)]
    assert load_manifest(root).num_snapshots == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_a_failed_rename_puts_the_earlier_dataset_back(tmp_path, monkeypatch):
    """The new dataset's rename into place fails (an I/O error): the earlier one, set aside, is put back, the line
    says so; where even that fails the line names where the earlier one is, and the next prepare removes it."""
    root = tmp_path / "d"
    write_dataset(root, _raw(), num_vertices=N)
    before = _tree(tmp_path)
    rename, failing = os.rename, [".d.tmp-"]

    def refused(src, dst, *args, **kwargs):
        if any(Path(src).name.startswith(name) for name in failing):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", refused)
    with pytest.raises(DataError, match=rf"^{root}: cannot move the finished dataset into place: Input/output error "
                                        r"\(this one is discarded; the earlier dataset is back in place\)$"):
        write_dataset(root, _raw(EVENTS[:2]), num_vertices=N, force=True)
    assert _tree(tmp_path) == before
    failing.append(".d.old-")
    with pytest.raises(DataError, match=r"\(this one is discarded; the earlier dataset is at "
                                        rf"{tmp_path}/\.d\.old-[0-9a-f]{{8}}\)$"):
        write_dataset(root, _raw(EVENTS[:2]), num_vertices=N, force=True)
    assert not root.exists() and len(_asides(tmp_path)) == 1
    failing.clear()
    write_dataset(root, _raw(EVENTS[:2]), num_vertices=N)
    assert load_manifest(root).num_snapshots == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    failing.append("d")  # the earlier dataset cannot be set aside: untouched
    after = _tree(tmp_path)
    with pytest.raises(DataError, match=rf"^{root}: cannot move the earlier dataset aside to replace it: "
                                        r"Input/output error \(it is untouched; this one is discarded\)$"):
        write_dataset(root, _raw(), num_vertices=N, force=True)
    assert _tree(tmp_path) == after


def test_force_replaces_only_an_earlier_dataset(tmp_path, monkeypatch):
    """``--force`` never removes what is not a dataset: a directory with other files (a run, the input's
    folder), a file; nor does any output replace a link or the working directory or one above it, even
    empty; each is one line, nothing touched."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    write_dataset(tmp_path / "ds", _raw(), num_vertices=N)
    (tmp_path / "ds" / "README").write_text("a file the user put beside the shards")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    (tmp_path / "empty").mkdir()
    (tmp_path / "elink").symlink_to(tmp_path / "empty")
    before = _tree(tmp_path)
    for out, why in [("mine", "not a dataset directory .notes.txt"), ("ds", "not a dataset directory .README"),
                     ("afile", "is a file"), ("link", "symbolic link")]:
        with pytest.raises(DataError, match=why):
            write_dataset(tmp_path / out, _raw(), num_vertices=N, force=True)
    monkeypatch.chdir(tmp_path / "mine")
    for out in (".", "..", str(tmp_path)):
        for force in (True, False):
            with pytest.raises(DataError, match="working directory"):
                write_dataset(out, _raw(), num_vertices=N, force=force)
    monkeypatch.chdir(tmp_path / "empty")  # empty, yet the dataset could not be renamed into place: refused
    with pytest.raises(DataError, match="working directory"):
        write_dataset(".", _raw(), num_vertices=N)
    with pytest.raises(DataError, match="symbolic link"):
        write_dataset(tmp_path / "elink", _raw(), num_vertices=N)
    with pytest.raises(DataError, match="cannot create the output here"):
        write_dataset(tmp_path / "afile" / "sub", _raw(), num_vertices=N)
    assert _tree(tmp_path) == before


def test_a_mount_point_is_no_output(tmp_path, monkeypatch):
    """A volume's root (``--output /data`` in a container) cannot be renamed over: ``--force`` emptied the earlier
    dataset there, then stopped in a traceback (EBUSY) keeping nothing. It is refused in one line before anything
    is removed, and a final rename that fails anyway (EBUSY, EACCES) is one line, with nothing left behind."""
    write_dataset(tmp_path / "vol", _raw(), num_vertices=N)
    before = _tree(tmp_path)
    vol, real = str(tmp_path / "vol"), os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: os.fspath(p) == vol or real(p))
    for force in (True, False):
        with pytest.raises(DataError, match=r"vol: output is a mount point.*give a directory inside it"):
            write_dataset(tmp_path / "vol", _raw(), num_vertices=N, force=force)
    assert _tree(tmp_path) == before
    monkeypatch.undo()

    def busy(self, target):
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))

    monkeypatch.setattr(Path, "rename", busy)
    with pytest.raises(DataError, match=r"new: cannot move the finished dataset into place: Device or resource busy"):
        write_dataset(tmp_path / "new", _raw(), num_vertices=N)
    assert _tree(tmp_path) == before


def test_no_output_inside_a_dataset(tmp_path):
    """An output inside a dataset directory (``--output ds/new``, or under its ``shards/``) was written there, and
    ``--force`` on the dataset then refused it as 'not a dataset directory'; it is one line, nothing written."""
    write_dataset(tmp_path / "ds", _raw(), num_vertices=N)
    before = _tree(tmp_path)
    for out in ("ds/new", "ds/shards/new", "ds/a/b"):
        for force in (True, False):
            with pytest.raises(DataError, match=r"output is inside the dataset .*ds; choose a directory outside"):
                write_dataset(tmp_path / out, _raw(), num_vertices=N, force=force)
    assert _tree(tmp_path) == before
    write_dataset(tmp_path / "ds2", _raw(), num_vertices=N)  # beside it: fine
    (tmp_path / "proj" / "shards").mkdir(parents=True)  # another tool's folder of that shape: fine
    (tmp_path / "proj" / "manifest.json").write_text('{"format": "webdataset"}')
    write_dataset(tmp_path / "proj" / "graphs" / "ds", _raw(), num_vertices=N)


def test_prepare_never_replaces_its_input(tmp_path):
    """The input file, or a directory holding it, is refused as ``--output`` even with ``--force``, before
    it is read."""
    from hpcdgnn.data.prepare import prepare_dataset

    raw = tmp_path / "in" / "edges.txt"
    raw.parent.mkdir()
    raw.write_text("".join(f"{i % 5} {(i + 1) % 5} {i}\n" for i in range(40)))
    for out in (raw, raw.parent, tmp_path):
        with pytest.raises(DataError, match="input"):
            prepare_dataset(raw, "snap", out, snapshots=2, force=True)
    assert raw.read_text().count("\n") == 40
    m = prepare_dataset(raw, "snap", tmp_path / "in2", snapshots=2)
    m2 = prepare_dataset(raw, "snap", tmp_path / "in2", snapshots=3, force=True)  # a dataset: replaced
    assert (m.num_snapshots, m2.num_snapshots) == (2, 3)


def test_human_bytes_names_sizes_beyond_gibibytes():
    """A refused output of petabytes read '1.72e+06 GiB': the largest binary unit that keeps the number >= 1."""
    assert [human_bytes(n) for n in (512, 1536, 3 * 2**30, 1.5 * 2**40, 1.72e6 * 2**30, 2**70)] == [
        "512 B", "1.5 KiB", "3 GiB", "1.5 TiB", "1.64 PiB", "1.02e+03 EiB"]


_KILLED_PREPARE = """
import os, signal, sys
import numpy as np
from hpcdgnn.data.writer import RawSnapshot, write_dataset

def snapshots():
    yield RawSnapshot(src=np.array([0]), dst=np.array([1]))
    yield RawSnapshot(src=np.array([1]), dst=np.array([2]))
    os.kill(os.getpid(), signal.SIGKILL)

write_dataset(sys.argv[1], snapshots(), num_vertices=5, shard_snapshots=1)
"""


def test_the_hidden_directory_of_a_killed_prepare_goes_with_the_next_one(tmp_path):
    """A prepare killed by SIGKILL left ``.d.tmp-*`` beside its output, shards and all, for ever; the next prepare to
    that output removes it once its writer is known to be gone. One whose writer runs (this process's), another
    boot's or host's, one holding a user's file, one without its writer's record (a user's folder so named) and
    another name stay."""
    import json
    import subprocess
    import sys

    from hpcdgnn.data.writer import prepare_output_dir, remove_temporary

    root = tmp_path / "d"
    done = subprocess.run([sys.executable, "-c", _KILLED_PREPARE, str(root)], cwd=Path(__file__).parents[2],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    [killed] = tmp_path.glob(".d.tmp-*")
    assert (killed / "shards" / "shard-00000.h5").is_file() and not root.exists()
    kept = {}
    for name in ("otherbt1", "userfil1", "norecrd1", "notmkdtemp"):
        kept[name] = tmp_path / f".d.tmp-{name}"
        shutil.copytree(killed, kept[name])
    record = json.loads((killed / ".writer.json").read_text()) if (killed / ".writer.json").is_file() else {}
    other = {**record, "host": "another-node", "boot": "another-boot"}
    (kept["otherbt1"] / ".writer.json").write_text(json.dumps(other))
    (kept["userfil1"] / "notes.txt").write_text("mine")
    (kept["norecrd1"] / ".writer.json").unlink(missing_ok=True)
    running = prepare_output_dir(root, False)  # a prepare writing now: this process's
    try:
        write_dataset(root, _raw(), num_vertices=N)
        assert load_manifest(root).num_snapshots == len(EVENTS)
        assert sorted(tmp_path.iterdir()) == sorted([root, running, *kept.values()])
        assert sorted(p.name for p in root.iterdir()) == ["manifest.json", "shards", "vertices.h5"]
    finally:
        remove_temporary(running)


@pytest.mark.parametrize("refused", [False, True])
def test_a_stop_while_generate_moves_its_dataset_in(tmp_path, monkeypatch, capsys, refused):
    """``generate --force`` over an earlier dataset, SIGTERM as the earlier one is set aside: the command said
    'stopped by SIGTERM; nothing it was writing is left', exit 143, with the new dataset whole in place and the
    earlier one left aside. Now it ends as done (0), the earlier one removed, and its line says the signal came.
    Where the new one's rename then fails (an I/O error), the held signal was dropped with the error: exit 2, as if
    never stopped. The stop decides there: exit 143, its one line keeping the rename's words (the earlier dataset
    back in place)."""
    from hpcdgnn.__main__ import main

    root = tmp_path / "g"
    args = ["generate", "--output", str(root), "--vertices", "50", "--density", "2", "--seed", "1", "--snapshots", "3"]
    assert main(args) == 0
    rename = os.rename

    def signalled(src, dst, *a, **k):
        if Path(src) == root:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        elif refused and Path(src).name.startswith(".g.tmp-"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return rename(src, dst, *a, **k)

    monkeypatch.setattr(os, "rename", signalled)
    capsys.readouterr()
    code, line = ((0, f"hpcdgnn: generate: SIGTERM came after {root} was written; the dataset is complete")
                  if not refused else
                  (143, f"hpcdgnn: generate: stopped by SIGTERM; {root}: cannot move the finished dataset into place: "
                   "Input/output error (this one is discarded; the earlier dataset is back in place)"))
    assert main([*args[:-1], "2", "--force"]) == code
    monkeypatch.setattr(os, "rename", rename)
    assert capsys.readouterr().err.splitlines()[-1] == line
    assert load_manifest(root).num_snapshots == (3 if refused else 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]


def test_a_stop_while_an_unrelated_error_is_handled_names_no_failure(tmp_path, monkeypatch, capsys):
    """SIGTERM to ``generate`` while its code handled an error of its own (here as the tree is synced): the stop line
    appended any error the stop interrupted, as if the dataset's rename had failed with it. Only the rename's own
    failure completes the line now."""
    import hpcdgnn.data.writer as writer
    from hpcdgnn.__main__ import main

    sync_tree = writer._sync_tree

    def signalled(tmp):
        try:
            raise DataError("a cache that was unreadable, and is rebuilt")
        except DataError:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        sync_tree(tmp)

    monkeypatch.setattr(writer, "_sync_tree", signalled)
    root = tmp_path / "g"
    assert main(["generate", "--output", str(root), "--vertices", "20", "--density", "2", "--seed", "1",
                 "--snapshots", "2"]) == 143
    said = capsys.readouterr().err.splitlines()[-1]
    assert said == "hpcdgnn: generate: stopped by SIGTERM; nothing it was writing is left"
    assert sorted(tmp_path.iterdir()) == []
