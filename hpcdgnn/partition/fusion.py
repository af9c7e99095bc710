"""Spatial chunk fusion (DGC §5.1.1): which of a rank's chunks are aggregated together.

Fusion loads a neighbour row shared by two chunks once (DGC Fig. 8). Pairs are merged in
decreasing transmission (entries of Ã by which one reads the other) while under the cap
(Kruskal order, union-find); groups sharing nothing are then packed next-fit.
"""

from __future__ import annotations

import numpy as np

from hpcdgnn.indices import unique_ints

__all__ = ["fuse_chunks", "group_cost"]


def group_cost(chunk: np.ndarray, entry_row: np.ndarray, entry_col: np.ndarray, width: int,
               itemsize: int) -> np.ndarray:
    """Estimated bytes of aggregating each chunk alone:
    ``(rows + rows read) × width × itemsize + entries × (16 + itemsize)``.

    ``entry_row``/``entry_col`` index the local operator's entries; columns past the local rows are halo.
    """
    C = int(chunk.max()) + 1 if chunk.shape[0] else 0
    rows = np.bincount(chunk, minlength=C)
    entries = np.bincount(chunk[entry_row], minlength=C)
    read = unique_ints(chunk[entry_row].astype(np.int64) * (int(entry_col.max(initial=0)) + 1) + entry_col)
    reads = np.bincount(read // (int(entry_col.max(initial=0)) + 1), minlength=C)
    return ((rows + reads) * width * itemsize + entries * (16 + itemsize)).astype(np.float64)


def fuse_chunks(chunk: np.ndarray, entry_row: np.ndarray, entry_col: np.ndarray, cost: np.ndarray,
                cap: float) -> np.ndarray:
    """Group id of each local row: chunks merged in decreasing transmission while under ``cap`` bytes.

    ``cost``: each chunk's :func:`group_cost`; a chunk over ``cap`` stays alone.
    """
    n, C = chunk.shape[0], cost.shape[0]
    own = entry_col < n
    a, b = chunk[entry_row[own]], chunk[entry_col[own]]
    keep = a != b
    lo, hi = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
    pair, weight = np.unique(lo.astype(np.int64) * C + hi, return_counts=True)
    parent = np.arange(C)
    size = cost.astype(np.float64).copy()

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in pair[np.argsort(-weight, kind="stable")]:
        ra, rb = root(int(p // C)), root(int(p % C))
        if ra != rb and size[ra] + size[rb] <= cap:
            parent[rb] = ra
            size[ra] += size[rb]
    roots = np.array([root(c) for c in range(C)], dtype=np.int64)
    # groups sharing nothing, packed next-fit: fewer, larger products (§5.1.1 "fully utilize GPU resources")
    bin_of, bin_size, bins = {}, 0.0, 0
    for r in unique_ints(roots):
        if bin_size + size[r] > cap and bin_size > 0:
            bins, bin_size = bins + 1, 0.0
        bin_of[int(r)] = bins
        bin_size += size[r]
    return np.array([bin_of[int(r)] for r in roots], dtype=np.int64)[chunk]
