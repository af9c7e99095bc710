"""S1 snapshot partitioning with redistribution ("PSS-TS", IBM §4.2, Fig. 3a); S2 checkpoint blocks, S4 precompute.

Per layer (IBM Fig. 1b)::

    Y_t = GCN(Ã_t, X_t)           for each snapshot t this rank owns
    Y[V_q] <- all-to-all(Y)       snapshot layout -> vertex layout     (redistribute.fwd)
    Z[V_q] = RNN(Y_1[V_q] .. Y_T[V_q])
    Z_t   <- all-to-all(Z[V_q])   vertex layout -> snapshot layout     (redistribute.fwd)

The backward runs both all-to-alls in reverse (``redistribute.bwd``). One redistribution moves
(T·N − Σ_p T_p·N_p)·F·itemsize bytes over all ranks, F the narrower side of the row-wise snapshot-local
transform (:func:`~hpcdgnn.nn.layout.moves_aggregation`). Layer 0's Ã_t·X_t is computed once (S4, §5.5) and
moved once. ``strategy.blocks: nb`` (S2, §3.1, Fig. 2) runs nb blocks of time with gradient checkpointing.
Banded encoders (``temporal_reach`` r) skip both all-to-alls and read an r-snapshot time halo instead, bit for
bit the same. Ranks owning no snapshot (P > T) or no vertex row (P > N) join every collective with empty tensors.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten

from hpcdgnn.comm.autograd import ChunkBoxes, pipelined_exchange, redistribute, time_halo
from hpcdgnn.data.graph_diff import CSRSnapshot
from hpcdgnn.data.transfer import SnapshotTransfer
from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.layout import (
    Layout,
    StepGraph,
    TransformThenEncode,
    horizon_temporal,
    joined,
    moves_aggregation,
    phase_head,
    phase_join,
    phase_join_into,
)
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_nbytes, spmm, stacked_gcn_norm
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.partition.timeline import banded_in_place, plan_snapshots, rebalanced_plan
from hpcdgnn.strategies.base import FullBatch, FullBatchStrategy, Scored
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.tasks.base import Embeddings

__all__ = ["SnapshotStrategy"]


def _rows(ts: list[int]) -> tuple[int, int] | list[int]:
    """Time rows as a range ``(a0, a1)`` when contiguous (or empty), else as the explicit list."""
    if not ts:
        return (0, 0)
    if ts[-1] - ts[0] + 1 == len(ts):
        return (ts[0], ts[-1] + 1)
    return list(ts)


@register_strategy("snapshot")
class SnapshotStrategy(FullBatchStrategy):
    """Snapshots are owned by ranks in contiguous blocks; the RNN runs on vertex ranges (IBM §4.2)."""

    @classmethod
    def make_plan(cls, manifest, num_ranks, job) -> PartitionPlan:
        """Cyclic snapshots or contiguous blocks (by count or work), equal vertex ranges, S2 blocks."""
        return plan_snapshots(manifest, num_ranks, job, cls.plan_layout(job))

    def rebalanced_plan(self, plan: PartitionPlan, compute: list[float]) -> PartitionPlan | None:
        """The blocks re-cut to the per-rank ``compute`` seconds; None for layouts without a cut to move."""
        return rebalanced_plan(plan, self.ctx.manifest, self.ctx.job, compute, self.plan_layout(self.ctx.job))

    @classmethod
    def plan_layout(cls, job) -> str:
        """The layout this strategy's plans have."""
        return cls.resolved_layout(job)

    @classmethod
    def check_job(cls, job, num_ranks: int, where: str | None) -> None:
        """Refuse ``balance: measured`` where there is no cut to move (cyclic ownership, checkpoint blocks): it
        would change nothing but flag its calibration epochs as warm-up."""
        opts = job.strategy
        blocks = getattr(opts, "blocks", 1)
        if opts.balance != "measured":
            return
        if blocks > 1:
            why = f"strategy.blocks: {blocks} fixes the cut"
        elif cls.plan_layout(job) == "cyclic":
            why = "the layout is cyclic" + (f" (layout: auto, for model {job.model.name})" if opts.layout == "auto"
                                            else "")
        else:
            return
        raise ConfigError(f"{where + ': ' if where else ''}strategy.balance: measured re-cuts contiguous blocks of "
                          f"snapshots (layout: block, blocks: 1), and {why}; set those, or balance: work")

    @staticmethod
    def resolved_layout(job) -> str:
        """``strategy.layout``; ``auto``: blocks when every time-mixing layer can use the time halo, else cyclic."""
        if job.strategy.layout != "auto":
            return job.strategy.layout
        return "block" if banded_in_place(job, "block") else "cyclic"

    @classmethod
    def step_graphs_at(cls, num_ranks: int) -> bool:
        """Whether the time encoder sees whole snapshots: only on one rank."""
        return num_ranks == 1

    @classmethod
    def smaller(cls, opts, manifest) -> list:
        """Checkpoint blocks 2, 4, 8, … below T, then T (IBM §3.1): activations of one block at a time."""
        import dataclasses

        if getattr(opts, "blocks", None) != 1:  # blocked already, or a strategy without blocks (pss)
            return []
        T, nb, out = manifest.num_snapshots, 2, []
        while nb < T:
            out.append(nb)
            nb *= 2
        return [dataclasses.replace(opts, blocks=b) for b in [*out, T] if b > 1]

    @classmethod
    def cost(cls, plan: PartitionPlan, job, manifest, graph, work) -> list:
        """The planner's per-rank work and traffic under ``plan`` (:func:`snapshot_cost`)."""
        return snapshot_cost(plan, job, manifest, graph, transposes=work.transposes)

    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """Read the owned snapshots, move them to the device (S3), normalise Ã_t and precompute Ã_t·X_t (S4).

        With checkpoint blocks only Ã_t·X_t stays on the device; each block is reloaded when needed (IBM §3.2).
        """
        self._init_exchange(plan)
        job = self.ctx.job
        causal = all(layer.causal for layer in model.layers)
        #: snapshots after this get no gradient (causal model), so run without autograd
        self.horizon = plan.horizon if causal else self.ctx.manifest.num_snapshots - 1
        dtype, dev = self.ctx.dtype, self.ctx.device
        csrs, xs = [], []
        for t in self.owned:
            snap = reader.read(t)
            csrs.append(CSRSnapshot.from_snapshot(snap))
            xs.append(snap.x)
        # graph difference restarts at each checkpoint block (IBM §3.2: its first snapshot goes whole)
        self.transfer = SnapshotTransfer(csrs, self._local, job.strategy.transfer, dev)
        del csrs
        self._resident = len(self.blocks) == 2
        self._precomputed = model.layers[0].precomputable
        # graph_recurrent layers aggregate nothing in the spatial phase (they convolve in the time encoder)
        self._needs_adjacency = any(not layer.graph_recurrent and (li > 0 or not self._precomputed)
                                    for li, layer in enumerate(model.layers))
        self._graph_steps = any(layer.graph_recurrent for layer in model.layers)
        self._steps: dict[int, list[StepGraph]] = {}
        #: resident diag(Ã_t) per (block, phase)
        self._diag: dict[tuple[int, int, int], NormalizedAdjacency] = {}
        self._block_adj_peak = 0
        ax: list[torch.Tensor | None] = [None] * len(self.owned)
        for b in range(len(self._local)):
            stacks = self._normalise(b)
            for (lo, hi), a in stacks.items():
                idx = self._local[b][lo:hi]
                x = torch.stack([torch.from_numpy(xs[i]) for i in idx]).to(dev, dtype)
                if self._precomputed:
                    x = spmm(a, x.reshape(-1, x.shape[-1])).view(len(idx), self.N, -1)
                for i, row in zip(idx, x.unbind(0), strict=True):
                    ax[i] = row
                if self._resident and self._needs_adjacency:
                    self._diag[(b, lo, hi)] = a
            del stacks
        F = self.ctx.manifest.num_features
        #: the first layer's input: Ã_t·X_t when precomputed (S4), else X_t
        self.ax0 = torch.stack(ax) if ax else torch.zeros(0, self.N, F, dtype=dtype, device=dev)
        self.num_layers = len(model.layers)
        return Scored(snapshots=tuple(self.owned))

    def _normalise(self, b: int) -> dict[tuple[int, int], NormalizedAdjacency]:
        """Load block b onto the device and build diag(Ã_t) per phase ``(lo, hi)``."""
        seconds = self.transfer.seconds
        snaps = self.transfer.load(b)
        self.load_seconds += self.transfer.seconds - seconds
        local = self._local[b]
        if self._graph_steps and self._resident:
            self._steps[b] = self._as_steps(b, snaps)
        # Ãᵀ only when resident with a backward: a reloaded block's backward takes Ãᵀ·Y from Ã's entries
        out = {
            (lo, hi): stacked_gcn_norm(snaps[lo:hi], [self.owned[i] for i in local[lo:hi]], self.ctx.dtype,
                                       transpose=self._resident and grad)
            for grad, lo, hi in self.phases(b)
        }
        built = sum(a.nbytes for a in out.values())
        self._block_adj_peak = max(self._block_adj_peak, built)
        if not self._resident:  # a transpose built later in the backward counts towards the peak too
            for a in out.values():
                a.on_transpose = partial(self._late_transpose, built)
        return out

    def _late_transpose(self, built: int, a: NormalizedAdjacency) -> None:
        """Grow the block peak by a late transpose (bound to ``built``, so it keeps no operator alive)."""
        self._block_adj_peak = max(self._block_adj_peak, built + csr_nbytes(a.a_t))

    def phases(self, b: int) -> list[tuple[bool, int, int]]:
        """(autograd on, first, last + 1) of block b's owned snapshots before and after the training horizon."""
        ts = [self.owned[i] for i in self._local[b]]
        cut = sum(1 for t in ts if t <= self.horizon)
        return [(grad, lo, hi) for grad, lo, hi in ((True, 0, cut), (False, cut, len(ts))) if hi > lo]

    def _as_steps(self, b: int, snaps) -> list[StepGraph]:
        return [StepGraph(self.owned[i], c.indptr, c.indices, c.values)
                for i, c in zip(self._local[b], snaps, strict=True)]

    def step_graphs(self, b: int) -> list[StepGraph]:
        """Block b's owned snapshots as step graphs, in time order (kept, or loaded now)."""
        if b in self._steps:
            return self._steps[b]
        seconds = self.transfer.seconds
        snaps = self.transfer.load(b)
        self.load_seconds += self.transfer.seconds - seconds
        return self._as_steps(b, snaps)

    def stacked_adjacency(self, b: int) -> dict[tuple[int, int], NormalizedAdjacency]:
        """diag(Ã_t) per phase ``(lo, hi)`` of block b: resident, or loaded now (S3)."""
        if not self._needs_adjacency:
            return {}
        if self._resident:
            return {(lo, hi): self._diag[(b, lo, hi)] for _, lo, hi in self.phases(b)}
        return self._normalise(b)

    def _transfer_stats(self) -> tuple[int, float]:
        """Snapshot bytes moved host -> device so far, and the seconds it took (S3)."""
        return self.transfer.bytes, self.transfer.seconds

    def _init_exchange(self, plan: PartitionPlan) -> None:
        """The boxes of each block's two redistributions (IBM Fig. 3a/3b).

        Rank p sends q [p's snapshots of b] × [q's vertex rows]; q stores it at [p's time rows in b] × [all].
        """
        self.plan = plan
        me, P = self.comm.rank, self.comm.size
        self.owned = plan.snapshots_of(me)
        self.N, self.T = plan.num_vertices, plan.num_snapshots
        self.horizon = self.T - 1
        vb = plan.vertex_bounds
        self._n_me = vb[me + 1] - vb[me]
        self.blocks = plan.blocks
        self._local: list[list[int]] = []
        self._snapshot_boxes, self._vertex_boxes = [], []
        for b in range(len(self.blocks) - 1):
            t0, t1 = self.blocks[b], self.blocks[b + 1]
            self._local.append([i for i, t in enumerate(self.owned) if t0 <= t < t1])
            k = len(self._local[-1])
            self._snapshot_boxes.append([((0, k), (vb[q], vb[q + 1])) for q in range(P)])
            rows = [_rows([t - t0 for t in plan.snapshots_of(p) if t0 <= t < t1]) for p in range(P)]
            self._vertex_boxes.append([(r, (0, self._n_me)) for r in rows])
        self._halos: dict[int, tuple | None] = {}
        self._ax0_vertex: dict[int, torch.Tensor] = {}
        self._init_chunks(plan)

    def set_overlap_chunks(self, chunks: int) -> None:
        """Use ``chunks`` vertex chunks from the next forward on (collective, between epochs; results unchanged)."""
        if chunks < 1:
            raise ValueError(f"set_overlap_chunks: chunks must be >= 1 (got {chunks})")
        self._init_chunks(self.plan, chunks)

    def _init_chunks(self, plan: PartitionPlan, count: int | None = None) -> None:
        """Per block, K vertex chunks of each rank's range (``overlap_chunks`` or ``count``).

        K is the same on every rank, which must post the same exchanges; None at P = 1 or K = 1.
        """
        me, P, vb = self.comm.rank, self.comm.size, plan.vertex_bounds
        sizes = [vb[q + 1] - vb[q] for q in range(P)]
        if count is None:
            ctx = getattr(self, "ctx", None)  # a bare strategy around a plan (tests) has no job
            count = getattr(ctx.job.strategy, "overlap_chunks", 1) if ctx is not None else 1
        K = min(count, min(sizes))
        self._chunk_boxes: list[list[ChunkBoxes]] | None = None
        if P == 1 or K <= 1:
            return
        cuts = [[vb[q] + sizes[q] * k // K for k in range(K + 1)] for q in range(P)]
        self._chunk_boxes = []
        for b, local in enumerate(self._local):
            chunks = []
            for k in range(K):
                r0, r1 = cuts[me][k] - vb[me], cuts[me][k + 1] - vb[me]
                snapshot = [((0, len(local)), (cuts[q][k], cuts[q][k + 1])) for q in range(P)]
                vertex = [(rows, (0, r1 - r0)) for rows, _ in self._vertex_boxes[b]]
                chunks.append(ChunkBoxes(snapshot, vertex, (r0, r1)))
            self._chunk_boxes.append(chunks)

    def _engine_bytes(self) -> int:
        """Peak device-held inputs: resident Ã_t (or the largest block's) plus Ã·X."""
        resident = sum(a.nbytes for a in self._diag.values())
        streamed = 0 if self._resident else self._block_adj_peak
        moved = sum(x.numel() * x.element_size() for x in self._ax0_vertex.values())
        return resident + streamed + self.ax0.numel() * self.ax0.element_size() + moved

    def _host_bytes(self) -> int:
        """Host memory of the encoded snapshot payloads."""
        return self.transfer.host_bytes

    def _grad_rows(self, b: int) -> tuple[int, int] | None:
        """(owned rows, timeline rows) of block b up to the training horizon; None when that is all."""
        t0, t1 = self.blocks[b], self.blocks[b + 1]
        if self.horizon >= t1 - 1:
            return None
        timeline = max(0, self.horizon - t0 + 1)
        owned = sum(1 for i in self._local[b] if self.owned[i] <= self.horizon)
        return owned, timeline

    def _exchange_grad_rows(self, b: int) -> tuple[int, int] | None:
        """:meth:`_grad_rows`, but None on one rank, where cutting the identity exchange would add a copy."""
        return None if self.comm.size == 1 else self._grad_rows(b)

    def _to_vertex(self, y: torch.Tensor, key: str | None, b: int = 0, tag: str = "redistribute") -> torch.Tensor:
        """(T_pb, N, F) owned snapshots of block b -> (T_b, N_q, F) block timeline of this rank's vertices."""
        shape = (self.blocks[b + 1] - self.blocks[b], self._n_me, y.shape[-1])
        return redistribute(
            y, self.comm, shape, self._snapshot_boxes[b], self._vertex_boxes[b], tag=tag, reuse=key,
            grad_rows=self._exchange_grad_rows(b),
        )

    def _to_snapshot(self, z: torch.Tensor, key: str, b: int = 0) -> torch.Tensor:
        """(T_b, N_q, F) vertex layout -> (T_pb, N, F) owned snapshots of block b (the reverse exchange)."""
        shape = (len(self._local[b]), self.N, z.shape[-1])
        rows = self._exchange_grad_rows(b)
        return redistribute(
            z.contiguous(), self.comm, shape, self._vertex_boxes[b], self._snapshot_boxes[b], reuse=key,
            grad_rows=None if rows is None else (rows[1], rows[0]),
        )

    def _ax0_on_vertex(self, y: torch.Tensor, b: int) -> torch.Tensor:
        """Block b's constant Ã_t·X_t on the vertex owners, redistributed once (collective) and kept."""
        if b not in self._ax0_vertex:
            # a constant: no backward exchange; no reuse buffer outlives the copy. Moved once, in the first epoch of
            # an attempt, whose bytes and seconds it is (its own tag, as grid's halo of the same rows)
            with torch.no_grad():
                self._ax0_vertex[b] = self._to_vertex(y, None, b, tag="redistribute.ax0").clone()
        return self._ax0_vertex[b]

    def _temporal(self, layer, yv: torch.Tensor, rstate, b: int, graphs: list[StepGraph] | None = None):
        """The RNN over block b's timeline, without autograd past the training horizon."""
        rows = self._grad_rows(b)
        return horizon_temporal(layer, yv, rstate, yv.shape[0] if rows is None else rows[1], graphs)

    def _encode_overlapped(self, layer, li: int, y: torch.Tensor, rstate, b: int, vertex_input: bool = False):
        """:meth:`_to_vertex` → :meth:`_temporal` → :meth:`_to_snapshot` in vertex chunks, exchanges overlapped.

        The RNN state's vertex rows are its dimension -2. ``vertex_input``: ``y`` is already in the vertex
        layout, so only the reverse redistribution runs.
        """
        steps = self.blocks[b + 1] - self.blocks[b]
        rows = self._grad_rows(b)
        grad_steps = steps if rows is None else rows[1]
        leaves, spec = tree_flatten(rstate)
        out_spec: list = []

        def encode(x, states):
            z, state = horizon_temporal(layer, x, tree_unflatten(states, spec), grad_steps)
            flat, ospec = tree_flatten(state)
            out_spec[:] = [ospec]
            return z, flat

        out, states = pipelined_exchange(
            y.contiguous(), leaves, self.comm, self._chunk_boxes[b], steps, encode, reuse=f"layer{li}.overlap",
            grad_rows=self._exchange_grad_rows(b), snapshots=(len(self._local[b]), self.N) if vertex_input else None,
        )
        return out, tree_unflatten(states, out_spec[0])

    def _time_halo(self, reach: int) -> tuple | None:
        """``(steps I receive, send boxes, recv boxes)`` of the time halo: steps max(0, a − reach) .. a − 1
        before my owned [a, b). None with checkpoint blocks, ``time_halo: off`` or cyclic ownership."""
        if reach in self._halos:
            return self._halos[reach]
        ctx = getattr(self, "ctx", None)
        if len(self.blocks) != 2 or (ctx is not None and getattr(ctx.job.strategy, "time_halo", "on") != "on"):
            self._halos[reach] = None
            return None
        P, me, N = self.comm.size, self.comm.rank, self.N
        owned = [self.plan.snapshots_of(p) for p in range(P)]
        if any(o and o[-1] - o[0] + 1 != len(o) for o in owned):
            # cyclic: a halo would move as much as the redistribution, in many small pieces
            self._halos[reach] = None
            return None
        need = [list(range(max(0, o[0] - reach), o[0])) if o else [] for o in owned]
        mine = set(owned[me])
        first = owned[me][0] if owned[me] else 0
        send = [(_rows([t - first for t in need[q] if t in mine]), (0, N)) for q in range(P)]
        recv = [(_rows([i for i, t in enumerate(need[me]) if t in set(owned[p])]), (0, N)) for p in range(P)]
        self._halos[reach] = (need[me], send, recv)
        return self._halos[reach]

    def _encode_banded(self, layer, li: int, y: torch.Tensor):
        """A banded encoder on the owned snapshots in place, continuing from the time halo."""
        need, send, recv = self._halos[layer.temporal_reach]
        halo = None
        if self.comm.size > 1:
            y, halo = time_halo(y.contiguous(), self.comm, (len(need), self.N, y.shape[-1]), send, recv,
                                tag="time_halo", reuse=f"layer{li}.time_halo")
        z = y[:0] if y.shape[0] == 0 else layer.temporal(y, halo if need else None)[0]
        # every rank joins the halo's backward; no end state (no checkpoint blocks here)
        return joined(z, halo), None

    def layout(self, b: int = 0, states: list | None = None) -> SnapshotLayout:
        """Block b (the whole timeline without checkpoint blocks), from boundary ``states`` (None: t = 0)."""
        return SnapshotLayout(self, b, states)

    def step(self, model: DGNN, task, batch: FullBatch, scale: float) -> np.ndarray:
        """One full-batch step; with nb > 1 blocks, gradient checkpointing (IBM §3.1, Fig. 2; SPEC S2).

        Pass 1 runs the blocks without autograd, keeping boundary states π_b; the last block with a gradient
        runs with autograd at once. Pass 2 re-runs the others in reverse from π_{b-1}, scores them and
        backpropagates with the gradient block b+1 sent to π_b. Blocks after the horizon are not re-run.
        """
        nb = len(self.blocks) - 1
        if nb == 1:
            return super().step(model, task, batch, scale)
        epoch = batch.epoch
        rerun = [self.blocks[b] <= self.horizon for b in range(nb)]
        last_grad = max((b for b in range(nb) if rerun[b]), default=-1)
        states: list = [(None, None)] * len(model.layers)
        saved: list = []
        stats: list = [None] * nb
        grad_out = None
        with torch.no_grad():
            for b in range(nb):
                # clone: a state may view a receive buffer the next block's exchange reuses
                saved.append(tree_map(_clone, states))
                states = None
                if b == last_grad:
                    with torch.enable_grad():
                        states, grad_out = self._rerun(model, task, epoch, scale, saved, b, None, stats,
                                                       keep_states=b < nb - 1)
                    continue
                layout = self.layout(b, saved[-1])
                emb = model(layout)
                if not rerun[b]:  # a re-run block's task runs once, in pass 2, for its loss and its metrics
                    stats[b] = task(emb, epoch).stats
                states = layout.states
                del emb, layout
        for b in reversed(range(last_grad)):
            _, grad_out = self._rerun(model, task, epoch, scale, saved, b, grad_out, stats)
        total = stats[0]
        for s in stats[1:]:
            total = total + s
        return total

    def _rerun(self, model: DGNN, task, epoch: int, scale: float, saved: list, b: int, grad_out, stats: list,
               keep_states: bool = False):
        """Re-run block b from ``saved[b]``, backpropagate its loss with ``grad_out``; set ``stats[b]``.

        Returns (b's detached output states if ``keep_states``, else None; the gradient for block b-1).
        """
        leaves = tree_map(_leaf, saved[b])
        layout = self.layout(b, leaves)
        emb = model(layout)
        states_out, last = layout.states, layout.last
        out = task(emb, epoch)
        stats[b] = out.stats
        roots = [out.loss_sum * scale]
        grads = [torch.ones_like(roots[0])]
        if grad_out is not None:
            for s, g in zip(tree_leaves(states_out), grad_out, strict=True):
                if s is not None and g is not None and s.requires_grad:
                    roots.append(s)
                    grads.append(g)
        states_next = tree_map(_clone, states_out) if keep_states else None
        del emb, out, layout
        self._backward(roots, grads, last)
        del roots, grads, states_out, last
        saved[b] = None
        return states_next, [None if x is None else x.grad for x in tree_leaves(leaves)]


def _owned_rows(x: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """Rows ``idx`` (non-empty, ascending) of the owned snapshots' ``x``: a view when they are consecutive."""
    return x[idx[0] : idx[-1] + 1] if idx == list(range(idx[0], idx[-1] + 1)) else x[idx]


def _clone(x):
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def _leaf(x):
    """A saved boundary state as a leaf that collects its gradient."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().requires_grad_(True)
    return x


class SnapshotLayout(Layout):
    """Block b under S1: GCN on whole owned snapshots (T_pb, N, F), RNN on vertex ranges (IBM Fig. 3a)."""

    #: whether the time encoder's rows move to vertex owners (PSS keeps them where they are)
    redistributes = True

    def __init__(self, s: SnapshotStrategy, b: int, states: list | None) -> None:
        super().__init__(s.blocks[b], s.blocks[b + 1], s.num_layers, states)
        self.s, self.b = s, b
        self.local = s._local[b]
        self._diag: dict[tuple[int, int], NormalizedAdjacency] | None = None
        self._graphs: list[StepGraph] | None = None
        #: layers whose exchanges run inside ``encode``, overlapped with the RNN
        self._overlapped: set[int] = set()
        #: of those, the layers whose input is already in the vertex layout
        self._vertex_input: set[int] = set()
        #: layers whose banded encoder reads a time halo
        self._banded: set[int] = set()
        #: layers whose aggregation moves, their transform run by the vertex owner
        self._moved: set[int] = set()

    def _stacked_adj(self, lo: int, hi: int) -> NormalizedAdjacency:
        """diag(Ã) of the phase lo..hi-1, loaded when first needed (S3)."""
        if self._diag is None:
            self._diag = self.s.stacked_adjacency(self.b)
        return self._diag[(lo, hi)]

    def spatial(self, layer, li: int, h: torch.Tensor | None, tparams) -> torch.Tensor:
        """The block's owned snapshots at once: Ã·X (layer 0, S4) or an aggregation over diag(Ã_t) per phase."""
        s = self.s
        if layer.temporal_mixing and layer.temporal_reach is not None and s._time_halo(layer.temporal_reach):
            self._banded.add(li)
        moved = self.moves_aggregation(layer, li, tparams)
        if moved:
            self._moved.add(li)
            if li == 0 and s._precomputed and self.local:  # to_temporal moves the constant Ã·X once and keeps it
                return _owned_rows(s.ax0, self.local)
        parts, phases = [], s.phases(self.b)
        # fill one buffer tail first: autograd refuses a custom function's view written after it
        writes = len(phases) == 2 and not moved and layer.writes_out and torch.is_grad_enabled()
        into = None
        for grad, a, b in reversed(phases) if writes else phases:
            idx = self.local[a:b]
            with torch.set_grad_enabled(torch.is_grad_enabled() and grad):
                x = _owned_rows(s.ax0, idx) if li == 0 else (phase_head(h, b) if a == 0 else h[a:b])
                if (li > 0 or not s._precomputed) and not layer.graph_recurrent:
                    rows = layer.aggregate(LocalGraph(self._stacked_adj(a, b)), x.reshape(-1, x.shape[-1]))
                    x = rows.view(b - a, s.N, rows.shape[-1])
                steps = [s.owned[i] for i in idx]
                if writes and into is None:
                    into = x.new_empty(len(self.local), s.N, layer.spatial_features)
                parts.append(x if moved else layer.spatial_steps(x, steps, tparams) if into is None
                             else layer.spatial_steps(x, steps, tparams, out=into[a:b]))
        if not parts:
            return s.ax0.new_zeros(0, s.N, layer.in_features if moved else layer.spatial_features)
        if into is not None:
            return phase_join_into(parts[1], into)
        return parts[0] if len(parts) == 1 else phase_join(*parts)

    def pool_input(self, li: int, h: torch.Tensor | None) -> tuple[torch.Tensor, np.ndarray, int, Any]:
        """The block's owned snapshots' rows of layer ``li``'s input (X_t itself for layer 0), whole snapshots."""
        s = self.s
        if li == 0 and s._precomputed:
            raise RuntimeError("a pooling first layer reads X_t, which a precomputed Ã·X has replaced")
        x = h if li > 0 else _owned_rows(s.ax0, self.local) if self.local else s.ax0[:0]
        steps = np.asarray([s.owned[i] for i in self.local], dtype=np.int64)
        keys = (steps[:, None] * s.N + np.arange(s.N, dtype=np.int64)[None, :]).reshape(-1)
        return x.reshape(-1, x.shape[-1]), keys, s.N, s.comm

    def moves_aggregation(self, layer, li: int, tparams) -> bool:
        """Whether layer ``li`` moves its aggregation to the vertex owners (never for banded encoders)."""
        return self.redistributes and li not in self._banded and moves_aggregation(layer, li, tparams,
                                                                                    self.s._precomputed)

    def to_temporal(self, y: torch.Tensor, li: int) -> torch.Tensor:
        """Snapshot layout -> vertex layout (all-to-all); overlapped and banded layers move in :meth:`encode`."""
        if li in self._banded:
            return y
        if li == 0 and li in self._moved and self.s._precomputed:
            if self.s._chunk_boxes is not None:
                self._overlapped.add(li)
                self._vertex_input.add(li)
            return self.s._ax0_on_vertex(y, self.b)
        if self.s._chunk_boxes is not None:
            self._overlapped.add(li)
            return y
        return self.s._to_vertex(y, f"layer{li}.to_vertex", self.b)

    def encode(self, layer, li: int, y: torch.Tensor, state):
        """The RNN, without autograd past the training horizon."""
        if li in self._banded:
            return self.s._encode_banded(layer, li, y)
        if li in self._moved:
            layer = TransformThenEncode(layer)
        if li in self._overlapped:
            return self.s._encode_overlapped(layer, li, y, state, self.b, li in self._vertex_input)
        return self.s._temporal(layer, y, state, self.b, self.temporal_kwargs(layer, li).get("graphs"))

    def step_graphs(self, li: int) -> list[StepGraph] | None:
        """The block's step graphs when this rank's temporal rows are whole snapshots (one rank), else None."""
        if not self.s.step_graphs_at(self.s.comm.size):
            return None
        if self._graphs is None:
            self._graphs = self.s.step_graphs(self.b)
        return self._graphs

    def to_spatial(self, z: torch.Tensor, li: int) -> torch.Tensor:
        """Vertex layout -> owned snapshots (the reverse all-to-all)."""
        if li in self._banded:
            return z
        if li in self._overlapped:
            self._overlapped.discard(li)
            self._vertex_input.discard(li)
            return z
        return self.s._to_snapshot(z, f"layer{li}.to_snapshot", self.b)

    def output(self, h: torch.Tensor) -> Embeddings:
        """The owned snapshots' embeddings, with the (T_pb, N, F) block they are rows of."""
        self.last = h
        return Embeddings.of_block(h, [self.s.owned[i] for i in self.local])


def snapshot_cost(plan: PartitionPlan, job, manifest, graph, redistributes: bool = True,
                  transposes: bool = True) -> list:
    """Per-rank work and traffic of one steady epoch under ``plan`` (:mod:`hpcdgnn.planner.cost`).

    Per block b and time-mixing layer, rank p sends q its k_pb snapshots' rows of q's vertex range, and back
    (IBM §4.2: T·N·F·(P−1)/P per redistribution); the backward moves only snapshots up to the training horizon.
    Checkpoint blocks (S2, IBM §3.1) before the last one with a gradient run forward twice, their work
    (``RankWork.rerun_*``) and exchanges included; each of their forward passes normalises its Ã_t again, each
    backward transposes them where the model's backward reads Ãᵀ (``transposes``: ``ModelWork.transposes``;
    S3, ``RankWork.rebuilt_*``).
    A moved first-layer aggregation (constant Ã·X) goes once, in the first epoch; banded encoders (TM-GCN)
    receive the w − 1 snapshots before their run instead (``time_halo``). ``redistributes=False`` (``pss``):
    no redistribution; the time encoder's state is passed on instead (its traffic is the caller's)."""
    from hpcdgnn.nn.layout import moves_aggregation
    from hpcdgnn.nn.models import meta_layers
    from hpcdgnn.planner.cost import RankWork, add, adjacency_bytes, pool_traffic
    from hpcdgnn.regimes.base import item_bytes

    P, T, N, F = plan.num_ranks, plan.num_snapshots, plan.num_vertices, manifest.num_features
    layers = meta_layers(job.model, F)
    item = item_bytes(job)
    causal = all(ly.causal for ly in layers)
    horizon = plan.horizon if causal else T - 1
    precomputed = layers[0].precomputable
    owned = [plan.snapshots_of(p) for p in range(P)]
    n = [plan.vertex_bounds[p + 1] - plan.vertex_bounds[p] for p in range(P)]
    nnz = graph.adjacency_nnz
    mixing = any(ly.temporal_mixing for ly in layers)
    needs_adj = any(not ly.graph_recurrent and (li > 0 or not precomputed) for li, ly in enumerate(layers))
    contiguous = all(not o or o[-1] - o[0] + 1 == len(o) for o in owned)
    halo_on = (redistributes and len(plan.blocks) == 2 and getattr(job.strategy, "time_halo", "on") == "on"
               and contiguous)
    ranks = []
    for p in range(P):
        grad = sum(1 for t in owned[p] if t <= horizon)
        r = RankWork(spatial_rows=len(owned[p]) * N, spatial_steps=len(owned[p]),
                     spatial_nnz=float(sum(nnz[t] for t in owned[p])), saved_divisor=len(plan.blocks) - 1,
                     spatial_saved_rows=grad * N, scored=list(owned[p]))
        if mixing and redistributes:
            r.temporal_rows, r.temporal_steps, r.temporal_saved_rows = T * n[p], T, (horizon + 1) * n[p]
        elif mixing:  # pss: only the last rank's time encoder stops at the horizon
            r.temporal_rows, r.temporal_steps = len(owned[p]) * N, len(owned[p])
            r.temporal_saved_rows = (grad if p == P - 1 else len(owned[p])) * N
        blocks = [[t for t in owned[p] if a <= t < b] for a, b in zip(plan.blocks[:-1], plan.blocks[1:],
                                                                        strict=True)]
        adj = [adjacency_bytes(N * len(bl), sum(nnz[t] for t in bl), item) for bl in blocks]
        r.resident_bytes = (sum(adj) if len(blocks) == 1 else max(adj, default=0.0)) if needs_adj else 0.0
        r.resident_bytes += len(owned[p]) * N * F * item
        ranks.append(r)
    # S2: the blocks before the last one with a gradient run forward twice, without autograd and again in the
    # backward pass (SnapshotStrategy.step), each time with their forward exchanges
    last_grad = max((bi for bi, a in enumerate(plan.blocks[:-1]) if a <= horizon), default=-1)
    for bi, (a, b) in enumerate(zip(plan.blocks[:-1], plan.blocks[1:], strict=True)):
        runs = 2 if bi < last_grad else 1
        block = [[t for t in owned[p] if a <= t < b] for p in range(P)]  # each rank's snapshots of the block
        if runs == 2:  # the re-run forward's work (its time), as its exchanges below
            for p, r in enumerate(ranks):
                mine = block[p]
                r.rerun_spatial_rows += len(mine) * N
                r.rerun_spatial_steps += len(mine)
                r.rerun_spatial_nnz += float(sum(nnz[t] for t in mine))
                if mixing and redistributes:
                    r.rerun_temporal_rows += (b - a) * n[p]
                    r.rerun_temporal_steps += b - a
                r.rerun_passes += 1
        if len(plan.blocks) > 2 and needs_adj:
            _rebuilt(ranks, block, runs, bi <= last_grad and transposes, horizon, nnz)
        k = [runs * len(mine) for mine in block]
        kg = [sum(1 for t in mine if t <= horizon) for mine in block]
        pool_traffic(layers, b - a, P, item, ranks, runs=runs, grad=bi <= last_grad)
        for li, ly in enumerate(layers):
            if not ly.temporal_mixing or not redistributes or P == 1:
                continue
            if ly.temporal_reach is not None and halo_on:
                for p in range(P):
                    if not owned[p]:
                        continue
                    need = range(max(0, owned[p][0] - ly.temporal_reach), owned[p][0])
                    for t in need:
                        q = plan.snapshot_owner[t]
                        add(ranks[q].sent, "time_halo.fwd", N * ly.spatial_features * item)
                        if t <= horizon:
                            add(ranks[p].sent, "time_halo.bwd", N * ly.spatial_features * item)
                    add(ranks[p].calls, "alltoall", 2)
                continue
            moved = moves_aggregation(ly, li, None, precomputed)
            w_in = ly.in_features if moved else ly.spatial_features
            w_out = ly.out_features
            kept = li == 0 and moved and precomputed
            for p in range(P):
                others, others_g = sum(k) - k[p], sum(kg) - kg[p]
                r = ranks[p]
                if kept:
                    r.resident_bytes += (b - a) * n[p] * w_in * item
                else:
                    add(r.sent, "redistribute.fwd", k[p] * (N - n[p]) * w_in * item)
                    add(r.sent, "redistribute.bwd", others_g * n[p] * w_in * item)
                add(r.sent, "redistribute.fwd", others * n[p] * w_out * item)
                add(r.sent, "redistribute.bwd", kg[p] * (N - n[p]) * w_out * item)
                add(r.calls, "alltoall", (1 if kept else 2) * (runs + 1))
    return ranks


def _rebuilt(ranks: list, block: list[list[int]], runs: int, transposed: bool, horizon: int, nnz) -> None:
    """Add to each rank's :class:`~hpcdgnn.planner.cost.RankWork` what a checkpoint block rebuilds per epoch
    (S3: no block keeps Ã_t): each of its ``runs`` forward passes normalises the rank's snapshots of it
    (``block[p]``) again, one call per phase (:meth:`SnapshotStrategy.phases`); a backward (``transposed``)
    builds Ãᵀ of those up to the horizon once. ``nnz``: (T,) stored entries of Ã_t."""
    for r, mine in zip(ranks, block, strict=True):
        grad = [t for t in mine if t <= horizon]
        phases = (len(grad) > 0) + (len(grad) < len(mine))
        r.rebuilt_calls += runs * phases
        r.rebuilt_steps += runs * len(mine)
        r.rebuilt_nnz += runs * float(sum(nnz[t] for t in mine))
        if transposed and grad:
            r.transposes += 1
            r.transposed_nnz += float(sum(nnz[t] for t in grad))
