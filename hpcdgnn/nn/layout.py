"""Where one batch's rows live and how they move: what a strategy hands :meth:`DGNN.forward`.

The layer loop of a DGNN (IBM §2.2, Fig. 1b) is the same under every
partitioning; only *where* the rows are and *how* they travel differ. The
model runs the loop once (:meth:`hpcdgnn.nn.models.base.DGNN.forward`)::

    for each layer l:
        y      = layout.spatial(layer, l, h, W_t)     aggregation (its gather is the strategy's halo exchange),
                                                      then layer.spatial per snapshot the rank holds rows of
        if the layer mixes time:
            y' = layout.to_temporal(y, l)             rows to their time-encoder owner (all-to-all, index exchange)
            z  = layout.encode(layer, l, y', state)   the time encoder (plain, pipelined, horizon-split, packed)
            y  = layout.to_spatial(z, l)              and back
        h = y
    return layout.output(h)                           {t: Z_t} for the task

A layout is built by a strategy for one batch (today: the whole timeline, or
one gradient-checkpoint block of it, SPEC S2) and may hold per-layer boundary
states (:attr:`Layout.states`) that the forward reads at the batch's start and
overwrites with the states at its end.

**Every rank joins every collective's backward** (the rule all strategies rely
on, written once here as :func:`joined`): a rank that holds no rows of a phase
still produces an empty tensor that stays connected to the autograd graph of
the exchange before it, so its backward reaches that exchange's backward
collective in the same order as on every other rank. :attr:`Layout.last` (an
empty output) and :attr:`Layout.roots` (pipeline sends) are the extra backward
roots of a rank that scores nothing (:meth:`hpcdgnn.strategies.base.Strategy.backward`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Layout", "RowLayout", "StepGraph", "TransformThenEncode", "horizon_temporal", "joined",
           "moves_aggregation", "phase_head", "phase_join", "phase_join_into", "relu_into"]


@dataclass(eq=False)
class StepGraph:
    """Snapshot t's adjacency A_t (canonical CSR, rows = source vertices) over the rows of a temporal block.

    What a layout hands a ``graph_recurrent`` layer (:meth:`Layout.step_graphs`), one per step of the block:
    its time encoder convolves the recurrent state over the graph of each step (GConvLSTM, DCRNN, ...).
    The layer builds its own operator from it (L̂ for Chebyshev, random-walk transitions for diffusion)
    and memoises it in :attr:`ops`, so a strategy that keeps its step graphs builds each operator once.
    """

    t: int
    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor
    ops: dict = field(default_factory=dict)

    def operator(self, key, build: Callable[[StepGraph], Any]):
        """``build(self)``, computed once per ``key`` (e.g. the operator's kind and dtype)."""
        if key not in self.ops:
            self.ops[key] = build(self)
        return self.ops[key]


def joined(t: torch.Tensor, *others: torch.Tensor | None) -> torch.Tensor:
    """``t`` plus a zero that depends on each of ``others`` that requires grad.

    The values are unchanged (``+ 0.0``) and so is every gradient (a zero is
    added), but the backward of ``t`` now reaches the collectives that produced
    ``others`` — what a rank with no rows needs to take part in them.
    """
    for o in others:
        if o is not None and o.requires_grad:
            t = t + o.sum() * 0.0
    return t


def phase_join(head: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
    """``torch.cat([head, tail])`` of a block's two phases — the steps up to the training horizon (with
    autograd) and those after it (without) — that remembers ``head``, so that a consumer reading exactly
    the head's rows (:func:`phase_head`: the next layer's first phase, the task's training rows) takes
    ``head`` itself instead of a slice of the join.

    Why: a slice's backward builds a gradient of the join's whole shape — zero-filled, the slice's part
    copied in — only for the join's backward to cut that part out again: two block-sized passes for
    nothing per layer and for the task. The head is kept with both tensors' version counters; an in-place
    change to either afterwards makes :func:`phase_head` slice instead.
    """
    out = torch.cat([head, tail])
    if head.requires_grad and not tail.requires_grad:
        out._phase_head = (head, head._version, out._version)  # noqa: SLF001 - read by phase_head only
    return out


class _Written(torch.autograd.Function):
    """The whole buffer a block's phases were written into, its rows [0, k) the autograd head (below)."""

    @staticmethod
    def forward(ctx, head: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        ctx.k = head.shape[0]
        return buf.view_as(buf)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        return g[:ctx.k], None  # cat's backward: the head's rows of the gradient, a view


def phase_join_into(head: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """:func:`phase_join` of phases a layer wrote straight into ``buf`` (``spatial_steps(..., out=)``,
    :attr:`~hpcdgnn.nn.models.base.DynamicLayer.writes_out`): ``head`` is the autograd view of its rows
    [0, k), the tail was written without autograd. Same values, gradients and :func:`phase_head` as
    the copying join, without its block-sized copy per layer."""
    if head.data_ptr() != buf.data_ptr() or head.shape[1:] != buf.shape[1:]:
        raise ValueError("phase_join_into: the head is not the first rows of the buffer")
    if not head.requires_grad:
        return buf
    out = _Written.apply(head, buf)
    out._phase_head = (head, head._version, out._version)  # noqa: SLF001 - read by phase_head only
    return out


class _ReluInto(torch.autograd.Function):
    """relu(pre) written into a given tensor; that tensor comes in a list so that autograd does not take
    it for an input this function modifies in place."""

    @staticmethod
    def forward(ctx, pre: torch.Tensor, into: list[torch.Tensor]) -> torch.Tensor:
        out = torch.clamp_min(pre, 0, out=into[0])  # what torch.relu computes (ATen: clamp_min(x, 0))
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (out,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(g, out, 0), None  # relu's own backward


def relu_into(pre: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``torch.relu(pre)`` written into ``out`` (e.g. a :func:`phase_join_into` buffer's head rows) and
    returned as ``out`` with relu's gradient: the same bits forward and backward, one pass instead of
    relu plus a copy."""
    if not (torch.is_grad_enabled() and pre.requires_grad):
        return torch.clamp_min(pre, 0, out=out)
    return _ReluInto.apply(pre, [out])


def phase_head(h: torch.Tensor, k: int) -> torch.Tensor:
    """``h[:k]``: the head :func:`phase_join` remembered when it is exactly those rows and neither tensor has
    changed since, else the slice (the same values either way)."""
    memo = getattr(h, "_phase_head", None)
    if memo is not None:
        head, head_version, version = memo
        if head.shape[0] == k and head._version == head_version and h._version == version:
            return head
    return h[:k]


def phase_view(h: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``h.view(shape)`` that keeps what :func:`phase_join` remembered: the head viewed the same way, when
    it is still valid and its rows fill whole rows of ``shape`` (a (T·n, F) join seen as (T, n, F), or
    back). Why: a view is a new tensor, and :func:`phase_head` of it would slice — on one rank the
    task's training rows of the chunk layout, a zero-filled block-sized gradient and a copy."""
    out = h.view(*shape)
    memo = getattr(h, "_phase_head", None)
    if memo is not None:
        head, head_version, version = memo
        inner = out[0].numel() if out.shape[0] else 0
        if (head._version == head_version and h._version == version and inner and head.numel() % inner == 0
                and head.is_contiguous()):
            view = head.view(head.numel() // inner, *out.shape[1:])
            out._phase_head = (view, view._version, out._version)  # noqa: SLF001 - read by phase_head only
    return out


def horizon_temporal(layer, y: torch.Tensor, state, grad_steps: int,
                     graphs: Sequence[StepGraph] | None = None) -> tuple[torch.Tensor, object]:
    """``layer.temporal`` over a (T, n, F) block, steps from ``grad_steps`` on without autograd.

    With causal layers no training gradient reaches the outputs after the training horizon, so
    their backward would only propagate zeros (every strategy's rule):
    the head runs with autograd, the tail continues from the head's end state without it. Same values.
    ``graphs``: the block's step graphs, for ``graph_recurrent`` layers (split with the block).
    """
    def run(a: int, b: int | None, state):
        part = y if (a, b) == (0, None) else y[a:b]
        if graphs is None:
            return layer.temporal(part, state)
        return layer.temporal(part, state, graphs=list(graphs)[a:b])

    if not torch.is_grad_enabled() or not 0 < grad_steps < y.shape[0]:
        return run(0, None, state)
    z_head, state = run(0, grad_steps, state)
    with torch.no_grad():
        z_tail, state = run(grad_steps, None, state)
    return phase_join(z_head, z_tail), state


def moves_aggregation(layer, li: int, tparams, constant_first: bool) -> bool:
    """Whether layer ``li`` should move its aggregation to the time encoder's rows and run its
    snapshot-local transform there, in front of the encoder, rather than move the transform's output.

    The transform is row-wise (:meth:`~hpcdgnn.nn.models.base.DynamicLayer.spatial_steps`), so the rows
    are the same either way; moving the aggregation pays where the transform widens what it reads
    (CD-GCN: F -> F + F'), and for the first layer when its aggregation is the constant Ã_t·X_t
    (``constant_first``, S4): a layout moves that once per run and keeps it. Only for layers that mix
    time, with the default aggregation (its width is ``in_features``) and no per-step parameters (the
    encoder's rows span time). The answer depends on the model alone: the same on every rank.
    """
    if not (layer.temporal_mixing and layer.moves_spatial()) or tparams is not None:
        return False
    return (li == 0 and constant_first) or layer.in_features < layer.spatial_features


class TransformThenEncode:
    """``layer`` whose :meth:`temporal` first applies the layer's snapshot-local transform to the (T, n, F)
    aggregation it gets: what a layout hands the time encoder when it moved the aggregation, not the
    transform's wider output (:func:`moves_aggregation`).
    Only for layers without per-step parameters (the transform is then the same for every step).
    Everything else is the layer's."""

    def __init__(self, layer) -> None:
        self.layer = layer

    def __getattr__(self, name: str):
        return getattr(self.layer, name)

    def temporal(self, y: torch.Tensor, state: Any = None, **kwargs) -> tuple[torch.Tensor, Any]:
        """``layer.temporal`` of ``layer.spatial_steps(y)``."""
        return self.layer.temporal(self.layer.spatial_steps(y, [], None), state, **kwargs)


class Layout:
    """One batch's placement of rows, as the model's forward sees it.

    Attributes:
        start, stop: the batch's time range [start, stop) (per-step parameters W_t and
            boundary states refer to it).
        states: per layer, ``(time-parameter state, temporal state)`` at ``start``
            (None, None at t = 0); :meth:`DGNN.forward` replaces them with the states at ``stop``.
        last: the tensor :meth:`output` returned its embeddings from (an extra backward
            root when it is empty).
        roots: further tensors whose backward must run on this rank (zero gradient).
    """

    def __init__(self, start: int, stop: int, num_layers: int, states: Sequence[Any] | None = None) -> None:
        self.start, self.stop = start, stop
        self.states: list[Any] = list(states) if states is not None else [(None, None)] * num_layers
        self.last: torch.Tensor | None = None
        self.roots: list[torch.Tensor] = []

    def spatial(self, layer, li: int, h: torch.Tensor | None, tparams) -> torch.Tensor:
        """Layer ``li``'s aggregation and snapshot-local transform of this rank's rows (``h`` None: layer 0)."""
        raise NotImplementedError

    def to_temporal(self, y: torch.Tensor, li: int) -> torch.Tensor:
        """Spatial rows -> the (steps, vertices, F) block this rank's time encoder runs over."""
        return y

    def encode(self, layer, li: int, y: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """The layer's time encoder over the temporal block, from ``state``."""
        return layer.temporal(y, state, **self.temporal_kwargs(layer, li))

    def step_graphs(self, li: int) -> list[StepGraph] | None:
        """The graph of every step of layer ``li``'s temporal block, in the block's time order, over its rows —
        or None when the temporal rows are not whole snapshots (a vertex range, a chunk's appearances): then a
        ``graph_recurrent`` layer cannot run here (setup refuses it, :func:`hpcdgnn.train.setup.build_run`).
        """
        return None

    def temporal_kwargs(self, layer, li: int) -> dict[str, Any]:
        """Extra arguments of ``layer.temporal``: ``graphs=`` :meth:`step_graphs` for ``graph_recurrent`` layers."""
        if not getattr(layer, "graph_recurrent", False):
            return {}
        graphs = self.step_graphs(li)
        if graphs is None:
            raise RuntimeError(f"{type(layer).__name__} convolves its state over each step's graph, which "
                               f"{type(self).__name__} cannot provide (setup should have refused this job)")
        return {"graphs": graphs}

    def to_spatial(self, z: torch.Tensor, li: int) -> torch.Tensor:
        """The time encoder's output back to the spatial rows (the inverse of :meth:`to_temporal`)."""
        return z

    def output(self, h: torch.Tensor) -> dict[int, torch.Tensor]:
        """The last layer's rows as ``{t: Z_t (N, F')}`` for the snapshots this rank scores; sets :attr:`last`."""
        raise NotImplementedError

    def finish(self) -> None:
        """Called after the backward pass (complete pending point-to-point sends, ...)."""


class RowLayout(Layout):
    """A rank's rows of many snapshots, time-major, aggregated at once (vertex S6 and chunk D1 partitions).

    Args:
        segments: ``(t, rows)`` of each snapshot in row order; snapshots with no rows here are left out.
        aggregate: ``aggregate(layer, li, h) -> ax`` of the (rows, F) input ``h`` over all rows at once
            (the strategy's halo graph: one sparse product and one exchange per layer).
        stacked: keep the rows as one (snapshots, n, F) block — every snapshot has the same n rows (a
            vertex partition) — so the time encoder reads it in place; else one (rows, F) tensor.
    """

    def __init__(self, start: int, stop: int, num_layers: int, segments: Sequence[tuple[int, int]],
                 aggregate: Callable[[Any, int, torch.Tensor | None], torch.Tensor], stacked: bool = False) -> None:
        super().__init__(start, stop, num_layers)
        self._steps, self._rows = len(segments), (segments[0][1] if segments else 0)  # the block of ``stacked``
        self.segments = [(t, k) for t, k in segments if k > 0]
        self._aggregate = aggregate
        self.stacked = stacked

    def spatial(self, layer, li: int, h: torch.Tensor | None, tparams) -> torch.Tensor:
        """One aggregation of all rows, then ``layer.spatial`` on each snapshot's slice of them."""
        ax = self._aggregate(layer, li, None if h is None else h.reshape(-1, h.shape[-1]))
        width = layer.spatial_features
        if self.stacked:
            ax = ax.view(self._steps, self._rows, ax.shape[-1])
            # unbind once: indexing ax[i] per snapshot would make each backward zero-fill a full (T, n, F)
            # buffer and add it into ax's gradient (T of them per layer); the values are the same
            pieces = ax.unbind(0) if self.segments else ()
            parts = [layer.spatial(a, t, tparams) for (t, _), a in zip(self.segments, pieces, strict=True)]
            y = torch.stack(parts) if parts else joined(ax.new_zeros(self._steps, 0, width), ax)
        else:
            pieces = ax.split([k for _, k in self.segments]) if self.segments else ()
            parts = [layer.spatial(a, t, tparams) for (t, _), a in zip(self.segments, pieces, strict=True)]
            # no rows here (P > appearances): stay connected to ax, whose halo exchange must run backward too
            y = torch.cat(parts) if parts else joined(ax.new_zeros(0, width), ax)
        # joined to h even when y already depends on it: the zero branch fixes the order in which autograd
        # sums h's gradients, which keeps these strategies' gradients bit for bit what they were before 0.2
        return joined(y, h)
