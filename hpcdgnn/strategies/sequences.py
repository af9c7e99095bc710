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
  sample needs has its whole neighbourhood in U (*Graph-recurrent cells* below), so its row of the
  whole-snapshot basis is the one the sample computes without reuse; the other rows of U are read by
  none of those. With sampled fanouts the cells run on the subgraph U induces, whose basis differs
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
decoder step reads as input, and the encoder states the decoder starts from — each decoder step's hops
over the graph it runs on: G_t, or G_{t+d} where it reads snapshot t + d), with R^{l-1}_t ⊇ a-hops
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

import copy
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from hpcdgnn.comm.communicator import payload_bytes
from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics.log import get_logger
from hpcdgnn.nn.conv.gcn import NormalizedAdjacency, csr_tensor, gcn_norm
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.conv.incremental import IncrementalAggregator
from hpcdgnn.nn.layout import Layout, StepGraph
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.nn.models.encoder_decoder import DecoderInputs, EncoderDecoder, input_gates_from_basis
from hpcdgnn.nn.reuse_cache import ReuseCache, hit_rate, local_level
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.partition.sequences import Sequence, plan_sequences, sequences_of
from hpcdgnn.strategies.base import Batch, Strategy
from hpcdgnn.strategies.registry import register_strategy
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


def _expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Positions ``starts[i] .. starts[i] + counts[i] - 1`` for every i, concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return np.arange(total, dtype=np.int64) + offsets


def _csr(r: np.ndarray, c: np.ndarray, v: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """CSR of entries already ordered by row, then column (:func:`~hpcdgnn.nn.conv.gcn.csr_tensor`: int32
    indices where they fit, as every other operator of Ã)."""
    crow = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=shape[0]))])
    return csr_tensor(torch.from_numpy(crow), torch.from_numpy(np.ascontiguousarray(c)), v, shape)


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
        """Consecutive blocks of sequences per rank (R1), and the snapshots each holds
        (:func:`hpcdgnn.partition.sequences.plan_sequences`)."""
        return plan_sequences(manifest, num_ranks, job)

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

    def end_epoch(self, epoch: int, train_loss: float) -> dict:
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

    def batches(self, epoch: int) -> Iterator[Batch]:
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
            yield Batch(epoch, g // Q, None, examples if examples > 0 else 1.0, [(s, nodes[b], b) for s, b in local])

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

    def cell_rows(self, seq: Sequence, vertices: np.ndarray, rng: np.random.Generator,
                  decoder: list[int | None] | None = None) -> np.ndarray:
        """The rows U every graph-recurrent layer of a sample runs over (module docstring, *Graph-recurrent
        cells*): the union over layers and steps — the window's, then with the encoder–decoder the decoder's
        H steps — of the rows whose outputs the scored ``vertices`` depend on, and of layer 0's reads.
        ``decoder``: the snapshot each decoder step reads (:meth:`decoder_steps`; None: its own prediction),
        whose graph the step convolves over (G_t where it reads none); default: none read."""
        salt = int(rng.integers(0, 2**62))
        L, top = len(self.encoder), len(self.encoder) - 1
        steps = list(range(seq.start, seq.stop))
        empty = np.zeros(0, np.int64)
        fan = self.fanout

        def hop(layers, layer, which, t, rows):  # the rows layers[layer] reads of its input (0) or its state (1)
            return self._hop(layers[layer], t, rows, layers[layer].receptive_hops()[which], fan[layer], salt)

        need: list[np.ndarray] = [vertices]
        seed = [empty] * L  # rows each encoder layer must get right at the window's last step
        if self.decoder is None:
            seed[top] = vertices
        else:
            reads = decoder or [None] * self.horizon
            graph = [seq.t if u is None else u for u in reads]  # the snapshot whose graph step d runs on
            dec, later = self.decoder, None  # ``later``: the rows of decoder step d + 1, per layer
            for d in reversed(range(self.horizon)):
                rows = [empty] * L
                for layer in reversed(range(L)):
                    r = vertices if layer == top else hop(dec, layer + 1, 0, graph[d], rows[layer + 1])
                    if later is not None:
                        r = np.union1d(r, hop(dec, layer, 1, graph[d + 1], later[layer]))  # the state step d + 1 reads
                        if layer == top and reads[d + 1] is None:  # step d + 1 reads this step's prediction
                            r = np.union1d(r, hop(dec, 0, 0, graph[d + 1], later[0]))
                    rows[layer] = r
                need += [*rows, hop(dec, 0, 0, graph[d], rows[0])]  # layer 0's reads of step d's input
                later = rows
            seed = [hop(dec, layer, 1, graph[0], later[layer]) for layer in range(L)]  # the encoder states step 0 reads
        later = None
        for e in reversed(range(len(steps))):
            rows = [empty] * L
            for layer in reversed(range(L)):
                r = seed[layer] if e == len(steps) - 1 else empty
                if layer < top:
                    r = np.union1d(r, hop(self.encoder, layer + 1, 0, steps[e], rows[layer + 1]))
                if later is not None:
                    r = np.union1d(r, hop(self.encoder, layer, 1, steps[e + 1], later[layer]))
                rows[layer] = r
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
            #: the snapshot each decoder step reads (:meth:`SequencesStrategy.decoder_steps`)
            self.decoder = s.decoder_steps(epoch, seq, b, train) if s.decoder is not None else None
            self.cells = s.cell_rows(seq, self.vertices, rng, self.decoder)
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
        if self.cells is not None:  # a cell's input as it is: X (layer 0; or its basis, reused) or the layer below
            if h is None:
                h = torch.stack([self._cell_input(g, "encoder") for g in self.graphs])
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

    def _cell_input(self, graph: RowsStepGraph, part: str) -> torch.Tensor:
        """The first cell's input at ``graph``'s snapshot over the rows U, read by ``part``: X_t's rows, or with
        ``reuse: on`` and full neighbourhoods the rows of its basis from the reuse cache (ReInc §3.1, §3.3.1)."""
        if self.s.reads_basis:
            return self.s.input_basis(graph, part)
        return self.s.snapshot(graph.t).x.index_select(0, torch.from_numpy(self.cells)).to(self.s.ctx.device)

    def encode(self, layer, li: int, y: torch.Tensor, state):
        """The layer's time encoder; the first cell's from its input's basis when that came from the cache."""
        if li == 0 and self.cells is not None and self.s.reads_basis:
            return layer.scan(input_gates_from_basis(layer, y), self.graphs, state)
        return super().encode(layer, li, y, state)

    def step_graphs(self, li: int) -> list[StepGraph] | None:
        """The window's graphs among the rows U of the cells (every layer runs over the same rows)."""
        return self.graphs if self.cells is not None else None

    def decoder_inputs(self) -> DecoderInputs:
        """The encoder–decoder's inputs (:mod:`~hpcdgnn.nn.models.encoder_decoder`): G_t among U; when training,
        for each decoder step d ≥ 1 that draws teacher forcing (:meth:`SequencesStrategy.teacher_draws`: never
        P), the targets y_{t+d-1} of U (NaN where missing) — or in the snapshot form the input of each snapshot
        a step reads (:meth:`SequencesStrategy.decoder_steps`) and its graph among U, read in step order (the
        order of the cache's plan)."""
        s, H, last = self.s, self.s.horizon, self.graphs[-1]
        teacher: list[torch.Tensor | None] = [None] * H
        if s.reads_snapshots:
            graphs = [None if u is None else last if u == self.seq.t else s.rows_graph(u, self.cells)
                      for u in self.decoder]
            snaps = [None if g is None else self._cell_input(g, "decoder") for g in graphs]
            return DecoderInputs(last, teacher, snaps, graphs, aggregated=s.reads_basis)
        draws = s.teacher_draws(self.epoch, self.seq, self.b, self.train)
        if any(draws):
            block = s.target_block(self.seq.t).index_select(0, torch.from_numpy(self.cells))
            for d in range(1, H):
                if draws[d]:
                    teacher[d] = block[:, d - 1 : d].to(s.ctx.device, s.ctx.dtype)
        return DecoderInputs(last, teacher)

    def output(self, h: torch.Tensor) -> SampleEmbeddings:
        """The last step's rows of the sample's vertices."""
        self.last = h
        rows = h[-1]
        if self.cells is not None:  # the vertices' rows among U
            rows = rows.index_select(0, torch.from_numpy(np.searchsorted(self.cells, self.vertices)).to(rows.device))
        return SampleEmbeddings(self.seq.t, rows, self.vertices, self.batch)
