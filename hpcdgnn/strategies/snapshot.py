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

from hpcdgnn.comm.autograd import all_to_all_rows
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


@register_strategy("snapshot")
class SnapshotStrategy(Strategy):
    """Snapshots are owned by ranks in contiguous blocks; the RNN runs on vertex ranges (IBM §4.2)."""

    @classmethod
    def make_plan(cls, manifest, num_ranks, job) -> PartitionPlan:
        """Contiguous snapshot blocks (equal count, or equal estimated work) and equal vertex ranges.

        Work of snapshot t, in multiply-adds: per layer the sparse aggregation
        ``(nnz_t + N) * F'`` and the dense transform ``N * F' * F'``, plus the
        task's cost of scoring t (:meth:`Task.snapshot_work`).
        """
        if job.strategy.balance == "count":
            return build_snapshot_plan(manifest, num_ranks)
        H, L = job.model.hidden, job.model.layers
        nnz = np.asarray(manifest.snapshot_nnz, dtype=np.float64)
        work = L * ((nnz + manifest.num_vertices) * H + manifest.num_vertices * H * H)
        work = work + task_class(job.task.name).snapshot_work(job.task, manifest)
        return build_snapshot_plan(manifest, num_ranks, work)

    def setup(self, plan: PartitionPlan, model: DGNN, reader) -> list[int]:
        """Read the owned snapshots, normalise Ã_t (IBM Eq. 1) and precompute Ã_t·X_t (S4)."""
        t0 = time.perf_counter()
        self.plan = plan
        me, P = self.comm.rank, self.comm.size
        self.owned = list(plan.snapshots_of(me))
        self.N = plan.num_vertices
        # rows per peer in the two redistributions, fixed for the run
        k = [plan.snapshot_bounds[p + 1] - plan.snapshot_bounds[p] for p in range(P)]
        n = [plan.vertex_bounds[q + 1] - plan.vertex_bounds[q] for q in range(P)]
        self._to_vertex_send = [len(self.owned) * n[q] for q in range(P)]
        self._to_vertex_recv = [k[p] * n[me] for p in range(P)]
        self._k, self._n = k, n
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

    def engine_bytes(self) -> int:
        """Normalised adjacencies plus the precomputed first-layer aggregation."""
        return sum(a.nbytes for a in self.adj) + self.ax0.numel() * self.ax0.element_size()

    # -- the two redistributions of IBM §4.2 -------------------------------------------------
    def _to_vertex(self, y: torch.Tensor, key: str) -> torch.Tensor:
        """(T_p, N, F) owned snapshots -> (T, N_q, F) full timeline of this rank's vertices."""
        F = y.shape[-1]
        # split (not slicing) so the backward is one concatenation, not P zero-filled full-size buffers
        send = torch.cat([b.reshape(-1, F) for b in torch.split(y, self._n, dim=1)])
        if not send.requires_grad and torch.is_grad_enabled():
            send = send.detach().requires_grad_(True)  # every rank must run this collective's backward
        recv = all_to_all_rows(send, self.comm, self._to_vertex_send, self._to_vertex_recv, reuse=key)
        # blocks arrive in rank order = time order, each (k_p, N_q, F): together already (T, N_q, F)
        return recv.reshape(self.plan.num_snapshots, self._n[self.comm.rank], F)

    def _to_snapshot(self, z: torch.Tensor, key: str) -> torch.Tensor:
        """(T, N_q, F) vertex layout -> (T_p, N, F) owned snapshots (the reverse exchange)."""
        F = z.shape[-1]
        send = z.reshape(-1, F)  # rank p's block is the time range [b_p, b_p+1): contiguous already
        recv = all_to_all_rows(send, self.comm, self._to_vertex_recv, self._to_vertex_send, reuse=key)
        T_me = len(self.owned)
        blocks = torch.split(recv, self._to_vertex_send)
        return torch.cat([b.reshape(T_me, self._n[q], F) for q, b in enumerate(blocks)], dim=1)

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
                ax = self.ax0[i] if li == 0 else spmm(self.adj[i], hs[i])
                ys.append(layer.spatial(ax, t, tparams))
            if ys:
                y = torch.stack(ys)
            else:
                y = _keep_connected(self.ax0.new_zeros(0, self.N, layer.spatial_features), h)
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
