r"""Chebyshev graph convolution (Defferrard et al. 2016) as PyG's ``ChebConv`` defines it, computed sparsely.

.. math::
    L = I - D^{-1/2} A D^{-1/2},\qquad
    \hat L = \frac{2L}{\lambda_{max}} - I = -D^{-1/2} A D^{-1/2}\quad(\lambda_{max} = 2),

    T_0 x = x,\quad T_1 x = \hat L x,\quad T_k x = 2 \hat L\, T_{k-1} x - T_{k-2} x,\qquad
    \mathrm{ChebConv}_K(x) = \sum_{k<K} T_k x\, \Theta_k + b

PyG's ``ChebConv`` with ``normalization="sym"`` and no ``lambda_max`` sets λ_max = 2·max of the Laplacian's
weights = 2 (its diagonal is 1 and the rest ≤ 0), so L̂ has a zero diagonal: that is the operator here.
Input self-loops are dropped (``get_laplacian`` removes them) and D holds the row sums of the remaining A
(out-degrees: row u of L̂·x sums over u's out-edges, as Ã·x does in :mod:`hpcdgnn.nn.conv.gcn`); a vertex
without edges has D = 0 and gets no entries (PyG's inf -> 0). For a symmetric A this is PyG's operator
exactly; for a directed one PyG takes the degree on the sending side, a choice the spectral derivation
(which assumes an undirected graph) does not make.

:func:`cheb_basis` returns ``[T_0 x | T_1 x | … | T_{K-1} x]`` as one (n, K·F) matrix, so the K filters of
any number of gates are one GEMM with a (K·F, gates·F') weight: the aggregation is shared by all gates.
"""

from __future__ import annotations

import torch

from hpcdgnn.nn.conv.gcn import NormalizedAdjacency, csr_entries, sorted_csr, spmm

__all__ = ["cheb_basis", "scaled_laplacian"]


def scaled_laplacian(t: int, indptr, indices, weights, dtype: torch.dtype) -> NormalizedAdjacency:
    """L̂ = -D^{-1/2} A D^{-1/2} of a CSR adjacency (self-loops dropped), computed in float64 then cast;
    with its transpose for the backward pass (an explicit-adjoint product, as Ã's)."""
    rows, cols, w, n = csr_entries(indptr, indices, weights)
    dev = rows.device
    keep = rows != cols
    rows, cols, w = rows[keep], cols[keep], w[keep]
    deg = torch.zeros(n, dtype=torch.float64, device=dev).index_add_(0, rows, w)
    dinv = torch.where(deg > 0, deg.rsqrt(), torch.zeros_like(deg))
    v = (-(dinv[rows] * w * dinv[cols])).to(dtype)
    return NormalizedAdjacency(t, sorted_csr(rows, cols, v, (n, n)), sorted_csr(cols, rows, v, (n, n)))


def cheb_basis(op: NormalizedAdjacency, x: torch.Tensor, K: int) -> torch.Tensor:
    """``[T_0 x | … | T_{K-1} x]`` (n, K·F) for x (n, F) and L̂ ``op`` (K - 1 sparse products, differentiable)."""
    out = [x]
    if K > 1:
        out.append(spmm(op, x))
    for _ in range(2, K):
        out.append(2.0 * spmm(op, out[-1]) - out[-2])
    return out[0] if K == 1 else torch.cat(out, dim=-1)
