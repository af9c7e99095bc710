"""Partition plans: who owns which snapshots and which vertex rows (STYLE G2; DGL's partition book).

A plan is computed on rank 0 from the manifest and the rank count, broadcast,
and written to ``RUNDIR/plan.json``. Strategies consume plans; they never
compute one. ``plan.json``::

    {"kind": "snapshot", "num_ranks": P, "num_snapshots": T, "num_vertices": N,
     "snapshot_owner":  [p_0, ..., p_{T-1}], # rank that owns snapshot t
     "snapshot_bounds": [0, t_1, ..., T],     # block layout: rank p owns [b[p], b[p+1]); null if cyclic
     "vertex_bounds":   [0, n_1, ..., N],     # rank q owns vertex rows [v[q], v[q+1])
     "block_bounds":    [0, ..., T] or null,  # gradient-checkpoint blocks (S2)
     "ranks": [{"snapshots": k_p, "vertices": n_p, "nnz": ..., "send_units": ...}, ...]}

Vertex ranges are contiguous and balanced by count, as IBM §4.2 assigns
them; P not dividing N gives the first ``N mod P`` ranks one more row.
Snapshots are assigned cyclically (``strategy.layout: cyclic``, the default:
snapshot t on rank t mod P) or in contiguous blocks (``block``). Blocks are
balanced by count (``strategy.balance: count``, IBM's ``k = T/P``; the first
``T mod P`` ranks get one more) or by estimated work (``work``): blocks that
cut the running sum of a per-snapshot cost at multiples of total/P. The cost (see
``SnapshotStrategy.make_plan``) matters because snapshots differ in edges and
because a task does more work on training snapshots (forward and backward)
than on validation ones (forward only). With P > T the last ranks own no
snapshot and still take part in every collective.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hpcdgnn.data.manifest import Manifest

__all__ = ["PartitionPlan", "balanced_bounds", "build_snapshot_plan", "weighted_bounds"]


def balanced_bounds(total: int, parts: int) -> list[int]:
    """Bounds of ``parts`` contiguous ranges over ``total`` items, sizes differing by at most one."""
    q, r = divmod(total, parts)
    sizes = [q + (1 if p < r else 0) for p in range(parts)]
    return [0, *np.cumsum(sizes).tolist()]


def weighted_bounds(work: np.ndarray, parts: int) -> list[int]:
    """Bounds of ``parts`` contiguous ranges cutting the running sum of ``work`` at multiples of total/parts.

    Each cut goes to whichever of the two neighbouring positions puts the
    prefix sum closer to its target; every range is non-empty when there are
    more items than parts, and with at most one item per part the empty ranges
    are the last ones.
    """
    work = np.asarray(work, dtype=np.float64)
    n = work.size
    if n <= parts or work.sum() <= 0:
        # one snapshot per rank at most: nothing to balance; idle ranks trail, as with count balance
        return balanced_bounds(n, parts)
    cum = np.concatenate([[0.0], np.cumsum(work)])
    bounds = [0]
    for p in range(1, parts):
        target = cum[-1] * p / parts
        i = int(np.searchsorted(cum, target))
        if i > 0 and abs(cum[i - 1] - target) <= abs(cum[min(i, n)] - target):
            i -= 1
        # every rank keeps at least one snapshot (T > P here), so no rank idles while others work
        bounds.append(min(max(i, bounds[-1] + 1), n - (parts - p)))
    bounds.append(n)
    return bounds


@dataclass(frozen=True)
class PartitionPlan:
    """Snapshot ownership and vertex-row ownership for P ranks (IBM §4.2, Fig. 3).

    ``snapshot_owner[t]`` is the rank that runs the GCN of snapshot t; for a
    contiguous layout ``snapshot_bounds`` also gives the blocks (None otherwise).
    """

    kind: str
    num_ranks: int
    num_snapshots: int
    num_vertices: int
    snapshot_owner: list[int]
    snapshot_bounds: list[int] | None
    vertex_bounds: list[int]
    ranks: list[dict]
    block_bounds: list[int] | None = None
    """Gradient-checkpoint blocks (SPEC S2): block b is snapshots [b[k], b[k+1]); None = one block."""
    vertex_order: list[int] | None = None
    """Vertex partitioning (S6): the vertices in rank order, rank q owning positions
    ``vertex_bounds[q]..vertex_bounds[q+1]-1``; None = identity (contiguous id ranges)."""

    @property
    def blocks(self) -> list[int]:
        """Block bounds, ``[0, T]`` when the run is not blocked."""
        return self.block_bounds or [0, self.num_snapshots]

    def snapshots_of(self, rank: int) -> list[int]:
        """Snapshots owned by ``rank`` (GCN phase), in time order."""
        return [t for t, o in enumerate(self.snapshot_owner) if o == rank]

    def vertices_of(self, rank: int) -> range | list[int]:
        """Vertex rows owned by ``rank`` (RNN phase); ids in rank order when ``vertex_order`` is set."""
        if self.vertex_order is not None:
            return self.vertex_order[self.vertex_bounds[rank] : self.vertex_bounds[rank + 1]]
        return range(self.vertex_bounds[rank], self.vertex_bounds[rank + 1])

    def owner_of_snapshot(self, t: int) -> int:
        """Rank that owns snapshot ``t``."""
        return self.snapshot_owner[t]

    def owner_of_vertex(self, v: int) -> int:
        """Rank that owns vertex row ``v``."""
        return int(np.searchsorted(self.vertex_bounds, v, side="right") - 1)

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON."""
        Path(path).write_text(json.dumps(asdict(self), indent=1) + "\n")


def build_snapshot_plan(
    manifest: Manifest, num_ranks: int, work: np.ndarray | None = None, layout: str = "block", blocks: int = 1
) -> PartitionPlan:
    """The S1 plan: snapshot ownership and equal vertex ranges.

    Args:
        manifest: the dataset.
        num_ranks: P.
        work: per-snapshot cost; blocks cut at equal work (``layout="block"`` only).
        layout: ``block`` — contiguous blocks (IBM §4.2), by count or by ``work``;
            ``cyclic`` — snapshot t on rank t mod P, which gives every rank the same
            mix of early and late, training and evaluation snapshots, so each phase
            between two exchanges is balanced, not only the epoch's total.
        blocks: gradient-checkpoint blocks nb (SPEC S2). With nb > 1 the snapshots
            are cut into nb near-equal blocks of time and each block is split over
            the ranks on its own ("block-cyclic", IBM §4.2 and Fig. 3b): contiguous
            and balanced by count within the block, or cyclic with ``layout=cyclic``.
    """
    T, N, P = manifest.num_snapshots, manifest.num_vertices, num_ranks
    bb = None
    if blocks > 1:
        bb = balanced_bounds(T, blocks)
        owner, sb = [], None
        for b in range(blocks):
            size = bb[b + 1] - bb[b]
            if layout == "cyclic":
                owner += [i % P for i in range(size)]
            else:
                inner = balanced_bounds(size, P)
                owner += [p for p in range(P) for _ in range(inner[p + 1] - inner[p])]
    elif layout == "cyclic":
        owner, sb = [t % P for t in range(T)], None
    else:
        sb = balanced_bounds(T, P) if work is None else weighted_bounds(work, P)
        owner = [p for p in range(P) for _ in range(sb[p + 1] - sb[p])]
    vb = balanced_bounds(N, P)
    nnz = np.asarray(manifest.snapshot_nnz, dtype=np.int64)
    own = np.asarray(owner, dtype=np.int64)
    ranks = []
    for p in range(P):
        mine = own == p
        k, n = int(mine.sum()), vb[p + 1] - vb[p]
        entry = {"snapshots": k, "vertices": n, "nnz": int(nnz[mine].sum()), "send_units": k * (N - n)}
        if work is not None:
            entry["work"] = float(np.sum(np.asarray(work)[mine]))
        ranks.append(entry)
    return PartitionPlan("snapshot", P, T, N, owner, sb, vb, ranks, bb)
