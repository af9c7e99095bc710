"""Autograd-aware redistribution (STYLE G4; IBM §4.2: backward runs the redistributions in reverse).

``AllToAllV`` forwards rows with MPI_Alltoallv; its backward sends the
incoming gradient back along the same routes with the counts swapped — the
adjoint of a permutation of rows across ranks is its inverse permutation.
Forward traffic is counted under ``<tag>.fwd`` and backward under ``<tag>.bwd``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hpcdgnn.comm.communicator import Box, Communicator

__all__ = ["AllToAllV", "Redistribute", "all_to_all_rows", "redistribute"]


class AllToAllV(torch.autograd.Function):
    """Row all-to-all whose backward is the reverse all-to-all."""

    @staticmethod
    def forward(ctx, x, comm, send_rows, recv_rows, tag, reuse):  # noqa: D102
        ctx.comm, ctx.send_rows, ctx.recv_rows, ctx.tag = comm, send_rows, recv_rows, tag
        ctx.reuse = None if reuse is None else f"{reuse}.bwd"
        return comm.alltoallv(x, send_rows, recv_rows, tag=f"{tag}.fwd", reuse=None if reuse is None else f"{reuse}.fwd")

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        g = ctx.comm.alltoallv(grad.contiguous(), ctx.recv_rows, ctx.send_rows, tag=f"{ctx.tag}.bwd", reuse=ctx.reuse)
        return g, None, None, None, None, None


def all_to_all_rows(
    x: torch.Tensor,
    comm: Communicator,
    send_rows: Sequence[int],
    recv_rows: Sequence[int],
    tag: str = "redistribute",
    reuse: str | None = None,
) -> torch.Tensor:
    """Differentiable :meth:`Communicator.alltoallv` of a (rows, unit) tensor.

    ``reuse`` keys the receive buffers of the forward and backward exchanges
    (see :meth:`Communicator.alltoallv`): give each exchange of a training step
    its own key and the step reuses last step's memory.

    The backward is a collective too, so every rank must run it: a rank whose rows
    carry no gradient (one that owns none, P > N) still joins it, through a leaf.
    """
    if torch.is_grad_enabled() and not x.requires_grad:
        x = x.detach().requires_grad_(True)
    return AllToAllV.apply(x, comm, list(send_rows), list(recv_rows), tag, reuse)


def _limit(boxes: Sequence[Box], limit: int | None) -> list[Box]:
    """The boxes cut to rows below ``limit`` (dimension 0), for a backward that moves fewer rows."""
    if limit is None:
        return list(boxes)
    out: list[Box] = []
    for rows, cols in boxes:
        if isinstance(rows, list):
            out.append(([r for r in rows if r < limit], cols))
        else:
            a0, a1 = rows
            out.append(((a0, max(a0, min(a1, limit))), cols))
    return out


class Redistribute(torch.autograd.Function):
    """Box all-to-all (:meth:`Communicator.alltoall_boxes`); backward swaps send and receive boxes.

    ``grad_rows = (send_limit, recv_limit)`` says that only the leading rows of the
    output (``recv_limit``) can carry a gradient and only the leading rows of the
    input (``send_limit``) need one — with a causal model, the snapshots after the
    last training step. The backward then moves only those rows and returns zeros
    for the others.
    """

    @staticmethod
    def forward(ctx, x, comm, recv_shape, send_boxes, recv_boxes, tag, reuse, grad_rows):  # noqa: D102
        ctx.comm, ctx.shape, ctx.tag = comm, tuple(x.shape), tag
        send_limit, recv_limit = grad_rows if grad_rows is not None else (None, None)
        ctx.send_limit = send_limit
        # the backward's boxes: computed once here, so every epoch reuses the same MPI datatypes
        ctx.bwd_send, ctx.bwd_recv = _limit(recv_boxes, recv_limit), _limit(send_boxes, send_limit)
        ctx.reuse = None if reuse is None else f"{reuse}.bwd"
        return comm.alltoall_boxes(
            x, send_boxes, recv_shape, recv_boxes, tag=f"{tag}.fwd", reuse=None if reuse is None else f"{reuse}.fwd"
        )

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        g = ctx.comm.alltoall_boxes(
            grad.contiguous(), ctx.bwd_send, ctx.shape, ctx.bwd_recv, tag=f"{ctx.tag}.bwd", reuse=ctx.reuse
        )
        if ctx.send_limit is not None and ctx.send_limit < g.shape[0]:
            g[ctx.send_limit :].zero_()  # rows no box wrote (a reused buffer holds old data there)
        return g, None, None, None, None, None, None, None


def redistribute(
    x: torch.Tensor,
    comm: Communicator,
    recv_shape: Sequence[int],
    send_boxes: Sequence[Box],
    recv_boxes: Sequence[Box],
    tag: str = "redistribute",
    reuse: str | None = None,
    grad_rows: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Differentiable box all-to-all: the layout change between snapshot and vertex ownership (IBM §4.2).

    ``grad_rows``: see :class:`Redistribute`. Its backward is a collective too: a rank whose rows
    carry no gradient (no rows of its own, or a layer input that is a constant, e.g. with an idle
    halo) still joins it, through a leaf.
    """
    if torch.is_grad_enabled() and not x.requires_grad:
        x = x.detach().requires_grad_(True)
    return Redistribute.apply(x, comm, tuple(recv_shape), list(send_boxes), list(recv_boxes), tag, reuse, grad_rows)
