"""The chunk plan (D1, DGC §4): chunks by label propagation, assigned to ranks by Alg. 1 / Eq. 3.

An inactive appearance (v, t) goes to v's RNN owner, which runs v's time encoder: the rank owning most of v's
appearances, within a balanced share of the time encoder's rows (:func:`~hpcdgnn.partition.chunks.assign_rnn_owners`).
"""

from __future__ import annotations

import numpy as np

from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.partition.appearances import chunk_map
from hpcdgnn.partition.chunks import (
    assign_chunks,
    assign_rnn_owners,
    build_supergraph,
    chunk_stats,
    default_chunk_size,
    label_propagation,
)
from hpcdgnn.partition.plan import ChunkAssignment, PartitionPlan
from hpcdgnn.partition.timeline import train_horizon

__all__ = ["plan_chunks"]


def plan_chunks(manifest: Manifest, num_ranks: int, job: JobConfig, root: str | None = None) -> PartitionPlan:
    """Chunks of the dataset under ``root`` (default ``data.path``), their ranks, the owner of every (t, v)."""
    from hpcdgnn.data.shard_reader import ShardReader
    from hpcdgnn.partition.workload import chunk_work

    T, N, P = manifest.num_snapshots, manifest.num_vertices, num_ranks
    with ShardReader(root or job.data.path, manifest) as reader:
        snaps = [reader.edges(t) for t in range(T)]
    L, H, F = job.model.layers, job.model.hidden, manifest.num_features
    g = build_supergraph(snaps, N, spatial_weight=L * max(F, H), temporal_weight=L * H)
    cap = job.strategy.chunk_size
    cap = default_chunk_size(g.num_nodes, P) if cap == "auto" else cap
    labels, iters = label_propagation(g, max_size=cap)
    stats = chunk_stats(g, labels)
    work = chunk_work(job, F, g, labels, stats)  # DGC §4.2: count, or the profiled MLPs
    chunk_owner = assign_chunks(work, stats["cut_pairs"], P) if stats["num_chunks"] else np.zeros(0, np.int64)
    # the time encoder's rows per vertex: all T steps, or (sequences: active) its active appearances
    rows = np.full(N, float(T)) if job.strategy.sequences == "all" else np.bincount(g.vertex, minlength=N) * 1.0
    rnn_owner = assign_rnn_owners(g.vertex, chunk_owner[labels], rows, P)
    # every rank holds the map: the active appearances' chunks, or the (T, N) table where most are active
    where = chunk_map(T, N, P, g.time.astype(np.int64) * N + g.vertex, labels, chunk_owner, rnn_owner,
                      job.strategy.lookup)
    load = np.bincount(chunk_owner, weights=work, minlength=P) if stats["num_chunks"] else np.zeros(P)
    appearances = where.counts()
    encoders = np.bincount(rnn_owner, minlength=P)
    ranks = [{"appearances": int(appearances[p]), "rnn_vertices": int(encoders[p]), "chunk_work": float(load[p])}
             for p in range(P)]
    chunks = ChunkAssignment(appearances=where, chunk_owner=chunk_owner,
                             num_chunks=int(stats["num_chunks"]), lp_iterations=int(iters),
                             cut_fraction=stats["cut_weight"] / max(stats["total_weight"], 1e-300), size_cap=int(cap))
    # no vertex ranges here (appearances are owned one by one); the task scores t on rank t mod P
    return PartitionPlan(kind="chunk", num_ranks=P, num_snapshots=T, num_vertices=N,
                         snapshot_owner=[t % P for t in range(T)], vertex_bounds=[0] * (P + 1),
                         ranks=ranks, train_horizon=train_horizon(manifest, job), chunks=chunks)
