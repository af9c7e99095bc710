"""Most-recent temporal neighbours of an event stream (DistTGL §2.1, SPEC M1).

Each event is kept once per endpoint (sampling treats the stream as undirected, as TGL
does), sorted by key ``node · (E + 1) + event``; event order is time order, so "the
events of v before cut c" end at ``searchsorted(key, v · (E + 1) + c)`` and one search
answers a whole batch. "Strictly before t" is leak-free: an event never sees itself or
a simultaneous event, so answers do not depend on batching.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NeighborBlock", "TemporalNeighbors"]


@dataclass
class NeighborBlock:
    """The ``k`` most recent neighbours of each of ``R`` queries, padded.

    Shapes:
        ``nodes``, ``events``: (R, k) neighbour ids and their event indices (0 where masked);
        ``mask``: (R, k) bool, real ones first, oldest first.
    """

    nodes: np.ndarray
    events: np.ndarray
    mask: np.ndarray


class TemporalNeighbors:
    """Every node's events in time order (both endpoints), and the most-recent-``k`` query.

    Args:
        src, dst: endpoints of the E events, in time order (event e is row e).
        num_vertices: N.
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, num_vertices: int) -> None:
        E = int(src.shape[0])
        self.num_events, self.num_vertices = E, int(num_vertices)
        ends = np.concatenate([src, dst]).astype(np.int64)
        other = np.concatenate([dst, src]).astype(np.int64)
        event = np.concatenate([np.arange(E, dtype=np.int64)] * 2)
        key = ends * (E + 1) + event
        order = np.argsort(key, kind="stable")
        self.key = key[order]
        self.neighbor = other[order]
        self.event = event[order]
        self.start = np.searchsorted(self.key, np.arange(self.num_vertices, dtype=np.int64) * (E + 1))

    #: the arrays that are the index (what :meth:`arrays` returns and :meth:`from_arrays` takes)
    ARRAYS = ("key", "neighbor", "event", "start")

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as named arrays (to share them, e.g. once per node)."""
        return {k: getattr(self, k) for k in self.ARRAYS}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], num_events: int, num_vertices: int) -> TemporalNeighbors:
        """The index over arrays :meth:`arrays` gave (possibly another process's, mapped)."""
        out = cls.__new__(cls)
        out.num_events, out.num_vertices = int(num_events), int(num_vertices)
        for k in cls.ARRAYS:
            setattr(out, k, arrays[k])
        return out

    @staticmethod
    def index_bytes(num_events: int, num_vertices: int) -> int:
        """What :meth:`nbytes` is for a stream of E events over N vertices, without building it: ``key``,
        ``neighbor``, ``event`` (2E int64 each) and ``start`` (N int64)."""
        return 3 * 2 * int(num_events) * 8 + int(num_vertices) * 8

    def nbytes(self) -> int:
        """Bytes of the index's arrays."""
        return int(sum(a.nbytes for a in self.arrays().values()))

    def recent(self, nodes: np.ndarray, cut: np.ndarray, k: int) -> NeighborBlock:
        """The ``k`` most recent events of each ``nodes[q]`` among events ``0 .. cut[q] - 1`` (those before t_q)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        stop = np.searchsorted(self.key, nodes * (self.num_events + 1) + np.asarray(cut, dtype=np.int64))
        first = np.maximum(self.start[nodes], stop - k)
        pos = first[:, None] + np.arange(k, dtype=np.int64)[None, :]
        mask = pos < stop[:, None]
        pos = np.where(mask, pos, 0)
        if self.key.shape[0] == 0:
            zeros = np.zeros(mask.shape, dtype=np.int64)
            return NeighborBlock(zeros, zeros, mask)
        return NeighborBlock(np.where(mask, self.neighbor[pos], 0), np.where(mask, self.event[pos], 0), mask)
