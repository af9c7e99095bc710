"""What the communicator counts: calls, bytes and seconds per tag (:class:`CommStats`).

Byte accounting (what ``bytes_sent`` means in metrics.jsonl):

* ``alltoallv`` / ``alltoall_boxes``: the bytes this rank hands MPI for *other* ranks
  (``sum_{q != rank} send_rows[q] * row_bytes``); the block a rank "sends" to
  itself is a local copy and is not counted. Summed over ranks, one
  redistribution of T snapshots x N vertices x F features moves
  ``(T*N - sum_p T_p*N_p) * F * itemsize`` bytes, which is
  ``T*N*F*(P-1)/P*itemsize`` when P divides T and N (IBM §4.2).
* ``allreduce``: the buffer each rank contributes when P > 1 (the payload,
  not the algorithm's wire traffic, which depends on the MPI library).
* object collectives (``bcast_obj`` and friends) are counted under their tag
  by pickled size; the trainer uses them only outside the training step.

The counters count the same payload whatever library carries it, so runs on different backends report the
same ``bytes_sent``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hpcdgnn.comm.exchange_log import ExchangeLog

__all__ = ["CommStats", "TagStats", "payload_bytes"]


@dataclass
class TagStats:
    """Counters of one tag (e.g. ``redistribute.fwd``).

    ``seconds``: the time this tag's communication was under way — a blocking call's duration, a
    non-blocking exchange's time from its post to the moment its completion was seen (in
    :meth:`~hpcdgnn.comm.exchange.Exchange.test` or :meth:`~hpcdgnn.comm.exchange.Exchange.wait`);
    concurrent exchanges of one tag count once (the union of their intervals). ``exposed``: the part of it
    this rank spent blocked inside MPI calls (a blocking call whole; posting, testing and waiting for a
    non-blocking one), i.e. not hidden behind computation. Blocking calls only: ``exposed == seconds``.
    """

    calls: int = 0
    bytes_sent: int = 0
    bytes_recv: int = 0
    seconds: float = 0.0
    exposed: float = 0.0


@dataclass
class CommStats:
    """Per-tag communication counters of this rank; ``snapshot``/``since`` give per-epoch deltas."""

    tags: dict[str, TagStats] = field(default_factory=lambda: defaultdict(TagStats))
    #: what the stall watchdog (:mod:`hpcdgnn.comm.watchdog`) reads from its thread: calls
    #: completed, the tag of the call under way (``""``: none) and when each last changed
    completed: int = 0
    current: str = ""
    entered: float = field(default_factory=time.monotonic)
    progressed: float = field(default_factory=time.monotonic)
    #: per tag, non-blocking exchanges in flight and since when (``perf_counter``) at least one was
    _open: dict[str, int] = field(default_factory=dict)
    _opened: dict[str, float] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)  # per open tag, its latest completion so far
    #: the collectives of every rank (which all ranks make in the same order) since :meth:`take_exchanges`:
    #: when this rank entered each call or posted each exchange, and the intervals it then spent blocked in
    #: it where a peer may hold it up (the blocking call whole; a non-blocking one's wait, not its post).
    #: :func:`hpcdgnn.metrics.waits.late_waits` compares them. Kept only while ``keep_exchanges`` is set
    #: (:class:`~hpcdgnn.metrics.epoch.EpochRecorder` sets it): nobody else reads it.
    exchanges: ExchangeLog = field(default_factory=ExchangeLog)
    keep_exchanges: bool = False
    #: tags of the other calls since :meth:`take_exchanges` (point to point, a group's collective): whom their
    #: blocked time waited for is not known, so such a tag gets no late figure
    unmatched: set[str] = field(default_factory=set)
    #: while ``keep_exchanges`` is set, every interval a tag's ``seconds`` counted, as (tag, start, end) in
    #: ``perf_counter`` time: an epoch's ``comm`` is their union over the training tags, so that two tags under way
    #: at once (gradient buckets during the backward redistribution's chunks) count once, as within a tag
    spans: list[tuple[str, float, float]] = field(default_factory=list)

    def enter(self, tag: str) -> float:
        """Mark the start of a call under ``tag``; returns ``perf_counter()`` for its timer."""
        self.entered = time.monotonic()
        self.current = tag
        return time.perf_counter()

    def _done(self) -> None:
        self.current = ""
        self.completed += 1
        self.progressed = time.monotonic()

    def add(self, tag: str, sent: int, recv: int, seconds: float, every_rank: bool = False,
            entered: float | None = None) -> None:
        """Record one blocking call (it has completed): communication and exposed time alike; with
        ``every_rank`` (a collective of all ranks) also as an exchange of :attr:`exchanges`, arrived at
        ``entered`` (``perf_counter``: when the rank entered MPI, after its own copies; default: the call's
        start)."""
        self._done()
        if self.keep_exchanges and every_rank:
            now = time.perf_counter()
            a = now - seconds if entered is None else entered
            self.exchanges.block(self.exchanges.add(tag, a), a, now)
        elif self.keep_exchanges:
            self.unmatched.add(tag)
        s = self.tags[tag]
        s.calls += 1
        s.bytes_sent += sent
        s.bytes_recv += recv
        if not self._open.get(tag):  # else the call lies inside an interval already being timed: it lasts
            s.seconds += seconds  # at least until now (its non-blocking exchanges may have completed earlier)
            if self.keep_exchanges:
                now = time.perf_counter()
                self.spans.append((tag, now - seconds, now))
        else:
            now = time.perf_counter()
            self._last[tag] = max(self._last.get(tag, now), now)
        s.exposed += seconds

    def posted(self, tag: str, sent: int, recv: int, t0: float, every_rank: bool = False,
               entered: float | None = None) -> tuple | None:
        """Record the post of a non-blocking exchange that began at ``t0`` (``perf_counter``); with
        ``every_rank`` (and ``keep_exchanges``), returns its entry ``(log, index)`` in :attr:`exchanges` (for
        :meth:`blocked`; arrived at ``entered``, the moment of the MPI post, default ``t0``), else None."""
        self._done()
        s = self.tags[tag]
        s.calls += 1
        s.bytes_sent += sent
        s.bytes_recv += recv
        now = time.perf_counter()
        s.exposed += now - t0
        if not self._open.get(tag):
            self._opened[tag] = t0
        self._open[tag] = self._open.get(tag, 0) + 1
        if not self.keep_exchanges:
            return None
        if not every_rank:
            self.unmatched.add(tag)
            return None
        # posting blocks on no peer: only the waits can be spent waiting for one
        return self.exchanges, self.exchanges.add(tag, t0 if entered is None else entered)

    def blocked(self, tag: str, seconds: float, entry: tuple | None = None) -> None:
        """Seconds spent inside a test or wait of non-blocking exchanges of ``tag`` (exposed time); a wait
        for one exchange adds the interval to its ``entry`` (:meth:`posted`)."""
        self._done()
        self.tags[tag].exposed += seconds
        if entry is not None and seconds > 0:
            now = time.perf_counter()
            log, i = entry  # the log it was posted in (a later epoch's is another)
            log.block(i, now - seconds, now)

    def take_exchanges(self) -> tuple[ExchangeLog, set[str]]:
        """The exchanges and the unmatched tags recorded since the last call (:attr:`exchanges`,
        :attr:`unmatched`), which start anew (and so do :attr:`spans`: :meth:`take_spans`)."""
        out, self.exchanges, self.unmatched, self.spans = (self.exchanges, self.unmatched), ExchangeLog(), set(), []
        return out

    def take_spans(self) -> list[tuple[str, float, float]]:
        """The intervals recorded since the last call (:attr:`spans`), which start anew."""
        out, self.spans = self.spans, []
        return out

    def finished(self, tag: str, t: float) -> None:
        """A non-blocking exchange of ``tag`` was seen complete at ``t`` (``perf_counter``). Completions may be
        reported out of order (a progress thread's times, read in the order the exchanges are waited for):
        the interval ends at the latest of them."""
        self._last[tag] = max(self._last.get(tag, t), t)
        self._open[tag] -= 1
        if not self._open[tag]:
            end = self._last.pop(tag)
            self.tags[tag].seconds += end - self._opened[tag]
            if self.keep_exchanges:
                self.spans.append((tag, self._opened[tag], end))

    def snapshot(self) -> dict[str, TagStats]:
        """A copy of the counters, to subtract later with :meth:`since`."""
        return {k: TagStats(**vars(v)) for k, v in self.tags.items()}

    def delta(self, before: dict[str, TagStats]) -> dict[str, TagStats]:
        """Per-tag counters accumulated after ``before`` was taken (tags with no new calls omitted)."""
        out = {}
        for k, v in self.tags.items():
            b = before.get(k, TagStats())
            if v.calls != b.calls or v.seconds != b.seconds:
                out[k] = TagStats(v.calls - b.calls, v.bytes_sent - b.bytes_sent, v.bytes_recv - b.bytes_recv,
                                  v.seconds - b.seconds, v.exposed - b.exposed)
        return out

    def since(self, before: dict[str, TagStats], prefix: str = "") -> TagStats:
        """Totals over tags starting with ``prefix`` accumulated after ``before`` was taken."""
        out = TagStats()
        for k, v in self.delta(before).items():
            if k.startswith(prefix):
                out.calls += v.calls
                out.bytes_sent += v.bytes_sent
                out.bytes_recv += v.bytes_recv
                out.seconds += v.seconds
                out.exposed += v.exposed
        return out


def payload_bytes(obj: Any) -> int:
    """The array bytes of a point-to-point payload (tensors and numpy arrays inside lists, tuples and dicts):
    what :meth:`~hpcdgnn.comm.Communicator.isend_obj` counts as sent and
    :meth:`~hpcdgnn.comm.Communicator.recv_obj` as received, both sides from the same object, so a tag's
    bytes received over all ranks equal its bytes sent. Pickling's header and the payload's other objects are
    not counted (the object collectives count their pickled length: there the objects are the payload)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (list, tuple)):
        return sum(payload_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(payload_bytes(x) for x in obj.values())
    return 0
