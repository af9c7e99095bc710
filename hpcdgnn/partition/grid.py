"""The snapshot × vertex grid (IBM §6.5's future work): Ps groups of snapshots, each snapshot's rows over Pv ranks.

Rank r = g · Pv + j holds rows V_j of the snapshots of group g (cyclic t mod Ps, or contiguous runs); the RNN
owner of vertex v ∈ V_j is rank (g', j) with V_j cut into Ps ranges, so the time encoder's rows move only
within a column j and the GCN's halo only within a group g. Expressed as a chunk plan with one chunk per grid
cell, so the chunk strategy's exact machinery (halo, RNN-owner exchanges) runs it unchanged.
"""

from __future__ import annotations

import numpy as np

from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.errors import ConfigError
from hpcdgnn.partition.appearances import GridCells
from hpcdgnn.partition.plan import ChunkAssignment, PartitionPlan, balanced_bounds
from hpcdgnn.partition.timeline import train_horizon

__all__ = ["grid_shape", "plan_grid"]


def grid_shape(num_ranks: int, num_snapshots: int, snapshot_ranks: int = 0, vertex_ranks: int = 0,
               where: str | None = None) -> tuple[int, int]:
    """(Ps, Pv) with Ps · Pv = P from the given sides (0 = derived); neither given: the largest Ps ≤ T dividing P.

    Raises:
        ConfigError: Ps · Pv ≠ P, or a side that does not divide P (one line naming the key, after ``where``).
    """
    P, Ps, Pv = num_ranks, snapshot_ranks, vertex_ranks
    head = f"{where}: " if where else ""
    if Ps and Pv:
        if Ps * Pv != P:
            raise ConfigError(f"{head}strategy.snapshot_ranks: {Ps} × strategy.vertex_ranks {Pv} = {Ps * Pv}, but the "
                              f"job has P = {P} ranks; choose sides whose product is {P}")
        return Ps, Pv
    side, name = (Ps, "snapshot_ranks") if Ps else (Pv, "vertex_ranks")
    if side:
        if P % side:
            raise ConfigError(f"{head}strategy.{name}: {side} does not divide P = {P}; choose one of "
                              f"{', '.join(str(d) for d in range(1, P + 1) if P % d == 0)}")
        return (side, P // side) if Ps else (P // side, side)
    Ps = max(d for d in range(1, P + 1) if P % d == 0 and d <= max(1, num_snapshots))
    return Ps, P // Ps


def plan_grid(manifest: Manifest, num_ranks: int, job: JobConfig) -> PartitionPlan:
    """The grid plan for P ranks: a chunk plan whose chunk c is grid cell (g, j), c = g · Pv + j, on rank c."""
    T, N, P = manifest.num_snapshots, manifest.num_vertices, num_ranks
    opts = job.strategy
    Ps, Pv = grid_shape(P, T, opts.snapshot_ranks, opts.vertex_ranks)
    if opts.layout == "cyclic":
        group = np.arange(T) % Ps
    else:
        tb = balanced_bounds(T, Ps)
        group = np.repeat(np.arange(Ps), np.diff(tb))
    vb = np.asarray(balanced_bounds(N, Pv))
    column = np.repeat(np.arange(Pv), np.diff(vb))
    # each column's vertices cut into Ps RNN ranges, one per rank of the column
    rnn_group = np.empty(N, dtype=np.int64)
    for j in range(Pv):
        inner = balanced_bounds(int(vb[j + 1] - vb[j]), Ps)
        rnn_group[vb[j]:vb[j + 1]] = np.repeat(np.arange(Ps), np.diff(inner))
    rnn_owner = rnn_group * Pv + column
    ranks = [{"group": p // Pv, "column": p % Pv, "snapshots": int((group == p // Pv).sum()),
              "vertices": int((column == p % Pv).sum()), "rnn_vertices": int((rnn_owner == p).sum())}
             for p in range(P)]
    # owners and rows by arithmetic on the groups and ranges: no (T, N) table on any rank
    chunks = ChunkAssignment(appearances=GridCells(P, group, vb, rnn_owner), chunk_owner=np.arange(P), num_chunks=P,
                             lp_iterations=0, cut_fraction=0.0)
    return PartitionPlan(kind="grid", num_ranks=P, num_snapshots=T, num_vertices=N,
                         snapshot_owner=[int(group[t]) * Pv for t in range(T)], vertex_bounds=[0] * (P + 1),
                         ranks=ranks, train_horizon=train_horizon(manifest, job), chunks=chunks)
