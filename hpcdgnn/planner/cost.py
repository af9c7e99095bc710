"""One cost model: a strategy's plan and its per-rank work turned into memory, traffic, balance and time.

A strategy that can be planned gives a classmethod ``cost(plan, job, manifest, graph) -> list[RankWork]``
next to its ``make_plan`` (the same plan the run would use): per rank, the rows and steps of each phase, the
resident input bytes and the bytes it sends per steady epoch by traffic tag (as ``metrics.jsonl``'s
``bytes_by_tag`` counts them, so a run checks the prediction). :func:`predict` adds what every strategy
shares — the gradient all-reduce, parameters with Adam's moments, the model's counted work
(:mod:`~hpcdgnn.planner.work`) — and prices it with the machine's rates (:mod:`~hpcdgnn.planner.rates`).

Time model (per rank, one steady epoch): compute = dense FLOPs / dense rate + nnz·width / sparse rate +
framework calls × call time, checkpoint blocks' re-run forward included at the forward's share and their Ã_t
normalised (and, for a backward, transposed) again at each forward (entries × seconds per entry; + a sampled
strategy's host-side sampler: entries scanned × seconds per entry; + a pair task's pairs × seconds per pair,
:meth:`HeadCost.seconds`);
communication = Σ collectives (latency + bytes / bandwidth), none of it hidden;
epoch = the slowest rank's compute + communication, plus, for a strategy whose time encoder passes its state
rank to rank (``pss``), the other ranks' time-encoder seconds it waits for, plus the slowest rank's separate
evaluation pass (sampled strategies). λ = max/min compute.

Memory model (per rank): resident inputs + parameters with gradients and Adam's two moments + the activations
autograd saves + the scores the task keeps to the epoch's end (``Task.held_bytes_per_pair`` of every pair the
rank scores, all splits: link prediction's logits for its AUC bins; ``held_score_bytes`` in a run's record).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpcdgnn.indices import unique_ints
from hpcdgnn.planner.rates import MachineRates
from hpcdgnn.planner.work import ModelWork

__all__ = ["Counted", "GraphStats", "HeadCost", "Prediction", "RankWork", "adjacency_bytes", "add", "halo_counts",
           "halo_traffic", "pool_traffic", "price"]


def add(d: dict[str, float], key: str, value: float) -> None:
    """``d[key] += value`` from 0."""
    d[key] = d.get(key, 0.0) + value


def adjacency_bytes(rows: int, nnz: float, itemsize: int) -> float:
    """A normalised Ã block held with its transpose (two CSR: int64 row pointers and columns, values)."""
    return 2 * ((rows + 1) * 8 + nnz * (8 + itemsize))


def halo_counts(graph: GraphStats, owner_of, num_ranks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reads[q]: rows (t, u) rank q reads from other ranks; serves[p]: rows of rank p other ranks read, once per
    reader; nnz[q]: entries of q's rows of every Ã_t) — the row and column sums of the P × P halo matrix, which
    is never built (at P = 20,000 it would take 3.2 GB).

    ``owner_of(t, vertices)``: the rank holding row (t, v). Row v of A_t reads u for every edge v → u (and
    itself: the self-loop Ã adds); q needs (t, u) once, whatever how many of its rows read it."""
    reads, serves = np.zeros(num_ranks), np.zeros(num_ranks)
    nnz = np.zeros(num_ranks)
    for t, (indptr, indices) in enumerate(graph.csr()):
        n = indptr.shape[0] - 1
        src = np.repeat(np.arange(n), np.diff(indptr))
        keep = src != indices
        src, dst = src[keep], indices[keep]
        rows = owner_of(t, np.arange(n))
        nnz += np.bincount(rows[src], minlength=num_ranks) + np.bincount(rows, minlength=num_ranks)
        cut = rows[src] != rows[dst]
        keys = unique_ints(rows[src[cut]] * n + dst[cut])
        reads += np.bincount(keys // n, minlength=num_ranks)
        serves += np.bincount(rows[keys % n], minlength=num_ranks)
    return reads, serves, nnz


def halo_traffic(layers, reads: np.ndarray, serves: np.ndarray, precomputed: bool, itemsize: int,
                 ranks: list[RankWork]) -> None:
    """Each aggregating layer's halo rows at its input width, forward (owners send ``serves``) and gradients back
    (readers send ``reads``); :func:`halo_counts`'s sums."""
    if len(ranks) == 1:
        return
    for li, ly in enumerate(layers):
        if ly.graph_recurrent or (li == 0 and precomputed):
            continue
        w = ly.in_features
        for q, r in enumerate(ranks):
            add(r.sent, "halo.fwd", serves[q] * w * itemsize)
            add(r.sent, "halo.bwd", reads[q] * w * itemsize)
            add(r.calls, "alltoall", 2)


def pool_traffic(layers, steps: int, num_ranks: int, itemsize: int, ranks: list[RankWork], runs: int = 1,
                 grad: bool = True) -> None:
    """Every rank's share of the top-k pools (EvolveGCN-H) of one layout over ``steps`` steps (nn/pool.py),
    its forward run ``runs`` times (a re-run checkpoint block: 2), its backward once if ``grad``."""
    if num_ranks == 1:
        return
    for li, ly in enumerate(layers):
        if not ly.pool_rows:
            continue
        for r in ranks:
            add(r.sent, f"layer{li}.pool.index", runs * num_ranks * steps * ly.pool_rows * 3 * 8)
            add(r.sent, f"layer{li}.pool.fwd", runs * steps * ly.pool_rows * ly.in_features * itemsize)
            if grad:
                add(r.sent, f"layer{li}.pool.bwd", steps * ly.pool_rows * ly.in_features * itemsize)
            add(r.calls, "allreduce", 2 * runs + grad)


@dataclass
class Counted:
    """Work a strategy adds up itself, sample by sample and layer by layer (a sampled strategy's layers run on
    rows of their own), in :class:`~hpcdgnn.planner.work.PhaseWork`'s units."""

    flops: float = 0.0
    rnn: float = 0.0
    """FLOPs of fused RNN layers."""
    sparse: float = 0.0
    """nnz × width."""
    ops: float = 0.0
    """Framework calls."""
    entries: float = 0.0
    """Entries of Ã_t the host-side sampler scans building the samples' blocks (priced at ``sample_seconds``)."""
    rebuilt: float = 0.0
    """Stored entries of Ã_t normalised again after the set-up (priced at ``norm_seconds``)."""
    transposed: float = 0.0
    """Stored entries of Ã_t transposed after the set-up (priced at ``transpose_seconds``)."""
    held_pairs: float = 0.0
    """Scored pairs whose scores the task keeps until the epoch's end (memory, not time: ``HeadCost.held_per_pair``
    bytes each)."""

    def __iadd__(self, other: Counted) -> Counted:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))
        return self

    def scaled(self, factor: float | dict[str, float]) -> Counted:
        """Every kind × ``factor``, or × ``factor.get(kind, 1)`` (the forward's share, for a pass without
        gradients: the sampler's work stays whole)."""
        f = factor if isinstance(factor, dict) else dict.fromkeys(self.__dataclass_fields__, factor)
        return Counted(**{k: getattr(self, k) * f.get(k, 1.0) for k in self.__dataclass_fields__})


@dataclass
class RankWork:
    """What one rank does in one steady epoch under a plan."""

    spatial_rows: float = 0.0
    spatial_steps: float = 0.0
    spatial_nnz: float = 0.0
    """Stored entries of this rank's rows of Ã_t, summed over its steps (one aggregation per layer reads them)."""
    temporal_rows: float = 0.0
    temporal_steps: float = 0.0
    resident_bytes: float = 0.0
    """Inputs held for the whole epoch: this rank's Ã_t (and transpose), the first layer's input, ..."""
    host_bytes: float = 0.0
    """Inputs a sampled strategy holds on the host and samples from (``summary.json``'s ``host_payload_bytes``)."""
    saved_divisor: float = 1.0
    """Checkpoint blocks: activations of one block of the timeline are held at once (IBM §3.1)."""
    rerun_spatial_rows: float = 0.0
    rerun_spatial_steps: float = 0.0
    rerun_spatial_nnz: float = 0.0
    rerun_temporal_rows: float = 0.0
    rerun_temporal_steps: float = 0.0
    rerun_passes: float = 0.0
    """Checkpoint blocks (IBM §3.1): the rows, steps and entries of Ã_t this rank runs forward a second time, in
    ``rerun_passes`` extra passes of the model (a block before the last one with a gradient runs forward without
    autograd, then again in the backward pass); priced at the forward's share of each kind."""
    rebuilt_calls: float = 0.0
    rebuilt_steps: float = 0.0
    rebuilt_nnz: float = 0.0
    transposes: float = 0.0
    transposed_nnz: float = 0.0
    """Checkpoint blocks keep no Ã_t (IBM §3.2): the normalisations (calls, snapshots, stored entries) each of
    their forward passes runs again, and the transposes (calls, entries) each backward builds anew."""
    spatial_saved_rows: float | None = None
    temporal_saved_rows: float | None = None
    """Rows whose activations autograd keeps (None: all the phase's rows); a causal model runs the steps past
    the training horizon without autograd."""
    sent: dict[str, float] = field(default_factory=dict)
    """Bytes this rank sends per epoch, by traffic tag."""
    calls: dict[str, float] = field(default_factory=dict)
    """Collective calls per epoch, ``alltoall`` / ``allreduce`` / ``p2p``."""
    serial_temporal: bool = False
    """The time encoder waits for the previous rank's state (``pss``)."""
    scored: list[int] = field(default_factory=list)
    """Snapshots whose task examples this rank scores whole."""
    scored_rows: np.ndarray | None = None
    """(T,) rows of each step whose examples it scores in place (where they live), or None."""
    counted: Counted | None = None
    """Training work the strategy counted itself (sampled strategies); replaces the row and step terms above."""
    evaluation: Counted | None = None
    """A separate evaluation pass after training (sampled strategies), counted likewise. Every rank waits for
    the slowest one's at the epoch's metrics, as it waits for the slowest training at the gradient all-reduce:
    the epoch costs the two maxima, not the largest sum."""
    saved_bytes: float | None = None
    """Peak bytes autograd holds, where the strategy counted them itself (one sample's, for sampled ones)."""
    optimizer_steps: float = 1.0
    """Gradient all-reduces per epoch: one per optimizer step (none under ``hybrid``'s ``async`` averaging,
    whose ranks step on their own gradients)."""


class GraphStats:
    """What the planner knows of a dataset: the manifest, and on demand each snapshot's CSR (cached)."""

    def __init__(self, manifest, data_root: str) -> None:
        self.manifest, self.root = manifest, data_root
        self._csr: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._raw_bytes: list[int] = []
        self._entry_bytes: list[int] = []
        self._loops: dict[int, np.ndarray] = {}
        #: figures a cost model derives from the data once for every P and variant it prices, by key
        self.derived: dict = {}

    @property
    def adjacency_nnz(self) -> np.ndarray:
        """(T,) stored entries of Ã_t: A_t's edges without self-loops, plus one self-loop per vertex."""
        if self._csr is not None:
            N = self.manifest.num_vertices
            return np.asarray([c.shape[0] - self.self_loops(t).shape[0] + N for t, (_, c) in enumerate(self._csr)],
                              dtype=np.int64)
        return np.asarray(self.manifest.snapshot_nnz, dtype=np.int64) + self.manifest.num_vertices

    def self_loops(self, t: int) -> np.ndarray:
        """The vertices whose row of A_t holds a self-loop (ascending; found once per snapshot)."""
        if t not in self._loops:
            indptr, indices = self.csr()[t]
            rows = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
            self._loops[t] = unique_ints(rows[rows == indices])
        return self._loops[t]

    def entry_bytes(self, t: int) -> int:
        """Bytes of one stored entry of A_t as read (its column index and weight)."""
        self.csr()
        return self._entry_bytes[t]

    @property
    def raw_bytes(self) -> list[int]:
        """(T,) bytes of each snapshot's A_t as read (row pointers, columns, weights)."""
        self.csr()
        return self._raw_bytes

    def csr(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every snapshot's (indptr, indices), read once."""
        if self._csr is None:
            from hpcdgnn.data.shard_reader import ShardReader

            reader = ShardReader(self.root, self.manifest)
            try:
                self._csr = []
                for t in range(self.manifest.num_snapshots):
                    s = reader.read(t)
                    self._csr.append((np.asarray(s.indptr, dtype=np.int64), np.asarray(s.indices, dtype=np.int64)))
                    self._raw_bytes.append(int(s.indptr.nbytes + s.indices.nbytes + s.weights.nbytes))
                    self._entry_bytes.append(int(s.indices.itemsize + s.weights.itemsize))
            finally:
                reader.close()
        return self._csr


@dataclass
class Prediction:
    """The planner's figures for one strategy at one P."""

    strategy: str
    options: dict
    num_ranks: int
    memory_bytes: float
    """Predicted peak of the most loaded rank: resident inputs + parameters with gradients and Adam's moments +
    the activations autograd saves + the scores the task keeps to the epoch's end."""
    memory_by_rank: list[float]
    memory_parts: dict[str, float]
    """The most loaded rank's ``inputs`` (``summary.json``'s ``engine_bytes``), ``activations``
    (``activation_peak_bytes``), ``parameters`` (weights, gradients, Adam's two moments) and, for a sampled
    strategy, ``host`` (``host_payload_bytes``: the snapshots it samples from) and, for a task that keeps its
    scores, ``scores`` (``held_score_bytes``)."""
    bytes_per_epoch: float
    """All ranks, one steady epoch (as ``metrics.jsonl``'s ``bytes_sent``)."""
    bytes_by_tag: dict[str, float]
    balance: float
    """λ = max/min per-rank compute seconds."""
    compute_s: float
    comm_s: float
    epoch_s: float
    notes: list[str] = field(default_factory=list)
    fits: bool = True
    picked: bool = False

    def to_json(self) -> dict:
        """JSON-ready fields (a figure not predicted is null)."""
        def plain(v):
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            if isinstance(v, list | tuple):
                return [plain(x) for x in v]
            if isinstance(v, bool | str | np.bool_) or v is None:
                return v if not isinstance(v, np.bool_) else bool(v)
            if isinstance(v, int | np.integer):
                return int(v)
            if isinstance(v, float | np.floating):
                return None if v != v or v in (float("inf"), float("-inf")) else float(v)
            return v
        return {k: plain(getattr(self, k)) for k in self.__dataclass_fields__}


def _comm_seconds(sent: dict[str, float], calls: dict[str, float], rates: MachineRates, P: int) -> float:
    """Σ calls × latency + bytes / bandwidth: sums (gradients, pools) at the all-reduce's, the rest at the
    all-to-all's (point-to-point sends too)."""
    if P == 1:
        return 0.0
    summed = sum(v for k, v in sent.items() if k == "grad_allreduce" or ".pool." in k)
    ar_lat, ar_bw = rates.collective("allreduce", P)
    a2a_lat, a2a_bw = rates.collective("alltoall", P)
    latency = sum(n * (ar_lat if kind == "allreduce" else a2a_lat) for kind, n in calls.items())
    return latency + summed / ar_bw + (sum(sent.values()) - summed) / a2a_bw


def _rerun(r: RankWork, work: ModelWork) -> Counted:
    """The forward that checkpoint blocks run twice (:attr:`RankWork.rerun_passes`), at the forward's share of
    each counted kind: its rows, steps and entries, and each extra pass's fixed calls."""
    sp, tm = work.spatial, work.temporal
    rows, steps = (r.rerun_spatial_rows, r.rerun_temporal_rows), (r.rerun_spatial_steps, r.rerun_temporal_steps)
    c = Counted(sp.flops(rows[0], steps[0]) + tm.flops(rows[1], steps[1]),
                sp.rnn_flops_per_row * rows[0] + tm.rnn_flops_per_row * rows[1],
                sp.sparse_per_nnz * r.rerun_spatial_nnz,
                sp.ops_per_step * steps[0] + tm.ops_per_step * steps[1]
                + (sp.ops_fixed + tm.ops_fixed) * r.rerun_passes)
    return c.scaled(work.forward_share) if work.forward_share else c


def _rows_work(r: RankWork, work: ModelWork) -> Counted:
    """The model's counted work over a rank's rows, steps and entries of Ã_t: forward and backward up to the
    training horizon, the forward's share past it (no autograd there: the share of rows autograd keeps,
    :attr:`RankWork.spatial_saved_rows` and :attr:`RankWork.temporal_saved_rows`, of its steps and entries too)."""
    sp, tm = work.spatial, work.temporal

    def kept(saved: float | None, rows: float) -> float:
        return 1.0 if saved is None or rows <= 0 else min(max(saved / rows, 0.0), 1.0)

    def part(fs: float, ft: float) -> Counted:  # shares fs, ft of the spatial and temporal rows, steps, entries
        return Counted(sp.flops(r.spatial_rows * fs, r.spatial_steps * fs)
                       + tm.flops(r.temporal_rows * ft, r.temporal_steps * ft),
                       sp.rnn_flops_per_row * r.spatial_rows * fs + tm.rnn_flops_per_row * r.temporal_rows * ft,
                       sp.sparse_per_nnz * r.spatial_nnz * fs,
                       sp.ops_per_step * r.spatial_steps * fs + tm.ops_per_step * r.temporal_steps * ft)

    fs, ft = kept(r.spatial_saved_rows, r.spatial_rows), kept(r.temporal_saved_rows, r.temporal_rows)
    c = part(fs, ft)
    c.ops += sp.ops_fixed + tm.ops_fixed
    if fs < 1.0 or ft < 1.0:
        c += part(1.0 - fs, 1.0 - ft).scaled(work.forward_share or 1.0)
    return c


def _rebuilt(r: RankWork) -> Counted:
    """What checkpoint blocks' reloads cost (:attr:`RankWork.rebuilt_nnz`): the entries normalised and
    transposed again, and the framework calls of each normalisation, snapshot and transpose
    (:func:`~hpcdgnn.planner.work.rebuild_calls`)."""
    from hpcdgnn.planner.work import rebuild_calls

    per_call, per_step, per_transpose = rebuild_calls()
    return Counted(ops=per_call * r.rebuilt_calls + per_step * r.rebuilt_steps + per_transpose * r.transposes,
                   rebuilt=r.rebuilt_nnz, transposed=r.transposed_nnz)


def _seconds(c: Counted, rates: MachineRates, width: int) -> float:
    """Counted work in seconds at the machine's rates (the module docstring's compute)."""
    return (c.flops / rates.dense(width) + c.rnn / rates.rnn(width) + c.sparse / rates.sparse(width)
            + c.ops * rates.op_seconds + c.entries * rates.sample_seconds + c.rebuilt * rates.norm_seconds
            + c.transposed * rates.transpose_seconds)


@dataclass(frozen=True)
class HeadCost:
    """What the task head costs per snapshot it scores, from the task's own figures (:meth:`of`)."""

    work: np.ndarray
    """(T,) multiply-adds of scoring each snapshot's examples (``Task.snapshot_work``) and of the head's transform
    of its vertices' embeddings (``Task.vertex_work``)."""
    pairs: np.ndarray | None
    """(T,) pairs scored from each snapshot (``Task.scored_pairs``), or None: a task that scores vertices."""
    train: np.ndarray
    """(T,) whether Z_t's examples train (t up to the task's horizon)."""
    saved_per_row: float
    saved_per_pair: float
    """Bytes autograd keeps per row the head reads (the training snapshots' scored whole; in place, every row
    it holds and fetches) and per training pair (``Task.saved_bytes``)."""
    num_vertices: int
    held_per_pair: float = 0.0
    """Bytes the task keeps per scored pair, every split, until the epoch's end (``Task.held_bytes_per_pair``)."""
    positives: tuple[np.ndarray, np.ndarray] | None = None
    """(T,) positive pairs and (T,) their distinct endpoints (``Task.scored_positives``), or None."""
    row_bytes: float = 0.0
    """Bytes of one embedding row (``emb_features`` × itemsize): what a fetched row moves."""

    @classmethod
    def of(cls, job, manifest, emb_features: int, itemsize: int) -> HeadCost:
        """The job's task head on ``emb_features``-wide embeddings of ``itemsize``-byte values."""
        from hpcdgnn.tasks import task_class

        task = task_class(job.task.name)
        train = np.arange(manifest.num_snapshots) <= task.train_horizon(job.task, manifest)
        per_row, per_pair = task.saved_bytes(job.task, emb_features, itemsize)
        work = task.snapshot_work(job.task, manifest) + task.vertex_work(job.task, manifest, emb_features)
        return cls(work, task.scored_pairs(job.task, manifest), train, per_row,
                   per_pair, manifest.num_vertices, task.held_bytes_per_pair(itemsize),
                   task.scored_positives(job.task, manifest), float(emb_features * itemsize))

    def fetched(self, ranks: list[RankWork]) -> list[float] | None:
        """Rows each rank fetches per epoch to score pairs in place, or None (nothing scored in place, or P = 1).

        They move as ``task.fwd``, their gradients back as ``task.bwd``. An expectation, not a count: step t's
        positives have ``endpoints`` distinct ends, its negatives uniform ends, and a rank holds r_t of the N rows;
        of the two placements the run chooses between, the one fetching fewer rows over all ranks —

        * by source row: rank r scores the pairs whose source row it holds (a share r_t/N); it fetches the lacking
          destinations: ``(1 − r_t/N)·[A·(1 − e^(−p·s/A)·e^(−n·s/N)) + (N − A)·(1 − e^(−n·s/N))]`` with A the
          endpoints, p positives, n negatives, s = r_t/N;
        * by step: rank r scores every pair of the steps t ≡ r (mod P) and fetches their lacking ends:
          ``(1 − r_t/N)·[A + (N − A)·(1 − e^(−2n/N))]``.
        """
        P = len(ranks)
        if P == 1 or self.pairs is None or self.positives is None or any(r.scored_rows is None for r in ranks):
            return None
        N = float(self.num_vertices)
        pos, ends = self.positives
        neg = np.maximum(self.pairs - pos, 0.0)
        area = np.maximum(ends, 1.0)
        steps = np.flatnonzero(self.pairs > 0)
        by_source, by_step = [], []
        for q, r in enumerate(ranks):
            held = np.asarray(r.scored_rows, dtype=np.float64)
            lack, s = 1.0 - held / N, held / N
            miss_neg = np.exp(-neg * s / N)
            rows = lack * (ends * (1.0 - np.exp(-pos * s / area) * miss_neg) + (N - ends) * (1.0 - miss_neg))
            by_source.append(float(rows[steps].sum()))
            mine = steps[steps % P == q]
            rows = lack * (ends + (N - ends) * -np.expm1(-2.0 * neg / N))
            by_step.append(float(rows[mine].sum()))
        return by_source if sum(by_source) < sum(by_step) else by_step

    def _placed(self, r: RankWork) -> np.ndarray:
        """(T,) the share of each step's examples rank ``r`` scores in place: its rows of the step (by source row)."""
        return r.scored_rows / self.num_vertices

    def seconds(self, r: RankWork, rates: MachineRates, P: int) -> float:
        """Host and framework seconds of the pairs rank ``r`` scores, at the machine's ``pair_seconds`` from whole
        snapshots; in place every rank draws all pairs and scores its share (``drawn_pair_seconds``,
        ``placed_pair_seconds``; by source row, the upper bound: scored by step it draws only its steps'); one
        rank alone scores whole snapshots."""
        if self.pairs is None:
            return 0.0
        whole, kept = self._scored(r, P)
        if r.scored_rows is None or P == 1:
            return rates.pair_seconds * (whole + kept)
        every = float(np.sum(self.pairs))
        return rates.pair_seconds * whole + rates.drawn_pair_seconds * every + rates.placed_pair_seconds * kept

    def _scored(self, r: RankWork, P: int) -> tuple[float, float]:
        """Pairs rank ``r`` scores per epoch, every split: (of whole snapshots, in place — its share by source
        row, every pair at P = 1)."""
        whole = float(np.sum(self.pairs[r.scored]))
        if r.scored_rows is None:
            return whole, 0.0
        return whole, float(np.sum(self.pairs)) if P == 1 else float(np.sum(self.pairs * self._placed(r)))

    def held(self, r: RankWork, P: int) -> float:
        """Bytes of the scores rank ``r`` keeps until the epoch's end: those of every pair it scores."""
        if self.pairs is None or not self.held_per_pair:
            return 0.0
        return self.held_per_pair * sum(self._scored(r, P))

    def saved(self, r: RankWork, P: int) -> float:
        """Bytes the head keeps for the backward on rank ``r``: the training rows it scores whole, or in place
        every row it holds, of every step, and the rows it fetches (it scores one block of both) — of step t, the
        distinct destinations of its pairs among the N − r_t rows it lacks, as if drawn uniformly (by source
        row: an upper bound where the run scores by step)."""
        N = self.num_vertices
        rows = N * float(np.sum(self.train[r.scored]))
        pairs = float(np.sum(self.pairs[r.scored] * self.train[r.scored])) if self.pairs is not None else 0.0
        if r.scored_rows is not None and P == 1:
            rows += N * float(np.sum(self.train))
            pairs += float(np.sum(self.pairs * self.train)) if self.pairs is not None else 0.0
        elif r.scored_rows is not None:
            rows += float(np.sum(r.scored_rows))
            if self.pairs is not None:
                share = self._placed(r)
                rows += float(np.sum((N - r.scored_rows) * -np.expm1(-self.pairs * share / N)))
                pairs += float(np.sum(self.pairs * self.train * share))
        return self.saved_per_row * rows + self.saved_per_pair * pairs


def price(strategy: str, options: dict, ranks: list[RankWork], work: ModelWork, parameters: int,
          rates: MachineRates, width: int, memory_per_rank: float | None,
          head: HeadCost | None = None) -> Prediction:
    """Turn per-rank work into a :class:`Prediction` (the module docstring's time and memory model).

    Args:
        strategy: the strategy's name.
        options: its options (reported).
        ranks: :class:`RankWork` of each rank.
        work: the model's counted work per row, step and edge.
        parameters: trainable parameters of model and task head (all-reduced every step).
        rates: the machine's rates.
        width: the model's hidden width (selects the measured product rates).
        memory_per_rank: the budget a rank has, or None (no limit).
        head: what the task head costs per snapshot it scores (:class:`HeadCost`), or None.
    """
    P, item = len(ranks), work.itemsize
    grad = parameters * item
    tags: dict[str, float] = {}
    compute, evaluation, comm, temporal, memory, parts = [], [], [], [], [], []
    fetched = head.fetched(ranks) if head is not None else None
    held_rows = sum(float(np.sum(r.scored_rows)) for r in ranks) if fetched is not None else 0.0
    for q, r in enumerate(ranks):
        sent = dict(r.sent)
        calls = dict(r.calls)
        if fetched is not None:  # scoring in place: the owners send the rows (and take their gradients back)
            sent["task.fwd"] = sent["task.bwd"] = fetched[q] * head.row_bytes
            # the request: int32 positions (a bitmask where smaller, at most the others' rows / 8) and the counts
            others = held_rows - float(np.sum(r.scored_rows))
            sent["task.index"] = min(4.0 * fetched[q], others / 8.0) + 8.0 * (P - 1)
            calls["alltoall"] = calls.get("alltoall", 0.0) + 4
        if P > 1:
            sent["grad_allreduce"] = sent.get("grad_allreduce", 0.0) + grad * r.optimizer_steps
            calls["allreduce"] = calls.get("allreduce", 0.0) + r.optimizer_steps
        for k, v in sent.items():
            tags[k] = tags.get(k, 0.0) + v
        sp, tm = work.spatial, work.temporal
        c = r.counted if r.counted is not None else _rows_work(r, work)
        t_tm = (tm.flops(r.temporal_rows, r.temporal_steps) / rates.dense(width) + tm.rnn_flops_per_row *
                r.temporal_rows / rates.rnn(width) + tm.ops(r.temporal_steps) * rates.op_seconds)
        if r.rerun_passes or r.rebuilt_calls or head is not None:
            c = c.scaled(1.0)  # a copy: a sampled strategy's own count is added to, not changed
        if r.rerun_passes:
            c += _rerun(r, work)
        if r.rebuilt_calls:
            c += _rebuilt(r)
        if head is not None:
            placed = float(np.sum(head.work * head._placed(r))) if r.scored_rows is not None else 0.0
            c.flops += 2.0 * (float(np.sum(head.work[r.scored])) + placed)
        compute.append(_seconds(c, rates, width) + (head.seconds(r, rates, P) if head is not None else 0.0))
        evaluation.append(0.0 if r.evaluation is None else _seconds(r.evaluation, rates, width))
        temporal.append(t_tm if r.serial_temporal else 0.0)
        comm.append(_comm_seconds(sent, calls, rates, P))
        s_rows = r.spatial_rows if r.spatial_saved_rows is None else r.spatial_saved_rows
        t_rows = r.temporal_rows if r.temporal_saved_rows is None else r.temporal_saved_rows
        # per-vertex terms once (a block's recurrence is one sequence per vertex), per-row ones of one block
        vertices = (r.spatial_rows / r.spatial_steps if r.spatial_steps else 0.0,
                    r.temporal_rows / r.temporal_steps if r.temporal_steps else 0.0)
        saved = (sp.saved_per_row * s_rows + tm.saved_per_row * t_rows) / r.saved_divisor \
            + sp.saved_per_vertex * vertices[0] + tm.saved_per_vertex * vertices[1] \
            if r.saved_bytes is None else r.saved_bytes
        if head is not None and r.saved_bytes is None:  # a sampled strategy's own count holds its head's
            saved += head.saved(r, P)
        # the kept scores: counted with a sampled strategy's samples, else priced from the pairs it scores
        held = 0.0
        if head is not None:
            held = head.held(r, P) if r.counted is None else head.held_per_pair * (
                r.counted.held_pairs + (r.evaluation.held_pairs if r.evaluation is not None else 0.0))
        memory.append(r.resident_bytes + r.host_bytes + 4 * grad + saved + held)
        parts.append({"inputs": r.resident_bytes, "activations": saved, "parameters": 4.0 * grad,
                      **({"host": r.host_bytes} if r.host_bytes else {}), **({"scores": held} if held else {})})
    # a pipelined time encoder: the slowest rank also waits for every other rank's stretch
    serial = sum(temporal) - max(temporal) if any(temporal) else 0.0
    epoch = max(c + m for c, m in zip(compute, comm, strict=True)) + serial + max(evaluation)
    compute = [c + e for c, e in zip(compute, evaluation, strict=True)]
    lam = max(compute) / min(compute) if min(compute) > 0 else float("inf")
    fits = memory_per_rank is None or bool(max(memory) <= memory_per_rank)
    top = int(np.argmax(memory))
    tags = {k: v for k, v in tags.items() if v}  # a tag that moves nothing is left out
    return Prediction(strategy=strategy, options=options, num_ranks=P, memory_bytes=memory[top],
                      memory_by_rank=memory, memory_parts=parts[top], bytes_per_epoch=sum(tags.values()),
                      bytes_by_tag=tags, balance=lam, compute_s=max(compute), comm_s=max(comm), epoch_s=epoch,
                      fits=fits)
