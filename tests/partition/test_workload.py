"""Chunk workload models the plan consumes (DGC §4.2, §6): features, the count fallback, the MLP predictor file.

Making a predictor (random chunks, timing, fitting, ``python -m hpcdgnn profile``) is tested in tests/profile.
"""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import numpy as np
import pytest

from hpcdgnn.errors import PlanError
from hpcdgnn.nn.models import GraphModelOptions
from hpcdgnn.partition.chunks import build_supergraph, chunk_stats, label_propagation
from hpcdgnn.partition.workload import (
    STRUCTURE_INPUTS,
    TIME_INPUTS,
    CountWorkload,
    MLPWorkload,
    chunk_features,
    chunk_work,
    default_predictor_path,
    layer_shapes,
)
from hpcdgnn.profile.fit import fit_mlp


def _hand_made():
    """N = 4, T = 3. Appearances (Eq. 1 ids): t0: v0 v1 v2 = 0 1 2; t1: v0 v1 = 3 4; t2: v0 v2 v3 = 5 6 7."""
    snaps = [(np.array([0, 1]), np.array([1, 2])), (np.array([0]), np.array([1])), (np.array([2, 0]), np.array([3, 3]))]
    return build_supergraph(snaps, 4, spatial_weight=1.0, temporal_weight=1.0)


def test_features_on_a_hand_made_supergraph():
    """Every feature of two chunks counted by hand (DGC §4.2's chunk, feature and sequence sizes)."""
    g = _hand_made()
    assert g.num_nodes == 8
    # chunk 0: v0, v1 at t0 and t1 (a block of two sequences); chunk 1: v2@t0, v0@t2, v2@t2, v3@t2
    labels = np.array([0, 0, 1, 0, 0, 1, 1, 1])
    f = chunk_features(g, labels)
    assert f["nodes"].tolist() == [4, 4]
    assert f["spatial_edges"].tolist() == [2, 2]  # (0,1), (3,4) | (5,7), (6,7); (1,2) is cut
    # Ã rows: self-loops + spatial degrees (1+2+1+1 | 1+1+1+2), halo columns included
    assert f["row_nnz"].tolist() == [9, 9]
    assert f["snapshots"].tolist() == [2, 2]
    assert f["sequences"].tolist() == [2, 3]  # {v0, v1} | {v2, v0, v3}
    assert f["total_length"].tolist() == [4, 4]
    assert f["max_length"].tolist() == [2, 2]  # v0 twice | v2 twice
    assert f["padded"].tolist() == [4, 6]
    # label -1 = in no chunk: node 7 (v3@t2) left out of chunk 1
    f2 = chunk_features(g, np.array([0, 0, 1, 0, 0, 1, 1, -1]))
    assert f2["nodes"].tolist() == [4, 3] and f2["spatial_edges"].tolist() == [2, 0]
    assert f2["row_nnz"].tolist() == [9, 6] and f2["sequences"].tolist() == [2, 2]


def test_features_match_a_loop_reference():
    """The vectorised features equal a per-chunk loop on label-propagation chunks."""
    rng = np.random.default_rng(3)
    snaps = [(rng.integers(0, 30, 50), rng.integers(0, 30, 50)) for _ in range(6)]
    g = build_supergraph(snaps, 30, 2.0, 1.0)
    labels, _ = label_propagation(g, max_size=25)
    f = chunk_features(g, labels)
    sp = list(zip(g.src[g.spatial].tolist(), g.dst[g.spatial].tolist(), strict=True))
    for c in range(int(labels.max()) + 1):
        members = set(np.flatnonzero(labels == c).tolist())
        verts = g.vertex[labels == c]
        assert f["spatial_edges"][c] == sum(a in members and b in members for a, b in sp)
        assert f["row_nnz"][c] == len(members) + sum((a in members) + (b in members) for a, b in sp)
        assert f["snapshots"][c] == len(set(g.time[labels == c].tolist()))
        assert f["sequences"][c] == len(set(verts.tolist()))
        assert f["max_length"][c] == np.bincount(verts).max()


def test_count_model_is_the_old_formula():
    """``workload: count`` is exactly the plan's former nodes + spatial edges."""
    rng = np.random.default_rng(1)
    snaps = [(rng.integers(0, 40, 80), rng.integers(0, 40, 80)) for _ in range(5)]
    g = build_supergraph(snaps, 40, 4.0, 2.0)
    labels, _ = label_propagation(g, max_size=30)
    stats = chunk_stats(g, labels)
    old = (stats["nodes"] + stats["spatial_edges"]).astype(float)
    assert np.array_equal(CountWorkload().chunk_work(g, labels, stats), old)
    job = SimpleNamespace(strategy=SimpleNamespace(workload="count", predictor=None))
    got = chunk_work(job, 2, g, labels, stats)
    assert got.dtype == np.float64 and np.array_equal(got, old)


def _tiny_predictor(model="cdgcn", features=(2,), hidden=(6,), dtype="float64") -> MLPWorkload:
    rng = np.random.default_rng(5)
    xs, xt = rng.normal(size=(40, len(STRUCTURE_INPUTS))), rng.normal(size=(40, len(TIME_INPUTS)))
    s = fit_mlp(xs, np.exp(xs[:, 0]) * 1e-4, STRUCTURE_INPUTS, width=8, steps=50)
    t = fit_mlp(xt, np.exp(xt[:, 0]) * 1e-4, TIME_INPUTS, width=8, steps=50)
    meta = {"model": model, "device": "cpu", "dtype": dtype, "features": list(features), "hidden": list(hidden),
            "window": 3}
    return MLPWorkload(s, t, meta)


def test_save_load_round_trip_predicts_the_same(tmp_path):
    """A saved and reloaded predictor gives bit-identical chunk work; wrong widths and junk files are refused."""
    rng = np.random.default_rng(2)
    snaps = [(rng.integers(0, 40, 80), rng.integers(0, 40, 80)) for _ in range(5)]
    g = build_supergraph(snaps, 40, 4.0, 2.0)
    labels, _ = label_propagation(g, max_size=30)
    stats = chunk_stats(g, labels)
    pred = _tiny_predictor()
    path = pred.save(tmp_path / "sub" / "w.pt")
    assert sorted(p.name for p in path.parent.iterdir()) == ["w.pt"]  # written atomically: no temporary left
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600: the group may read it
    back = MLPWorkload.load(path)
    shapes = layer_shapes("cdgcn", 2, 6, 2)
    a, b = pred.chunk_work(g, labels, stats, shapes), back.chunk_work(g, labels, stats, shapes)
    assert a.shape == (stats["num_chunks"],) and np.all(a > 0) and np.array_equal(a, b)
    assert back.meta == pred.meta
    # the plan's entry point: mlp with an explicit file; a model the file was not profiled for is refused
    job = SimpleNamespace(strategy=SimpleNamespace(workload="mlp", predictor=str(path)),
                          model=GraphModelOptions(name="cdgcn", hidden=6, layers=2),
                          train=SimpleNamespace(device="cpu", dtype="float64"))
    assert np.array_equal(chunk_work(job, 2, g, labels, stats), a)
    wide = SimpleNamespace(**{**vars(job), "model": GraphModelOptions(name="cdgcn", hidden=64, layers=2)})
    with pytest.raises(PlanError, match=r"profiled for hidden \[6\].*--hidden 64"):
        chunk_work(wide, 2, g, labels, stats)
    (tmp_path / "junk.pt").write_bytes(b"not a predictor")
    with pytest.raises(PlanError, match=r"junk.pt' cannot be read: not a predictor file written by .*\(\w+Error: "):
        MLPWorkload.load(tmp_path / "junk.pt")


def test_default_path_is_per_machine_model_device_dtype(tmp_path, monkeypatch):
    """The default file lives in $HPCDGNN_CACHE and names model, device and dtype."""
    monkeypatch.setenv("HPCDGNN_CACHE", str(tmp_path))
    p = default_predictor_path("tgcn", "cpu", "float32")
    assert p.parent == tmp_path and p.name.startswith("workload-") and p.name.endswith("-tgcn-cpu-float32.pt")


def test_a_saved_predictor_reaches_the_disk_before_its_name(tmp_path, monkeypatch):
    """Renamed into place before its data reached the disk, a predictor could be empty after a node's crash (then
    every chunk plan naming it is refused until it is profiled again): synced before its rename."""
    from tests.synced import SyncLog

    log = SyncLog(monkeypatch)
    path = _tiny_predictor().save(tmp_path / "w.pt")
    assert log.durable(path) == ""
