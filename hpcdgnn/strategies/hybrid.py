"""H1 + H2 (+ H3's fixed and random adjusters): DynaHB's hybrid batches (DynaHB §4–5, SPEC Family H).

*H1* (§4.1–4.2, Alg. 1): vertices are dealt to ranks by load (:mod:`hpcdgnn.partition.load_aware`). A rank
reads, once at set-up, the rows its vertices' outputs read — ``closure: receptive``: every row of their
receptive field (exact); ``lhop``: L hops (graph-recurrent cells then run on the subgraph those rows induce) —
and training moves no data; only gradients are summed.

*H2* (Def. 3, §4.2): a hybrid batch is N_S consecutive snapshots from a start drawn in [0, T_train − N_S] ×
N_V target vertices, N_V / N_bg from each stratum of the load order; both depend on (seed, epoch, batch,
action) only, so on no P. Each rank trains the targets it owns over the window from a zero state, scoring
them at *every* step of the window (Alg. 2 l. 7–10). The loss is the sum over the batch's examples divided by
their global count (Alg. 2 averages per-snapshot means instead: with equal counts per step the two agree).
T_train is the end of the training steps: windows never cross into validation steps. Evaluation runs each
rank's vertices over the whole timeline from t = 0.

*H3* here: ``adjuster.kind: fixed`` keeps one action (N_S, N_V) of SS × VS (Def. 5), ``random`` draws one per
batch from (seed, epoch, batch).

*H4* (§5.2, Alg. 3): ``reservoir.mode: on`` keeps built batches (:mod:`hpcdgnn.strategies.reservoir`).

*H5* (Alg. 2 l. 14–15), ``averaging.mode: async``: ranks step on their own examples with no per-step
collective. After T_mu seconds (``every_s``; or ``every_steps``) a rank posts a non-blocking barrier and tests it
after each step; once every rank has posted, each joins one all-reduce averaging the parameters and both Adam
moments (the paper averages the model; averaging the moments too keeps one optimizer state). A rank that has
finished its epoch's steps keeps joining rounds until every rank has: the all-reduce carries the count of
finished ranks, so all leave after the same round, holding the same bits.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.errors import ConfigError
from hpcdgnn.indices import intersect_ints, setdiff_ints, union_ints, unique_ints
from hpcdgnn.metrics.log import get_logger
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.ops.sparse import csr_tensor
from hpcdgnn.partition.load_aware import plan_hybrid, vertex_loads
from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds
from hpcdgnn.partition.sequences import Sequence
from hpcdgnn.strategies.adjuster import BatchAdjuster
from hpcdgnn.strategies.base import SampleBatch, Scored, Strategy
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.strategies.reservoir import BatchReservoir, Stored
from hpcdgnn.strategies.sample_layout import SampleLayout
from hpcdgnn.strategies.sampling import HostSnapshot, SampleGraphs, _expand, graph_cells
from hpcdgnn.tasks import task_class
from hpcdgnn.tasks.base import SampleEmbeddings

__all__ = ["HybridBatches", "HybridLayout", "HybridSample", "HybridStrategy", "action_sizes", "hybrid_of"]


@dataclass(frozen=True)
class HybridSample:
    """This rank's part of one hybrid batch: the window ``seq``, its ``targets`` (ascending), the action, and
    its built layout when it comes from the reservoir (H4)."""

    seq: Sequence
    targets: np.ndarray
    action: int
    layout: HybridLayout | None = None


def action_sizes(fractions: tuple[float, float], num_vertices: int, train_steps: int,
                 num_snapshots: int) -> tuple[int, int]:
    """(N_S, N_V) of an action: fractions of T and N, at least 1, N_S at most the training steps."""
    n_s = min(max(1, round(fractions[0] * num_snapshots)), train_steps)
    return n_s, max(1, round(fractions[1] * num_vertices))


def _hops(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, k: int) -> np.ndarray:
    """``seeds`` and every vertex within ``k`` hops along CSR rows (what a row aggregates)."""
    out = frontier = seeds
    for _ in range(k):
        frontier = setdiff_ints(indices[_expand(indptr[frontier], indptr[frontier + 1] - indptr[frontier])], out)
        if frontier.shape[0] == 0:
            break
        out = union_ints(out, frontier)
    return out


def union_csr(edges: list[tuple[np.ndarray, np.ndarray]], num_vertices: int) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the union of the snapshots' ``edges`` (src, dst), each edge once.

    Shapes:
        edges: T pairs of (E_t,) int64 arrays -> indptr (N + 1,), indices (E_∪,)."""
    N = num_vertices
    keys = unique_ints(np.concatenate([src * N + dst for src, dst in edges])) if edges else np.zeros(0, np.int64)
    src, dst = np.divmod(keys, N)
    return np.concatenate([[0], np.cumsum(np.bincount(src, minlength=N))]), dst


class HybridLayout(SampleLayout):
    """One hybrid batch on one rank: its targets' rows at every step of the window (Alg. 2 l. 7–10)."""

    every_step = True

    def output(self, h: torch.Tensor) -> list[SampleEmbeddings]:
        """One :class:`SampleEmbeddings` per step of the window, the targets as the scored batch."""
        self.last = h
        if self.cells is not None:
            h = h.index_select(1, torch.from_numpy(np.searchsorted(self.cells, self.vertices)).to(h.device))
        return [SampleEmbeddings(t, h[k], self.vertices, self.batch)
                for k, t in enumerate(range(self.seq.start, self.seq.stop))]


def _block_bytes(block) -> int:
    """Bytes of a snapshot's rows as read (``ShardReader.read_rows``): what ``strategy.max_cache_mb`` limits."""
    return block.indptr.nbytes + block.indices.nbytes + block.weights.nbytes + block.x.nbytes


def _over_cache(rank: int, held: int, rows: int, N: int, limit: float) -> ConfigError:
    """The refusal of a closure over ``strategy.max_cache_mb``."""
    return ConfigError(f"strategy.max_cache_mb: rank {rank}'s closure holds {held / 2**20:.4g} MiB ({rows} of {N} "
                       f"vertices), over {limit:g}; raise it, or use closure: lhop or more ranks")


def hybrid_of(plan: PartitionPlan, model: DGNN, job, manifest) -> dict:
    """How a ``hybrid`` job's batches are drawn and run (the attributes :class:`HybridBatches`,
    :class:`SampleGraphs` and :class:`HybridLayout` read); the planner's count of a batch's rows reads the same."""
    N, o = plan.num_vertices, job.strategy
    cells = graph_cells(model, job)
    owner = np.empty(N, dtype=np.int64)
    for p in range(plan.num_ranks):
        owner[plan.vertices_of(p)] = p
    ranges = task_class(job.task.name).steps(job.task, manifest)
    return {
        "N": N, "T": plan.num_snapshots, "cells": cells, "encoder": list(model.layers), "decoder": None,
        "horizon": 0, "num_layers": len(model.layers),
        "fanout": [0] * len(model.layers),  # DynaHB samples targets, never neighbours
        #: S4 (IBM §5.5): a plain GCN first layer reads Ã_t·X_t, computed once at set-up for the rows read
        "reads_ax": bool(model.layers[0].precomputable) and not cells, "reads_basis": False,
        "reads_snapshots": False, "owner": owner, "load_order": np.asarray(plan.load_order, dtype=np.int64),
        "strata": balanced_bounds(N, o.groups), "ranges": ranges, "train_stop": ranges[0].stop,
        "stop": max(r.stop for r in ranges if len(r)) if any(len(r) for r in ranges) else 0,
        "actions": o.actions()}


class HybridBatches:
    """Mixin: H2's batches (Def. 3, §4.2) and their layouts, from :func:`hybrid_of`'s attributes, ``opts`` (the
    strategy's options) and ``ctx.job``; the strategy trains them and the planner counts their rows
    (:mod:`hpcdgnn.planner.samples`)."""

    def sizes(self, action: int) -> tuple[int, int]:
        """(N_S, N_V) of ``action``."""
        return action_sizes(self.actions[action], self.N, self.train_stop, self.T)

    def draw(self, epoch: int, index: int, action: int) -> tuple[int, np.ndarray]:
        """Batch ``index``'s window start and its global targets (ascending): a function of (seed, epoch, index,
        action), N_V / N_bg from each stratum of the load order (§4.2)."""
        return self._draw(np.random.default_rng([self.ctx.job.train.seed, epoch, index, action, 0x4B]), action)

    def _draw(self, rng: np.random.Generator, action: int) -> tuple[int, np.ndarray]:
        n_s, n_v = self.sizes(action)
        start = int(rng.integers(0, self.train_stop - n_s + 1))
        per = np.diff(balanced_bounds(n_v, len(self.strata) - 1))
        picks = []
        for k, want in enumerate(per):
            lo, hi = self.strata[k], self.strata[k + 1]
            picks.append(self.load_order[lo + rng.choice(hi - lo, min(int(want), hi - lo), replace=False)])
        return start, np.sort(np.concatenate(picks))

    def used_actions(self) -> list[int]:
        """The actions a run may take: the start action under ``adjuster.kind: fixed``, else every one."""
        return [self.opts.start_action()] if self.opts.adjuster.kind == "fixed" else list(range(len(self.actions)))

    def steps_per_epoch(self) -> int:
        """``steps_per_epoch``, or one expected pass: N·T_train / E[N_S·N_V] over the actions in use."""
        if self.opts.steps_per_epoch:
            return self.opts.steps_per_epoch
        mean = np.mean([math.prod(self.sizes(a)) for a in self.used_actions()])
        return max(1, math.ceil(self.N * self.train_stop / mean))

    def closure(self, seeds: np.ndarray, union: Callable[[], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """H1's rows of ``seeds``' outputs in snapshots 0..stop-1, ascending: with ``closure: receptive`` and
        graph-recurrent cells their receptive closure (:meth:`SampleGraphs.cell_rows`, every step scored), else L
        hops over ``union()``, the union of the snapshots' edges as (indptr, indices): a vertex's recurrence
        between layers runs through every step, so a row a layer needs at one step it needs at all."""
        if self.cells and self.opts.closure == "receptive":
            return self.cell_rows(Sequence(0, 0, self.stop, 0), seeds, np.random.default_rng(0), None, True)
        indptr, indices = union()
        return _hops(indptr, indices, seeds, self.num_layers)

    def _steps(self, seq: Sequence, splits: tuple[int, ...]) -> list[int]:
        """The window's steps in ``splits``."""
        return [t for t in range(seq.start, seq.stop) if any(t in self.ranges[s] for s in splits)]

    def _layout(self, task, epoch: int, seq: Sequence, targets: np.ndarray, splits: tuple[int, ...]) -> HybridLayout:
        """The window's layout over ``targets`` and the vertices the task reads besides them."""
        reads = (task.sample_vertices(t, targets, epoch) for t in self._steps(seq, splits))
        vertices = unique_ints(np.concatenate([targets, *reads]))
        rng = np.random.default_rng([self.ctx.job.train.seed, epoch, seq.index, 0x5A])
        return HybridLayout(self, seq, targets, vertices, rng, epoch=epoch, b=seq.index, train=splits == (0,))


@register_strategy("hybrid")
class HybridStrategy(HybridBatches, SampleGraphs, Strategy[SampleBatch]):
    """Hybrid batches over load-partitioned vertices, one model replica per rank."""

    #: its evaluation pass embeds the validation and test steps (training samples run with changing weights)
    embeds = ("val", "test")

    setup_work = "read the closure's rows + normalise"
    replicated_state = True

    @classmethod
    def step_graphs_at(cls, num_ranks: int) -> bool:
        """Graph-recurrent cells run at any P: a batch gets every step's graph over its receptive rows."""
        return True

    @classmethod
    def check_reads(cls, plan: PartitionPlan, job, manifest) -> None:
        """``check``: what the set-up refuses once it has read each rank's closure: ``strategy.max_cache_mb`` and
        ``strategy.reservoir.max_mb`` (:meth:`_check_parts`, each rank's closure read once, as its set-up
        reads it)."""
        from hpcdgnn.data.shard_reader import ShardReader

        if job.strategy.max_cache_mb or job.strategy.reservoir.mode == "on":
            with ShardReader(job.data.path, manifest) as reader:
                cls._check_parts(plan, job, manifest, reader)

    @classmethod
    def unpriced(cls, job) -> list[str]:
        """The batch reservoir (H4): its stored batches train again, each snapshot batch (every vertex of N_S
        snapshots) with its activations, which the counted draws leave out."""
        if job.strategy.reservoir.mode != "on":
            return []
        return ["reservoir not priced: its snapshot batches (every vertex) can hold several times the memory and "
                "time shown (reservoir.mode: off to compare)"]

    @classmethod
    def cost(cls, plan: PartitionPlan, job, manifest, graph, work) -> list:
        """The planner's per-rank work and traffic under ``plan``: batches counted by this strategy's draws and
        layouts (:func:`~hpcdgnn.planner.samples.hybrid_cost`)."""
        from hpcdgnn.planner.samples import hybrid_cost

        return hybrid_cost(plan, job, manifest, graph, work)

    @classmethod
    def check_data(cls, job, manifest, where: str | None) -> None:
        """Refuse more load groups (N_bg) than vertices: a group would hold none, and every batch draws
        N_V / N_bg targets from each group (§4.2)."""
        groups, N = job.strategy.groups, manifest.num_vertices
        if groups > N:
            raise ConfigError(f"{where + ': ' if where else ''}strategy.groups: {groups} load groups, but the "
                              f"dataset has N = {N} vertices; choose at most {N}")

    @classmethod
    def make_plan(cls, manifest, num_ranks: int, job) -> PartitionPlan:
        """H1's plan, after refusing a reservoir for a task that reads other vertices each epoch, or T_mu at or
        above the watchdog's timeout (ConfigError).

        The encoder–decoder is refused earlier, by the regime (it forecasts under ``sequences`` only). A vertex
        batch smaller than P × groups is not refused (:meth:`setup` warns): a rank then may own no target of a
        batch and waits, which costs time, not correctness."""
        o = job.strategy
        if o.reservoir.mode == "on" and task_class(job.task.name).reads_beyond_batch():
            raise ConfigError(f"strategy.reservoir.mode: on stores batches for the node tasks; task.name: "
                              f"{job.task.name} draws the vertices it reads each epoch; set reservoir.mode: off")
        a, stall = o.averaging, job.comm.stall_timeout_s
        if a.mode == "async" and not a.every_steps and stall and a.every_s >= stall:
            raise ConfigError(f"strategy.averaging.every_s: {a.every_s:g} s is not below comm.stall_timeout_s "
                              f"({stall:g} s): the watchdog would stop ranks waiting for a round; lower it")
        return plan_hybrid(manifest, num_ranks, job)

    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """Read my vertices' closure once (H1); keep the load order and owners for drawing batches (H2)."""
        job, o = self.ctx.job, self.ctx.job.strategy
        edges = self._read(plan, model, task, reader)
        #: Alg. 1's loads as the plan computed them, for ``reward_time: work`` only
        self.loads = None
        if o.adjuster.reward_time == "work":
            self.loads = vertex_loads(edges + [reader.edges(t) for t in range(self.stop, self.T)], self.N,
                                      job.model.layers)
        self._warn_small_batches()
        self._refuse_over_cache()  # local: agree() carries it to every rank
        self._stat_width: int | None = None
        self.scored_step = self.ranges[0][0]
        self._used = np.zeros(len(self.actions), dtype=np.int64)
        self._idle = 0  # this epoch's batches in which I own no target
        self._optimizer = None
        self.adjuster = BatchAdjuster(o.adjuster, len(self.actions), o.start_action(), job.train.seed)
        self._loss_sum = 0.0
        self._since_round = np.zeros(5)
        self.reservoir: BatchReservoir | None = None
        self._first: Stored | None = None
        #: the stored batch the step being trained reuses (recounted once it has trained)
        self._trained: Stored | None = None
        #: (action, its store's size before) where selecting the batch not yet trained stored one (threads: 0)
        self._selected: tuple[int, int] | None = None
        self._snapshot_mb: float | None = None
        self._picks = dict.fromkeys(("reused", "snapshot", "fresh", "p"), 0.0)
        self._generator_reported = 0.0  # the reservoir generators' seconds at the last epoch's report
        if o.reservoir.mode == "on":
            T_train = self.train_stop
            caps = [max(1, int(self.N * T_train / math.prod(self.sizes(a)) / len(self.actions)))
                    for a in range(len(self.actions))]
            self.reservoir = BatchReservoir(o.reservoir, caps, self._build)
            # synchronous, inline: every rank's stores must match, so "max_mb reached" is agreed (reservoir.py)
            self.reservoir.agreed = o.averaging.mode == "allreduce" and o.reservoir.threads == 0
            self._first = self._first_stored()
        self._pending, self._since, self._steps_since, self._rounds = None, None, 0, 0
        return Scored(snapshots=tuple(range(self.stop)))

    def _read(self, plan: PartitionPlan, model: DGNN, task, reader,
              edges: list[tuple[np.ndarray, np.ndarray]] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """What a batch is built from: the draw's attributes (:func:`hybrid_of`), my vertices and their closure's
        rows (H1), read once; returns the edges of snapshots 0..stop-1 (the closure's union), read unless given
        (``check`` builds every rank's part in one process: the same edges for each)."""
        self.plan, self.opts, self.task = plan, self.ctx.job.strategy, task
        vars(self).update(hybrid_of(plan, model, self.ctx.job, self.ctx.manifest))
        self._targets: dict[int, torch.Tensor] = {}
        self.mine = np.sort(np.asarray(plan.vertices_of(self.comm.rank), dtype=np.int64))
        self.host: dict[int, HostSnapshot] = {}
        edges = [reader.edges(t) for t in range(self.stop)] if edges is None else edges
        # a task whose samples read vertices besides the batch (link prediction's destinations and negatives)
        # may read any row: its closure is every vertex
        wide = task.reads_beyond_batch()
        self.read_rows = self._read_closure(reader, edges, np.arange(self.N) if wide else self.mine)
        return edges

    @classmethod
    def _check_parts(cls, plan: PartitionPlan, job, manifest, reader) -> None:
        """``check``: the set-up's refusals of a closure over ``max_cache_mb`` and of a ``reservoir.max_mb`` that
        holds no batch (:meth:`_first_stored`), in the set-up's order, raised for the first rank refused.

        Each rank's part is built as its set-up builds it, over its closure read from the shards: a stored
        batch's bytes are its built layout's (row sets, Ã blocks, a cell's step graphs in the weights' dtype as
        read), which the planner's structure (all-ones float64 weights, the whole graph for ``lhop``) would
        over-count for graph-recurrent cells, refusing batches that fit. One batch a rank, built only with the
        reservoir on.
        """
        from types import SimpleNamespace

        from hpcdgnn.regimes import regime_of

        regime = regime_of("model", job.model.name)
        with torch.device("meta"):  # a batch's layout reads the layers' kinds, never their weights
            model = regime.build_model(job, manifest)
        task = regime.task_of(job, manifest, model)  # a node task's batch reads its targets only: no set-up
        ctx = SimpleNamespace(job=job, manifest=manifest, dtype=getattr(torch, job.train.dtype),
                              device=torch.device("cpu"))
        edges = None
        for rank in range(plan.num_ranks):
            part = cls.__new__(cls)
            part.ctx, part.comm = ctx, SimpleNamespace(rank=rank, size=plan.num_ranks)
            edges = part._read(plan, model, task, reader, edges)
            part._refuse_over_cache()
            if job.strategy.reservoir.mode == "on":
                part._first_stored()

    def _refuse_over_cache(self) -> None:
        """Refuse (ConfigError) my closure's rows as read (:meth:`_read`) over ``strategy.max_cache_mb``."""
        limit = self.opts.max_cache_mb
        if limit and self.cache_bytes / 2**20 > limit:
            raise _over_cache(self.comm.rank, self.cache_bytes, self.read_rows.shape[0], self.N, limit)

    def _warn_small_batches(self) -> None:
        """Rank 0 warns once when the smallest vertex batch draws fewer than P × groups targets: each group then
        gives fewer targets than there are ranks, so in its batches a rank may own none and wait."""
        o, P = self.opts, self.comm.size
        if self.comm.rank != 0:
            return
        smallest = min(self.sizes(a)[1] for a in self.used_actions())
        if smallest < P * o.groups:
            get_logger().warning(
                f"warning: strategy.vertex_fractions: the smallest batch in use draws N_V = {smallest} of N = "
                f"{self.N} targets, fewer than P × groups = {P} × {o.groups}: in its batches a rank may own no "
                "target and wait (the trajectory is unchanged); raise the fraction or lower strategy.groups")

    def _read_closure(self, reader, edges: list, seeds: np.ndarray) -> np.ndarray:
        """Read the rows of ``seeds``' closure in snapshots 0..len(edges)-1 (H1, ``ShardReader.read_rows``)."""
        T, N = len(edges), self.N
        if self.cells and self.opts.closure == "receptive":
            for t, (src, dst) in enumerate(edges):  # the cells' operators need only the pattern
                indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=N))])
                self.host[t] = HostSnapshot(None, None, None, None, raw=(indptr, dst, np.ones(dst.shape[0])))
        rows = self.closure(seeds, lambda: union_csr(edges, N))
        self.cache_bytes = 0
        self._ax: dict[int, torch.Tensor] = {}
        for t in range(T):
            self.host[t] = self._host(reader.read_rows(t, rows))
            if self.reads_ax:  # exact at the rows within L - 1 hops, the only ones read
                h = self.host[t]
                a = csr_tensor(torch.from_numpy(h.crow), torch.from_numpy(h.col), torch.from_numpy(h.val), (N, N))
                self._ax[t] = torch.sparse.mm(a, h.x.to(torch.float64)).to(self.ctx.dtype)
        return rows

    def input_rows(self, t: int, rows: np.ndarray) -> torch.Tensor:
        """Rows ``rows`` of Ã_t·X_t (S4), for :class:`SampleLayout`'s first layer."""
        return self._ax[t].index_select(0, torch.from_numpy(rows))

    def _host(self, block) -> HostSnapshot:
        """Snapshot ``block.t`` with only ``block.rows`` present (other rows empty, features zero)."""
        N, rows = self.N, block.rows
        counts = np.zeros(N, dtype=np.int64)
        counts[rows] = np.diff(block.indptr)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        x = np.zeros((N, block.x.shape[1]), dtype=block.x.dtype)
        x[rows] = block.x
        self.cache_bytes += _block_bytes(block)
        # Ã's rows in the closure are exact: their entries' degrees are rows read too
        raw = (indptr, block.indices, block.weights) if self.cells else None
        return HostSnapshot.normalised(block.t, indptr, block.indices, block.weights,
                                       torch.from_numpy(x).to(self.ctx.dtype), raw)

    def snapshot(self, t: int) -> HostSnapshot:
        """Snapshot t's rows read at set-up."""
        return self.host[t]

    def cell_rows(self, seq, vertices, rng, decoder=None, every_step=False) -> np.ndarray:
        """:meth:`SampleGraphs.cell_rows`, kept within the rows read (``lhop``: the induced subgraph)."""
        rows = super().cell_rows(seq, vertices, rng, decoder, every_step)
        if self.opts.closure == "lhop" and getattr(self, "read_rows", None) is not None:
            rows = intersect_ints(rows, self.read_rows)
        return rows

    def batches(self, epoch: int, start: int = 0) -> Iterator[SampleBatch]:
        """The epoch's hybrid batches from step ``start`` on (a resume within the epoch); each rank keeps the
        targets it owns.

        Under ``averaging.mode: async`` the code after each ``yield`` runs after the optimizer step: it asks for
        and joins averaging rounds (H5); the epoch ends with rounds until every rank has finished its steps."""
        asynchronous = self.opts.averaging.mode == "async"
        self._used = np.zeros(len(self.actions), dtype=np.int64)
        self._idle = 0
        self._rounds = 0
        self._picks = dict.fromkeys(("reused", "snapshot", "fresh", "p"), 0.0)
        self._trained = None
        if self.reservoir is not None and self._snapshot_mb is None:
            self._start_reservoir()
        if self._since is None:
            self._since = time.perf_counter()
        for g in range(start, self.steps_per_epoch()):
            a = self.adjuster.choose(epoch, g)
            self._used[a] += 1
            t0 = time.perf_counter()
            seq, mine, layout = self._select(epoch, g, a)
            count = sum(self.task.sample_examples(t, mine, epoch) for t in range(seq.start, seq.stop))
            # async: the loss over local examples, no collective per step. Synchronous, with agreed stores: the
            # sum carries beside the count whether any rank's stored bytes reached max_mb (no collective of its
            # own); the next step's selection reads it (applied after this step: a stop before it keeps the
            # flag the resumed selection of this step reads)
            agreed = self.reservoir is not None and self.reservoir.agreed
            full = False
            if asynchronous:
                examples = count
            elif agreed:
                examples, over = self.comm.allreduce_array([count, float(self.reservoir.over())], tag="batch")
                examples, full = float(examples), over > 0
            else:
                examples = float(self.comm.allreduce_array([count], tag="batch")[0])
            samples = [HybridSample(seq, mine, a, layout)] if mine.shape[0] else []
            self._idle += not samples
            self._loss_sum = 0.0
            yield SampleBatch(epoch, g, examples if examples > 0 else 1.0, samples)
            # resumed after the optimizer step
            self._selected = None
            if self._trained is not None:  # a stored batch that trained holds its operators now (reservoir.py)
                self.reservoir.recount(self._trained)
                self._trained = None
            if full:
                self.reservoir.full = True
            seconds = time.perf_counter() - t0
            work = self._work(a, mine)
            if asynchronous:
                self._since_round += np.array([self._loss_sum, count, seconds, work, 1.0])
                self._after_step()
            elif self.opts.adjuster.kind == "dqn":
                total = self.comm.allreduce_array([self._loss_sum, work], tag="adjuster")
                slowest = self._slowest(seconds)
                self.adjuster.observe(total[0] / examples if examples > 0 else 0.0,
                                      total[1] if self.opts.adjuster.reward_time == "work" else slowest)
        if asynchronous:
            while self._round(finished=True) < self.comm.size:
                pass

    def _select(self, epoch: int, index: int, action: int) -> tuple[Sequence, np.ndarray, HybridLayout | None]:
        """Batch ``index``'s window, my targets and (from the reservoir) its layout: Alg. 3's selector under
        ``reservoir.mode: on``, else a fresh draw."""
        rsv = self.reservoir
        if rsv is not None:
            rsv.check()
            if self.opts.reservoir.threads == 0:
                before = len(rsv.stores[action])
                rsv.fill(action)
                # a stop before this batch's step keeps the stores without it: the resume selects the batch again
                self._selected = (action, before) if len(rsv.stores[action]) > before else None
            rng = np.random.default_rng([self.ctx.job.train.seed, epoch, index, 0x75E])
            p = rsv.p(action)
            self._picks["p"] += p
            if rng.random() < p:
                item = rsv.pick(action, int(rng.integers(2**62)))
                self._trained = item
                self._picks["reused"] += 1
                return item.seq, item.targets, item.layout
            n_s = self.sizes(action)[0]
            if self._snapshot_mb * n_s <= self.opts.reservoir.max_batch_mb:
                self._picks["snapshot"] += 1
                start = int(rng.integers(0, self.train_stop - n_s + 1))
                return Sequence(index, start, start + n_s, 0), self.mine, None
            self._picks["fresh"] += 1
        start, targets = self.draw(epoch, index, action)
        mine = targets[self.owner[targets] == self.comm.rank]
        return Sequence(index, start, start + self.sizes(action)[0], 0), mine, None

    def _build(self, action: int, serial: int) -> Stored:
        """Stored batch ``serial`` of ``action``: a function of (seed, action, serial) only (H4)."""
        start, targets = self._draw(np.random.default_rng([self.ctx.job.train.seed, action, serial, 0x4B5]), action)
        mine = targets[self.owner[targets] == self.comm.rank]
        seq = Sequence(serial, start, start + self.sizes(action)[0], 0)
        return Stored(serial, seq, mine, self._layout(self.task, 0, seq, mine, (0,)) if mine.shape[0] else None)

    def _first_stored(self) -> Stored:
        """The start action's first stored batch, built at set-up to refuse a ``max_mb`` that holds no batch
        there: a refusal in :meth:`setup` reaches every rank (``agree``) before the run directory is kept, where
        one at the first batch left an ``--output`` directory without a checkpoint. Raised on the rank whose
        batch does not fit (its own targets' bytes); ``agree`` names it."""
        first, limit = self._build(self.opts.start_action(), 0), self.opts.reservoir.max_mb
        if first.nbytes > limit * 2**20:
            raise ConfigError(f"strategy.reservoir.max_mb: {limit:g} MiB holds no batch (one is "
                              f"{first.nbytes / 2**20:.4g} MiB); raise it")
        return first

    def _start_reservoir(self) -> None:
        """Before the first batch of a run not resumed: agree on the snapshot-batch size; then store the start
        action's first batch (built at set-up) and start the generator threads."""
        self._agree_snapshot_mb()
        first, self._first = self._first, None
        self.reservoir.serials[self.opts.start_action()] = 1
        self.reservoir._insert(self.opts.start_action(), first)
        self.reservoir.start()

    def _agree_snapshot_mb(self) -> None:
        """MiB the largest rank's rows take per snapshot: a snapshot batch's per step (one all-reduce)."""
        mib = self.cache_bytes / max(self.T, 1) / 2**20
        self._snapshot_mb = float(self.comm.allreduce_array([mib], op="max", tag="setup")[0])

    def _work(self, action: int, mine: np.ndarray) -> float:
        """My part of the batch's Def. 2 load: my targets' Alg. 1 loads (over all T) × N_S / T."""
        if self.opts.adjuster.reward_time != "work":
            return 0.0
        return float(self.loads[mine].sum()) * self.sizes(action)[0] / self.T

    def _slowest(self, seconds: float) -> float:
        """The slowest rank's ``seconds`` (``reward_time: measured``), else 0 without a collective."""
        if self.opts.adjuster.reward_time != "measured":
            return 0.0
        return float(self.comm.allreduce_array([seconds], op="max", tag="adjuster")[0])

    # ---- H5: asynchronous model averaging (Alg. 2 l. 14–15)

    def attach_optimizer(self, optimizer) -> None:
        """Keep the optimizer: an averaging round averages Adam's moments with the parameters."""
        self._optimizer = optimizer

    def sync_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """``allreduce``: the base sum over ranks; ``async``: none (a rank without targets steps with zero
        gradients, so every rank's Adam takes the same number of steps)."""
        if self.opts.averaging.mode == "allreduce":
            super().sync_gradients(params)
            return
        self.comm.exchange.complete_deferred()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def _after_step(self) -> None:
        """Ask for a round once T_mu (or ``every_steps``) has passed; join it once every rank has asked."""
        o, ex = self.opts.averaging, self.comm.exchange
        self._steps_since += 1
        if self._pending is None:
            due = self._steps_since >= o.every_steps if o.every_steps else \
                time.perf_counter() - self._since >= o.every_s
            if due:
                self._pending = ex.ibarrier("averaging.barrier")
                if o.every_steps:  # by count: every rank asks at the same step, so wait (deterministic)
                    ex.wait(self._pending)
        if self._pending is not None:
            ex.test([self._pending])
            if self._pending.done:
                self._round(finished=False)

    def _round(self, finished: bool) -> int:
        """One averaging round: wait for the barrier (posting it if not yet), then one all-reduce of the
        parameters, both Adam moments and a count of ranks ``finished`` with the epoch's steps; returns it."""
        ex = self.comm.exchange
        if self._pending is None:
            self._pending = ex.ibarrier("averaging.barrier")
        ex.wait(self._pending)
        self._pending, self._since, self._steps_since = None, time.perf_counter(), 0
        if self.opts.adjuster.kind == "dqn":  # the DQN learns per round from the steps since the last one
            loss, count, seconds, work, steps = self.comm.allreduce_array(self._since_round, tag="adjuster")
            self._since_round[:] = 0.0
            if steps > 0:
                self.adjuster.observe(loss / count if count > 0 else 0.0,
                                      work / steps if self.opts.adjuster.reward_time == "work" else seconds / steps)
        tensors = self._replica()
        flat = torch.cat([*(t.detach().reshape(-1) for t in tensors), tensors[0].new_tensor([float(finished)])])
        self.comm.allreduce_(flat, "sum", tag="averaging")
        done = int(round(float(flat[-1])))
        flat = flat[:-1] / self.comm.size
        offset = 0
        with torch.no_grad():
            for t in tensors:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()
        self._rounds += 1
        return done

    def _replica(self) -> list[torch.Tensor]:
        """What a round averages: the parameters, then each one's Adam moments (exp_avg, exp_avg_sq)."""
        opt = self._optimizer
        moments = [opt.state[i][k] for i in range(len(opt.params)) if i in opt.state for k in ("exp_avg", "exp_avg_sq")]
        return [*opt.params, *moments]

    def _run(self, model: DGNN, task, epoch: int, sample: HybridSample, splits: tuple[int, ...]):
        """Forward of one window over ``sample.targets``; the task's loss and sums over steps of ``splits``."""
        steps = self._steps(sample.seq, splits)
        layout = sample.layout or self._layout(task, epoch, sample.seq, sample.targets, splits)
        layout.states = [(layer.initial_time_state(), None) for layer in model.layers]
        loss, stats = None, None
        for emb in model(layout):
            if emb.t not in steps:
                continue
            out = task(emb, epoch)
            loss = out.loss_sum if loss is None else loss + out.loss_sum
            stats = out.stats if stats is None else stats + out.stats
        if loss is None:  # no scored step: keep the graph alive for the gradient all-reduce
            return layout.last.sum() * 0.0, self._zero_stats(model, task, epoch)
        return loss, stats

    def stops_between_batches(self, epoch: int) -> bool:
        """Under synchronous averaging, with more than one step: a step's collectives run with it; an
        asynchronous round may be in flight between steps (H5), and the epoch ends with rounds every rank joins."""
        return self.opts.averaging.mode != "async" and self.steps_per_epoch() > 1

    def resumes_between_batches(self, epoch: int) -> bool:
        """Always where it stops: the adjuster (:meth:`state_dict`) has observed the last step when the stop is
        asked, its choice of the next is a function of its state (or of the seed, epoch and step), and a fresh
        batch's draw is seeded by the same; the reservoir's stores (H4) are saved without the batch that selecting
        the next step stored inline (``threads: 0``), which the resume stores again (with generator threads the
        stores depend on their timing, in a resumed run as in any)."""
        return self.stops_between_batches(epoch)

    def resumes_evaluation(self, epoch: int) -> bool:
        """Always: the evaluation changes no state (a forward pass, no reservoir or adjuster), and being one pass it
        never stops (nothing to abandon, so the trainer holds no epoch start for it)."""
        return True

    def step(self, model: DGNN, task, batch: SampleBatch, scale: float) -> np.ndarray:
        """Forward, loss × ``scale`` and backward of my part of the batch."""
        if not batch.samples:
            return self._zero_stats(model, task, batch.epoch)
        loss, stats = self._run(model, task, batch.epoch, batch.samples[0], (0,))
        self._loss_sum = float(loss.detach())
        (loss * scale).backward()
        return stats

    def evaluate(self, model: DGNN, task, epoch: int, stop=None) -> np.ndarray:
        """Validation and test sums: my vertices over the whole timeline from t = 0, without gradient (one pass:
        ``stop`` is not asked)."""
        if self.mine.shape[0] == 0 or self.stop == 0:
            return self._zero_stats(model, task, epoch)
        with torch.no_grad():
            return self._run(model, task, epoch, HybridSample(Sequence(0, 0, self.stop, 1), self.mine, -1), (1, 2))[1]

    def report(self, epoch: int, train_loss: float) -> dict:
        """H1's figures: closure bytes per rank, replication Σ|P_p ∪ C_p| / N, load imbalance λ = max / min;
        the epoch's steps, how often each action (snapshot fraction × vertex fraction) ran, and per rank the
        steps in which it owned no target and waited (likely when a batch has fewer than P × groups targets;
        possible in any, targets being drawn at random within each stratum)."""
        read, cache, idle = zip(*self.comm.allgather_obj(
            (int(self.read_rows.shape[0]), int(self.cache_bytes), self._idle), tag="metrics"), strict=True)
        loads = [r["load"] for r in self.plan.ranks]
        return {"hybrid": {"cache_bytes": list(cache), "replication": sum(read) / self.N,
                           "load_imbalance": max(loads) / min(loads) if min(loads) > 0 else float("inf"),
                           "steps": int(self._used.sum()), "idle_steps": list(idle),
                           "actions": {f"{a[0]:g}x{a[1]:g}": int(n) for a, n in zip(self.actions, self._used,
                                                                                   strict=True) if n},
                           **({"epsilon": self.adjuster.epsilon} if self.opts.adjuster.kind == "dqn" else {}),
                           **self._reservoir_report(),
                           **self._averaging_report()}}

    def _reservoir_report(self) -> dict:
        """H4's figures: batches reused, snapshot and fresh this epoch, mean p, stored bytes and generator seconds."""
        if self.reservoir is None:
            return {}
        k = self._picks
        steps = k["reused"] + k["snapshot"] + k["fresh"]
        # the generators' seconds since the last report: this epoch's, as the picks beside it (the count is a
        # running total, which an epoch's figure summed over epochs would count again)
        seconds, self._generator_reported = (self.reservoir.seconds - self._generator_reported,
                                             self.reservoir.seconds)
        nbytes, seconds, stored = zip(*self.comm.allgather_obj(
            (self.reservoir.nbytes, seconds, sum(map(len, self.reservoir.stores))), tag="metrics"), strict=True)
        return {"reservoir": {"reused": int(k["reused"]), "snapshot": int(k["snapshot"]), "fresh": int(k["fresh"]),
                              "reuse_rate": k["reused"] / steps if steps else 0.0,
                              "p": k["p"] / steps if steps else 0.0, "bytes": int(sum(nbytes)),
                              "stored": [int(n) for n in stored], "generator_seconds": float(sum(seconds))}}

    def close(self, collective: bool = True) -> None:
        """Stop the reservoir's generator threads; then the base's."""
        if self.reservoir is not None:
            self.reservoir.close()
        super().close(collective)

    def state_dict(self) -> dict:
        """The adjuster's state (H3: a DQN's network, replay, ε and RNG), the same on every rank, and the reservoir's
        serials (H4) and the agreed "max_mb reached" (:attr:`BatchReservoir.full`): the same on every rank under
        synchronous averaging with ``reservoir.threads: 0``, else each rank's own, any of which serves any rank
        (:attr:`replicated_state`); between two steps, without the one the next step's selection stored
        (:meth:`resumes_between_batches`)."""
        rsv = self.reservoir
        serials = None if rsv is None else [[b.serial for b in store] for store in rsv.stores]
        if serials is not None and self._selected is not None:
            action, before = self._selected
            serials[action] = serials[action][:before]
        nbytes = None if rsv is None else [[b.nbytes for b in store[:len(kept)]]
                                           for store, kept in zip(rsv.stores, serials, strict=True)]
        return {"adjuster": self.adjuster.state_dict(), "reservoir": serials,
                "reservoir_full": rsv is not None and rsv.full,
                "reservoir_bytes": nbytes, "reservoir_of": [self.comm.rank, self.comm.size]}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`: the stored batches are rebuilt from their serials (any P)."""
        if not state:
            return
        self.adjuster.load_state_dict(state["adjuster"])
        serials = state.get("reservoir")
        if self.reservoir is not None and serials is not None:
            # the flag the ranks agreed, restored rather than agreed again from the rebuilt stores' bytes (which
            # would take a collective); stores and their bytes only grow, so once reached it stays
            self.reservoir.full = self.reservoir.agreed and bool(state.get("reservoir_full", False))
            # this rank's own checkpoint: its batches counted as the run counted them, trained ones with the
            # operators they hold again once they train (rebuilt, they hold fewer bytes until then, and a count
            # of those would let the stores grow where the run's stopped); another rank's bytes are not mine
            own = state.get("reservoir_of") == [self.comm.rank, self.comm.size]
            self._start_reservoir_from(serials, state.get("reservoir_bytes") if own else None)

    def _start_reservoir_from(self, serials: list[list[int]], nbytes: list[list[int]] | None = None) -> None:
        """Rebuild the stores of a checkpoint (inline, before any thread starts). ``nbytes``, this rank's own
        counts where given: a batch that had trained is counted as it held then (its operators come back when it
        trains again), so the stores stop growing where the run's did."""
        rsv = self.reservoir
        self._first = None  # the stores are the checkpoint's (the set-up's first batch served its check)
        self._agree_snapshot_mb()
        for a, store in enumerate(serials):
            for k, serial in enumerate(store):
                item = self._build(a, serial)
                if nbytes is not None:
                    item.nbytes = max(item.nbytes, int(nbytes[a][k]))
                rsv._insert(a, item)
            rsv.serials[a] = max(store, default=-1) + 1
        rsv.start()

    def _averaging_report(self) -> dict:
        """``async``: the epoch's rounds, and whether every rank ends it with the same bits (parameters, moments)."""
        if self.opts.averaging.mode != "async":
            return {}
        digest = hashlib.sha256(b"".join(t.detach().cpu().numpy().tobytes() for t in self._replica())).hexdigest()
        return {"rounds": self._rounds, "replicas_equal": len(set(self.comm.allgather_obj(digest, tag="metrics"))) == 1}

    def _host_bytes(self) -> int:
        """The closure's rows held on the host, and Ã_t·X_t (S4)."""
        return sum(h.nbytes for h in self.host.values()) + sum(a.numel() * a.element_size() for a in self._ax.values())
