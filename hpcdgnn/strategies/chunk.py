"""D1 partitioning by graph chunks (DGC §4), D2 chunk fusion (§5.1), D3 stale aggregation (§5.2).

Rank 0 builds the spatio-temporal super-graph, cuts it by size-capped label propagation and assigns chunks by Alg.
1 / Eq. 3 (:mod:`hpcdgnn.partition.chunks`); an inactive (v, t) goes to v's *RNN owner* (the rank owning most of
v's active appearances within a balanced share of time-encoder rows). Per layer, exactly: the GCN rows come from a
halo all-to-all as under :mod:`~hpcdgnn.strategies.vertex`, and an index all-to-all moves each appearance to v's
RNN owner and back (rows already there move nothing). Spatial fusion (D2, §5.1.1) aggregates groups of chunks under
``fusion_memory_mb``; ``sequences: active`` runs the time encoder over active appearances only, packed end to end
by temporal fusion (§5.1.2, Eq. 4–5). Stale aggregation (D3) applies to the GCN halo only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.comm.autograd import all_to_all_rows
from hpcdgnn.comm.device import memory_share
from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics.log import get_logger
from hpcdgnn.nn.conv.graph import RowGroups
from hpcdgnn.nn.layout import horizon_temporal, joined, moves_aggregation, phase_join
from hpcdgnn.nn.models.base import DGNN, time_mixing_layers
from hpcdgnn.nn.temporal_fusion import pack_sequences, pad_sequences
from hpcdgnn.partition.appearances import active_is_smaller, map_bytes_at_least
from hpcdgnn.partition.chunk_plan import plan_chunks
from hpcdgnn.partition.fusion import fuse_chunks, group_cost
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.strategies.base import Scored
from hpcdgnn.strategies.halo import HaloLayout, HaloStrategy, local_rows
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.tasks.base import ShardedEmbeddings

__all__ = ["ChunkStrategy", "IndexExchange"]


class IndexExchange:
    """A fixed all-to-all moving local rows to ``(dest, dest_row)`` and back, autograd-aware.

    Every destination row is written exactly once over all ranks; ``out_rows``: rows received here.
    """

    def __init__(self, comm, dest: np.ndarray, dest_row: np.ndarray, out_rows: int, tag: str) -> None:
        P = comm.size
        self.comm, self.tag, self.out_rows = comm, tag, out_rows
        #: one rank: a permutation, done as one gather each way (none for the identity)
        self._local: tuple[torch.Tensor | None, torch.Tensor | None] | None = None
        if P == 1 and dest.shape[0] == out_rows:
            rows = np.asarray(dest_row, dtype=np.int64)
            if np.array_equal(rows, np.arange(out_rows)):
                self._local = (None, None)
            elif np.array_equal(np.sort(rows), np.arange(out_rows)):
                inv = np.empty(out_rows, dtype=np.int64)
                inv[rows] = np.arange(out_rows)
                self._local = (torch.from_numpy(inv), torch.from_numpy(rows))
        order = np.lexsort((dest_row, dest))
        self.send_order = torch.from_numpy(order)
        self.send_rows = np.bincount(dest, minlength=P).tolist()
        rows = torch.from_numpy(dest_row[order].astype(np.int64)).view(-1, 1)
        self.recv_rows = comm.allgather_obj(self.send_rows, tag="setup")
        self.recv_rows = [self.recv_rows[p][comm.rank] for p in range(P)]
        self.recv_pos = comm.exchange.alltoallv(rows, self.send_rows, self.recv_rows, tag="setup").view(-1)
        self.n_local = dest.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(local rows, F) -> (out_rows, F) on the destinations."""
        if self._local is not None:
            index = self._local[0]
            return x if index is None else x.index_select(0, index.to(x.device))
        recv = all_to_all_rows(x.index_select(0, self.send_order.to(x.device)), self.comm, self.send_rows,
                               self.recv_rows, tag=self.tag)
        out = x.new_zeros(self.out_rows, x.shape[-1])
        return out.index_copy(0, self.recv_pos.to(x.device), recv)

    def reverse(self, y: torch.Tensor) -> torch.Tensor:
        """(out_rows, F) on the destinations -> (local rows, F) back where they came from."""
        if self._local is not None:
            index = self._local[1]
            return y if index is None else y.index_select(0, index.to(y.device))
        back = all_to_all_rows(y.index_select(0, self.recv_pos.to(y.device)), self.comm, self.recv_rows,
                               self.send_rows, tag=self.tag)
        out = y.new_zeros(self.n_local, y.shape[-1])
        return out.index_copy(0, self.send_order.to(y.device), back)


@dataclass
class _ActiveSequences:
    """Where each active appearance (t, r) of my RNN block sits in the packed lanes (step, lane)."""

    t: torch.Tensor
    r: torch.Tensor
    step: torch.Tensor
    lane: torch.Tensor
    mask: torch.Tensor | None  # None: padded lanes, no reset past step 0
    steps: int
    lanes: int


@register_strategy("chunk")
class ChunkStrategy(HaloStrategy):
    """Appearances (v, t) partitioned by DGC chunks; GCN halo and RNN-owner exchanges."""

    #: label propagation over every appearance (perf/results/planner)
    costly_plan = True

    @classmethod
    def make_plan(cls, manifest, num_ranks, job) -> PartitionPlan:
        """Chunks by label propagation, assigned by Alg. 1, after checking the model fits ``sequences``."""
        if job.strategy.sequences == "active":
            m = job.model
            mixing = time_mixing_layers(m)
            if not mixing or any(layer.rnn() is None for layer in mixing):
                raise ConfigError(
                    "strategy.sequences: active needs a model whose time encoder is a GRU or LSTM "
                    f"(tgcn, cdgcn, mpnn_lstm); model.name is {m.name!r}"
                )
        return plan_chunks(manifest, num_ranks, job)

    @classmethod
    def footprint(cls, job, manifest, num_ranks: int) -> dict[str, tuple[int, str]]:
        """The appearance map every rank holds whole, whatever P (:func:`map_bytes_at_least`): O(T·N) as tables,
        O(A) from the active appearances; ``strategy.lookup`` named where the other form is the smaller (``active``
        asked for where most appearances are active holds ~3x the tables). ``A`` is the manifest's count, the plan's
        at least (smoothed data: more)."""
        T, N, A = manifest.num_snapshots, manifest.num_vertices, sum(manifest.snapshot_active)
        form, nbytes = map_bytes_at_least(T, N, num_ranks, A, job.strategy.lookup)
        smaller = active_is_smaller(T, N, A)
        keys = ("strategy.lookup (active holds less)" if form == "table" and smaller else
                "strategy.lookup (table holds less)" if form == "active" and not smaller else
                "strategy.name (every rank holds the chunk plan's map of T·N appearances; grid computes it)")
        if form == "active" and job.strategy.lookup == "auto" and manifest.smoothed:
            # A counts the raw edges' endpoints; a smoothed A_t (edge_life, mtransform_window) keeps older edges
            # too, so the plan may have more active appearances and auto make the tables: the smaller bound
            nbytes = min(nbytes, map_bytes_at_least(T, N, num_ranks, A, "table")[1])
        return {"appearance map": (nbytes, keys)}

    @classmethod
    def smaller(cls, opts, manifest) -> list:
        """``lookup: active`` where the appearance map from the active appearances (the manifest's per-snapshot
        counts) holds fewer bytes than the tables ``opts`` may keep."""
        import dataclasses

        if getattr(opts, "lookup", "active") == "active" or not active_is_smaller(
                manifest.num_snapshots, manifest.num_vertices, sum(manifest.snapshot_active)):
            return []
        return [dataclasses.replace(opts, lookup="active")]

    @classmethod
    def cost(cls, plan: PartitionPlan, job, manifest, graph, work) -> list:
        """The planner's per-rank work and traffic under ``plan`` (:func:`chunk_cost`)."""
        return chunk_cost(plan, job, manifest, graph)

    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """Read my appearances' rows of Ã (only those); fix the three index exchanges."""
        comm, P, me = self.comm, self.comm.size, self.comm.rank
        dev = self.ctx.device
        T, N = plan.num_snapshots, plan.num_vertices
        c = plan.chunks
        rnn_owner, where = c.rnn_owner, c.appearances
        self._appearances = where
        mine = where.keys_of(me)
        n = mine.shape[0]
        self.T, self.N, self.n = T, N, n
        t_of, v_of = mine // N, mine % N
        b = self._t_bounds = np.searchsorted(t_of, np.arange(T + 1))
        owned = self._setup_halo(reader, T, N, lambda t: v_of[b[t] : b[t + 1]], where.owner_of, where.local_of, n,
                                 model, plan.horizon)
        # kept until the first epoch, to re-group under a resumed run's cap (load_state_dict)
        self._fuse_args = (where.label_of(mine), owned.row.numpy(), model)
        self.groups = self._fuse(*self._fuse_args)

        rpos = local_rows(rnn_owner, P)
        R_of = np.bincount(rnn_owner, minlength=P)
        self.R = int(R_of[me])
        dest = rnn_owner[v_of]
        self.to_rnn = IndexExchange(comm, dest, t_of * R_of[dest] + rpos[v_of], T * self.R, "rnn")
        #: the first layer's constant Ã·X on the RNN owner, once moved
        self._ax0_rnn: torch.Tensor | None = None
        self._seq = self._sequences(where.active_rnn(me), dev)
        self.num_layers = len(model.layers)
        if self._task_rows(mine, N, where.owner_of, where.local_of) is not None:
            return Scored(rows=self.shard)
        # else snapshot t on rank t mod P, all N rows in vertex order
        self.scored = plan.snapshots_of(me)
        slot_of_t = np.zeros(T, dtype=np.int64)
        for p in range(P):
            for j, t in enumerate(plan.snapshots_of(p)):
                slot_of_t[t] = j
        self.to_task = IndexExchange(comm, t_of % P, slot_of_t[t_of] * N + v_of, len(self.scored) * N, "redistribute")
        return Scored(snapshots=tuple(self.scored))

    def _sequences(self, active: np.ndarray, dev: torch.device) -> _ActiveSequences | None:
        """My RNN vertices' active appearances, packed (DGC §5.1.2) or padded; None with ``sequences: all``."""
        cfg = self.ctx.job.strategy
        if cfg.sequences == "all":
            self._time_slots = np.zeros(2)
            return None
        r_of, t_of = np.nonzero(active.T)
        lengths = active.sum(0)
        lengths = lengths[lengths > 0]
        packing = (pack_sequences if cfg.fusion == "on" else pad_sequences)(lengths)
        step, lane = packing.index()
        #: time-encoder slots per layer: packed, and padded (DGC Fig. 9b)
        self._time_slots = np.array([packing.steps * packing.lanes, packing.steps * lengths.shape[0]])
        mask = packing.reset_mask()
        return _ActiveSequences(torch.from_numpy(t_of).to(dev), torch.from_numpy(r_of).to(dev), step.to(dev),
                                lane.to(dev), None if mask is None else mask.to(dev), packing.steps, packing.lanes)

    def ax0_on_rnn(self) -> torch.Tensor:
        """Layer 0's constant Ã·X as my RNN vertices' (T, R, F) block, moved once (collective) and kept."""
        if self._ax0_rnn is None:
            with torch.no_grad():
                self._ax0_rnn = self.to_rnn.forward(self.ax0).view(self.T, self.R, self.ax0.shape[-1]).clone()
        return self._ax0_rnn

    def _time_encoder(self, layer, yr: torch.Tensor) -> torch.Tensor:
        """Layer's RNN over my vertices' (T, R, F) block: every step, or only the active ones."""
        s = self._seq
        if s is None:
            return horizon_temporal(layer, yr, None, self.grad_steps)[0]
        x = yr.new_zeros(s.steps, s.lanes, yr.shape[-1]).index_put((s.step, s.lane), yr[s.t, s.r])
        out = layer.packed_temporal(x, s.mask)
        z = out.new_zeros(yr.shape[0], yr.shape[1], layer.out_features).index_put((s.t, s.r), out[s.step, s.lane])
        return joined(z, yr)  # a rank with no active sequence still runs the exchange's backward

    def _fuse(self, chunk: np.ndarray, row: np.ndarray, model: DGNN, cap_mb: float | None = None) -> RowGroups | None:
        """Group my chunks for the GCN aggregation under the memory cap (DGC §5.1.1), or one per chunk.

        ``cap_mb``: a resumed run's cap; None asks every rank (collective) and takes the minimum.
        Returns None when all fuse into one group, which equals the plain product over my rows of Ã.
        """
        cfg = self.ctx.job.strategy
        labels, per_chunk = np.unique(chunk, return_inverse=True)
        per_chunk = per_chunk.reshape(-1)
        col = self.halo.columns
        group = per_chunk
        # ``auto`` asks the device: a collective, so every rank asks, rows or none
        if cap_mb is None:
            cap = float(memory_share(self.comm, self.ctx.device) if cfg.fusion_memory_mb == "auto"
                        else cfg.fusion_memory_mb * 2**20)
            cap_mb = float(self.comm.allreduce_array([cap / 2**20], op="min", tag="setup")[0])
        #: the smallest cap of any rank, MiB, for the metrics
        self._cap_mb = cap_mb
        cap = cap_mb * 2**20
        if cfg.fusion == "on" and per_chunk.shape[0]:
            width = max(max(layer.in_features, layer.spatial_features) for layer in model.layers)
            cost = group_cost(per_chunk, row, col, width, torch.empty((), dtype=self.ctx.dtype).element_size())
            group = fuse_chunks(per_chunk, row, col, cost, cap)
        unfused = RowGroups.rows_read(per_chunk, row, col)
        one = group.shape[0] > 0 and bool((group == group[0]).all())
        # one group reading every column is the plain product: counted, not built
        loaded = RowGroups.rows_read(group, row, col) if one else -1
        groups = None if one and loaded == self.adj.a.shape[1] else RowGroups(self.adj, group)
        #: chunks (not counting inactive ones), fused groups, rows read fused and chunk by chunk
        self._fusion_stats = np.array([int((labels >= 0).sum()), 1 if groups is None else len(groups),
                                       loaded if groups is None else groups.loaded_rows, unfused])
        return groups

    def state_dict(self) -> dict:
        """The halo's state and the fusion cap, so a resume keeps the groups (hence summation order)."""
        return {**super().state_dict(), "fusion_cap_mb": self._cap_mb}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`, re-grouping under the saved cap where it differs."""
        state = dict(state)
        cap_mb = state.pop("fusion_cap_mb", None)
        if cap_mb is not None and cap_mb != self._cap_mb and self.ctx.job.strategy.fusion == "on":
            if self.comm.rank == 0:
                get_logger().info(f"fusion: regrouped under the checkpoint's cap, {cap_mb:.3f} MiB "
                                  f"(this node's: {self._cap_mb:.3f} MiB)")
            self.groups = self._fuse(*self._fuse_args, cap_mb=cap_mb)
        super().load_state_dict(state)

    def report(self, epoch: int, train_loss: float) -> dict:
        """Fusion's effect (all ranks), and with ``stale`` on: θ, rows reused and bytes saved."""
        self._fuse_args = None
        stats = self.comm.allreduce_array(np.concatenate([self._fusion_stats, self._time_slots]), tag="metrics")
        chunks, groups, loaded, unfused, slots, padded = (int(x) for x in stats)
        out = {"fusion": {"chunks": chunks, "groups": groups, "rows_loaded": loaded, "rows_loaded_unfused": unfused,
                          "cap_mb": round(self._cap_mb, 3)}}
        if self._seq is not None:
            out["fusion"].update(time_slots=slots, time_slots_padded=padded)
        return {**out, **super().report(epoch, train_loss)}

    def _host_bytes(self) -> int:
        """The appearance map every rank holds to name any row's rank (``strategy.lookup``)."""
        return self._appearances.nbytes()

    def _engine_bytes(self) -> int:
        """My Ã rows (and transpose), fused groups and the first layer's input."""
        return super()._engine_bytes() + (0 if self.groups is None else self.groups.nbytes)

    def layout(self) -> ChunkLayout:
        """The whole timeline: my appearances' rows."""
        return ChunkLayout(self)


class ChunkLayout(HaloLayout):
    """D1: my appearances' rows, time-major; GCN with the halo (fused groups), RNN at the RNN owners."""

    def __init__(self, s: ChunkStrategy) -> None:
        b = s._t_bounds
        super().__init__(0, s.T, s.num_layers, [(t, int(b[t + 1] - b[t])) for t in range(s.T)], s._aggregate)
        self.s = s
        #: layers whose aggregation moves to the RNN owners, their transform run there
        self._moved: set[int] = set()

    def spatial(self, layer, li: int, h: torch.Tensor | None, tparams) -> torch.Tensor:
        """As :class:`HaloLayout`, or only the aggregation where the RNN owner runs the transform."""
        if not moves_aggregation(layer, li, tparams, self.s._precomputed):
            return super().spatial(layer, li, h, tparams)
        self._moved.add(li)
        return self._aggregate(layer, li, None if h is None else h.reshape(-1, h.shape[-1]))

    def to_temporal(self, y: torch.Tensor, li: int) -> torch.Tensor:
        """Appearance rows -> (T, R, F) timelines of my RNN vertices (index all-to-all)."""
        if li == 0 and li in self._moved and self.s._precomputed:
            return self.s.ax0_on_rnn()
        return self.s.to_rnn.forward(y).view(self.s.T, self.s.R, y.shape[-1])

    def encode(self, layer, li: int, y: torch.Tensor, state):
        """The time encoder over every step, or only the active ones; after the transform if it moved.

        Every step: the steps before the training horizon apart (a copy) and those after it without autograd,
        joined as phases, so that what the transform and the time encoder save is the head's rows only (a
        slice would keep the whole (T, R, F) block alive until the backward)."""
        k, moved = self.s.grad_steps, li in self._moved
        if self.s._seq is None and torch.is_grad_enabled() and 0 < k < y.shape[0]:
            head = y[:k].clone()
            with torch.no_grad():  # past the horizon no step gets a gradient (as horizon_temporal runs them)
                tail = layer.spatial_steps(y[k:], [], None) if moved else y[k:]
            y = phase_join(layer.spatial_steps(head, [], None) if moved else head, tail)
            del head, tail  # the joined copy is what the encoder reads: a view kept here would hold the block
        elif moved:
            y = layer.spatial_steps(y, [], None)
        return self.s._time_encoder(layer, y), None

    def to_spatial(self, z: torch.Tensor, li: int) -> torch.Tensor:
        """Back to the appearance owners."""
        return self.s.to_rnn.reverse(z.reshape(self.s.T * self.s.R, z.shape[-1]))

    def output(self, h: torch.Tensor) -> dict[int, torch.Tensor] | ShardedEmbeddings:
        """My rows, for a task that scores in place; else whole snapshots (t on rank t mod P)."""
        s = self.s
        if s.shard is not None:
            self.last = h
            return s._in_place(h)
        z = s.to_task.forward(h.reshape(-1, h.shape[-1])).view(len(s.scored), s.N, h.shape[-1])
        self.last = z
        # unbind once: z[j] would make each backward zero-fill a full (scored, N, F) buffer
        return dict(zip(s.scored, z.unbind(0), strict=True))


def chunk_cost(plan: PartitionPlan, job, manifest, graph) -> list:
    """Per-rank work and traffic of one steady epoch under a chunk plan (:mod:`hpcdgnn.planner.cost`).

    The GCN's halo as under ``vertex``, with appearance (t, v) on its chunk's rank (an inactive one on v's RNN
    owner); per time-mixing layer, each appearance not on v's RNN owner moves there and back (``rnn``), its
    gradients the same rows back (DGC §4). A moved first-layer aggregation (constant Ã·X) goes once. The time
    encoder runs over all T steps of the RNN owner's vertices (``sequences: active`` packs fewer)."""
    from hpcdgnn.nn.layout import moves_aggregation
    from hpcdgnn.nn.models import meta_layers
    from hpcdgnn.planner.cost import RankWork, add, adjacency_bytes, halo_counts, halo_traffic, pool_traffic
    from hpcdgnn.regimes.base import item_bytes

    P, T, F = plan.num_ranks, plan.num_snapshots, manifest.num_features
    layers = meta_layers(job.model, F)
    item = item_bytes(job)
    c = plan.chunks
    N, where = plan.num_vertices, c.appearances
    # a snapshot's owners at a time, looked up in the map as a rank does: the (T, N) table is never built
    reads, serves, nnz = halo_counts(graph, lambda t, v: where.owner_of(t * N + v), P)
    precomputed = layers[0].precomputable
    causal = all(ly.causal for ly in layers)
    grad_steps = min(T, plan.horizon + 1) if causal else T
    mixing = any(ly.temporal_mixing for ly in layers)
    R = np.bincount(c.rnn_owner, minlength=P)
    # appearances each rank holds for another rank's RNN vertices: sent there, and received back
    out_rows, in_rows = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
    scored = np.zeros((P, T), dtype=np.int64)
    every = np.arange(N, dtype=np.int64)
    for t in range(T):
        owner = where.owner_of(t * N + every)
        away = owner != c.rnn_owner
        scored[:, t] = np.bincount(owner, minlength=P)
        out_rows += np.bincount(owner[away], minlength=P)
        in_rows += np.bincount(c.rnn_owner[away], minlength=P)
    rows, head = scored.sum(axis=1), scored[:, :grad_steps].sum(axis=1)
    scored = scored.astype(np.float64)
    ranks = []
    for q in range(P):
        r = RankWork(spatial_rows=rows[q], spatial_steps=T, spatial_nnz=nnz[q], spatial_saved_rows=head[q],
                     temporal_rows=T * R[q] if mixing else 0.0, temporal_steps=T if mixing else 0.0,
                     temporal_saved_rows=grad_steps * R[q] if mixing else 0.0,
                     scored_rows=scored[q])
        r.resident_bytes = adjacency_bytes(rows[q], nnz[q], item) + rows[q] * F * item
        r.host_bytes = float(c.appearances.nbytes())  # the same map on every rank
        ranks.append(r)
    pool_traffic(layers, T, P, item, ranks)
    halo_traffic(layers, reads, serves, precomputed, item, ranks)
    if P > 1:
        for li, ly in enumerate(layers):
            if not ly.temporal_mixing:
                continue
            moved = moves_aggregation(ly, li, None, precomputed)
            w_in = ly.in_features if moved else ly.spatial_features
            kept = li == 0 and moved and precomputed
            for q in range(P):
                if kept:
                    ranks[q].resident_bytes += T * R[q] * w_in * item
                else:
                    add(ranks[q].sent, "rnn.fwd", out_rows[q] * w_in * item)
                    add(ranks[q].sent, "rnn.bwd", in_rows[q] * w_in * item)
                add(ranks[q].sent, "rnn.fwd", in_rows[q] * ly.out_features * item)
                add(ranks[q].sent, "rnn.bwd", out_rows[q] * ly.out_features * item)
                add(ranks[q].calls, "alltoall", 2 if kept else 4)
    return ranks
