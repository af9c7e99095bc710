"""Where one batch's rows live and how they move: what a strategy hands :meth:`DGNN.forward` (IBM §2.2, Fig. 1b).

Per layer the model calls ``layout.spatial`` (aggregation, the strategy's halo exchange, then the
snapshot-local transform) and, for layers that mix time, ``to_temporal`` -> ``encode`` -> ``to_spatial``;
``output`` hands ``{t: Z_t}`` to the task. **Every rank joins every collective's backward**
(:func:`joined`): a rank with no rows still returns an empty tensor connected to the exchange before
it, so the backward collectives run in the same order on every rank."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Layout", "RowLayout", "StepGraph", "TransformThenEncode", "horizon_temporal", "joined",
           "moves_aggregation", "phase_head", "phase_join", "phase_join_into", "relu_into"]


@dataclass(eq=False)
class StepGraph:
    """Snapshot t's adjacency A_t (canonical CSR, rows = source vertices) over a temporal block's rows.

    Handed to ``graph_recurrent`` layers; their operators are memoised in :attr:`ops`."""

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
    """``t + 0`` that depends on each of ``others`` requiring grad, so ``t``'s backward reaches their collectives."""
    for o in others:
        if o is not None and o.requires_grad:
            t = t + o.sum() * 0.0
    return t


def phase_join(head: torch.Tensor, tail: torch.Tensor) -> torch.Tensor:
    """``torch.cat([head, tail])`` of a block's autograd head and no-grad tail that remembers ``head``.

    A consumer of exactly the head's rows (:func:`phase_head`) then takes ``head`` itself: a slice's
    backward would build and cut a block-sized zero-filled gradient. In-place changes make it slice again."""
    out = torch.cat([head, tail])
    if head.requires_grad and not tail.requires_grad:
        out._phase_head = (head, head._version, out._version)  # noqa: SLF001 - read by phase_head only
    return out


class _Written(torch.autograd.Function):
    """The buffer a block's phases were written into, its rows [0, k) the autograd head."""

    @staticmethod
    def forward(ctx, head: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        ctx.k = head.shape[0]
        return buf.view_as(buf)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        return g[:ctx.k], None


def phase_join_into(head: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """:func:`phase_join` of phases written straight into ``buf`` (``spatial_steps(..., out=)``), without the copy."""
    if head.data_ptr() != buf.data_ptr() or head.shape[1:] != buf.shape[1:]:
        raise ValueError("phase_join_into: the head is not the first rows of the buffer")
    if not head.requires_grad:
        return buf
    out = _Written.apply(head, buf)
    out._phase_head = (head, head._version, out._version)  # noqa: SLF001 - read by phase_head only
    return out


class _ReluInto(torch.autograd.Function):
    """relu(pre) written into a given tensor, passed in a list so autograd does not see an in-place input."""

    @staticmethod
    def forward(ctx, pre: torch.Tensor, into: list[torch.Tensor]) -> torch.Tensor:
        out = torch.clamp_min(pre, 0, out=into[0])  # what torch.relu computes (ATen: clamp_min(x, 0))
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (out,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(g, out, 0), None


def relu_into(pre: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``torch.relu(pre)`` written into ``out`` with relu's gradient: same bits, one pass instead of relu + copy."""
    if not (torch.is_grad_enabled() and pre.requires_grad):
        return torch.clamp_min(pre, 0, out=out)
    return _ReluInto.apply(pre, [out])


def phase_head(h: torch.Tensor, k: int) -> torch.Tensor:
    """``h[:k]``: the head :func:`phase_join` remembered when still valid, else the slice (same values)."""
    memo = getattr(h, "_phase_head", None)
    if memo is not None:
        head, head_version, version = memo
        if head.shape[0] == k and head._version == head_version and h._version == version:
            return head
    return h[:k]


def phase_view(h: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """``h.view(shape)`` keeping what :func:`phase_join` remembered, so :func:`phase_head` need not slice."""
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
    """``layer.temporal`` over a (T, n, F) block, steps from ``grad_steps`` on without autograd (same values).

    Causal layers get no training gradient after the horizon. ``graphs``: step graphs for ``graph_recurrent`` layers."""
    def run(a: int, b: int | None, state):
        # the autograd head itself where the block remembers it: a slice would keep the tail's storage saved
        part = y if (a, b) == (0, None) else phase_head(y, b) if a == 0 else y[a:b]
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
    """Whether layer ``li`` moves its aggregation to the time encoder's rows and transforms there.

    Pays where the transform widens its input (CD-GCN) or the first layer's Ã_t·X_t is constant (S4); only
    for time-mixing layers with the default aggregation and no per-step parameters. Same on every rank."""
    if not (layer.temporal_mixing and layer.moves_spatial()) or tparams is not None:
        return False
    return (li == 0 and constant_first) or layer.in_features < layer.spatial_features


class TransformThenEncode:
    """``layer`` whose :meth:`temporal` first applies the snapshot-local transform (:func:`moves_aggregation`)."""

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
        start, stop: the batch's time range [start, stop).
        states: per layer, ``(time-parameter state, temporal state)`` at ``start``; replaced with those at ``stop``.
        last: the tensor :meth:`output` returned its embeddings from (an extra backward root when empty).
        roots: further tensors whose backward must run on this rank (zero gradient)."""

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

    def pool_input(self, li: int, h: torch.Tensor | None) -> tuple[torch.Tensor, Any, int, Any]:
        """Layer ``li``'s input rows held here for :meth:`pool`: (rows (m, F), their ``t·N + v`` keys, N, comm)."""
        raise NotImplementedError(f"{type(self).__name__} does not hold whole snapshots' rows over its ranks; a "
                                  "pooling layer (EvolveGCN-H) needs a full-batch strategy")

    def pool(self, layer, li: int, h: torch.Tensor | None) -> torch.Tensor:
        """The (stop - start, k, F) top-k summaries of layer ``li``'s input over all ranks (EvolveGCN-H §3.3)."""
        from hpcdgnn.nn.pool import topk_pool

        x, keys, n, comm = self.pool_input(li, h)
        return topk_pool(x, keys, n, self.start, self.stop, layer.pool_rows, layer.pool_scores, comm,
                         tag=f"layer{li}.pool")

    def encode(self, layer, li: int, y: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """The layer's time encoder over the temporal block, from ``state``."""
        return layer.temporal(y, state, **self.temporal_kwargs(layer, li))

    def step_graphs(self, li: int) -> list[StepGraph] | None:
        """The graph of every step of layer ``li``'s temporal block, or None when its rows are not whole snapshots."""
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
        aggregate: ``aggregate(layer, li, h) -> ax`` of the (rows, F) input over all rows (one halo exchange).
        stacked: keep the rows as one (snapshots, n, F) block (same n rows per snapshot); else one (rows, F) tensor."""

    def __init__(self, start: int, stop: int, num_layers: int, segments: Sequence[tuple[int, int]],
                 aggregate: Callable[[Any, int, torch.Tensor | None], torch.Tensor], stacked: bool = False) -> None:
        super().__init__(start, stop, num_layers)
        self._steps, self._rows = len(segments), (segments[0][1] if segments else 0)
        self.segments = [(t, k) for t, k in segments if k > 0]
        self._aggregate = aggregate
        self.stacked = stacked

    def spatial(self, layer, li: int, h: torch.Tensor | None, tparams) -> torch.Tensor:
        """One aggregation of all rows, then ``layer.spatial`` on each snapshot's slice of them."""
        ax = self._aggregate(layer, li, None if h is None else h.reshape(-1, h.shape[-1]))
        width = layer.spatial_features
        if self.stacked:
            ax = ax.view(self._steps, self._rows, ax.shape[-1])
            # unbind once: indexing ax[i] would zero-fill a full (T, n, F) gradient per snapshot
            pieces = ax.unbind(0) if self.segments else ()
            parts = [layer.spatial(a, t, tparams) for (t, _), a in zip(self.segments, pieces, strict=True)]
            y = torch.stack(parts) if parts else joined(ax.new_zeros(self._steps, 0, width), ax)
        else:
            pieces = ax.split([k for _, k in self.segments]) if self.segments else ()
            parts = [layer.spatial(a, t, tparams) for (t, _), a in zip(self.segments, pieces, strict=True)]
            # no rows here (P > appearances): stay connected to ax, whose halo exchange must run backward too
            y = torch.cat(parts) if parts else joined(ax.new_zeros(0, width), ax)
        # joined to h even when y depends on it: fixes the order autograd sums h's gradients (bit-for-bit)
        return joined(y, h)
