"""Spatial chunk fusion (DGC §5.1.1): which of a rank's chunks are aggregated together.

Aggregating chunk by chunk loads, for each chunk, its own rows and every
neighbour row it reads — a row that two chunks read is loaded twice (DGC
Fig. 8b). Fusing chunks loads such rows once and runs one larger product
(Fig. 8c), but a fused group must fit in memory. DGC's heuristic: "iteratively
fuse two chunks with the maximum data transmission" until a fused chunk would
pass the memory limit. We take the pairs in decreasing order of their
transmission (the number of entries of Ã by which one reads the other) and
merge the two groups when their estimated sizes together stay under the cap —
Kruskal's order over a union-find, so the cost is one sort of the pairs. Groups
that read nothing of each other are then packed next-fit under the same cap:
that saves no loading, but runs fewer, larger products.
The transmissions are those of the unfused chunks (DGC does not say whether
they are recomputed after a merge; recomputing would only re-sum them).

The size of a group is estimated from counts, as a sum over its chunks of
``(rows + rows read) × width × itemsize + entries × (2·8 + itemsize)`` — an
upper bound, since rows shared by two chunks are counted twice. DGC measures
each chunk's memory during the first epoch instead (§5.1.1); the estimate
needs no extra epoch and is what :mod:`hpcdgnn.strategies.chunk` reports.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fuse_chunks", "group_cost"]


def group_cost(chunk: np.ndarray, entry_row: np.ndarray, entry_col: np.ndarray, width: int,
               itemsize: int) -> np.ndarray:
    """Estimated bytes of aggregating each chunk alone (see the module docstring).

    Args:
        chunk: chunk id (0..C-1) of each local row.
        entry_row: the row of each entry of the local operator.
        entry_col: the column of each entry (columns past the local rows are halo).
        width: the widest layer's feature width.
        itemsize: the element size.
    """
    C = int(chunk.max()) + 1 if chunk.shape[0] else 0
    rows = np.bincount(chunk, minlength=C)
    entries = np.bincount(chunk[entry_row], minlength=C)
    read = np.unique(chunk[entry_row].astype(np.int64) * (int(entry_col.max(initial=0)) + 1) + entry_col)
    reads = np.bincount(read // (int(entry_col.max(initial=0)) + 1), minlength=C)
    return ((rows + reads) * width * itemsize + entries * (16 + itemsize)).astype(np.float64)


def fuse_chunks(chunk: np.ndarray, entry_row: np.ndarray, entry_col: np.ndarray, cost: np.ndarray,
                cap: float) -> np.ndarray:
    """Group id of each local row: chunks merged in decreasing transmission while under ``cap``.

    Args:
        chunk: chunk id (0..C-1) of each local row.
        entry_row: the row of each entry of the local operator.
        entry_col: the column of each entry; columns ``< len(chunk)`` are local rows.
        cost: estimated bytes of each chunk (:func:`group_cost`).
        cap: the largest estimated bytes of a fused group (a chunk over it stays alone).
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
    # then groups that share nothing, packed next-fit under the cap: no load to save, but fewer, larger
    # products ("fused chunks can be executed together to fully utilize GPU resources", §5.1.1)
    bin_of, bin_size, bins = {}, 0.0, 0
    for r in np.unique(roots):
        if bin_size + size[r] > cap and bin_size > 0:
            bins, bin_size = bins + 1, 0.0
        bin_of[int(r)] = bins
        bin_size += size[r]
    return np.array([bin_of[int(r)] for r in roots], dtype=np.int64)[chunk]
