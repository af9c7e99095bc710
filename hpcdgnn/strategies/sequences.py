"""R1 + R4: sample-based data-parallel training over sliding-window sequences (ReInc §3.4, SPEC Family B).

**Samples** (ReInc §3.4.2). A *sequence* is a window of L = ``strategy.window``
consecutive snapshots, starting every ``stride`` snapshots; the task scores its
last step t (link prediction: the edges of t + 1; node tasks: the targets of t),
so a sequence belongs to the split of t. A *sample* is one sequence × one node
batch: the computational graph of the batch's vertices in each of the L
snapshots, layer by layer from the top — the rows a layer must output, and the
neighbours they read in each snapshot (all of them, or ``fanouts`` sampled
without replacement per vertex and step, nearest the batch first, weighted
|N(v)| / k so the aggregation stays unbiased; the self-loop always). A vertex
in a layer's rows is computed in every step of the window, so the time encoder
of every layer runs over whole sequences of its rows, locally: no activation
ever moves (ReInc's point against redistribution, §2.2).

**Mini-batches** (R4, §3.4.3). Node batches are ``batch_vertices`` vertices of
a permutation seeded by (seed, epoch) — link prediction scores the pairs whose
source is in the batch. The epoch's samples are ordered *seq-first* (every
training sequence for a node batch, then the next batch; ReInc's order, which
keeps a batch's aggregations hot) or *node-first*, and ``batch_samples`` of them
in that order form one optimizer step. Which samples form the g-th global
mini-batch and which neighbours they sample depend only on the seed, the epoch
and g, never on P; each rank runs the samples of its own sequences, the loss is
the sum over the global batch divided by its example count (one all-reduce of
a number per step), and the gradients are all-reduced as sums — so P ranks
reproduce one rank's losses (tested at P = 3).

**Placement** (R1, §3.4.1). Rank r owns a contiguous block of sequences
(balanced by count) and so a consecutive block of snapshots. With ``overlap``
it reads the window - 1 snapshots after its block too, so every sequence is
local and only gradients move; with ``fetch`` it reads only its block and
pulls the missing snapshots (their normalised Ã and X) from their owners once
per epoch, counted under ``placement.fetch``.

**Reuse** (R3, ReInc §3.1, §3.3; :mod:`hpcdgnn.nn.reuse_cache`), with ``reuse: on``. What is shared and
why it is exact:

* *Across overlapping sequences* (and node batches, splits and epochs): when layer 0 aggregates X over
  full neighbourhoods (its fanout 0; a layer whose aggregation has no parameters) the value Ã_t·X_t
  depends on snapshot t alone — no parameter, window, batch or epoch — so one entry per snapshot, key
  ``("global", 0, t, "all")``, serves every sample that reads t (each reads its rows). R2 fills the
  cache at setup (Eq. 2, or from scratch); it holds at most ``cache_mb`` per rank, evicting by Eq. 3
  (F and I from this rank's reads this epoch and the next, which the strategy knows: every sample
  reads each step of its window, in the order of :meth:`batches` then :meth:`evaluate`) or by LRU; a
  miss computes Ã_t·X_t from scratch (Eq. 1) — of every vertex when the policy admits it, else only
  the rows the sample needs — and, when the cache still holds Agg_{t−1} and R2 was built over t − 1 and
  t (``incremental: on``), by Eq. 2 from that cached value (ReInc §3.3.1: "During the incremental
  computation of Agg_t, ReInc gets cached aggregation Agg_{t−1} from the global cache"; a read outside
  the plan, :meth:`~hpcdgnn.nn.reuse_cache.ReuseCache.peek`), falling back to from scratch above
  ``incremental_threshold``. The values carry no gradient (X has none), so reading them changes no
  autograd graph. With ``reuse: off`` every sample aggregates X over its own block (the fanout-0
  block is Ã_t's rows) as a framework without reuse does: the same products, so the same losses up to
  the rounding of Eq. 2 (tested at rtol 1e-12). ``metrics.jsonl`` reports the cache per epoch under
  ``reuse`` (summed over ranks).
* *Graph-recurrent cells' input basis* (global level): with full neighbourhoods (every fanout 0) the
  first cell's input part is the basis of X_t over snapshot t's operator (Chebyshev T_k(L̂_t)·X_t, or
  the diffusion powers), again a value of snapshot t alone: key ``("global", 0, t, ("basis", cell, K))``,
  computed for every vertex over the whole snapshot on its first read (no R2: the basis is not one of
  Eq. 2's sum / mean / GCN aggregations) and read by every sample at its rows U. A row whose outputs the
  sample needs has its whole neighbourhood in U (*Graph-recurrent cells* in
  :mod:`~hpcdgnn.strategies.sampling`), so its row of the whole-snapshot basis is the one the sample
  computes without reuse; the other rows of U are read by none
  of those. With sampled fanouts the cells run on the subgraph U induces, whose basis differs
  from the whole snapshot's at the rows the sampled rows read: nothing is shared then.
* *Encoder ↔ decoder* (ReInc §3.1, ``model.decoder_input: snapshots``): a teacher-forced decoder step d
  reads snapshot t + d — X_{t+d} on G_{t+d}, through the encoder's first filter
  (:mod:`~hpcdgnn.nn.models.encoder_decoder`) — so its input basis is the entry a later window's encoder
  reads for t + d, and decoder step 0 reads X_t, the entry this window's encoder has just read. Both
  parts read and make entries through the same cache; who made an entry and who hit it is counted
  (``decoder_to_encoder_hits``, ``encoder_to_decoder_hits``). The plan holds the decoder's reads too
  (teacher forcing is drawn from the seed, epoch, sequence and node batch, so the strategy knows every
  draw in advance), after the window's, in the order a sample makes them; F and I of Eq. 3 are read
  off it — exact for any window, stride, horizon, order and draw, which ReInc's closed forms
  (F = max(1, 2·idx − 2S + 1)·K − g, …, for one schedule) are not meant to be. Teacher forcing reads
  snapshots up to t + H − 1 ≤ T − 1 (regression steps end at T − H), which ``overlap`` placement reads
  and ``fetch`` pulls with the window's.
* *Not shared*: a sampled first layer (fanout > 0) draws its neighbours per window (the sampler is
  seeded by epoch, sequence and node batch), so no two windows aggregate the same thing; attention
  (DySAT) has parameters. Hidden layers' aggregations depend on the parameters and on the window's
  start (every window restarts the time encoder), and each sample runs its backward before the next:
  none is reused across samples or optimizer steps; within a sample every layer aggregates each step
  once (one block-diagonal product over the window). R2 does not apply to them either: a hidden
  layer's features change with every step (and every parameter update), so Eq. 2's delta is the whole
  matrix — ReInc §3.1 applies cross-sequence reuse to inputs only.
* *Across gates* (local level, ReInc §3.3.2): the integrated cells
  (:class:`~hpcdgnn.nn.models.base.GraphRecurrentLayer`) compute one basis of X_t for all gates and one
  basis of H_{t-1} per step for all gates that read it (GConvGRU and DCRNN need a second, of
  R_t ⊙ H_{t-1}, as their equations do), here as under every strategy. Under ``reuse: on`` each state
  aggregation is reported to the cache's local level as one miss and K − 1 hits (K: the gates that
  read it; F = K − g, I = 0 in ReInc §3.3.3) — a counter on this structural reuse
  (:func:`~hpcdgnn.nn.reuse_cache.count_shared`): the gates read the basis in one fused GEMM, so
  nothing is stored and the local level takes no capacity from the global one.

**Computational graphs** (:mod:`hpcdgnn.strategies.sampling`): which rows each layer of a sample computes
and which neighbours they read, sampled or not; for graph-recurrent cells the closure of their receptive
field over the window. The strategy inherits the sampler (:class:`~hpcdgnn.strategies.sampling.SampleGraphs`),
and :class:`~hpcdgnn.strategies.sample_layout.SampleLayout` runs the model over one sample.

Evaluation (validation and test sequences, every node batch, no gradient)
is a pass of its own after the epoch's steps (:meth:`evaluate`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.comm.communicator import payload_bytes
from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics.log import get_logger
from hpcdgnn.nn.conv.gcn import gcn_norm
from hpcdgnn.nn.conv.incremental import IncrementalAggregator
from hpcdgnn.nn.layout import StepGraph
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.nn.models.encoder_decoder import EncoderDecoder
from hpcdgnn.nn.reuse_cache import ReuseCache, hit_rate, local_level
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.partition.sequences import Sequence, plan_sequences, sequences_of
from hpcdgnn.strategies.base import SampleBatch, Scored, Strategy
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.strategies.sample_layout import SampleLayout
from hpcdgnn.strategies.sampling import RowsStepGraph, SampleGraphs, _expand
from hpcdgnn.tasks.base import SampleEmbeddings

__all__ = ["RowsStepGraph", "SequencesStrategy", "SampleLayout", "sequences_of"]


@dataclass
class _HostSnapshot:
    """Ã_t (IBM Eq. 1, self-loops added) as CSR in float64 and X_t, on the host; for graph-recurrent cells
    also A_t as read (``raw``: indptr, indices, weights) and, once built, its whole-snapshot step graph."""

    crow: np.ndarray
    col: np.ndarray
    val: np.ndarray
    x: torch.Tensor
    raw: tuple | None = None
    graph: StepGraph | None = None

    @property
    def nbytes(self) -> int:
        return payload_bytes((self.crow, self.col, self.val, self.x, self.raw))  # what placement: fetch sends


class _KnownProduct:
    """An R2 row adjacency M_{t-1} whose product with X_{t-1} is already known (a cached Agg_{t-1} without
    its row scale): :meth:`IncrementalAggregator.aggregate
    <hpcdgnn.nn.conv.incremental.IncrementalAggregator.aggregate>` computes its first step as ``spmm``, so
    over the pair (M_{t-1} as this, M_t) it runs its own Eq. 2 step t from the cached value (ReInc §3.3.1),
    with the same feature deltas, per-row choice, threshold fallback and statistics — nothing of Eq. 2 is
    written twice. Every other attribute is M_{t-1}'s."""

    def __init__(self, adj, product: torch.Tensor) -> None:
        self._adj, self._product = adj, product

    def spmm(self, x: torch.Tensor) -> torch.Tensor:
        """The known product (``x`` is X_{t-1}, whose product it is)."""
        return self._product

    def __getattr__(self, name: str):
        return getattr(self._adj, name)


@register_strategy("sequences")
class SequencesStrategy(SampleGraphs, Strategy[SampleBatch]):
    """Sliding-window sequences × node batches, one model replica per rank (see the module docstring); each
    sample's computational graph from the sampler it derives from (:class:`SampleGraphs`)."""

    @classmethod
    def step_graphs_at(cls, num_ranks: int) -> bool:
        """Graph-recurrent cells run at any P: each sample's time encoder gets every step's graph among the
        rows its receptive field needs (:mod:`~hpcdgnn.strategies.sampling`, *Graph-recurrent cells*)."""
        return True

    @classmethod
    def make_plan(cls, manifest, num_ranks: int, job) -> PartitionPlan:
        """Consecutive blocks of sequences per rank (R1), and the snapshots each holds
        (:func:`hpcdgnn.partition.sequences.plan_sequences`)."""
        return plan_sequences(manifest, num_ranks, job)

    # -- setup --------------------------------------------------------------------------------------
    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """Read the snapshots of my sequences (``overlap``) or of my block (``fetch``); normalise them."""
        o, job, me = self.ctx.job.strategy, self.ctx.job, self.comm.rank
        recurrent = [bool(getattr(layer, "graph_recurrent", False)) for layer in model.layers]
        if any(recurrent) and not all(recurrent):
            raise ConfigError(f"model.name: {job.model.name} mixes graph-recurrent cells with other layers, "
                              "which strategy.name: sequences cannot sample; use pss")
        #: graph-recurrent cells: each sample runs every layer over its receptive field's rows (:meth:`cell_rows`)
        self.cells = all(recurrent)
        self.encoder = list(model.layers)
        self.decoder = list(model.decoder) if isinstance(model, EncoderDecoder) else None
        self.horizon = model.horizon if isinstance(model, EncoderDecoder) else 0
        self._targets: dict[int, torch.Tensor] = {}
        self.plan, self.N, self.opts = plan, plan.num_vertices, o
        self.num_layers = len(model.layers)
        self.seqs = sequences_of(self.ctx.manifest, job)
        a, b = plan.ranks[me]["sequences"]
        self.mine = self.seqs[a:b]
        self._mine_ids = set(range(a, b))
        self._own = plan.snapshot_bounds
        lo, hi = plan.ranks[me]["window_snapshots"]
        # every rank's needed range, for fetch: (lo, hi) per rank
        self._reads = [tuple(r["window_snapshots"]) for r in plan.ranks]
        self.host: dict[int, _HostSnapshot] = {}
        # overlap: my windows' snapshots; fetch: my block (others' windows may need it), not those after it
        read_lo, read_hi = (lo, hi) if o.placement == "overlap" else (self._own[me], self._own[me + 1])
        raw = []
        for t in range(read_lo, read_hi):
            self.host[t], snap = self._read(reader, t)
            if self.cells:  # their operators (L̂_t, P_f, P_b) are built from A_t, not from Ã_t
                self.host[t].raw = (snap.indptr, snap.indices, snap.weights)
            raw.append(snap)
        self._fetched: dict[int, _HostSnapshot] = {}
        #: (fanout per layer, input layer first): the PyG order of the option reversed; 0 = every neighbour
        self.fanout = (list(o.fanouts) or [0] * self.num_layers)[::-1]
        #: R3: layer 0 aggregates X over full neighbourhoods, a constant Ã_t·X_t (SPEC S4) that every sample
        #: reading snapshot t shares; with ``reuse: on`` samples read its rows from the reuse cache
        self.reads_ax = bool(model.layers[0].precomputable and self.fanout[0] == 0 and o.reuse == "on")
        #: R3 for graph-recurrent cells: with full neighbourhoods the first cell's input basis of X_t over
        #: snapshot t's operator is a value of t alone, which windows and the decoder's snapshot steps share
        self.reads_basis = bool(self.cells and not any(self.fanout) and o.reuse == "on")
        #: the decoder's snapshot form (ReInc §3.1): teacher-forced steps read X_{t+d} on G_{t+d}
        self.reads_snapshots = self.decoder is not None and job.model.decoder_input == "snapshots"
        self.cache: ReuseCache | None = None
        self._incremental: dict | None = None
        self._r2: tuple[int, IncrementalAggregator] | None = None  # (first snapshot, R2 over the held ones)
        self._fills = {"incremental": 0, "scratch": 0}  # whole-snapshot values computed after a miss, by how
        self._stream: list[tuple] = []
        self._entry_bytes = 0
        if self.reads_ax or self.reads_basis:
            F = raw[0].x.shape[1] if raw else self.ctx.manifest.num_features
            width = model.layers[0].w_x.shape[0] if self.reads_basis else F  # the basis: B·F columns
            self._entry_bytes = self.N * width * torch.empty(0, dtype=self.ctx.dtype).element_size()
            what = ("input basis (the first cell's convolution of X_t", "N × B·F") if self.reads_basis else \
                ("input aggregation Ã_t·X_t (", "N × F")
            if int(o.cache_mb * 2**20) < self._entry_bytes:  # the same on every rank: all of them stop
                raise ConfigError(f"strategy.cache_mb: {o.cache_mb:g} MiB cannot hold one snapshot's {what[0]}"
                                  f"{', ' if self.reads_basis else ''}{self._entry_bytes / 2**20:.4g} MiB, "
                                  f"{what[1]}), what every sample reads; raise it to at least that, or set "
                                  "strategy.reuse: off")
        if o.reuse == "on" and (self.reads_ax or self.cells):  # the cells' local level counts without either
            self.cache = ReuseCache(int(o.cache_mb * 2**20), o.cache_policy, unit_bytes=max(self._entry_bytes, 1))
            self._plan(self.ctx.start_epoch + 1)  # set-up's fills are admitted for the epoch that runs next
        if self.reads_ax:  # R2 fills it: Ã_t·X_t of every held snapshot (Eq. 2 or from scratch), as admitted
            for t, ax in self._precompute(list(range(read_lo, read_hi)), raw).items():
                self.cache.offer(self._input_key(t), ax, "setup")
        self._stat_width: int | None = None
        self.task = task  # counts each global batch's training examples (:meth:`batches`)
        return Scored(snapshots=tuple(sorted({s.t for s in self.mine})))

    def _read(self, reader, t: int):
        """Snapshot t as read (raw CSR) and on the host for sampling (:class:`_HostSnapshot`)."""
        snap = reader.read(t)
        a = gcn_norm(t, snap.indptr, snap.indices, snap.weights, torch.float64).a
        return _HostSnapshot(a.crow_indices().numpy(), a.col_indices().numpy(), a.values().numpy(),
                             torch.from_numpy(np.ascontiguousarray(snap.x)).to(self.ctx.dtype)), snap

    def _precompute(self, ts: list[int], raw: list) -> dict[int, torch.Tensor]:
        """Ã_t·X_t (N, F) of the consecutive snapshots ``ts`` (SPEC S4): incrementally (R2, ReInc Eq. 2)
        or each from scratch (``strategy.incremental``); the same values, in float64, then cast."""
        if not ts:
            return {}
        xs = [torch.from_numpy(np.ascontiguousarray(s.x)).to(torch.float64) for s in raw]
        if self.opts.incremental == "on":
            agg = IncrementalAggregator([(s.indptr, s.indices, s.weights) for s in raw], kind="gcn",
                                        threshold=self.opts.incremental_threshold, dtype=torch.float64)
            out, stats = agg.aggregate(xs)
            self._incremental = stats.as_dict()
            self._r2 = (ts[0], agg)  # kept: a later miss of Agg_t may start from a cached Agg_{t-1} (_fill_input)
        else:
            out = [torch.sparse.mm(gcn_norm(t, s.indptr, s.indices, s.weights, torch.float64).a, x)
                   for t, s, x in zip(ts, raw, xs, strict=True)]
        return {t: y.to(self.ctx.dtype) for t, y in zip(ts, out, strict=True)}

    # -- R3: the reuse cache ------------------------------------------------------------------------
    def _input_key(self, t: int) -> tuple:
        """The cache key of layer 0's input aggregation at snapshot t: global level (no parameters), layer 0,
        snapshot t, and what was aggregated — ``"all"`` for Ã_t·X_t of every vertex's full neighbourhood, or
        the first cell's basis (its kind and order: the encoder's and the decoder's first cells share it).
        The same value for every window, node batch, split, epoch and model part."""
        if not self.reads_basis:
            return ("global", 0, t, "all")
        cell = self.encoder[0]
        return ("global", 0, t, ("basis", type(cell).__name__, cell.order))

    def teacher_draws(self, epoch: int, seq: Sequence, b: int, train: bool) -> list[bool]:
        """Which decoder steps read the ground truth (teacher forcing, probability ``model.teacher_forcing``),
        drawn from (seed, epoch, sequence, node batch) — never from P; none at step 0 or in evaluation."""
        p = self.ctx.job.model.teacher_forcing
        if not train or p <= 0:
            return [False] * self.horizon
        draw = np.random.default_rng([self.ctx.job.train.seed, epoch, seq.index, b, 0x7EAC]).random(self.horizon)
        return [d > 0 and bool(draw[d] < p) for d in range(self.horizon)]

    def decoder_steps(self, epoch: int, seq: Sequence, b: int, train: bool) -> list[int | None]:
        """The snapshot each decoder step of a sample reads in the snapshot form (ReInc §3.1): t at step 0,
        t + d at a teacher-forced step d; None where the step reads its own prediction on G_t (every step of
        the ``targets`` form)."""
        if not self.reads_snapshots:
            return [None] * self.horizon
        teach = self.teacher_draws(epoch, seq, b, train)
        return [seq.t + d if d == 0 or teach[d] else None for d in range(self.horizon)]

    def _input_reads(self, epoch: int, seq: Sequence, b: int, train: bool) -> list[int]:
        """The snapshots whose input aggregation one sample reads, in the order it reads them: its window's
        (layer 0 of the encoder), then, in the snapshot form with cached bases, its decoder steps'."""
        reads = list(range(seq.start, seq.stop))
        if self.reads_basis and self.reads_snapshots:
            reads += [t for t in self.decoder_steps(epoch, seq, b, train) if t is not None]
        return reads

    def _access_stream(self, epoch: int) -> list[tuple]:
        """This rank's reads of input aggregations in one epoch, in order: each training sample of
        :meth:`batches` (then each of :meth:`evaluate`) reads those of :meth:`_input_reads`."""
        keys = []
        for split in (0, 1, 2):
            for seq, b in self._samples(epoch, split):
                if seq.index in self._mine_ids:
                    keys += [self._input_key(t) for t in self._input_reads(epoch, seq, b, split == 0)]
        return keys

    def _plan(self, epoch: int) -> None:
        """Tell the cache this epoch's reads, then the next epoch's — F and I of Eq. 3. They differ between
        epochs only through the decoder's teacher-forcing draws. The next epoch's reads count in the last
        epoch too: were an epoch's plan to depend on ``train.epochs``, the last epoch would empty the cache
        (every entry expires at its last read), and a run extended with ``--resume --set train.epochs=…``
        would continue from that empty cache where the longer straight run holds a full one."""
        if not (self.reads_ax or self.reads_basis):
            return
        self._stream = self._access_stream(epoch)
        self.cache.plan(self._stream, self._access_stream(epoch + 1))

    def _aggregate_input(self, t: int, rows: np.ndarray | None = None) -> torch.Tensor:
        """Ã_t·X_t from scratch (ReInc Eq. 1, float64, then cast) — of every vertex, or of ``rows`` only."""
        h = self.snapshot(t)
        n = h.crow.shape[0] - 1
        crow, col, val = h.crow, h.col, h.val
        if rows is not None:
            counts = h.crow[rows + 1] - h.crow[rows]
            e = _expand(h.crow[rows], counts)
            crow, col, val = np.concatenate([[0], np.cumsum(counts)]), h.col[e], h.val[e]
        a = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val),
                                    (crow.shape[0] - 1, n))
        return torch.sparse.mm(a, h.x.to(torch.float64)).to(self.ctx.dtype)

    def input_rows(self, t: int, rows: np.ndarray) -> torch.Tensor:
        """Rows ``rows`` of Ã_t·X_t: read from the reuse cache; on a miss Ã_t·X_t of every vertex is
        computed (:meth:`_fill_input`) and offered to it, or — when the policy would not admit it — only
        these rows, from scratch."""
        ax = self.cache.fetch(self._input_key(t), lambda: self._fill_input(t), self._entry_bytes)
        return self._aggregate_input(t, rows) if ax is None else ax.index_select(0, torch.from_numpy(rows))

    def _fill_input(self, t: int) -> torch.Tensor:
        """Ã_t·X_t of every vertex after a miss (module docstring, R3): by R2's Eq. 2 from the cached
        Agg_{t-1} when there is one and R2 was built over t - 1 and t (ReInc §3.3.1) — R2 itself falls back
        to from scratch above ``incremental_threshold`` — else from scratch. Counted per epoch."""
        prev = None
        if self._r2 is not None and self._r2[0] < t < self._r2[0] + len(self._r2[1]):
            prev = self.cache.peek(self._input_key(t - 1))
        if prev is None:
            self._fills["scratch"] += 1
            return self._aggregate_input(t)
        first, agg = self._r2
        i = t - first
        before = agg.adj[i - 1]
        known = prev.to(torch.float64)  # r_{t-1} ⊙ S_{t-1}: R2 carries S_{t-1} = M_{t-1}·X_{t-1}
        if before.scale is not None:
            known = known / before.scale.unsqueeze(1)
        pair = copy.copy(agg)  # R2's own step t over the pair (t-1, t), its step 0 the cached value
        pair.adj, pair.deltas = [_KnownProduct(before, known), agg.adj[i]], [agg.deltas[i - 1]]
        out, stats = pair.aggregate([self.snapshot(u).x.to(torch.float64) for u in (t - 1, t)])
        self._fills[stats.steps[1].mode] += 1  # "incremental", or "scratch" above the threshold
        return out[1].to(self.ctx.dtype)

    def input_basis(self, graph: RowsStepGraph, part: str) -> torch.Tensor:
        """The first cell's input basis of X_t at ``graph``'s rows (snapshot t among a sample's rows U), read
        by ``part`` (encoder or decoder) from the reuse cache: the rows of the whole snapshot's basis,
        computed for every vertex on a miss and offered; when the policy would not admit it, the basis over
        ``graph`` itself — what the sample computes without reuse, equal at every row its outputs read
        (module docstring, R3)."""
        cell, t, dtype = self.encoder[0], graph.t, self.ctx.dtype

        def basis(g: StepGraph, x: torch.Tensor) -> torch.Tensor:
            return cell.basis(cell.operator(g, dtype), x)

        def fill() -> torch.Tensor:  # a miss the cache will hold: the whole snapshot, from scratch
            self._fills["scratch"] += 1
            return basis(self.whole_graph(t), x)

        x = self.snapshot(t).x
        full = self.cache.fetch(self._input_key(t), fill, self._entry_bytes, part)
        idx = torch.from_numpy(graph.rows)
        if full is None:
            return basis(graph, x.index_select(0, idx).to(self.ctx.device))
        return full.index_select(0, idx).to(self.ctx.device)

    def state_dict(self) -> dict:
        """The reuse cache's entries (R3), with ``reuse: on``: the next epoch's hits, evictions and refill
        paths depend on them, so a run resumed with the cache that set-up fills would count other hits and
        round some refilled aggregations differently (measured: grad norms departing in the 9th digit)."""
        return {} if self.cache is None else {"reuse_cache": self.cache.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` after set-up. Without a saved cache (a resume on another rank count,
        whose ranks hold other sequences, or a checkpoint written before caches were saved) the cache stays
        as set-up filled it for the next epoch, and rank 0 says so: that resume is not bit for bit."""
        if self.cache is None:
            if state:
                raise ConfigError("--resume: the checkpoint holds a reuse cache, but this run has strategy.reuse "
                                  "off; resume with the run's own settings")
            return
        saved = state.get("reuse_cache") if state else None
        if saved is None:
            if self.comm.rank == 0:
                get_logger().info("reuse cache: the checkpoint holds none for this run (another rank count, or "
                                  "an older checkpoint); set-up's fills are used, so hits and refills may differ "
                                  "from the uninterrupted run's")
            return
        try:
            self.cache.load_state_dict(saved)
        except ValueError as e:
            raise ConfigError(f"--resume: strategy.cache_mb / cache_policy: {e}") from None

    def report(self, epoch: int, train_loss: float) -> dict:
        """R2's work at setup (all ranks): rows recomputed from scratch vs updated incrementally; R3's
        cache this epoch (all ranks): hits, misses, evictions, hit rate, bytes (:meth:`_reuse_report`)."""
        out = {"reuse": self._reuse_report()}
        if not self.reads_ax:
            return out
        mine = self._incremental or {}
        keys = ["rows_recomputed", "rows_updated", "rows_untouched", "fallbacks"]
        tot = self.comm.allreduce_array([float(mine.get(k, 0)) for k in keys], tag="metrics")
        inc = dict(zip(keys, (int(x) for x in tot), strict=True))
        rows = inc["rows_recomputed"] + inc["rows_updated"] + inc["rows_untouched"]
        inc["recomputed_fraction"] = inc["rows_recomputed"] / rows if rows else 0.0
        out["incremental"] = {"mode": self.opts.incremental, **inc}
        return out

    #: the ``reuse`` record's counters, summed over ranks (:meth:`_reuse_report`)
    REPORT = ("hits", "misses", "evictions", "expired", "bypassed", "invalidated", "unplanned", "bytes", "peak_bytes",
              "working_set_bytes", "local_hits", "local_misses", "encoder_to_decoder_hits", "decoder_to_encoder_hits",
              "filled_incrementally", "filled_from_scratch")

    def _reuse_report(self) -> dict:
        """The ``reuse`` entry of the epoch record, summed over ranks: the global level's hits, misses,
        evictions, … and hit rate (the cross-sample cache the policy decides); ``bytes`` held at the epoch's
        end; ``peak_bytes`` the ranks' peaks added; ``working_set_bytes`` the distinct aggregations the epoch
        reads, each counted once per rank that reads it; ``local_hits`` / ``local_misses`` the cells'
        structural reuse across gates (a counter, module docstring); hits by the other part on entries the
        encoder or the decoder made; and how the misses filled with a whole snapshot's value were computed
        (``filled_incrementally``: R2 from a cached Agg_{t-1}; ``filled_from_scratch``)."""
        o = self.opts
        out = {"mode": o.reuse, "policy": o.cache_policy, "cache_mb": o.cache_mb}
        if o.reuse == "off":
            return out
        cached = "input aggregations" if self.reads_ax else "input bases" if self.reads_basis else "nothing"
        mine = dict.fromkeys(self.REPORT, 0)
        if self.cache is not None:
            c = self.cache.counters()
            mine.update({k: c[k] for k in ("evictions", "expired", "bypassed", "invalidated", "unplanned", "bytes",
                                           "peak_bytes", "local_hits", "local_misses")})
            mine.update(hits=c["global_hits"], misses=c["global_misses"],
                        working_set_bytes=len(set(self._stream)) * self._entry_bytes,
                        encoder_to_decoder_hits=self.cache.cross_hits("encoder", "decoder"),
                        decoder_to_encoder_hits=self.cache.cross_hits("decoder", "encoder"),
                        filled_incrementally=self._fills["incremental"], filled_from_scratch=self._fills["scratch"])
        tot = self.comm.allreduce_array([float(mine[k]) for k in self.REPORT], tag="metrics")
        out.update({"cached": cached, **{k: int(v) for k, v in zip(self.REPORT, tot, strict=True)}})
        out["hit_rate"] = hit_rate(out["hits"], out["misses"])
        return out

    def snapshot(self, t: int) -> _HostSnapshot:
        """Snapshot t: read at setup, or fetched this epoch."""
        return self.host[t] if t in self.host else self._fetched[t]

    # -- placement: fetch ---------------------------------------------------------------------------
    def _fetch(self) -> None:
        """``placement: fetch``: every rank sends the snapshots of its block that other ranks' windows need
        (normalised Ã and X, once per epoch) and receives those it needs from their owners."""
        P, me, own = self.comm.size, self.comm.rank, self._own
        sends = []
        for r in range(P):
            if r == me:
                continue
            lo, hi = self._reads[r]
            ts = [t for t in range(max(lo, own[me]), min(hi, own[me + 1])) if not own[r] <= t < own[r + 1]]
            if ts:
                payload = [(t, h.crow, h.col, h.val, h.x, h.raw) for t, h in ((t, self.host[t]) for t in ts)]
                sends.append(self.comm.isend_obj(payload, r, 7301, "placement.fetch"))
        self._fetched = {}
        lo, hi = self._reads[me]
        for q in range(P):
            if q != me and any(not own[me] <= t < own[me + 1] for t in range(max(lo, own[q]), min(hi, own[q + 1]))):
                for t, crow, col, val, x, raw in self.comm.recv_obj(q, 7301, "placement.fetch"):
                    self._fetched[t] = _HostSnapshot(crow, col, val, x, raw)
        self.comm.wait_all(sends, "placement.fetch")

    # -- batches ------------------------------------------------------------------------------------
    def node_batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's node batches: a permutation seeded by (seed, epoch) cut into ``batch_vertices``."""
        N, B = self.N, self.opts.batch_vertices or self.N
        perm = np.random.default_rng([self.ctx.job.train.seed, epoch, 0x5E05]).permutation(N)
        return [np.sort(perm[i : i + B]) for i in range(0, N, B)]

    def _samples(self, epoch: int, split: int) -> list[tuple[Sequence, int]]:
        """The epoch's (sequence, node batch) samples of ``split`` over all ranks, in ``order``."""
        seqs = [s for s in self.seqs if s.split == split]
        nb = len(self.node_batches(epoch)) if seqs else 0
        if self.opts.order == "seq_first":
            return [(s, b) for b in range(nb) for s in seqs]
        return [(s, b) for s in seqs for b in range(nb)]

    def batches(self, epoch: int) -> Iterator[SampleBatch]:
        """Global mini-batches of ``batch_samples`` training samples; each rank keeps its own sequences'."""
        if self.opts.placement == "fetch":  # input data moved: the epoch's "load" column
            t0 = time.perf_counter()
            self._fetch()
            self.load_seconds += time.perf_counter() - t0
        if self.cache is not None:  # R3: the epoch's reads, for Eq. 3; the epoch's counters
            self.cache.reset_counters()
            self._fills = dict.fromkeys(self._fills, 0)
            self._plan(epoch)
        nodes = self.node_batches(epoch)
        samples = self._samples(epoch, 0)
        Q = self.opts.batch_samples or sum(s.split == 0 for s in self.seqs)
        for g in range(0, len(samples), Q):
            local = [(s, b) for s, b in samples[g : g + Q] if s.index in self._mine_ids]
            count = sum(self.task.sample_examples(s.t, nodes[b], epoch) for s, b in local)
            examples = float(self.comm.allreduce_array([count], tag="batch")[0])
            yield SampleBatch(epoch, g // Q, examples if examples > 0 else 1.0, [(s, nodes[b], b) for s, b in local])

    # -- the step -----------------------------------------------------------------------------------
    def _rng(self, epoch: int, seq: Sequence, b: int, train: bool) -> np.random.Generator:
        """The neighbour sampler of one sample: seeded by (seed, epoch, sequence, node batch), never by P."""
        return np.random.default_rng([self.ctx.job.train.seed, epoch, seq.index, b, 0 if train else 1, 0x5A])

    def _run(self, model: DGNN, task, epoch: int, seq: Sequence, batch: np.ndarray, b: int, train: bool):
        vertices = task.sample_vertices(seq.t, batch, epoch)
        layout = SampleLayout(self, seq, batch, vertices, self._rng(epoch, seq, b, train),
                              epoch=epoch, b=b, train=train)
        # each window starts afresh: per-step parameters from their initial state (EvolveGCN-O's W_0)
        layout.states = [(layer.initial_time_state(), None) for layer in model.layers]
        # the cells report their state aggregations shared by the gates to the local level (ReInc §3.3.2)
        cells = [*self.encoder, *(self.decoder or [])]
        with local_level(self.cache, cells) if self.cache is not None and self.cells else nullcontext():
            out = model(layout)
        return task(out, epoch)

    def _zero_stats(self, model: DGNN, task, epoch: int) -> np.ndarray:
        """The task's metric sums of nothing (a rank without samples in a batch): the task run on no rows."""
        if self._stat_width is None:
            rows = torch.zeros(0, model.out_features, dtype=self.ctx.dtype, device=self.ctx.device)
            none = np.zeros(0, np.int64)
            with torch.no_grad():
                self._stat_width = int(task(SampleEmbeddings(self.seqs[0].t, rows, none, none), epoch).stats.shape[0])
        return np.zeros(self._stat_width)

    def step(self, model: DGNN, task, batch: SampleBatch, scale: float) -> np.ndarray:
        """Forward, loss × ``scale`` and backward of each of my samples in turn (gradients accumulate)."""
        stats = None
        for seq, nodes, b in batch.samples:
            out = self._run(model, task, batch.epoch, seq, nodes, b, train=True)
            (out.loss_sum * scale).backward()
            stats = out.stats if stats is None else stats + out.stats
        return stats if stats is not None else self._zero_stats(model, task, batch.epoch)

    def evaluate(self, model: DGNN, task, epoch: int) -> np.ndarray:
        """Validation and test sums: my sequences of those splits × every node batch, without gradient."""
        nodes = self.node_batches(epoch)
        stats = None
        with torch.no_grad():
            for split in (1, 2):
                for seq, b in self._samples(epoch, split):
                    if seq.index in self._mine_ids:
                        out = self._run(model, task, epoch, seq, nodes[b], b, train=False).stats
                        stats = out if stats is None else stats + out
        return stats if stats is not None else self._zero_stats(model, task, epoch)

    def _host_bytes(self) -> int:
        """Snapshots held on the host (read and fetched)."""
        return sum(h.nbytes for h in self.host.values()) + sum(h.nbytes for h in self._fetched.values())
