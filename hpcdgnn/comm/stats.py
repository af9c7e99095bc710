"""What the communicator counts: calls, bytes and seconds per tag (:class:`CommStats`).

``bytes_sent`` is the payload this rank hands MPI for *other* ranks (its own block is a local copy), whatever
backend carries it: summed over ranks one redistribution moves (T·N − Σ_p T_p·N_p)·F·itemsize bytes (IBM §4.2).
An all-reduce counts the buffer contributed (not the algorithm's wire traffic); object collectives count their
pickled size.
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

    ``seconds``: the union of the tag's communication intervals (post to seen-complete); ``exposed``: the part
    spent blocked inside MPI calls, i.e. not hidden behind computation.
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
    #: read by the stall watchdog's thread: calls completed, the tag under way (``""``: none), when each changed
    completed: int = 0
    current: str = ""
    entered: float = field(default_factory=time.monotonic)
    progressed: float = field(default_factory=time.monotonic)
    #: per tag, non-blocking exchanges in flight and since when
    _open: dict[str, int] = field(default_factory=dict)
    _opened: dict[str, float] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)
    #: all-rank collectives since :meth:`take_exchanges`: entry times and blocked intervals, for
    #: :func:`hpcdgnn.metrics.waits.late_waits`; kept only while ``keep_exchanges`` is set
    exchanges: ExchangeLog = field(default_factory=ExchangeLog)
    keep_exchanges: bool = False
    #: tags of other calls (point to point, a group's collective): whom they waited for is unknown
    unmatched: set[str] = field(default_factory=set)
    #: (tag, start, end) intervals while ``keep_exchanges`` is set: an epoch's ``comm`` is their union, so
    #: overlapping tags count once
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
        """Record one completed blocking call; with ``every_rank`` also in :attr:`exchanges`, entered at ``entered``."""
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
        if not self._open.get(tag):  # else it lies inside an interval already being timed
            s.seconds += seconds
            if self.keep_exchanges:
                now = time.perf_counter()
                self.spans.append((tag, now - seconds, now))
        else:
            now = time.perf_counter()
            self._last[tag] = max(self._last.get(tag, now), now)
        s.exposed += seconds

    def posted(self, tag: str, sent: int, recv: int, t0: float, every_rank: bool = False,
               entered: float | None = None) -> tuple | None:
        """Record the post of a non-blocking exchange begun at ``t0``; returns its ``(log, index)`` entry or None."""
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
        """Seconds blocked in a test or wait of ``tag``'s exchanges; added to ``entry`` when given."""
        self._done()
        self.tags[tag].exposed += seconds
        if entry is not None and seconds > 0:
            now = time.perf_counter()
            log, i = entry
            log.block(i, now - seconds, now)

    def take_exchanges(self) -> tuple[ExchangeLog, set[str]]:
        """The exchanges and unmatched tags since the last call; both (and :attr:`spans`) start anew."""
        out, self.exchanges, self.unmatched, self.spans = (self.exchanges, self.unmatched), ExchangeLog(), set(), []
        return out

    def take_spans(self) -> list[tuple[str, float, float]]:
        """The intervals recorded since the last call (:attr:`spans`), which start anew."""
        out, self.spans = self.spans, []
        return out

    def finished(self, tag: str, t: float) -> None:
        """Note an exchange of ``tag`` seen complete at ``t``; out-of-order reports end at the latest."""
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
        """Per-tag counters accumulated since the snapshot ``before`` (tags with no new calls omitted)."""
        out = {}
        for k, v in self.tags.items():
            b = before.get(k, TagStats())
            if v.calls != b.calls or v.seconds != b.seconds:
                out[k] = TagStats(v.calls - b.calls, v.bytes_sent - b.bytes_sent, v.bytes_recv - b.bytes_recv,
                                  v.seconds - b.seconds, v.exposed - b.exposed)
        return out

    def since(self, before: dict[str, TagStats], prefix: str = "") -> TagStats:
        """Totals over tags starting with ``prefix`` accumulated since the snapshot ``before``."""
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
    """The array bytes of a point-to-point payload (nested lists, tuples, dicts), the same on both sides."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (list, tuple)):
        return sum(payload_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(payload_bytes(x) for x in obj.values())
    return 0
