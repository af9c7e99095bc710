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
  the rows the sample needs. The values carry no gradient (X has none), so reading them changes no
  autograd graph. With ``reuse: off`` every sample aggregates X over its own block (the fanout-0
  block is Ã_t's rows) as a framework without reuse does: the same products, so the same losses up to
  the rounding of Eq. 2 (tested at rtol 1e-12). ``metrics.jsonl`` reports the cache per epoch under
  ``reuse`` (summed over ranks).
* *Not shared*: a sampled first layer (fanout > 0) draws its neighbours per window (the sampler is
  seeded by epoch, sequence and node batch), so no two windows aggregate the same thing; attention
  (DySAT) has parameters. Hidden layers' aggregations depend on the parameters and on the window's
  start (every window restarts the time encoder), and each sample runs its backward before the next:
  none is reused across samples or optimizer steps (the cache's ``local`` level stays empty); within
  a sample every layer aggregates each step once (one block-diagonal product over the window).
* *Across gates*: the integrated cells (:class:`~hpcdgnn.nn.models.base.GraphRecurrentLayer`) compute
  one basis of X_t for all gates and one basis of H_{t-1} per step for all gates that read it
  (GConvGRU and DCRNN need a second, of R_t ⊙ H_{t-1}, as their equations do), here as under every
  strategy. *Encoder → decoder* (teacher forcing): ReInc's decoder reads future snapshots' features;
  ours (:mod:`~hpcdgnn.nn.models.encoder_decoder`) reads the regression targets on the last input
  step's graph, whose aggregation is a parameter-free product only when the step is teacher-forced
  and is not cached (the cells' layer 0 is not ``precomputable``, so nothing is shared).

**Graph-recurrent cells** (``gconv_lstm``, ``gconv_gru``, ``dcrnn``, ``gcrn_m1``; ReInc §2.1). Their time
encoder convolves the state over each step's graph, so the rows a sample needs grow with the window:
output row v of layer l at step t reads, through one step's operator (L̂_t, or P_f and P_b; its hops are
the union of their patterns), the input (layer l - 1's output, or X_t) at ``a`` hops and layer l's state
after t - 1 at ``b`` hops — (a, b) = :meth:`~hpcdgnn.nn.models.base.GraphRecurrentLayer.receptive_hops`:
(K-1, K-1) for GConvLSTM, (2(K-1), 2(K-1)) for GConvGRU and DCRNN (the candidate convolves R_t ⊙ H_{t-1}
and R_t is itself a convolution), (K-1, 0) for GCRN-M1. :meth:`SequencesStrategy.cell_rows` works these
sets out backwards from the scored rows — R^l_t for every layer l and step t of the window, starting
from the batch's ``sample_vertices`` at the last step of the top layer (or, with the encoder–decoder,
at every decoder step of the top layer, the decoder's own state, the rows whose prediction the next
decoder step reads as input, and the encoder states the decoder starts from), with R^{l-1}_t ⊇ a-hops
of R^l_t and R^l_{t-1} ⊇ b-hops of R^l_t over G_t — and takes their union U (with X's reads at layer 0).
Every layer then runs over U at every step, with each step's operator built once on the *whole*
snapshot and restricted to U × U (:class:`RowsStepGraph`: the degrees stay the whole graph's). A row
of R^l_t reads only rows of R^{l-1}_t and R^l_{t-1}, whose whole rows of the operator lie in U, so with
full neighbourhoods (``fanouts: []``) the batch's outputs equal full-graph computation of the window
exactly (tested to 1e-10); rows of U outside the R sets are computed too, inexactly, and never read by
those that matter. The closure spans up to L·b + a hops per layer over an L-step window, so with
large windows on large graphs U approaches N — the price of the recurrence's receptive field.

*Sampled fanouts for cells*: ``fanouts[l]`` (nearest the batch first, as for the GCN layers) caps, per
vertex, step and hop of the expansions layer l causes (its state's and its input's), how many of the
vertex's neighbours in that step's operator join the rows: the ``k`` with the smallest keys of a hash
of (sample, step, vertex, neighbour) — so a vertex expanded twice in a step keeps the same neighbours,
and the draw depends on the seed, epoch, sequence and node batch only (P-invariant). The cells then
run over the subgraph U induces, with the whole graph's operator entries among U (a neighbour outside
U is dropped, nothing is reweighted: the induced-subgraph reading of ClusterGCN / GraphSAINT, not
GraphSAGE's scaled mean, which a Chebyshev or diffusion basis has no unbiased form of).

Evaluation (validation and test sequences, every node batch, no gradient)
is a pass of its own after the epoch's steps (:meth:`evaluate`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.conv.gcn import NormalizedAdjacency, gcn_norm
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.conv.incremental import IncrementalAggregator
from hpcdgnn.nn.layout import Layout, StepGraph
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.nn.models.encoder_decoder import DecoderInputs, EncoderDecoder
from hpcdgnn.nn.reuse_cache import ReuseCache, hit_rate
from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds
from hpcdgnn.strategies.base import Batch, Strategy
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.tasks import task_class
from hpcdgnn.tasks.base import SampleEmbeddings

__all__ = ["RowsStepGraph", "SequencesStrategy", "SampleLayout", "sequences_of"]


@dataclass(frozen=True)
class Sequence:
    """Window ``[start, start + L)``; the task scores its last step ``t``, which lies in ``split``."""

    index: int
    start: int
    stop: int
    split: int

    @property
    def t(self) -> int:
        """The scored step."""
        return self.stop - 1


def sequences_of(manifest, job) -> list[Sequence]:
    """Every window whose last step is a prediction step of the task (in time order)."""
    o = job.strategy
    ranges = task_class(job.task.name).steps(job.task, manifest)
    out: list[Sequence] = []
    for start in range(0, manifest.num_snapshots - o.window + 1, o.stride):
        t = start + o.window - 1
        split = next((i for i, r in enumerate(ranges) if t in r), -1)
        if split >= 0:
            out.append(Sequence(len(out), start, t + 1, split))
    return out


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
        raw = sum(a.nbytes for a in self.raw) if self.raw is not None else 0
        return self.crow.nbytes + self.col.nbytes + self.val.nbytes + self.x.numel() * self.x.element_size() + raw


def _expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Positions ``starts[i] .. starts[i] + counts[i] - 1`` for every i, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return np.arange(total, dtype=np.int64) + offsets


def _csr(r: np.ndarray, c: np.ndarray, v: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """CSR of entries already ordered by row, then column."""
    crow = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=shape[0]))])
    return torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(c), v, shape, check_invariants=False)


def _submatrix(crow: np.ndarray, col: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries of a CSR matrix among ``rows`` × ``rows`` (ascending): local row and column of each, in CSR
    order (columns stay ascending through the monotone map), and its position among the matrix's entries."""
    counts = crow[rows + 1] - crow[rows]
    e = _expand(crow[rows], counts)
    c = col[e]
    pos = np.searchsorted(rows, c)
    keep = rows[np.minimum(pos, max(rows.shape[0] - 1, 0))] == c if rows.shape[0] else np.zeros(0, bool)
    r = np.repeat(np.arange(rows.shape[0], dtype=np.int64), counts)
    return r[keep], pos[keep].astype(np.int64), e[keep]


def _restrict(op: NormalizedAdjacency, rows: np.ndarray, device: torch.device) -> NormalizedAdjacency:
    """``op`` (a whole snapshot's operator) restricted to ``rows`` × ``rows``, with its transpose, on ``device``."""
    a = op.a
    r, c, e = _submatrix(a.crow_indices().numpy(), a.col_indices().numpy(), rows)
    v = a.values()[torch.from_numpy(e)]
    n = rows.shape[0]
    by_col = np.argsort(c, kind="stable")
    return NormalizedAdjacency(op.t, _csr(r, c, v, (n, n)).to(device),
                               _csr(c[by_col], r[by_col], v[torch.from_numpy(by_col)], (n, n)).to(device))


def _mix(salt: int, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A 64-bit hash (splitmix64's finaliser) of (salt, r, c): the sampling key of neighbour c of vertex r."""
    z = (r.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (c.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F))
    z ^= np.uint64(salt)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclass(eq=False)
class RowsStepGraph(StepGraph):
    """Snapshot t's graph among one sample's rows ``rows`` (ascending): ``indptr``/``indices``/``values`` are
    A_t's entries among them; a graph-recurrent cell's operator here is the ``whole`` snapshot's (built once
    there, whole-graph degrees) restricted to ``rows`` × ``rows`` (:meth:`restrict`,
    :meth:`GraphRecurrentLayer.operator <hpcdgnn.nn.models.base.GraphRecurrentLayer.operator>`), so a row
    whose neighbourhood lies in ``rows`` gets exactly its row of the full operator."""

    whole: StepGraph | None = None
    rows: np.ndarray | None = None
    device: torch.device | None = None

    def restrict(self, ops: tuple) -> tuple:
        """The whole snapshot's operators ``ops`` restricted to :attr:`rows`, on :attr:`device`."""
        return tuple(_restrict(op, self.rows, self.device) for op in ops)


@register_strategy("sequences")
class SequencesStrategy(Strategy):
    """Sliding-window sequences × node batches, one model replica per rank (see the module docstring)."""

    #: mini-batches of sampled windows: a different training regime from one full-graph batch per epoch
    full_batch: ClassVar[bool] = False

    @classmethod
    def step_graphs_at(cls, num_ranks: int) -> bool:
        """Graph-recurrent cells run at any P: each sample's time encoder gets every step's graph among the
        rows its receptive field needs (module docstring, *Graph-recurrent cells*)."""
        return True

    @classmethod
    def make_plan(cls, manifest, num_ranks: int, job) -> PartitionPlan:
        """Consecutive blocks of sequences per rank (R1), and the snapshots each holds; checks the options."""
        o, T, N, P = job.strategy, manifest.num_snapshots, manifest.num_vertices, num_ranks
        if o.window > T:
            raise ConfigError(f"strategy.window: {o.window} snapshots, but the dataset has only T = {T}; "
                              f"choose a window of at most {T}")
        if o.fanouts and len(o.fanouts) != job.model.layers:
            raise ConfigError(f"strategy.fanouts: {len(o.fanouts)} values for model.layers: {job.model.layers}; "
                              "give one per layer (nearest the batch first), or [] for full neighbourhoods")
        seqs = sequences_of(manifest, job)
        if not any(s.split == 0 for s in seqs):
            raise ConfigError(f"strategy.window: {o.window} with stride {o.stride} leaves no sequence whose last "
                              "step is a training step; shorten the window or widen task.split")
        sb = balanced_bounds(len(seqs), P)
        lo = [seqs[sb[p]].start if sb[p] < len(seqs) else T for p in range(P)]
        lo[0] = 0
        own = [*lo, T]
        owner = [p for p in range(P) for _ in range(own[p + 1] - own[p])]
        ranks = []
        for p in range(P):
            mine = seqs[sb[p] : sb[p + 1]]
            reads = (mine[0].start, mine[-1].stop) if mine else (own[p], own[p])
            ranks.append({"sequences": [sb[p], sb[p + 1]], "snapshots": own[p + 1] - own[p],
                          "window_snapshots": list(reads), "train_sequences": sum(s.split == 0 for s in mine)})
        return PartitionPlan(kind="sequences", num_ranks=P, num_snapshots=T, num_vertices=N, snapshot_owner=owner,
                             snapshot_bounds=own, vertex_bounds=balanced_bounds(N, P), ranks=ranks)

    # -- setup --------------------------------------------------------------------------------------
    def setup(self, plan: PartitionPlan, model: DGNN, reader) -> list[int]:
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
        self.cache: ReuseCache | None = None
        self._incremental: dict | None = None
        if self.reads_ax:
            F = raw[0].x.shape[1] if raw else self.ctx.manifest.num_features
            self._ax_bytes = self.N * F * torch.empty(0, dtype=self.ctx.dtype).element_size()
            if int(o.cache_mb * 2**20) < self._ax_bytes:  # the same on every rank: all of them stop
                raise ConfigError(f"strategy.cache_mb: {o.cache_mb:g} MiB cannot hold one snapshot's input "
                                  f"aggregation Ã_t·X_t ({self._ax_bytes / 2**20:.4g} MiB, N × F), what every sample "
                                  "reads; raise it to at least that, or set strategy.reuse: off")
            self.cache = ReuseCache(int(o.cache_mb * 2**20), o.cache_policy, unit_bytes=max(self._ax_bytes, 1))
            self._stream = self._access_stream(1)
            self._plan(1)
            # R2 fills it: Ã_t·X_t of every held snapshot (Eq. 2 or from scratch), kept as the policy admits
            for t, ax in self._precompute(list(range(read_lo, read_hi)), raw).items():
                self.cache.offer(self._input_key(t), ax)
        self._stat_width: int | None = None
        return sorted({s.t for s in self.mine})

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
        else:
            out = [torch.sparse.mm(gcn_norm(t, s.indptr, s.indices, s.weights, torch.float64).a, x)
                   for t, s, x in zip(ts, raw, xs)]
        return {t: y.to(self.ctx.dtype) for t, y in zip(ts, out)}

    # -- R3: the reuse cache ------------------------------------------------------------------------
    @staticmethod
    def _input_key(t: int) -> tuple:
        """The cache key of Ã_t·X_t: global level (no parameters), layer 0, snapshot t, every vertex's
        full neighbourhood — the same value for every window, node batch, split and epoch."""
        return ("global", 0, t, "all")

    def _access_stream(self, epoch: int) -> list[tuple]:
        """This rank's reads of input aggregations in one epoch, in order: each training sample of
        :meth:`batches` (then each of :meth:`evaluate`) reads Ã_t·X_t of every step t of its window."""
        keys = []
        for split in (0, 1, 2):
            for seq, _ in self._samples(epoch, split):
                if seq.index in self._mine_ids:
                    keys += [self._input_key(t) for t in range(seq.start, seq.stop)]
        return keys

    def _plan(self, epoch: int) -> None:
        """Tell the cache this epoch's reads, then the next epoch's (the same keys: nothing in them
        depends on the epoch), unless this is the last epoch — F and I of Eq. 3."""
        more = epoch < self.ctx.job.train.epochs
        self.cache.plan(self._stream, self._stream if more else ())

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
        computed and offered to it, or — when the policy would not admit it — only these rows."""
        ax = self.cache.fetch(self._input_key(t), lambda: self._aggregate_input(t), self._ax_bytes)
        return self._aggregate_input(t, rows) if ax is None else ax.index_select(0, torch.from_numpy(rows))

    def end_epoch(self, epoch: int, train_loss: float) -> dict:
        """R2's work at setup (all ranks): rows recomputed from scratch vs updated incrementally; R3's
        cache this epoch (all ranks): hits, misses, evictions, hit rate, bytes (:meth:`_reuse_report`)."""
        out = {"reuse": self._reuse_report()}
        if not self.reads_ax:
            return out
        mine = self._incremental or {}
        keys = ["rows_recomputed", "rows_updated", "rows_untouched", "fallbacks"]
        tot = self.comm.allreduce_array([float(mine.get(k, 0)) for k in keys], tag="metrics")
        inc = dict(zip(keys, (int(x) for x in tot)))
        rows = inc["rows_recomputed"] + inc["rows_updated"] + inc["rows_untouched"]
        inc["recomputed_fraction"] = inc["rows_recomputed"] / rows if rows else 0.0
        out["incremental"] = {"mode": self.opts.incremental, **inc}
        return out

    def _reuse_report(self) -> dict:
        """The ``reuse`` entry of the epoch record: the cache's counters summed over ranks (``bytes``:
        held at the epoch's end; ``peak_bytes``: the ranks' peaks added; ``working_set_bytes``: the distinct
        aggregations the epoch reads, each counted once per rank that reads it)."""
        o = self.opts
        out = {"mode": o.reuse, "policy": o.cache_policy, "cache_mb": o.cache_mb}
        if o.reuse == "off":
            return out
        names = [k for k in ReuseCache.COUNTERS if not k.startswith("local")] + ["working_set_bytes"]
        if not self.reads_ax:  # nothing parameter-free is shared between samples (module docstring, R3)
            return {**out, "cached": "nothing", **dict.fromkeys(names, 0), "hit_rate": 0.0}
        mine = {**self.cache.counters(), "working_set_bytes": len(set(self._stream)) * self._ax_bytes}
        tot = self.comm.allreduce_array([float(mine[k]) for k in names], tag="metrics")
        out.update({"cached": "input aggregations", **{k: int(v) for k, v in zip(names, tot)}})
        out["hit_rate"] = hit_rate(out["hits"], out["misses"])
        return out

    def attach_task(self, task) -> None:
        """The task head, to count each global batch's training examples (:meth:`batches`)."""
        self.task = task

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
                nbytes = sum(self.host[t].nbytes for t in ts)
                sends.append(self.comm.isend_obj(payload, r, 7301, "placement.fetch", nbytes))
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

    def batches(self, epoch: int) -> Iterator[Batch]:
        """Global mini-batches of ``batch_samples`` training samples; each rank keeps its own sequences'."""
        if self.opts.placement == "fetch":  # input data moved: the epoch's "load" column
            t0 = time.perf_counter()
            self._fetch()
            self.load_seconds += time.perf_counter() - t0
        if self.cache is not None:  # R3: the epoch's reads, for Eq. 3; the epoch's counters
            self.cache.reset_counters()
            self._plan(epoch)
        nodes = self.node_batches(epoch)
        samples = self._samples(epoch, 0)
        Q = self.opts.batch_samples or sum(s.split == 0 for s in self.seqs)
        for g in range(0, len(samples), Q):
            local = [(s, b) for s, b in samples[g : g + Q] if s.index in self._mine_ids]
            count = sum(self.task.sample_examples(s.t, nodes[b], epoch) for s, b in local)
            examples = float(self.comm.allreduce_array([count], tag="batch")[0])
            yield Batch(epoch, g // Q, None, examples if examples > 0 else 1.0, [(s, nodes[b], b) for s, b in local])

    # -- the step -----------------------------------------------------------------------------------
    def _rng(self, epoch: int, seq: Sequence, b: int, train: bool) -> np.random.Generator:
        """The neighbour sampler of one sample: seeded by (seed, epoch, sequence, node batch), never by P."""
        return np.random.default_rng([self.ctx.job.train.seed, epoch, seq.index, b, 0 if train else 1, 0x5A])

    def _run(self, model: DGNN, task, epoch: int, seq: Sequence, batch: np.ndarray, b: int, train: bool):
        vertices = task.sample_vertices(seq.t, batch, epoch)
        layout = SampleLayout(self, seq, batch, vertices, self._rng(epoch, seq, b, train), epoch=epoch, b=b, train=train)
        # each window starts afresh: per-step parameters from their initial state (EvolveGCN-O's W_0)
        layout.states = [(layer.initial_time_state(), None) for layer in model.layers]
        return task(model(layout), epoch)

    def _zero_stats(self, model: DGNN, task, epoch: int) -> np.ndarray:
        """The task's metric sums of nothing (a rank without samples in a batch): the task run on no rows."""
        if self._stat_width is None:
            rows = torch.zeros(0, model.out_features, dtype=self.ctx.dtype, device=self.ctx.device)
            none = np.zeros(0, np.int64)
            with torch.no_grad():
                self._stat_width = int(task(SampleEmbeddings(self.seqs[0].t, rows, none, none), epoch).stats.shape[0])
        return np.zeros(self._stat_width)

    def step(self, model: DGNN, task, batch: Batch, scale: float) -> np.ndarray:
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

    def host_bytes(self) -> int:
        """Snapshots held on the host (read and fetched)."""
        return sum(h.nbytes for h in self.host.values()) + sum(h.nbytes for h in self._fetched.values())

    # -- computational graphs of graph-recurrent cells ---------------------------------------------
    def whole_graph(self, t: int) -> StepGraph:
        """Snapshot t's whole graph A_t as a step graph (on the host), built once per held or fetched snapshot:
        the operators of the cells are built on it once and restricted to each sample's rows."""
        h = self.snapshot(t)
        if h.graph is None:
            indptr, indices, weights = (torch.from_numpy(np.ascontiguousarray(a)) for a in h.raw)
            h.graph = StepGraph(t, indptr, indices, weights)
        return h.graph

    def _pattern(self, layer, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(crow, col) of the union of the patterns of ``layer``'s whole-snapshot operators at step t: the
        hops of the cell's convolutions (memoised on the whole graph)."""
        g = self.whole_graph(t)

        def build(_):
            keys = []
            for op in layer.operator(g, self.ctx.dtype):
                crow, col = op.a.crow_indices().numpy(), op.a.col_indices().numpy()
                n = crow.shape[0] - 1
                keys.append(np.repeat(np.arange(n, dtype=np.int64), np.diff(crow)) * n + col)
            keys = np.unique(np.concatenate(keys))
            r, c = np.divmod(keys, self.N)
            return np.concatenate([[0], np.cumsum(np.bincount(r, minlength=self.N))]), c

        return g.operator(("pattern", type(layer).__name__), build)

    def _hop(self, layer, t: int, rows: np.ndarray, k: int, fanout: int, salt: int) -> np.ndarray:
        """``rows`` and their neighbours up to ``k`` hops over ``layer``'s operator at step t (ascending); with
        ``fanout`` > 0 each vertex adds at most that many neighbours: those with the smallest :func:`_mix` keys."""
        if k == 0 or rows.shape[0] == 0:
            return rows
        crow, col = self._pattern(layer, t)
        out = frontier = rows
        for _ in range(k):
            counts = crow[frontier + 1] - crow[frontier]
            c = col[_expand(crow[frontier], counts)]
            if fanout > 0 and c.shape[0]:
                r = np.repeat(frontier, counts)
                other = c != r  # the vertex itself is in already
                r, c = r[other], c[other]
                order = np.lexsort((_mix(salt + t * 0x9E37, r, c), r))  # by vertex (ascending), then key
                _, first, per = np.unique(r, return_index=True, return_counts=True)
                rank = np.empty(r.shape[0], dtype=np.int64)
                rank[order] = np.arange(r.shape[0]) - np.repeat(first, per)
                c = c[rank < fanout]
            frontier = np.setdiff1d(c, out)
            if frontier.shape[0] == 0:
                break
            out = np.union1d(out, frontier)
        return out

    def cell_rows(self, seq: Sequence, vertices: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The rows U every graph-recurrent layer of a sample runs over (module docstring, *Graph-recurrent
        cells*): the union over layers and steps — the window's, then with the encoder–decoder the decoder's
        H steps on G_t — of the rows whose outputs the scored ``vertices`` depend on, and of layer 0's reads."""
        salt = int(rng.integers(0, 2**62))
        L, top = len(self.encoder), len(self.encoder) - 1
        steps = list(range(seq.start, seq.stop))
        empty = np.zeros(0, np.int64)
        fan = self.fanout

        def hop(layers, l, which, t, rows):  # the rows layer l reads of its input (0) or its state (1)
            return self._hop(layers[l], t, rows, layers[l].receptive_hops()[which], fan[l], salt)

        need: list[np.ndarray] = [vertices]
        seed = [empty] * L  # rows each encoder layer must get right at the window's last step
        if self.decoder is None:
            seed[top] = vertices
        else:
            dec, t, later = self.decoder, seq.t, None  # ``later``: the rows of decoder step d + 1, per layer
            for _ in range(self.horizon):  # d = H-1 … 0
                rows = [empty] * L
                for l in reversed(range(L)):
                    r = vertices if l == top else hop(dec, l + 1, 0, t, rows[l + 1])
                    if later is not None:
                        r = np.union1d(r, hop(dec, l, 1, t, later[l]))  # the state step d + 1 reads
                        if l == top:  # step d + 1's input is this step's prediction, where layer 0 reads it
                            r = np.union1d(r, hop(dec, 0, 0, t, later[0]))
                    rows[l] = r
                need += [*rows, hop(dec, 0, 0, t, rows[0])]
                later = rows
            seed = [hop(dec, l, 1, t, later[l]) for l in range(L)]  # the encoder states decoder step 0 reads
        later = None
        for e in reversed(range(len(steps))):
            rows = [empty] * L
            for l in reversed(range(L)):
                r = seed[l] if e == len(steps) - 1 else empty
                if l < top:
                    r = np.union1d(r, hop(self.encoder, l + 1, 0, steps[e], rows[l + 1]))
                if later is not None:
                    r = np.union1d(r, hop(self.encoder, l, 1, steps[e + 1], later[l]))
                rows[l] = r
            need += [*rows, hop(self.encoder, 0, 0, steps[e], rows[0])]  # X_t's rows layer 0 reads
            later = rows
        return np.unique(np.concatenate(need))

    def rows_graph(self, t: int, rows: np.ndarray) -> RowsStepGraph:
        """Snapshot t among ``rows`` (:class:`RowsStepGraph`)."""
        whole = self.whole_graph(t)
        r, c, e = _submatrix(whole.indptr.numpy(), whole.indices.numpy(), rows)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=rows.shape[0]))])
        return RowsStepGraph(t, torch.from_numpy(indptr), torch.from_numpy(c),
                             whole.values[torch.from_numpy(e)], whole=whole, rows=rows, device=self.ctx.device)

    def target_block(self, t: int) -> torch.Tensor:
        """The regression targets Ŷ_t forecasts, (N, H) float64 on the host (NaN where missing): the decoder's
        teacher inputs (:meth:`~hpcdgnn.tasks.regression.Regression.target_block`), kept per step."""
        if t not in self._targets:
            self._targets[t] = self.task.target_block(t)
        return self._targets[t]

    # -- computational graphs ---------------------------------------------------------------------
    def sampled_block(self, start: int, stop: int, rows: np.ndarray, k: int, rng: np.random.Generator):
        """One layer's aggregation over steps ``start..stop-1`` for output vertices ``rows`` (ascending):
        block-diagonal over steps, each block Ã_t's rows of ``rows`` (all entries, or the self-loop plus
        ``k`` neighbours sampled without replacement, weighted deg / k); and the vertices it reads.

        Returns (NormalizedAdjacency of shape (S·len(rows), S·len(cols)), cols ascending ⊇ rows).
        """
        S, n = stop - start, rows.shape[0]
        rs, cs, vs = [], [], []
        for i, t in enumerate(range(start, stop)):
            h = self.snapshot(t)
            starts, counts = h.crow[rows], h.crow[rows + 1] - h.crow[rows]
            e = _expand(starts, counts)
            r = np.repeat(np.arange(n, dtype=np.int64), counts)
            c, v = h.col[e], h.val[e].copy()
            if k > 0 and e.size:
                self_loop = c == rows[r]
                key = rng.random(e.size)
                key[self_loop] = -1.0  # the self-loop is always kept, first in its row
                order = np.argsort(r + 0.5 * (key + 1.0), kind="stable")  # by row, then key (self-loop first)
                first = np.concatenate([[0], np.cumsum(counts)[:-1]])
                rank = np.empty(e.size, dtype=np.int64)
                rank[order] = np.arange(e.size) - np.repeat(first, counts)
                keep = rank <= k
                degree = counts - 1  # neighbours besides the self-loop (gcn_norm adds one to every row)
                scale = degree / np.minimum(degree, k).clip(min=1)
                v = np.where(self_loop, v, v * scale[r])
                r, c, v = r[keep], c[keep], v[keep]
            rs.append(r + i * n)
            cs.append(c)
            vs.append(v)
        r, c, v = np.concatenate(rs), np.concatenate(cs), np.concatenate(vs)
        cols = np.union1d(rows, c)
        step = np.repeat(np.arange(S, dtype=np.int64), [x.shape[0] for x in rs])
        c_local = step * cols.shape[0] + np.searchsorted(cols, c)
        shape = (S * n, S * cols.shape[0])
        # the entries are in CSR order already (rows ascending; a row's columns ascend, as in Ã_t and
        # through the monotone map to positions in ``cols``): only the transpose needs a (stable) sort
        vt = torch.from_numpy(v).to(self.ctx.dtype)
        by_col = np.argsort(c_local, kind="stable")
        dev = self.ctx.device
        adj = NormalizedAdjacency(-1, _csr(r, c_local, vt, shape).to(dev),
                                  _csr(c_local[by_col], r[by_col], vt[torch.from_numpy(by_col)],
                                       (shape[1], shape[0])).to(dev))
        return adj, cols


class SampleLayout(Layout):
    """One sample's computational graph (ReInc §3.4.2): per layer, the rows it outputs in each step of the
    window and its sampled aggregation; the whole window's rows as one (S, n, F) block. For graph-recurrent
    cells: the rows :attr:`cells` every layer runs over at every step and each step's graph among them."""

    def __init__(self, s: SequencesStrategy, seq: Sequence, batch: np.ndarray, vertices: np.ndarray,
                 rng: np.random.Generator, *, epoch: int = 0, b: int = 0, train: bool = False) -> None:
        super().__init__(seq.start, seq.stop, s.num_layers)
        self.s, self.seq, self.batch = s, seq, batch
        self.epoch, self.b, self.train = epoch, b, train
        self.vertices = np.asarray(vertices, dtype=np.int64)
        L = s.num_layers
        #: graph-recurrent cells: the rows U of every layer and step (:meth:`SequencesStrategy.cell_rows`)
        self.cells: np.ndarray | None = None
        if s.cells:
            self.cells = s.cell_rows(seq, self.vertices, rng)
            self.graphs = [s.rows_graph(t, self.cells) for t in range(seq.start, seq.stop)]
            return
        self.rows: list[np.ndarray] = [np.zeros(0, np.int64)] * L + [self.vertices]
        self.adj: list[NormalizedAdjacency | None] = [None] * L
        for li in reversed(range(L)):  # from the batch down to the input: each layer's rows and their reads
            if li == 0 and s.reads_ax:  # layer 0 reads its rows of Ã_t·X_t from the reuse cache
                break
            self.adj[li], self.rows[li] = s.sampled_block(seq.start, seq.stop, self.rows[li + 1], s.fanout[li], rng)

    def spatial(self, layer, li: int, h: torch.Tensor | None, tparams) -> torch.Tensor:
        """The layer's aggregation over its sampled block (all steps in one product), then its transform."""
        S = self.stop - self.start
        steps = list(range(self.start, self.stop))
        if self.cells is not None:  # a cell's input as it is: X (layer 0) or the layer below, over U
            if h is None:
                idx = torch.from_numpy(self.cells)
                h = torch.stack([self.s.snapshot(t).x.index_select(0, idx) for t in steps]).to(self.s.ctx.device)
            return layer.spatial_steps(h, steps, tparams)
        n = self.rows[li + 1].shape[0]
        if h is None and self.s.reads_ax:  # layer 0 over full neighbourhoods: Ã_t·X_t, reused (R3)
            ax = torch.stack([self.s.input_rows(t, self.rows[1]) for t in steps]).to(self.s.ctx.device)
            return layer.spatial_steps(ax, steps, tparams)
        if h is None:  # layer 0: X of its input rows in every step
            idx = torch.from_numpy(self.rows[0])
            h = torch.stack([self.s.snapshot(t).x.index_select(0, idx) for t in range(self.start, self.stop)])
            h = h.to(self.s.ctx.device)
        ax = layer.aggregate(LocalGraph(self.adj[li]), h.reshape(-1, h.shape[-1]))
        return layer.spatial_steps(ax.view(S, n, ax.shape[-1]), steps, tparams)

    def step_graphs(self, li: int) -> list[StepGraph] | None:
        """The window's graphs among the rows U of the cells (every layer runs over the same rows)."""
        return self.graphs if self.cells is not None else None

    def decoder_inputs(self) -> DecoderInputs:
        """The encoder–decoder's inputs (:mod:`~hpcdgnn.nn.models.encoder_decoder`): G_t among U, and when
        training, for each decoder step d ≥ 1 that draws teacher forcing (probability ``model.teacher_forcing``,
        from (seed, epoch, sequence, node batch): never P), the targets y_{t+d-1} of U (NaN where missing)."""
        s, H = self.s, self.s.horizon
        teacher: list[torch.Tensor | None] = [None] * H
        p = s.ctx.job.model.teacher_forcing
        if self.train and p > 0:
            key = [s.ctx.job.train.seed, self.epoch, self.seq.index, self.b, 0x7EAC]
            draw = np.random.default_rng(key).random(H)
            block = s.target_block(self.seq.t).index_select(0, torch.from_numpy(self.cells))
            for d in range(1, H):
                if draw[d] < p:
                    teacher[d] = block[:, d - 1 : d].to(s.ctx.device, s.ctx.dtype)
        return DecoderInputs(self.graphs[-1], teacher)

    def output(self, h: torch.Tensor) -> SampleEmbeddings:
        """The last step's rows of the sample's vertices."""
        self.last = h
        rows = h[-1]
        if self.cells is not None:  # the vertices' rows among U
            rows = rows.index_select(0, torch.from_numpy(np.searchsorted(self.cells, self.vertices)).to(rows.device))
        return SampleEmbeddings(self.seq.t, rows, self.vertices, self.batch)
