"""Partition plans: who owns which snapshots and which vertex rows (IBM §4.2, Fig. 3).

Rank 0 computes a plan, broadcasts it and writes ``RUNDIR/plan.json``; strategies only
consume plans. Builders: :func:`build_snapshot_plan`, :mod:`.timeline` (S1, PSS),
:mod:`.vertex` (S6), :mod:`.chunk_plan` (D1), :mod:`.sequences` (R1), :mod:`.load_aware` (H1),
:mod:`.events` (M2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from hpcdgnn.data.manifest import Manifest
from hpcdgnn.partition.appearances import AppearanceMap, DenseChunks

__all__ = ["ChunkAssignment", "PartitionPlan", "balanced_bounds", "build_snapshot_plan", "weighted_bounds"]


def balanced_bounds(total: int, parts: int) -> list[int]:
    """Bounds of ``parts`` contiguous ranges over ``total`` items, sizes differing by at most one."""
    q, r = divmod(total, parts)
    sizes = [q + (1 if p < r else 0) for p in range(parts)]
    return [0, *np.cumsum(sizes).tolist()]


def weighted_bounds(work: np.ndarray, parts: int) -> list[int]:
    """Bounds of ``parts`` contiguous ranges cutting the running sum of ``work`` nearest to multiples of total/parts."""
    work = np.asarray(work, dtype=np.float64)
    n = work.size
    if n <= parts or work.sum() <= 0:
        # at most one item per part: nothing to balance; idle ranks trail, as with count balance
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
    """D1's chunks (DGC §4), broadcast with the plan; ``plan.json`` gets only :meth:`summary`."""

    appearances: AppearanceMap
    """Each appearance (v, t)'s chunk and rank, and its row there (no (T, N) table where few are active)."""
    chunk_owner: np.ndarray
    """(C,) rank of each chunk (Alg. 1 / Eq. 3)."""
    num_chunks: int
    lp_iterations: int
    cut_fraction: float
    """Weight of the super-graph's edges between chunks over the total (DGC §4.1)."""
    size_cap: int = 0
    """The largest chunk label propagation allowed, in appearances (``chunk_size``, resolved when ``auto``)."""

    @property
    def rnn_owner(self) -> np.ndarray:
        """(N,) RNN owner of each vertex: the rank holding most of its active appearances, within a balanced share
        (:func:`~hpcdgnn.partition.chunks.assign_rnn_owners`)."""
        return self.appearances.rnn_owner

    def summary(self) -> dict:
        """What ``plan.json`` records of the chunks."""
        return {"num_chunks": self.num_chunks, "lp_iterations": self.lp_iterations, "cut_fraction": self.cut_fraction,
                "size_cap": self.size_cap}


@dataclass(frozen=True, kw_only=True)
class PartitionPlan:
    """Snapshot and vertex-row ownership for P ranks (IBM §4.2, Fig. 3); ``snapshot_owner[t]`` runs snapshot t."""

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
    """Vertex partitioning (S6): vertices in rank order, sliced by ``vertex_bounds``; None = identity."""
    load_order: list[int] | None = None
    """Load-aware plans (DynaHB Alg. 1): vertices by descending load, the P-invariant order batches draw from."""
    train_horizon: int | None = None
    """Last snapshot whose embedding enters the training loss (None: T - 1); causal models need no gradient past it."""
    chunks: ChunkAssignment | None = None
    """Chunk plans (D1): the chunks and their ranks."""
    eval_scale: float = 1.0
    """Work-balanced blocks: factor on the work of snapshots past the horizon (fitted by ``strategy.balance``)."""

    def __setstate__(self, state: dict) -> None:
        # a checkpoint of an earlier version holds a chunk or grid plan's (T, N) chunk table and RNN owners, no
        # map: as DenseChunks they name the same ranks and rows, so --resume, embed and predict on its P go on
        c = state.get("chunks")
        if c is not None and "appearances" not in vars(c):
            old = vars(c)
            old["appearances"] = DenseChunks(state["num_ranks"], old.pop("chunk"), old["chunk_owner"],
                                             old.pop("rnn_owner"))
        self.__dict__.update(state)

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
    """The S1 plan: snapshot ownership and count-balanced vertex ranges.

    Args:
        manifest: the dataset.
        num_ranks: P.
        work: per-snapshot cost; blocks cut at equal work (``layout="block"`` only).
        layout: ``block`` (contiguous, IBM §4.2) or ``cyclic`` (t on rank t mod P, so each
            phase between two exchanges is balanced, not only the epoch).
        blocks: checkpoint blocks nb (S2), each split over the ranks (IBM Fig. 3b).
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
