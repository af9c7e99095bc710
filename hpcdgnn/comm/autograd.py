"""Autograd-aware redistribution (STYLE G4; IBM §4.2: backward runs the redistributions in reverse).

The backward of a row or box all-to-all sends the gradient back along the same routes, counts swapped (the
adjoint of a permutation is its inverse); traffic is counted under ``<tag>.fwd`` / ``<tag>.bwd``.
:func:`pipelined_exchange` hides a temporal layer's two redistributions behind its time encoder in K vertex
chunks (IBM §6.5), forward and backward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hpcdgnn.comm.communicator import Box, Communicator, Pending
from hpcdgnn.nn.backward import run_backward

__all__ = ["AllReduceSum", "AllToAllV", "ChunkBoxes", "Redistribute", "TimeHalo", "all_to_all_rows", "allreduce_sum",
           "pipelined_exchange", "redistribute", "time_halo"]


class AllToAllV(torch.autograd.Function):
    """Row all-to-all whose backward is the reverse all-to-all."""

    @staticmethod
    def forward(ctx, x, comm, send_rows, recv_rows, tag, reuse):  # noqa: D102
        ctx.comm, ctx.send_rows, ctx.recv_rows, ctx.tag = comm, send_rows, recv_rows, tag
        ctx.reuse = None if reuse is None else f"{reuse}.bwd"
        return comm.exchange.alltoallv(x, send_rows, recv_rows, tag=f"{tag}.fwd",
                                       reuse=None if reuse is None else f"{reuse}.fwd")

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        g = ctx.comm.exchange.alltoallv(grad.contiguous(), ctx.recv_rows, ctx.send_rows, tag=f"{ctx.tag}.bwd",
                                        reuse=ctx.reuse)
        return g, None, None, None, None, None


def all_to_all_rows(
    x: torch.Tensor,
    comm: Communicator,
    send_rows: Sequence[int],
    recv_rows: Sequence[int],
    tag: str = "redistribute",
    reuse: str | None = None,
) -> torch.Tensor:
    """Differentiable :meth:`~hpcdgnn.comm.exchange.Exchange.alltoallv` of a (rows, unit) tensor.

    ``reuse`` keys the receive buffers. The backward is a collective, so a rank whose rows carry no gradient
    still joins it, through a leaf.
    """
    if torch.is_grad_enabled() and not x.requires_grad:
        x = x.detach().requires_grad_(True)
    return AllToAllV.apply(x, comm, list(send_rows), list(recv_rows), tag, reuse)


class AllReduceSum(torch.autograd.Function):
    """Sum over ranks whose backward sums the gradients: every rank's loss reads the sum (adjoint of a broadcast)."""

    @staticmethod
    def forward(ctx, x, comm, tag):  # noqa: D102
        ctx.comm, ctx.tag = comm, tag
        return comm.allreduce_(x.detach().clone(memory_format=torch.contiguous_format), "sum", tag=f"{tag}.fwd")

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        g = ctx.comm.allreduce_(grad.detach().clone(memory_format=torch.contiguous_format), "sum", tag=f"{ctx.tag}.bwd")
        return g, None, None


def allreduce_sum(x: torch.Tensor, comm: Communicator, tag: str = "allreduce") -> torch.Tensor:
    """Differentiable Σ_ranks x: each rank's part gets the gradient Σ_ranks dL_r/d(sum) (traffic ``<tag>.fwd/.bwd``).

    The backward is a collective: a rank whose part carries no gradient still joins it, through a leaf.
    """
    if comm.size == 1:
        return x
    if torch.is_grad_enabled() and not x.requires_grad:
        x = x.detach().requires_grad_(True)
    return AllReduceSum.apply(x, comm, tag)


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
    """Box all-to-all; the backward swaps send and receive boxes.

    ``grad_rows = (send_limit, recv_limit)``: only those leading rows carry a gradient (causal models), so the
    backward moves only them. Uncovered input elements get zero gradient; a row goes to one rank at most.
    """

    @staticmethod
    def forward(ctx, x, comm, recv_shape, send_boxes, recv_boxes, tag, reuse, grad_rows):  # noqa: D102
        ctx.comm, ctx.shape, ctx.tag = comm, tuple(x.shape), tag
        send_limit, recv_limit = grad_rows if grad_rows is not None else (None, None)
        ctx.send_limit = send_limit
        # computed once, so every epoch reuses the same MPI datatypes
        ctx.bwd_send, ctx.bwd_recv = _limit(recv_boxes, recv_limit), _limit(send_boxes, send_limit)
        # rows past send_limit are zeroed as a block, so the coverage mask needs only the others
        covered_rows = ctx.shape[0] if send_limit is None else min(send_limit, ctx.shape[0])
        ctx.uncovered = _coverage(ctx.bwd_recv, (covered_rows, *ctx.shape[1:]))
        ctx.reuse = None if reuse is None else f"{reuse}.bwd"
        return comm.exchange.alltoall_boxes(
            x, send_boxes, recv_shape, recv_boxes, tag=f"{tag}.fwd", reuse=None if reuse is None else f"{reuse}.fwd"
        )

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        g = ctx.comm.exchange.alltoall_boxes(
            grad.contiguous(), ctx.bwd_send, ctx.shape, ctx.bwd_recv, tag=f"{ctx.tag}.bwd", reuse=ctx.reuse
        )
        if ctx.send_limit is not None and ctx.send_limit < g.shape[0]:
            g[ctx.send_limit :].zero_()  # rows no box wrote (a reused buffer holds old data there)
        if ctx.uncovered is not None:
            u = ctx.uncovered
            g[: u.shape[0]].masked_fill_(u.to(g.device).view(*u.shape, *[1] * (g.dim() - 2)), 0)
        return g, None, None, None, None, None, None, None


def _coverage(boxes: Sequence[Box], shape: tuple[int, ...]) -> torch.Tensor | None:
    """The mask of input elements (first two dims) no backward receive box covers, or None when they tile it."""
    if len(shape) < 2:
        return None
    area = sum((len(r) if isinstance(r, list) else r[1] - r[0]) * (c[1] - c[0]) for r, c in boxes)
    if area == shape[0] * shape[1]:
        return None
    # count per row when every box spans whole rows: never a (rows, N) grid at scale
    whole = all((c0, c1) == (0, shape[1]) for _, (c0, c1) in boxes)
    count = torch.zeros(shape[0], 1 if whole else shape[1], dtype=torch.int32)
    for rows, (c0, c1) in boxes:
        count[rows if isinstance(rows, list) else slice(*rows), slice(None) if whole else slice(c0, c1)] += 1
    if bool((count > 1).any()):
        raise ValueError("Redistribute: boxes overlap (a row sent to several ranks); use TimeHalo")
    uncovered = count == 0
    return uncovered.expand(shape[0], shape[1]) if bool(uncovered.any()) else None


def _stacked(boxes: Sequence[Box], width: int) -> tuple[int, list[Box], list]:
    """Whole-row boxes stacked on receive: ``(rows, stack boxes, [((a, b), row indices)])`` per source."""
    stack_boxes, targets, o = [], [], 0
    for rows, (c0, c1) in boxes:
        if (c0, c1) != (0, width):
            raise ValueError("TimeHalo: boxes must span whole rows")
        idx = torch.as_tensor(rows if isinstance(rows, list) else list(range(*rows)), dtype=torch.long)
        stack_boxes.append(((o, o + idx.numel()), (0, width)))
        targets.append(((o, o + idx.numel()), idx))
        o += idx.numel()
    return o, stack_boxes, targets


class TimeHalo(torch.autograd.Function):
    """``y -> (y, halo)``: the time-halo rows sent to the ranks that need them, ``y`` passed through.

    The backward adds the halo's gradient in place into ``y``'s: no (rows, N, F) zeros per layer.
    """

    @staticmethod
    def forward(ctx, y, comm, recv_shape, send_boxes, recv_boxes, tag, reuse):  # noqa: D102
        ctx.comm, ctx.tag, ctx.recv_shape = comm, tag, tuple(recv_shape)
        ctx.reuse = None if reuse is None else f"{reuse}.bwd"
        ctx.bwd_send = list(recv_boxes)
        ctx.stack = _stacked(send_boxes, y.shape[1])
        ctx.y_meta = (tuple(y.shape), y.dtype, y.device)
        halo = _exchange(comm, y, send_boxes, recv_shape, recv_boxes, f"{tag}.fwd",
                         None if reuse is None else f"{reuse}.fwd")
        return y, halo

    @staticmethod
    def backward(ctx, g, g_halo):  # noqa: D102
        rows, stack_boxes, targets = ctx.stack
        shape, dtype, device = ctx.y_meta
        if g_halo is None:
            g_halo = torch.zeros(ctx.recv_shape, dtype=dtype, device=device)
        buf = _exchange(ctx.comm, g_halo.contiguous(), ctx.bwd_send, (rows, *shape[1:]), stack_boxes,
                        f"{ctx.tag}.bwd", ctx.reuse)
        if g is None:
            g = torch.zeros(shape, dtype=dtype, device=device) if rows else None
        if rows:
            # in place: y's gradient is the consumer's fresh tensor (time_halo's contract); views are copied
            if not g.is_contiguous() or g._base is not None:
                g = g.clone()
            for (a, b), idx in targets:  # in destination-rank order: the same sum on every run
                if b > a:
                    g.index_add_(0, idx.to(g.device), buf[a:b])
        return g, None, None, None, None, None, None


def _exchange(comm: Communicator, send: torch.Tensor, send_boxes: Sequence[Box], recv_shape: Sequence[int],
              recv_boxes: Sequence[Box], tag: str, reuse: str | None) -> torch.Tensor:
    """``alltoall_boxes``, but a rank receiving nothing defers completion, so a send-only rank need not wait."""
    ex = comm.exchange
    if comm.size == 1 or comm.backend != "mpi":
        return ex.alltoall_boxes(send, send_boxes, recv_shape, recv_boxes, tag=tag, reuse=reuse)
    # every rank posts the non-blocking form: a blocking collective never matches a non-blocking one
    ex.test(ex.deferred)
    shape = tuple(int(d) for d in recv_shape)
    recv = ex.buffer(reuse, shape, send.dtype) if reuse else torch.empty(shape, dtype=send.dtype)
    pending = ex.ialltoall_boxes(send, send_boxes, recv, recv_boxes, tag=tag)
    if shape[0] == 0:
        ex.defer(pending)
        return recv.to(send.device)
    return ex.wait(pending).to(send.device)


def time_halo(y: torch.Tensor, comm: Communicator, recv_shape: Sequence[int], send_boxes: Sequence[Box],
              recv_boxes: Sequence[Box], tag: str = "time_halo", reuse: str | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable time halo: ``(y, halo)`` (collective both ways).

    The returned ``y`` must feed one consumer whose backward makes a fresh gradient tensor (added into in place).
    """
    if torch.is_grad_enabled() and not y.requires_grad:
        y = y.detach().requires_grad_(True)
    return TimeHalo.apply(y, comm, tuple(recv_shape), list(send_boxes), list(recv_boxes), tag, reuse)


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
    """Differentiable box all-to-all between snapshot and vertex ownership (IBM §4.2).

    The backward is a collective: a rank whose rows carry no gradient still joins it, through a leaf.
    """
    if torch.is_grad_enabled() and not x.requires_grad:
        x = x.detach().requires_grad_(True)
    return Redistribute.apply(x, comm, tuple(recv_shape), list(send_boxes), list(recv_boxes), tag, reuse, grad_rows)


@dataclass(frozen=True)
class ChunkBoxes:
    """Vertex chunk k's boxes: ``snapshot[q]`` (rank q's rows in (S, N, F)), ``vertex[p]`` (in (T, n_k, F))."""

    snapshot: list[Box]
    vertex: list[Box]
    rows: tuple[int, int]


#: ``encode(x_k, states_k) -> (z_k, states_out_k)``: the time encoder of one chunk, states as flat leaves
Encoder = Callable[[torch.Tensor, list[Any]], tuple[torch.Tensor, list[Any]]]


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous() if t.device.type == "cpu" else t.detach().cpu().contiguous()


def _rows_of(leaves: Sequence[Any], rows: tuple[int, int], grad: bool) -> list[Any]:
    """Each tensor leaf's vertex rows (dimension -2), as a leaf collecting its gradient when ``grad``."""
    r0, r1 = rows
    out = []
    for s in leaves:
        if isinstance(s, torch.Tensor):
            s = s.detach().narrow(-2, r0, r1 - r0)
            if grad and s.is_floating_point():
                s.requires_grad_(True)
        out.append(s)
    return out


def _cat_rows(parts: list[list[Any]]) -> list[Any]:
    """Per leaf, the chunks' tensors joined along the rows (dimension -2); other leaves from chunk 0."""
    return [torch.cat([p[i] for p in parts], dim=-2) if isinstance(leaf, torch.Tensor) else leaf
            for i, leaf in enumerate(parts[0])]


class _Inbound:
    """The chunks' inbound exchanges, all posted at once, in the same order on every rank."""

    def __init__(self, comm: Communicator, post: Callable[[int], Pending], count: int) -> None:
        self.comm = comm
        self.posts = [post(k) for k in range(count)]

    def take(self, k: int) -> torch.Tensor:
        """Chunk k's receive buffer, once arrived."""
        return self.comm.exchange.wait(self.posts[k])

    def after(self, k: int) -> list[Pending]:
        """The exchanges posted for chunks after k."""
        return self.posts[k + 1:]


class _Pipeline:
    """The chunked exchange → encode → exchange of one temporal layer, forward and backward."""

    def __init__(self, comm: Communicator, chunks: Sequence[ChunkBoxes], steps: int, encode: Encoder, tag: str,
                 reuse: str, grad_rows: tuple[int, int] | None, progress: bool,
                 snapshots: tuple[int, int] | None = None) -> None:
        self.comm, self.chunks, self.steps, self.encode = comm, list(chunks), steps, encode
        self.tag, self.reuse, self.grad_rows, self.progress = tag, reuse, grad_rows, progress
        #: (S, N) when the input is already in the vertex layout (only the return exchange runs), else None
        self.snapshots = snapshots
        self.input_grad = True  # whether the input's gradient is wanted (a vertex-layout input may be constant)

    def _shape(self, c: ChunkBoxes, features: int) -> tuple[int, int, int]:
        """A chunk's vertex layout: (T, n_k, features)."""
        return (self.steps, c.rows[1] - c.rows[0], features)

    def _test(self, pending: list) -> None:
        if self.progress:
            self.comm.exchange.test(pending)

    def forward(self, x: torch.Tensor, states: list[Any], grad: bool) -> tuple[torch.Tensor, list[Any]]:
        comm, dev = self.comm, x.device
        ex = comm.exchange
        F = x.shape[-1]
        inbound = None
        if self.snapshots is None:
            xh = _host(x)
            chunks = self.chunks
            inbound = _Inbound(comm, lambda k: ex.ialltoall_boxes(
                xh, chunks[k].snapshot, ex.buffer(f"{self.reuse}.fwd{k}", self._shape(chunks[k], F), x.dtype),
                chunks[k].vertex, tag=f"{self.tag}.fwd"), len(chunks))
            S, N = x.shape[0], x.shape[1]
        else:
            S, N = self.snapshots
        out: torch.Tensor | None = None
        back, state_parts = [], []
        self.saved = []
        for k, c in enumerate(self.chunks):
            if inbound is None:
                xk = x.detach().narrow(-2, c.rows[0], c.rows[1] - c.rows[0])
            else:
                xk = inbound.take(k).to(dev).detach()
            if grad and self.input_grad:
                xk.requires_grad_(True)
            sk = _rows_of(states, c.rows, grad)
            with torch.set_grad_enabled(grad):
                zk, sk_out = self.encode(xk, sk)
            if out is None:
                out = ex.buffer(f"{self.reuse}.out", (S, N, zk.shape[-1]), zk.dtype)
            back.append(ex.ialltoall_boxes(_host(zk), c.vertex, out, c.snapshot, tag=f"{self.tag}.fwd"))
            self._test((inbound.after(k) if inbound is not None else []) + back)
            state_parts.append(sk_out)
            if grad:
                self.saved.append((xk, sk, zk, sk_out))
        for p in back:
            ex.wait(p)
        return out.to(dev), _cat_rows(state_parts)

    def backward(self, grad_out: torch.Tensor, grad_states: Sequence[torch.Tensor | None], x_shape, x_dtype):
        comm, dev = self.comm, grad_out.device
        ex = comm.exchange
        owned, timeline = self.grad_rows if self.grad_rows is not None else (None, None)
        snap = [_limit(c.snapshot, owned) for c in self.chunks]
        vert = [_limit(c.vertex, timeline) for c in self.chunks]
        gh = _host(grad_out)
        Fo = grad_out.shape[-1]
        chunks = self.chunks
        inbound = _Inbound(comm, lambda k: ex.ialltoall_boxes(
            gh, snap[k], ex.buffer(f"{self.reuse}.gz{k}", self._shape(chunks[k], Fo), gh.dtype), vert[k],
            tag=f"{self.tag}.bwd"), len(chunks))
        if self.snapshots is None:
            gx = ex.buffer(f"{self.reuse}.bwd", x_shape, x_dtype)
        else:  # a vertex-layout input: its gradient, when wanted, computed chunk by chunk here
            gx = torch.zeros(x_shape, dtype=x_dtype, device=dev) if self.input_grad else None
        back, state_grads = [], []
        for k, c in enumerate(self.chunks):
            gz = inbound.take(k)
            if timeline is not None and timeline < gz.shape[0]:
                gz[timeline:].zero_()  # rows no box wrote (a reused buffer holds old data there)
            xk, sk, zk, sk_out = self.saved[k]
            roots, grads = [], []
            if zk.requires_grad:
                roots.append(zk)
                grads.append(gz.to(dev))
            for s, g in zip(sk_out, grad_states, strict=True):
                if isinstance(s, torch.Tensor) and s.requires_grad and g is not None:
                    roots.append(s)
                    grads.append(g.narrow(-2, c.rows[0], c.rows[1] - c.rows[0]))
            if roots:
                run_backward(roots, grads)
            if self.snapshots is None:
                gxk = xk.grad if xk.grad is not None else torch.zeros_like(xk)
                back.append(ex.ialltoall_boxes(_host(gxk), vert[k], gx, snap[k], tag=f"{self.tag}.bwd"))
            elif gx is not None and xk.grad is not None:  # a vertex-layout input's gradient stays here
                gx.narrow(-2, c.rows[0], c.rows[1] - c.rows[0]).copy_(xk.grad)
            self._test(inbound.after(k) + back)
            state_grads.append([s.grad if isinstance(s, torch.Tensor) and s.requires_grad else None for s in sk])
            self.saved[k] = None
        for p in back:
            ex.wait(p)
        if self.snapshots is None and owned is not None and owned < gx.shape[0]:
            gx[owned:].zero_()
        grads_in = []
        for i in range(len(state_grads[0])):
            parts = [g[i] for g in state_grads]
            grads_in.append(None if all(p is None for p in parts) else
                            torch.cat([p if p is not None else torch.zeros_like(self._state_in[i]).narrow(
                                -2, c.rows[0], c.rows[1] - c.rows[0])
                                for p, c in zip(parts, self.chunks, strict=True)], dim=-2))
        return None if gx is None else gx.to(dev), grads_in


class PipelinedExchange(torch.autograd.Function):
    """:class:`_Pipeline` as one autograd node whose backward walks the chunks' nested graphs, as reentrant
    checkpointing does."""

    @staticmethod
    def forward(ctx, pipe, x, *states):  # noqa: D102
        ctx.pipe, ctx.x_shape, ctx.x_dtype = pipe, tuple(x.shape), x.dtype
        pipe._state_in = [s.detach() if isinstance(s, torch.Tensor) else s for s in pipe._leaves]
        out, st = pipe.forward(x, pipe._leaves, grad=True)
        pipe._out_tensor = [isinstance(s, torch.Tensor) for s in st]
        return (out, *(s.detach() for s in st if isinstance(s, torch.Tensor)))

    @staticmethod
    def backward(ctx, grad_out, *grad_states):  # noqa: D102
        pipe = ctx.pipe
        it = iter(grad_states)
        g_leaves = [next(it) if t else None for t in pipe._out_tensor]
        gx, g_in = pipe.backward(grad_out, g_leaves, ctx.x_shape, ctx.x_dtype)
        ctx.pipe = None
        g_tensors = [g for s, g in zip(pipe._leaves, g_in, strict=True) if isinstance(s, torch.Tensor)]
        return (None, gx, *g_tensors)


def pipelined_exchange(
    x: torch.Tensor,
    states: list[Any],
    comm: Communicator,
    chunks: Sequence[ChunkBoxes],
    steps: int,
    encode: Encoder,
    tag: str = "redistribute",
    reuse: str = "pipeline",
    grad_rows: tuple[int, int] | None = None,
    progress: bool = True,
    snapshots: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, list[Any]]:
    """Snapshot layout -> per-chunk time encoder -> snapshot layout, the exchanges overlapped with it.

    Args:
        x: (S, N, F) owned snapshots; with ``snapshots``, (T, n, F) vertex rows (only the return exchange runs).
        states: the encoder's initial state as flat leaves (vertex rows in dimension -2, or None).
        comm: the communicator.
        chunks: per chunk, its :class:`ChunkBoxes` (the same count on every rank).
        steps: T, the block's timeline length.
        encode: the time encoder of one chunk.
        tag: counter name (``<tag>.fwd`` / ``<tag>.bwd``).
        reuse: prefix of the receive-buffer keys.
        grad_rows: ``(owned rows, timeline rows)`` that can carry a gradient.
        progress: test the exchanges in flight between chunks.
        snapshots: (S, N) for a vertex-layout ``x``, else None.

    Returns:
        ((S, N, F') output, final state leaves with all of this rank's rows).
    """
    pipe = _Pipeline(comm, chunks, steps, encode, tag, reuse, grad_rows, progress, snapshots)
    if not torch.is_grad_enabled():
        return pipe.forward(x, states, grad=False)
    if snapshots is not None:
        pipe.input_grad = x.requires_grad
    if not x.requires_grad:  # the backward is a collective: keep this rank in it (see redistribute)
        x = x.detach().requires_grad_(True)
    pipe._leaves = list(states)
    tensors = [s for s in states if isinstance(s, torch.Tensor)]
    out, *st = PipelinedExchange.apply(pipe, x, *tensors)
    it = iter(st)
    return out, [next(it) if t else None for t in pipe._out_tensor]
