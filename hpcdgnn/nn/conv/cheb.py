r"""Chebyshev graph convolution (Defferrard et al. 2016) as PyG's ``ChebConv`` defines it, computed sparsely.

.. math::
    \hat L = \frac{2L}{\lambda_{max}} - I = -D^{-1/2} A D^{-1/2}\quad(\lambda_{max} = 2),\qquad
    T_0 x = x,\quad T_1 x = \hat L x,\quad T_k x = 2 \hat L\, T_{k-1} x - T_{k-2} x,\qquad
    \mathrm{ChebConv}_K(x) = \sum_{k<K} T_k x\, \Theta_k + b

PyG's default λ_max = 2 (``normalization="sym"``); self-loops dropped, D the out-degree row sums (PyG's
operator exactly for symmetric A). :func:`cheb_basis` returns ``[T_0 x | … | T_{K-1} x]`` so all gates'
filters are one GEMM."""

from __future__ import annotations

import torch

from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_entries, sorted_csr, spmm

__all__ = ["cheb_basis", "scaled_laplacian"]


def scaled_laplacian(t: int, indptr, indices, weights, dtype: torch.dtype) -> NormalizedAdjacency:
    """L̂ = -D^{-1/2} A D^{-1/2} of a CSR adjacency (self-loops dropped), in float64 then cast, with its transpose."""
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
