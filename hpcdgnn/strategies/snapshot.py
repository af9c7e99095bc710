"""S1, snapshot partitioning with redistribution ("PSS-TS"): IBM §4.2, Fig. 3a.

Per layer (IBM Fig. 1b, Fig. 3a)::

    Y_t = GCN(Ã_t, X_t)           for each snapshot t this rank owns   (no communication)
    Y[V_q] <- all-to-all(Y)       snapshot layout -> vertex layout     (redistribute.fwd)
    Z[V_q] = RNN(Y_1[V_q] .. Y_T[V_q])                                 (no communication)
    Z_t   <- all-to-all(Z[V_q])   vertex layout -> snapshot layout     (redistribute.fwd)

and the backward pass runs the same two all-to-alls in reverse order with the
counts swapped (``redistribute.bwd``, :mod:`hpcdgnn.comm.autograd`). Layers
whose RNN does not mix time per vertex (EvolveGCN-O, IBM §5.5) skip both.
The first layer's Ã_t·X_t is computed once at setup and reused (S4, §5.5).

Communication volume of one redistribution, summed over ranks, in bytes::

    (T*N - sum_p T_p*N_p) * F * itemsize   ( = T*N*F*(P-1)/P*itemsize when P | T and P | N )

where T_p, N_p are rank p's snapshot and vertex counts from the plan; a
rank's block to itself is a local copy and is not counted.

Ranks that own no snapshot (P > T) or no vertex row (P > N) still take part
in every all-to-all, forward and backward: their tensors are empty but stay
connected to the autograd graph, and on a rank that scores no snapshot
:meth:`SnapshotStrategy.backward` adds the last (empty) redistribution output
as a root with a zero gradient, so every rank calls each collective's
backward in the same order.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from hpcdgnn.comm.autograd import redistribute
from hpcdgnn.nn.conv.gcn import NormalizedAdjacency, gcn_norm, spmm
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.partition.plan import PartitionPlan, build_snapshot_plan
from hpcdgnn.strategies.base import Strategy
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.tasks import task_class

__all__ = ["SnapshotStrategy"]


def _keep_connected(t: torch.Tensor, like: torch.Tensor | None) -> torch.Tensor:
    """``t`` plus a zero that depends on ``like``, so an empty ``t`` still carries ``like``'s gradient path."""
    if like is None or not like.requires_grad:
        return t
    return t + like.sum() * 0.0


def _rows(ts: list[int]) -> tuple[int, int] | list[int]:
    """Time rows as a range ``(a0, a1)`` when contiguous (or empty), else as the explicit list."""
    if not ts:
        return (0, 0)
    if ts[-1] - ts[0] + 1 == len(ts):
        return (ts[0], ts[-1] + 1)
    return list(ts)


@register_strategy("snapshot")
class SnapshotStrategy(Strategy):
    """Snapshots are owned by ranks in contiguous blocks; the RNN runs on vertex ranges (IBM §4.2)."""

    @classmethod
    def make_plan(cls, manifest, num_ranks, job) -> PartitionPlan:
        """Cyclic snapshots or contiguous blocks (equal count, or equal estimated work); equal vertex ranges.

        Work of snapshot t, in memory-bound element operations (the dense
        transforms are cheap BLAS calls next to them): per layer the sparse
        aggregation ``(nnz_t + N) * F'`` and about four elementwise passes over
        the (N, F') activations, three times that (forward and backward) up to
        the training horizon, plus the task's cost of scoring t
        (:meth:`Task.snapshot_work`).
        """
        if job.strategy.layout == "cyclic":
            return build_snapshot_plan(manifest, num_ranks, layout="cyclic")
        if job.strategy.balance == "count":
            return build_snapshot_plan(manifest, num_ranks)
        H, L = job.model.hidden, job.model.layers
        task = task_class(job.task.name)
        nnz = np.asarray(manifest.snapshot_nnz, dtype=np.float64)
        # forward + backward up to the training horizon, forward only after it (see forward())
        passes = np.where(np.arange(manifest.num_snapshots) <= task.train_horizon(job.task, manifest), 3.0, 1.0)
        work = L * (nnz + 5 * manifest.num_vertices) * H * passes
        work = work + task.snapshot_work(job.task, manifest)
        return build_snapshot_plan(manifest, num_ranks, work)

    def setup(self, plan: PartitionPlan, model: DGNN, reader) -> list[int]:
        """Read the owned snapshots, normalise Ã_t (IBM Eq. 1) and precompute Ã_t·X_t (S4)."""
        t0 = time.perf_counter()
        self._init_exchange(plan)
        job = self.ctx.job
        causal = all(layer.causal for layer in model.layers)
        horizon = task_class(job.task.name).train_horizon(job.task, self.ctx.manifest)
        #: snapshots after this one get no gradient (causal model): their GCN runs without autograd
        self.horizon = horizon if causal else self.ctx.manifest.num_snapshots - 1
        dtype = self.ctx.dtype
        self.adj: list[NormalizedAdjacency] = []
        ax = []
        for t in self.owned:
            snap = reader.read(t)
            a = gcn_norm(t, snap.indptr, snap.indices, snap.weights, dtype)
            self.adj.append(a)
            ax.append(spmm(a, torch.from_numpy(snap.x).to(dtype)))
        F = self.ctx.manifest.num_features
        self.ax0 = torch.stack(ax) if ax else torch.zeros(0, self.N, F, dtype=dtype)
        self.setup_seconds = time.perf_counter() - t0
        self._last: torch.Tensor | None = None
        return self.owned

    def _init_exchange(self, plan: PartitionPlan) -> None:
        """The boxes of the two redistributions (IBM Fig. 3a), fixed for the run.

        Snapshot layout on rank p: (T_p, N, F); vertex layout on rank q: (T, N_q, F).
        Rank p sends rank q the box [all its snapshots] x [q's vertex rows]; rank q
        stores it at [p's snapshot range] x [all its rows]. The reverse exchange
        swaps the two lists.
        """
        self.plan = plan
        me, P = self.comm.rank, self.comm.size
        self.owned = plan.snapshots_of(me)
        self.N, self.T = plan.num_vertices, plan.num_snapshots
        vb = plan.vertex_bounds
        self._n_me = vb[me + 1] - vb[me]
        self._snapshot_boxes = [((0, len(self.owned)), (vb[q], vb[q + 1])) for q in range(P)]
        # rank p's snapshots land at their time rows: a range for blocks, a row list when cyclic
        self._vertex_boxes = [(_rows(plan.snapshots_of(p)), (0, self._n_me)) for p in range(P)]

    def engine_bytes(self) -> int:
        """Normalised adjacencies plus the precomputed first-layer aggregation."""
        return sum(a.nbytes for a in self.adj) + self.ax0.numel() * self.ax0.element_size()

    # -- the two redistributions of IBM §4.2 -------------------------------------------------
    def _to_vertex(self, y: torch.Tensor, key: str) -> torch.Tensor:
        """(T_p, N, F) owned snapshots -> (T, N_q, F) full timeline of this rank's vertices."""
        if not y.requires_grad and torch.is_grad_enabled():
            y = y.detach().requires_grad_(True)  # every rank must run this collective's backward
        shape = (self.T, self._n_me, y.shape[-1])
        return redistribute(y, self.comm, shape, self._snapshot_boxes, self._vertex_boxes, reuse=key)

    def _to_snapshot(self, z: torch.Tensor, key: str) -> torch.Tensor:
        """(T, N_q, F) vertex layout -> (T_p, N, F) owned snapshots (the reverse exchange)."""
        shape = (len(self.owned), self.N, z.shape[-1])
        return redistribute(z.contiguous(), self.comm, shape, self._vertex_boxes, self._snapshot_boxes, reuse=key)

    # -- the training step -----------------------------------------------------------------
    def forward(self, model: DGNN) -> dict[int, torch.Tensor]:
        """Two-phase forward of every layer (GCN per owned snapshot, RNN per owned vertex range)."""
        h: torch.Tensor | None = None
        hs: tuple[torch.Tensor, ...] = ()
        horizon = self.owned[-1] + 1 if self.owned else 0
        for li, layer in enumerate(model.layers):
            tparams = layer.time_params(horizon)
            ys = []
            for i, t in enumerate(self.owned):
                # past the training horizon no gradient arrives: skip recording the autograd graph
                with torch.set_grad_enabled(torch.is_grad_enabled() and t <= self.horizon):
                    ax = self.ax0[i] if li == 0 else spmm(self.adj[i], hs[i])
                    ys.append(layer.spatial(ax, t, tparams))
            y = torch.stack(ys) if ys else self.ax0.new_zeros(0, self.N, layer.spatial_features)
            # y must stay connected to the previous exchange's output even when it owns nothing
            # that trains (or nothing at all), so this rank runs that exchange's backward too
            if not y.requires_grad:
                y = _keep_connected(y, h)
            if layer.temporal_mixing:
                # keyed buffers: each exchange reuses last epoch's memory (the graph that held it is gone)
                z, _ = layer.temporal(self._to_vertex(y, f"layer{li}.to_vertex"))
                y = self._to_snapshot(z, f"layer{li}.to_snapshot")
            h = y
            # unbind once: indexing h[i] per snapshot would make each backward zero-fill a full-size buffer
            hs = h.unbind(0)
        self._last = h
        return dict(zip(self.owned, hs))

    def backward(self, loss: torch.Tensor) -> None:
        """Backward with the last layer output as an extra zero-gradient root (see module docstring)."""
        last = self._last
        # Tasks keep their loss connected to every embedding they get (Task.forward's contract), so
        # only a rank that scores nothing needs the extra root; it is empty, so it costs nothing.
        if last is not None and last.requires_grad and last.shape[0] == 0:
            torch.autograd.backward([loss, last], [torch.ones_like(loss), torch.zeros_like(last)])
        else:
            loss.backward()
        self._last = None
