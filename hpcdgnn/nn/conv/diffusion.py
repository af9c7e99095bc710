r"""Bidirectional random-walk diffusion convolution (DCRNN, Li et al. 2018, Eq. 2), computed sparsely.

.. math::
    P_f = D_O^{-1} A,\qquad P_b = D_I^{-1} A^\top,\qquad
    x \star_{\mathcal G} \Theta = \sum_{k<K} \big(P_f^k x\, \Theta_{f,k} + P_b^k x\, \Theta_{b,k}\big) + b

D_O, D_I are out- and in-degrees (self-loops kept). The two k = 0 terms share one weight, so the basis is
(n, (2K - 1)·F). Unlike PyG Temporal's dense ``DConv``, this never leaves CSR."""

from __future__ import annotations

import torch

from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_entries, sorted_csr, spmm

__all__ = ["diffusion_basis", "transitions"]


def _normalised(rows, cols, w, n, dtype) -> NormalizedAdjacency:
    deg = torch.zeros(n, dtype=torch.float64, device=w.device).index_add_(0, rows, w)
    inv = torch.where(deg > 0, 1.0 / deg, torch.zeros_like(deg))
    v = (w * inv[rows]).to(dtype)
    return NormalizedAdjacency(-1, sorted_csr(rows, cols, v, (n, n)), sorted_csr(cols, rows, v, (n, n)))


def transitions(t: int, indptr, indices, weights, dtype: torch.dtype) -> tuple[NormalizedAdjacency,
                                                                                NormalizedAdjacency]:
    """(P_f, P_b) = (D_O^{-1} A, D_I^{-1} Aᵀ) of a CSR adjacency, computed in float64 then cast."""
    rows, cols, w, n = csr_entries(indptr, indices, weights)
    fwd, bwd = _normalised(rows, cols, w, n, dtype), _normalised(cols, rows, w, n, dtype)
    fwd.t = bwd.t = t
    return fwd, bwd


def diffusion_basis(ops: tuple[NormalizedAdjacency, NormalizedAdjacency], x: torch.Tensor, K: int) -> torch.Tensor:
    """``[x | P_f x | … | P_f^{K-1} x | P_b x | … | P_b^{K-1} x]`` (n, (2K - 1)·F) for x (n, F)."""
    out = [x]
    for op in ops:
        y = x
        for _ in range(1, K):
            y = spmm(op, y)
            out.append(y)
    return out[0] if K == 1 else torch.cat(out, dim=-1)
