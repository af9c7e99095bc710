"""Read snapshots from HDF5 shards; a rank opens only the shards it needs.

Shard layout (``DIR/shards/shard-NNNNN.h5``, snapshots ``[t_start, t_stop)``)::

    /                      attrs: t_start, t_stop, num_vertices
    /t000017/              one group per snapshot, named t%06d by global index
        indptr   int64   (N+1,)   CSR row pointer of A_t (rows = source vertex)
        indices  int32|64 (nnz,)  column (destination) ids, sorted within each row
        weights  float32 (nnz,)   edge weights of A_t (after smoothing, SPEC S5)
        x        float32 (N, F)   vertex features X_t
        active   uint8   (N,)     1 where the vertex has a raw edge in this window
        labels   int64   (N,)     node labels, -1 = unlabelled (only if num_classes > 0)
        target_indptr, target_indices   raw edges of the window, only when
                                  smoothing changed A_t; otherwise A_t's pattern is
                                  the raw edge set. Link prediction uses these.

Rows are sorted and edge keys ``src * N + dst`` ascend within a snapshot, so
consecutive snapshots can be diffed with one merge (``inspect``, SPEC S3).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from hpcdgnn.data.manifest import Manifest
from hpcdgnn.data.snapshot import Snapshot, csr_rows
from hpcdgnn.errors import DataError

__all__ = ["ShardReader", "snapshot_group_name"]


def snapshot_group_name(t: int) -> str:
    """HDF5 group name of snapshot ``t`` inside its shard."""
    return f"t{t:06d}"


class ShardReader:
    """Random access to snapshots by global index, opening each shard once, lazily.

    Every I/O failure (missing file, truncated file, missing dataset, wrong shape)
    becomes a :class:`DataError` that names the shard file.
    """

    def __init__(self, root: str | Path, manifest: Manifest) -> None:
        self.root = Path(root)
        self.manifest = manifest
        self._files: dict[str, h5py.File] = {}

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
        if shape0 is not None and arr.shape[:1] != (shape0,):
            raise DataError(f"{path}: '{key}' has shape {arr.shape}, expected first dimension {shape0}")
        return arr

    def read(self, t: int) -> Snapshot:
        """Read snapshot ``t`` (adjacency, features, activity, labels)."""
        m = self.manifest
        N = m.num_vertices
        indptr = self._read(t, "indptr", N + 1)
        nnz = int(indptr[-1])
        indices = self._read(t, "indices", nnz)
        weights = self._read(t, "weights", nnz)
        x = self._read(t, "x", N)
        if x.ndim != 2 or x.shape[1] != m.num_features:
            _, path = self._file(t)
            raise DataError(f"{path}: '{snapshot_group_name(t)}/x' has shape {x.shape}, expected ({N}, {m.num_features})")
        active = self._read(t, "active", N).astype(bool)
        labels = self._read(t, "labels", N) if m.num_classes > 0 else None
        return Snapshot(t=t, indptr=indptr, indices=indices, weights=weights, x=x, active=active, labels=labels)

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
