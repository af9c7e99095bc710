"""S6 vertex partitioning with halo exchange: the baseline of IBM §4.1 (Table 2) and DGC's "PTS".

Rank q owns vertices V_q for the whole timeline, so the RNN runs locally on its (T, |V_q|, F) block; each GCN
reads the rows of neighbours other ranks own (the halo) in one exchange per layer::

    send  = H[rows other ranks asked for]            (indices fixed at setup)
    halo  = all-to-all-v(send)                       (autograd: backward sends gradients back)
    Y     = Ã[V_q, :] · [H ; halo]                   (one sparse product for all T snapshots)

The halo grows with P and the edge cut (``halo.fwd`` / ``halo.bwd``). Tasks score rows where they live and fetch
only the rows they lack; others get whole snapshots (t on rank t mod P). Vertices are renumbered in rank order
(``PartitionPlan.vertex_order``) so every rank's set is a contiguous range.
"""

from __future__ import annotations

import numpy as np
import torch

from hpcdgnn.comm.autograd import redistribute
from hpcdgnn.nn.layout import horizon_temporal, phase_view
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.partition.vertex import plan_vertices
from hpcdgnn.strategies.base import Scored
from hpcdgnn.strategies.halo import HaloLayout, HaloStrategy
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.strategies.snapshot import _rows
from hpcdgnn.tasks.base import ShardedEmbeddings

__all__ = ["VertexLayout", "VertexStrategy"]

@register_strategy("vertex")
class VertexStrategy(HaloStrategy):
    """Vertices partitioned over ranks for all snapshots; halo rows exchanged per GCN (IBM §4.1)."""

    @classmethod
    def make_plan(cls, manifest, num_ranks, job) -> PartitionPlan:
        """Vertex sets by ``strategy.partition``; snapshots scored cyclically (:func:`plan_vertices`)."""
        return plan_vertices(manifest, num_ranks, job)

    @classmethod
    def cost(cls, plan: PartitionPlan, job, manifest, graph, work) -> list:
        """The planner's per-rank work and traffic under ``plan`` (:func:`vertex_cost`)."""
        return vertex_cost(plan, job, manifest, graph)

    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """Read this rank's rows of every Ã_t, agree on the halo, normalise, precompute Ã·X."""
        P, me, dev = self.comm.size, self.comm.rank, self.ctx.device
        T, N = plan.num_snapshots, plan.num_vertices
        vb = np.asarray(plan.vertex_bounds)
        order = np.asarray(plan.vertex_order if plan.vertex_order is not None else range(N), dtype=np.int64)
        pos = np.empty(N, dtype=np.int64)
        pos[order] = np.arange(N)
        part = np.repeat(np.arange(P), np.diff(vb))[pos]
        row_in_rank = pos - vb[part]
        lo, hi = vb[me], vb[me + 1]
        n = int(hi - lo)
        self.T, self.N, self.n, self.plan = T, N, n, plan
        #: row of each vertex id in the rank-ordered layout; None for the identity
        self.pos = None if np.array_equal(order, np.arange(N)) else torch.from_numpy(pos).to(dev)
        mine = order[lo:hi]
        # appearance (t, v) lives on part[v], at row t * n_part + its row in the rank's range
        n_of = np.diff(vb)
        self._setup_halo(reader, T, N, lambda t: mine, lambda k: part[k % N],
                         lambda k: (k // N) * n_of[part[k % N]] + row_in_rank[k % N], T * n, model, plan.horizon)

        self.num_layers = len(model.layers)
        keys = (np.arange(T, dtype=np.int64)[:, None] * N + mine[None, :]).reshape(-1)
        shard = self._task_rows(keys, N, lambda k: part[k % N],
                                lambda k: (k // N) * n_of[part[k % N]] + row_in_rank[k % N])
        if shard is not None:
            return Scored(rows=shard)
        # else snapshot t on rank t mod P, vertex rows in rank order
        self.scored = plan.snapshots_of(me)
        self._snap_boxes = [((0, len(self.scored)), tuple(plan.vertex_bounds[q : q + 2])) for q in range(P)]
        self._vert_boxes = [(_rows(plan.snapshots_of(p)), (0, n)) for p in range(P)]
        return Scored(snapshots=tuple(self.scored))

    def layout(self) -> VertexLayout:
        """The whole timeline: my vertices' rows of every snapshot."""
        return VertexLayout(self)


class VertexLayout(HaloLayout):
    """S6: my vertices' rows of all T snapshots as one (T, n, F) block; GCN with the halo, RNN local (IBM §4.1)."""

    def __init__(self, s: VertexStrategy) -> None:
        super().__init__(0, s.T, s.num_layers, [(t, s.n) for t in range(s.T)], s._aggregate, stacked=True)
        self.s = s

    def encode(self, layer, li: int, y: torch.Tensor, state):
        """The time encoder over my (T, n, F) block, keeping no end state (it may view ``y`` and pin it)."""
        z, _ = horizon_temporal(layer, y, state, self.s.grad_steps)
        return z, None

    def output(self, h: torch.Tensor) -> dict[int, torch.Tensor] | ShardedEmbeddings:
        """My rows, for a task that scores in place; else whole snapshots (t on rank t mod P), in id order."""
        s = self.s
        if s.shard is not None:
            self.last = rows = phase_view(h.contiguous(), (-1, h.shape[-1]))
            return s._in_place(rows)
        z = redistribute(h.contiguous(), s.comm, (len(s.scored), s.N, h.shape[-1]),
                         s._vert_boxes, s._snap_boxes, tag="redistribute", reuse="to_snapshot")
        self.last = z
        if s.pos is not None:
            z = z.index_select(1, s.pos)
        # unbind once: z[j] would make each backward zero-fill a full (scored, N, F) buffer
        return dict(zip(s.scored, z.unbind(0), strict=True))

    def finish(self) -> None:
        """After the backward: release the embeddings block (only a backward root while it ran)."""
        self.last = None


def vertex_cost(plan: PartitionPlan, job, manifest, graph) -> list:
    """Per-rank work and traffic of one steady epoch under a vertex plan (:mod:`hpcdgnn.planner.cost`).

    Rank q's halo is every (t, u) with u a neighbour (A_t row v → u) of one of its vertices v owned by another
    rank (counted from the snapshots' structure, read once); each aggregating layer moves the halo rows at its
    input width forward and their gradients back (IBM §4.1). The task scores rows in place; a link-prediction
    task's fetch of pair endpoints depends on the drawn negatives and is not predicted."""
    from hpcdgnn.nn.models import meta_layers
    from hpcdgnn.planner.cost import RankWork, adjacency_bytes, halo_counts, halo_traffic, pool_traffic
    from hpcdgnn.regimes.base import item_bytes

    P, T, N, F = plan.num_ranks, plan.num_snapshots, plan.num_vertices, manifest.num_features
    layers = meta_layers(job.model, F)
    item = item_bytes(job)
    order = np.asarray(plan.vertex_order if plan.vertex_order is not None else range(N), dtype=np.int64)
    part = np.empty(N, dtype=np.int64)
    part[order] = np.repeat(np.arange(P), np.diff(plan.vertex_bounds))
    n = np.diff(plan.vertex_bounds)
    reads, serves, nnz = halo_counts(graph, lambda t, v: part[v], P)
    precomputed = layers[0].precomputable
    mixing = any(ly.temporal_mixing for ly in layers)
    grad_steps = min(T, plan.horizon + 1) if all(ly.causal for ly in layers) else T
    ranks = []
    for q in range(P):
        r = RankWork(spatial_rows=T * n[q], spatial_steps=T, spatial_nnz=nnz[q],
                     temporal_rows=T * n[q] if mixing else 0.0, temporal_steps=T if mixing else 0.0,
                     spatial_saved_rows=grad_steps * n[q], temporal_saved_rows=grad_steps * n[q] if mixing else 0.0,
                     scored_rows=np.full(T, float(n[q])))
        r.resident_bytes = adjacency_bytes(T * n[q], nnz[q], item) + T * n[q] * F * item
        ranks.append(r)
    pool_traffic(layers, T, P, item, ranks)
    halo_traffic(layers, reads, serves, precomputed, item, ranks)
    return ranks
