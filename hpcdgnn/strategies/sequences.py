"""R1 + R4 (with R2, R3): data-parallel training over sliding-window sequences (ReInc §3.4, SPEC Family B).

A *sequence* is a window of ``window`` snapshots starting every ``stride``; the task scores its last step t, so
it belongs to t's split. A *sample* is one sequence × one node batch: the computational graph of the batch's
vertices in each snapshot (:mod:`hpcdgnn.strategies.sampling`), run locally — no activation moves (§2.2).

R4 (§3.4.3): node batches cut a permutation seeded by (seed, epoch); samples are ordered seq-first or node-first
and ``batch_samples`` of them form one step. Membership and neighbour draws never depend on P, and the loss is
divided by the global example count, so P ranks reproduce one rank's losses.

R1 (§3.4.1): rank r owns a contiguous block of sequences; ``overlap`` also reads the window − 1 snapshots after
it, ``fetch`` pulls them from their owners once an epoch.

R3 (§3.1, §3.3; ``reuse: on``): with full neighbourhoods at layer 0, Ã_t·X_t (or a graph-recurrent cell's input
basis of X_t) depends on snapshot t alone, so one cache entry serves every window, node batch, epoch and the
decoder's snapshot steps. R2 (Eq. 2) fills it at setup; a miss recomputes it by Eq. 2 from a cached Agg_{t−1}
or from scratch (Eq. 1). Eq. 3 eviction reads this rank's exact read plan. Cached values carry no gradient, so
losses equal ``reuse: off`` up to Eq. 2's rounding. Sampled layers, attention and hidden layers depend on the
draw or the parameters and are not shared; the cells' gate sharing is counted on the local level (§3.3.2).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import nullcontext

import numpy as np
import torch

from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics.log import get_logger
from hpcdgnn.nn.conv.incremental import IncrementalAggregator
from hpcdgnn.nn.layout import StepGraph
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.nn.models.encoder_decoder import EncoderDecoder
from hpcdgnn.nn.reuse_cache import ReuseCache, hit_rate, local_level
from hpcdgnn.ops.sparse import csr_tensor, gcn_norm
from hpcdgnn.partition.plan import PartitionPlan
from hpcdgnn.partition.sequences import Sequence, plan_sequences, sequences_of
from hpcdgnn.strategies.base import SampleBatch, Scored, Strategy
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.strategies.sample_layout import SampleLayout
from hpcdgnn.strategies.sampling import HostSnapshot, RowsStepGraph, SampleGraphs, _expand, graph_cells

__all__ = ["RowsStepGraph", "SequencesStrategy", "SampleLayout", "sampling_of", "sequences_of"]


class _KnownProduct:
    """R2's M_{t-1} whose ``spmm`` returns a known product (cached Agg_{t-1}), so the aggregator runs its own
    Eq. 2 step t from the cache (ReInc §3.3.1); every other attribute is M_{t-1}'s."""

    def __init__(self, adj, product: torch.Tensor) -> None:
        self._adj, self._product = adj, product

    def spmm(self, x: torch.Tensor) -> torch.Tensor:
        """The known product (``x`` is X_{t-1})."""
        return self._product

    def __getattr__(self, name: str):
        return getattr(self._adj, name)


def sampling_of(model: DGNN, job) -> dict:
    """How a ``sequences`` job's samples run ``model`` (the attributes :class:`SampleGraphs` and
    :class:`SampleLayout` read); the planner's count of a sample's rows reads the same."""
    o, L = job.strategy, len(model.layers)
    decoder = list(model.decoder) if isinstance(model, EncoderDecoder) else None
    cells = graph_cells(model, job)
    #: (fanout per layer, input layer first): the PyG order of the option reversed; 0 = every neighbour
    fanout = (list(o.fanouts) or [0] * L)[::-1]
    return {
        #: graph-recurrent cells: each sample runs every layer over its receptive field's rows
        "cells": cells, "encoder": list(model.layers), "decoder": decoder,
        "horizon": model.horizon if decoder is not None else 0, "num_layers": L, "fanout": fanout,
        #: R3: layer 0's Ã_t·X_t (full neighbourhoods) is read from the reuse cache
        "reads_ax": bool(model.layers[0].precomputable and fanout[0] == 0 and o.reuse == "on"),
        #: R3: the first cell's input basis of X_t (full neighbourhoods) is read from the reuse cache
        "reads_basis": bool(cells and not any(fanout) and o.reuse == "on"),
        #: the decoder's snapshot form (ReInc §3.1): teacher-forced steps read X_{t+d} on G_{t+d}
        "reads_snapshots": decoder is not None and job.model.decoder_input == "snapshots"}


def _entry_bytes(model: DGNN, basis: bool, N: int, F: int, dtype: torch.dtype) -> int:
    """Bytes of one reuse-cache entry (R3): Ã_t·X_t (N × F) or, for graph-recurrent cells (``basis``), the first
    cell's input basis of X_t (N × B·F, the width of its input weight)."""
    width = model.layers[0].w_x.shape[0] if basis else F
    return N * width * torch.empty(0, dtype=dtype).element_size()


def _check_cache(o, entry_bytes: int, basis: bool) -> None:
    """Refuse ``strategy.cache_mb`` below one cache entry of ``entry_bytes`` (one line, ConfigError): the input
    aggregation Ã_t·X_t or, for graph-recurrent cells (``basis``), the first cell's input basis of X_t."""
    if int(o.cache_mb * 2**20) >= entry_bytes:
        return
    what = ("input basis (the first cell's convolution of X_t, ", "N × B·F") if basis else \
        ("input aggregation Ã_t·X_t (", "N × F")
    raise ConfigError(f"strategy.cache_mb: {o.cache_mb:g} MiB cannot hold one snapshot's {what[0]}"
                      f"{entry_bytes / 2**20:.4g} MiB, {what[1]}), what every sample reads; raise it to at least "
                      "that, or set strategy.reuse: off")


class SequenceSamples:
    """Mixin: the epoch's samples (R4) and their draws, from ``N``, ``opts`` (the strategy's options), ``seqs``,
    ``ctx.job`` and :func:`sampling_of`'s attributes; the strategy trains them and the planner counts their rows
    (:mod:`hpcdgnn.planner.samples`)."""

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

    def teacher_draws(self, epoch: int, seq: Sequence, b: int, train: bool) -> list[bool]:
        """Which decoder steps are teacher-forced, drawn from (seed, epoch, sequence, node batch), never P."""
        p = self.ctx.job.model.teacher_forcing
        if not train or p <= 0:
            return [False] * self.horizon
        draw = np.random.default_rng([self.ctx.job.train.seed, epoch, seq.index, b, 0x7EAC]).random(self.horizon)
        return [d > 0 and bool(draw[d] < p) for d in range(self.horizon)]

    def decoder_steps(self, epoch: int, seq: Sequence, b: int, train: bool) -> list[int | None]:
        """The snapshot each decoder step reads (ReInc §3.1): t + d when teacher-forced or d = 0, else None."""
        if not self.reads_snapshots:
            return [None] * self.horizon
        teach = self.teacher_draws(epoch, seq, b, train)
        return [seq.t + d if d == 0 or teach[d] else None for d in range(self.horizon)]

    def _rng(self, epoch: int, seq: Sequence, b: int, train: bool) -> np.random.Generator:
        """The neighbour sampler of one sample: seeded by (seed, epoch, sequence, node batch), never by P."""
        return np.random.default_rng([self.ctx.job.train.seed, epoch, seq.index, b, 0 if train else 1, 0x5A])


@register_strategy("sequences")
class SequencesStrategy(SequenceSamples, SampleGraphs, Strategy[SampleBatch]):
    """Sliding-window sequences × node batches, one model replica per rank."""

    #: its evaluation pass embeds the validation and test steps (training samples run with changing weights)
    embeds = ("val", "test")

    @classmethod
    def step_graphs_at(cls, num_ranks: int) -> bool:
        """Graph-recurrent cells run at any P: each sample gets every step's graph over its receptive field."""
        return True

    @classmethod
    def make_plan(cls, manifest, num_ranks: int, job) -> PartitionPlan:
        """Consecutive blocks of sequences per rank (R1), and the snapshots each holds."""
        return plan_sequences(manifest, num_ranks, job)

    @classmethod
    def check_data(cls, job, manifest, where: str | None) -> None:
        """Refuse node batches larger than the graph, and a reuse cache (R3) smaller than the one entry every
        sample reads (the model built on meta).

        ``batch_vertices`` above N cut one batch of every vertex, as 0 does, and ``batch_samples`` above the
        epoch's training samples make one step of them all: values that read as batch sizes but are none are
        refused, not trained silently as the whole epoch (both are global, independent of P, so no rank count
        gives them another meaning).
        """
        o, at = job.strategy, f"{where}: " if where else ""
        N, B = manifest.num_vertices, o.batch_vertices
        if B > N:
            raise ConfigError(f"{at}strategy.batch_vertices: {B}, but the dataset {job.data.path} has N = {N} "
                              f"vertices; choose at most {N} (0 = all of them)")
        trained = sum(s.split == 0 for s in sequences_of(manifest, job))  # none: the plan says why
        batches = -(-N // (B or N))
        if trained and o.batch_samples > trained * batches:
            raise ConfigError(f"{at}strategy.batch_samples: {o.batch_samples}, but an epoch has only "
                              f"{trained * batches} training samples ({trained} training sequences × {batches} node "
                              f"batches of strategy.batch_vertices: {B}); choose at most {trained * batches}")
        if job.strategy.reuse != "on":
            return
        from hpcdgnn.regimes import regime_of

        with torch.device("meta"):
            model = regime_of("model", job.model.name).build_model(job, manifest)
        s = sampling_of(model, job)
        if s["reads_ax"] or s["reads_basis"]:
            entry = _entry_bytes(model, s["reads_basis"], manifest.num_vertices, manifest.num_features,
                                 getattr(torch, job.train.dtype))
            try:
                _check_cache(job.strategy, entry, s["reads_basis"])
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}" if where else str(e)) from None

    @classmethod
    def cost(cls, plan: PartitionPlan, job, manifest, graph, work) -> list:
        """The planner's per-rank work and traffic under ``plan``: samples counted by this sampler
        (:func:`~hpcdgnn.planner.samples.sequences_cost`)."""
        from hpcdgnn.planner.samples import sequences_cost

        return sequences_cost(plan, job, manifest, graph, work)

    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """Read the snapshots of my sequences (``overlap``) or of my block (``fetch``); normalise them."""
        o, job, me = self.ctx.job.strategy, self.ctx.job, self.comm.rank
        vars(self).update(sampling_of(model, job))
        self._targets: dict[int, torch.Tensor] = {}
        self.plan, self.N, self.opts = plan, plan.num_vertices, o
        self.seqs = sequences_of(self.ctx.manifest, job)
        a, b = plan.ranks[me]["sequences"]
        self.mine = self.seqs[a:b]
        self._mine_ids = set(range(a, b))
        self._own = plan.snapshot_bounds
        lo, hi = plan.ranks[me]["window_snapshots"]
        self._reads = [tuple(r["window_snapshots"]) for r in plan.ranks]
        self.host: dict[int, HostSnapshot] = {}
        # fetch reads only my block (others' windows may need it), not the snapshots after it
        read_lo, read_hi = (lo, hi) if o.placement == "overlap" else (self._own[me], self._own[me + 1])
        raw = []
        for t in range(read_lo, read_hi):
            self.host[t], snap = self._read(reader, t)
            if self.cells:  # their operators (L̂_t, P_f, P_b) are built from A_t, not from Ã_t
                self.host[t].raw = (snap.indptr, snap.indices, snap.weights)
            raw.append(snap)
        self._fetched: dict[int, HostSnapshot] = {}
        self.cache: ReuseCache | None = None
        self._incremental: dict | None = None
        self._r2: tuple[int, IncrementalAggregator] | None = None
        self._fills = {"incremental": 0, "scratch": 0}
        self._stream: list[tuple] = []
        self._resumed_clock: int | None = None
        self._entry_bytes = 0
        if self.reads_ax or self.reads_basis:
            F = raw[0].x.shape[1] if raw else self.ctx.manifest.num_features
            self._entry_bytes = _entry_bytes(model, self.reads_basis, self.N, F, self.ctx.dtype)
            _check_cache(o, self._entry_bytes, self.reads_basis)  # the same on every rank: all of them stop
        if o.reuse == "on" and (self.reads_ax or self.cells):  # the cells' local level counts without either
            self.cache = ReuseCache(int(o.cache_mb * 2**20), o.cache_policy, unit_bytes=max(self._entry_bytes, 1))
            self._plan(self.ctx.start_epoch + 1)  # set-up's fills are admitted for the epoch that runs next
        if self.reads_ax:
            for t, ax in self._precompute(list(range(read_lo, read_hi)), raw).items():
                self.cache.offer(self._input_key(t), ax, "setup")
        self._stat_width: int | None = None
        self.scored_step = self.seqs[0].t
        self.task = task
        return Scored(snapshots=tuple(sorted({s.t for s in self.mine})))

    def _read(self, reader, t: int):
        """Snapshot t as read (raw CSR) and on the host for sampling (:class:`HostSnapshot`)."""
        snap = reader.read(t)
        x = torch.from_numpy(np.ascontiguousarray(snap.x)).to(self.ctx.dtype)
        return HostSnapshot.normalised(t, snap.indptr, snap.indices, snap.weights, x), snap

    def _precompute(self, ts: list[int], raw: list) -> dict[int, torch.Tensor]:
        """Ã_t·X_t (N, F) of consecutive snapshots ``ts``: by R2's Eq. 2 or from scratch, in float64."""
        if not ts:
            return {}
        xs = [torch.from_numpy(np.ascontiguousarray(s.x)).to(torch.float64) for s in raw]
        if self.opts.incremental == "on":
            agg = IncrementalAggregator([(s.indptr, s.indices, s.weights) for s in raw], kind="gcn",
                                        threshold=self.opts.incremental_threshold, dtype=torch.float64)
            out, stats = agg.aggregate(xs)
            self._incremental = stats.as_dict()
            self._r2 = (ts[0], agg)  # a later miss of Agg_t may start from a cached Agg_{t-1}
        else:
            out = [torch.sparse.mm(gcn_norm(t, s.indptr, s.indices, s.weights, torch.float64).a, x)
                   for t, s, x in zip(ts, raw, xs, strict=True)]
        return {t: y.to(self.ctx.dtype) for t, y in zip(ts, out, strict=True)}

    def _input_key(self, t: int) -> tuple:
        """The cache key of layer 0's input aggregation (Ã_t·X_t, or the first cell's basis) at snapshot t."""
        if not self.reads_basis:
            return ("global", 0, t, "all")
        cell = self.encoder[0]
        return ("global", 0, t, ("basis", type(cell).__name__, cell.order))

    def _input_reads(self, epoch: int, seq: Sequence, b: int, train: bool) -> list[int]:
        """The snapshots whose input aggregation one sample reads, in order: its window's, then its decoder's."""
        reads = list(range(seq.start, seq.stop))
        if self.reads_basis and self.reads_snapshots:
            reads += [t for t in self.decoder_steps(epoch, seq, b, train) if t is not None]
        return reads

    def _access_stream(self, epoch: int) -> list[tuple]:
        """This rank's cache keys read in one epoch, in order (training, then evaluation)."""
        keys = []
        for split in (0, 1, 2):
            for seq, b in self._samples(epoch, split):
                if seq.index in self._mine_ids:
                    keys += [self._input_key(t) for t in self._input_reads(epoch, seq, b, split == 0)]
        return keys

    def _plan(self, epoch: int) -> None:
        """Tell the cache this epoch's reads and the next's (Eq. 3's F and I).

        The next epoch counts even in the last one, so a run extended by ``--resume`` continues from the
        same cache as the longer straight run.
        """
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
        a = csr_tensor(torch.from_numpy(crow), torch.from_numpy(col), torch.from_numpy(val), (crow.shape[0] - 1, n))
        return torch.sparse.mm(a, h.x.to(torch.float64)).to(self.ctx.dtype)

    def input_rows(self, t: int, rows: np.ndarray) -> torch.Tensor:
        """Rows ``rows`` of Ã_t·X_t from the cache; if the policy rejects a miss, only these rows from scratch."""
        ax = self.cache.fetch(self._input_key(t), lambda: self._fill_input(t), self._entry_bytes)
        return self._aggregate_input(t, rows) if ax is None else ax.index_select(0, torch.from_numpy(rows))

    def _fill_input(self, t: int) -> torch.Tensor:
        """Ã_t·X_t after a miss: by Eq. 2 from a cached Agg_{t-1} (ReInc §3.3.1), else from scratch."""
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
        pair = copy.copy(agg)  # R2's own step t over (t-1, t), its step 0 the cached value
        pair.adj, pair.deltas = [_KnownProduct(before, known), agg.adj[i]], [agg.deltas[i - 1]]
        out, stats = pair.aggregate([self.snapshot(u).x.to(torch.float64) for u in (t - 1, t)])
        self._fills[stats.steps[1].mode] += 1
        return out[1].to(self.ctx.dtype)

    def input_basis(self, graph: RowsStepGraph, part: str) -> torch.Tensor:
        """The first cell's input basis of X_t at ``graph``'s rows, from the cache (``part``: encoder/decoder).

        A rejected miss computes the basis over ``graph`` itself, equal at every row the sample's outputs read.
        """
        cell, t, dtype = self.encoder[0], graph.t, self.ctx.dtype

        def basis(g: StepGraph, x: torch.Tensor) -> torch.Tensor:
            return cell.basis(cell.operator(g, dtype), x)

        def fill() -> torch.Tensor:
            self._fills["scratch"] += 1
            return basis(self.whole_graph(t), x)

        x = self.snapshot(t).x
        full = self.cache.fetch(self._input_key(t), fill, self._entry_bytes, part)
        idx = torch.from_numpy(graph.rows)
        if full is None:
            return basis(graph, x.index_select(0, idx).to(self.ctx.device))
        return full.index_select(0, idx).to(self.ctx.device)

    def state_dict(self) -> dict:
        """The reuse cache's entries (and its place in the epoch's planned reads): later hits and refill paths
        (hence rounding) depend on them."""
        return {} if self.cache is None else {"reuse_cache": self.cache.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; without a saved cache (other P) set-up's fills stay, not bit for bit."""
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
        self._resumed_clock = saved.get("clock")  # where a resume within an epoch continues the planned reads
        try:
            self.cache.load_state_dict(saved)
        except ValueError as e:
            raise ConfigError(f"--resume: strategy.cache_mb / cache_policy: {e}") from None

    def report(self, epoch: int, train_loss: float) -> dict:
        """R2's setup work and R3's cache counters this epoch, summed over ranks."""
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
        """The epoch record's ``reuse`` entry (:attr:`REPORT`, summed over ranks) and the hit rate."""
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

    def snapshot(self, t: int) -> HostSnapshot:
        """Snapshot t: read at setup, or fetched this epoch."""
        return self.host[t] if t in self.host else self._fetched[t]

    def _fetch(self) -> None:
        """``placement: fetch``: send my block's snapshots other ranks' windows need; receive mine."""
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
                    self._fetched[t] = HostSnapshot(crow, col, val, x, raw)
        self.comm.wait_all(sends, "placement.fetch")

    def batches(self, epoch: int, start: int = 0) -> Iterator[SampleBatch]:
        """Global mini-batches of ``batch_samples`` training samples; each rank keeps its own sequences'. From
        batch ``start`` on, the reuse cache at its place in the epoch's planned reads (a resume within the epoch)."""
        if self.opts.placement == "fetch":
            # not load: its seconds are its placement.fetch exchanges', already communication
            self._fetch()
        if self.cache is not None:
            self.cache.reset_counters()
            self._fills = dict.fromkeys(self._fills, 0)
            self._plan(epoch)
        nodes = self.node_batches(epoch)
        samples = self._samples(epoch, 0)
        Q = self._samples_per_batch()
        if start and self.cache is not None and self._stream:
            # the saved clock; without one (another rank count), the reads of my samples before batch ``start``
            before = (len(self._input_reads(epoch, s, b, True)) for s, b in samples[: start * Q]
                      if s.index in self._mine_ids)
            self.cache.seek(self._resumed_clock if self._resumed_clock is not None else sum(before))
        for g in range(start * Q, len(samples), Q):
            local = [(s, b) for s, b in samples[g : g + Q] if s.index in self._mine_ids]
            count = sum(self.task.sample_examples(s.t, nodes[b], epoch) for s, b in local)
            examples = float(self.comm.allreduce_array([count], tag="batch")[0])
            yield SampleBatch(epoch, g // Q, examples if examples > 0 else 1.0, [(s, nodes[b], b) for s, b in local])

    def _run(self, model: DGNN, task, epoch: int, seq: Sequence, batch: np.ndarray, b: int, train: bool):
        vertices = task.sample_vertices(seq.t, batch, epoch)
        layout = SampleLayout(self, seq, batch, vertices, self._rng(epoch, seq, b, train),
                              epoch=epoch, b=b, train=train)
        # each window starts afresh: per-step parameters from their initial state (EvolveGCN-O's W_0)
        layout.states = [(layer.initial_time_state(), None) for layer in model.layers]
        cells = [*self.encoder, *(self.decoder or [])]
        with local_level(self.cache, cells) if self.cache is not None and self.cells else nullcontext():
            out = model(layout)
        return task(out, epoch)

    def _samples_per_batch(self) -> int:
        """Q: ``batch_samples``, or the training sequences' count (one node batch's samples a batch)."""
        return self.opts.batch_samples or sum(s.split == 0 for s in self.seqs)

    def stops_between_batches(self, epoch: int) -> bool:
        """Where the epoch has more than one batch (:meth:`batches`): a batch's only collectives (its example
        count, the gradient sum) run with the batch."""
        return len(self._samples(epoch, 0)) > self._samples_per_batch()

    def resumes_between_batches(self, epoch: int) -> bool:
        """Always where it stops: samples and their draws are seeded by (epoch, sequence, node batch), and the
        reuse cache (:meth:`state_dict`: its entries and its place in the planned reads) is the only state."""
        return self.stops_between_batches(epoch)

    def resumes_evaluation(self, epoch: int) -> bool:
        """Always: its samples' draws are seeded by (epoch, sequence, node batch), and an abandoned pass puts the
        reuse cache back as training left it (:meth:`evaluate`), its place in the planned reads included."""
        return True

    def step(self, model: DGNN, task, batch: SampleBatch, scale: float) -> np.ndarray:
        """Forward, loss × ``scale`` and backward of each of my samples in turn (gradients accumulate)."""
        stats = None
        for seq, nodes, b in batch.samples:
            out = self._run(model, task, batch.epoch, seq, nodes, b, train=True)
            (out.loss_sum * scale).backward()
            stats = out.stats if stats is None else stats + out.stats
        return stats if stats is not None else self._zero_stats(model, task, batch.epoch)

    def evaluate(self, model: DGNN, task, epoch: int, stop=None) -> np.ndarray:
        """Validation and test sums: my sequences of those splits × every node batch, without gradient; ``stop``
        (the base's) is asked before each round of one sample of every rank's own — a rank waits for no other's
        (ranks own different splits' sequences); a stop puts the reuse cache back as training left it (its
        entries are references to tensors never written in place: the copy is a list of them)."""
        nodes = self.node_batches(epoch)
        stats = None
        mine = [(seq, b) for split in (1, 2) for seq, b in self._samples(epoch, split) if seq.index in self._mine_ids]
        rounds = len(mine) if stop is None else int(self.comm.allreduce_array([len(mine)], "max",
                                                                               tag="control.stop")[0])
        trained = self.cache.state_dict() if stop is not None and self.cache is not None else None
        with torch.no_grad():
            for r in range(rounds):
                if stop is not None and stop(r):
                    if trained is not None:  # the checkpoint of the trained epoch holds it: a resume evaluates again
                        self.cache.load_state_dict(trained)
                    break
                if r < len(mine):
                    seq, b = mine[r]
                    out = self._run(model, task, epoch, seq, nodes[b], b, train=False).stats
                    stats = out if stats is None else stats + out
        return stats if stats is not None else self._zero_stats(model, task, epoch)

    def _host_bytes(self) -> int:
        """Snapshots held on the host (read and fetched), and the reuse cache's entries."""
        cached = 0 if self.cache is None else self.cache.bytes
        return sum(h.nbytes for h in self.host.values()) + sum(h.nbytes for h in self._fetched.values()) + cached
