"""Where DGC §6's profiling samples come from: a graph, and random chunks of it of every shape and size.

A predictor is only as good as the chunks it has seen, so samples span the shapes the chunk
plan makes (DGC §4.1's chunks cross snapshot and vertex boundaries) up to ``strategy.chunk_size``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hpcdgnn.indices import unique_ints
from hpcdgnn.partition.chunks import SuperGraph, build_supergraph

__all__ = ["Topology", "profile_graph", "random_chunks"]


@dataclass
class Topology:
    """Spatial adjacency of a super-graph in CSR (both directions) and each appearance's spatial degree."""

    ptr: np.ndarray
    nbr: np.ndarray
    deg: np.ndarray

    @classmethod
    def of(cls, g: SuperGraph) -> Topology:
        """The spatial edges of ``g``, both directions, grouped by source appearance."""
        s, d = g.src[g.spatial], g.dst[g.spatial]
        fr, to = np.concatenate([s, d]), np.concatenate([d, s])
        o = np.argsort(fr, kind="stable")
        deg = np.bincount(fr, minlength=g.num_nodes)
        ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
        return cls(ptr, to[o].astype(np.int64), deg.astype(np.int64))

    def rows(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``nodes``, neighbour) of every spatial edge leaving ``nodes``, vectorised CSR gather."""
        start, cnt = self.ptr[nodes], self.deg[nodes]
        total = int(cnt.sum())
        pos = np.repeat(np.arange(nodes.shape[0]), cnt)
        first = np.repeat(start - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
        return pos, self.nbr[first + np.arange(total)]


def profile_graph(data: str | None, vertices: int, snapshots: int, density: float, seed: int,
                  spatial_weight: float = 1.0, temporal_weight: float = 1.0) -> tuple[SuperGraph, str]:
    """A dataset's super-graph, or DGC §7.3.1's non-uniform generated one (δ = τ = 0.5: chunks of every shape exist)."""
    if data:
        from hpcdgnn.data.manifest import load_manifest
        from hpcdgnn.data.shard_reader import ShardReader

        m = load_manifest(data)
        with ShardReader(data, m) as r:
            snaps = [r.edges(t) for t in range(m.num_snapshots)]
        return build_supergraph(snaps, m.num_vertices, spatial_weight, temporal_weight), str(data)
    from hpcdgnn.data.generate import random_snapshots

    snaps = [(s.src, s.dst) for s in random_snapshots(vertices, snapshots, density, seed, 0.5, 0.5)]
    name = f"generated N={vertices} T={snapshots} f={density} δ=τ=0.5"
    return build_supergraph(snaps, vertices, spatial_weight, temporal_weight), name


def random_chunks(g: SuperGraph, count: int, max_size: int, rng: np.random.Generator,
                  topo: Topology | None = None) -> list[np.ndarray]:
    """``count`` random chunks (sorted appearance ids) of 1..``max_size`` appearances (log-uniform sizes).

    Half are connected *balls* (BFS over spatial and temporal edges in a random window, nodes
    kept at random), like label-propagation chunks; half are vertices × window *blocks*.
    Windows are log-uniform in 1..T.
    """
    if g.num_nodes == 0:
        raise ValueError("random_chunks: the super-graph has no appearances")
    topo = topo or Topology.of(g)
    n = g.num_nodes
    T = int(g.time.max()) + 1
    # temporal adjacency too, for the balls (consecutive appearances of a vertex)
    tm_s, tm_d = g.src[~g.spatial], g.dst[~g.spatial]
    tprev = np.full(n, -1, np.int64)
    tnext = np.full(n, -1, np.int64)
    tprev[tm_d], tnext[tm_s] = tm_s, tm_d
    out: list[np.ndarray] = []
    while len(out) < count:
        size = int(round(math.exp(rng.uniform(0.0, math.log(max_size)))))
        k = int(round(math.exp(rng.uniform(0.0, math.log(T)))))
        t0 = int(rng.integers(0, T - k + 1))
        lo, hi = np.searchsorted(g.time, [t0, t0 + k])  # Eq. 1 order: the window is a node range
        if hi <= lo:  # an empty window (snapshots without edges): draw again
            continue
        if rng.random() < 0.5:
            keep_p = rng.uniform(0.3, 1.0)
            seen = np.zeros(n, bool)
            front = np.array([int(rng.integers(lo, hi))])
            seen[front] = True
            members = [front]
            total = 1
            while total < size and front.shape[0]:
                _, nb = topo.rows(front)
                nb = np.concatenate([nb, tprev[front], tnext[front]])
                nb = unique_ints(nb[(nb >= lo) & (nb < hi)])
                nb = nb[~seen[nb]]
                nb = nb[rng.random(nb.shape[0]) < keep_p]
                seen[nb] = True
                front = rng.permutation(nb)[: size - total]
                members.append(front)
                total += front.shape[0]
            chunk = np.sort(np.concatenate(members))
        else:
            window = np.arange(lo, hi)
            verts = unique_ints(g.vertex[window])
            order = rng.permutation(verts)
            per = np.bincount(g.vertex[window], minlength=int(g.vertex.max()) + 1)[order]
            m = int(np.searchsorted(np.cumsum(per), size)) + 1
            chosen = np.zeros(int(g.vertex.max()) + 1, bool)
            chosen[order[:m]] = True
            chunk = window[chosen[g.vertex[window]]][:size]
        out.append(chunk.astype(np.int64))
    return out

