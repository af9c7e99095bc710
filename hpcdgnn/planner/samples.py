"""The cost of the sampled strategies (``sequences``, ReInc §3.4; ``hybrid``, DynaHB §4–5): their samples' rows
counted without training.

A full-batch strategy's rows follow from its plan; a sample's follow from the sampler. Layer l of a sample runs
on the rows layer l + 1 reads (its batch's neighbours, drawn by ``fanouts``), and a graph-recurrent cell on the
receptive closure of the scored rows (:class:`~hpcdgnn.strategies.sampling.SampleGraphs`). So rank 0 builds
each counted sample's :class:`~hpcdgnn.strategies.sample_layout.SampleLayout` with the strategy's own draws and
row logic, over the snapshots' structure alone (no features), and prices every layer on its own rows with the
model's per-layer counted work (:attr:`~hpcdgnn.planner.work.ModelWork.layers`):

    work(sample) = Σ_l [flops_l(S·n_l, S) + sparse_l · nnz_l + calls_l(S)] + head + entries · sample_seconds,

with S the window, n_l the rows layer l outputs and nnz_l the entries of its block (layer 0 of a GCN that
aggregates Ã_t·X_t per sample adds nnz_0·F, forward only). ``head`` is the task's scoring of the sample's
output, run and counted on random rows (its examples and calls); ``entries`` are those the host-side sampler
scans building the blocks. Each optimizer step adds Adam's update, counted likewise (the gradient norm runs
once per epoch). A
sample without gradients (evaluation) costs the forward's share. Samples run one at a time: the activation peak
is the largest counted sample's.

What is counted: ``sequences`` — evenly spaced sequences (at most :data:`MAX_SEQUENCES` per split), each with
:data:`PER_SEQUENCE` node batches of epoch 1, every sequence priced as its nearest counted one; ``hybrid`` — the
first batches of each action in use (:data:`DRAWS` shared among them, at least 2 each), split by owner, and each
rank's evaluation pass; the task scoring of a batch, and of the evaluation, counted on one rank's part and carried
to the others by their rows. A sample over more than :data:`COUNTED_ROOT_STEPS` targets × steps is built over two
random subsets of its targets and extrapolated (:func:`_estimated`).
Traffic per step and round: see :func:`sequences_cost` and :func:`hybrid_cost`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import torch

from hpcdgnn.planner.cost import Counted, GraphStats, RankWork, add
from hpcdgnn.planner.work import ModelWork, best_seconds
from hpcdgnn.strategies.hybrid import HybridBatches, hybrid_of, union_csr
from hpcdgnn.strategies.sampling import HostSnapshot, SampleGraphs, _submatrix
from hpcdgnn.strategies.sequences import SequenceSamples, sampling_of

__all__ = ["DRAWS", "MAX_SEQUENCES", "PER_SEQUENCE", "hybrid_cost", "seconds_per_sampled_entry",
           "sequences_cost"]

#: sequences counted per split (evenly spaced); the others are priced as their nearest counted one
MAX_SEQUENCES = 32
#: node batches counted per counted sequence
PER_SEQUENCE = 4
#: targets × steps a counted sample is built over at most; a larger one is estimated (:func:`_estimated`)
COUNTED_ROOT_STEPS = 1 << 14
#: a sample of fewer than this many times its subset's targets is counted whole (its subsets would cost over
#: half of it, for an estimate)
WHOLE_BELOW = 6
#: the smallest share of a sample's targets its subset holds: below, the two subsets' overlap is within their
#: noise and the extrapolation unstable (perf/results/planner)
MIN_SHARE = 1 / 64


class _Structure(SampleGraphs):
    """The snapshots' structure as a sampler's host (all-ones weights: a sample's rows and entries do not depend
    on the values), on rank 0; subclasses add a strategy's sample draws."""

    def __init__(self, graph: GraphStats, job, manifest, model, task) -> None:
        self.graph, self.opts, self.task = graph, job.strategy, task
        self.out_features = getattr(model, "out_features", job.model.hidden)
        self.ctx = SimpleNamespace(job=job, manifest=manifest, dtype=torch.float64, device=torch.device("cpu"))
        #: the normalised structure of each snapshot, shared by every sampled strategy and P priced
        self._host: dict[int, HostSnapshot] = graph.derived.setdefault(("structure",), {})
        self._targets: dict[int, torch.Tensor] = {}

    def snapshot(self, t: int) -> HostSnapshot:
        if t not in self._host:
            indptr, indices = self.graph.csr()[t]
            ones = np.ones(indices.shape[0])
            self._host[t] = HostSnapshot.normalised(t, indptr, indices, ones, None, (indptr, indices, ones))
        return self._host[t]

    def shape(self, layout, targets: np.ndarray | None = None) -> _Shape:
        """What a built sample's work depends on: its distinct rows, block entries and scanned entries by layer;
        with ``targets`` (sorted: the whole sample's, of which ``layout`` was built over a part), also the part of
        each of the rows that are none of ``targets``."""
        seq = layout.seq
        steps = range(seq.start, seq.stop)
        L = self.num_layers
        if layout.cells is not None:  # every layer over U, on Ã_t restricted to U
            U = layout.cells
            nnz = sum(_submatrix(self.snapshot(t).crow, self.snapshot(t).col, U)[0].shape[0] for t in steps)
            # the sampler scans U's rows of each step's graph for the step graph and once per layer's operators
            scanned = (L + 1) * sum(_row_entries(self.snapshot(t).crow, U) for t in steps)
            other = [] if targets is None else [float(U.shape[0] - _among(U, targets).sum())] * L
            return _Shape([float(U.shape[0])] * L, [float(nnz)] * L, [float(scanned)] + [0.0] * (L - 1), True,
                          other)
        rows = [float(layout.rows[li + 1].shape[0]) for li in range(L)]
        entries = [0.0 if a is None else float(a.a.values().numel()) for a in layout.adj]
        scanned = [float(sum(_row_entries(self.snapshot(t).crow, layout.rows[li + 1]) for t in steps))
                   if layout.adj[li] is not None else 0.0 for li in range(L)]
        out = _Shape(rows, entries, scanned, False)
        if targets is not None:
            S = seq.stop - seq.start
            for li in range(L):
                R = layout.rows[li + 1]
                other = ~_among(R, targets)
                out.other_rows.append(float(other.sum()))
                a = layout.adj[li]
                if a is None:
                    out.other_entries.append(0.0)
                    out.other_scanned.append(0.0)
                    continue
                per_row = np.diff(a.a.crow_indices().numpy()).reshape(S, R.shape[0]).sum(axis=0)
                out.other_entries.append(float(per_row[other].sum()))
                out.other_scanned.append(float(sum(_row_entries(self.snapshot(t).crow, R[other]) for t in steps)))
        return out

    def targets_shape(self, layout, targets: np.ndarray) -> tuple[list[float], list[float]]:
        """Per layer, the block entries and the scanned entries of the rows of ``targets`` in a sample built
        over all of them (every layer's rows hold them), counted on the snapshots alone: a row keeps its
        self-loop and up to ``fanout`` neighbours of each step (:meth:`SampleGraphs.sampled_block`)."""
        seq = layout.seq
        counts = [np.diff(self.snapshot(t).crow)[targets] for t in range(seq.start, seq.stop)]
        scanned = float(sum(c.sum() for c in counts))
        entries, scans = [], []
        for li in range(self.num_layers):
            if layout.adj[li] is None:
                entries.append(0.0)
                scans.append(0.0)
                continue
            k = self.fanout[li]
            entries.append(float(sum((np.minimum(c, k + 1) if k > 0 else c).sum() for c in counts)))
            scans.append(scanned)
        return entries, scans

    def work_of(self, layout, work: ModelWork, in_features: int, head: Counted | None = None,
                shape: _Shape | None = None) -> tuple[Counted, float]:
        """One sample's (forward and backward work, bytes autograd saves) from its built ``layout``; ``head``:
        its task scoring when already known (else run and counted); ``shape``: its rows and entries when
        estimated (:func:`_estimated`), else counted on ``layout``."""
        seq = layout.seq
        S = seq.stop - seq.start
        steps = range(seq.start, seq.stop)
        shape = self.shape(layout) if shape is None else shape
        rows, entries = [S * n for n in shape.rows], shape.entries
        model, saved = Counted(), 0.0
        for li, (sp, tm) in enumerate(work.layers):
            model += Counted(sp.flops(rows[li], S) + tm.flops(rows[li], S),
                             (sp.rnn_flops_per_row + tm.rnn_flops_per_row) * rows[li],
                             sp.sparse_per_nnz * entries[li], sp.ops(S) + tm.ops(S))
            saved += sp.saved(rows[li], rows[li] / S) + tm.saved(rows[li], rows[li] / S)
        if not layout.train:  # without gradients: the forward's share, nothing saved
            model, saved = model.scaled(work.forward_share), 0.0
        out = Counted(entries=float(sum(shape.scanned)))
        out += model
        if not shape.cells and self.encoder[0].precomputable and not self.reads_ax:
            out.sparse += entries[0] * in_features  # Ã_t·X_t (forward only), which the counted model precomputes
        out += self._head(layout, steps) if head is None else head
        return out, saved

    def _head(self, layout, steps) -> Counted:
        """The task's scoring of the layout's output at the steps it scores (:meth:`_scores`), run on random rows
        of the output's shape and counted (dense FLOPs, calls): forward, and backward when the layout trains;
        and the pairs whose scores the task keeps to the epoch's end (``Task.held_bytes``).

        Shapes:
            output (S, rows, out_features), rows the layout's vertices (cells: U) -> Counted(flops, ops,
            held_pairs)."""
        from hpcdgnn.planner.work import counted

        rows = (layout.cells if layout.cells is not None else layout.vertices).shape[0]
        params = list(self.task.parameters())
        dtype = params[0].dtype if params else torch.float32
        train = layout.train

        def run() -> None:
            h = torch.randn(steps.stop - steps.start, rows, self.out_features, dtype=dtype, requires_grad=train)
            out = layout.output(h)
            loss = None
            for emb in out if isinstance(out, list) else [out]:
                if self._scores(emb.t, train):
                    r = self.task(emb, 1)
                    if train:
                        loss = r.loss_sum if loss is None else loss + r.loss_sum
                    else:
                        r.stats  # noqa: B018 -- evaluation is scored when its sums are read
            if loss is not None:
                loss.backward()

        self.task.hold_scores(True)
        try:
            flops, ops = counted(run)
            per_pair = self.task.held_bytes_per_pair(torch.empty(0, dtype=dtype).element_size())
            return Counted(flops=flops, ops=ops, held_pairs=self.task.held_bytes() / per_pair if per_pair else 0.0)
        finally:
            self.task.hold_scores(False)

    def _scores(self, t: int, train: bool) -> bool:
        """Whether the task scores an output at step t (a sequence scores its one output)."""
        return True


class _Sequences(SequenceSamples, _Structure):
    """What :class:`~hpcdgnn.strategies.sequences.SequencesStrategy` samples."""

    def __init__(self, graph: GraphStats, job, manifest, model, task, seqs) -> None:
        super().__init__(graph, job, manifest, model, task)
        self.N, self.seqs = manifest.num_vertices, seqs
        vars(self).update(sampling_of(model, job))

    def count(self, seq, b: int, nodes: np.ndarray, work: ModelWork, epoch: int, train: bool,
              in_features: int) -> tuple[Counted, float]:
        """One sample's (forward and backward work, bytes autograd saves)."""
        from hpcdgnn.strategies.sample_layout import SampleLayout

        def build(targets: np.ndarray):
            vertices = self.task.sample_vertices(seq.t, targets, epoch)
            return SampleLayout(self, seq, targets, vertices, self._rng(epoch, seq, b, train), epoch=epoch, b=b,
                                train=train)

        return _estimated(self, build, nodes, seq, work, in_features, lambda layout, which: None)


class _Hybrid(HybridBatches, _Structure):
    """What :class:`~hpcdgnn.strategies.hybrid.HybridStrategy` draws (its closure is the whole graph here: the
    rows a batch reads lie in it, exactly under ``closure: receptive``; under ``lhop`` a cell's rows are an upper
    bound)."""

    def __init__(self, graph: GraphStats, job, manifest, model, task, plan) -> None:
        super().__init__(graph, job, manifest, model, task)
        vars(self).update(hybrid_of(plan, model, job, manifest))

    def _scores(self, t: int, train: bool) -> bool:
        """Whether the batch's (training) or the evaluation's (validation, test) loss reads step t."""
        return any(t in self.ranges[s] for s in ((0,) if train else (1, 2)))


def _scaled_head(h: _Hybrid, layout, seq, first: tuple[Counted, int] | None) -> tuple[tuple[Counted, int], Counted]:
    """The task scoring of ``layout`` (one rank's part of a batch or of the evaluation): counted on the first
    rank's part, ``first`` — its (head, rows), returned to be passed on — and carried to the others by their rows
    (the same calls; FLOPs and held pairs in proportion): the scoring runs under the counting mode once, not
    once per rank."""
    rows = (layout.cells if layout.cells is not None else layout.vertices).shape[0]
    if first is None:
        first = (h._head(layout, range(seq.start, seq.stop)), rows)
    share = rows / max(first[1], 1)
    return first, Counted(flops=first[0].flops * share, ops=first[0].ops, held_pairs=first[0].held_pairs * share)


def _hybrid_sample(h: _Hybrid, task, seq, targets: np.ndarray, splits: tuple[int, ...], work: ModelWork, F: int,
                   first: dict | None) -> tuple[Counted, float, dict]:
    """One rank's part of a hybrid batch (``splits`` (0,)) or of the evaluation ((1, 2)) over ``targets``:
    (work, saved bytes, the first rank's head counts by subset for :func:`_scaled_head`, to pass on)."""
    firsts = dict(first or {})

    def head(layout, which: str) -> Counted:
        firsts[which], c = _scaled_head(h, layout, seq, firsts.get(which))
        return c

    c, saved = _estimated(h, lambda sub: h._layout(task, 1, seq, sub, splits), targets, seq, work, F, head)
    return c, saved, firsts


@dataclass
class _Shape:
    """What one sample's counted work depends on (:meth:`_Structure.shape`), per layer: the distinct rows it
    outputs (cells: U, every layer), its block's entries and the entries the sampler scans building it."""

    rows: list[float]
    entries: list[float]
    scanned: list[float]
    cells: bool
    other_rows: list[float] = field(default_factory=list)
    """Per layer, the rows that are none of the sample's targets (:meth:`_Structure.shape` given them)."""
    other_entries: list[float] = field(default_factory=list)
    other_scanned: list[float] = field(default_factory=list)


def _captured(x1: float, x2: float, f: float, cap: float) -> float:
    """The whole of a count seen as ``x1`` over a random share ``f`` of a sample's targets and as ``x2`` over
    a share f' = 1 − (1 − f)² containing it: with each counted row reached by r targets,
    x(f) = R·(1 − (1 − f)^r), so x2 / x1 = 1 + (1 − f)^r and the whole is R = x1² / (2·x1 − x2) — at most
    ``x1 / f`` (every row reached by one target: linear, also taken where the overlap 2·x1 − x2 is within the
    draw's noise) and ``cap``."""
    linear = x1 / f
    if x1 <= 0.0:
        return min(x2 / (1.0 - (1.0 - f) ** 2), cap) if x2 > 0 else 0.0
    # an overlap 2·x1 − x2 below eight standard deviations of the draw (~√x2) gives R to worse than ±12 %: the
    # linear bound (capped) is taken, on the cautious side
    seen = 2.0 * x1 - x2
    est = linear if seen <= 8.0 * math.sqrt(x2) else min(linear, x1 * x1 / seen)
    return min(est, cap)


def _affine(x1: float, x2: float, f: float, f2: float) -> float:
    """The whole of a count seen as ``x1`` and ``x2`` over shares ``f`` < ``f2`` of a sample's targets, as a
    fixed part and one in proportion to the targets (a task head's calls and kept pairs)."""
    return max(x2, x1 + (x2 - x1) * (1.0 - f) / (f2 - f))


def _estimated(counter: _Structure, build, targets: np.ndarray, seq, work: ModelWork, in_features: int,
               head) -> tuple[Counted, float]:
    """One sample's (work, saved bytes), built over its ``targets`` by ``build(targets)``; ``head(layout, which)``:
    its task scoring's count (``which``: ``whole``, ``small`` or ``large``, the targets it was built over), or
    None (counted on the layout).

    A sample of n targets over S steps is built over two nested random subsets of k = max(
    :data:`COUNTED_ROOT_STEPS` / S, :data:`MIN_SHARE` · n) and k' of them (shares f and 1 − (1 − f)²) where
    n > :data:`WHOLE_BELOW` · k, else counted whole: built whole, the price of a sample over every vertex
    (``sequences``' default batch) or of ``hybrid``'s evaluation (each rank's vertices over the whole timeline)
    grows like an epoch's forward; built so, like a 1/20 of it at most. Every layer's rows hold all the targets, whose
    block and scanned entries follow from the snapshots alone (:meth:`_Structure.targets_shape`); the rows
    besides them, reached from the targets, are extrapolated from the two subsets (:func:`_captured`: the
    neighbourhoods the targets share saturate), their entries in proportion (cells: U's entries in proportion to
    U); the task scoring is counted on both subsets, its FLOPs in proportion to the rows it reads (its rows'
    projections dominate them), its calls and kept pairs as a fixed part and one in proportion to the targets
    (:func:`_affine`)."""
    n, S = targets.shape[0], seq.stop - seq.start
    k = max(1, COUNTED_ROOT_STEPS // max(S, 1), math.ceil(n * MIN_SHARE))
    if WHOLE_BELOW * k >= n:  # the two subsets would cost about as much as the whole
        layout = build(targets)
        return counter.work_of(layout, work, in_features, head(layout, "whole"))
    f = k / n
    f2 = 1.0 - (1.0 - f) ** 2
    order = np.random.default_rng([n, seq.start, seq.stop, 0xE57]).permutation(targets)
    small_layout = build(np.sort(order[:k]))
    k2 = round(n * f2)
    layout = build(np.sort(order[:k2]))
    targets = np.sort(targets)
    small, large = counter.shape(small_layout, targets), counter.shape(layout, targets)
    N = float(counter.ctx.manifest.num_vertices)
    L = counter.num_layers
    # every layer's rows hold all the targets; the others, reached from them, are estimated
    other = [_captured(a, b, f, N - n) for a, b in zip(small.other_rows, large.other_rows, strict=True)]
    per = [o / b if b else 0.0 for o, b in zip(other, large.other_rows, strict=True)]
    if large.cells:  # the block's entries restricted to U: in proportion to U
        grow = (n + other[0]) / max(large.rows[0], 1.0)
        shape = _Shape([n + other[0]] * L, [e * grow for e in large.entries], [x * grow for x in large.scanned],
                       True)
    else:
        entries, scanned = counter.targets_shape(layout, targets)
        shape = _Shape([n + o for o in other],
                       [e + x * q for e, x, q in zip(entries, large.other_entries, per, strict=True)],
                       [e + x * q for e, x, q in zip(scanned, large.other_scanned, per, strict=True)], False)
    heads = [head(x, which) or counter._head(x, range(seq.start, seq.stop))
             for x, which in ((small_layout, "small"), (layout, "large"))]
    h = Counted(flops=heads[1].flops * shape.rows[-1] / max(large.rows[-1], 1.0),
                **{kind: _affine(getattr(heads[0], kind), getattr(heads[1], kind), f, f2)
                   for kind in ("ops", "held_pairs")})
    return counter.work_of(layout, work, in_features, h, shape)


def _among(rows: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    """Whether each of ``rows`` is one of ``sorted_ids`` (ascending)."""
    if not sorted_ids.shape[0]:
        return np.zeros(rows.shape[0], dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_ids, rows), sorted_ids.shape[0] - 1)
    return sorted_ids[pos] == rows


def _row_entries(crow: np.ndarray, rows: np.ndarray) -> int:
    """Entries of a CSR matrix's ``rows``."""
    return int((crow[rows + 1] - crow[rows]).sum())


def seconds_per_sampled_entry(repeats: int = 5) -> float:
    """Wall seconds per entry the sampler scans building one sample's block (``calibrate``'s
    ``sample_seconds``): :meth:`~hpcdgnn.strategies.sampling.SampleGraphs.sampled_block` over every row of four
    random snapshots (N = 4,096, 8 neighbours)."""
    n, degree, S = 4096, 8, 4
    rng = np.random.default_rng(0)
    snaps = []
    for t in range(S):
        indices = np.sort(rng.integers(0, n, (n, degree)), axis=1).reshape(-1)
        indptr = np.arange(0, n * degree + 1, degree, dtype=np.int64)
        snaps.append(HostSnapshot.normalised(t, indptr, indices, np.ones(indices.shape[0]), None))

    class _Host(SampleGraphs):
        ctx = SimpleNamespace(dtype=torch.float32, device=torch.device("cpu"))

        def snapshot(self, t: int) -> HostSnapshot:
            return snaps[t]

    host, rows = _Host(), np.arange(n)
    return best_seconds(lambda: host.sampled_block(0, S, rows, 0, rng), repeats) / sum(
        _row_entries(h.crow, rows) for h in snaps)


def _spaced(seqs: list, at_most: int) -> list:
    """At most ``at_most`` of ``seqs``, evenly spaced, first and last included."""
    if len(seqs) <= at_most:
        return list(seqs)
    return [seqs[i] for i in sorted({round(k * (len(seqs) - 1) / (at_most - 1)) for k in range(at_most)})]


def _per_sequence(counter: _Sequences, work: ModelWork, split: int, in_features: int) -> dict[int, tuple]:
    """{sequence index: (work of all its samples in an epoch, largest saved bytes of one)} for every sequence of
    ``split``: counted on the spaced ones over evenly spaced node batches of epoch 1, scaled by vertices (the last
    batch may be short), and carried to the rest from the nearest counted sequence."""
    seqs = [s for s in counter.seqs if s.split == split]
    if not seqs:
        return {}
    nodes = counter.node_batches(1)
    picks = sorted(set(np.linspace(0, len(nodes) - 1, min(PER_SEQUENCE, len(nodes))).round().astype(int).tolist()))
    share = counter.N / sum(nodes[b].shape[0] for b in picks)
    counted = {}
    for seq in _spaced(seqs, MAX_SEQUENCES):
        total, peak = Counted(), 0.0
        for b in picks:
            c, saved = counter.count(seq, b, nodes[b], work, 1, split == 0, in_features)
            total += c
            peak = max(peak, saved)
        counted[seq.index] = (total.scaled(share), peak)
    done = np.asarray(sorted(counted))
    return {s.index: counted[int(done[np.abs(done - s.index).argmin()])] for s in seqs}


def _model_and_task(graph: GraphStats, job, manifest):
    """The job's model and task on this process's CPU, the task set up over every snapshot (the vertices a
    link-prediction sample reads are its targets' destinations), and one optimizer step's work
    (:func:`_step_work`): made once for every sampled strategy and P priced."""
    key = ("model and task", job.model, job.task, job.train.seed)
    if key in graph.derived:
        return graph.derived[key]
    from hpcdgnn.comm.communicator import alone
    from hpcdgnn.data.shard_reader import ShardReader
    from hpcdgnn.regimes import regime_of
    from hpcdgnn.tasks.base import Scored

    regime = regime_of("model", job.model.name)
    model = regime.build_model(job, manifest)
    task = regime.task_of(job, manifest, model)
    reader = ShardReader(graph.root, manifest)
    try:
        task.setup(reader, Scored(snapshots=tuple(range(manifest.num_snapshots))), alone())
    finally:
        reader.close()
    graph.derived[key] = (model, task, _step_work(model, task))
    return graph.derived[key]


def _step_work(model, task) -> Counted:
    """One optimizer step as the batch loop runs it (:func:`~hpcdgnn.train.loop.train_batches`): Adam's update
    and clearing the gradients, counted on the job's parameters (the gradient norm runs once per epoch)."""
    from hpcdgnn.optim import Adam
    from hpcdgnn.planner.work import counted

    params = [p for m in (model, task) for p in m.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = Adam(params, lr=1e-3)
    opt.step()  # a steady step: the moments exist

    def run() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    flops, ops = counted(run)
    return Counted(flops=flops, ops=ops)


def _held(nnz: int, N: int, F: int, item: int) -> float:
    """Ã_t's CSR as a strategy holds it (float64 values, indices as :func:`~hpcdgnn.ops.sparse.csr_tensor`
    stores them) and X_t (N × F)."""
    from hpcdgnn.indices import torch_index_dtype

    index = torch.empty(0, dtype=torch_index_dtype(max(nnz, N))).element_size()
    return (N + 1 + nnz) * index + nnz * 8 + N * F * item


def _snapshot_bytes(graph: GraphStats, nnz: np.ndarray, t: int, N: int, F: int, item: int, cells: bool) -> float:
    """A held snapshot (:class:`HostSnapshot`): Ã_t (``nnz``: :attr:`GraphStats.adjacency_nnz`), X_t, and A_t
    as read for graph-recurrent cells."""
    return _held(int(nnz[t]), N, F, item) + (graph.raw_bytes[t] if cells else 0)


def sequences_cost(plan, job, manifest, graph: GraphStats, work: ModelWork) -> list[RankWork]:
    """Per-rank work, memory and traffic of one steady epoch of ``sequences`` under ``plan`` (module docstring).

    Memory: the snapshots a rank holds (its windows', and under ``placement: fetch`` its own block too) and the
    reuse cache (R3), on the host. Bytes: each of the ⌈samples / ``batch_samples``⌉ steps all-reduces the
    gradients and its example count (8 bytes); ``fetch`` sends each snapshot a later rank's windows need once an
    epoch (Ã_t's CSR, X_t, and A_t as read for graph-recurrent cells).

    Args:
        plan: the ``sequences`` plan (R1: each rank's block of sequences and the snapshots it holds).
        job: the typed job.
        manifest: its dataset's manifest.
        graph: the dataset's structure (its snapshots' CSR, read once).
        work: the model's counted work, per layer.

    Shapes:
        one :class:`~hpcdgnn.planner.cost.RankWork` per rank.
    """
    from hpcdgnn.partition.sequences import sequences_of
    from hpcdgnn.regimes.base import item_bytes

    o, P, N, F = job.strategy, plan.num_ranks, plan.num_vertices, manifest.num_features
    item, seqs = item_bytes(job), sequences_of(manifest, job)
    key = ("sequences", repr(o), job.model, job.task, job.train.seed)
    if key not in graph.derived:  # the samples' counts do not depend on P: once for every P the plan prices
        model, task, step = _model_and_task(graph, job, manifest)
        counter = _Sequences(graph, job, manifest, model, task, seqs)
        graph.derived[key] = (counter, [_per_sequence(counter, work, split, F) for split in (0, 1, 2)], step)
    counter, by_split, step = graph.derived[key]
    nb = len(counter.node_batches(1))
    training = sum(s.split == 0 for s in seqs)
    train = training * nb
    Q = o.batch_samples or training
    steps = math.ceil(train / Q)
    entry = N * F * item  # a reuse-cache entry: Ã_t·X_t (N × F)
    if counter.reads_basis:
        entry = N * counter.encoder[0].w_x.shape[0] * item
    own, nnz = plan.snapshot_bounds, graph.adjacency_nnz
    ranks = []
    for p, r in enumerate(plan.ranks):
        a, b = r["sequences"]
        mine = seqs[a:b]
        done, evaluation, peak = step.scaled(steps), Counted(), 0.0
        for s in mine:
            if s.split >= 0 and s.index in by_split[s.split]:
                c, saved = by_split[s.split][s.index]
                if s.split == 0:
                    done += c
                    peak = max(peak, saved)
                else:
                    evaluation += c
        lo, hi = r["window_snapshots"]
        held = set(range(lo, hi)) | (set(range(own[p], own[p + 1])) if o.placement == "fetch" else set())
        host = sum(_snapshot_bytes(graph, nnz, t, N, F, item, counter.cells) for t in held)
        if counter.reads_ax or counter.reads_basis:  # the reuse cache: an entry per snapshot read, up to cache_mb
            host += min(hi - lo, int(o.cache_mb * 2**20) // max(entry, 1)) * entry
        # the task's scoring is in the counted samples (``_head``), not in the planner's per-snapshot task work
        w = RankWork(counted=done, evaluation=evaluation, saved_bytes=peak, optimizer_steps=steps, host_bytes=host)
        if P > 1:
            add(w.sent, "batch", 8.0 * steps)
            add(w.calls, "allreduce", steps)
        ranks.append(w)
    if o.placement == "fetch" and P > 1:
        for p in range(P):
            for q, r in enumerate(plan.ranks):
                lo, hi = r["window_snapshots"]
                need = [t for t in range(max(lo, own[p]), min(hi, own[p + 1]))
                        if q != p and not own[q] <= t < own[q + 1]]
                if need:
                    add(ranks[p].sent, "placement.fetch",
                        sum(_snapshot_bytes(graph, nnz, t, N, F, item, counter.cells) for t in need))
                    add(ranks[p].calls, "p2p", 1)
    return ranks


#: hybrid batches counted (the first steps of epoch 1), shared among the actions in use, at least 2 each
DRAWS = 16


def hybrid_cost(plan, job, manifest, graph: GraphStats, work: ModelWork) -> list[RankWork]:
    """Per-rank work, memory and traffic of one steady epoch of ``hybrid`` under ``plan`` (DynaHB §4–5).

    Each step every rank runs its targets of one global batch (H2) over the batch's window: the first batches of
    each action in use (the start action under ``adjuster.kind: fixed``, else every action, equally likely, as
    ``steps_per_epoch`` assumes; :data:`DRAWS` in all, at least 2 each) are counted rank by rank, and a rank's
    epoch is ``steps`` × its mean. The reservoir (H4) is neither priced nor held in memory here.
    Evaluation runs each rank's vertices over the whole timeline, forward only. Memory: the closure's rows of
    every snapshot (``closure``: the receptive field, or L hops), X_t and Ã_t·X_t held on the host, and the
    largest counted batch's activations. Bytes: under ``averaging.mode: allreduce`` the gradients and the step's
    example count every step (and the adjuster's loss and work under ``dqn``); under ``async`` one all-reduce of
    the parameters, both Adam moments and a count per round — ``every_steps``: ⌊steps / K⌋ + 1 rounds (the epoch
    ends with one); ``every_s`` depends on time, priced as one round.

    Args:
        plan: the ``hybrid`` plan (H1: each rank's vertices, the load order).
        job: the typed job.
        manifest: its dataset's manifest.
        graph: the dataset's structure.
        work: the model's counted work, per layer.
    """
    from hpcdgnn.partition.sequences import Sequence
    from hpcdgnn.regimes.base import item_bytes

    o, P, N, F = job.strategy, plan.num_ranks, plan.num_vertices, manifest.num_features
    item = item_bytes(job)
    model, task, step = _model_and_task(graph, job, manifest)
    h = _Hybrid(graph, job, manifest, model, task, plan)
    steps = h.steps_per_epoch()
    used = h.used_actions()
    train = [step.scaled(steps) for _ in range(P)]
    peak = [0.0] * P
    draws = min(max(2, DRAWS // len(used)), steps)
    for a in used:
        for g in range(draws):
            start, targets = h.draw(1, g, a)
            seq = Sequence(g, start, start + h.sizes(a)[0], 0)
            first = None  # (its head, its rows): a rank's scoring costs the same calls, FLOPs by its rows
            for p in range(P):
                mine = targets[h.owner[targets] == p]
                if mine.shape[0]:
                    c, saved, first = _hybrid_sample(h, task, seq, mine, (0,), work, F, first)
                    train[p] += c.scaled(steps / (len(used) * draws))
                    peak[p] = max(peak[p], saved)
    # a task whose samples read other vertices (link prediction) reads every row: one closure for all ranks
    wide = task.reads_beyond_batch()
    closures = _closures(graph, h, plan, wide)

    def host_bytes(rows: np.ndarray) -> float:
        """The closure ``rows`` as every snapshot holds it (H1, ``HybridStrategy._read_closure``)."""
        return sum(_closure_bytes(graph, t, rows, N, F, item, h.cells, h.reads_ax) for t in range(h.stop))

    everything = host_bytes(closures[0]) if wide else None
    allreduce = o.averaging.mode == "allreduce"
    dqn, measured = o.adjuster.kind == "dqn", o.adjuster.reward_time == "measured"
    params = sum(p.numel() for m in (model, task) for p in m.parameters() if p.requires_grad)
    round_bytes = (3 * params + 1) * item  # parameters, both moments, a count
    ranks, whole, first = [], Sequence(0, 0, h.stop, 1), None
    for p in range(P):
        mine = np.sort(np.asarray(plan.vertices_of(p), dtype=np.int64))
        evaluation = Counted()
        if mine.shape[0] and h.stop:
            evaluation, _, first = _hybrid_sample(h, task, whole, mine, (1, 2), work, F, first)
        # ``optimizer_steps``: the steps whose gradients are all-reduced (none under async; Adam still steps)
        w = RankWork(counted=train[p], evaluation=evaluation, saved_bytes=peak[p],
                     host_bytes=everything if wide else host_bytes(closures[p]),
                     optimizer_steps=steps if allreduce else 0)
        if P > 1 and allreduce:
            add(w.sent, "batch", 8.0 * steps)
            add(w.calls, "allreduce", steps)
            if dqn:  # the step's loss and work, and under ``measured`` the slowest step's seconds
                add(w.sent, "adjuster", (16.0 + 8.0 * measured) * steps)
                add(w.calls, "allreduce", (1 + measured) * steps)
        elif P > 1:
            every = o.averaging.every_steps
            rounds = steps // every + 1 if every else 1
            add(w.sent, "averaging", rounds * round_bytes)
            add(w.calls, "allreduce", 2 * rounds)  # the round's barrier and all-reduce
            if dqn:
                add(w.sent, "adjuster", rounds * 5 * 8.0)
        ranks.append(w)
    return ranks


def _closures(graph: GraphStats, h, plan, wide: bool) -> list[np.ndarray]:
    """Each rank's H1 closure (``HybridStrategy._read_closure``'s rows): of its vertices, or (``wide``: a task
    whose samples read any row) of every vertex, one for all ranks."""
    N = plan.num_vertices

    def union() -> tuple[np.ndarray, np.ndarray]:  # once for every rank and P
        if ("hybrid.union", h.stop) not in graph.derived:
            edges = [(np.repeat(np.arange(N, dtype=np.int64), np.diff(indptr)), indices)
                     for indptr, indices in graph.csr()[: h.stop]]
            graph.derived[("hybrid.union", h.stop)] = union_csr(edges, N)
        return graph.derived[("hybrid.union", h.stop)]

    if wide:
        return [h.closure(np.arange(N), union)] * plan.num_ranks
    return [h.closure(np.sort(np.asarray(plan.vertices_of(p), dtype=np.int64)), union)
            for p in range(plan.num_ranks)]


def _closure_bytes(graph: GraphStats, t: int, rows: np.ndarray, N: int, F: int, item: int, cells: bool,
                   reads_ax: bool) -> float:
    """One snapshot as ``hybrid`` holds it (``_host``): Ã_t over the closure's ``rows`` (their edges without
    self-loops, and a self-loop on every row), X_t (N × F, zero outside the closure), for cells A_t's rows as
    read (int64 row pointers over N, stored columns and weights), and Ã_t·X_t (N × F) when S4 reads it."""
    indptr, _ = graph.csr()[t]
    entries = _row_entries(indptr, rows)
    loops = graph.self_loops(t)
    looped = int(np.isin(loops, rows, assume_unique=True).sum())
    raw = (N + 1) * 8 + entries * graph.entry_bytes(t) if cells else 0
    return _held(entries - looped + N, N, F, item) + raw + (N * F * item if reads_ax else 0)
