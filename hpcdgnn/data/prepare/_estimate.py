"""Size of a ``prepare`` output, estimated before anything is written, and the limits that refuse it.

Every snapshot stores arrays over all N vertices, so the output grows with T · N whatever
the edge count. Per snapshot t (F features, e_t raw edges, nnz_t entries of A_t, s = index bytes):

=====================  ===================================================
``indptr``             8 (N + 1)
``indices``            s · nnz_t
``weights``            4 · nnz_t
``x``                  4 · N · F
``active``             N
``labels``             8 N, only with labels
``targets``            8 N, only with node targets
``target_*``           8 (N + 1) + s · e_t, only with smoothing
HDF5 metadata          :data:`H5_GROUP_BYTES` + :data:`H5_DATASET_BYTES` per dataset
=====================  ===================================================

e_t and nnz_t are exact when the reader counts them, else the upper bound
``min(N², e_{t-L+1} + ... + e_t)``, so the estimate errs only high. The HDF5 constants
are empirical for contiguous uncompressed datasets; they matter only for tiny N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hpcdgnn.data.prepare._common import PreparedInput
from hpcdgnn.data.writer import human_bytes
from hpcdgnn.indices import index_dtype

__all__ = ["OutputEstimate", "estimate_output", "human_bytes", "MAX_OUTPUT_BYTES", "MAX_OUTPUT_FILES"]

#: Refuse (without ``--allow-large``) an output estimated above this many bytes: 2 GiB.
MAX_OUTPUT_BYTES = 2 * 1024**3

#: Refuse (without ``--allow-large``) more files than this: parallel file systems slow down on many small files.
MAX_OUTPUT_FILES = 10_000

#: HDF5 metadata per snapshot group (object header, symbol table B-tree and local heap).
H5_GROUP_BYTES = 1_200
#: HDF5 metadata per dataset in a group (object header with dataspace, datatype and layout).
H5_DATASET_BYTES = 290
#: HDF5 metadata per file (superblock, root group).
H5_FILE_BYTES = 2_048
#: ``manifest.json`` (indent 1): fixed part, per snapshot (nnz, edges, active, time) and per shard entry.
MANIFEST_BASE_BYTES = 1_000
MANIFEST_SNAPSHOT_BYTES = 60
MANIFEST_SHARD_BYTES = 160


@dataclass(frozen=True)
class OutputEstimate:
    """Estimated size of a dataset directory (see the module docstring for the model)."""

    num_vertices: int
    num_snapshots: int
    num_features: int
    bytes: int
    """Total bytes of the directory."""
    files: int
    """Shard files + ``vertices.h5`` + ``manifest.json``."""
    vertex_bytes_per_snapshot: int
    """The fixed part of every snapshot: arrays over all N vertices plus HDF5 metadata."""
    edge_bytes: int
    """All snapshots' edge arrays (indices, weights, targets) together."""

    def describe(self) -> str:
        """One line: total, files, and the split into per-vertex and per-edge parts."""
        return (
            f"estimated output: N={self.num_vertices} T={self.num_snapshots} F={self.num_features}:"
            f" {human_bytes(self.bytes)} in {self.files:,} files"
            f" ({self.num_snapshots:,} snapshots x {human_bytes(self.vertex_bytes_per_snapshot)} of per-vertex"
            f" arrays and metadata, plus {human_bytes(self.edge_bytes)} of edges)"
        )


def _vertex_id_bytes(ids: np.ndarray | None, n: int) -> int:
    if ids is None:  # 0 .. N-1, written as int64
        return 8 * n
    ids = np.asarray(ids)
    if ids.dtype.kind in "US":
        return int(sum(32 + 8 * math.ceil(len(str(i).encode()) / 8) for i in ids.tolist()))
    return 8 * int(ids.shape[0])


def estimate_output(
    prepared: PreparedInput,
    *,
    num_features: int,
    num_classes: int,
    smoothing_window: int,
    targets: bool = False,
    shard_size: int,
) -> OutputEstimate | None:
    """Bytes and files :func:`~hpcdgnn.data.writer.write_dataset` will write for ``prepared``.

    Args:
        prepared: the parsed input, with ``snapshot_edges`` (and ``snapshot_nnz`` when counted).
        num_features: F.
        num_classes: > 0 when the snapshots carry labels.
        smoothing_window: max(edge-life, M-transform window); 1 = no smoothing.
        targets: whether the snapshots carry float node targets.
        shard_size: snapshots per shard file.

    Returns:
        The estimate, or None when the reader did not count its edges (``snapshot_edges``).
    """
    if prepared.snapshot_edges is None:
        return None
    n = int(prepared.num_vertices)
    e = np.asarray(prepared.snapshot_edges, dtype=np.int64)
    T = int(e.shape[0])
    s = index_dtype(n).itemsize
    smoothed = smoothing_window > 1
    if prepared.snapshot_nnz is not None:
        nnz = np.asarray(prepared.snapshot_nnz, dtype=np.int64)
    elif smoothed:
        window_sum = np.convolve(e, np.ones(smoothing_window, dtype=np.int64))[:T]  # e_{t-w+1} + ... + e_t
        nnz = np.minimum(window_sum, min(n * n, 2**62))
    else:
        nnz = e
    datasets = 5 + (num_classes > 0) + bool(targets) + 2 * smoothed
    fixed = 8 * (n + 1) + 4 * n * num_features + n + (8 * n if num_classes > 0 else 0) + (8 * n if targets else 0)
    fixed += 8 * (n + 1) if smoothed else 0
    fixed += H5_GROUP_BYTES + H5_DATASET_BYTES * datasets
    edge_bytes = int((s + 4) * nnz.sum() + (s * e.sum() if smoothed else 0))
    shards = math.ceil(T / shard_size)
    total = (
        T * fixed
        + edge_bytes
        + shards * H5_FILE_BYTES
        + H5_FILE_BYTES
        + _vertex_id_bytes(prepared.vertex_ids, prepared.num_vertices)
        + MANIFEST_BASE_BYTES
        + MANIFEST_SNAPSHOT_BYTES * T
        + MANIFEST_SHARD_BYTES * shards
    )
    return OutputEstimate(
        num_vertices=n,
        num_snapshots=T,
        num_features=num_features,
        bytes=int(total),
        files=shards + 2,
        vertex_bytes_per_snapshot=int(fixed),
        edge_bytes=edge_bytes,
    )
