"""Partition plans: who owns which snapshots and which vertex rows (STYLE G2; DGL's partition book).

A plan is computed on rank 0 from the manifest and the rank count, broadcast,
and written to ``RUNDIR/plan.json``. Strategies consume plans; they never
compute one. ``plan.json``::

    {"kind": "snapshot", "num_ranks": P, "num_snapshots": T, "num_vertices": N,
     "snapshot_owner":  [p_0, ..., p_{T-1}], # rank that owns snapshot t
     "snapshot_bounds": [0, t_1, ..., T],     # block layout: rank p owns [b[p], b[p+1]); null if cyclic
     "vertex_bounds":   [0, n_1, ..., N],     # rank q owns vertex rows [v[q], v[q+1])
     "block_bounds":    [0, ..., T] or null,  # gradient-checkpoint blocks (S2)
     "vertex_order":    [...] or null,        # vertex partitions (S6): vertices in rank order
     "train_horizon":   h,                    # last snapshot in the training loss
     "chunks":          {"num_chunks", "lp_iterations", "cut_fraction"} or null,   # D1
     "ranks": [{"snapshots": k_p, "vertices": n_p, "nnz": ..., "send_units": ...}, ...]}

The builders, one per kind of partition: :func:`build_snapshot_plan` here and
:func:`hpcdgnn.partition.timeline.plan_snapshots` (S1, PSS: the layout and the work
model), :func:`hpcdgnn.partition.vertex.plan_vertices` (S6: range, hash, METIS),
:func:`hpcdgnn.partition.chunk_plan.plan_chunks` (D1: chunks and their assignment).

Vertex ranges are contiguous and balanced by count, as IBM §4.2 assigns
them; P not dividing N gives the first ``N mod P`` ranks one more row.
Snapshots are assigned cyclically (``strategy.layout: cyclic``, the default:
snapshot t on rank t mod P) or in contiguous blocks (``block``). Blocks are
balanced by count (``strategy.balance: count``, IBM's ``k = T/P``; the first
``T mod P`` ranks get one more) or by estimated work (``work``): blocks that
cut the running sum of a per-snapshot cost at multiples of total/P. The cost (see
:func:`hpcdgnn.partition.timeline.snapshot_work`) matters because snapshots differ in edges and
because a task does more work on training snapshots (forward and backward)
than on validation ones (forward only). With P > T the last ranks own no
snapshot and still take part in every collective.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from hpcdgnn.data.manifest import Manifest

__all__ = ["ChunkAssignment", "PartitionPlan", "balanced_bounds", "build_snapshot_plan", "weighted_bounds"]


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


@dataclass(frozen=True, kw_only=True)
class ChunkAssignment:
    """D1's chunks (DGC §4): the chunk of every active appearance and the ranks of chunks and RNN vertices.

    The arrays travel with the plan object (broadcast) but not into ``plan.json``,
    which gets the summary (:meth:`summary`).
    """

    chunk: np.ndarray
    """(T, N) chunk id of each active appearance (v, t), -1 where v is inactive at t."""
    chunk_owner: np.ndarray
    """(C,) rank of each chunk (Alg. 1 / Eq. 3)."""
    rnn_owner: np.ndarray
    """(N,) RNN owner of each vertex: the rank holding most of its active appearances."""
    num_chunks: int
    lp_iterations: int
    cut_fraction: float
    """Weight of the super-graph's edges between chunks over the total (DGC §4.1)."""

    def summary(self) -> dict:
        """What ``plan.json`` records of the chunks."""
        return {"num_chunks": self.num_chunks, "lp_iterations": self.lp_iterations, "cut_fraction": self.cut_fraction}


@dataclass(frozen=True, kw_only=True)
class PartitionPlan:
    """Snapshot ownership and vertex-row ownership for P ranks (IBM §4.2, Fig. 3), plus what a
    strategy's partition adds (vertex order S6, chunks D1).

    ``snapshot_owner[t]`` is the rank that runs the GCN of snapshot t (or, for vertex and
    chunk plans, scores it); for a contiguous layout ``snapshot_bounds`` also gives the blocks.
    """

    kind: str
    num_ranks: int
    num_snapshots: int
    num_vertices: int
    snapshot_owner: list[int]
    vertex_bounds: list[int]
    ranks: list[dict]
    """Per rank: what it owns and its estimated work (one dict per rank, nothing else)."""
    snapshot_bounds: list[int] | None = None
    """Contiguous layout: rank p owns [b[p], b[p+1]); None when cyclic."""
    block_bounds: list[int] | None = None
    """Gradient-checkpoint blocks (SPEC S2): block b is snapshots [b[k], b[k+1]); None = one block."""
    vertex_order: list[int] | None = None
    """Vertex partitioning (S6): the vertices in rank order, rank q owning positions
    ``vertex_bounds[q]..vertex_bounds[q+1]-1``; None = identity (contiguous id ranges)."""
    train_horizon: int | None = None
    """The last snapshot whose embedding enters the training loss (the task's, computed with the
    plan); None = unknown, treated as T - 1. Causal models need no gradient past it."""
    chunks: ChunkAssignment | None = None
    """Chunk plans (D1): the chunks and their ranks."""
    eval_scale: float = 1.0
    """Work-balanced blocks: the factor on the estimated work of the snapshots past the training horizon
    (1 = the static model; ``strategy.balance: measured`` fits it to measured compute times)."""

    @property
    def blocks(self) -> list[int]:
        """Block bounds, ``[0, T]`` when the run is not blocked."""
        return self.block_bounds or [0, self.num_snapshots]

    @property
    def horizon(self) -> int:
        """:attr:`train_horizon`, or T - 1 when unknown."""
        return self.num_snapshots - 1 if self.train_horizon is None else self.train_horizon

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

    def to_json(self) -> dict:
        """The plan as JSON data (chunk arrays replaced by their summary)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["chunks"] = None if self.chunks is None else self.chunks.summary()
        return out

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON."""
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")


def build_snapshot_plan(
    manifest: Manifest, num_ranks: int, work: np.ndarray | None = None, layout: str = "block", blocks: int = 1,
    horizon: int | None = None,
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
        horizon: the task's training horizon (:attr:`PartitionPlan.train_horizon`).
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
    return PartitionPlan(kind="snapshot", num_ranks=P, num_snapshots=T, num_vertices=N, snapshot_owner=owner,
                         snapshot_bounds=sb, vertex_bounds=vb, ranks=ranks, block_bounds=bb, train_horizon=horizon)
