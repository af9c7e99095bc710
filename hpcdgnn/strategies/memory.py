"""``strategy: memory`` — DistTGL's mini-batch × epoch × memory parallelism over an event stream (SPEC M2).

DistTGL §3.2–3.3. The P = i·j·k ranks are numbered r = a + i·(b + j·c):

* **mini-batch** (a, §3.2.1): each global batch is cut into i consecutive slices; all reads of an iteration
  precede its writes and a node a later slice writes is left to it, so i ranks reproduce one rank exactly;
* **epoch** (b, §3.2.2): trainer b trains on positive batch g at iteration g + b with its own negatives, from
  the memory read at g; only trainer 0 writes (approximate: positives are learned j times);
* **memory** (c, §3.2.3): k memory copies; in epoch e group c walks segment (c + e − 1) mod k (Fig. 7c), its
  memory reset at segment 0; only weights are synchronised (approximate).

Accesses follow §3.3's (R₀R₁)(W₀W₁)(R₂R₃)…: a group barrier separates reads from writes, the gradient
all-reduce writes from the next reads. The group whose memory just walked the last segment evaluates (§4).
With ``static_pretrain_epochs`` > 0, :meth:`MemoryStrategy.pretraining` trains the static memory first (§3.1).
"""

from __future__ import annotations

import copy
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from hpcdgnn.data.events import read_eval_negatives
from hpcdgnn.errors import ConfigError
from hpcdgnn.indices import unique_ints
from hpcdgnn.metrics.log import batches_into, get_logger
from hpcdgnn.nn.models.tgn import MemoryRows, TGNInput
from hpcdgnn.partition.events import MemoryPlan, check_batches, plan_memory
from hpcdgnn.strategies.base import EventBatch, Pretraining, Scored, Strategy
from hpcdgnn.strategies.node_memory import NodeMemory
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.tasks.temporal_link_prediction import EventEmbeddings, average_precision

__all__ = ["MemoryPlan", "MemoryStrategy"]

_SPLIT_CODE = {"train": 0, "val": 1, "test": 2, "pretrain": 3}


@dataclass
class _Writes:
    """What a slice writes after its step (TGL's order: each node's last occurrence among the slice's event
    endpoints, nodes that a later slice of the batch writes left to it): per written node, its time, the root
    whose updated memory s' it stores, the root of the event's other endpoint and the event (the mail
    [s'_self ‖ s'_other ‖ e])."""

    nodes: np.ndarray
    times: np.ndarray
    own: np.ndarray
    other: np.ndarray
    events: np.ndarray


@dataclass
class _Work:
    """One rank's slice of one batch: its events and the model input (memory filled in when read)."""

    split: str
    batch: int
    events: np.ndarray
    writes: _Writes
    negatives: int
    inp: TGNInput
    scored: np.ndarray | None = None
    """``per_batch``: the root of each scored row [sources, destinations, negatives]; None: rows = roots."""
    valid: np.ndarray | None = None
    """(n, negatives) fixed negatives (TGB's, a varying count per event): which columns are real, not padding."""
    own: np.ndarray | None = None
    """(n, negatives) which negatives are the event's own destination: the positive pair itself."""


def _ties(work: _Work, model) -> np.ndarray | None:
    """(n, negatives): the negatives that take the positive's score — the event's own destination (the positive
    pair itself) and the positive destination's :func:`_twins`; None: none."""
    twins = _twins(work, model)
    return work.own if twins is None else twins if work.own is None else twins | work.own


def _twins(work: _Work, model) -> np.ndarray | None:
    """(n, negatives): which negatives' roots have the positive destination's input exactly — two nodes never
    written (memory and mail zero, the same τ and gap), without neighbours, at the same time — so the same
    embedding and score in exact arithmetic (None: none can). In float32 their rows, products over other row
    blocks at another P, come out ulps apart and split a tie (fresh destinations against fresh negatives);
    equal inputs must rank as equal on any P. DistTGL's static memory tells any two nodes apart."""
    inp, n, m = work.inp, work.events.shape[0], work.negatives
    if inp.memory is None or getattr(model, "static", None) is not None or n == 0 or m == 0:
        return None
    root = work.scored if work.scored is not None else np.arange(2 * n + n * m)  # ranked row -> its root
    dst, neg = root[n : 2 * n], root[2 * n :].reshape(n, m)
    alone = ~inp.neighbors.mask.any(axis=1)
    pair = alone[dst][:, None] & alone[neg] & (inp.root_t[dst][:, None] == inp.root_t[neg])
    if not pair.any():
        return None
    mem = inp.memory
    at = np.searchsorted(inp.unique, inp.roots)  # each root's memory row
    blank = (~(mem.mem.any(dim=1) | mem.mail.any(dim=1))).cpu().numpy()[at]
    tau = mem.mem_ts[at]
    gap = np.zeros_like(tau) if mem.gap is None else np.nan_to_num(mem.gap[at], nan=-np.inf)
    same = blank[dst][:, None] & blank[neg] & (tau[dst][:, None] == tau[neg]) & (gap[dst][:, None] == gap[neg])
    return pair & same


@dataclass
class _StaticBatch(EventBatch):
    """A batch of the static-memory pre-training phase: batch ``iteration`` of the training split, whole."""


def _embeddings(z: torch.Tensor, work: _Work, negatives: int) -> EventEmbeddings:
    """The scored rows [sources, destinations, negatives] of the slice: ``per_batch``, each its node's one root
    (z's rows from the first scored one on, by index); else the roots themselves."""
    n = work.events.shape[0]
    if work.scored is None:
        return EventEmbeddings(z, n, negatives)
    first = int(work.scored.min()) if work.scored.size else 0
    return EventEmbeddings(z[first:], n, negatives, torch.from_numpy(work.scored - first).to(z.device))


def _slice(lo: int, hi: int, part: int, parts: int) -> tuple[int, int]:
    n = hi - lo
    return lo + part * n // parts, lo + (part + 1) * n // parts


@register_strategy("memory")
class MemoryStrategy(Strategy[EventBatch]):
    """DistTGL's i×j×k parallelism."""

    setup_work = "read the event stream + temporal neighbour index"
    #: under ``memory_time: event`` evaluation applies each mail once, when written (False: at every read, as
    #: training does; the same values — tests compare the two)
    eager = True

    @classmethod
    def keeps_rank_state(cls, opts) -> bool:
        """Always: the evaluation starts from the group's node memory, which a checkpoint keeps per rank."""
        return True

    @classmethod
    def make_plan(cls, manifest, num_ranks: int, job) -> MemoryPlan:
        """The i×j×k layout and the k time segments (:func:`hpcdgnn.partition.events.plan_memory`)."""
        return plan_memory(manifest, num_ranks, job)

    @classmethod
    def check_data(cls, job, manifest, where: str | None) -> None:
        """Refuse a batch the training split cannot fill and fewer batches than k segments (one line), before the
        footprint's check prices such a batch."""
        try:
            check_batches(manifest, job)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}" if where else str(e)) from None

    @classmethod
    def check_nodes(cls, plan: MemoryPlan, ranks_per_node: int) -> None:
        """A memory group's i·j ranks (consecutive: r = a + i·(b + j·c)) map one shared-memory window, so they
        must share a node: refuse a group that R ranks a node would split, as the run's window does."""
        g, R = plan.minibatch * plan.epoch, ranks_per_node
        split = [c for c in range(plan.memory) if (c * g) // R != (c * g + g - 1) // R]
        if split:
            c, ranks = split[0], f"{R} rank{'s' if R != 1 else ''}"
            raise ConfigError(f"strategy.minibatch·epoch = {plan.minibatch}·{plan.epoch} = {g} ranks share a node "
                              f"memory, which must be on one node; at {ranks} a node group {c} (ranks {c * g}–"
                              f"{c * g + g - 1}) spans nodes: run a multiple of {g} ranks a node, or lower "
                              "strategy.minibatch or strategy.epoch")

    @classmethod
    def variants(cls, opts, num_ranks: int, manifest) -> list:
        """The job's i×j×k when it multiplies to P, else the exact layout i = P."""
        from dataclasses import replace

        ok = opts.minibatch * opts.epoch * opts.memory == num_ranks
        return [opts if ok else replace(opts, minibatch=num_ranks, epoch=1, memory=1)]

    @classmethod
    def predict(cls, plan: MemoryPlan, job, manifest, graph, parameters: int, rates, memory_per_rank):
        """The planner's figures for ``plan`` (:func:`hpcdgnn.planner.events.predict_memory`)."""
        from hpcdgnn.planner.events import predict_memory

        return predict_memory(plan, job, manifest, graph, parameters, rates, memory_per_rank)

    def setup(self, plan: MemoryPlan, model, task, reader) -> Scored:
        """Read the whole stream, build the temporal CSR, this rank's (a, b, c) and its group's memory."""
        from hpcdgnn.data.events import read_events_per_node
        from hpcdgnn.data.temporal_neighbors import TemporalNeighbors

        t0 = time.perf_counter()
        job, m = self.ctx.job, self.ctx.manifest
        self.plan, self.model, self.task = plan, model, task
        # one copy of the stream and of its temporal CSR per node, mapped by the node's ranks
        ev, stream_windows = read_events_per_node(self.comm, self.ctx.data_root, m)
        self.src, self.dst, self.t = ev.src.astype(np.int64, copy=False), ev.dst.astype(np.int64, copy=False), ev.t
        #: edge features on the host (for mails) and on the model's device
        self.efeat = torch.from_numpy(np.ascontiguousarray(ev.efeat)).to(self.ctx.dtype)
        self.efeat_dev = self.efeat.to(self.ctx.device)
        csr, windows = self.comm.world.share_per_node(
            lambda: TemporalNeighbors(self.src, self.dst, m.num_vertices).arrays(), "temporal neighbour index")
        self._event_windows = stream_windows + windows
        self.neighbors = TemporalNeighbors.from_arrays(csr, self.src.shape[0], m.num_vertices)
        # asked on every rank: the query is a collective
        first_on_node = self.comm.world.local_rank_size()[0] == 0
        self._host_counted = (first_on_node or not stream_windows, first_on_node or not windows)
        mapped = bool(stream_windows) and ev.efeat.size > 0 and np.shares_memory(self.efeat.numpy(), ev.efeat)
        self._efeat_counted = first_on_node or not mapped
        self.k_neighbors, self.seed = job.model.neighbors, job.train.seed
        self.dst_range = m.destinations
        i, j = plan.minibatch, plan.epoch
        if self.comm.rank == 0 and (waiting := plan.waiting()):
            get_logger().warning(f"warning: {waiting}")
        r = self.comm.rank
        self.a, self.b, self.c = r % i, (r // i) % j, r // (i * j)
        self.group = self.comm.split(self.c) if self.comm.size > 1 else None
        np_dtype = np.float64 if self.ctx.dtype == torch.float64 else np.float32
        self.memory = NodeMemory(self.group, m.num_vertices, model.memory_dim, model.mail_dim, np_dtype,
                                 t0=float(self.t[0]) if self.t.shape[0] else 0.0, gaps=model.event_time)
        self.pool = ThreadPoolExecutor(1) if job.strategy.prefetch == "on" else None
        self._fifo: deque[_Work] = deque()
        #: a checkpoint's reads in flight (:meth:`state_dict`), put back by the next :meth:`batches`
        self._resumed_reads: list | None = None
        self._next: tuple[tuple, Future] | None = None
        self.load_seconds += time.perf_counter() - t0
        self._train_events = 0
        self._eval_seconds = 0.0
        #: the dataset's fixed evaluation negatives (TGB), one copy per node; else None: drawn from the seed
        self.fixed, self._fixed_counted = None, True
        if getattr(m, "eval_negatives", None):
            def flat() -> dict[str, np.ndarray]:
                return {f"{s}.{k}": a for s, pair in read_eval_negatives(self.ctx.data_root, m).items()
                        for k, a in zip(("offsets", "dst"), pair, strict=True)}

            arrays, windows = self.comm.world.share_per_node(flat, "fixed evaluation negatives")
            self._event_windows += windows
            self.fixed = {s: (arrays[f"{s}.offsets"], arrays[f"{s}.dst"]) for s in ("val", "test")}
            self._fixed_counted = first_on_node or not windows
        return Scored(events={s: plan.split[s][1] - plan.split[s][0] for s in ("train", "val", "test")})

    def _engine_bytes(self) -> int:
        """Node memory and edge features, shared ones counted on one rank so per-rank figures add up."""
        memory = self.memory.nbytes if self.memory.leader else 0
        efeat = self.efeat.numel() * self.efeat.element_size() if self._efeat_counted else 0
        return int(memory + efeat)

    def _host_bytes(self) -> int:
        """The stream and the temporal CSR, counted on one rank per node where shared."""
        stream, csr = self._host_counted
        fixed = sum(a.nbytes for pair in self.fixed.values() for a in pair) if self.fixed else 0
        return int((self.src.nbytes + self.dst.nbytes + self.t.nbytes) * stream + self.neighbors.nbytes() * csr
                   + fixed * self._fixed_counted)

    def _work(self, split: str, q: int, epoch: int, negset: int, part: int, parts: int, negatives: int) -> _Work:
        """Slice ``part``/``parts`` of batch q, its negatives (seeded by the batch, never P) and neighbours."""
        lo, hi = self.plan.batch_events_range(split, q)
        s0, s1 = _slice(lo, hi, part, parts)
        ev = np.arange(s0, s1)
        valid = None
        if split != "train" and self.fixed is not None:
            neg, valid = self._fixed_negatives(split, ev)
            negatives = neg.shape[1]
        else:
            rng = np.random.default_rng([self.seed, _SPLIT_CODE[split], max(epoch, 0), q, negset])
            neg = rng.integers(*self.dst_range, size=(hi - lo, negatives))[s0 - lo : s1 - lo]
        ranked = np.concatenate([self.src[ev], self.dst[ev], neg.reshape(-1)])
        own = neg == self.dst[ev][:, None]
        scored = roots_of = None
        bare = 0  # the first ``bare`` roots only update the memory: they read no neighbours
        task = self.ctx.job.task
        if split == "train" and task.train_protocol == "per_batch":
            # PyG's TGN: each distinct node of the slice once, at the global batch's first time, from the memory
            # and neighbours before it; its one memory update is what its events write (any slicing alike)
            roots, scored = np.unique(ranked, return_inverse=True)
            root_t = np.full(roots.shape[0], self.t[lo])
            scored = scored.reshape(-1)
            roots_of = scored[: 2 * ev.shape[0]]  # the root whose s' each source, then destination, writes
        elif split != "train" and task.eval_protocol == "per_batch":
            # the events' own roots update the memory as always; what is ranked: each distinct node once, at the
            # batch's first time (independent of the slicing: any P scores the same)
            distinct, scored = np.unique(ranked, return_inverse=True)
            roots = np.concatenate([self.src[ev], self.dst[ev], distinct])
            root_t = np.concatenate([self.t[ev], self.t[ev], np.full(distinct.shape[0], self.t[lo])])
            scored = scored.reshape(-1) + 2 * ev.shape[0]
            bare = 2 * ev.shape[0]  # nothing ranks the events' own roots' z
        else:
            roots = ranked
            root_t = np.concatenate([self.t[ev], self.t[ev], np.repeat(self.t[ev], negatives)])
        cut = np.searchsorted(self.t, root_t, side="left")
        cut[:bare] = 0
        nb = self.neighbors.recent(roots, cut, self.k_neighbors)
        unique = unique_ints(np.concatenate([roots, nb.nodes[nb.mask]]))
        feat = self.efeat_dev[torch.from_numpy(nb.events).to(self.ctx.device)]
        inp = TGNInput(roots, root_t, nb, self.t[nb.events], feat, unique, None)
        # the model's row plan and the writes, here (in the prefetch thread when prefetched), not in the step
        # evaluation's batches (many roots, no backward) attend full neighbourhoods as dense batches
        inp.occurrences = self.model.plan(inp, dense=split != "train")
        writes = self._writes(ev, np.concatenate([self.src[s1:hi], self.dst[s1:hi]]), roots_of)
        return _Work(split, q, ev, writes, negatives, inp, scored, valid, own)

    def _writes(self, ev: np.ndarray, later: np.ndarray, roots_of: np.ndarray | None) -> _Writes:
        """:class:`_Writes` of events ``ev``, leaving the ``later`` slices' nodes; ``roots_of``: the root of each
        source, then destination (None: roots 0..2n−1, the events' own)."""
        n = ev.shape[0]
        nodes = np.stack([self.src[ev], self.dst[ev]], 1).reshape(-1)  # endpoint p = 2i + side, in event order
        rev_unique, rev_first = np.unique(nodes[::-1], return_index=True)
        keep = ~np.isin(rev_unique, later)
        p = (2 * n - 1 - rev_first)[keep]
        i, side = p // 2, p % 2
        own, other = side * n + i, (1 - side) * n + i
        if roots_of is not None:
            own, other = roots_of[own], roots_of[other]
        return _Writes(rev_unique[keep], self.t[ev][i], own, other, ev[i])

    def _fixed_negatives(self, split: str, ev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Events ``ev``'s fixed negatives as an (n, m) array, m the slice's largest count, and which are real:
        a shorter row is padded with its first negative (its own destination when it has none)."""
        offsets, pool = self.fixed[split]
        i = ev - self.plan.split[split][0]
        counts = offsets[i + 1] - offsets[i]
        m = max(1, int(counts.max(initial=1)))
        cols = np.arange(m)
        valid = cols[None, :] < counts[:, None]
        pick = np.where(valid, offsets[i][:, None] + cols[None, :], offsets[i][:, None])
        neg = pool[np.minimum(pick, max(pool.shape[0] - 1, 0))] if pool.shape[0] else np.zeros(pick.shape, np.int64)
        neg[counts == 0] = self.dst[ev][counts == 0, None]
        return neg, valid

    def _static(self, key: tuple) -> _Work:
        """``_work(*key)``, from the prefetch thread when prefetched."""
        if self._next is not None and self._next[0] == key:
            work = self._next[1].result()
            self._next = None
            return work
        return self._work(*key)

    def _prefetch(self, key: tuple | None) -> None:
        if self.pool is not None and key is not None:
            self._next = (key, self.pool.submit(self._work, *key))

    def _write(self, work: _Work, s_new: torch.Tensor, apply=None) -> None:
        """Write memories and mails of the slice's positive events (each node's last occurrence, TGL order);
        ``apply`` (evaluation under ``memory_time: event``, :meth:`_applier`): run on the written rows at once, so
        that reads find them updated instead of each read updating them again."""
        w = work.writes
        if w.nodes.shape[0] == 0:
            return
        s = s_new.detach().cpu()
        own = s.index_select(0, torch.from_numpy(w.own))
        mail = torch.cat([own, s.index_select(0, torch.from_numpy(w.other)),
                          self.efeat.index_select(0, torch.from_numpy(w.events))], 1)
        self.memory.write(w.nodes, own.numpy(), w.times, mail.numpy(), apply)

    def _order(self) -> None:
        """The group barrier between an iteration's reads and its writes (§3.3)."""
        if self.group is not None and self.group.size > 1:
            self.group.barrier(tag="memory.order")

    def _examples(self, epoch: int, g: int) -> float:
        """Positive events trained on at iteration g over all ranks (the loss denominator)."""
        p, total = self.plan, 0
        for c in range(p.memory):
            lo, hi = p.segments[p.segment_of(c, epoch)]
            for b in range(p.epoch):
                q = g - b
                if 0 <= q < hi - lo:
                    a0, a1 = p.batch_events_range("train", lo + q)
                    total += a1 - a0
        return float(total)

    def batches(self, epoch: int, start: int = 0):
        """One batch per iteration from iteration ``start``; the group's memory is reset first at segment 0
        (not in an epoch resumed within: the memory is the checkpoint's, mid-segment, and so are this rank's
        reads in flight)."""
        p = self.plan
        seg = p.segment_of(self.c, epoch)
        if seg == 0 and not start:
            self.memory.reset()
            self._order()
        self._fifo.clear()
        if start and self._resumed_reads:
            d, m = self.memory.d, self.ctx.job.task.negatives
            for q, rows, times, gap in self._resumed_reads:
                work = self._work("train", q, epoch, self.b, self.a, p.minibatch, m)
                t = rows.to(self.ctx.device)  # as NodeMemory.read hands it out: views of one (U, d + m) tensor
                work.inp.memory = MemoryRows(mem=t[:, :d], mem_ts=times, mail=t[:, d:], gap=gap)
                self._fifo.append(work)
        self._resumed_reads = None
        lo, hi = p.segments[seg]
        if lo + start < hi:
            self._prefetch(("train", lo + start, epoch, self.b, self.a, p.minibatch, self.ctx.job.task.negatives))
        for g in range(start, p.iterations()):
            yield EventBatch(epoch, g, self._examples(epoch, g), seg, g)

    def stops_between_batches(self, epoch: int) -> bool:
        """With more than one iteration: an iteration's reads, barrier and writes run within its step; a
        prefetched batch is dropped."""
        return self.plan.iterations() > 1

    def resumes_between_batches(self, epoch: int) -> bool:
        """Always where it stops: between two iterations the group's node memory and, under epoch parallelism
        (j > 1), the b reads trainer b holds for the iterations it trains next (:meth:`state_dict`) are the whole
        state; a batch's slice, negatives and neighbours are recomputed from the seed."""
        return self.stops_between_batches(epoch)

    def resumes_evaluation(self, epoch: int) -> bool:
        """Always (at any i, j, k): after the last iteration no read is in flight; an abandoned pass restores the
        evaluating group's node memory from its backup (what training left), and its negatives are seeded by the
        batch."""
        return True

    def step(self, model, task, batch: EventBatch, scale: float) -> np.ndarray:
        """Read memory for batch g, barrier, train on the batch read ``self.b`` iterations earlier; b = 0 writes."""
        if isinstance(batch, _StaticBatch):
            return self._static_step(model, task, batch, scale)
        p, seg, g = self.plan, batch.segment, batch.iteration
        lo, hi = p.segments[seg]
        m = self.ctx.job.task.negatives
        t0 = time.perf_counter()
        if g < hi - lo:  # read for batch g now; trainer b trains on it at iteration g + b
            work = self._static(("train", lo + g, batch.epoch, self.b, self.a, p.minibatch, m))
            work.inp.memory = self.memory.read(work.inp.unique, self.ctx.device)
            self._fifo.append(work)
        nxt = lo + g + 1
        self._prefetch(("train", nxt, batch.epoch, self.b, self.a, p.minibatch, m) if nxt < hi else None)
        self.load_seconds += time.perf_counter() - t0
        self._order()
        stats = np.zeros(task.stats_width())
        if 0 <= g - self.b < hi - lo:
            work = self._fifo.popleft()
            z, s_new = model(work.inp)
            out = task(_embeddings(z, work, m), batch.epoch)
            (out.loss_sum * scale).backward()
            stats = out.stats
            self._train_events += work.events.shape[0]
            if self.b == 0:
                t1 = time.perf_counter()
                self._write(work, s_new)
                self.load_seconds += time.perf_counter() - t1
        return stats

    def evaluate(self, model, task, epoch: int, stop=None) -> np.ndarray:
        """Validation then test MRR / AP sums from the group whose memory just finished the last segment; ``stop``
        (the base's) is asked before each batch by every rank: under ``memory: k > 1`` the other groups, which
        have nothing to evaluate, ask it before the same batches (they wait in its agreements instead of at the
        epoch's end), so a signal to any rank stops the pass."""
        t0 = time.perf_counter()
        p, stats = self.plan, np.zeros(task.stats_width())
        batches = [(split, q) for split in ("val", "test") for q in range(p.batches(split))]
        if self.c != p.evaluating(epoch)[0]:
            if stop is not None:
                for at in range(len(batches)):
                    if stop(at):
                        break
            self._eval_seconds = time.perf_counter() - t0
            return stats
        part, parts = self.a + p.minibatch * self.b, p.minibatch * p.epoch
        m = self.ctx.job.task.eval_negatives
        keys = [(split, q, 0, 0, part, parts, m) for split, q in batches]
        backup = self.memory.state() if self.memory.leader else None
        # memory_time: event: every mail applied once (the pending ones now, each new one when written)
        apply = self._applier(model) if model.event_time and self.eager else None
        # embed's recorder (hpcdgnn.train.inference) asks for every vertex's z at the end of each split
        record = getattr(task, "record_nodes", None)
        at = 0
        self._prefetch(keys[0] if keys else None)  # each batch's neighbours and plan while the one before runs
        with torch.no_grad():
            if apply is not None:
                self._apply_pending(apply, part, parts)
            if record is not None:
                self._embed_vertices(model, "train", part, parts, record)
            abandoned = False
            for split in ("val", "test"):
                for _ in range(p.batches(split)):
                    abandoned = stop is not None and stop(at)
                    if abandoned:
                        break
                    work, at = self._static(keys[at]), at + 1
                    self._prefetch(keys[at] if at < len(keys) else None)
                    work.inp.memory = self.memory.read(work.inp.unique, self.ctx.device)
                    self._order()
                    z, s_new = model(work.inp)
                    pos, neg = task.scores(_embeddings(z, work, work.negatives))
                    self._write(work, s_new, apply)
                    pos, neg = pos.double().cpu().numpy(), neg.double().cpu().numpy()
                    tie = _ties(work, model)
                    if tie is not None and tie.any():
                        neg[tie] = np.broadcast_to(pos[:, None], neg.shape)[tie]
                    parts_scores = [(pos, neg)] if self.group is None else self.group.allgather_obj(
                        (pos, neg), tag="memory.eval")  # also orders these writes before the next reads
                    ap = None
                    if self.group is None or self.group.rank == 0:
                        allp = np.concatenate([s[0] for s in parts_scores])
                        # TGL's and PyG's AP: each positive against its first negative
                        alln = np.concatenate([s[1][:, 0] for s in parts_scores])
                        labels = np.r_[np.ones(allp.shape[0]), np.zeros(alln.shape[0])]
                        ap = average_precision(np.r_[allp, alln], labels)
                    stats += task.eval_stats(split, pos, neg, ap, work.valid)
                if abandoned:
                    break
                if record is not None:
                    self._embed_vertices(model, split, part, parts, record)
        if self.memory.leader:
            self.memory.load(backup)
        self._order()
        self._eval_seconds = time.perf_counter() - t0
        return stats

    def _applier(self, model):
        """``model.apply_mail`` on this rank's device, from and to host tensors (:meth:`NodeMemory.write`)."""
        dev = self.ctx.device
        return lambda mail, mem, gap: model.apply_mail(mail.to(dev), mem.to(dev), gap).cpu()

    def _apply_pending(self, apply, part: int, parts: int) -> None:
        """Apply the pending mail of every node of slice ``part``/``parts`` (``memory_time: event``'s evaluation),
        then wait for the group: each node's row changes value-for-value nothing, only when its update runs."""
        self._order()  # the leader's backup of the shared rows is complete before any rank rewrites them
        v0, v1 = _slice(0, self.ctx.manifest.num_vertices, part, parts)
        self.memory.apply_pending(np.arange(v0, v1), apply)
        self._order()

    def _embed_vertices(self, model, split: str, part: int, parts: int, record) -> None:
        """z_v(t) of slice ``part``/``parts`` of the vertices, t the time of the split's last event, from the
        memory and the neighbours of every event up to it (TGN §3.1's embedding at query time): ``record(step,
        vertices, z)`` with step 0, 1, 2 for train, val, test."""
        lo, hi = self.plan.split[split]
        end = hi if hi > lo else lo  # an empty split: the state after the one before
        t_end = self.t[end - 1] if end else 0.0
        v0, v1 = _slice(0, self.ctx.manifest.num_vertices, part, parts)
        chunk = max(1, self.ctx.job.task.batch_events)
        for a in range(v0, v1, chunk):
            roots = np.arange(a, min(a + chunk, v1), dtype=np.int64)
            nb = self.neighbors.recent(roots, np.full(roots.shape[0], end, dtype=np.int64), self.k_neighbors)
            unique = unique_ints(np.concatenate([roots, nb.nodes[nb.mask]]))
            feat = self.efeat_dev[torch.from_numpy(nb.events).to(self.ctx.device)]
            inp = TGNInput(roots, np.full(roots.shape[0], t_end, dtype=self.t.dtype), nb, self.t[nb.events], feat,
                           unique, self.memory.read(unique, self.ctx.device))
            z, _ = model(inp)
            record(("train", "val", "test").index(split), roots, z)
        self._order()  # every slice read before the next batch's writes, or the leader's restore, change the memory

    def report(self, epoch: int, train_loss: float) -> dict[str, Any]:
        """Events trained on, the evaluation seconds (throughput = train_events / (epoch − eval)), and which memory
        evaluated: its group and the training events it has seen (under ``memory: k > 1`` fewer than the stream's
        until epoch k: a memory copy is reset at the first segment)."""
        events, eval_s = self.comm.allreduce_array([self._train_events, 0.0]), self.comm.gather_array(
            [self._eval_seconds])
        self._train_events = 0
        p = self.plan
        group, seen = p.evaluating(epoch)
        return {"memory": {"config": f"{p.minibatch}x{p.epoch}x{p.memory}", "train_events": int(events[0]),
                           "eval_seconds": float(eval_s.max()), "eval_group": group, "eval_memory_events": seen}}

    def pretraining(self) -> Pretraining[EventBatch] | None:
        """The static node memory's pre-training phase, in a fresh run only (a resumed model holds the table)."""
        epochs = self.ctx.job.model.static_pretrain_epochs
        if getattr(self.model, "static", None) is None or epochs == 0:
            return None
        if self.ctx.resumed:
            if self.comm.rank == 0:
                within = batches_into(self.ctx.start_epoch, self.ctx.start_batch)
                get_logger().info(f"static node memory: as trained up to epoch {self.ctx.start_epoch}{within} "
                                  "(restored; pre-training skipped)")
            return None
        copy_of = copy.deepcopy(self.model)

        def finish() -> None:
            with torch.no_grad():
                self.model.static.copy_(copy_of.static)

        lo, hi = self.plan.split["train"]
        return Pretraining("static node memory", copy_of, copy.deepcopy(self.task), epochs, self._static_batches,
                           float(hi - lo), finish)

    def _static_batches(self, epoch: int):
        """Pre-training epoch ``epoch`` (1-based): every training batch, in an order seeded by the epoch."""
        order = np.random.default_rng([self.seed, _SPLIT_CODE["pretrain"], epoch - 1]).permutation(
            self.plan.batches("train"))
        for i, q in enumerate(order):
            lo, hi = self.plan.batch_events_range("train", int(q))
            yield _StaticBatch(epoch, i, float(hi - lo), -1, int(q))

    def _static_step(self, model, task, batch: _StaticBatch, scale: float) -> np.ndarray:
        """A pre-training step, h = S: each rank takes a slice of the batch (exact at any P)."""
        m = self.ctx.job.task.negatives
        work = self._work("train", batch.iteration, -batch.epoch, 0, self.comm.rank, self.comm.size, m)
        z, _ = model(work.inp)
        out = task(_embeddings(z, work, m), 0)
        (out.loss_sum * scale).backward()
        return out.stats

    def state_dict(self) -> dict[str, Any]:
        """The group's memory (its leader's copy; the other ranks of the group map the same rows): the live arrays,
        which the checkpoint serialises before any rank of the group writes again (the next epoch's first write
        waits for the leader at the group's barrier). Between two iterations under j > 1 (a stop within the
        epoch), also this rank's ``reads`` in flight: (batch, the rows read, τ, gaps) of each batch it has read
        and not yet trained on — read before later writes, they cannot be read again."""
        out: dict[str, Any] = {"memory": self.memory.state(copy=False)} if self.memory.leader else {}
        if self._fifo:
            out["reads"] = [(w.batch, torch.cat([w.inp.memory.mem, w.inp.memory.mail], 1).cpu(), w.inp.memory.mem_ts,
                             w.inp.memory.gap) for w in self._fifo]
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the group's memory from :meth:`state_dict` (none on non-leaders) and this rank's reads in flight
        (put back by ``batches(epoch, start=B)``), then the group barrier."""
        if "memory" in state:
            self.memory.load(state["memory"])
        self._resumed_reads = state.get("reads")
        self._order()
