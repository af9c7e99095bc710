"""Partitioning by graph chunks, rank 0's part: chunk generation (DGC §4.1) and assignment (§4.2, Alg. 1).

Super-graph nodes are vertex appearances ``(v, t)`` in Eq. 1 order; spatial edges weigh
GCN layers × feature width, virtual temporal edges (consecutive appearances of v) RNN
layers × hidden width. :func:`assign_chunks` breaks Eq. 3's ties (all scores are 0 at the
start) toward the least-loaded rank, not the first. :func:`default_chunk_size` and :func:`assign_rnn_owners`
are ours (DGC fixes neither the cap nor where an inactive appearance's time encoder runs).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from hpcdgnn.indices import DENSE, index_dtype, unique_ints

__all__ = ["SuperGraph", "build_supergraph", "label_propagation", "chunk_stats", "assign_chunks",
           "assign_chunks_reference", "assign_rnn_owners", "default_chunk_size", "load_divergence"]

#: ``strategy.chunk_size: auto``'s largest cap, in appearances
MAX_AUTO_CHUNK = 4096
#: ``auto`` keeps chunks at most 1/PIECES of a rank's share of the appearances
PIECES = 4


@dataclass
class SuperGraph:
    """Nodes are appearances ``(vertex[i], time[i])`` in Eq. 1 order; edges are undirected, stored once."""

    vertex: np.ndarray
    time: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    spatial: np.ndarray  # bool per edge: spatial (True) or temporal (False)

    @property
    def num_nodes(self) -> int:
        """Number of appearances."""
        return int(self.vertex.shape[0])


def build_supergraph(snapshots, num_vertices: int, spatial_weight: float, temporal_weight: float) -> SuperGraph:
    """The super-graph of ``snapshots``, ``(src, dst)`` arrays in time order (active: an endpoint of an edge)."""
    N = int(num_vertices)
    verts, times, srcs, dsts = [], [], [], []
    offset = 0
    last_seen = np.full(N, -1, dtype=np.int64)  # node id of v's previous appearance
    t_src, t_dst = [], []
    for t, (s, d) in enumerate(snapshots):
        s, d = np.asarray(s, dtype=np.int64), np.asarray(d, dtype=np.int64)
        keep = s != d
        s, d = s[keep], d[keep]
        active = unique_ints(np.concatenate([s, d]))
        local = np.full(N, -1, dtype=np.int64)
        local[active] = offset + np.arange(active.shape[0])  # Eq. 1: earlier snapshots' sizes + rank in V_t
        a, b = np.minimum(local[s], local[d]), np.maximum(local[s], local[d])
        pairs = unique_ints(a * (offset + active.shape[0]) + b)  # undirected, once
        srcs.append(pairs // (offset + active.shape[0]))
        dsts.append(pairs % (offset + active.shape[0]))
        prev = last_seen[active]
        had = prev >= 0
        t_src.append(prev[had])
        t_dst.append(local[active[had]])
        last_seen[active] = local[active]
        verts.append(active)
        times.append(np.full(active.shape[0], t, dtype=np.int64))
        offset += active.shape[0]
    empty = np.zeros(0, dtype=np.int64)
    s_sp = np.concatenate(srcs) if srcs else empty
    s_tm = np.concatenate(t_src) if t_src else empty
    return SuperGraph(
        vertex=np.concatenate(verts) if verts else empty,
        time=np.concatenate(times) if times else empty,
        src=np.concatenate([s_sp, s_tm]),
        dst=np.concatenate([np.concatenate(dsts) if dsts else empty, np.concatenate(t_dst) if t_dst else empty]),
        weight=np.concatenate([np.full(s_sp.shape[0], float(spatial_weight)),
                               np.full(s_tm.shape[0], float(temporal_weight))]),
        spatial=np.concatenate([np.ones(s_sp.shape[0], bool), np.zeros(s_tm.shape[0], bool)]),
    )


def _segments(ptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions ptr[r] .. ptr[r + 1] - 1 of every row r of ``rows`` (CSR offsets), in order, and the row of
    each."""
    begin = ptr[rows]
    cnt = ptr[rows + 1] - begin
    at = np.arange(int(cnt.sum()), dtype=np.int64) + np.repeat(begin - (np.cumsum(cnt) - cnt), cnt)
    return at, np.repeat(rows, cnt)


def _blocks(ptr: np.ndarray, rows: np.ndarray, edges: int):
    """``rows`` in consecutive slices of about ``edges`` CSR entries each (a row is never split)."""
    total = np.cumsum(ptr[rows + 1] - ptr[rows])
    cuts = np.searchsorted(total, np.arange(edges, int(total[-1]) if total.shape[0] else 0, edges), side="right")
    bounds = [0, *np.unique(cuts).tolist(), rows.shape[0]]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        if hi > lo:
            yield rows[lo:hi]


def _starts(x: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a non-empty ``x`` begins."""
    new = np.empty(x.shape[0], dtype=bool)
    new[0] = True
    np.not_equal(x[1:], x[:-1], out=new[1:])
    return np.flatnonzero(new)


#: label propagation scores the nodes of a half-iteration in slices of about this many heard labels (their
#: temporaries stay in the CPU's caches)
LP_BLOCK = 1 << 16
#: keys (node, label, weight's index) are packed into int64 below this
KEY_LIMIT = 2**63


def label_propagation(g: SuperGraph, max_size: int, max_iters: int = 30, tol: float = 1e-3) -> tuple[np.ndarray, int]:
    """Chunk labels by Eq. 2 under a size cap, renumbered by first appearance; returns (labels, iterations).

    Stops below ``tol`` × nodes changes (without community structure a few labels flip forever).
    Integer edge weights required: ties are broken below their granularity.

    Each half-iteration, a node takes the label of most weight among those it hears (Eq. 2), its own on a tie,
    else the one of largest jitter. With whole weights every sum is exact and the tie-breaks add less than one
    weight unit, so a node whose own label weighs at least as much as any other keeps it at every iteration's
    jitter until its own or a neighbour's label changes: only the others are scored again, and a sort of keys
    that carry each edge's weight groups the labels (no argsort). The labels are those of scoring every node
    every time, as with weights that are not whole (then done so).

    Args:
        g: the super-graph (integer weights; the scores use their greatest common divisor as the unit).
        max_size: the cap: a label takes no more nodes once it has this many.
        max_iters: iterations at most.
        tol: stop once an iteration changes at most ``tol`` · nodes labels.

    Shapes:
        returns (num_nodes,) int64 labels 0 .. C - 1, numbered by first appearance.
    """
    n = g.num_nodes
    if n == 0:
        return np.arange(0, dtype=np.int64), 0
    idx = index_dtype(n)  # node ids; keys (node, label) are int64
    labels = np.arange(n, dtype=idx)
    # both directions: node `to` hears the label of node `fr`; grouped by `to` (CSR rows), in edge order within
    order = np.argsort(np.concatenate([g.dst, g.src], dtype=idx), kind="stable")
    fr = np.concatenate([g.src, g.dst], dtype=idx)[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(g.src, minlength=n) + np.bincount(g.dst, minlength=n), out=ptr[1:])
    # ties are broken by adding less than one weight unit: current label first, then a jitter
    whole = np.rint(g.weight).astype(np.int64)
    value = unique_ints(whole)
    unit = float(np.gcd.reduce(value)) if whole.shape[0] else 1.0
    # every score a sum of whole units, exact in any order, far above the tie-breaks' rounding
    exact = unit > 0 and bool((whole == g.weight).all()) and 2.0 * float(np.abs(whole).sum()) < 2.0**40
    bits = (value.shape[0] - 1).bit_length()  # an edge's weight as its index in `value`, the key's low bits
    packed = exact and (n * n) << bits < KEY_LIMIT
    if packed:
        cls = np.searchsorted(value, np.concatenate([whole, whole])[order]) if bits else None
        value = value.astype(np.float64)
    else:
        w = np.concatenate([g.weight, g.weight])[order]
    del order
    dirty = np.ones(n, dtype=bool)  # may choose another label than its own
    size = np.ones(n, dtype=np.int64)  # nodes per label
    joins = np.zeros(n, dtype=np.int64)
    ids = np.arange(n, dtype=np.int64)
    it = 0
    for it in range(1, max_iters + 1):
        changed = 0
        # halves drawn afresh each iteration: neighbours updating together rarely do next time, so swaps cannot cycle
        odd = (((ids * 2654435761 + it * 40503) >> 11) & 1).astype(bool)
        for half in (0, 1):
            rows = np.flatnonzero(dirty & (odd if half else ~odd))
            if exact:  # those keeping their label are clean until they hear another
                dirty[rows] = False
            found = []
            for part in _blocks(ptr, rows, LP_BLOCK):
                e, node_e = _segments(ptr, part)
                if e.shape[0] == 0:
                    continue
                key = node_e * n
                key += labels[fr[e]]
                # key is already ordered by `to`, only the few labels a node hears are not: a stable sort
                # (timsort) finds those runs, where a quicksort starts over
                if packed:  # the weights sum exactly in any order: the keys alone
                    if bits:
                        key <<= bits
                        key |= cls[e]
                    key.sort(kind="stable")
                    ks = key >> bits if bits else key
                    starts = _starts(ks)
                    if bits:
                        tot = np.add.reduceat(value[key & ((1 << bits) - 1)], starts)
                    else:
                        tot = np.diff(np.append(starts, ks.shape[0])) * value[0]
                else:
                    o = np.argsort(key, kind="stable")
                    ks = key[o]
                    starts = _starts(ks)
                    tot = np.add.reduceat(w[e[o]], starts)  # Eq. 2's weight(c) per (node, label)
                node = node_e[starts]  # node_e is sorted: the sort moved keys within a node only
                nstarts = _starts(node)
                lab = ks[starts] - node * n
                jitter = ((lab * 2654435761 + it * 40503) % 1000003) / 1000003.0
                score = tot + unit * (2.0 * (lab == labels[node]) + jitter) / 4.0
                best = np.maximum.reduceat(score, nstarts)
                win = np.flatnonzero(score == np.repeat(best, np.diff(np.append(nstarts, node.shape[0]))))
                win = win[_starts(node[win])]  # one per node
                move = win[lab[win] != labels[node[win]]]
                found.append((node[move], lab[move]))
            if not found:
                continue
            cand_node = np.concatenate([f[0] for f in found])
            cand_lab = np.concatenate([f[1] for f in found])
            if exact:
                dirty[cand_node] = True
            if cand_node.shape[0] == 0:
                continue
            # the size cap: a label takes new nodes only while it stays within max_size
            np.add.at(joins, cand_lab, 1)
            ok = np.flatnonzero(size[cand_lab] + joins[cand_lab] <= max_size)
            joins[cand_lab] = 0
            moved, dest = cand_node[ok], cand_lab[ok]
            np.subtract.at(size, labels[moved], 1)
            np.add.at(size, dest, 1)
            labels[moved] = dest
            changed += int(moved.shape[0])
            if exact:  # their neighbours hear another label now
                for part in _blocks(ptr, moved, LP_BLOCK):
                    dirty[fr[_segments(ptr, part)[0]]] = True
        if changed <= tol * n:
            break
    # labels are node ids: renumber them by the node where each first occurs, by a scan (no sort of n labels)
    first = np.full(n, n, dtype=np.int64)
    np.minimum.at(first, labels, ids)
    starts = np.zeros(n, dtype=bool)
    starts[first[first < n]] = True
    number = np.cumsum(starts) - 1  # a label's number: how many labels first occur before it
    return number[first[labels]], it


def chunk_stats(g: SuperGraph, labels: np.ndarray) -> dict:
    """Per chunk: nodes and spatial edges inside; between chunks: the weight h(a, a') (a sparse dict)."""
    C = int(labels.max()) + 1 if labels.shape[0] else 0
    la, lb = labels[g.src], labels[g.dst]
    inside = la == lb
    nodes = np.bincount(labels, minlength=C)
    edges = np.bincount(la[inside & g.spatial], minlength=C)
    a, b = np.minimum(la[~inside], lb[~inside]), np.maximum(la[~inside], lb[~inside])
    key = a * max(C, 1) + b
    uk, inv = np.unique(key, return_inverse=True)
    h = np.bincount(inv, weights=g.weight[~inside])
    return {
        "num_chunks": C,
        "nodes": nodes,
        "spatial_edges": edges,
        "cut_pairs": (uk // max(C, 1), uk % max(C, 1), h),
        "cut_weight": float(h.sum()),
        "total_weight": float(g.weight.sum()),
    }


def _chunk_adjacency(C: int, cut_pairs: tuple[np.ndarray, np.ndarray, np.ndarray], both: bool = True):
    """The chunks' cut pairs as CSR (ptr, other chunk, h(a, a')), each pair under both its chunks (``both``) or
    under its first only, in the order given within a chunk."""
    a, b, h = cut_pairs
    ends, other, hw = (np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([h, h])) if both else (a, b, h)
    o = np.argsort(ends, kind="stable")
    ends, other, hw = ends[o], other[o], hw[o]
    return np.searchsorted(ends, np.arange(C + 1)), other, hw


def _stable_order(key: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` of non-negative integer keys below ``bound``: one plain sort of
    key · len + position where that fits int64 (numpy's stable argsort is a merge sort, slower than its plain
    sort on keys in no order), else that argsort."""
    m = key.shape[0]
    if m and bound * m < 2**62:
        packed = key.astype(np.int64) * m + np.arange(m, dtype=np.int64)
        packed.sort()
        return packed % m
    return np.argsort(key, kind="stable")


def assign_chunks(work: np.ndarray, cut_pairs: tuple[np.ndarray, np.ndarray, np.ndarray], num_ranks: int,
                  block: int = 1 << 16) -> np.ndarray:
    """DGC Alg. 1 / Eq. 3 with least-loaded tie-breaking; returns the rank of each chunk.

    Chunks are placed heaviest first on the rank m maximising (W̄ − W_m) · Σ_{a' on m} h(a, a') (Eq. 3; W_m the
    load placed on m, W̄ the mean of the total); ties go to the least-loaded rank, then the lowest. The same
    placement as :func:`assign_chunks_reference`, chunk by chunk, in O(degree + log P) a chunk rather than O(P)
    numpy calls: only the ranks holding a neighbour score other than 0, and the best rank scoring 0 is the
    least-loaded one holding none (a heap of the loads, which only grow).

    Args:
        work: g_a, each chunk's workload (non-negative; otherwise the reference runs).
        cut_pairs: (a, b, h(a, b)) of :func:`chunk_stats`.
        num_ranks: P.
        block: chunks whose neighbours are gathered into Python lists at a time.

    Shapes:
        work: (C,); a, b, h: (K,); returns (C,) int64 ranks.
    """
    work = np.asarray(work)
    C, P = work.shape[0], int(num_ranks)
    if C == 0 or not (work >= 0).all():
        return assign_chunks_reference(work, cut_pairs, P)
    order = np.argsort(-work, kind="stable")
    placed = np.empty(C, dtype=np.int64)  # each chunk's turn
    placed[order] = np.arange(C)
    # a pair counts toward the chunk placed later, the other being placed by then; by turn (CSR), each turn's
    # pairs in the order of the reference's adjacency: those where the chunk is a first, then b, each in pair order
    a, b, h = (np.asarray(x) for x in cut_pairs)
    ta, tb = placed[a], placed[b]
    two = ta != tb  # a chunk paired with itself counts toward neither
    if not two.all():
        ta, tb, h = ta[two], tb[two], h[two]
    second = tb > ta
    turn = np.where(second, tb, ta)
    o = _stable_order(2 * turn + second, 2 * C)
    other, h = np.where(second, ta, tb)[o], h[o]  # the turn of the chunk placed earlier
    ptr = np.zeros(C + 1, dtype=np.int64)
    np.cumsum(np.bincount(turn, minlength=C), out=ptr[1:])
    owner = [-1] * C  # by turn
    load = [0.0] * P
    mean = float(work.sum()) / P
    heap = [(0.0, r) for r in range(P)]  # (load, rank); an entry is current while load[rank] equals it
    push, pop = heapq.heappush, heapq.heappop
    # few ranks: the heap built afresh where it is asked (a chunk no rank wants), not kept at every placement
    few = P <= 16
    c = 0
    for lo in range(0, C, block):
        hi = min(lo + block, C)
        nbs, wgts = other[ptr[lo] : ptr[hi]].tolist(), h[ptr[lo] : ptr[hi]].tolist()
        pos = 0
        for end, wc in zip((ptr[lo + 1 : hi + 1] - ptr[lo]).tolist(), work[order[lo:hi]].tolist(), strict=True):
            affinity: dict[int, float] = {}  # Σ h(a, a') per rank holding a neighbour, summed in CSR order
            while pos < end:
                r = owner[nbs[pos]]
                affinity[r] = affinity.get(r, 0.0) + wgts[pos]
                pos += 1
            best, top = None, -np.inf  # (load, rank) of the best rank so far, its score
            for r, aff in affinity.items():
                s = (mean - load[r]) * aff
                if s > top or (s == top and (load[r], r) < best):
                    best, top = (load[r], r), s
            if top <= 0 and len(affinity) < P:
                # a rank holding no neighbour scores 0: the least-loaded such rank, from the heap's current entries
                if few:
                    heap = [(x, r) for r, x in enumerate(load)]
                    heapq.heapify(heap)
                held = []
                while True:
                    entry = heap[0]
                    if entry[0] != load[entry[1]]:
                        pop(heap)
                    elif entry[1] in affinity:
                        held.append(pop(heap))
                    else:
                        break
                for kept in held:
                    push(heap, kept)
                if top < 0 or entry < best:
                    best = entry
            m = best[1]
            owner[c] = m
            c += 1
            if wc:
                load[m] += wc
                if not few:
                    push(heap, (load[m], m))
                    if len(heap) > 4 * P + 64:  # drop the stale entries now and then
                        heap = [(x, r) for r, x in enumerate(load)]
                        heapq.heapify(heap)
    out = np.empty(C, dtype=np.int64)
    out[order] = owner
    return out


def assign_chunks_reference(work: np.ndarray, cut_pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
                            num_ranks: int) -> np.ndarray:
    """:func:`assign_chunks` with every rank's score in numpy, chunk by chunk (the reference it is tested on)."""
    C, P = work.shape[0], num_ranks
    ptr, other, hw = _chunk_adjacency(C, cut_pairs)
    owner = np.full(C, -1, dtype=np.int64)
    load = np.zeros(P)
    mean = float(work.sum()) / P
    for c in np.argsort(-work, kind="stable"):
        nb, wgt = other[ptr[c] : ptr[c + 1]], hw[ptr[c] : ptr[c + 1]]
        placed = owner[nb] >= 0
        affinity = np.bincount(owner[nb[placed]], weights=wgt[placed], minlength=P)
        score = (mean - load) * affinity
        best = np.flatnonzero(score == score.max())
        m = best[np.argmin(load[best])]
        owner[c] = m
        load[m] += work[c]
    return owner


def default_chunk_size(appearances: int, num_ranks: int) -> int:
    """``strategy.chunk_size: auto``: min(4096, ⌈A / (4P)⌉) for A active appearances over P ranks.

    Alg. 1 places chunks largest first, so (like any longest-first greedy) its slowest rank carries at most the
    mean load plus one chunk: chunks of at most a quarter of a rank's share keep it within about 25 % of the
    mean, where a fixed cap lets a few chunks larger than a rank's share decide λ as P grows.
    """
    return int(max(1, min(MAX_AUTO_CHUNK, -(-int(appearances) // (PIECES * max(int(num_ranks), 1))))))


def assign_rnn_owners(vertex: np.ndarray, rank: np.ndarray, weight: np.ndarray, num_ranks: int) -> np.ndarray:
    """Each vertex's RNN owner: the rank holding most of its active appearances, within a balanced load.

    The time encoder runs after the GCN and an all-to-all, so its load is balanced on its own: rank p's load
    Σ_{owner(v)=p} weight[v] stays within the mean plus the heaviest vertex. Vertices propose to the ranks holding
    their appearances, most appearances first and the strongest claims first; a rank accepts while its load fits,
    the rest propose to their next such rank. Vertices left over (no active appearance, or every such rank full)
    fill the room below the mean in vertex order; those without rows to encode are dealt round-robin.

    Args:
        vertex: the vertex of every active appearance.
        rank: the rank holding that appearance (its chunk's rank).
        weight: the time encoder's rows of each vertex (T, or its active appearances under ``sequences:
            active``).
        num_ranks: P.

    Shapes:
        vertex, rank: (A,) integer; weight: (N,); returns (N,) int64 ranks.
    """
    N, P = weight.shape[0], int(num_ranks)
    weight = np.asarray(weight, dtype=np.float64)
    owner = np.full(N, -1, dtype=np.int64)
    if N == 0:
        return owner
    cap = weight.sum() / P + weight.max()
    load = np.zeros(P)
    # (vertex, rank, appearances there), each vertex's ranks most appearances first
    key = np.asarray(vertex, np.int64) * P + np.asarray(rank, np.int64)
    if N * P <= DENSE * key.shape[0]:  # a count per (vertex, rank), no sort
        count = np.bincount(key, minlength=N * P)
        pairs = np.flatnonzero(count)
        count = count[pairs]
    else:
        pairs, count = np.unique(key, return_counts=True)
    pv, pr = pairs // P, pairs % P
    o = np.lexsort((pr, -count, pv))
    pv, pr, count = pv[o], pr[o], count[o]
    first = np.searchsorted(pv, np.arange(N + 1))
    degree = np.diff(first)
    for k in range(int(degree.max()) if pv.shape[0] else 0):
        free = np.flatnonzero((owner < 0) & (degree > k))
        if free.shape[0] == 0:
            break
        at = first[free] + k
        q, c = pr[at], count[at]
        # per rank, its proposals strongest first; it accepts the prefix whose weights fit under the cap
        o = np.lexsort((free, -c, q))
        fo, qo = free[o], q[o]
        starts = np.flatnonzero(np.concatenate([[True], qo[1:] != qo[:-1]]))
        csum = np.cumsum(weight[fo])
        before = np.repeat(csum[starts] - weight[fo][starts], np.diff(np.concatenate([starts, [fo.shape[0]]])))
        ok = load[qo] + (csum - before) <= cap
        owner[fo[ok]] = qo[ok]
        load += np.bincount(qo[ok], weights=weight[fo[ok]], minlength=P)
    rest = np.flatnonzero(owner < 0)
    light, heavy = rest[weight[rest] == 0], rest[weight[rest] > 0]
    owner[light] = np.arange(light.shape[0]) % P  # no rows for the time encoder (sequences: active): dealt
    if heavy.shape[0]:
        # the room below the mean (it holds their weight), filled in vertex order: each goes where its share ends
        room = np.cumsum(np.maximum(weight.sum() / P - load, 0.0))
        ends = np.cumsum(weight[heavy]) * (room[-1] / weight[heavy].sum())
        owner[heavy] = np.searchsorted(room, np.minimum(ends, room[-1]))  # the last end may round past room
    return owner


def load_divergence(owner: np.ndarray, work: np.ndarray, num_ranks: int) -> float:
    """λ = T_max / T_min of the ranks' summed workloads (inf when a rank gets nothing)."""
    load = np.bincount(owner, weights=work, minlength=num_ranks)
    return float(load.max() / load.min()) if load.min() > 0 else float("inf")
