"""Float node targets in the shards (issue 14 item 4): pygt-json signals, ``--targets next_degree``, validation.

The expected values are recomputed here from the raw inputs with the rules the
module docstrings state (:mod:`hpcdgnn.data.prepare.pygt_json`, :mod:`hpcdgnn.data.prepare`),
never with the prepare code itself.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpcdgnn.data.inspect import inspect_dataset
from hpcdgnn.data.manifest import load_manifest, save_manifest
from hpcdgnn.data.prepare import prepare_dataset
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.data.validate import validate_dataset
from hpcdgnn.data.writer import RawSnapshot, file_sha256, write_dataset
from hpcdgnn.errors import DataError
from tests.conftest import REPO, SHARED_DATA, mpi_env


def _shared(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"{path} not present (the shared datasets live in shared/data beside the repository)")
    return path


def _targets(root: Path) -> np.ndarray:
    """(T, N) targets read back through the reader's cheap path."""
    m = load_manifest(root)
    with ShardReader(root, m) as r:
        return np.stack([r.read_targets(t) for t in range(m.num_snapshots)])


# --------------------------------------------------------------------------- pygt-json


def test_chickenpox_targets_are_pygt_targets(tmp_path):
    """Snapshot k's target is S[k + L] = FX[k + 4] (PyGT's targets[k]), bit for bit, for every k."""
    path = _shared("chickenpox.json.gz")
    fx = np.array(json.load(gzip.open(path))["FX"], dtype=np.float64)
    root = tmp_path / "cp"
    m = prepare_dataset(path, "pygt-json", root, labels="target_bins")  # labels and targets together
    assert m.targets == "signal" and m.num_snapshots == 521 - 4
    y = _targets(root)
    assert y.dtype == np.float64 and y.shape == (517, 20)
    assert np.array_equal(y, fx[4:])
    with ShardReader(root, m) as r:
        s = r.read(7)
        assert np.array_equal(s.targets, fx[11])
        assert s.labels.tolist() == (fx[11] > np.median(fx[11])).astype(int).tolist()


def test_england_covid_targets_are_the_zscored_signal(tmp_path):
    """england_covid: S = y z-scored per node (PyGT's loader), target of k = S[k + L] with --lags 8."""
    path = _shared("england_covid.json.gz")
    raw = np.array(json.load(gzip.open(path))["y"], dtype=np.float64)
    s = (raw - raw.mean(axis=0)) / (raw.std(axis=0) + 1e-10)
    root = tmp_path / "en"
    prepare_dataset(path, "pygt-json", root, lags=8)
    np.testing.assert_allclose(_targets(root), s[8:], rtol=1e-12, atol=1e-12)


def test_twitter_tennis_targets_log_next_y_and_nan_last(tmp_path):
    """twitter_tennis: target of t is log(1 + y_{t+1}); the last snapshot has none (NaN)."""
    path = _shared("twitter_tennis_rg17.json.gz")
    d = json.load(gzip.open(path))
    root = tmp_path / "tw"
    m = prepare_dataset(path, "pygt-json", root)
    assert m.targets == "log1p_next_y" and m.num_snapshots == 120
    y = _targets(root)
    want = np.stack([np.log(1.0 + np.array(d[str(t + 1)]["y"], dtype=np.float64)) for t in range(119)])
    assert np.array_equal(y[:119], want)
    assert np.isnan(y[119]).all()
    r = inspect_dataset(root, checksums=False)
    assert r["valid"] and r["targets"] == "log1p_next_y" and r["target_values"]["count"] == 119 * 1000


# --------------------------------------------------------------------------- edge lists: --targets

# t: 10 11 12 | 20 21 22 | 30  -> --snapshots 3: slices [10, 16.7), [16.7, 23.3), [23.3, 30]
TINY = """# a SNAP-style comment
1 2 10
2 3 11
1 1 12
3 1 20
3 4 21
4 3 22
2 4 30
"""
# distinct neighbours (either direction) in snapshot 1 {3-1, 3-4, 4-3} and 2 {2-4}, for ids 1..4
NEXT_DEGREE = [[1, 0, 2, 1], [0, 1, 0, 1]]


@pytest.mark.parametrize("undirected", [False, True])
def test_snap_next_degree_exact(tmp_path, undirected):
    """next_degree of t = distinct neighbours in t+1 (the same for --undirected); the last is NaN."""
    src = tmp_path / "tiny.txt"
    src.write_text(TINY)
    root = tmp_path / "d"
    m = prepare_dataset(src, "snap", root, snapshots=3, targets="next_degree", undirected=undirected,
                        labels="next_activity")
    assert m.targets == "next_degree" and m.num_snapshots == 3
    y = _targets(root)
    assert y[:2].tolist() == NEXT_DEGREE
    assert np.isnan(y[2]).all()
    with ShardReader(root, m) as r:  # next_activity is exactly "next_degree > 0"
        for t in range(2):
            assert r.read(t).labels.tolist() == (y[t] > 0).astype(int).tolist()
    log_root = tmp_path / "log"
    prepare_dataset(src, "snap", log_root, snapshots=3, targets="next_log_degree", edge_life=2)
    assert np.array_equal(_targets(log_root)[:2], np.log1p(np.array(NEXT_DEGREE, dtype=np.float64)))


def test_network_repository_edges_file(tmp_path):
    """A '%'-headed Network Repository .edges file (u v weight time) reads as snap, with targets."""
    src = tmp_path / "ia-tiny.edges"
    rows = (ln.split() for ln in TINY.splitlines()[1:])
    lines = ["% sym weighted", "% 7 4 4"] + [f"{a} {b} 2.5 {t}" for a, b, t in rows]
    src.write_text("\n".join(lines) + "\n")
    root = tmp_path / "nr"
    m = prepare_dataset(src, "snap", root, snapshots=3, targets="next_degree", weights="given")
    assert (m.num_vertices, m.snapshot_edges) == (4, [3, 3, 1])
    y = _targets(root)
    assert y[:2].tolist() == NEXT_DEGREE and np.isnan(y[2]).all()
    with ShardReader(root, m) as r:
        assert r.read(1).weights.tolist() == [2.5, 2.5, 2.5]


def test_targets_option_errors(tmp_path):
    """--targets on pygt-json (which always stores its signal) or an unknown name: one line naming it."""
    src = tmp_path / "tiny.txt"
    src.write_text(TINY)
    with pytest.raises(DataError, match=r"unknown --targets 'degree'"):
        prepare_dataset(src, "snap", tmp_path / "a", snapshots=3, targets="degree")
    with pytest.raises(DataError, match=r"--targets next_degree applies only to --format snap or jodie"):
        prepare_dataset(_shared("pedalme_london.json.gz"), "pygt-json", tmp_path / "b", targets="next_degree")


def test_snap_without_targets_has_none(tmp_path):
    """No --targets: the manifest says null, the reader refuses read_targets in one line."""
    src = tmp_path / "tiny.txt"
    src.write_text(TINY)
    root = tmp_path / "d"
    m = prepare_dataset(src, "snap", root, snapshots=3)
    assert m.targets is None
    with ShardReader(root, m) as r:
        assert r.read(0).targets is None
        with pytest.raises(DataError, match="stores no node targets"):
            r.read_targets(0)


# --------------------------------------------------------------------------- writer, manifest, validate


def _written(root: Path, T: int = 3, N: int = 5) -> Path:
    def snaps():
        for t in range(T):
            y = np.arange(N, dtype=np.float64) + 10 * t
            y[t % N] = np.nan
            yield RawSnapshot(np.array([0, 1]), np.array([1, 2]), targets=y)

    write_dataset(root, snaps(), num_vertices=N, targets="test", shard_snapshots=2)
    return root


def _reseal(root: Path, file: str) -> None:
    m = load_manifest(root)
    path = root / "shards" / file
    shards = [dataclasses.replace(s, bytes=path.stat().st_size, sha256=file_sha256(path)) if s.file == file else s
              for s in m.shards]
    save_manifest(root, dataclasses.replace(m, shards=shards))


def test_writer_refuses_inf_and_missing_targets(tmp_path):
    """Inf (NaN is the only 'no target') or a snapshot without targets: a DataError, nothing written."""
    bad = RawSnapshot(np.array([0]), np.array([1]), targets=np.array([1.0, np.inf]))
    with pytest.raises(DataError, match=r"snapshot 0: targets contain Inf"):
        write_dataset(tmp_path / "a", [bad], num_vertices=2, targets="x")
    with pytest.raises(DataError, match=r"snapshot 0: targets 'x' requested but the snapshot has none"):
        write_dataset(tmp_path / "b", [RawSnapshot(np.array([0]), np.array([1]))], num_vertices=2, targets="x")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_old_manifest_without_targets_key_loads(tmp_path):
    """A manifest written before targets existed (no key) loads as 'no targets'; a bad value is one line."""
    root = _written(tmp_path / "d")
    path = root / "manifest.json"
    raw = json.loads(path.read_text())
    assert raw["targets"] == "test"
    del raw["targets"]
    path.write_text(json.dumps(raw))
    assert load_manifest(root).targets is None
    raw["targets"] = 3
    path.write_text(json.dumps(raw))
    with pytest.raises(DataError, match=r"manifest.json: 'targets' must be null or the name"):
        load_manifest(root)


def test_validate_catches_corrupt_targets(tmp_path):
    """Wrong dtype, wrong shape, Inf, a missing array: each is one problem naming shard, group and array."""
    root = _written(tmp_path / "d")
    assert validate_dataset(root) == []
    assert np.isnan(_targets(root)[1, 1]) and _targets(root)[2, 0] == 20.0
    shard = root / "shards" / "shard-00000.h5"
    cases = {
        "t000000": (lambda g: g.create_dataset("targets", data=np.arange(5, dtype=np.int64)),
                    "'targets' has dtype int64, expected float64 (or float32)"),
        "t000001": (lambda g: g.create_dataset("targets", data=np.zeros(4)), "'targets' has shape (4,), expected (5,)"),
    }
    with h5py.File(shard, "r+") as f:
        for name, (make, _) in cases.items():
            del f[f"{name}/targets"]
            make(f[name])
    _reseal(root, "shard-00000.h5")
    shard1 = root / "shards" / "shard-00001.h5"
    with h5py.File(shard1, "r+") as f:
        f["t000002/targets"][3] = -np.inf
    _reseal(root, "shard-00001.h5")
    problems = validate_dataset(root)
    assert problems == [
        f"{shard}: t000000: {cases['t000000'][1]}",
        f"{shard}: t000001: {cases['t000001'][1]}",
        f"{shard1}: t000002: 'targets' contains Inf (first at vertex 3: -inf); NaN is the only 'no target' mark",
    ]
    # the command line: exit 2, one error line naming the first fault
    proc = subprocess.run([sys.executable, "-m", "hpcdgnn", "validate", str(root)], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env=mpi_env())
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert len(errors) == 1 and cases["t000000"][1] in errors[0], proc.stderr
    with ShardReader(root, load_manifest(root)) as r:  # the reader refuses the int array too
        with pytest.raises(DataError, match=r"t000000/targets' is int64"):
            r.read_targets(0)
