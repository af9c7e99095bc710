"""A rank reads only what it needs (issue 11, item 6): ``ShardReader.read_rows`` and the vertex / chunk set-up.

The MPI part runs ``tests/mpi/reads_check.py`` under ``mpirun -np 3``: each rank's set-up reads only
its rows (rows and entries summed over ranks = the dataset, once), opens only the shards they lie
in, and gets the same Ã and Ã·X, bit for bit, as when every rank read every snapshot in full.
"""

from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pytest

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.errors import DataError
from tests.conftest import REPO, SMALL_N, SMALL_T, json_records, make_dataset, write_job


def _full_bytes(root, manifest) -> int:
    """Bytes of indptr, indices, weights and x over all snapshots: what reading every row costs."""
    with ShardReader(root, manifest) as r:
        r.max_gap_bytes = 0
        for t in range(manifest.num_snapshots):
            r.read_rows(t, np.arange(manifest.num_vertices))
        return r.bytes_read


@pytest.mark.parametrize("gap", [0, 16, 4096])
def test_read_rows_matches_full_read(tmp_path, gap):
    """Any rows, read with any gap setting, are exactly those rows of the full read; counters add up."""
    root = make_dataset(tmp_path / "d", T=5, N=61, m=300)
    m = load_manifest(root)
    rng = np.random.default_rng(gap)
    with ShardReader(root, m) as full, ShardReader(root, m) as r:
        r.max_gap_bytes = gap
        asked = entries = 0
        for t in range(m.num_snapshots):
            s = full.read(t)
            for rows in ([], [60], [0, 1, 2, 60], np.arange(61), np.sort(rng.choice(61, 20, replace=False))):
                rows = np.asarray(rows, dtype=np.int64)
                b = r.read_rows(t, rows, x=len(rows) != 4)
                idx = np.concatenate([np.arange(s.indptr[v], s.indptr[v + 1]) for v in rows] + [np.zeros(0, int)])
                assert np.array_equal(np.diff(b.indptr), np.diff(s.indptr)[rows]) and b.indptr[0] == 0
                assert np.array_equal(b.indices, s.indices[idx]) and np.array_equal(b.weights, s.weights[idx])
                assert (b.x is None) if len(rows) == 4 else np.array_equal(b.x, s.x[rows])
                asked, entries = asked + len(rows), entries + len(idx)
        assert (r.rows_read, r.entries_read) == (asked, entries)
        assert r.shards_opened == len(m.shards)
    # nothing asked for: nothing opened, nothing read
    with ShardReader(root, m) as r:
        b = r.read_rows(0, [])
        assert b.indptr.tolist() == [0] and b.x.shape == (0, m.num_features)
        assert (r.shards_opened, r.bytes_read) == (0, 0)
        with pytest.raises(ValueError, match="sorted, unique"):
            r.read_rows(0, [3, 2])


def test_read_rows_reads_only_those_rows(tmp_path):
    """Gaps are not read with max_gap_bytes = 0: the bytes are the rows' own (plus their row pointers)."""
    root = make_dataset(tmp_path / "d", T=3, N=400, m=2000)
    m = load_manifest(root)
    full = _full_bytes(root, m)
    with ShardReader(root, m) as r:
        r.max_gap_bytes = 0
        for t in range(3):
            r.read_rows(t, np.arange(0, 400, 10))  # a tenth of the rows, none next to another
        assert r.rows_read == 120 and full / 20 < r.bytes_read < full / 4
    with ShardReader(root, m) as r:  # the default reads small gaps with their neighbours, in one slice
        for t in range(3):
            r.read_rows(t, np.arange(0, 400, 10))
        assert r.rows_read == 120 and r.bytes_read <= full


def test_read_rows_errors_name_the_file(tmp_path):
    """A missing dataset or a wrong shape is a one-line DataError naming the shard (as for full reads)."""
    root = make_dataset(tmp_path / "d", T=4, N=20, m=50)
    path = root / "shards" / "shard-00000.h5"
    with h5py.File(path, "r+") as f:
        del f["t000001/x"]
        w = f["t000002/weights"][()]
        del f["t000002/weights"]
        f["t000002/weights"] = w[:-1]
    m = load_manifest(root)
    shards = [dataclasses.replace(s, bytes=(root / "shards" / s.file).stat().st_size) for s in m.shards]
    m = dataclasses.replace(m, shards=shards)
    with ShardReader(root, m) as r:
        r.read_rows(0, [1, 2])
        with pytest.raises(DataError, match=r"shard-00000\.h5: dataset 't000001/x' missing"):
            r.read_rows(1, [1, 2])
        r.read_rows(1, [1, 2], x=False)
        with pytest.raises(DataError, match=r"shard-00000\.h5: 't000002/weights' has shape \(\d+,\), expected first"):
            r.read_rows(2, [3])


def _check(launcher, np_: int, args: list[str]) -> list[dict]:
    script = str(REPO / "tests" / "mpi" / "reads_check.py")
    out = launcher.run(np_, [script, *args], timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json_records(out.stdout)


def test_each_rank_reads_its_share(launcher, small_dataset, tmp_path):
    """Vertex (range, hash) and chunk at P = 3, T = 7 and N = 23 over 3 shards; bit-identical set-up."""
    assert SMALL_T % 3 and SMALL_N % 3
    m = load_manifest(small_dataset)
    assert len(m.shards) == 3
    total_rows, total_nnz = SMALL_N * SMALL_T, int(sum(m.snapshot_nnz))
    full = _full_bytes(small_dataset, m)
    two = make_dataset(tmp_path / "two", T=5, N=2, m=4)  # P > N: a rank with no vertex
    cases = ["vertex:range:cdgcn:float64:0", "vertex:hash:cdgcn:float32:0", "chunk:cdgcn:float64:0",
             "chunk:dysat:float32", "block:float64"]
    recs = _check(launcher, 3, [str(write_job(tmp_path / "job.yaml", small_dataset)), *cases,
                                str(write_job(tmp_path / "two.yaml", two)), "vertex:range:cdgcn:float64"])
    by = {}
    for r in recs:
        by.setdefault((r["job"], r["case"]), []).append(r)
    assert len(by) == len(cases) + 1 and all(len(v) == 3 for v in by.values())
    for (job, case), ranks in by.items():
        # a rank opens exactly the shards its rows lie in (none when it has no row)
        assert all(r["shards_opened"] == r["shards_needed"] for r in ranks), (case, ranks)
        if job.endswith("two.yaml"):
            assert sorted(r["rows_read"] for r in ranks) == [0, 5, 5]
            assert [(r["shards_opened"], r["bytes_read"]) for r in ranks if r["rows_read"] == 0] == [(0, 0)]
            continue
        # every row, and so every entry, is read once over all ranks; no rank reads them all
        assert sum(r["rows_read"] for r in ranks) == total_rows, case
        assert sum(r["entries_read"] for r in ranks) == total_nnz, case
        assert all(0 < r["rows_read"] < total_rows for r in ranks), case
        if case.endswith(":0"):  # no gaps read: the bytes are the rows' own, plus a row pointer each at most
            assert all(r["bytes_read"] < full for r in ranks), (case, full, ranks)
            assert full <= sum(r["bytes_read"] for r in ranks) <= full + 8 * (total_rows + 3 * SMALL_T), case
        if case.startswith("vertex:range"):  # contiguous vertex blocks: about a third of the bytes each
            assert all(r["bytes_read"] < 0.6 * full for r in ranks), (case, full, ranks)
        if case.startswith("vertex"):  # degrees (and Ã·X's features) of the halo came from their owners
            assert all(r["halo_rows"] > 0 and r["setup_halo_sent"] > 0 for r in ranks), case
    block = by[(str(tmp_path / "job.yaml"), "block:float64")]  # whole snapshots in blocks: shards apart
    assert sorted(r["shards_opened"] for r in block) == [1, 1, 2]
    assert all(r["halo_rows"] == 0 and r["setup_halo_sent"] == 0 for r in block)
