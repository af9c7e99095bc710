"""GCN propagation with IBM Eq. 1 normalisation and an explicit-adjoint sparse product.

.. math::
    \\tilde A = D^{-1/2} (A + I) D^{-1/2},\\qquad D_{uu} = 1 + \\sum_v A_{uv}      (IBM Eq. 1)

For 0/1 weights, :math:`D_{uu} = 1 + \\deg_u` exactly as in IBM §2.2. The GCN
operation ``Y = σ(Ã X W)`` (Eq. 2) is split as ``Y' = Ã X`` then ``Y' W``
(IBM §5.5) so the first layer's ``Ã X`` can be computed once (SPEC S4).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

# CSR tensors are central here, not an experiment: the per-process "beta" notice is noise in job logs
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)


__all__ = ["NormalizedAdjacency", "block_diagonal", "gcn_norm", "sorted_csr", "spmm"]


@dataclass
class NormalizedAdjacency:
    """Ã of one snapshot and its transpose (for the backward pass), as torch CSR tensors."""

    t: int
    a: torch.Tensor
    a_t: torch.Tensor

    @property
    def nbytes(self) -> int:
        """Bytes held by both CSR matrices."""
        return sum(
            x.numel() * x.element_size()
            for m in (self.a, self.a_t)
            for x in (m.crow_indices(), m.col_indices(), m.values())
        )


def _as_tensor(a) -> torch.Tensor:
    return a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))


def sorted_csr(
    rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """CSR of (row, col, value) entries with unique (row, col), ordered by row then column."""
    nrows, ncols = shape
    keys, order = torch.sort(rows * ncols + cols)
    crow = torch.searchsorted(keys, torch.arange(nrows + 1, device=keys.device, dtype=torch.int64) * ncols)
    # invariants hold by construction (sorted unique keys); skipping the check also skips its warning
    return torch.sparse_csr_tensor(crow, cols[order], vals[order], shape, check_invariants=False)


def gcn_norm(t: int, indptr, indices, weights, dtype: torch.dtype) -> NormalizedAdjacency:
    """Build Ã (IBM Eq. 1) of a CSR adjacency with self-loops added, in float64 then cast.

    The arrays may be numpy or torch (on any device: the result lives where
    ``indptr`` is, so a snapshot decoded on the GPU is normalised there, S3).
    Torch ops only; on the CPU every reduction runs in a fixed order, so the
    same snapshot gives bit-identical Ã on every rank.
    """
    indptr, indices, weights = _as_tensor(indptr).to(torch.int64), _as_tensor(indices), _as_tensor(weights)
    dev = indptr.device
    n, nnz = indptr.shape[0] - 1, indices.shape[0]
    rows = torch.repeat_interleave(torch.arange(n, device=dev), torch.diff(indptr), output_size=nnz)
    cols = indices.to(dev, torch.int64)
    w = weights.to(dev, torch.float64)
    keep = rows != cols  # A + I: an input self-loop would be counted twice otherwise
    rows, cols, w = rows[keep], cols[keep], w[keep]
    deg = torch.ones(n, dtype=torch.float64, device=dev).index_add_(0, rows, w)
    dinv = 1.0 / torch.sqrt(deg)
    loop = torch.arange(n, dtype=torch.int64, device=dev)
    r = torch.cat([rows, loop])
    c = torch.cat([cols, loop])
    v = (torch.cat([w, torch.ones(n, dtype=torch.float64, device=dev)]) * dinv[r] * dinv[c]).to(dtype)
    return NormalizedAdjacency(t, sorted_csr(r, c, v, (n, n)), sorted_csr(c, r, v, (n, n)))


class _SpMM(torch.autograd.Function):
    """Y = Ã X with dX = Ãᵀ dY, using the precomputed transpose (no sparse autograd needed)."""

    @staticmethod
    def forward(ctx, x, adj):  # noqa: D102
        ctx.adj = adj
        return torch.sparse.mm(adj.a, x)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return torch.sparse.mm(ctx.adj.a_t, grad.contiguous()), None


def spmm(adj: NormalizedAdjacency, x: torch.Tensor) -> torch.Tensor:
    """Differentiable Ã·X for X of shape (N, F)."""
    return _SpMM.apply(x, adj)


def _block_diagonal_csr(ms: list[torch.Tensor]) -> torch.Tensor:
    crows, cols, vals = [], [], []
    nnz = rows = width = 0
    for m in ms:
        crow = m.crow_indices().to(torch.int64)
        crows.append(crow[:-1] + nnz)
        cols.append(m.col_indices().to(torch.int64) + width)
        vals.append(m.values())
        nnz += int(crow[-1])
        rows, width = rows + m.shape[0], width + m.shape[1]
    crows.append(crows[0].new_tensor([nnz]))
    return torch.sparse_csr_tensor(torch.cat(crows), torch.cat(cols), torch.cat(vals), (rows, width),
                                   check_invariants=False)


def block_diagonal(adjs: list[NormalizedAdjacency]) -> NormalizedAdjacency:
    """diag(Ã_1, …, Ã_S): the snapshots of a phase as one operator over their stacked rows.

    One sparse product over all of them replaces S small ones (snapshot-parallel
    execution, PiPAD's idea): each output row still sums the same entries in the
    same column order, so the result equals the per-snapshot products.
    """
    if len(adjs) == 1:
        return adjs[0]
    return NormalizedAdjacency(-1, _block_diagonal_csr([a.a for a in adjs]), _block_diagonal_csr([a.a_t for a in adjs]))
