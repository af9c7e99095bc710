"""Vertex partitions (S6, IBM §4.1): which rank owns each vertex for the whole timeline.

``strategy.partition``: contiguous ranges, a multiplicative hash, or METIS (optional
``pymetis``) on the union of all snapshots' edges; ``vertex_order`` renumbers vertices
in rank order. Snapshots are scored cyclically (t on rank t mod P).
"""

from __future__ import annotations

import numpy as np

from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.errors import ConfigError
from hpcdgnn.indices import unique_ints
from hpcdgnn.partition.plan import PartitionPlan, balanced_bounds
from hpcdgnn.partition.timeline import train_horizon

__all__ = ["plan_vertices", "vertex_partition"]

_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads consecutive ids over all ranks


def vertex_partition(method: str, num_vertices: int, num_ranks: int, edges=None) -> np.ndarray:
    """Rank of each vertex: ``range``, ``hash`` or ``metis`` (``edges``: (src, dst); ConfigError without pymetis)."""
    N, P = num_vertices, num_ranks
    if method == "range" or P == 1:
        vb = balanced_bounds(N, P)
        return np.repeat(np.arange(P), np.diff(vb))
    if method == "hash":
        with np.errstate(over="ignore"):
            h = np.arange(N, dtype=np.uint64) * _HASH
        return ((h >> np.uint64(32)) % np.uint64(P)).astype(np.int64)
    try:
        import pymetis
    except ImportError:
        raise ConfigError(
            "strategy.partition: metis needs the optional package pymetis (pip install pymetis); "
            "or use range or hash"
        ) from None
    src, dst = edges
    keep = src != dst
    a = np.concatenate([src[keep], dst[keep]])
    b = np.concatenate([dst[keep], src[keep]])
    keys = unique_ints(a.astype(np.int64) * N + b)
    a, b = keys // N, keys % N
    xadj = np.zeros(N + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=N), out=xadj[1:])
    csr = getattr(pymetis, "CSRAdjacency", None)  # pymetis 2025+: xadj/adjncy keywords are deprecated
    _, parts = (pymetis.part_graph(P, csr(xadj, b)) if csr is not None else pymetis.part_graph(P, xadj=xadj, adjncy=b))
    return np.asarray(parts, dtype=np.int64)


def plan_vertices(manifest: Manifest, num_ranks: int, job: JobConfig, root: str | None = None) -> PartitionPlan:
    """Vertex sets by ``strategy.partition`` (METIS reads every snapshot on rank 0); snapshots scored cyclically."""
    from hpcdgnn.data.shard_reader import ShardReader

    T, N, P = manifest.num_snapshots, manifest.num_vertices, num_ranks
    method = job.strategy.partition
    edges = None
    if method == "metis" and P > 1:
        with ShardReader(root or job.data.path, manifest) as reader:
            src, dst = zip(*(reader.edges(t) for t in range(T)), strict=True)
        edges = (np.concatenate(src), np.concatenate(dst))
    part = vertex_partition(method, N, P, edges)
    order = np.argsort(part, kind="stable")
    counts = np.bincount(part, minlength=P)
    vb = [0, *np.cumsum(counts).tolist()]
    owner = [t % P for t in range(T)]
    nnz = np.asarray(manifest.snapshot_nnz, dtype=np.int64)
    ranks = [
        {"snapshots": sum(1 for o in owner if o == p), "vertices": int(counts[p]),
         "nnz_scored": int(nnz[[t for t in range(T) if owner[t] == p]].sum())}
        for p in range(P)
    ]
    return PartitionPlan(kind="vertex", num_ranks=P, num_snapshots=T, num_vertices=N, snapshot_owner=owner,
                         vertex_bounds=vb, ranks=ranks, vertex_order=order.tolist(),
                         train_horizon=train_horizon(manifest, job))
