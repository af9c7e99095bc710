"""Who holds each vertex appearance (v, t) under a chunk or grid plan (DGC §4, IBM §6.5), without a (T, N) table.

An appearance is named by its key ``k = t·N + v``. Each rank numbers its appearances in ascending key order
(time-major, then vertex): its row of key k is the number of its keys below k. Every rank must answer
:meth:`~AppearanceMap.owner_of` and :meth:`~AppearanceMap.local_of` for any key (the halo reads any row, the
in-place link task any pair), so the map is replicated; what it costs per rank is what this module keeps small:

- :class:`SparseChunks` (a chunk plan with A ≪ T·N active appearances): the sorted active keys, their chunks,
  owners and rows, two sorted copies grouped by owner and by RNN owner, and a bitmap over T·N with a rank index:
  ~34 bytes per active appearance and 0.19 per appearance.
- :class:`DenseChunks` (a chunk plan with most appearances active): the (T, N) chunk table as the plan carries
  it, with an owner table in the narrowest integer type P fits and an int32 row table, built a snapshot at a
  time: ~10 bytes per appearance (a (T, N) int64 owner table and its argsort cost ~30).
- :class:`GridCells` (the grid plan): arithmetic on the snapshot groups and vertex ranges, O(T + N).

:func:`chunk_map` picks the chunk form (``strategy.lookup``). Maps pickle their defining arrays only (the plan's
broadcast); each rank derives its lookup tables on first use.
"""

from __future__ import annotations

import numpy as np

from hpcdgnn.indices import index_dtype

__all__ = ["TABLE_BYTES", "AppearanceMap", "DenseChunks", "GridCells", "SparseChunks", "active_is_smaller",
           "chunk_map", "map_bytes_at_least"]

#: bytes per active appearance and per appearance (sparse), and per appearance (dense), held on every rank
_SPARSE_ACTIVE, _SPARSE_ALL, _DENSE_ALL = 34, 0.19, 10
#: ``lookup: auto`` keeps the (T, N) tables up to this many bytes a rank
TABLE_BYTES = 64 * 2**20


def _rank_dtype(num_ranks: int) -> np.dtype:
    """The narrowest signed integer holding 0..P-1."""
    for d in (np.int8, np.int16, np.int32):
        if num_ranks - 1 <= np.iinfo(d).max:
            return np.dtype(d)
    return np.dtype(np.int64)


class AppearanceMap:
    """Owner rank and row on the owner of every appearance key ``t·N + v`` (vectorised over keys).

    Subclasses define :meth:`owner_of`, :meth:`local_of`, :meth:`keys_of`, :meth:`counts`, :meth:`label_of`
    and :meth:`active_rnn`; :meth:`dense_owner` materialises the (T, N) table for tests.
    """

    num_snapshots: int
    num_vertices: int
    num_ranks: int
    rnn_owner: np.ndarray
    """(N,) the RNN owner of each vertex (runs its time encoder)."""

    def __getstate__(self) -> dict:
        # the plan's broadcast carries the defining arrays; lookup tables are rebuilt where used
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_c_")}

    def owner_of(self, keys: np.ndarray) -> np.ndarray:
        """(k,) int64 rank holding each key."""
        raise NotImplementedError

    def local_of(self, keys: np.ndarray) -> np.ndarray:
        """(k,) int64 row of each key on its owner (keys must be valid: 0 ≤ k < T·N)."""
        raise NotImplementedError

    def keys_of(self, rank: int) -> np.ndarray:
        """(n,) int64 keys of ``rank``'s appearances, ascending (its rows in order)."""
        raise NotImplementedError

    def counts(self) -> np.ndarray:
        """(P,) int64 appearances per rank."""
        raise NotImplementedError

    def label_of(self, keys: np.ndarray) -> np.ndarray:
        """(k,) int64 chunk of each key, -1 where the appearance is inactive."""
        raise NotImplementedError

    def active_rnn(self, rank: int) -> np.ndarray:
        """(T, R) bool: whether each of ``rank``'s RNN vertices (ascending) is active at each step."""
        raise NotImplementedError

    def dense_owner(self) -> np.ndarray:
        """(T, N) int64 owner table: O(T·N), for tests only (the planner looks up a snapshot at a time)."""
        T, N = self.num_snapshots, self.num_vertices
        out = np.empty((T, N), dtype=np.int64)
        every = np.arange(N, dtype=np.int64)
        for t in range(T):  # a snapshot at a time: a lookup's temporaries are ~9 int64 per key, O(N) here
            out[t] = self.owner_of(t * N + every)
        return out

    def nbytes(self) -> int:
        """Bytes every rank holds for the map, its lookup tables built (a run's ``host_payload_bytes``)."""
        self._tables()

        def size(x) -> int:
            if isinstance(x, np.ndarray):
                return x.nbytes
            if isinstance(x, dict | tuple | list):
                return sum(size(v) for v in (x.values() if isinstance(x, dict) else x))
            return 0

        return size(self.__dict__)

    def _tables(self):
        """Build (once) and return the lookup tables; none by default."""
        return None

    def _split(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = np.asarray(keys, dtype=np.int64).reshape(-1)
        return k, *np.divmod(k, self.num_vertices)  # one pass for both


def _popcount(words: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 word (numpy < 2 has no ``bitwise_count``: by a byte table)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(words).astype(np.int64)
    table = np.array([bin(b).count("1") for b in range(256)], dtype=np.int64)
    return table[words.reshape(-1, 1).view(np.uint8)].sum(axis=1)


class SparseChunks(AppearanceMap):
    """A chunk plan held as its A active appearances (DGC §4): inactive (v, t) belong to v's RNN owner.

    Whether key k is active, and its index among the active keys, is a rank query on a bitmap over T·N with a
    prefix count per 64-bit word (0.19 bytes per appearance, O(1) a key). An active key's row on its owner is
    stored; an inactive one's (owner p = v's RNN owner) is counted: p's active keys below k, plus ``t·R_p`` plus
    p's RNN vertices below v, minus p's RNN vertices' active keys below k — two binary searches, with the keys
    sorted first so that they run in one sweep.

    Args:
        num_snapshots, num_vertices, num_ranks: T, N, P.
        key: active appearances' keys, ascending; label: their chunks; chunk_owner: each chunk's rank;
            rnn_owner: each vertex's RNN owner.

    Shapes:
        key, label: (A,); chunk_owner: (C,); rnn_owner: (N,).
    """

    def __init__(self, num_snapshots: int, num_vertices: int, num_ranks: int, key: np.ndarray, label: np.ndarray,
                 chunk_owner: np.ndarray, rnn_owner: np.ndarray) -> None:
        self.num_snapshots, self.num_vertices, self.num_ranks = num_snapshots, num_vertices, num_ranks
        self.key = np.asarray(key, dtype=np.int64)
        self.label = np.asarray(label, dtype=index_dtype(int(label.max(initial=0))))
        self.chunk_owner, self.rnn_owner = np.asarray(chunk_owner, np.int64), np.asarray(rnn_owner, np.int64)

    def _tables(self) -> dict:
        if "_c_tables" not in self.__dict__:
            T, N, P = self.num_snapshots, self.num_vertices, self.num_ranks
            TN, grid, key = T * N, np.arange(P + 1, dtype=np.int64), self.key
            words = np.zeros((TN + 63) // 64, dtype=np.uint64)
            if key.shape[0]:
                w = key >> 6
                start = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
                words[w[start]] = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), (key & 63).astype(np.uint64)),
                                                         start)
            ones = _popcount(words)
            prefix = np.cumsum(ones) - ones  # active keys before each word
            owner = (self.chunk_owner[self.label] if key.shape[0] else np.zeros(0, np.int64)).astype(_rank_dtype(P))
            by_owner = owner.astype(np.int64) * TN + key
            order = np.argsort(by_owner, kind="stable")
            by_owner = by_owner[order]
            a_start = np.searchsorted(by_owner, grid * TN)
            by_rnn = np.sort(self.rnn_owner[key % N] * TN + key)
            ar_start = np.searchsorted(by_rnn, grid * TN)
            rnn_sorted = np.sort(self.rnn_owner * N + np.arange(N, dtype=np.int64))
            r_start = np.searchsorted(rnn_sorted, grid * N)
            R = np.diff(r_start)  # RNN vertices per rank
            # an active key's row: its place among its owner's active keys plus its owner's inactive keys below it
            p, t, v = owner.astype(np.int64), key // N, key % N
            place = np.empty(key.shape[0], dtype=np.int64)
            place[order] = np.arange(key.shape[0]) - a_start[p[order]]
            idle = (t * R[p] + np.searchsorted(rnn_sorted, p * N + v) - r_start[p]
                    - (np.searchsorted(by_rnn, p * TN + key) - ar_start[p]))
            local = place + idle
            rpos = np.empty(N, dtype=np.int64)  # each vertex's place among its RNN owner's
            rpos[rnn_sorted % N] = np.arange(N) - r_start[rnn_sorted // N]
            self._c_tables = {"words": words, "prefix": prefix.astype(index_dtype(key.shape[0])), "owner": owner,
                              "local": local.astype(index_dtype(int(local.max(initial=0)))), "by_owner": by_owner,
                              "a_start": a_start, "by_rnn": by_rnn, "ar_start": ar_start, "rnn_sorted": rnn_sorted,
                              "r_start": r_start, "R": R, "rpos": rpos}
        return self._c_tables

    def _find(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index among the active keys of each key (of the next one where inactive), and whether it is active."""
        c = self._tables()
        w, bit = k >> 6, np.left_shift(np.uint64(1), (k & 63).view(np.uint64))
        word = c["words"][w]
        return c["prefix"][w].astype(np.int64) + _popcount(word & (bit - np.uint64(1))), (word & bit) != 0

    def owner_of(self, keys: np.ndarray) -> np.ndarray:
        """Rank holding each key."""
        k = np.asarray(keys, dtype=np.int64).reshape(-1)
        i, hit = self._find(k)
        out = self.rnn_owner[k % self.num_vertices]
        out[hit] = self._tables()["owner"][i[hit]]
        return out

    def local_of(self, keys: np.ndarray) -> np.ndarray:
        """Row of each key on its owner."""
        k = np.asarray(keys, dtype=np.int64).reshape(-1)
        c = self._tables()
        i, hit = self._find(k)
        out = np.empty(k.shape[0], dtype=np.int64)
        out[hit] = c["local"][i[hit]]
        idle = ~hit
        k, t, v = self._split(k[idle])
        p = self.rnn_owner[v]
        TN = self.num_snapshots * self.num_vertices
        needle = p * TN + k
        # sorted needles: each search starts where the last ended. A merge sort: the keys asked come in ascending
        # runs (a step's pairs, np.unique's output, a rank's own keys), which it takes in ~one pass
        order = np.argsort(needle, kind="stable")
        found = np.empty((2, k.shape[0]), dtype=np.int64)
        found[0, order] = np.searchsorted(c["by_owner"], needle[order])
        found[1, order] = np.searchsorted(c["by_rnn"], needle[order])
        out[idle] = (found[0] - c["a_start"][p]) + t * c["R"][p] + c["rpos"][v] - (found[1] - c["ar_start"][p])
        return out

    def _rnn_block(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """``rank``'s RNN vertices, and the active keys among their appearances (both ascending)."""
        c, TN, N = self._tables(), self.num_snapshots * self.num_vertices, self.num_vertices
        return (c["rnn_sorted"][c["r_start"][rank] : c["r_start"][rank + 1]] - rank * N,
                c["by_rnn"][c["ar_start"][rank] : c["ar_start"][rank + 1]] - rank * TN)

    def keys_of(self, rank: int) -> np.ndarray:
        """``rank``'s keys, ascending."""
        c, TN, N = self._tables(), self.num_snapshots * self.num_vertices, self.num_vertices
        active = c["by_owner"][c["a_start"][rank] : c["a_start"][rank + 1]] - rank * TN
        mine, busy = self._rnn_block(rank)
        every = (np.arange(self.num_snapshots, dtype=np.int64)[:, None] * N + mine[None, :]).reshape(-1)
        keep = np.ones(every.shape[0], dtype=bool)
        keep[np.searchsorted(every, busy)] = False  # both ascending, busy within every: no sort of every
        # two ascending runs: the stable sort merges them
        return np.sort(np.concatenate([active, every[keep]]), kind="stable")

    def counts(self) -> np.ndarray:
        """Appearances per rank."""
        c = self._tables()
        return np.diff(c["a_start"]) + self.num_snapshots * c["R"] - np.diff(c["ar_start"])

    def label_of(self, keys: np.ndarray) -> np.ndarray:
        """Chunk of each key, -1 where inactive."""
        k = np.asarray(keys, dtype=np.int64).reshape(-1)
        i, hit = self._find(k)
        out = np.full(k.shape[0], -1, dtype=np.int64)
        out[hit] = self.label[i[hit]]
        return out

    def active_rnn(self, rank: int) -> np.ndarray:
        """``rank``'s RNN vertices' active steps."""
        N = self.num_vertices
        mine, busy = self._rnn_block(rank)
        mask = np.zeros((self.num_snapshots, mine.shape[0]), dtype=bool)
        mask[busy // N, np.searchsorted(mine, busy % N)] = True
        return mask


class DenseChunks(AppearanceMap):
    """A chunk plan held as its (T, N) chunk table (-1 where inactive), when most appearances are active.

    Owner and row tables are built one snapshot at a time (a row's rank among the owner's keys is its count of
    the owner's earlier snapshots plus its place within the snapshot), so no (T·N) int64 array is ever made.

    Args:
        num_ranks: P.
        chunk: each appearance's chunk, -1 where inactive.
        chunk_owner: each chunk's rank (DGC Alg. 1).
        rnn_owner: each vertex's RNN owner (it holds the vertex's inactive appearances).

    Shapes:
        chunk: (T, N); chunk_owner: (C,); rnn_owner: (N,).
    """

    def __init__(self, num_ranks: int, chunk: np.ndarray, chunk_owner: np.ndarray, rnn_owner: np.ndarray) -> None:
        self.num_snapshots, self.num_vertices = chunk.shape
        self.num_ranks, self.chunk = num_ranks, chunk
        self.chunk_owner, self.rnn_owner = np.asarray(chunk_owner, np.int64), np.asarray(rnn_owner, np.int64)

    def _tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if "_c_tables" not in self.__dict__:
            T, N, P = self.num_snapshots, self.num_vertices, self.num_ranks
            d = _rank_dtype(P)
            chunk_owner, rnn_owner = self.chunk_owner.astype(d), self.rnn_owner.astype(d)
            owner = np.empty((T, N), dtype=d)
            counts = np.zeros((T, P), dtype=np.int64)
            for t in range(T):
                row = self.chunk[t]
                o = owner[t]
                np.copyto(o, chunk_owner[np.maximum(row, 0)] if chunk_owner.shape[0] else 0)
                np.copyto(o, rnn_owner, where=row < 0)
                counts[t] = np.bincount(o, minlength=P)
            # rows are numbered per owner: int32 while every rank's fit, whatever T·N
            base = np.cumsum(counts, axis=0) - counts  # each owner's rows before snapshot t
            total = counts.sum(axis=0)
            local = np.empty((T, N), dtype=index_dtype(int(total.max(initial=1)) - 1))
            for t in range(T):
                o = owner[t]
                order = np.argsort(o, kind="stable")
                first = base[t] - np.concatenate([[0], np.cumsum(counts[t])[:-1]])  # owner's first key's row, minus
                local[t, order] = np.arange(N) + first[o[order]]
            self._c_tables = (owner, local, total)
        return self._c_tables

    def owner_of(self, keys: np.ndarray) -> np.ndarray:
        """Rank holding each key."""
        return self._tables()[0].reshape(-1)[np.asarray(keys, np.int64)].astype(np.int64)

    def local_of(self, keys: np.ndarray) -> np.ndarray:
        """Row of each key on its owner."""
        return self._tables()[1].reshape(-1)[np.asarray(keys, np.int64)].astype(np.int64)

    def keys_of(self, rank: int) -> np.ndarray:
        """``rank``'s keys, ascending."""
        return np.flatnonzero(self._tables()[0].reshape(-1) == rank)

    def counts(self) -> np.ndarray:
        """Appearances per rank."""
        return self._tables()[2].copy()

    def label_of(self, keys: np.ndarray) -> np.ndarray:
        """Chunk of each key, -1 where inactive."""
        return self.chunk.reshape(-1)[np.asarray(keys, np.int64)].astype(np.int64)

    def active_rnn(self, rank: int) -> np.ndarray:
        """``rank``'s RNN vertices' active steps."""
        return self.chunk[:, self.rnn_owner == rank] >= 0

    def dense_owner(self) -> np.ndarray:
        """The (T, N) owner table."""
        return self._tables()[0].astype(np.int64)


def active_is_smaller(num_snapshots: int, num_vertices: int, active: int) -> bool:
    """Whether the map from ``active`` active appearances holds fewer bytes a rank than the (T, N) tables."""
    T, N = num_snapshots, num_vertices
    return _SPARSE_ACTIVE * active + _SPARSE_ALL * T * N < _DENSE_ALL * T * N


def map_bytes_at_least(num_snapshots: int, num_vertices: int, num_ranks: int, active: int, lookup: str) -> tuple:
    """(form, bytes): the form :func:`chunk_map` takes for ``lookup`` and a lower bound of the bytes it holds on
    every rank, counted before any plan exists (the footprint check): its arrays whose sizes T, N, P and the A
    active appearances fix — ``table``: the chunk, owner and row tables, ≥ 4 + w + 4 bytes an
    appearance (w: the narrowest integer holding P − 1); ``active``: each active key, label, owner, row and its
    two sorted copies (≥ 32 + w bytes), and the bitmap with its prefix counts (0.19 bytes an appearance); and
    24 or 8 bytes a vertex.

    Args:
        num_snapshots: T.
        num_vertices: N.
        num_ranks: P.
        active: A, the manifest's active appearances.
        lookup: ``strategy.lookup``.
    """
    T, N, P, A = num_snapshots, num_vertices, num_ranks, active
    rank, row = _rank_dtype(P).itemsize, index_dtype(-(-T * N // P) - 1).itemsize  # the most loaded rank's rows
    sparse = lookup == "active" or (lookup == "auto" and _DENSE_ALL * T * N > TABLE_BYTES
                                    and active_is_smaller(T, N, A))
    # and each vertex's RNN owner (int64), as tables; from the active appearances also its place among its owner's
    if sparse:
        return "active", int((8 + 4 + rank + 4 + 8 + 8) * A + T * N / 8 + 4 * (T * N // 64) + 3 * 8 * N)
    return "table", int((4 + rank + row) * T * N + 8 * N)


def chunk_map(num_snapshots: int, num_vertices: int, num_ranks: int, key: np.ndarray, label: np.ndarray,
              chunk_owner: np.ndarray, rnn_owner: np.ndarray, lookup: str = "auto") -> AppearanceMap:
    """The chunk plan's map: ``table`` (:class:`DenseChunks`), ``active`` (:class:`SparseChunks`), or ``auto``:
    the table while it holds at most :data:`TABLE_BYTES` a rank (its lookups are an index each, ~10× faster),
    beyond it the form holding fewer bytes (sparse while A < 0.29 T·N).

    Args:
        num_snapshots: T.
        num_vertices: N.
        num_ranks: P.
        key: active appearances' keys ``t·N + v`` (any order).
        label: their chunks.
        chunk_owner: each chunk's rank.
        rnn_owner: each vertex's RNN owner.
        lookup: ``strategy.lookup``.

    Shapes:
        key, label: (A,); chunk_owner: (C,); rnn_owner: (N,).
    """
    T, N = num_snapshots, num_vertices
    key = np.asarray(key, dtype=np.int64)
    order = np.argsort(key, kind="stable")
    key, label = key[order], np.asarray(label)[order]
    if lookup == "active" or (lookup == "auto" and _DENSE_ALL * T * N > TABLE_BYTES
                              and active_is_smaller(T, N, key.shape[0])):
        return SparseChunks(T, N, num_ranks, key, label, chunk_owner, rnn_owner)
    chunk = np.full((T, N), -1, dtype=index_dtype(int(label.max(initial=0))))
    chunk.reshape(-1)[key] = label
    return DenseChunks(num_ranks, chunk, chunk_owner, rnn_owner)


class GridCells(AppearanceMap):
    """The grid plan (IBM §6.5): appearance (v, t) on rank ``group[t] · Pv + j`` for v in vertex range j.

    Rank (g, j)'s rows are its snapshots' (in order) vertex ranges: row = (place of t among group g's snapshots)
    · |V_j| + (v − start of V_j). Every appearance is its cell's, a chunk per rank.

    Args:
        num_ranks: P = Ps · Pv.
        group: each snapshot's group g (cyclic or in runs).
        vertex_bounds: the Pv vertex ranges' bounds.
        rnn_owner: each vertex's RNN owner (a rank of its column).

    Shapes:
        group: (T,) snapshot group of each t; vertex_bounds: (Pv + 1,); rnn_owner: (N,).
    """

    def __init__(self, num_ranks: int, group: np.ndarray, vertex_bounds: np.ndarray, rnn_owner: np.ndarray) -> None:
        self.num_ranks = num_ranks
        self.group = np.asarray(group, np.int64)
        self.vertex_bounds = np.asarray(vertex_bounds, np.int64)
        self.rnn_owner = np.asarray(rnn_owner, np.int64)
        self.num_snapshots, self.num_vertices = self.group.shape[0], int(self.vertex_bounds[-1])
        self.columns = self.vertex_bounds.shape[0] - 1
        place = np.zeros(self.num_snapshots, dtype=np.int64)
        seen: dict[int, int] = {}
        for t, g in enumerate(self.group.tolist()):
            place[t] = seen.get(g, 0)
            seen[g] = place[t] + 1
        #: each snapshot's place among its group's
        self.place = place

    def _cell(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        k, t, v = self._split(keys)
        j = np.searchsorted(self.vertex_bounds, v, side="right") - 1
        return t, v, j, self.group[t] * self.columns + j

    def owner_of(self, keys: np.ndarray) -> np.ndarray:
        """Rank holding each key."""
        return self._cell(keys)[3]

    def local_of(self, keys: np.ndarray) -> np.ndarray:
        """Row of each key on its owner."""
        t, v, j, _ = self._cell(keys)
        vb = self.vertex_bounds
        return self.place[t] * (vb[j + 1] - vb[j]) + v - vb[j]

    def keys_of(self, rank: int) -> np.ndarray:
        """``rank``'s keys, ascending."""
        g, j = divmod(rank, self.columns)
        ts = np.flatnonzero(self.group == g)
        vs = np.arange(self.vertex_bounds[j], self.vertex_bounds[j + 1], dtype=np.int64)
        return (ts[:, None] * self.num_vertices + vs[None, :]).reshape(-1)

    def counts(self) -> np.ndarray:
        """Appearances per rank."""
        snaps = np.bincount(self.group, minlength=self.num_ranks // self.columns)
        return (snaps[:, None] * np.diff(self.vertex_bounds)[None, :]).reshape(-1)

    def label_of(self, keys: np.ndarray) -> np.ndarray:
        """Chunk of each key, -1 where inactive."""
        return self.owner_of(keys)

    def active_rnn(self, rank: int) -> np.ndarray:
        """``rank``'s RNN vertices' active steps."""
        return np.ones((self.num_snapshots, int((self.rnn_owner == rank).sum())), dtype=bool)
