"""``strategy: memory`` — DistTGL's mini-batch × epoch × memory parallelism over an event stream (SPEC M2).

DistTGL §3.2–3.3. The P = i·j·k ranks are numbered r = a + i·(b + j·c):

* **mini-batch parallelism** (a = 0..i−1, §3.2.1): the events of each global batch (``task.batch_events``,
  in time order) are cut into i consecutive slices, one per rank. Every rank reads the node memory of
  its slice, then — only once every read of the iteration is done — writes back the memories and mails
  of its positive events; a node that a later slice of the same batch also writes is left to that slice,
  so the memory ends exactly as one rank processing the whole batch leaves it (most-recent COMB). Loss
  sums are divided by the global batch's events and gradients summed: **exact** — i ranks reproduce one
  rank with the same batch (a test shows it at i = 2, 3).
* **epoch parallelism** (b = 0..j−1, §3.2.2): trainer b trains on positive batch g at iteration g + b,
  with its own negative set b, from the memory read at iteration g (DistTGL's "prepare one set of inputs
  of the positive nodes and j sets of negatives"; the memory differs only by the weight updates of the last
  j − 1 iterations, which it ignores). Only trainer 0 writes the memory (no read-after-write hazard). An
  approximation: the same positives are learned on j consecutive iterations.
* **memory parallelism** (c = 0..k−1, §3.2.3): k independent memory copies. The training batches are cut
  into k time segments; in epoch e group c trains segment (c + e − 1) mod k, so each group walks the
  segments in time order with its own memory (the reordering of Fig. 7c, right), which is reset when the
  group starts segment 0. Only weights are synchronised (one gradient all-reduce over all P ranks per
  iteration). An approximation: groups start mid-stream with an empty memory.

The memory of a group lives once per node (:class:`~hpcdgnn.strategies.node_memory.NodeMemory`, an MPI-3
shared window); the accesses follow §3.3's order (R₀R₁)(W₀W₁)(R₂R₃)…: a group barrier separates each
iteration's reads from its writes, and the gradient all-reduce that ends the iteration separates its writes
from the next reads. With ``prefetch: on`` a background thread samples the next iteration's negatives and
neighbours (the static part of the mini-batch, DistTGL §3.3's prefetching) while this one trains; the
memory itself is read in order.

Evaluation (after every epoch, DistTGL §4: "using the node memory of the first memory process"): the group
whose memory has just walked the last training segment runs the validation and then the test events in
batches of ``batch_events`` split over its i·j ranks like mini-batch parallelism, updating a copy of its
memory with the evaluated events (TGL's protocol), then restores it; other groups wait.

Static node memory (DistTGL §3.1): with ``model.static_memory: on`` and ``static_pretrain_epochs`` n > 0,
:meth:`MemoryStrategy.pretraining` gives the trainer a phase that trains a copy of the model with the dynamic
memory off on the same task, n epochs over the training batches in a seeded random order, all P ranks
splitting each batch (exact for any P); training then starts from the pre-trained table (the copy's other
weights are discarded).
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

from hpcdgnn.metrics.log import get_logger
from hpcdgnn.nn.models.tgn import TGNInput
from hpcdgnn.partition.events import MemoryPlan, plan_memory
from hpcdgnn.strategies.base import EventBatch, Pretraining, Scored, Strategy
from hpcdgnn.strategies.node_memory import NodeMemory
from hpcdgnn.strategies.registry import register_strategy
from hpcdgnn.tasks.temporal_link_prediction import EventEmbeddings, average_precision

__all__ = ["MemoryPlan", "MemoryStrategy"]

_SPLIT_CODE = {"train": 0, "val": 1, "test": 2, "pretrain": 3}


@dataclass
class _Work:
    """One rank's slice of one batch: its events and the model input (memory filled in when read)."""

    split: str
    batch: int
    events: np.ndarray
    later: np.ndarray
    """Nodes the positive events of later slices of the same batch write (this slice leaves them)."""
    negatives: int
    inp: TGNInput


@dataclass
class _StaticBatch(EventBatch):
    """A batch of the static-memory pre-training phase: batch ``iteration`` of the training split, whole."""


def _slice(lo: int, hi: int, part: int, parts: int) -> tuple[int, int]:
    n = hi - lo
    return lo + part * n // parts, lo + (part + 1) * n // parts


@register_strategy("memory")
class MemoryStrategy(Strategy[EventBatch]):
    """DistTGL's i×j×k parallelism (see the module docstring)."""

    setup_work = "read the event stream + temporal neighbour index"

    @classmethod
    def make_plan(cls, manifest, num_ranks: int, job) -> MemoryPlan:
        """The i×j×k layout and the k time segments (:func:`hpcdgnn.partition.events.plan_memory`)."""
        return plan_memory(manifest, num_ranks, job)

    # -- setup ------------------------------------------------------------------------------------
    def setup(self, plan: MemoryPlan, model, task, reader) -> Scored:
        """Read the whole stream (every rank samples neighbours anywhere in time), build the temporal CSR,
        this rank's place (a, b, c) and its group's memory; returns the events per split for the task."""
        from hpcdgnn.data.events import read_events_per_node
        from hpcdgnn.data.temporal_neighbors import TemporalNeighbors

        t0 = time.perf_counter()
        job, m = self.ctx.job, self.ctx.manifest
        self.plan, self.model, self.task = plan, model, task
        # one copy of the stream and of its temporal CSR per node, mapped by the node's ranks
        ev, stream_windows = read_events_per_node(self.comm, self.ctx.data_root, m)
        self.src, self.dst, self.t = ev.src.astype(np.int64, copy=False), ev.dst.astype(np.int64, copy=False), ev.t
        #: edge features on the host (mails are written there) and on the model's device (attention keys)
        self.efeat = torch.from_numpy(np.ascontiguousarray(ev.efeat)).to(self.ctx.dtype)
        self.efeat_dev = self.efeat.to(self.ctx.device)
        csr, windows = self.comm.world.share_per_node(
            lambda: TemporalNeighbors(self.src, self.dst, m.num_vertices).arrays(), "temporal neighbour index")
        self._event_windows = stream_windows + windows
        self.neighbors = TemporalNeighbors.from_arrays(csr, self.src.shape[0], m.num_vertices)
        # who reports the shared arrays' bytes: asked here, on every rank (the query is a collective)
        first_on_node = self.comm.world.local_rank_size()[0] == 0
        self._host_counted = (first_on_node or not stream_windows, first_on_node or not windows)
        # the features are the node's mapped copy where the training dtype is theirs (float32), else this rank's
        mapped = bool(stream_windows) and ev.efeat.size > 0 and np.shares_memory(self.efeat.numpy(), ev.efeat)
        self._efeat_counted = first_on_node or not mapped
        self.k_neighbors, self.seed = job.model.neighbors, job.train.seed
        self.dst_range = (m.num_sources, m.num_vertices) if m.bipartite else (0, m.num_vertices)
        i, j = plan.minibatch, plan.epoch
        r = self.comm.rank
        self.a, self.b, self.c = r % i, (r // i) % j, r // (i * j)
        self.group = self.comm.split(self.c) if self.comm.size > 1 else None
        np_dtype = np.float64 if self.ctx.dtype == torch.float64 else np.float32
        self.memory = NodeMemory(self.group, m.num_vertices, model.memory_dim, model.mail_dim, np_dtype,
                                 t0=float(self.t[0]) if self.t.shape[0] else 0.0)
        self.pool = ThreadPoolExecutor(1) if job.strategy.prefetch == "on" else None
        self._fifo: deque[_Work] = deque()
        self._next: tuple[tuple, Future] | None = None
        self.load_seconds += time.perf_counter() - t0
        self._train_events = 0
        self._eval_seconds = 0.0
        return Scored(events={s: plan.split[s][1] - plan.split[s][0] for s in ("train", "val", "test")})

    def _engine_bytes(self) -> int:
        """The node memory's rows and times plus the edge features, each counted by one rank where ranks share
        it (the memory group's leader; the node's first rank for the node's copy of the features), so per-rank
        figures add up to the machine's (every rank reported its group's shared memory)."""
        memory = self.memory.nbytes if self.memory.leader else 0
        efeat = self.efeat.numel() * self.efeat.element_size() if self._efeat_counted else 0
        return int(memory + efeat)

    def _host_bytes(self) -> int:
        """The stream's ids and times and the temporal CSR: counted on one rank per node when the node
        shares them (:meth:`~hpcdgnn.comm.world.World.share_per_node`), so per-rank figures add up to the machine's."""
        stream, csr = self._host_counted
        return int((self.src.nbytes + self.dst.nbytes + self.t.nbytes) * stream + self.neighbors.nbytes() * csr)

    # -- the static part of a mini-batch ----------------------------------------------------------
    def _work(self, split: str, q: int, epoch: int, negset: int, part: int, parts: int, negatives: int) -> _Work:
        """Events of slice ``part``/``parts`` of batch q of ``split``, their negatives (seeded by the batch,
        never by the slice or P) and the most recent neighbours of every root."""
        lo, hi = self.plan.batch_events_range(split, q)
        s0, s1 = _slice(lo, hi, part, parts)
        rng = np.random.default_rng([self.seed, _SPLIT_CODE[split], max(epoch, 0), q, negset])
        neg = rng.integers(*self.dst_range, size=(hi - lo, negatives))[s0 - lo : s1 - lo]
        ev = np.arange(s0, s1)
        roots = np.concatenate([self.src[ev], self.dst[ev], neg.reshape(-1)])
        root_t = np.concatenate([self.t[ev], self.t[ev], np.repeat(self.t[ev], negatives)])
        nb = self.neighbors.recent(roots, np.searchsorted(self.t, root_t, side="left"), self.k_neighbors)
        unique = np.unique(np.concatenate([roots, nb.nodes[nb.mask]]))
        later = np.unique(np.concatenate([self.src[s1:hi], self.dst[s1:hi]]))
        feat = self.efeat_dev[torch.from_numpy(nb.events).to(self.ctx.device)]
        inp = TGNInput(roots, root_t, nb, self.t[nb.events], feat, unique, None)
        return _Work(split, q, ev, later, negatives, inp)

    def _static(self, key: tuple) -> _Work:
        """``_work(*key)``, from the prefetch thread when it was asked for ahead."""
        if self._next is not None and self._next[0] == key:
            work = self._next[1].result()
            self._next = None
            return work
        return self._work(*key)

    def _prefetch(self, key: tuple | None) -> None:
        if self.pool is not None and key is not None:
            self._next = (key, self.pool.submit(self._work, *key))

    # -- memory writes ------------------------------------------------------------------------------
    def _write(self, work: _Work, s_new: torch.Tensor) -> None:
        """Memories s'(t) and mails [s'_u ‖ s'_v ‖ e] of both ends of the slice's positive events, each node
        taking its last occurrence (most-recent COMB; events interleaved u0 v0 u1 v1 …, as TGL orders them),
        except nodes a later slice of the batch writes."""
        ev, n = work.events, work.events.shape[0]
        if n == 0:
            return
        s = s_new.detach().cpu()
        su, sv = s[:n], s[n : 2 * n]
        e = self.efeat[torch.from_numpy(ev)]
        nodes = np.stack([self.src[ev], self.dst[ev]], 1).reshape(-1)
        mem = torch.stack([su, sv], 1).reshape(2 * n, -1)
        mail = torch.stack([torch.cat([su, sv, e], 1), torch.cat([sv, su, e], 1)], 1).reshape(2 * n, -1)
        times = np.repeat(self.t[ev], 2)
        rev_unique, rev_first = np.unique(nodes[::-1], return_index=True)
        last = 2 * n - 1 - rev_first
        keep = ~np.isin(rev_unique, work.later, assume_unique=True)
        last = last[keep]
        self.memory.write(rev_unique[keep], mem[last].numpy(), times[last], mail[last].numpy())

    def _order(self) -> None:
        """The group barrier between an iteration's reads and its writes (§3.3)."""
        if self.group is not None and self.group.size > 1:
            self.group.barrier(tag="memory.order")

    # -- training -----------------------------------------------------------------------------------
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

    def batches(self, epoch: int):
        """One batch per iteration of the epoch (:meth:`MemoryPlan.iterations`); the group's memory is reset
        first when its segment is the stream's first."""
        p = self.plan
        seg = p.segment_of(self.c, epoch)
        if seg == 0:  # the group starts the stream again (k = 1: every epoch)
            self.memory.reset()
            self._order()
        self._fifo.clear()
        lo, hi = p.segments[seg]
        self._prefetch(("train", lo, epoch, self.b, self.a, p.minibatch, self.ctx.job.task.negatives))
        for g in range(p.iterations()):
            yield EventBatch(epoch, g, self._examples(epoch, g), seg, g)

    def step(self, model, task, batch: EventBatch, scale: float) -> np.ndarray:
        """Iteration g of the segment: read the memory for batch g, the group barrier, then train on the batch
        read ``self.b`` iterations earlier (epoch parallelism) and, where ``self.b`` is 0, write its memory;
        returns the task's metric sums. A pre-training batch (:meth:`pretraining`) reads no memory."""
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
            out = task(EventEmbeddings(z, work.events.shape[0], m), batch.epoch)
            (out.loss_sum * scale).backward()
            stats = out.stats
            self._train_events += work.events.shape[0]
            if self.b == 0:
                t1 = time.perf_counter()
                self._write(work, s_new)
                self.load_seconds += time.perf_counter() - t1
        return stats

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self, model, task, epoch: int) -> np.ndarray:
        """Validation then test MRR / AP sums from the group whose memory just finished the last segment."""
        t0 = time.perf_counter()
        p, stats = self.plan, np.zeros(task.stats_width())
        if self.c != (p.memory - epoch % p.memory) % p.memory:
            self._eval_seconds = time.perf_counter() - t0
            return stats
        part, parts = self.a + p.minibatch * self.b, p.minibatch * p.epoch
        backup = self.memory.state() if self.memory.leader else None
        m = self.ctx.job.task.eval_negatives
        with torch.no_grad():
            for split in ("val", "test"):
                for q in range(p.batches(split)):
                    work = self._work(split, q, 0, 0, part, parts, m)
                    work.inp.memory = self.memory.read(work.inp.unique, self.ctx.device)
                    self._order()
                    z, s_new = model(work.inp)
                    pos, neg = task.scores(EventEmbeddings(z, work.events.shape[0], m))
                    self._write(work, s_new)
                    pos, neg = pos.double().cpu().numpy(), neg.double().cpu().numpy()
                    parts_scores = [(pos, neg)] if self.group is None else self.group.allgather_obj(
                        (pos, neg), tag="memory.eval")  # also orders these writes before the next reads
                    ap = None
                    if self.group is None or self.group.rank == 0:
                        allp = np.concatenate([s[0] for s in parts_scores])
                        alln = np.concatenate([s[1].reshape(-1) for s in parts_scores])
                        labels = np.r_[np.ones(allp.shape[0]), np.zeros(alln.shape[0])]
                        ap = average_precision(np.r_[allp, alln], labels)
                    stats += task.eval_stats(split, pos, neg, ap)
        if self.memory.leader:
            self.memory.load(backup)
        self._order()
        self._eval_seconds = time.perf_counter() - t0
        return stats

    def report(self, epoch: int, train_loss: float) -> dict[str, Any]:
        """Events trained on and the evaluation seconds (throughput = train_events / (epoch − eval))."""
        events, eval_s = self.comm.allreduce_array([self._train_events, 0.0]), self.comm.gather_array(
            [self._eval_seconds])
        self._train_events = 0
        p = self.plan
        return {"memory": {"config": f"{p.minibatch}x{p.epoch}x{p.memory}", "train_events": int(events[0]),
                           "eval_seconds": float(eval_s.max())}}

    # -- static node memory pre-training (DistTGL §3.1) ------------------------------------------------
    def pretraining(self) -> Pretraining[EventBatch] | None:
        """The static node memory's pre-training phase (module docstring), in a fresh run only: a resumed
        run's model holds the table as trained up to its checkpoint (pre-trained again, it would be
        overwritten and the run would depart from the uninterrupted one)."""
        epochs = self.ctx.job.model.static_pretrain_epochs
        if getattr(self.model, "static", None) is None or epochs == 0:
            return None
        if self.ctx.start_epoch > 0:
            if self.comm.rank == 0:
                get_logger().info(f"static node memory: as trained up to epoch {self.ctx.start_epoch} "
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
        """A pre-training step, h = S (no dynamic memory): each rank takes a slice of the batch (exact at any P)."""
        m = self.ctx.job.task.negatives
        work = self._work("train", batch.iteration, -batch.epoch, 0, self.comm.rank, self.comm.size, m)
        z, _ = model(work.inp)
        out = task(EventEmbeddings(z, work.events.shape[0], m), 0)
        (out.loss_sum * scale).backward()
        return out.stats

    # -- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The group's memory (its leader's copy; the other ranks of the group map the same rows)."""
        return {"memory": self.memory.state()} if self.memory.leader else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the group's memory from :meth:`state_dict` (empty on non-leaders), then the group barrier."""
        if state:
            self.memory.load(state["memory"])
        self._order()
