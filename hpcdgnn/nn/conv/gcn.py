"""GCN propagation with IBM Eq. 1 normalisation and an explicit-adjoint sparse product.

.. math::
    \\tilde A = D^{-1/2} (A + I) D^{-1/2},\\qquad D_{uu} = 1 + \\sum_v A_{uv}      (IBM Eq. 1)

For 0/1 weights, :math:`D_{uu} = 1 + \\deg_u` exactly as in IBM §2.2. The GCN
operation ``Y = σ(Ã X W)`` (Eq. 2) is split as ``Y' = Ã X`` then ``Y' W``
(IBM §5.5) so the first layer's ``Ã X`` can be computed once (SPEC S4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.data.snapshot import csr_rows

__all__ = ["NormalizedAdjacency", "gcn_norm", "spmm"]


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


def _to_csr(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n: int, dtype: torch.dtype) -> torch.Tensor:
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    crow = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=crow[1:])
    return torch.sparse_csr_tensor(
        torch.from_numpy(crow), torch.from_numpy(cols.astype(np.int64)), torch.from_numpy(vals).to(dtype), (n, n)
    )


def gcn_norm(
    t: int, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray, dtype: torch.dtype
) -> NormalizedAdjacency:
    """Build Ã (IBM Eq. 1) of a CSR adjacency with self-loops added, in float64 then cast."""
    n = indptr.shape[0] - 1
    rows = csr_rows(indptr)
    cols = indices.astype(np.int64)
    w = weights.astype(np.float64)
    keep = rows != cols  # A + I: an input self-loop would be counted twice otherwise
    rows, cols, w = rows[keep], cols[keep], w[keep]
    deg = 1.0 + np.bincount(rows, weights=w, minlength=n)
    dinv = 1.0 / np.sqrt(deg)
    loop = np.arange(n, dtype=np.int64)
    r = np.concatenate([rows, loop])
    c = np.concatenate([cols, loop])
    v = np.concatenate([w, np.ones(n)]) * dinv[r] * dinv[c]
    return NormalizedAdjacency(t, _to_csr(r, c, v, n, dtype), _to_csr(c, r, v, n, dtype))


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
