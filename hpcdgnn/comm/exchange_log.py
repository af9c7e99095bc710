"""This rank's arrivals at the collectives of every rank and the time it spent blocked in them, compactly.

:func:`hpcdgnn.metrics.waits.late_waits` compares the ranks' records to find ``comm_late``. ``array`` columns
(12 B an exchange, 20 B a blocked interval) because an epoch may hold a million collectives; nothing is
recorded unless ``CommStats.keep_exchanges`` is set.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator

import numpy as np

__all__ = ["ExchangeLog"]


class ExchangeLog:
    """Exchanges (tag, arrival) in the order this rank made them, and the intervals it spent blocked in
    them, all in ``perf_counter`` seconds."""

    __slots__ = ("_names", "_index", "_tag", "_arrival", "_owner", "_start", "_end")

    def __init__(self) -> None:
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._tag = array("i")
        self._arrival = array("d")
        self._owner = array("i")  # per blocked interval: its exchange
        self._start = array("d")
        self._end = array("d")

    @classmethod
    def of(cls, records: Iterable[tuple]) -> ExchangeLog:
        """A log of ``(tag, arrival, [(blocked from, to), ...])`` records (tests, tools)."""
        log = cls()
        for tag, arrival, blocked in records:
            i = log.add(tag, arrival)
            for t0, t1 in blocked:
                log.block(i, t0, t1)
        return log

    def __len__(self) -> int:
        return len(self._tag)

    def add(self, tag: str, arrival: float) -> int:
        """Record this rank's arrival at an exchange of ``tag``; returns its index (for :meth:`block`)."""
        k = self._index.get(tag)
        if k is None:
            k = self._index[tag] = len(self._names)
            self._names.append(tag)
        self._tag.append(k)
        self._arrival.append(arrival)
        return len(self._tag) - 1

    def block(self, i: int, t0: float, t1: float) -> None:
        """Record that this rank blocked in exchange ``i`` from ``t0`` to ``t1``."""
        self._owner.append(i)
        self._start.append(t0)
        self._end.append(t1)

    @property
    def names(self) -> list[str]:
        """The distinct tags, indexed by :attr:`codes`."""
        return list(self._names)

    @property
    def codes(self) -> np.ndarray:
        """Each exchange's tag as an index into :attr:`names`, in order."""
        return np.frombuffer(self._tag, dtype=np.int32).copy()

    @property
    def arrivals(self) -> np.ndarray:
        """Each exchange's arrival, in order."""
        return np.frombuffer(self._arrival, dtype=np.float64).copy()

    def each(self, last: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Per exchange: seconds blocked, and those before ``last[i]``, the last rank's arrival (None: unknown)."""
        owner = np.frombuffer(self._owner, dtype=np.int32)
        start, end = np.frombuffer(self._start, dtype=np.float64), np.frombuffer(self._end, dtype=np.float64)
        blocked = np.bincount(owner, weights=end - start, minlength=len(self))
        if last is None:
            return blocked, None
        spent = np.maximum(0.0, np.minimum(end, np.asarray(last)[owner]) - start)
        return blocked, np.bincount(owner, weights=spent, minlength=len(self))

    def per_tag(self, values: np.ndarray) -> dict[str, float]:
        """Per tag of this log, the sum of ``values`` (one per exchange, e.g. :meth:`each`'s late seconds)."""
        tags = np.frombuffer(self._tag, dtype=np.int32)
        sums = np.bincount(tags, weights=values, minlength=len(self._names))
        used = np.bincount(tags, minlength=len(self._names)) > 0  # tags seen since the log began
        return {name: float(sums[k]) for k, name in enumerate(self._names) if used[k]}

    def late(self, last: np.ndarray) -> dict[str, float]:
        """Per tag, the time blocked before ``last[i]``, exchange i's last arrival over the ranks."""
        return self.per_tag(self.each(last)[1])

    def records(self) -> Iterator[tuple[str, float, list[tuple[float, float]]]]:
        """The exchanges as ``(tag, arrival, [(blocked from, to), ...])`` (tests, tools)."""
        blocked: list[list[tuple[float, float]]] = [[] for _ in self._tag]
        for i, t0, t1 in zip(self._owner, self._start, self._end, strict=True):
            blocked[i].append((t0, t1))
        for k, a, b in zip(self._tag, self._arrival, blocked, strict=True):
            yield self._names[k], a, b

    def nbytes(self) -> int:
        """The columns' size in bytes (the tag names aside)."""
        return sum(c.itemsize * len(c) for c in (self._tag, self._arrival, self._owner, self._start, self._end))
