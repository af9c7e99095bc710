"""S6, vertex partitioning with halo exchange: the baseline of IBM §4.1 (Table 2) and DGC's "PTS".

Rank q owns a set of vertices V_q for the whole timeline, so the RNN of every
layer runs locally on its (T, |V_q|, F) block — no redistribution — while each
GCN needs, for each snapshot t, the rows of H_t of every neighbour of V_q.
Those that other ranks own (the halo) come in one exchange per layer::

    send  = H[rows other ranks asked for]            (indices fixed at setup)
    halo  = all-to-all-v(send)                       (autograd: backward sends gradients back)
    Y     = Ã[V_q, :] · [H ; halo]                   (one sparse product for all T snapshots)

The indices are computed once at setup: each rank reads every snapshot,
normalises it (IBM Eq. 1), keeps the rows of its vertices, and asks the owners
of the columns it touches for exactly those (t, vertex) rows. The first layer's
Ã·X is precomputed from the full features (SPEC S4), so it needs no halo. The
halo volume grows with P and with the edge cut (IBM Table 2) — what makes
snapshot partitioning (S1) scale better — and is counted under ``halo.fwd`` /
``halo.bwd``.

The task scores whole snapshots (link prediction pairs any two vertices), so
after the last layer one all-to-all moves the embeddings to snapshot owners
(snapshot t on rank t mod P): ``redistribute`` with the boxes of
:mod:`hpcdgnn.strategies.snapshot`.

Partitions (``strategy.partition``): contiguous id ranges, a multiplicative
hash of the id, or METIS (the optional ``pymetis`` package) on the union of all
snapshots' edges, balanced by vertex count. Internally the vertices are
renumbered in rank order (``PartitionPlan.vertex_order``) so every rank's set
is a contiguous range of positions.
"""

from __future__ import annotations

import numpy as np
import torch

from hpcdgnn.comm.autograd import redistribute
from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds
from hpcdgnn.strategies.halo import HaloStrategy
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.strategies.snapshot import _keep_connected, _rows

__all__ = ["VertexStrategy", "vertex_partition"]

_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads consecutive ids over all ranks


def vertex_partition(method: str, num_vertices: int, num_ranks: int, edges=None) -> np.ndarray:
    """Rank of each vertex: ``range`` (contiguous ids), ``hash`` or ``metis`` (``edges``: (src, dst) arrays).

    Raises:
        ConfigError: ``metis`` without the optional ``pymetis`` package.
    """
    N, P = num_vertices, num_ranks
    if method == "range" or P == 1:
        vb = balanced_bounds(N, P)
        return np.repeat(np.arange(P), np.diff(vb))
    if method == "hash":
        with np.errstate(over="ignore"):
            h = np.arange(N, dtype=np.uint64) * _HASH
        return ((h >> np.uint64(32)) % np.uint64(P)).astype(np.int64)
    try:
        import pymetis
    except ImportError:
        raise ConfigError(
            "strategy.partition: metis needs the optional package pymetis (pip install pymetis); "
            "or use range or hash"
        ) from None
    src, dst = edges
    keep = src != dst
    a = np.concatenate([src[keep], dst[keep]])
    b = np.concatenate([dst[keep], src[keep]])
    keys = np.unique(a.astype(np.int64) * N + b)
    a, b = keys // N, keys % N
    xadj = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=N), out=xadj[1:])
    _, parts = pymetis.part_graph(P, xadj=xadj, adjncy=b)
    return np.asarray(parts, dtype=np.int64)


@register_strategy("vertex")
class VertexStrategy(HaloStrategy):
    """Vertices partitioned over ranks for all snapshots; halo rows exchanged per GCN (IBM §4.1)."""

    @classmethod
    def make_plan(cls, manifest, num_ranks, job) -> PartitionPlan:
        """Vertex sets by ``strategy.partition``; snapshots scored cyclically (t on rank t mod P)."""
        from hpcdgnn.data.shard_reader import ShardReader

        T, N, P = manifest.num_snapshots, manifest.num_vertices, num_ranks
        edges = None
        if job.strategy.partition == "metis" and P > 1:
            with ShardReader(job.data.path, manifest) as reader:
                src, dst = zip(*(reader.edges(t) for t in range(T)))
            edges = (np.concatenate(src), np.concatenate(dst))
        part = vertex_partition(job.strategy.partition, N, P, edges)
        order = np.argsort(part, kind="stable")
        counts = np.bincount(part, minlength=P)
        vb = [0, *np.cumsum(counts).tolist()]
        owner = [t % P for t in range(T)]
        nnz = np.asarray(manifest.snapshot_nnz, dtype=np.int64)
        ranks = [
            {"snapshots": sum(1 for o in owner if o == p), "vertices": int(counts[p]),
             "nnz_scored": int(nnz[[t for t in range(T) if owner[t] == p]].sum())}
            for p in range(P)
        ]
        return PartitionPlan("vertex", P, T, N, owner, None, vb, ranks, None, order.tolist())

    def setup(self, plan: PartitionPlan, model: DGNN, reader) -> list[int]:
        """Read every snapshot, keep this rank's rows of Ã_t, precompute Ã·X, and agree on the halo."""
        P, me, dev = self.comm.size, self.comm.rank, self.ctx.device
        T, N = plan.num_snapshots, plan.num_vertices
        vb = np.asarray(plan.vertex_bounds)
        order = np.asarray(plan.vertex_order if plan.vertex_order is not None else range(N), dtype=np.int64)
        pos = np.empty(N, dtype=np.int64)
        pos[order] = np.arange(N)  # position of each vertex in rank order
        part = np.repeat(np.arange(P), np.diff(vb))[pos]  # rank of each vertex
        row_in_rank = pos - vb[part]
        lo, hi = vb[me], vb[me + 1]
        n = int(hi - lo)
        self.T, self.N, self.n, self.plan = T, N, n, plan
        self.pos = torch.from_numpy(pos).to(dev)
        mine = order[lo:hi]
        # appearance (t, v) lives on part[v], at row t * n_part + its row in the rank's range
        n_of = np.diff(vb)
        self._setup_halo(reader, T, N, lambda t: mine, lambda k: part[k % N],
                         lambda k: (k // N) * n_of[part[k % N]] + row_in_rank[k % N], T * n, model)

        # the task's layout: snapshot t on rank t mod P, vertex rows in rank order (see module docstring)
        self.scored = plan.snapshots_of(me)
        self._snap_boxes = [((0, len(self.scored)), tuple(plan.vertex_bounds[q : q + 2])) for q in range(P)]
        self._vert_boxes = [(_rows(plan.snapshots_of(p)), (0, n)) for p in range(P)]
        return self.scored

    def forward(self, model: DGNN) -> dict[int, torch.Tensor]:
        """GCN with halo exchange and local RNN per layer; then embeddings to snapshot owners."""
        T, n = self.T, self.n
        h: torch.Tensor | None = None
        for li, layer in enumerate(model.layers):
            flat = None if h is None else h.reshape(T * n, h.shape[-1])  # explicit width: n may be 0 (P > N)
            ax = self._aggregate(layer, li, flat)
            ax = ax.view(T, n, ax.shape[-1])
            tparams, _ = layer.time_params_block(0, T, None)
            y = torch.stack([layer.spatial(ax[t], t, tparams) for t in range(T)]) if T else ax
            y = _keep_connected(y, h)
            h, _ = layer.temporal(y, None)
        z = redistribute(h.contiguous(), self.comm, (len(self.scored), self.N, h.shape[-1]),
                         self._vert_boxes, self._snap_boxes, tag="redistribute", reuse="to_snapshot")
        self._last = z
        # rows are in rank order: back to vertex ids for the task
        return {t: z[j].index_select(0, self.pos) for j, t in enumerate(self.scored)}
