"""Most-recent temporal neighbours of an event stream: CSR by time, vectorised queries (DistTGL §2.1, SPEC M1).

TGN-attn reads, for a node v queried at time t, the ``k`` most recent events of v strictly before t
(either endpoint: the stream is treated as undirected for sampling, as TGL does). The events are kept
once per endpoint, grouped by node and ordered by event index — which is time order, since an
event-stream dataset is sorted by time — so each node's history is one contiguous run. With the key
``node · (E + 1) + event`` ascending over the whole array, "the events of v before cut c" ends at
``searchsorted(key, v · (E + 1) + c)``: one ``searchsorted`` answers a whole batch of queries, with no
Python loop per event (TGL's sampler is C++ for this reason).

"Strictly before t" is the leak-free rule: an event never sees itself, nor any event of the same
timestamp, so the answer does not depend on how events are cut into batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NeighborBlock", "TemporalNeighbors"]


@dataclass
class NeighborBlock:
    """The ``k`` most recent neighbours of each of ``R`` queries (padded; ``mask`` marks real ones).

    Attributes:
        nodes: (R, k) neighbour ids (0 where masked).
        events: (R, k) the event index of each neighbour's event (its edge features and time).
        mask: (R, k) bool, True for a real neighbour; each row's real ones come first, oldest first.
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

    def nbytes(self) -> int:
        """Bytes of the index's arrays."""
        return int(sum(a.nbytes for a in self.arrays().values()))

    def recent(self, nodes: np.ndarray, cut: np.ndarray, k: int) -> NeighborBlock:
        """The ``k`` most recent events of each ``nodes[q]`` among events ``0 .. cut[q] - 1``.

        ``cut[q]`` is the number of events strictly before the query time (``searchsorted(t, t_q,
        'left')`` over the stream's times).
        """
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
