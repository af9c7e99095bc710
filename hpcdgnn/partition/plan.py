"""Partition plans: who owns which snapshots and which vertex rows (STYLE G2; DGL's partition book).

A plan is computed on rank 0 from the manifest and the rank count, broadcast,
and written to ``RUNDIR/plan.json``. Strategies consume plans; they never
compute one. ``plan.json``::

    {"kind": "snapshot", "num_ranks": P, "num_snapshots": T, "num_vertices": N,
     "snapshot_bounds": [0, t_1, ..., T],   # rank p owns snapshots [b[p], b[p+1])
     "vertex_bounds":   [0, n_1, ..., N],   # rank q owns vertex rows [v[q], v[q+1])
     "ranks": [{"snapshots": k_p, "vertices": n_p, "nnz": ..., "send_units": ...}, ...]}

Both partitions are contiguous and balanced by count, as IBM §4.2 assigns
them (``s = (p-1)k + 1``, ``e = pk`` with ``k = T/P``), generalised to P not
dividing T or N: the first ``T mod P`` ranks get one more snapshot. With P > T
the last ranks own no snapshot and still take part in every collective.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hpcdgnn.data.manifest import Manifest

__all__ = ["PartitionPlan", "balanced_bounds", "build_snapshot_plan"]


def balanced_bounds(total: int, parts: int) -> list[int]:
    """Bounds of ``parts`` contiguous ranges over ``total`` items, sizes differing by at most one."""
    q, r = divmod(total, parts)
    sizes = [q + (1 if p < r else 0) for p in range(parts)]
    return [0, *np.cumsum(sizes).tolist()]


@dataclass(frozen=True)
class PartitionPlan:
    """Snapshot ownership and vertex-row ownership for P ranks (IBM §4.2, Fig. 3a)."""

    kind: str
    num_ranks: int
    num_snapshots: int
    num_vertices: int
    snapshot_bounds: list[int]
    vertex_bounds: list[int]
    ranks: list[dict]

    def snapshots_of(self, rank: int) -> range:
        """Snapshots owned by ``rank`` (GCN phase)."""
        return range(self.snapshot_bounds[rank], self.snapshot_bounds[rank + 1])

    def vertices_of(self, rank: int) -> range:
        """Vertex rows owned by ``rank`` (RNN phase)."""
        return range(self.vertex_bounds[rank], self.vertex_bounds[rank + 1])

    def owner_of_snapshot(self, t: int) -> int:
        """Rank that owns snapshot ``t``."""
        return int(np.searchsorted(self.snapshot_bounds, t, side="right") - 1)

    def owner_of_vertex(self, v: int) -> int:
        """Rank that owns vertex row ``v``."""
        return int(np.searchsorted(self.vertex_bounds, v, side="right") - 1)

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON."""
        Path(path).write_text(json.dumps(asdict(self), indent=1) + "\n")


def build_snapshot_plan(manifest: Manifest, num_ranks: int) -> PartitionPlan:
    """The S1 plan: contiguous balanced snapshot blocks and vertex ranges, with per-rank balance."""
    T, N, P = manifest.num_snapshots, manifest.num_vertices, num_ranks
    sb, vb = balanced_bounds(T, P), balanced_bounds(N, P)
    nnz = np.asarray(manifest.snapshot_nnz, dtype=np.int64)
    ranks = []
    for p in range(P):
        k, n = sb[p + 1] - sb[p], vb[p + 1] - vb[p]
        # feature vectors this rank sends to others in one redistribution (IBM §4.2 volume)
        ranks.append({"snapshots": k, "vertices": n, "nnz": int(nnz[sb[p] : sb[p + 1]].sum()), "send_units": k * (N - n)})
    return PartitionPlan("snapshot", P, T, N, sb, vb, ranks)
