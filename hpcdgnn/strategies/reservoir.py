"""H4: the hybrid batch reservoir (DynaHB §5.2, Alg. 3, Eq. 4–5).

One store per action holds built batches (this rank's part of a hybrid batch: window, targets and the layout
with its sampled blocks). A batch is a pure function of (seed, action, serial). Each step the selector reuses a
stored batch with probability::

    p = N_rsv / (N·T / (N_S·N_V) / N_A)        (Eq. 4; the denominator is also the store's cap)

else it trains a snapshot batch (every vertex × N_S snapshots) where one fits ``max_batch_mb``, else a fresh
hybrid batch. ``threads: 0`` fills the store inline, one batch a step (deterministic); ``threads`` > 0 run
generators beside training, each over its share of the actions, locking only to insert. ``max_mb`` caps a
rank's stored bytes, counted as the batches hold them: again after a stored batch trains, when a
graph-recurrent cell has memoised its operators on it (:meth:`BatchReservoir.recount`).

Under synchronous averaging with ``threads: 0`` every rank must hold stores of the same sizes: p, and so the
choice between a stored batch and a fresh one, is then the same on every rank, and the ranks train the parts of
one batch whose gradients the all-reduce sums. A rank's bytes depend on the targets it owns, so "``max_mb``
reached" is agreed (:attr:`BatchReservoir.agreed`, :attr:`BatchReservoir.full`): each step's all-reduce of the
batch's example count carries it, and the stores stop growing on every rank once one rank's bytes reach the cap.
Under ``averaging.mode: async``, or with generator threads, each rank's stores are its own (their timing
decides them), and the cap is each rank's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

from hpcdgnn.comm.stats import payload_bytes
from hpcdgnn.ops.sparse import NormalizedAdjacency, csr_nbytes

__all__ = ["BatchReservoir", "Stored", "layout_bytes"]


def layout_bytes(layout) -> int:
    """Bytes a built layout holds (what ``max_mb`` caps, H4): its row sets, its sampled layers' Ã blocks
    (:class:`~hpcdgnn.ops.sparse.NormalizedAdjacency`, with Ãᵀ where built) or, for graph-recurrent cells, the
    rows (``cells``) and each step's adjacency among them (``graphs``: CSR arrays and the memoised operators
    built so far). The arrays themselves are counted, whatever object holds them: a
    :class:`NormalizedAdjacency` or a step graph is no array to :func:`payload_bytes`, which left a batch
    counted as its row ids alone (uo17, N = 1000: 2,240 of 61,152 bytes under a 2-layer ``tgcn_cell``, 2,376
    of 69,136 under ``gconv_lstm``; a 1-layer ``tgcn_cell`` reads Ã·X (S4) and holds its rows only)."""
    if layout is None:
        return 0
    total = payload_bytes([getattr(layout, "rows", None), getattr(layout, "cells", None)])
    total += sum(a.nbytes for a in getattr(layout, "adj", None) or () if a is not None)
    for g in getattr(layout, "graphs", None) or ():
        total += payload_bytes([g.indptr, g.indices, g.values])
        total += sum(_held_bytes(op) for op in g.ops.values())
    return total


def _held_bytes(obj) -> int:
    """Array bytes of a memoised operator: tensors, arrays, :class:`NormalizedAdjacency`, nested in tuples."""
    if isinstance(obj, NormalizedAdjacency):
        return obj.nbytes
    if isinstance(obj, (list, tuple)):
        return sum(_held_bytes(x) for x in obj)
    if isinstance(obj, torch.Tensor) and obj.layout == torch.sparse_csr:
        return csr_nbytes(obj)
    return payload_bytes(obj)


class Stored:
    """One stored batch: its serial, window, this rank's targets, the built layout and its bytes
    (:meth:`count`: as built, then recounted after each time it trains, :meth:`BatchReservoir.recount`)."""

    __slots__ = ("serial", "seq", "targets", "layout", "nbytes")

    def __init__(self, serial: int, seq, targets, layout) -> None:
        self.serial, self.seq, self.targets, self.layout = serial, seq, targets, layout
        self.nbytes = self.count()

    def count(self) -> int:
        """The bytes the batch holds now: its layout's (:func:`layout_bytes`) and its targets'."""
        return layout_bytes(self.layout) + self.targets.nbytes


class BatchReservoir:
    """Stores of built batches, one per action.

    Args:
        cfg: ``strategy.reservoir`` (:class:`~hpcdgnn.config.schema.ReservoirConfig`).
        caps: per action, Eq. 4's denominator (the most batches stored).
        build: ``build(action, serial)`` -> :class:`Stored`.
    """

    def __init__(self, cfg, caps: list[int], build: Callable[[int, int], Stored]) -> None:
        self.cfg, self.caps, self.build = cfg, caps, build
        self.stores: list[list[Stored]] = [[] for _ in caps]
        self.serials = [0] * len(caps)
        self.nbytes = 0
        self.seconds = 0.0
        #: whether "max_mb reached" is decided by every rank together (:meth:`over` all-reduced by the caller)
        #: rather than by this rank's bytes: synchronous averaging with ``threads: 0`` (the module's docstring)
        self.agreed = False
        #: ``agreed``: some rank's bytes reached ``max_mb`` (at the last all-reduce that carried :meth:`over`)
        self.full = False
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.error: BaseException | None = None

    def p(self, action: int) -> float:
        """Eq. 4's probability of reusing a stored batch of ``action``."""
        return len(self.stores[action]) / self.caps[action]

    def over(self) -> bool:
        """Whether this rank's stored bytes reached ``max_mb`` (what the ranks agree on when :attr:`agreed`)."""
        return self.nbytes >= self.cfg.max_mb * 2**20

    def _room(self, action: int) -> bool:
        # by bytes: a rank stores while below the cap, so it may pass it by one batch
        return len(self.stores[action]) < self.caps[action] and not (self.full if self.agreed else self.over())

    def fill(self, action: int) -> None:
        """Build and store one batch of ``action`` if its store has room (inline: ``threads: 0``)."""
        if not self._room(action):
            return
        t0 = time.perf_counter()
        serial = self.serials[action]
        self.serials[action] += 1
        item = self.build(action, serial)
        self._insert(action, item, time.perf_counter() - t0)

    def _insert(self, action: int, item: Stored, seconds: float = 0.0) -> None:
        # the only lock: the store, its byte count and the build seconds change together (generator threads'
        # unlocked `seconds +=` could lose one another's)
        with self.lock:
            self.stores[action].append(item)
            self.nbytes += item.nbytes
            self.seconds += seconds

    def recount(self, item: Stored) -> None:
        """Count ``item``'s bytes again after it trained: graph-recurrent cells memoise their operators on its
        step graphs the first time it trains (and a backward builds Ãᵀ), which it then holds (several times
        its bytes as built), so ``max_mb`` caps what the stores hold and the record reports it."""
        nbytes = item.count()  # the training thread alone changes a stored layout: counted outside the lock
        with self.lock:
            self.nbytes += nbytes - item.nbytes
            item.nbytes = nbytes

    def start(self) -> None:
        """Start ``threads`` generators, thread i building the actions i, i + threads, ...; at most one per action:
        a thread beyond the actions would own none and only poll, taking the cores training needs."""
        n = min(self.cfg.threads, len(self.caps))
        for i in range(n):
            mine = list(range(i, len(self.caps), n))
            t = threading.Thread(target=self._generate, args=(mine,), name=f"hpcdgnn-reservoir-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def _generate(self, actions: list[int]) -> None:
        """A generator thread: fill its actions' stores until stopped, or until none has room: stores and their
        bytes only grow, so a full one stays full and polling it would only wake the thread. An exception is kept
        for the trainer."""
        try:
            while not self._stop.is_set():
                busy = False
                for a in actions:
                    if self._room(a):
                        t0 = time.perf_counter()
                        with self.lock:
                            serial = self.serials[a]
                            self.serials[a] += 1
                        item = self.build(a, serial)
                        self._insert(a, item, time.perf_counter() - t0)
                        busy = True
                if not busy:
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the training thread, which raises it
            self.error = e

    def check(self) -> None:
        """Raise a generator thread's exception in the training thread (the job then ends as on any crash)."""
        if self.error is not None:
            raise RuntimeError(f"reservoir generator thread failed: {self.error!r}") from self.error

    def pick(self, action: int, index: int) -> Stored:
        """Stored batch ``index`` (modulo the store's size) of ``action``."""
        with self.lock:
            store = self.stores[action]
            return store[index % len(store)]

    def close(self) -> None:
        """Stop the generator threads."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self._threads = []
