"""A frozen copy of ``label_propagation``, ``assign_chunks`` (with ``_chunk_adjacency``) and ``assign_rnn_owners``
as hpcdgnn/partition/chunks.py had them at 45180fd, before their faster forms: what those are held to, label for
label and rank for rank (tests/partition/test_chunks.py). Do not edit: a plan is part of a checkpoint.
"""

from __future__ import annotations

import heapq

import numpy as np

from hpcdgnn.indices import unique_ints
from hpcdgnn.partition.chunks import SuperGraph, assign_chunks_reference


def label_propagation(g: SuperGraph, max_size: int, max_iters: int = 30, tol: float = 1e-3) -> tuple[np.ndarray, int]:
    """Chunk labels by Eq. 2 under a size cap, renumbered by first appearance; returns (labels, iterations).

    Stops below ``tol`` × nodes changes (without community structure a few labels flip forever).
    Integer edge weights required: ties are broken below their granularity.
    """
    n = g.num_nodes
    labels = np.arange(n, dtype=np.int64)
    if n == 0:
        return labels, 0
    # both directions: node `to` hears the label of node `fr`
    fr = np.concatenate([g.src, g.dst])
    to = np.concatenate([g.dst, g.src])
    w = np.concatenate([g.weight, g.weight])
    order = np.argsort(to, kind="stable")
    fr, to, w = fr[order], to[order], w[order]
    # ties are broken by adding less than one weight unit: current label first, then a jitter
    unit = float(np.gcd.reduce(unique_ints(np.rint(w).astype(np.int64)))) if w.shape[0] else 1.0
    ids = np.arange(n, dtype=np.int64)
    it = 0
    for it in range(1, max_iters + 1):
        changed = 0
        # halves drawn afresh each iteration: neighbours updating together rarely do next time, so swaps cannot cycle
        parity = ((ids * 2654435761 + it * 40503) >> 11) & 1
        heard = parity[to] == 0
        for half in (0, 1):
            sel = heard if half == 0 else ~heard
            key = to[sel] * n + labels[fr[sel]]
            if key.shape[0] == 0:
                continue
            # key is already ordered by `to` (edges sorted so above), only the few labels a node hears are not:
            # a stable sort (timsort) finds those runs, where a quicksort starts over
            o = np.argsort(key, kind="stable")
            ks, ws = key[o], w[sel][o]
            starts = np.flatnonzero(np.concatenate([[True], ks[1:] != ks[:-1]]))
            tot = np.add.reduceat(ws, starts)  # Eq. 2's weight(c) per (node, label)
            uk = ks[starts]
            node = uk // n
            lab = uk - node * n
            jitter = ((lab * 2654435761 + it * 40503) % 1000003) / 1000003.0
            score = tot + unit * (2.0 * (lab == labels[node]) + jitter) / 4.0
            nstarts = np.flatnonzero(np.concatenate([[True], node[1:] != node[:-1]]))
            best = np.maximum.reduceat(score, nstarts)
            seg = np.repeat(np.arange(nstarts.shape[0]), np.diff(np.concatenate([nstarts, [node.shape[0]]])))
            win = np.flatnonzero(score == best[seg])
            win = win[np.concatenate([[True], node[win][1:] != node[win][:-1]])]  # one per node
            cand_node, cand_lab = node[win], lab[win]
            move = cand_lab != labels[cand_node]
            cand_node, cand_lab = cand_node[move], cand_lab[move]
            if cand_node.shape[0] == 0:
                continue
            # the size cap: a label takes new nodes only while it stays within max_size
            size = np.bincount(labels, minlength=n)
            joins = np.bincount(cand_lab, minlength=n)
            ok = size[cand_lab] + joins[cand_lab] <= max_size
            labels[cand_node[ok]] = cand_lab[ok]
            changed += int(ok.sum())
        if changed <= tol * n:
            break
    # labels are node ids: renumber them by the node where each first occurs, by a scan (no sort of n labels)
    first = np.full(n, n, dtype=np.int64)
    np.minimum.at(first, labels, ids)
    starts = np.zeros(n, dtype=bool)
    starts[first[first < n]] = True
    number = np.cumsum(starts) - 1  # a label's number: how many labels first occur before it
    return number[first[labels]], it


def _chunk_adjacency(C: int, cut_pairs: tuple[np.ndarray, np.ndarray, np.ndarray], both: bool = True):
    """The chunks' cut pairs as CSR (ptr, other chunk, h(a, a')), each pair under both its chunks (``both``) or
    under its first only, in the order given within a chunk."""
    a, b, h = cut_pairs
    ends, other, hw = (np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([h, h])) if both else (a, b, h)
    o = np.argsort(ends, kind="stable")
    ends, other, hw = ends[o], other[o], hw[o]
    return np.searchsorted(ends, np.arange(C + 1)), other, hw


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
    # a pair counts toward the chunk placed later, the other being placed by then: keep those entries of the CSR
    a, b, h = cut_pairs
    ends, other, hw = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([h, h])
    placed = np.empty(C, dtype=np.int64)
    placed[order] = np.arange(C)
    keep = placed[other] < placed[ends]
    ptr, other, hw = _chunk_adjacency(C, (ends[keep], other[keep], hw[keep]), both=False)
    owner = [-1] * C
    load = [0.0] * P
    mean = float(work.sum()) / P
    heap = [(0.0, r) for r in range(P)]  # (load, rank); an entry is current while load[rank] equals it
    for lo in range(0, C, block):
        cs = order[lo : lo + block]
        begin, size = ptr[cs], ptr[cs + 1] - ptr[cs]
        at = np.arange(int(size.sum())) + np.repeat(begin - (np.cumsum(size) - size), size)
        nbs, wgts, pos = other[at].tolist(), hw[at].tolist(), 0
        for c, k, wc in zip(cs.tolist(), size.tolist(), work[cs].tolist(), strict=True):
            affinity: dict[int, float] = {}  # Σ h(a, a') per rank holding a neighbour, summed in CSR order
            for j in range(pos, pos + k):
                r = owner[nbs[j]]
                affinity[r] = affinity.get(r, 0.0) + wgts[j]
            pos += k
            best, top = None, -np.inf  # (load, rank) of the best rank so far, its score
            for r, aff in affinity.items():
                s = (mean - load[r]) * aff
                if s > top or (s == top and (load[r], r) < best):
                    best, top = (load[r], r), s
            if top <= 0 and len(affinity) < P:
                # a rank holding no neighbour scores 0: the least-loaded such rank, from the heap's current entries
                held = []
                while True:
                    entry = heap[0]
                    if entry[0] != load[entry[1]]:
                        heapq.heappop(heap)
                    elif entry[1] in affinity:
                        held.append(heapq.heappop(heap))
                    else:
                        break
                for kept in held:
                    heapq.heappush(heap, kept)
                if top < 0 or entry < best:
                    best = entry
            m = best[1]
            owner[c] = m
            if wc:
                load[m] += wc
                heapq.heappush(heap, (load[m], m))
                if len(heap) > 4 * P + 64:  # drop the stale entries now and then
                    heap = [(x, r) for r, x in enumerate(load)]
                    heapq.heapify(heap)
    return np.asarray(owner, dtype=np.int64)


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
    pairs, count = np.unique(np.asarray(vertex, np.int64) * P + np.asarray(rank, np.int64), return_counts=True)
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
