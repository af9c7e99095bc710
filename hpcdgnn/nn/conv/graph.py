"""What a layer's neighbourhood aggregation sees of the graph, whatever the partitioning.

:class:`LocalGraph` holds the rows' entries of Ã (IBM Eq. 1) over ``[own rows ; halo rows]`` columns and a
``gather`` into that column space: the identity for a whole snapshot, one halo all-to-all (SPEC S6/D3)
for vertex and chunk partitions. The gather is the only communication, so every layer runs under every
strategy exactly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.indices import unique_ints
from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_mm, sorted_csr, spmm

__all__ = ["LocalGraph", "RowGroups"]


class RowGroups:
    """Ã split into groups of rows, each aggregated from its own gathered columns (fused chunks, DGC §5.1.1).

    Columns keep their order inside a group, so the forward is identical to the ungrouped product.

    Args:
        adj: the rows' Ã over [own ; halo] columns.
        group: group id (0..G-1) of each row."""

    def __init__(self, adj: NormalizedAdjacency, group: np.ndarray) -> None:
        a = adj.a.cpu()
        crow, col, val = a.crow_indices().numpy(), a.col_indices().numpy(), a.values()
        n, dev = a.shape[0], adj.a.device
        row = np.repeat(np.arange(n), np.diff(crow))
        group = np.asarray(group, dtype=np.int64)
        G = int(group.max(initial=-1)) + 1
        rows = np.argsort(group, kind="stable")
        row_bounds = np.searchsorted(group[rows], np.arange(G + 1))
        pos = np.empty(n, dtype=np.int64)
        pos[rows] = np.arange(n) - row_bounds[group[rows]]
        ent = np.argsort(group[row], kind="stable")
        ent_bounds = np.searchsorted(group[row][ent], np.arange(G + 1))
        self.ops, self.cols, self.rows = [], [], []
        self.num_rows = n
        self.loaded_rows = 0
        self.nbytes = 0
        for g in range(G):
            e = ent[ent_bounds[g] : ent_bounds[g + 1]]
            cols, c_local = np.unique(col[e], return_inverse=True)
            r_local, c_local, v = torch.from_numpy(pos[row[e]]), torch.from_numpy(c_local.reshape(-1)), val[e]
            shape = (int(row_bounds[g + 1] - row_bounds[g]), int(cols.shape[0]))
            op = NormalizedAdjacency(-1, sorted_csr(r_local, c_local, v, shape).to(dev),
                                     sorted_csr(c_local, r_local, v, (shape[1], shape[0])).to(dev))
            self.ops.append(op)
            self.cols.append(torch.from_numpy(cols).to(dev))
            self.rows.append(torch.from_numpy(rows[row_bounds[g] : row_bounds[g + 1]]).to(dev))
            self.loaded_rows += int(cols.shape[0])
            self.nbytes += op.nbytes + (cols.shape[0] + self.rows[-1].shape[0]) * 8

    @staticmethod
    def rows_read(group: np.ndarray, row: np.ndarray, col: np.ndarray) -> int:
        """Rows one aggregation in these groups reads (distinct (group, column) pairs), without building it."""
        width = int(col.max(initial=0)) + 1
        return int(unique_ints(np.asarray(group)[row].astype(np.int64) * width + col).shape[0])

    def __len__(self) -> int:
        return len(self.ops)

    def propagate(self, full: torch.Tensor) -> torch.Tensor:
        """Ã·full group by group: (own + halo, F) -> (rows, F)."""
        if not self.ops:  # no rows here (P > appearances): a slice keeps the gather's backward on this rank
            return full[:0]
        return _GroupedSpMM.apply(full, self)


class _GroupedSpMM(torch.autograd.Function):
    """Each group's Ã_g · full[cols_g]; backward adds Ã_gᵀ · dY_g into one buffer (not a zero-filled one per group)."""

    @staticmethod
    def forward(ctx, full, groups):  # noqa: D102
        ctx.groups, ctx.shape = groups, full.shape
        out = full.new_empty(groups.num_rows, full.shape[1])
        for op, c, rows in zip(groups.ops, groups.cols, groups.rows, strict=True):
            out.index_copy_(0, rows, csr_mm(op.a, full.index_select(0, c)))
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        g = ctx.groups
        grad = grad.contiguous()
        gin = grad.new_zeros(ctx.shape)
        for op, c, rows in zip(g.ops, g.cols, g.rows, strict=True):
            gin.index_add_(0, c, csr_mm(op.a_t, grad.index_select(0, rows)))
        return gin, None


def _identity(m: torch.Tensor) -> torch.Tensor:
    return m


@dataclass
class LocalGraph:
    """Rows ``0..n-1`` of Ã over ``n + halo`` columns and the gather into those columns; or, for a sampled
    block (``own`` set), its output rows over the columns of the rows it reads."""

    adj: NormalizedAdjacency
    gather: Callable[[torch.Tensor], torch.Tensor] = _identity
    #: when set, :meth:`propagate` aggregates group by group (fused chunks, DGC §5.1.1)
    groups: RowGroups | None = None
    #: (n,) the column holding each row's own vertex, for a layer that reads it (GAT's destination term); None:
    #: row i's is column i (own rows first)
    own: torch.Tensor | None = None

    @property
    def num_rows(self) -> int:
        """Rows aggregated here (n)."""
        return int(self.adj.a.shape[0])

    def propagate(self, h: torch.Tensor) -> torch.Tensor:
        """Ã·gather(h): the GCN aggregation of the rows (in groups when :attr:`groups` is set)."""
        full = self.gather(h)
        return spmm(self.adj, full) if self.groups is None else self.groups.propagate(full)

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, column) of every entry of Ã, grouped by row in column order."""
        a = self.adj.a
        crow, col = a.crow_indices(), a.col_indices()
        row = torch.repeat_interleave(torch.arange(a.shape[0], device=crow.device), torch.diff(crow),
                                      output_size=col.shape[0])
        return row, col
