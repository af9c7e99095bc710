"""What the vertex (S6) and chunk (D1) strategies share: owned rows of Ã and the halo exchange.

Every vertex appearance (v, t) has one owner rank; a rank numbers its appearances time-major, so its
activations are one (n, F) tensor and a GCN layer over all T snapshots is one sparse product with its rows of
Ã, whose columns are its own rows, then the *halo* (rows other ranks own), exchanged once per layer. Layer 0's
Ã·X is precomputed (SPEC S4) and needs no halo. With causal models everything past the training horizon runs
without autograd, as under the snapshot strategy; at P = 1 both strategies do its arithmetic at its cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hpcdgnn.comm.autograd import all_to_all_rows
from hpcdgnn.indices import unique_ints
from hpcdgnn.nn.conv.graph import LocalGraph, RowGroups
from hpcdgnn.nn.layout import RowLayout, phase_head, phase_join, phase_join_into
from hpcdgnn.nn.models.base import DynamicLayer
from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_mm, csr_nbytes, row_phases, sorted_csr, spmm
from hpcdgnn.strategies.base import FullBatchStrategy
from hpcdgnn.strategies.row_exchange import ask_owners
from hpcdgnn.strategies.stale import StaleFetch, StaleHalo
from hpcdgnn.tasks import task_class
from hpcdgnn.tasks.base import RowShard, ShardedEmbeddings

__all__ = ["OwnedRows", "read_owned_rows", "Halo", "local_rows", "halo_graph", "fetch_rows", "HaloStrategy",
           "HaloLayout"]


@dataclass
class OwnedRows:
    """This rank's rows of Ã_t for all t as entries of one (n, N·T) matrix, and their Ã·X.

    ``row``: local row (time-major); ``key``: ``t * N + u``; ``val``: Ã_t[v, u]; ``ax``: (n, F) Ã·X, or X.
    """

    row: torch.Tensor
    key: np.ndarray
    val: torch.Tensor
    ax: torch.Tensor


def _owned_ax(x_ext: torch.Tensor, row: np.ndarray, key: np.ndarray, cols: torch.Tensor, val: torch.Tensor,
              t_rows: list[int], num_features: int, dtype: torch.dtype) -> torch.Tensor:
    """Ã·X of my rows (SPEC S4): one sparse product per snapshot over ``x_ext`` = [my rows ; halo rows] of X."""
    row_t = torch.from_numpy(row)
    ax, start, at = [], 0, 0
    for k in t_rows:
        if k == 0:
            continue
        stop = int(np.searchsorted(row, at + k))
        uniq, first, inv = np.unique(key[start:stop], return_index=True, return_inverse=True)
        a = sorted_csr(row_t[start:stop] - at, torch.from_numpy(inv.reshape(-1)), val[start:stop],
                       (k, uniq.shape[0]))
        ax.append(torch.sparse.mm(a, x_ext[cols[start:stop][torch.from_numpy(first)]]))
        start, at = stop, at + k
    return torch.cat(ax) if ax else torch.zeros(0, num_features, dtype=dtype)


def read_owned_rows(reader, num_snapshots: int, num_vertices: int, vertices_at: Callable[[int], np.ndarray],
                    dtype: torch.dtype, comm, owner_of: Callable[[np.ndarray], np.ndarray],
                    local_of: Callable[[np.ndarray], np.ndarray], precompute: bool = True) -> tuple[OwnedRows, Halo]:
    """My rows (``vertices_at(t)`` per t, time-major) of Ã_t, read and normalised alone; and their :class:`Halo`.

    Halo columns' degrees (and X rows with ``precompute``) come from their owners (tag ``setup.halo``).
    Bit-identical to :func:`gcn_norm` over whole snapshots: the same sums in the same (CSR) order.
    """
    N = num_vertices
    F = reader.manifest.num_features
    f64 = torch.float64
    rows, keys, ws, degs, xs, t_rows = [], [], [], [], [], []
    offset = 0
    for t in range(num_snapshots):
        vs = np.asarray(vertices_at(t), dtype=np.int64).reshape(-1)
        k = vs.shape[0]
        t_rows.append(k)
        if k == 0:
            continue
        order = np.argsort(vs, kind="stable")
        blk = reader.read_rows(t, vs[order])
        count = np.diff(blk.indptr)
        r = np.repeat(order, count)
        c = blk.indices.astype(np.int64)
        w = torch.from_numpy(blk.weights).to(f64)
        keep = vs[r] != c  # A + I: an input self-loop would be counted twice otherwise
        r, c, w = r[keep], c[keep], w[torch.from_numpy(keep)]
        degs.append(torch.ones(k, dtype=f64).index_add_(0, torch.from_numpy(r), w))
        x = np.empty_like(blk.x)
        x[order] = blk.x
        xs.append(torch.from_numpy(x).to(dtype))
        # entries by ascending column, as gcn_norm's CSR orders them
        r = np.concatenate([r, np.arange(k)])
        c = np.concatenate([c, vs])
        w = torch.cat([w, torch.ones(k, dtype=f64)])
        pos = np.argsort(r * N + c, kind="stable")
        rows.append(r[pos] + offset)
        keys.append(c[pos] + t * N)
        ws.append(w[torch.from_numpy(pos)])
        offset += k
    n = offset
    row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    key = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
    w = torch.cat(ws) if ws else torch.zeros(0, dtype=f64)
    own_deg = torch.cat(degs) if degs else torch.zeros(0, dtype=f64)
    own_x = torch.cat(xs) if xs else torch.zeros(0, F, dtype=dtype)

    halo = Halo(comm, key, owner_of, local_of, n)
    deg = torch.cat([own_deg, halo.fetch(own_deg.view(-1, 1)).view(-1)])
    dinv = 1.0 / torch.sqrt(deg)
    cols = torch.from_numpy(halo.columns)
    row_t = torch.from_numpy(row)
    val = (w * dinv[row_t] * dinv[cols]).to(dtype)
    if not precompute:
        ax = own_x
    else:
        ax = _owned_ax(torch.cat([own_x, halo.fetch(own_x)]), row, key, cols, val, t_rows, F, dtype)
    return OwnedRows(row=row_t, key=key, val=val, ax=ax), halo


def local_rows(owner: np.ndarray, num_ranks: int) -> np.ndarray:
    """Row of each item on its owner, items numbered in ascending order per owner (a cumulative count)."""
    order = np.argsort(owner, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=num_ranks))[:-1]])
    local = np.empty(owner.shape[0], dtype=np.int64)
    local[order] = np.arange(owner.shape[0]) - starts[owner[order]]
    return local


class Halo:
    """The rows other ranks own that this rank's product reads (``keys``: ``t * N + u``), exchanged per layer."""

    def __init__(self, comm, keys: np.ndarray, owner_of: Callable[[np.ndarray], np.ndarray],
                 local_of: Callable[[np.ndarray], np.ndarray], n_local: int) -> None:
        P, me = comm.size, comm.rank
        self.comm = comm
        own = owner_of(keys) == me
        need = unique_ints(keys[~own])
        need_owner = owner_of(need)
        arrival = np.argsort(need_owner, kind="stable")
        slot = np.empty_like(arrival)
        slot[arrival] = np.arange(arrival.shape[0])
        self.recv_rows = np.bincount(need_owner, minlength=P).tolist()
        asked = comm.exchange.alltoallv(torch.from_numpy(local_of(need[arrival])).view(-1, 1),
                                        self.recv_rows, tag="setup")
        #: rows of my activations other ranks read, in the order they asked
        self.send_index = asked.view(-1)
        counts = comm.allgather_obj(self.recv_rows, tag="setup")  # counts[p][q]: rows rank p gets from q
        self.send_rows = [counts[q][me] for q in range(P)]
        #: no rank reads another's rows; all ranks agree (same counts), so all skip the exchange together
        self.idle = not any(c for row in counts for c in row)
        #: column of each entry in [own rows ; halo rows]
        self.columns = np.empty(keys.shape[0], dtype=np.int64)
        self.columns[own] = local_of(keys[own])
        self.columns[~own] = n_local + slot[np.searchsorted(need, keys[~own])]
        self.num_rows = need.shape[0]
        self.n_local = n_local

    def operator(self, owned: OwnedRows, device: torch.device) -> NormalizedAdjacency:
        """This rank's rows of Ã over [own ; halo] columns, with the transpose for the backward pass."""
        cols = torch.from_numpy(self.columns)
        shape = (self.n_local, self.n_local + self.num_rows)
        return NormalizedAdjacency(-1, sorted_csr(owned.row, cols, owned.val, shape).to(device),
                                   sorted_csr(cols, owned.row, owned.val, (shape[1], shape[0])).to(device))

    def fetch(self, h: torch.Tensor, tag: str = "setup.halo") -> torch.Tensor:
        """The halo rows of ``h`` (n, F), not differentiable (set-up traffic)."""
        return self.comm.exchange.alltoallv(h[self.send_index.to(h.device)], self.send_rows, self.recv_rows, tag=tag)

    def exchange(self, h: torch.Tensor, reuse: str | None = None) -> torch.Tensor:
        """The halo rows of activations ``h`` (n, F), differentiable (backward sends gradients back)."""
        return all_to_all_rows(h[self.send_index.to(h.device)], self.comm, self.send_rows, self.recv_rows,
                               tag="halo", reuse=reuse)


def fetch_rows(comm, h: torch.Tensor, keys: np.ndarray, owner_of: Callable[[np.ndarray], np.ndarray],
               local_of: Callable[[np.ndarray], np.ndarray], row_counts: list[int], tag: str = "task") -> torch.Tensor:
    """Rows ``keys`` (unique) of the distributed ``h`` (n, F) from their owners, differentiable (collective).

    A halo exchange whose indices are made per call (``<tag>.index``, then ``<tag>.fwd`` / ``.bwd``).
    Returns (len(keys), F) in ``keys`` order.
    """
    if comm.size == 1:
        return h[:0]
    req = ask_owners(comm, keys, owner_of, local_of, row_counts, tag)
    rows = all_to_all_rows(h.index_select(0, req.asked.to(h.device)), comm, req.got, req.counts, tag=tag)
    return req.in_key_order(rows)


def halo_graph(adj: NormalizedAdjacency, halo: Halo, stale, li: int, groups: RowGroups | None = None) -> LocalGraph:
    """My rows of Ã with layer ``li``'s halo exchange as the gather: exact, or ``stale`` (DGC §5.2)."""
    if halo.idle:
        return LocalGraph(adj, groups=groups)

    def gather(m: torch.Tensor) -> torch.Tensor:
        if stale is not None:
            return torch.cat([m, stale.exchange(li, m[halo.send_index.to(m.device)])])
        return torch.cat([m, halo.exchange(m, reuse=f"layer{li}.halo")])

    return LocalGraph(adj, gather, groups)


class HaloStrategy(FullBatchStrategy):
    """Base of the vertex (S6) and chunk (D1) strategies: time-major rows, one halo exchange per layer."""

    #: the fused groups the aggregation runs in (chunk fusion, DGC §5.1.1); None: one product
    groups: RowGroups | None = None

    def _setup_halo(self, reader, T: int, N: int, vertices_at: Callable[[int], np.ndarray],
                    owner_of: Callable[[np.ndarray], np.ndarray], local_of: Callable[[np.ndarray], np.ndarray],
                    n: int, model, horizon: int | None = None) -> OwnedRows:
        """Read my rows of Ã, agree on the halo, build the operator (and the stale cache)."""
        dev = self.ctx.device
        causal = horizon is not None and all(layer.causal for layer in model.layers)
        #: steps 0..grad_steps-1 can get a gradient
        self.grad_steps = min(T, horizon + 1) if causal else T
        self._precomputed = model.layers[0].precomputable
        owned, self.halo = read_owned_rows(reader, T, N, vertices_at, self.ctx.dtype, self.comm, owner_of, local_of,
                                           self._precomputed)
        if self.halo.n_local != n:
            raise ValueError(f"_setup_halo: vertices_at gives {self.halo.n_local} rows, expected {n}")
        #: the first layer's input, (n, F): Ã·X when precomputed (SPEC S4), else X
        self.ax0 = owned.ax.to(dev)
        #: ``t·N + v`` of each of my rows (time-major), for a pooling layer (EvolveGCN-H)
        self.row_keys = np.concatenate([t * N + np.asarray(vertices_at(t), dtype=np.int64) for t in range(T)]
                                       or [np.zeros(0, dtype=np.int64)])
        self.num_vertices = N
        self.adj = self.halo.operator(owned, dev)
        self.stale = StaleHalo.for_halo(self.comm, self.halo, self.ctx.job.strategy.stale)
        #: my rows before the horizon (a prefix: rows are time-major)
        self.head_rows = sum(len(vertices_at(t)) for t in range(self.grad_steps))
        #: Ã split at that row; the head square only without a halo, whose exchange must stay in the backward
        self._phase_ops = (row_phases(self.adj, self.head_rows, square=self.halo.idle)
                           if 0 < self.head_rows < n else None)
        return owned

    def _task_rows(self, keys: np.ndarray, N: int, owner_of: Callable[[np.ndarray], np.ndarray],
                   local_of: Callable[[np.ndarray], np.ndarray]) -> RowShard | None:
        """My rows (``keys``: ``t * N + v``) as the task's :class:`RowShard` if it scores in place, else None."""
        self.shard = None
        if task_class(self.ctx.job.task.name).in_place:
            steps = unique_ints(keys // N).tolist() if keys.size else []
            self.shard = RowShard(keys, N, self.comm.rank, owner_of, local_of, steps, self.comm.size)
            #: the rows each rank holds (fetch requests may be bitmasks over them)
            self._row_counts = [int(c) for c in self.comm.allgather_obj(int(keys.shape[0]), tag="setup")]
            if self.stale is not None:
                # made at setup, not at the first fetch, so ``--resume`` can restore its caches
                self.stale.fetch = StaleFetch(self.stale, self._row_counts)
        return self.shard

    def _in_place(self, h: torch.Tensor) -> ShardedEmbeddings:
        """The last layer's rows, for a task that scores them in place."""
        sh = self.shard
        if self.stale is not None:
            fetch = self.stale.fetch
            return ShardedEmbeddings(sh, h, lambda keys: fetch.fetch(h, keys, sh.owner_of, sh.local_of))
        return ShardedEmbeddings(sh, h, lambda keys: fetch_rows(self.comm, h, keys, sh.owner_of, sh.local_of,
                                                                    self._row_counts))

    def _aggregate(self, layer, li: int, h: torch.Tensor | None) -> torch.Tensor:
        """Layer ``li``'s aggregation of my rows ``h`` (n, F): precomputed for layer 0, else over the halo."""
        if li == 0 and self._precomputed:
            return self.ax0
        return layer.aggregate(halo_graph(self.adj, self.halo, self.stale, li, self.groups),
                               self.ax0 if li == 0 else h)

    def splits_aggregation(self, layer, li: int) -> bool:
        """Whether layer ``li``'s aggregation runs as two phases split at the horizon."""
        if self._phase_ops is None or not torch.is_grad_enabled():
            return False
        if li == 0:
            return self._precomputed
        return self.groups is None and type(layer).aggregate is DynamicLayer.aggregate

    def _aggregate_phases(self, li: int, h: torch.Tensor | None,
                          head: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_aggregate` before the horizon (autograd) and after (none); one gather for both.

        ``head``: the first :attr:`head_rows` rows of ``h`` as autograd knows them.
        """
        k = self.head_rows
        if li == 0:
            return self.ax0[:k], self.ax0[k:]
        head_op, tail_op, square = self._phase_ops
        full = halo_graph(self.adj, self.halo, self.stale, li).gather(h)
        ax_head = spmm(head_op, head if square else full)
        with torch.no_grad():
            ax_tail = csr_mm(tail_op, full)
        return ax_head, ax_tail

    def report(self, epoch: int, train_loss: float) -> dict:
        """With ``stale`` on: feed the loss to the threshold and report the rows reused and bytes saved."""
        return {} if self.stale is None else self.stale.end_epoch(train_loss)

    def _engine_bytes(self) -> int:
        """My rows of Ã (and transpose), the first layer's input, and the horizon split's extra."""
        extra = 0
        if self._phase_ops is not None:
            head, tail, square = self._phase_ops
            extra = tail.crow_indices().numel() * tail.crow_indices().element_size()
            if not square:
                extra += csr_nbytes(head.a_t)
        return self.adj.nbytes + self.ax0.numel() * self.ax0.element_size() + extra

    def state_dict(self) -> dict:
        """The stale-aggregation caches (D3), so a resumed run reuses the same rows."""
        return {} if self.stale is None else {"stale": self.stale.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        if self.stale is None:
            super().load_state_dict(state)
            return
        self.stale.load_state_dict(state.get("stale"))


class HaloLayout(RowLayout):
    """A rank's time-major rows whose snapshot-local transform runs snapshot-parallel.

    Equal k rows per snapshot: ``spatial_steps`` over (S, k, F); else without per-step parameters one
    row-wise ``spatial`` call; else snapshot by snapshot (:meth:`RowLayout.spatial`).
    """

    #: the strategy (set by the subclass)
    s: HaloStrategy

    def spatial(self, layer, li: int, h: torch.Tensor | None, tparams) -> torch.Tensor:
        """Layer ``li``'s aggregation and transform of this rank's rows."""
        sizes = {k for _, k in self.segments}
        even = len(sizes) == 1 and len(self.segments) == self._steps
        if not self.segments or not (even or tparams is None):
            return super().spatial(layer, li, h, tparams)
        if self.s.splits_aggregation(layer, li) and (even or not self.stacked):
            return self._phases(layer, li, h, tparams, sizes.pop() if even else None)
        ax = self._aggregate(layer, li, None if h is None else h.reshape(-1, h.shape[-1]))
        if even:
            k = sizes.pop()
            y = layer.spatial_steps(ax.view(self._steps, k, ax.shape[-1]), [t for t, _ in self.segments], tparams)
            return y if self.stacked else y.reshape(-1, y.shape[-1])
        y = layer.spatial(ax, -1, None)
        return y.view(self._steps, -1, y.shape[-1]) if self.stacked else y

    def pool_input(self, li: int, h: torch.Tensor | None) -> tuple[torch.Tensor, np.ndarray, int, Any]:
        """My rows of layer ``li``'s input (X for layer 0), time-major as :attr:`HaloStrategy.row_keys` lists them."""
        s = self.s
        if li == 0 and s._precomputed:
            raise RuntimeError("a pooling first layer reads X_t, which a precomputed Ã·X has replaced")
        x = s.ax0 if li == 0 else h
        return x.reshape(-1, x.shape[-1]), s.row_keys, s.num_vertices, s.comm

    def _phases(self, layer, li: int, h: torch.Tensor | None, tparams, k: int | None) -> torch.Tensor:
        """:meth:`spatial` in two phases, autograd only up to the horizon (``k``: rows per snapshot, or None)."""
        s, rows = self.s, self.s.head_rows
        steps = [t for t, _ in self.segments]
        head_steps = sum(t < s.grad_steps for t in steps)
        head_in = None
        if h is not None:
            head_in = phase_head(h, head_steps if self.stacked else rows)
            h, head_in = h.reshape(-1, h.shape[-1]), head_in.reshape(-1, h.shape[-1])
        ax_head, ax_tail = s._aggregate_phases(li, h, head_in)
        width = layer.spatial_features

        def transform(ax: torch.Tensor, part: list[int], out: torch.Tensor | None = None) -> torch.Tensor:
            if k is None:
                return layer.spatial(ax, -1, None)
            x = ax.view(len(part), k, ax.shape[-1])
            y = layer.spatial_steps(x, part, tparams) if out is None else layer.spatial_steps(x, part, tparams, out=out)
            return y if self.stacked else y.view(-1, width)

        if k is not None and layer.writes_out:
            buf = ax_head.new_empty(len(steps), k, width)
            with torch.no_grad():
                transform(ax_tail, steps[head_steps:], buf[head_steps:])
            head = transform(ax_head, steps[:head_steps], buf[:head_steps])
            return phase_join_into(head, buf if self.stacked else buf.view(-1, width))
        head = transform(ax_head, steps[:head_steps])
        with torch.no_grad():
            tail = transform(ax_tail, steps[head_steps:])
        return phase_join(head, tail)
