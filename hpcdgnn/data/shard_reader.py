"""Read snapshots from HDF5 shards; a rank opens only the shards, and rows, it needs.

Shard layout: docs/data.md, "Snapshot datasets" (one group ``t%06d`` per snapshot;
canonical CSR ``indptr``/``indices``/``weights``, ``x``, ``active``, optional ``labels``,
``targets`` and, when smoothing changed A_t, the raw edges ``target_indptr``/``target_indices``).
Edge keys ``src * N + dst`` ascend within a snapshot, so consecutive snapshots diff by one merge (S3).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from hpcdgnn.data.manifest import Manifest
from hpcdgnn.data.snapshot import Snapshot, csr_rows
from hpcdgnn.errors import DataError

__all__ = ["RowBlock", "ShardReader", "snapshot_group_name"]


def snapshot_group_name(t: int) -> str:
    """HDF5 group name of snapshot ``t`` inside its shard."""
    return f"t{t:06d}"


@dataclass
class RowBlock:
    """Some rows of snapshot ``t`` (:meth:`ShardReader.read_rows`).

    Shapes:
        ``rows``: (k,) ascending; ``indptr``: (k+1,) int64 from 0 into ``indices``/``weights``;
        ``x``: (k, F), or None when not asked for.
    """

    t: int
    rows: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    x: np.ndarray | None


def _runs(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximal runs of consecutive values in sorted unique ``idx``: (starts, stops)."""
    if idx.shape[0] == 0:
        return idx[:0], idx[:0]
    brk = np.flatnonzero(np.diff(idx) != 1) + 1
    return idx[np.concatenate([[0], brk])], idx[np.concatenate([brk - 1, [idx.shape[0] - 1]])] + 1


def _merge(starts: np.ndarray, stops: np.ndarray, max_gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint ranges [starts, stops) merged across gaps of at most ``max_gap``; empty ones dropped."""
    keep = stops > starts
    starts, stops = starts[keep], stops[keep]
    if starts.shape[0] == 0:
        return starts, stops
    brk = np.flatnonzero(starts[1:] - stops[:-1] > max_gap) + 1
    return starts[np.concatenate([[0], brk])], stops[np.concatenate([brk - 1, [starts.shape[0] - 1]])]


def _expand(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each range (int64)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.cumsum(lengths) - lengths
    return np.repeat(starts - first, lengths) + np.arange(total, dtype=np.int64)


class ShardReader:
    """Random access to snapshots by global index, opening each shard once, lazily.

    Every I/O failure becomes a :class:`DataError` naming the shard file. Counters (cumulative):
    ``shards_opened``, ``bytes_read`` (gaps included), ``rows_read`` / ``entries_read``.
    """

    #: gap (bytes) :meth:`read_rows` reads through rather than split a slice: one page
    max_gap_bytes = 4096

    def __init__(self, root: str | Path, manifest: Manifest) -> None:
        self.root = Path(root)
        self.manifest = manifest
        self._files: dict[str, h5py.File] = {}
        self.shards_opened = 0
        self.bytes_read = 0
        self.rows_read = 0
        self.entries_read = 0

    def _file(self, t: int) -> tuple[h5py.File, Path]:
        info = self.manifest.shard_of(t)
        path = self.root / "shards" / info.file
        f = self._files.get(info.file)
        if f is None:
            if not path.is_file():
                raise DataError(f"{path}: shard file missing (holds snapshots {info.t_start}..{info.t_stop - 1})")
            size = path.stat().st_size
            if size != info.bytes:
                raise DataError(f"{path}: shard is {size} bytes, manifest says {info.bytes} (truncated or replaced?)")
            try:
                f = h5py.File(path, "r")
            except OSError as e:
                raise DataError(f"{path}: cannot open shard: {e}") from None
            self._files[info.file] = f
            self.shards_opened += 1
        return f, path

    def _read(self, t: int, name: str, shape0: int | None = None, required: bool = True) -> np.ndarray | None:
        f, path = self._file(t)
        key = f"{snapshot_group_name(t)}/{name}"
        try:
            if key not in f:
                if required:
                    raise DataError(f"{path}: dataset '{key}' missing")
                return None
            arr = f[key][()]
        except (OSError, KeyError, ValueError) as e:
            raise DataError(f"{path}: cannot read '{key}': {e}") from None
        self.bytes_read += arr.nbytes
        if shape0 is not None and arr.shape[:1] != (shape0,):
            raise DataError(f"{path}: '{key}' has shape {arr.shape}, expected first dimension {shape0}")
        return arr

    def _dataset(self, t: int, name: str, shape: tuple[int, ...]) -> tuple[h5py.Dataset, Path, str]:
        """Dataset ``name`` of snapshot ``t``, its shape checked against ``shape`` (nothing read)."""
        f, path = self._file(t)
        key = f"{snapshot_group_name(t)}/{name}"
        try:
            if key not in f:
                raise DataError(f"{path}: dataset '{key}' missing")
            ds = f[key]
            got = ds.shape
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise DataError(f"{path}: cannot read '{key}': {e}") from None
        if got[:1] != shape[:1]:
            raise DataError(f"{path}: '{key}' has shape {got}, expected first dimension {shape[0]}")
        if len(shape) > 1 and got != shape:
            raise DataError(f"{path}: '{key}' has shape {got}, expected {shape}")
        return ds, path, key

    def _read_ranges(self, t: int, name: str, shape: tuple[int, ...], starts: np.ndarray,
                     stops: np.ndarray) -> np.ndarray:
        """Elements ``[starts[i], stops[i])`` (sorted, disjoint) of a dataset, concatenated; near ranges read once."""
        ds, path, key = self._dataset(t, name, shape)
        starts, stops = np.asarray(starts, dtype=np.int64), np.asarray(stops, dtype=np.int64)
        row_bytes = ds.dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        bs, be = _merge(starts, stops, self.max_gap_bytes // max(row_bytes, 1))
        try:
            parts = [ds[int(a) : int(b)] for a, b in zip(bs.tolist(), be.tolist(), strict=True)]
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise DataError(f"{path}: cannot read '{key}': {e}") from None
        if not parts:
            return np.zeros((0, *shape[1:]), dtype=ds.dtype)
        buf = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self.bytes_read += buf.nbytes
        lengths = stops - starts
        if buf.shape[0] == int(lengths.sum()):  # no gap bytes in buf
            return buf
        # where each wanted range starts in buf: its block's place in buf plus its offset in the block
        block = np.searchsorted(be, starts, side="right")
        block = np.minimum(block, bs.shape[0] - 1)  # empty ranges past the last block
        offset = np.cumsum(be - bs) - (be - bs)
        return buf[_expand(offset[block] + starts - bs[block], lengths)]

    def read_rows(self, t: int, rows, x: bool = True) -> RowBlock:
        """Rows ``rows`` (sorted, unique) of snapshot ``t``: their entries and, with ``x``, features; nothing else read.

        Raises:
            ValueError: ``rows`` not sorted, unique and in [0, N).
            DataError: missing dataset, wrong shape, or a row pointer out of order or range.
        """
        m = self.manifest
        N, F = m.num_vertices, m.num_features
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        k = rows.shape[0]
        if k and (rows[0] < 0 or rows[-1] >= N or (k > 1 and np.any(np.diff(rows) <= 0))):
            raise ValueError(f"read_rows: rows must be sorted, unique and in [0, {N})")
        if k == 0:
            z = np.zeros(0, dtype=np.int64)
            return RowBlock(t, rows, np.zeros(1, dtype=np.int64), z, np.zeros(0, dtype=np.float32),
                            np.zeros((0, F), dtype=np.float32) if x else None)
        rs, re = _runs(rows)
        # indptr[r] and indptr[r + 1] of every wanted row, and indptr[N] (the nnz, to check the entries)
        tail = int(re[-1]) < N  # indptr[N] is not read with the last run already
        last = np.full(int(tail), N, dtype=np.int64)
        ptr = self._read_ranges(t, "indptr", (N + 1,), np.concatenate([rs, last]), np.concatenate([re + 1, last + 1]))
        ptr = ptr.astype(np.int64, copy=False)
        nnz = int(ptr[-1])
        # per run: rows rs..re-1 have pointers ptr[j : j + (re - rs) + 1]
        run_len = re - rs
        run_at = np.cumsum(run_len + 1) - (run_len + 1)
        lo = ptr[_expand(run_at, run_len)]
        hi = ptr[_expand(run_at + 1, run_len)]
        # entries of a run of rows are contiguous: one range per run
        first = run_at - np.arange(run_len.shape[0])  # each run's first row among the k
        es, ee = lo[first], hi[first + run_len - 1]
        if np.any(hi < lo) or np.any(lo < 0) or np.any(hi > nnz) or np.any(es[1:] < ee[:-1]):
            _, path = self._file(t)
            raise DataError(f"{path}: '{snapshot_group_name(t)}/indptr' is not a row pointer of {nnz} entries "
                            f"(decreasing or out of range)")
        indptr = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(hi - lo, out=indptr[1:])
        indices = self._read_ranges(t, "indices", (nnz,), es, ee)
        weights = self._read_ranges(t, "weights", (nnz,), es, ee)
        feats = self._read_ranges(t, "x", (N, F), rs, re) if x else None
        self.rows_read += k
        self.entries_read += int(indptr[-1])
        return RowBlock(t, rows, indptr, indices, weights, feats)

    def read(self, t: int) -> Snapshot:
        """Read snapshot ``t`` (adjacency, features, activity, labels, targets)."""
        m = self.manifest
        N = m.num_vertices
        indptr = self._read(t, "indptr", N + 1)
        nnz = int(indptr[-1])
        indices = self._read(t, "indices", nnz)
        weights = self._read(t, "weights", nnz)
        x = self._read(t, "x", N)
        if x.ndim != 2 or x.shape[1] != m.num_features:
            _, path = self._file(t)
            raise DataError(f"{path}: '{snapshot_group_name(t)}/x' has shape {x.shape}, "
                            f"expected ({N}, {m.num_features})")
        active = self._read(t, "active", N).astype(bool)
        labels = self._read(t, "labels", N) if m.num_classes > 0 else None
        targets = self.read_targets(t) if m.has_targets else None
        return Snapshot(t=t, indptr=indptr, indices=indices, weights=weights, x=x, active=active, labels=labels,
                        targets=targets)

    def read_targets(self, t: int) -> np.ndarray:
        """The float node targets (N,) of snapshot ``t`` as float64, NaN where a vertex has none.

        Raises:
            DataError: the dataset stores no targets, or the array is missing, misshapen or not float.
        """
        m = self.manifest
        if not m.has_targets:
            raise DataError(f"{self.root}: the dataset stores no node targets (manifest 'targets' is null)")
        y = self._read(t, "targets", m.num_vertices)
        if y.shape != (m.num_vertices,) or y.dtype.kind != "f":
            _, path = self._file(t)
            raise DataError(f"{path}: '{snapshot_group_name(t)}/targets' is {y.dtype} {y.shape}, "
                            f"expected float ({m.num_vertices},)")
        return y.astype(np.float64, copy=False)

    def edges(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Edges ``(src, dst)`` (int64) of the adjacency A_t trained on, in CSR order."""
        N = self.manifest.num_vertices
        indptr = self._read(t, "indptr", N + 1)
        return csr_rows(indptr), self._read(t, "indices", int(indptr[-1])).astype(np.int64)

    def read_target(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw edges ``(src, dst)`` of snapshot ``t`` (link-prediction positives)."""
        N = self.manifest.num_vertices
        prefix = "target_" if self.manifest.smoothed else ""
        indptr = self._read(t, prefix + "indptr", N + 1)
        dst = self._read(t, prefix + "indices", int(indptr[-1]))
        src = csr_rows(indptr)
        return src, dst.astype(np.int64)

    def close(self) -> None:
        """Close every open shard."""
        for f in self._files.values():
            f.close()
        self._files.clear()

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
