"""The cost of a sampled strategy (``sequences``, ReInc §3.4): its samples' rows counted without training.

A full-batch strategy's rows follow from its plan; a sample's follow from the sampler. Layer l of a sample runs
on the rows layer l + 1 reads (its batch's neighbours, drawn by ``fanouts``), and a graph-recurrent cell on the
receptive closure of the scored rows (:class:`~hpcdgnn.strategies.sampling.SampleGraphs`). So rank 0 builds
each counted sample's :class:`~hpcdgnn.strategies.sample_layout.SampleLayout` — the strategy's own row logic —
over the snapshots' structure alone (no features, no model run), and prices every layer on its own rows with
the model's per-layer counted work (:attr:`~hpcdgnn.planner.work.ModelWork.layers`):

    work(sample) = Σ_l  flops_l(S·n_l, S) + sparse_l · nnz_l + calls_l(S),     saved(sample) likewise,

with S the window, n_l the rows layer l outputs and nnz_l the entries of its sampled block (layer 0 of a GCN
with ``reuse: off`` also aggregates Ã_t·X_t itself: nnz_0·F more, forward only). Samples run one at a time, so
the activation peak is the largest sample's. Evaluation samples cost their forward share. Counting every
sample of a large graph would cost a training epoch, so evenly spaced sequences (at most
:data:`MAX_SEQUENCES` per split) each count :data:`PER_SEQUENCE` node batches of epoch 1, and every sequence
is priced as its nearest counted one.

The traffic is exact: each optimizer step all-reduces the gradients and the step's example count (8 bytes), and
``placement: fetch`` sends each snapshot a later rank's windows need (Ã_t's CSR, X_t, and A_t as read for
graph-recurrent cells) once an epoch.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch

from hpcdgnn.planner.cost import Counted, GraphStats, RankWork, add
from hpcdgnn.planner.work import ModelWork
from hpcdgnn.strategies.sampling import HostSnapshot, SampleGraphs, _submatrix
from hpcdgnn.strategies.sequences import SequenceSamples, sampling_of

__all__ = ["MAX_SEQUENCES", "PER_SEQUENCE", "seconds_per_sampled_entry", "sequences_cost"]

#: sequences counted per split (evenly spaced); the others are priced as their nearest counted one
MAX_SEQUENCES = 32
#: node batches counted per counted sequence
PER_SEQUENCE = 4


class _Counter(SequenceSamples, SampleGraphs):
    """The sampler over the snapshots' structure (all-ones weights: a sample's rows and entries do not depend
    on the values), on rank 0: what :class:`~hpcdgnn.strategies.sequences.SequencesStrategy` samples."""

    def __init__(self, graph: GraphStats, job, manifest, model, task, seqs) -> None:
        self.graph, self.N, self.opts, self.seqs, self.task = graph, manifest.num_vertices, job.strategy, seqs, task
        self.ctx = SimpleNamespace(job=job, manifest=manifest, dtype=torch.float64, device=torch.device("cpu"))
        vars(self).update(sampling_of(model, job))
        self._host: dict[int, HostSnapshot] = {}
        self._targets: dict[int, torch.Tensor] = {}

    def snapshot(self, t: int) -> HostSnapshot:
        if t not in self._host:
            from hpcdgnn.ops.sparse import gcn_norm

            indptr, indices = self.graph.csr()[t]
            ones = np.ones(indices.shape[0])
            a = gcn_norm(t, indptr, indices, ones, torch.float64).a
            self._host[t] = HostSnapshot(a.crow_indices().numpy(), a.col_indices().numpy(), a.values().numpy(),
                                         None, raw=(indptr, indices, ones))
        return self._host[t]

    def count(self, seq, b: int, nodes: np.ndarray, work: ModelWork, epoch: int, train: bool,
              in_features: int) -> tuple[Counted, float]:
        """One sample's (forward and backward work, bytes autograd saves)."""
        from hpcdgnn.strategies.sample_layout import SampleLayout

        vertices = self.task.sample_vertices(seq.t, nodes, epoch)
        layout = SampleLayout(self, seq, nodes, vertices, self._rng(epoch, seq, b, train), epoch=epoch, b=b,
                              train=train)
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
        out, saved = Counted(entries=float(scanned)), 0.0
        for li, (sp, tm) in enumerate(work.layers):
            out += Counted(sp.flops(rows[li], S) + tm.flops(rows[li], S),
                           (sp.rnn_flops_per_row + tm.rnn_flops_per_row) * rows[li],
                           sp.sparse_per_nnz * entries[li], sp.ops(S) + tm.ops(S))
            saved += (sp.saved_per_row + tm.saved_per_row) * rows[li]
        if layout.cells is None and self.encoder[0].precomputable and not self.reads_ax:
            out.sparse += entries[0] * in_features  # Ã_t·X_t, which the counted model reads precomputed
        return out, saved


def _row_entries(crow: np.ndarray, rows: np.ndarray) -> int:
    """Entries of a CSR matrix's ``rows``."""
    return int((crow[rows + 1] - crow[rows]).sum())


def seconds_per_sampled_entry(repeats: int = 5) -> float:
    """Wall seconds per entry the sampler scans building one sample's block (``calibrate``'s
    ``sample_seconds``): :meth:`~hpcdgnn.strategies.sampling.SampleGraphs.sampled_block` over every row of four
    random snapshots (N = 4,096, 8 neighbours)."""
    import time

    from hpcdgnn.ops.sparse import gcn_norm

    n, degree, S = 4096, 8, 4
    rng = np.random.default_rng(0)
    snaps = []
    for t in range(S):
        indices = np.sort(rng.integers(0, n, (n, degree)), axis=1).reshape(-1)
        indptr = np.arange(0, n * degree + 1, degree, dtype=np.int64)
        a = gcn_norm(t, indptr, indices, np.ones(indices.shape[0]), torch.float64).a
        snaps.append(HostSnapshot(a.crow_indices().numpy(), a.col_indices().numpy(), a.values().numpy(), None))

    class _Host(SampleGraphs):
        ctx = SimpleNamespace(dtype=torch.float32, device=torch.device("cpu"))

        def snapshot(self, t: int) -> HostSnapshot:
            return snaps[t]

    host, rows = _Host(), np.arange(n)
    best = float("inf")
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        host.sampled_block(0, S, rows, 0, rng)
        best = min(best, time.perf_counter() - t0)
    return best / sum(_row_entries(h.crow, rows) for h in snaps)


def _spaced(seqs: list, at_most: int) -> list:
    """At most ``at_most`` of ``seqs``, evenly spaced, first and last included."""
    if len(seqs) <= at_most:
        return list(seqs)
    return [seqs[i] for i in sorted({round(k * (len(seqs) - 1) / (at_most - 1)) for k in range(at_most)})]


def _per_sequence(counter: _Counter, work: ModelWork, split: int, in_features: int) -> dict[int, tuple]:
    """{sequence index: (mean work of one of its samples, largest saved bytes)} for every sequence of ``split``,
    counted on the spaced ones (epoch 1's node batches) and carried to the rest from the nearest."""
    seqs = [s for s in counter.seqs if s.split == split]
    if not seqs:
        return {}
    nodes = counter.node_batches(1)
    picks = np.linspace(0, len(nodes) - 1, min(PER_SEQUENCE, len(nodes))).round().astype(int)
    counted = {}
    for seq in _spaced(seqs, MAX_SEQUENCES):
        total, peak = Counted(), 0.0
        for b in sorted(set(picks.tolist())):
            c, saved = counter.count(seq, b, nodes[b], work, 1, split == 0, in_features)
            total += c
            peak = max(peak, saved)
        counted[seq.index] = (total.scaled(1.0 / len(set(picks.tolist()))), peak)
    done = np.asarray(sorted(counted))
    return {s.index: counted[int(done[np.abs(done - s.index).argmin()])] for s in seqs}


def _snapshot_bytes(graph: GraphStats, t: int, N: int, F: int, item: int, cells: bool) -> float:
    """A held snapshot (:class:`HostSnapshot`): Ã_t's CSR (float64 values, indices as
    :func:`~hpcdgnn.ops.sparse.csr_tensor` stores them), X_t, and A_t as read for cells."""
    from hpcdgnn.indices import torch_index_dtype

    nnz = int(graph.adjacency_nnz[t])
    index = torch.empty(0, dtype=torch_index_dtype(max(nnz, N))).element_size()
    return (N + 1 + nnz) * index + nnz * 8 + N * F * item + (graph.raw_bytes[t] if cells else 0)


def sequences_cost(plan, job, manifest, graph: GraphStats, work: ModelWork) -> list[RankWork]:
    """Per-rank work, memory and traffic of one steady epoch of ``sequences`` under ``plan`` (module docstring).

    Args:
        plan: the ``sequences`` plan (R1: each rank's block of sequences and the snapshots it holds).
        job: the typed job.
        manifest: its dataset's manifest.
        graph: the dataset's structure (its snapshots' CSR, read once).
        work: the model's counted work, per layer.

    Shapes:
        one :class:`~hpcdgnn.planner.cost.RankWork` per rank.
    """
    from hpcdgnn.comm.communicator import Communicator
    from hpcdgnn.data.shard_reader import ShardReader
    from hpcdgnn.partition.sequences import sequences_of
    from hpcdgnn.regimes import regime_of
    from hpcdgnn.regimes.base import item_bytes
    from hpcdgnn.tasks.base import Scored

    o, P, T, N, F = job.strategy, plan.num_ranks, plan.num_snapshots, plan.num_vertices, manifest.num_features
    item, seqs = item_bytes(job), sequences_of(manifest, job)
    key = ("sequences", repr(o), job.model, job.task, job.train.seed)
    if key not in graph.derived:  # the samples' counts do not depend on P: once for every P the plan prices
        regime = regime_of("model", job.model.name)
        model = regime.build_model(job, manifest)
        task = regime.build_task(job.task, manifest, getattr(model, "out_features", job.model.hidden),
                                 job.train.seed)
        reader = ShardReader(graph.root, manifest)
        try:  # the destinations a link-prediction sample reads come from its targets
            task.setup(reader, Scored(snapshots=tuple(range(T))), Communicator.alone())
        finally:
            reader.close()
        counter = _Counter(graph, job, manifest, model, task, seqs)
        graph.derived[key] = (counter, [_per_sequence(counter, work, split, F) for split in (0, 1, 2)])
    counter, by_split = graph.derived[key]
    nb = len(counter.node_batches(1))
    train = sum(s.split == 0 for s in seqs) * nb
    Q = o.batch_samples or sum(s.split == 0 for s in seqs)
    steps = math.ceil(train / Q)
    entry = N * F * item  # a reuse-cache entry: Ã_t·X_t (N × F)
    if counter.reads_basis:
        entry = N * counter.encoder[0].w_x.shape[0] * item
    own = plan.snapshot_bounds
    ranks = []
    for p, r in enumerate(plan.ranks):
        a, b = r["sequences"]
        mine = seqs[a:b]
        done, evaluation, peak = Counted(), Counted(), 0.0
        for s in mine:
            if s.split >= 0 and s.index in by_split[s.split]:
                c, saved = by_split[s.split][s.index]
                if s.split == 0:
                    done += c.scaled(nb)
                    peak = max(peak, saved)
                else:  # without gradients
                    evaluation += c.scaled(nb).scaled(work.forward_share)
        lo, hi = r["window_snapshots"]
        held = set(range(lo, hi)) | (set(range(own[p], own[p + 1])) if o.placement == "fetch" else set())
        resident = sum(_snapshot_bytes(graph, t, N, F, item, counter.cells) for t in held)
        if counter.reads_ax or counter.reads_basis:
            reads = len(set(range(lo, hi)))
            resident += min(reads, int(o.cache_mb * 2**20) // max(entry, 1)) * entry
        w = RankWork(counted=done, evaluation=evaluation, saved_bytes=peak, optimizer_steps=steps, host_bytes=resident,
                     scored=[s.t for s in mine])
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
                        sum(_snapshot_bytes(graph, t, N, F, item, counter.cells) for t in need))
                    add(ranks[p].calls, "p2p", 1)
    return ranks
