r"""The link-prediction decoder's pair loop: ``s_e = w2 · relu(pu[u_e] + pv[v_e] + b1) + b2`` for pairs e = (u, v).

``(pu, pv) = (z W1[:, :F]^T, z W1[:, F:]^T)`` is the first layer applied once per vertex (not per pair), so the
(E, hidden) layer exists only inside a cache-sized chunk and is recomputed in the backward (:func:`edge_logits`).
The training loss ``Σ_e BCE(s_e, y_e)`` takes one compiled pass where the CPU kernels apply (:func:`edge_bce`,
:mod:`hpcdgnn.ops.kernels`); :func:`edge_bce_reference` is its plain-torch form, the same sums to rounding.

Shapes:
    z: (N, F); w1: (hidden, 2F); b1, w2: (hidden,) or w2 (1, hidden) where noted; src, dst, label: (E,).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from hpcdgnn.ops import kernels

__all__ = ["edge_bce", "edge_bce_reference", "edge_logits", "project"]

#: Edges per chunk of the fused decoder on the CPU: (chunk, hidden) temporaries stay in a core's L2 cache.
_EDGE_CHUNK = 8192
#: Bytes of one (chunk, hidden) temporary on a GPU: a chunk costs ~20 launches whatever its size, so chunks are large.
_EDGE_CHUNK_DEVICE_BYTES = 64 << 20


def _edge_chunk(pu: torch.Tensor) -> int:
    """Pairs per :class:`_EdgeMLP` chunk: L2-sized on the CPU, :data:`_EDGE_CHUNK_DEVICE_BYTES` elsewhere."""
    if pu.device.type == "cpu":
        return _EDGE_CHUNK
    return max(_EDGE_CHUNK, _EDGE_CHUNK_DEVICE_BYTES // max(1, pu.shape[1] * pu.element_size()))


def _project(z: torch.Tensor, w1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pu, pv) = (z W1[:, :F]^T, z W1[:, F:]^T)."""
    f = z.shape[1]
    return z @ w1[:, :f].t(), z @ w1[:, f:].t()


class _EdgeMLP(torch.autograd.Function):
    """``w2 · relu(pu[src] + pv[dst] + b1) + b2`` per edge, with its adjoint.

    The (E, hidden) layer lives only inside a cache-sized chunk and is recomputed in the backward.
    """

    @staticmethod
    def _hidden(pu, pv, b1, src, dst):
        """relu(pu[src] + pv[dst] + b1) for one chunk of edges, in one (chunk, hidden) buffer."""
        h = pu.index_select(0, src)
        h += pv.index_select(0, dst)
        h += b1
        return h.relu_()

    @staticmethod
    def forward(ctx, pu, pv, b1, w2, b2, src, dst):  # noqa: D102
        ctx.save_for_backward(pu, pv, b1, w2, src, dst)
        E, chunk = src.shape[0], _edge_chunk(pu)
        out = pu.new_empty(E)
        for s in range(0, E, chunk):
            e = min(E, s + chunk)
            torch.mv(_EdgeMLP._hidden(pu, pv, b1, src[s:e], dst[s:e]), w2, out=out[s:e])
        out += b2
        return out

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        pu, pv, b1, w2, src, dst = ctx.saved_tensors
        dpu, dpv = torch.zeros_like(pu), torch.zeros_like(pv)
        db1, dw2 = torch.zeros_like(b1), torch.zeros_like(w2)
        E, chunk = src.shape[0], _edge_chunk(pu)
        for s in range(0, E, chunk):
            e = min(E, s + chunk)
            h = _EdgeMLP._hidden(pu, pv, b1, src[s:e], dst[s:e])
            gc = g[s:e]
            dw2 += h.t() @ gc
            dh = torch.outer(gc, w2)
            dh.mul_(h > 0)
            db1 += dh.sum(0)
            dpu.index_add_(0, src[s:e], dh)
            dpv.index_add_(0, dst[s:e], dh)
        return dpu, dpv, db1, dw2, g.sum().reshape(1), None, None


class _EdgeBCE(torch.autograd.Function):
    """The CPU training loss ``Σ_e BCE(logit_e, label_e)`` from ``z``, forward and backward in one compiled pass.

    Returns the loss and the non-differentiable logits and projections (pu, pv).
    """

    @staticmethod
    def forward(ctx, z, w1, b1, w2, b2, src, dst, label):  # noqa: D102
        pu, pv = _project(z, w1)  # no autograd inside a Function's forward
        loss, logits, dpu, dpv, db1, dw2, db2 = kernels.edge_bce_train(pu, pv, b1, w2[0], b2, src, dst, label)
        ctx.save_for_backward(z, w1, dpu, dpv)
        ctx.small = (db1, dw2, db2)
        ctx.mark_non_differentiable(logits, pu, pv)
        # no gradient for logits and projections: skips autograd's zero-filled placeholders
        ctx.set_materialize_grads(False)
        return loss, logits, pu, pv

    @staticmethod
    def backward(ctx, g, *_):  # noqa: D102
        z, w1, dpu, dpv = ctx.saved_tensors
        db1, dw2, db2 = ctx.small
        f = z.shape[1]
        wu, wv = w1[:, :f] * g, w1[:, f:] * g
        dz = (dpu @ wu).addmm_(dpv, wv) if ctx.needs_input_grad[0] else None  # in place: addmm would copy
        dw1 = torch.cat([dpu.t() @ z, dpv.t() @ z], 1) * g
        db1 = db1 * g
        return dz, dw1, db1, (dw2 * g).reshape(1, -1), db2 * g, None, None, None


def project(z: torch.Tensor, w1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The first layer's halves once per row of ``z``: (pu, pv), each (N, hidden)."""
    return _project(z, w1)


def edge_logits(pu: torch.Tensor, pv: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Differentiable logits (E,) of pairs ``src[e] -> dst[e]`` from :func:`project`'s (pu, pv); ``w2`` (hidden,)."""
    return _EdgeMLP.apply(pu, pv, b1, w2, b2, src, dst)


def edge_bce_reference(z, w1, b1, w2, b2, src, dst, label):
    """(summed BCE with autograd, detached logits, detached pu, detached pv) in torch ops; ``w2`` (1, hidden)."""
    pu, pv = _project(z, w1)
    logits = edge_logits(pu, pv, b1, w2[0], b2, src, dst)
    loss = F.binary_cross_entropy_with_logits(logits, label, reduction="sum")
    return loss, logits.detach(), pu.detach(), pv.detach()


def edge_bce(z, w1, b1, w2, b2, src, dst, label):
    """:func:`edge_bce_reference`'s result, in one compiled pass where the CPU kernels apply (``edge_bce_train``)."""
    if kernels.available(z, w1, b1, w2, b2, label, pairs=src.shape[0], kernel="edge_bce_train"):
        return _EdgeBCE.apply(z, w1, b1, w2, b2, src, dst, label)
    return edge_bce_reference(z, w1, b1, w2, b2, src, dst, label)
