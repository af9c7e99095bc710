"""Partitioning by graph chunks, rank 0's part: chunk generation (DGC §4.1) and assignment (§4.2, Alg. 1).

Super-graph nodes are vertex appearances ``(v, t)`` in Eq. 1 order; spatial edges weigh
GCN layers × feature width, virtual temporal edges (consecutive appearances of v) RNN
layers × hidden width. :func:`assign_chunks` breaks Eq. 3's ties (all scores are 0 at the
start) toward the least-loaded rank, not the first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SuperGraph", "build_supergraph", "label_propagation", "chunk_stats", "assign_chunks", "load_divergence"]


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
        active = np.unique(np.concatenate([s, d]))
        local = np.full(N, -1, dtype=np.int64)
        local[active] = offset + np.arange(active.shape[0])  # Eq. 1: earlier snapshots' sizes + rank in V_t
        a, b = np.minimum(local[s], local[d]), np.maximum(local[s], local[d])
        pairs = np.unique(a * (offset + active.shape[0]) + b)  # undirected, once
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
    unit = float(np.gcd.reduce(np.unique(np.rint(w).astype(np.int64)))) if w.shape[0] else 1.0
    ids = np.arange(n, dtype=np.int64)
    it = 0
    for it in range(1, max_iters + 1):
        changed = 0
        # halves drawn afresh each iteration: neighbours updating together rarely do next time, so swaps cannot cycle
        parity = ((ids * 2654435761 + it * 40503) >> 11) & 1
        for half in (0, 1):
            sel = parity[to] == half
            key = to[sel] * n + labels[fr[sel]]
            if key.shape[0] == 0:
                continue
            o = np.argsort(key)
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
    _, first_idx, inv = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first_idx.shape[0], dtype=np.int64)
    rank[np.argsort(first_idx, kind="stable")] = np.arange(first_idx.shape[0])
    return rank[inv], it


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


def assign_chunks(work: np.ndarray, cut_pairs: tuple[np.ndarray, np.ndarray, np.ndarray], num_ranks: int) -> np.ndarray:
    """DGC Alg. 1 / Eq. 3 with least-loaded tie-breaking; returns the rank of each chunk."""
    C, P = work.shape[0], num_ranks
    a, b, h = cut_pairs
    # adjacency of chunks as CSR for the Σ h(a, a') of Eq. 3
    ends = np.concatenate([a, b])
    other = np.concatenate([b, a])
    hw = np.concatenate([h, h])
    o = np.argsort(ends, kind="stable")
    ends, other, hw = ends[o], other[o], hw[o]
    ptr = np.searchsorted(ends, np.arange(C + 1))
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


def load_divergence(owner: np.ndarray, work: np.ndarray, num_ranks: int) -> float:
    """λ = T_max / T_min of the ranks' summed workloads (inf when a rank gets nothing)."""
    load = np.bincount(owner, weights=work, minlength=num_ranks)
    return float(load.max() / load.min()) if load.min() > 0 else float("inf")
