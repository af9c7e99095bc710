"""The event regime's cost model: ``strategy: memory`` (DistTGL §3.2) at i×j×k priced from the stream.

Per steady epoch, on the most loaded rank (the module docstring of :mod:`hpcdgnn.planner.cost` gives the time
model; this one counts TGN's work instead of a snapshot model's):

* **work**: trainer (a, b, c) embeds (2 + ``task.negatives``) roots for each of its 1/i of segment c's events; the
  group that evaluates embeds (2 + ``task.eval_negatives``) roots for each of its 1/(i·j) of the validation and test
  events, forward only (``eval_protocol: per_batch``: 2 per event without neighbours, which only update the memory,
  plus a slice's distinct nodes among its endpoints and uniform negatives, counted as below on the evaluation
  events; a dataset's fixed negatives: their mean count per event). A
  root reads s̄ real neighbour slots — s̄ = E[min(k, events the node had before t)], over the positives' endpoints and
  over uniform negatives at 32 times of the stream — and updates 1 + s̄ memories (an upper bound: the run updates each
  distinct (node, time) once); in training under ``train_protocol: per_batch`` (one time a slice) or
  ``memory_time: event`` (an update that ignores the time) the slice's distinct nodes among its roots and their
  k most recent neighbours instead. ``train_protocol: per_batch``: a batch's (a slice's) distinct roots among
  its endpoints and uniform negatives, each with the events' mean s̄. Both are counted on up to 32 batches
  spread over the training events (:func:`batch_nodes`; uniform negatives drawn with seed 0), since a stream's
  endpoints repeat. Multiply-adds per root:
  (1 + s̄, or the updates above)·(d_t + mail + d)·3d (GRU: time, mail and memory products) + s̄·(d + D + d_t)·2H
  (keys, values) + (d + d_t)·H (query) + (H + d)·H (output) + H² (decoder); training counts 3× forward (backward ≈ 2×).
  Outside training a root with at least ⌈k/2⌉ real slots (``tgn.dense_min``) attends as a dense batch: its keys
  and values cost 2(d + D + d_t)·H (the weights once) + 2k·(d + D + d_t)·heads (every slot, padded ones too); the
  share of such roots and the others' s̄ come from the same counts as s̄.
  ``model.memory_time: event``: an evaluated event updates 2 memories (its endpoints' mails, applied when
  written) and an embedded root none, plus one pass over the N pending mails.
* **traffic**: the gradient all-reduce every iteration on every rank (``grad_allreduce``: parameters × item
  size × iterations, exact), the evaluating group's scores (``memory.eval``: 8·(1 + m) bytes per event plus
  the pickled envelope per batch and rank, each to the group's i·j − 1 other ranks); ``memory.order``
  barriers move no bytes (their latency counts).
* **memory**: the node memory (N × (d + mail) values, N update times, N mail gaps under ``memory_time:
  event``), the stream, the temporal CSR and the edge features as inputs; parameters with gradients and Adam's
  moments; as activations the larger of one training slice's saved tensors, (1 + s̄)·(8d + d_t) + s̄·(D + d_t +
  3H) + 3H + d values per root, and what one evaluation slice holds at once (no autograd state, but (2 + m)
  roots an event): each distinct occurrence's state row and, updated at the read (``memory_time: query``), its
  Φ and the GRU's products and gates (10d + d_t); each root's s̄ slots' rows, Φ and features and its 3H + d;
  each scored pair's 2H.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from hpcdgnn.indices import unique_ints
from hpcdgnn.planner.cost import GraphStats, Prediction
from hpcdgnn.planner.rates import MachineRates
from hpcdgnn.strategies.node_memory import NodeMemory
from hpcdgnn.tasks.temporal_link_prediction import TemporalLinkPrediction

__all__ = ["batch_nodes", "mean_slots", "predict_memory", "slot_stats"]

#: bytes pickle wraps around one rank's (pos, neg) score arrays in ``allgather_obj`` (two float64 arrays, out of
#: band: the stream that rebuilds them)
_ENVELOPE = 138
#: framework calls per batch (forward ~40 tensor operations, backward and Adam ~3× that)
_CALLS = {"train": 160, "eval": 45}


def slot_stats(slots: np.ndarray, k: int) -> tuple[float, float, float]:
    """(s̄, the share of roots with at least :func:`~hpcdgnn.nn.models.tgn.dense_min` real slots, which attend
    densely outside training, and the others' s̄) of roots with ``slots`` real neighbour slots of ``k``."""
    return _stats(_slot_sums(slots, k))


def _slot_sums(slots: np.ndarray, k: int) -> np.ndarray:
    """[roots, their slots, dense roots, the other roots' slots]: what :func:`slot_stats` reads, summable."""
    from hpcdgnn.nn.models.tgn import dense_min

    dense = slots >= dense_min(k)
    return np.array([slots.shape[0], slots.sum(), dense.sum(), slots[~dense].sum()], dtype=np.float64)


def _stats(sums: np.ndarray) -> tuple[float, float, float]:
    """:func:`slot_stats` from :func:`_slot_sums`."""
    n, total, dense, part = (float(x) for x in sums)
    if n == 0:
        return 0.0, 0.0, 0.0
    return total / n, dense / n, part / (n - dense) if n > dense else 0.0


def mean_slots(src: np.ndarray, dst: np.ndarray, t: np.ndarray, k: int, lo: int, hi: int,
               events: tuple[int, int], samples: int = 32) -> tuple[tuple[float, float, float], ...]:
    """:func:`slot_stats` of the positives' endpoints and of a uniform negative in [lo, hi) over ``events``
    [a, b).

    Shapes:
        src, dst, t (E,) in time order."""
    a, b = events
    if b <= a:
        return (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)
    nodes = np.stack([src, dst], 1).reshape(-1)
    tt = np.repeat(t, 2)
    # each endpoint's events strictly before t: its place among its own occurrences sorted by time, counted to
    # the first of its occurrences at t
    order = np.lexsort((tt, nodes))
    ns, ts = nodes[order], tt[order]
    first_of_node = np.searchsorted(ns, ns, side="left")
    new = np.r_[True, (ns[1:] != ns[:-1]) | (ts[1:] != ts[:-1])]
    first_at_t = np.maximum.accumulate(np.where(new, np.arange(ns.shape[0]), 0))
    seen = np.empty_like(nodes)
    seen[order] = first_at_t - first_of_node
    pos = slot_stats(np.minimum(seen[2 * a : 2 * b], k), k)
    cuts = np.linspace(a, b - 1, min(samples, b - a)).astype(np.int64)
    neg = np.zeros(4)  # summed per cut: 32 arrays of N counts would not fit beside a TGB-sized graph
    for c in cuts:
        before = np.searchsorted(t, t[c], side="left")
        neg += _slot_sums(np.minimum(np.bincount(nodes[: 2 * before], minlength=hi)[lo:hi], k), k)
    return pos, _stats(neg)


def batch_nodes(neighbors, src: np.ndarray, dst: np.ndarray, events: tuple[int, int], size: int, negatives: int,
                lo: int, hi: int, k: int, samples: int = 32) -> tuple[float, float]:
    """(distinct roots, distinct roots and their ``k`` most recent neighbours) of a batch of ``size`` events, the
    mean over up to ``samples`` batches spread over ``events`` [a, b), neighbours among the events before the
    batch.

    Args:
        neighbors: the stream's :class:`~hpcdgnn.data.temporal_neighbors.TemporalNeighbors`.
        src: the events' sources.
        dst: the events' destinations.
        events: [a, b), the events batches are drawn from.
        size: events a batch.
        negatives: uniform negatives per event, drawn from [lo, hi) with seed 0.
        lo: the negatives' first candidate.
        hi: one past their last.
        k: neighbours a root reads.
        samples: batches counted at most.

    Shapes:
        src, dst (E,) in time order."""
    a, b = events
    if b <= a or size < 1:
        return 0.0, 0.0
    rng = np.random.default_rng(0)
    starts = unique_ints(np.linspace(a, max(a, b - size), min(samples, -(-(b - a) // size))).astype(np.int64))
    roots_n, rows_n = [], []
    for s in starts:
        e = min(int(s) + size, b)
        roots = unique_ints(np.concatenate([src[s:e], dst[s:e], rng.integers(lo, hi, (e - s) * negatives)]))
        block = neighbors.recent(roots, np.full(roots.shape[0], s), k)
        roots_n.append(roots.shape[0])
        rows_n.append(unique_ints(np.concatenate([roots, block.nodes[block.mask]])).shape[0])
    return float(np.mean(roots_n)), float(np.mean(rows_n))


def _slowest_share(plan, split: str, b0: int, b1: int, ways: int) -> int:
    """Events of batches [b0, b1) of ``split`` that the busiest of ``ways`` ranks splitting each batch takes:
    ⌈size / ways⌉ a batch (every batch is full but the split's last)."""
    if b1 <= b0:
        return 0
    lo, hi = plan.batch_events_range(split, b1 - 1)
    return (b1 - b0 - 1) * -(-plan.batch_events // ways) + -(-(hi - lo) // ways)


def _evaluation(manifest) -> tuple[int, int]:
    """[a, b): the validation and test events."""
    return manifest.split["val"][0], manifest.split["test"][1]


def _stream(graph: GraphStats):
    """The stream and its temporal neighbour index, read once per ``graph``."""
    if "events.stream" not in graph.derived:
        from hpcdgnn.data.events import read_events
        from hpcdgnn.data.temporal_neighbors import TemporalNeighbors

        m = graph.manifest
        ev = read_events(graph.root, m)
        graph.derived["events.stream"] = (ev, TemporalNeighbors(ev.src, ev.dst, m.num_vertices))
    return graph.derived["events.stream"]


def _batch_nodes(graph: GraphStats, size: int, negatives: int, k: int, split: str = "train") -> tuple[float, float]:
    """:func:`batch_nodes` over the training events, or (``split="eval"``) the validation and test events
    (cached per ``graph``)."""
    key = ("events.batch", split, size, negatives, k)
    if key not in graph.derived:
        m = graph.manifest
        ev, index = _stream(graph)
        events = tuple(m.split["train"]) if split == "train" else _evaluation(m)
        graph.derived[key] = batch_nodes(index, ev.src, ev.dst, events, size, negatives, *m.destinations, k)
    return graph.derived[key]


def _slots(graph: GraphStats, k: int) -> tuple[tuple[float, float, float], ...]:
    """:func:`slot_stats` of training positives, training negatives, evaluation positives and evaluation
    negatives at k neighbours: the stream read once per ``graph`` (every P and variant of a plan shares it)."""
    key = ("events.slots", k)
    if key not in graph.derived:
        m = graph.manifest
        ev = _stream(graph)[0]
        lo, hi = m.destinations
        graph.derived[key] = (*mean_slots(ev.src, ev.dst, ev.t, k, lo, hi, tuple(m.split["train"])),
                              *mean_slots(ev.src, ev.dst, ev.t, k, lo, hi, _evaluation(m)))
    return graph.derived[key]


def predict_memory(plan, job, manifest, graph: GraphStats, parameters: int, rates: MachineRates,
                   memory_per_rank: float | None) -> Prediction:
    """The :class:`~hpcdgnn.planner.cost.Prediction` of ``strategy: memory`` under ``plan`` (module docstring)."""
    from hpcdgnn.data.temporal_neighbors import TemporalNeighbors

    m, task = job.model, job.task
    item = 8 if job.train.dtype == "float64" else 4
    i, j, k, P = plan.minibatch, plan.epoch, plan.memory, plan.num_ranks
    n, e, D = manifest.num_vertices, manifest.num_events, manifest.edge_feature_dim
    d, dt, H = m.memory_dim, m.time_dim, m.hidden
    mail = 2 * d + D

    gru = (dt + mail + d) * 3 * d

    def per_root(slots: float, updates: float | None = None, dense: bool = False) -> float:
        """A root's forward FLOPs; ``dense``: its keys and values as a dense batch (the weights once, all k slots
        through the heads) instead of per slot."""
        updates = 1 + slots if updates is None else updates
        kv = 2 * H + 2 * m.neighbors * m.heads if dense else slots * 2 * H
        return 2.0 * (updates * gru + kv * (d + D + dt) + (d + dt) * H + (H + d) * H + H * H)

    def evaluated(stats: tuple[float, float, float], updates: float | None) -> float:
        """An evaluated root's forward: dense for the share with at least dense_min real slots, per slot for
        the others."""
        mean, share, part = stats
        full = (mean - (1.0 - share) * part) / share if share else 0.0  # the dense roots' s̄
        return share * per_root(full, updates, dense=True) + (1.0 - share) * per_root(part, updates)

    ev_lo, ev_hi = _evaluation(manifest)
    tp, tn, e_pos, e_neg = _slots(graph, m.neighbors)
    s_pos, s_neg = tp[0], tn[0]
    tm = task.negatives
    # roots a training event embeds, and how many of them a slice of one batch holds
    slice_events = -(-plan.batch_events // i)
    train_roots, slice_roots = 2.0 + tm, (2.0 + tm) * slice_events
    # a slice's memory updates: one per distinct (node, time), so per root 1 + s̄ when each root has its own time
    # (per_event under memory_time: query); one time for the whole slice (per_batch) or an update that ignores
    # the time (event): the distinct nodes of its roots and their neighbours, counted on the stream
    eager, per_batch = m.memory_time == "event", task.train_protocol == "per_batch"
    updates = None
    if eager or per_batch:
        roots, rows = _batch_nodes(graph, slice_events, tm, m.neighbors)
        if per_batch:  # each distinct node of a (slice of a) batch once, s̄ slots between
            s_pos = s_neg = (2 * s_pos + tm * s_neg) / (2 + tm)
            train_roots = roots / slice_events  # the run takes each slice's distinct roots
            slice_roots = roots
        updates = rows / max(slice_roots, 1.0)
    train_root = (2 * per_root(s_pos, updates) + tm * per_root(s_neg, updates)) * 3 * train_roots / (2 + tm)
    negs = TemporalLinkPrediction.ranked_negatives(task, manifest)
    # memory_time: event: evaluation applies each written mail once (2 updates an event), not at every read
    own, read = (1.0, 0.0) if eager else (None, None)  # memory updates of an event's own roots, of a read one
    if task.eval_protocol == "per_batch":
        # the events' own roots only update the memory (no neighbours); a slice's distinct nodes are embedded
        eval_events = -(-plan.batch_events // (i * j))  # a slice: its distinct roots, counted on the stream
        eval_roots = _batch_nodes(graph, eval_events, round(negs), m.neighbors, "eval")[0] / eval_events
        eval_root = 2 * per_root(0.0, own) + eval_roots * evaluated(e_neg, read)
    else:
        eval_root = 2 * evaluated(e_pos, own) + negs * evaluated(e_neg, read)
    n_eval = ev_hi - ev_lo
    eval_batches = plan.batches("val") + plan.batches("test")
    # the slowest rank's events: ⌈events / ways⌉ of each batch (ranks beyond a batch's events wait)
    train_flops = max(_slowest_share(plan, "train", b0, b1, i) for b0, b1 in plan.segments) * train_root
    eval_share = sum(_slowest_share(plan, s, 0, plan.batches(s), i * j) for s in ("val", "test"))
    eval_flops = eval_share * eval_root + (2.0 * n * gru / (i * j) if eager else 0.0)  # + pending mails
    iters = plan.iterations()
    compute = ((train_flops + eval_flops) / rates.dense(H)
               + (iters * _CALLS["train"] + eval_batches * _CALLS["eval"]) * rates.op_seconds)
    grad = parameters * item
    tags: dict[str, float] = {}
    comm = 0.0
    if P > 1:
        tags["grad_allreduce"] = P * iters * grad
        ar_lat, ar_bw = rates.collective("allreduce", P)
        comm += iters * (ar_lat + grad / ar_bw)
    if i * j > 1:
        # every rank's scores reach the group's i·j − 1 others (the communicator's all-gather count)
        tags["memory.eval"] = (8.0 * (1 + negs) * n_eval + _ENVELOPE * eval_batches * i * j) * (i * j - 1)
        a2a_lat, a2a_bw = rates.collective("alltoall", i * j)
        comm += (iters + 2 * eval_batches) * a2a_lat + tags["memory.eval"] / (i * j) / a2a_bw
    node_memory = NodeMemory.size(n, d, mail, item, gaps=eager)  # rows, times (and mails' gaps)
    stream = e * (8 + 8 + 8) + e * D * item  # src, dst as int64, t float64; the features at train.dtype
    csr = TemporalNeighbors.index_bytes(e, n)
    inputs = float(node_memory + stream + csr)
    # saved for the backward per training root: each memory update's gates, gathered rows and Φ, each slot's
    # edge features, Φ, key, value and gathered query, the root's query, aggregate and output
    saved = ((1 + s_pos) * (8 * d + dt) + s_pos * (D + dt + 3 * H) + 3 * H + d)
    training = float(item * saved * slice_roots)

    # evaluation keeps nothing for a backward but runs a whole slice of (2 + eval_negatives) roots an event at once:
    # alive together, each occurrence's state row and, where it is updated at the read (memory_time: query), its
    # Φ and the GRU's input and hidden products and gates (10d + dt); each slot's state row, Φ and features; each
    # root's query, aggregate and embedding; each scored pair's destination product and its gathered copy.
    # Occurrences are the distinct (node, time) of the slice's roots and neighbours: per event under per_event's
    # own times with query, per slice otherwise (counted on the stream)
    slice_eval = -(-plan.batch_events // (i * j))
    if task.eval_protocol == "per_batch":
        eval_held, eval_s = _batch_nodes(graph, slice_eval, round(negs), m.neighbors, "eval")[0], e_neg[0]
    else:
        eval_held = slice_eval * (2 + negs)
        eval_s = (2 * e_pos[0] + negs * e_neg[0]) / (2 + negs)
    if task.eval_protocol == "per_event" and not eager:
        occurrences = slice_eval * _batch_nodes(graph, 1, round(negs), m.neighbors, "eval")[1]
    else:
        occurrences = _batch_nodes(graph, slice_eval, round(negs), m.neighbors, "eval")[1]
    evaluation = float(item * (occurrences * (d + (0 if eager else 10 * d + dt))
                               + eval_held * (eval_s * (d + dt + D) + 3 * H + d) + slice_eval * (2 + negs) * 2 * H))
    activations = max(training, evaluation)
    memory = inputs + activations + 4.0 * grad
    notes = ["memory updates per root counted as 1 + s̄ (the run updates each distinct (node, time) once)"
             if updates is None else "memory updates: the distinct nodes of a slice's roots and neighbours"]
    if evaluation > training:
        notes.append("activations: an evaluation slice's roots (task.eval_negatives) hold more than training's")
    if j > 1 or k > 1:
        notes.append("epoch and memory parallelism are approximate (DistTGL §3.2.2–3.2.3)")
    if waiting := plan.waiting():
        notes.append(waiting)
    return Prediction(strategy="memory", options=asdict(job.strategy),
                      # the node's one copy of memory, stream and index is counted on its first rank: the most loaded
                      num_ranks=P, memory_bytes=memory, memory_by_rank=[memory] * P,
                      memory_parts={"inputs": inputs, "activations": activations, "parameters": 4.0 * grad},
                      bytes_per_epoch=sum(tags.values()), bytes_by_tag=tags, balance=1.0, compute_s=compute,
                      comm_s=comm, epoch_s=compute + comm, notes=notes,
                      fits=memory_per_rank is None or memory <= memory_per_rank)
