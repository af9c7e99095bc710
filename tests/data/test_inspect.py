"""Tests of hpcdgnn.data.inspect: statistics (overlap) and validation of damaged datasets."""

from __future__ import annotations

import argparse
import dataclasses
import json

import h5py
import numpy as np
import pytest

from hpcdgnn.data.inspect import add_inspect_arguments, inspect_dataset, run_inspect
from hpcdgnn.data.manifest import empty_snapshots_note, load_manifest, save_manifest
from hpcdgnn.data.writer import RawSnapshot, file_sha256, write_dataset
from hpcdgnn.errors import DataError

# E0 = {01, 12}, E1 = {01, 20, 23}, E2 = {}, E3 = {01, 12, 20, 23}
EVENTS = [[(0, 1), (1, 2)], [(0, 1), (2, 0), (2, 3), (2, 3)], [], [(0, 1), (1, 2), (2, 0), (2, 3)]]


def _dataset(root, **kw):
    snaps = (
        RawSnapshot(src=np.array([s for s, _ in ev], dtype=np.int64), dst=np.array([d for _, d in ev], dtype=np.int64))
        for ev in EVENTS
    )
    write_dataset(root, snaps, num_vertices=4, shard_snapshots=2, **kw)
    return root


def _reseal(root, shard_index=0):
    """Make the manifest's size/sha256 match a shard edited in place, so only the edit is a problem."""
    m = load_manifest(root)
    shards = list(m.shards)
    path = root / "shards" / shards[shard_index].file
    shards[shard_index] = dataclasses.replace(shards[shard_index], bytes=path.stat().st_size, sha256=file_sha256(path))
    save_manifest(root, dataclasses.replace(m, shards=shards))


def _args(root, *extra):
    p = argparse.ArgumentParser(prog="hpcdgnn inspect")
    add_inspect_arguments(p)
    return p.parse_args([str(root), *extra])


def test_statistics_and_overlap(tmp_path):
    """nnz/edge summaries and |E_t ∩ E_t+1| / |E_t+1| on a hand-made dataset."""
    r = inspect_dataset(_dataset(tmp_path / "d"))
    assert r["valid"] and r["problems"] == []
    assert (r["num_vertices"], r["num_snapshots"], r["num_features"]) == (4, 4, 2)
    assert r["edges"] == {"min": 0, "median": 2.5, "max": 4, "total": 9}
    assert r["nnz"] == r["edges"]
    # pairs (0,1): |{01}| / 3; (1,2): E2 empty, skipped; (2,3): |{}| / 4
    assert r["overlap"] == {"mean": pytest.approx(1 / 6), "min": 0.0, "max": pytest.approx(1 / 3), "pairs": 2}
    # a snapshot without edges is named: a split falling among such snapshots has no examples
    assert r["empty_snapshots"] == [2] and r["note"].startswith("1 of 4 snapshots have no edges (t = 2)")
    json.dumps(r)  # JSON-ready


def test_empty_snapshots_note_names_runs():
    assert empty_snapshots_note([1, 2]) is None
    assert empty_snapshots_note([1, 0, 0, 3, 0]).startswith("3 of 5 snapshots have no edges (t = 1-2, 4); ")
    assert "(t = 0, 2, 4, 6, 8, 10, ...)" in empty_snapshots_note([0, 1] * 8)


def test_overlap_uses_trained_adjacency(tmp_path):
    """With edge-life the overlap and nnz are those of the smoothed A_t."""
    r = inspect_dataset(_dataset(tmp_path / "d", edge_life=2))
    # A_t = E_{t-1} ∪ E_t: A0 = {01,12}, A1 = {01,12,20,23}, A2 = A1, A3 = E3 = A1
    assert r["nnz"]["total"] == 2 + 4 + 3 + 4 and r["edges"]["total"] == 9
    assert r["overlap"]["pairs"] == 3
    assert r["overlap"]["min"] == pytest.approx(0.5) and r["overlap"]["max"] == 1.0


def test_run_inspect_report(tmp_path, capsys):
    """run_inspect prints a readable report (or JSON) and returns 0 on a valid dataset."""
    root = _dataset(tmp_path / "d")
    assert run_inspect(_args(root)) == 0
    out = capsys.readouterr().out
    assert "N = 4" in out and "valid     yes" in out and "(2 pairs)" in out
    assert "  note      1 of 4 snapshots have no edges (t = 2); a split that falls among them" in out
    assert run_inspect(_args(root, "--json", "--no-checksums")) == 0
    assert json.loads(capsys.readouterr().out)["checksums_verified"] is False


def test_truncated_shard(tmp_path, capsys):
    """A truncated shard is reported with its file name; run_inspect raises DataError."""
    root = _dataset(tmp_path / "d")
    shard = root / "shards" / "shard-00001.h5"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    r = inspect_dataset(root)
    assert not r["valid"]
    assert any(str(shard) in p and "truncated" in p for p in r["problems"])
    with pytest.raises(DataError, match=r"shard-00001\.h5: \d+ bytes but manifest says \d+ \(truncated"):
        run_inspect(_args(root))
    assert "valid     NO" in capsys.readouterr().out


def test_nan_feature(tmp_path):
    """A NaN in x is the one problem reported, naming the shard, snapshot and position."""
    root = _dataset(tmp_path / "d")
    shard = root / "shards" / "shard-00000.h5"
    with h5py.File(shard, "r+") as f:
        f["t000001/x"][2, 1] = np.nan
    _reseal(root)
    r = inspect_dataset(root)
    assert r["problems"] == [f"{shard}: t000001: 'x' contains NaN or Inf (first at vertex 2, feature 1)"]
    with pytest.raises(DataError, match=r"shard-00000\.h5: t000001: 'x' contains NaN"):
        run_inspect(_args(root))


def test_checksum_missing_shard_and_bad_indices(tmp_path):
    """A same-size edit fails the checksum and the index range check; a missing shard is named."""
    root = _dataset(tmp_path / "d")
    shard0 = root / "shards" / "shard-00000.h5"
    with h5py.File(shard0, "r+") as f:
        f["t000000/indices"][0] = 7  # outside [0, 4); same size, so only the checksum betrays it
    r = inspect_dataset(root)
    assert any("sha256 differs" in p for p in r["problems"])
    assert any("t000000: 'indices' has a vertex outside [0, 4)" in p for p in r["problems"])
    assert not any("sha256" in p for p in inspect_dataset(root, checksums=False)["problems"])
    (root / "shards" / "shard-00001.h5").unlink()
    r = inspect_dataset(root)
    assert any("shard-00001.h5: shard file missing (snapshots 2..3)" in p for p in r["problems"])


def test_wrong_dtype_and_manifest_count(tmp_path):
    """A dataset of the wrong dtype and a manifest count that disagrees are both reported."""
    root = _dataset(tmp_path / "d")
    shard = root / "shards" / "shard-00000.h5"
    with h5py.File(shard, "r+") as f:
        w = f["t000001/weights"][()]
        del f["t000001/weights"]
        f["t000001/weights"] = w.astype(np.float64)
    _reseal(root)
    m = load_manifest(root)
    save_manifest(root, dataclasses.replace(m, snapshot_edges=[2, 3, 0, 5]))
    problems = inspect_dataset(root)["problems"]
    assert f"{shard}: t000001: 'weights' has dtype float64, expected float32" in problems
    assert any("t000003: raw edges 4 but manifest says 5" in p for p in problems)


def test_missing_manifest(tmp_path):
    """Without a manifest nothing can be checked: DataError at once."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"manifest\.json: missing"):
        inspect_dataset(tmp_path / "empty")


def test_a_reader_that_leaves_ends_inspect_quietly(tmp_path):
    """``inspect --json | head``: the pipe closed before inspect writes ends it with SIGPIPE's shell code and no
    traceback (a shell tool's behaviour), not a BrokenPipeError traceback."""
    import os
    import subprocess
    import sys

    from hpcdgnn.__main__ import EXIT_BROKEN_PIPE
    from tests.conftest import REPO

    root = _dataset(tmp_path / "d")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command starts
    proc = subprocess.run([sys.executable, "-m", "hpcdgnn", "inspect", str(root), "--json"], stdout=write,
                          stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=120)
    os.close(write)
    assert proc.returncode == EXIT_BROKEN_PIPE and proc.stderr == "", proc.stderr


def _labelled(root, ones: int, steps: int = 10):
    """``steps`` snapshots of 10 vertices, ``ones`` of them class 1, the rest 0; the last snapshot unlabelled."""
    labels = np.array([1] * ones + [0] * (10 - ones))
    snaps = (RawSnapshot(src=np.array([0]), dst=np.array([1]), labels=labels if t < steps - 1 else np.full(10, -1))
             for t in range(steps))
    write_dataset(root, snaps, num_vertices=10, num_classes=2, shard_snapshots=4)
    return root


def test_class_balance_of_the_training_snapshots(tmp_path, capsys):
    """A labelled dataset's class shares were not shown: a rare class (twitter_tennis' target_bins: 18.6 % above
    the median) made a node-classification accuracy mostly the majority class's, unseen. inspect now gives each
    class's share per split and a note when one is below half an even share."""
    r = inspect_dataset(_labelled(tmp_path / "rare", ones=2))
    assert r["valid"], r["problems"]
    b = r["class_balance"]
    assert b["split"] == [0.7, 0.15, 0.15]
    assert b["train"] == {"snapshots": [0, 7], "labelled": 70, "fractions": [0.8, 0.2]}
    assert b["val"] == {"snapshots": [7, 8], "labelled": 10, "fractions": [0.8, 0.2]}
    assert b["test"] == {"snapshots": [8, 10], "labelled": 10, "fractions": [0.8, 0.2]}  # t = 9: none
    assert r["class_note"].startswith("class 1 is 20.0 % of the labelled vertices of the training snapshots (0-6 "
                                      "under task.split's default 0.7/0.15/0.15): always answering class 0 scores "
                                      "accuracy 0.800 there and 0.800 on the validation snapshots")
    json.dumps(r)
    assert run_inspect(_args(tmp_path / "rare")) == 0
    out = capsys.readouterr().out
    assert ("  classes   0 80.0 %, 1 20.0 % of the 70 labelled vertices of the training snapshots 0-6 (task.split's "
            "default 0.7/0.15/0.15)\n") in out, out
    assert f"  note      {r['class_note']}\n" in out, out
    even = inspect_dataset(_labelled(tmp_path / "even", ones=3))
    assert even["class_balance"]["train"]["fractions"] == [0.7, 0.3] and even["class_note"] is None
    unlabelled = inspect_dataset(_dataset(tmp_path / "none"))
    assert unlabelled["class_balance"] is None and unlabelled["class_note"] is None
    assert run_inspect(_args(tmp_path / "none")) == 0
    assert "classes   " not in capsys.readouterr().out
    assert run_inspect(_args(_labelled(tmp_path / "one", ones=2, steps=1))) == 0  # its one snapshot: no label
    assert "  classes   no labelled vertex of the training snapshots 0-0" in capsys.readouterr().out
