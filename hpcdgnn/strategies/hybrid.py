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
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.errors import ConfigError
from hpcdgnn.nn.conv.gcn import gcn_norm
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.partition.load_aware import plan_hybrid
from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds
from hpcdgnn.partition.sequences import Sequence
from hpcdgnn.strategies.base import SampleBatch, Scored, Strategy
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.strategies.sample_layout import SampleLayout
from hpcdgnn.strategies.sampling import HostSnapshot, SampleGraphs, _expand, graph_cells
from hpcdgnn.tasks import task_class
from hpcdgnn.tasks.base import SampleEmbeddings, Task

__all__ = ["HybridLayout", "HybridSample", "HybridStrategy", "action_sizes"]


@dataclass(frozen=True)
class HybridSample:
    """This rank's part of one hybrid batch: the window ``seq``, its ``targets`` (ascending) and the action."""

    seq: Sequence
    targets: np.ndarray
    action: int


def action_sizes(fractions: tuple[float, float], num_vertices: int, train_steps: int,
                 num_snapshots: int) -> tuple[int, int]:
    """(N_S, N_V) of an action: fractions of T and N, at least 1, N_S at most the training steps."""
    n_s = min(max(1, round(fractions[0] * num_snapshots)), train_steps)
    return n_s, max(1, round(fractions[1] * num_vertices))


def _hops(indptr: np.ndarray, indices: np.ndarray, seeds: np.ndarray, k: int) -> np.ndarray:
    """``seeds`` and every vertex within ``k`` hops along CSR rows (what a row aggregates)."""
    out = frontier = seeds
    for _ in range(k):
        frontier = np.setdiff1d(indices[_expand(indptr[frontier], indptr[frontier + 1] - indptr[frontier])], out)
        if frontier.shape[0] == 0:
            break
        out = np.union1d(out, frontier)
    return out


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


@register_strategy("hybrid")
class HybridStrategy(SampleGraphs, Strategy[SampleBatch]):
    """Hybrid batches over load-partitioned vertices, one model replica per rank."""

    setup_work = "read the closure's rows + normalise"

    @classmethod
    def step_graphs_at(cls, num_ranks: int) -> bool:
        """Graph-recurrent cells run at any P: a batch gets every step's graph over its receptive rows."""
        return True

    @classmethod
    def make_plan(cls, manifest, num_ranks: int, job) -> PartitionPlan:
        """H1's plan, after refusing a vertex batch too small for every rank's groups (ConfigError).

        The encoder–decoder is refused earlier, by the regime (it forecasts under ``sequences`` only)."""
        o, N = job.strategy, manifest.num_vertices
        small = min(max(1, round(f * N)) for f in o.vertex_fractions)
        if small < num_ranks * o.groups:
            raise ConfigError(f"strategy.vertex_fractions: the smallest, {min(o.vertex_fractions):g} of N = {N}, "
                              f"draws N_V = {small} targets, fewer than P × groups = {num_ranks} × {o.groups} = "
                              f"{num_ranks * o.groups}: some rank's groups would train nothing; raise it or lower "
                              "strategy.groups")
        return plan_hybrid(manifest, num_ranks, job)

    def setup(self, plan: PartitionPlan, model: DGNN, task, reader) -> Scored:
        """Read my vertices' closure once (H1); keep the load order and owners for drawing batches (H2)."""
        job, o, me = self.ctx.job, self.ctx.job.strategy, self.comm.rank
        self.plan, self.opts, self.task = plan, o, task
        self.N, self.T = plan.num_vertices, plan.num_snapshots
        self.cells = graph_cells(model, job)
        self.encoder, self.decoder, self.horizon = list(model.layers), None, 0
        self.num_layers = len(model.layers)
        self.fanout = [0] * self.num_layers  # DynaHB samples targets, never neighbours
        self.reads_ax = self.reads_basis = self.reads_snapshots = False
        self._targets: dict[int, torch.Tensor] = {}
        self.owner = np.empty(self.N, dtype=np.int64)
        for p in range(plan.num_ranks):
            self.owner[plan.vertices_of(p)] = p
        self.mine = np.sort(np.asarray(plan.vertices_of(me), dtype=np.int64))
        self.load_order = np.asarray(plan.load_order, dtype=np.int64)
        self.strata = balanced_bounds(self.N, o.groups)
        self.ranges = task_class(job.task.name).steps(job.task, self.ctx.manifest)
        self.train_stop = self.ranges[0].stop
        self.stop = max(r.stop for r in self.ranges if len(r)) if any(len(r) for r in self.ranges) else 0
        self.actions = o.actions()
        # a task whose samples read vertices besides the batch (link prediction's destinations and negatives)
        # may read any row: its closure is every vertex
        wide = type(task).sample_vertices is not Task.sample_vertices
        self.host: dict[int, HostSnapshot] = {}
        self.read_rows = self._read_closure(reader, np.arange(self.N) if wide else self.mine)
        mib = self.cache_bytes / 2**20
        if o.max_cache_mb and mib > o.max_cache_mb:  # local: agree() carries it to every rank
            raise ConfigError(f"strategy.max_cache_mb: rank {me}'s closure holds {mib:.4g} MiB "
                              f"({self.read_rows.shape[0]} of {self.N} vertices), over {o.max_cache_mb:g}; raise "
                              "it, or use closure: lhop or more ranks")
        self._stat_width: int | None = None
        self._used = np.zeros(len(self.actions), dtype=np.int64)
        return Scored(snapshots=tuple(range(self.stop)))

    def _read_closure(self, reader, seeds: np.ndarray) -> np.ndarray:
        """Read each snapshot's rows of ``seeds``' closure (H1, ``ShardReader.read_rows``); return their union."""
        T, N = self.stop, self.N
        edges = [reader.edges(t) for t in range(T)]
        if self.cells and self.opts.closure == "receptive":
            for t, (src, dst) in enumerate(edges):  # the cells' operators need only the pattern
                indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=N))])
                self.host[t] = HostSnapshot(None, None, None, None, raw=(indptr, dst, np.ones(dst.shape[0])))
            rows = self.cell_rows(Sequence(0, 0, T, 0), seeds, np.random.default_rng(0), None, True)
        else:
            # L hops over the union of the snapshots' edges: a vertex's recurrence between layers runs through
            # every step, so a row a layer needs at one step it needs at all
            keys = np.unique(np.concatenate([src * N + dst for src, dst in edges])) if edges else np.zeros(0, np.int64)
            src, dst = np.divmod(keys, N)
            rows = _hops(np.concatenate([[0], np.cumsum(np.bincount(src, minlength=N))]), dst, seeds,
                         self.num_layers)
        self.cache_bytes = 0
        for t in range(T):
            self.host[t] = self._host(reader.read_rows(t, rows))
        return rows

    def _host(self, block) -> HostSnapshot:
        """Snapshot ``block.t`` with only ``block.rows`` present (other rows empty, features zero)."""
        N, rows = self.N, block.rows
        counts = np.zeros(N, dtype=np.int64)
        counts[rows] = np.diff(block.indptr)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        x = np.zeros((N, block.x.shape[1]), dtype=block.x.dtype)
        x[rows] = block.x
        self.cache_bytes += block.indptr.nbytes + block.indices.nbytes + block.weights.nbytes + block.x.nbytes
        # Ã's rows in the closure are exact: their entries' degrees are rows read too
        a = gcn_norm(block.t, indptr, block.indices, block.weights, torch.float64).a
        raw = (indptr, block.indices, block.weights) if self.cells else None
        return HostSnapshot(a.crow_indices().numpy(), a.col_indices().numpy(), a.values().numpy(),
                            torch.from_numpy(x).to(self.ctx.dtype), raw)

    def snapshot(self, t: int) -> HostSnapshot:
        """Snapshot t's rows read at set-up."""
        return self.host[t]

    def cell_rows(self, seq, vertices, rng, decoder=None, every_step=False) -> np.ndarray:
        """:meth:`SampleGraphs.cell_rows`, kept within the rows read (``lhop``: the induced subgraph)."""
        rows = super().cell_rows(seq, vertices, rng, decoder, every_step)
        if self.opts.closure == "lhop" and getattr(self, "read_rows", None) is not None:
            rows = np.intersect1d(rows, self.read_rows)
        return rows

    # ---- H2: hybrid batches

    def sizes(self, action: int) -> tuple[int, int]:
        """(N_S, N_V) of ``action``."""
        return action_sizes(self.actions[action], self.N, self.train_stop, self.T)

    def action(self, epoch: int, index: int) -> int:
        """The action of batch ``index`` (H3): the start action, or one drawn from (seed, epoch, index)."""
        if self.opts.adjuster.kind == "random":
            rng = np.random.default_rng([self.ctx.job.train.seed, epoch, index, 0xAC7])
            return int(rng.integers(len(self.actions)))
        return self.opts.start_action()

    def draw(self, epoch: int, index: int, action: int) -> tuple[int, np.ndarray]:
        """Batch ``index``'s window start and its global targets (ascending): a function of (seed, epoch, index,
        action), N_V / N_bg from each stratum of the load order (§4.2)."""
        n_s, n_v = self.sizes(action)
        rng = np.random.default_rng([self.ctx.job.train.seed, epoch, index, action, 0x4B])
        start = int(rng.integers(0, self.train_stop - n_s + 1))
        per = np.diff(balanced_bounds(n_v, len(self.strata) - 1))
        picks = []
        for k, want in enumerate(per):
            lo, hi = self.strata[k], self.strata[k + 1]
            picks.append(self.load_order[lo + rng.choice(hi - lo, min(int(want), hi - lo), replace=False)])
        return start, np.sort(np.concatenate(picks))

    def steps_per_epoch(self) -> int:
        """``steps_per_epoch``, or one expected pass: N·T_train / E[N_S·N_V] over the actions in use."""
        if self.opts.steps_per_epoch:
            return self.opts.steps_per_epoch
        used = range(len(self.actions)) if self.opts.adjuster.kind == "random" else [self.opts.start_action()]
        mean = np.mean([math.prod(self.sizes(a)) for a in used])
        return max(1, math.ceil(self.N * self.train_stop / mean))

    def batches(self, epoch: int) -> Iterator[SampleBatch]:
        """The epoch's hybrid batches; each rank keeps the targets it owns."""
        me = self.comm.rank
        self._used = np.zeros(len(self.actions), dtype=np.int64)
        for g in range(self.steps_per_epoch()):
            a = self.action(epoch, g)
            self._used[a] += 1
            start, targets = self.draw(epoch, g, a)
            mine = targets[self.owner[targets] == me]
            seq = Sequence(g, start, start + self.sizes(a)[0], 0)
            count = sum(self.task.sample_examples(t, mine, epoch) for t in range(seq.start, seq.stop))
            examples = float(self.comm.allreduce_array([count], tag="batch")[0])
            samples = [HybridSample(seq, mine, a)] if mine.shape[0] else []
            yield SampleBatch(epoch, g, examples if examples > 0 else 1.0, samples)

    def _run(self, model: DGNN, task, epoch: int, sample: HybridSample, splits: tuple[int, ...]):
        """Forward of one window over ``sample.targets``; the task's loss and sums over steps of ``splits``."""
        seq, targets = sample.seq, sample.targets
        steps = [t for t in range(seq.start, seq.stop) if any(t in self.ranges[s] for s in splits)]
        vertices = np.unique(np.concatenate([targets, *(task.sample_vertices(t, targets, epoch) for t in steps)]))
        rng = np.random.default_rng([self.ctx.job.train.seed, epoch, seq.index, 0x5A])
        layout = HybridLayout(self, seq, targets, vertices, rng, epoch=epoch, b=seq.index, train=splits == (0,))
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

    def _zero_stats(self, model: DGNN, task, epoch: int) -> np.ndarray:
        """Zero metric sums of the task's width, for a rank without targets in a batch."""
        if self._stat_width is None:
            rows = torch.zeros(0, model.out_features, dtype=self.ctx.dtype, device=self.ctx.device)
            none = np.zeros(0, np.int64)
            with torch.no_grad():
                empty = SampleEmbeddings(self.ranges[0][0], rows, none, none)
                self._stat_width = int(task(empty, epoch).stats.shape[0])
        return np.zeros(self._stat_width)

    def step(self, model: DGNN, task, batch: SampleBatch, scale: float) -> np.ndarray:
        """Forward, loss × ``scale`` and backward of my part of the batch."""
        if not batch.samples:
            return self._zero_stats(model, task, batch.epoch)
        loss, stats = self._run(model, task, batch.epoch, batch.samples[0], (0,))
        (loss * scale).backward()
        return stats

    def evaluate(self, model: DGNN, task, epoch: int) -> np.ndarray:
        """Validation and test sums: my vertices over the whole timeline from t = 0, without gradient."""
        if self.mine.shape[0] == 0 or self.stop == 0:
            return self._zero_stats(model, task, epoch)
        with torch.no_grad():
            return self._run(model, task, epoch, HybridSample(Sequence(0, 0, self.stop, 1), self.mine, -1), (1, 2))[1]

    def report(self, epoch: int, train_loss: float) -> dict:
        """H1's figures: closure bytes per rank, replication Σ|P_p ∪ C_p| / N, load imbalance λ = max / min;
        the epoch's steps and how often each action (snapshot fraction × vertex fraction) ran."""
        rows = self.comm.allgather_obj((int(self.read_rows.shape[0]), int(self.cache_bytes)), tag="metrics")
        loads = [r["load"] for r in self.plan.ranks]
        return {"hybrid": {"cache_bytes": [b for _, b in rows], "replication": sum(n for n, _ in rows) / self.N,
                           "load_imbalance": max(loads) / min(loads) if min(loads) > 0 else float("inf"),
                           "steps": int(self._used.sum()),
                           "actions": {f"{a[0]:g}x{a[1]:g}": int(n) for a, n in zip(self.actions, self._used,
                                                                                   strict=True) if n}}}

    def _host_bytes(self) -> int:
        """The closure's rows held on the host."""
        return sum(h.nbytes for h in self.host.values())
