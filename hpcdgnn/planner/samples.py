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
to the others by their rows.
Traffic per step and round: see :func:`sequences_cost` and :func:`hybrid_cost`.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch

from hpcdgnn.planner.cost import Counted, GraphStats, RankWork, add
from hpcdgnn.planner.work import ModelWork, best_seconds
from hpcdgnn.strategies.hybrid import HybridBatches, hybrid_of, union_csr
from hpcdgnn.strategies.sampling import HostSnapshot, SampleGraphs, _submatrix
from hpcdgnn.strategies.sequences import SequenceSamples, sampling_of

__all__ = ["DRAWS", "MAX_SEQUENCES", "PER_SEQUENCE", "hybrid_closures", "hybrid_cost", "seconds_per_sampled_entry",
           "sequences_cost"]

#: sequences counted per split (evenly spaced); the others are priced as their nearest counted one
MAX_SEQUENCES = 32
#: node batches counted per counted sequence
PER_SEQUENCE = 4


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

    def work_of(self, layout, work: ModelWork, in_features: int, head: Counted | None = None
                ) -> tuple[Counted, float]:
        """One sample's (forward and backward work, bytes autograd saves) from its built ``layout``; ``head``:
        its task scoring when already known (else run and counted)."""
        seq = layout.seq
        S, L = seq.stop - seq.start, self.num_layers
        steps = range(seq.start, seq.stop)
        if layout.cells is not None:  # every layer over U, on Ã_t restricted to U
            U = layout.cells
            nnz = sum(_submatrix(self.snapshot(t).crow, self.snapshot(t).col, U)[0].shape[0] for t in steps)
            rows, entries = [S * U.shape[0]] * L, [nnz] * L
            # the sampler scans U's rows of each step's graph for the step graph and once per layer's operators
            scanned = (L + 1) * sum(_row_entries(self.snapshot(t).crow, U) for t in steps)
        else:
            rows = [S * layout.rows[li + 1].shape[0] for li in range(L)]
            entries = [0 if a is None else a.a.values().numel() for a in layout.adj]
            scanned = sum(_row_entries(self.snapshot(t).crow, layout.rows[li + 1]) for t in steps
                          for li in range(L) if layout.adj[li] is not None)
        model, saved = Counted(), 0.0
        for li, (sp, tm) in enumerate(work.layers):
            model += Counted(sp.flops(rows[li], S) + tm.flops(rows[li], S),
                             (sp.rnn_flops_per_row + tm.rnn_flops_per_row) * rows[li],
                             sp.sparse_per_nnz * entries[li], sp.ops(S) + tm.ops(S))
            saved += sp.saved(rows[li], rows[li] / S) + tm.saved(rows[li], rows[li] / S)
        if not layout.train:  # without gradients: the forward's share, nothing saved
            model, saved = model.scaled(work.forward_share), 0.0
        out = Counted(entries=float(scanned))
        out += model
        if layout.cells is None and self.encoder[0].precomputable and not self.reads_ax:
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

        vertices = self.task.sample_vertices(seq.t, nodes, epoch)
        layout = SampleLayout(self, seq, nodes, vertices, self._rng(epoch, seq, b, train), epoch=epoch, b=b,
                              train=train)
        return self.work_of(layout, work, in_features)


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
                    layout = h._layout(task, 1, seq, mine, (0,))
                    first, head = _scaled_head(h, layout, seq, first)
                    c, saved = h.work_of(layout, work, F, head)
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
            layout = h._layout(task, 1, whole, mine, (1, 2))
            first, head = _scaled_head(h, layout, whole, first)
            evaluation, _ = h.work_of(layout, work, F, head)
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


def hybrid_closures(plan, job, manifest, data_root: str) -> tuple[list[np.ndarray], int]:
    """Each rank's H1 closure rows under ``plan`` and the snapshots it reads them in (0..stop-1), as the run's
    set-up reads them (for ``check``, which reads no closure otherwise)."""
    graph = GraphStats(manifest, data_root)
    model, task, _ = _model_and_task(graph, job, manifest)
    h = _Hybrid(graph, job, manifest, model, task, plan)
    return _closures(graph, h, plan, task.reads_beyond_batch()), h.stop


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
