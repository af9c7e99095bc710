"""``strategy: grid``: snapshots over Ps groups, each snapshot's rows over the Pv ranks of a group (IBM §6.5).

The plan (:mod:`hpcdgnn.partition.grid`) is a chunk plan with one chunk per grid cell, so the chunk strategy's
exact machinery runs it: the GCN's halo exchange reads neighbours' rows from the ranks of the same group, and
each time-mixing layer moves a rank's rows to their vertices' RNN owners in the same column and back. Ps × 1 is
snapshot partitioning with redistribution, 1 × Pv vertex partitioning. The exchanges are all-to-all-v over all
ranks whose counts are non-zero only within a group (halo) or a column (RNN).
"""

from __future__ import annotations

import numpy as np

from hpcdgnn.partition.grid import grid_shape, plan_grid
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.strategies.chunk import ChunkStrategy
from hpcdgnn.strategies.halo import HaloStrategy
from hpcdgnn.strategies.registry import register_strategy

__all__ = ["GridStrategy"]


@register_strategy("grid")
class GridStrategy(ChunkStrategy):
    """Ps × Pv ranks: snapshot groups × vertex ranges (IBM §6.5's future work)."""

    costly_plan = False  # one chunk per grid cell: no label propagation

    @classmethod
    def make_plan(cls, manifest, num_ranks, job) -> PartitionPlan:
        """The grid plan (:func:`~hpcdgnn.partition.grid.plan_grid`)."""
        return plan_grid(manifest, num_ranks, job)

    @classmethod
    def footprint(cls, job, manifest, num_ranks: int) -> dict[str, tuple[int, str]]:
        """None: a grid plan's appearances are looked up by arithmetic (``GridCells``, O(T + N) a rank)."""
        return {}

    @classmethod
    def variants(cls, opts, num_ranks: int, manifest) -> list:
        """Every Ps × Pv factorisation of P when the job fixes neither side (first the one such a job trains:
        :func:`~hpcdgnn.partition.grid.grid_shape`'s), else the job's."""
        import dataclasses

        if opts.snapshot_ranks or opts.vertex_ranks:
            return [opts]
        trained, _ = grid_shape(num_ranks, manifest.num_snapshots)
        sides = [trained] + [d for d in range(1, num_ranks + 1)
                             if num_ranks % d == 0 and d <= manifest.num_snapshots and d != trained]
        return [dataclasses.replace(opts, snapshot_ranks=d, vertex_ranks=num_ranks // d) for d in sides]

    @classmethod
    def check_job(cls, job, num_ranks: int, where: str | None) -> None:
        """Refuse (one line) sides whose product is not P, or a side that does not divide P."""
        grid_shape(num_ranks, 1 << 62, job.strategy.snapshot_ranks, job.strategy.vertex_ranks, where)

    def shape(self) -> str:
        """``Ps×Pv (snapshot_ranks×vertex_ranks)``: what the job's sides, or P alone, made."""
        Ps, Pv = grid_shape(self.comm.size, self.ctx.manifest.num_snapshots, self.ctx.job.strategy.snapshot_ranks,
                            self.ctx.job.strategy.vertex_ranks)
        return f" {Ps}x{Pv} (snapshot_ranks x vertex_ranks)"

    def _fuse(self, chunk: np.ndarray, row: np.ndarray, model, cap_mb: float | None = None):
        """One chunk per rank (its grid cell): nothing to fuse, the plain product over its rows."""
        self._cap_mb = 0.0
        cols = int(self.adj.a.shape[1])
        self._fusion_stats = np.array([1, 1, cols, cols])
        return None

    def _sequences(self, active: np.ndarray, dev):
        """Every step of every vertex (the grid holds all appearances)."""
        self._time_slots = np.zeros(2)
        return None

    def report(self, epoch: int, train_loss: float) -> dict:
        """With ``stale`` on: θ, rows reused and bytes saved (no chunks to report)."""
        self._fuse_args = None
        return HaloStrategy.report(self, epoch, train_loss)
