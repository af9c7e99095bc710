"""H1's plan (DynaHB §4.1–4.2, Def. 2, Alg. 1): vertex loads, dealt round-robin in descending order.

A vertex's load estimates the aggregation work of its L-layer computational graph over all snapshots::

    W_0^t = 1,    W_l^t = A_t · W_{l-1}^t,    load(v) = Σ_t Σ_{l ≤ L} Σ_{l' ≤ l} W_{l'}^t(v)

(label propagation over the edges a vertex aggregates, its CSR row; Alg. 1 lines 3–10). W_l counts *walks* of
length l into v, where Def. 2 counts the *set* of l-hop vertices: on graphs with cycles Alg. 1's loads, used here,
exceed Def. 2's. Vertices sorted by descending load (ties by id) are dealt to ranks round-robin (Alg. 1 l. 11)
under ``partition: load_aware``, or split by :func:`~hpcdgnn.partition.vertex.vertex_partition`.

The sorted order cut into ``groups`` equal strata is what hybrid batches draw targets from (N_V / N_bg per
stratum, §4.2): it does not depend on P, so neither does a batch. A rank's g-th balanced group (Alg. 1 l. 12)
is its vertices in stratum g.
"""

from __future__ import annotations

import numpy as np

from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds
from hpcdgnn.partition.vertex import vertex_partition

__all__ = ["plan_hybrid", "vertex_loads"]


def vertex_loads(edges, num_vertices: int, layers: int) -> np.ndarray:
    """Alg. 1's load of every vertex, float64.

    Args:
        edges: per snapshot, ``(src, dst)`` int64 in CSR order (``src`` aggregates ``dst``).
        num_vertices: N.
        layers: L, the model's graph layers.

    Shapes:
        returns (N,).
    """
    N = num_vertices
    raw = np.zeros((layers + 1, N))
    for src, dst in edges:
        w = np.ones(N)
        raw[0] += w
        for layer in range(1, layers + 1):
            w = np.bincount(src, weights=w[dst], minlength=N)
            raw[layer] += w
    # Σ_{l ≤ L} Σ_{l' ≤ l} raw[l'] = Σ_{l'} (L + 1 − l') raw[l']
    return (np.arange(layers + 1, 0, -1, dtype=np.float64)[:, None] * raw).sum(0)


def plan_hybrid(manifest, num_ranks: int, job, root: str | None = None) -> PartitionPlan:
    """Loads, the P-invariant load order, and each rank's vertices (its groups contiguous, heaviest first).

    Reads every snapshot's edges on rank 0. ``ranks[p]``: ``vertices``, ``load`` and ``groups`` (the size of each
    of its balanced groups)."""
    from hpcdgnn.data.shard_reader import ShardReader

    T, N, P = manifest.num_snapshots, manifest.num_vertices, num_ranks
    o = job.strategy
    with ShardReader(root or job.data.path, manifest) as reader:
        edges = [reader.edges(t) for t in range(T)]
    load = vertex_loads(edges, N, job.model.layers)
    order = np.lexsort((np.arange(N), -load))  # descending load, ties by id
    if o.partition == "load_aware":
        part = np.empty(N, dtype=np.int64)
        part[order] = np.arange(N) % P
    else:
        part = vertex_partition(o.partition, N, P, (np.concatenate([e[0] for e in edges]),
                                                     np.concatenate([e[1] for e in edges])))
    stratum = np.empty(N, dtype=np.int64)
    bounds = balanced_bounds(N, o.groups)
    stratum[order] = np.repeat(np.arange(o.groups), np.diff(bounds))
    position = np.empty(N, dtype=np.int64)
    position[order] = np.arange(N)
    by_rank = np.lexsort((position, part))  # each rank's vertices in load order: its groups are contiguous
    counts = np.bincount(part, minlength=P)
    ranks = [{"vertices": int(counts[p]), "load": float(load[part == p].sum()),
              "groups": np.bincount(stratum[part == p], minlength=o.groups).tolist()} for p in range(P)]
    return PartitionPlan(kind="hybrid", num_ranks=P, num_snapshots=T, num_vertices=N, snapshot_owner=[0] * T,
                         vertex_bounds=[0, *np.cumsum(counts).tolist()], ranks=ranks,
                         vertex_order=by_rank.tolist(), load_order=order.tolist())
