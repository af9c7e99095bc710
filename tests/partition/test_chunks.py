"""Chunk generation (DGC §4.1) and assignment (§4.2, Alg. 1) on rank 0's side."""

from __future__ import annotations

import numpy as np

from hpcdgnn.partition.chunks import (
    assign_chunks,
    build_supergraph,
    chunk_stats,
    label_propagation,
    load_divergence,
)


def _two_communities(T: int = 4, k: int = 6, seed: int = 0):
    """Per snapshot: dense edges inside {0..k-1} and inside {k..2k-1}, one bridge; vertex 2k joins at t >= 2."""
    rng = np.random.default_rng(seed)
    snaps = []
    for t in range(T):
        a, b = rng.integers(0, k, 30), rng.integers(0, k, 30)
        s = np.concatenate([a, a + k, [0]] + ([[2 * k]] if t >= 2 else []))
        d = np.concatenate([b, b + k, [k]] + ([[1]] if t >= 2 else []))
        snaps.append((s, d))
    return snaps, 2 * k + 1


def test_supergraph_nodes_and_edges():
    snaps, N = _two_communities()
    g = build_supergraph(snaps, N, spatial_weight=2.0, temporal_weight=1.0)
    active = [np.unique(np.concatenate([s[s != d], d[s != d]])) for s, d in snaps]
    assert g.num_nodes == sum(a.shape[0] for a in active)
    # Eq. 1 order: snapshot by snapshot, vertices ascending
    assert np.array_equal(g.time, np.concatenate([np.full(a.shape[0], t) for t, a in enumerate(active)]))
    assert np.array_equal(g.vertex, np.concatenate(active))
    # one temporal edge per pair of consecutive appearances, joining the same vertex
    tm = ~g.spatial
    appearances = np.bincount(g.vertex, minlength=N)
    assert tm.sum() == int((appearances - 1).clip(min=0).sum())
    assert np.array_equal(g.vertex[g.src[tm]], g.vertex[g.dst[tm]])
    assert np.all(g.time[g.src[tm]] < g.time[g.dst[tm]])
    assert np.all(g.weight[tm] == 1.0) and np.all(g.weight[g.spatial] == 2.0)
    # spatial edges stay inside a snapshot, stored once
    assert np.all(g.time[g.src[g.spatial]] == g.time[g.dst[g.spatial]])


def test_label_propagation_finds_communities_and_respects_the_cap():
    snaps, N = _two_communities()
    g = build_supergraph(snaps, N, spatial_weight=2.0, temporal_weight=1.0)
    labels, iters = label_propagation(g, max_size=g.num_nodes)
    assert 1 <= iters <= 30
    assert np.array_equal(np.unique(labels), np.arange(labels.max() + 1))  # renumbered 0..C-1
    # per snapshot, the two communities end up in different chunks (spatial edges weigh more than
    # temporal ones here, so a chunk is a community within a snapshot)
    for t in range(4):
        left = labels[(g.time == t) & (g.vertex < 6)]
        right = labels[(g.time == t) & (g.vertex >= 6) & (g.vertex < 12)]
        assert np.bincount(left).argmax() != np.bincount(right).argmax()
    # with temporal edges weighing far more, chunks follow the sequences: a vertex's appearances stay together
    heavy = build_supergraph(snaps, N, spatial_weight=1.0, temporal_weight=50.0)
    hl, _ = label_propagation(heavy, max_size=heavy.num_nodes)
    together = [len(np.unique(hl[heavy.vertex == v])) == 1 for v in range(N)]
    assert sum(together) >= 0.8 * N  # label propagation may stop at a tie that cuts a sequence once
    assert chunk_stats(heavy, hl)["cut_weight"] < chunk_stats(heavy, labels)["cut_weight"]
    stats = chunk_stats(g, labels)
    assert stats["cut_weight"] < 0.2 * stats["total_weight"]
    capped, _ = label_propagation(g, max_size=5)
    assert np.bincount(capped).max() <= 5
    again, _ = label_propagation(g, max_size=5)
    assert np.array_equal(capped, again)  # deterministic


def test_assignment_balances_and_keeps_neighbours_together():
    work = np.array([5.0, 5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0])
    # chunks 0-4, 1-5, 2-6, 3-7 talk a lot; nothing else
    cut = (np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7]), np.array([10.0, 10.0, 10.0, 10.0]))
    owner = assign_chunks(work, cut, 4)
    assert sorted(np.bincount(owner, minlength=4).tolist()) == [2, 2, 2, 2]
    assert all(owner[i] == owner[i + 4] for i in range(4))
    assert load_divergence(owner, work, 4) == 1.0
    # no communication at all: least-loaded placement of decreasing workloads (LPT)
    owner = assign_chunks(np.array([7.0, 5.0, 4.0, 3.0, 1.0]), (np.zeros(0, int), np.zeros(0, int), np.zeros(0)), 2)
    assert load_divergence(owner, np.array([7.0, 5.0, 4.0, 3.0, 1.0]), 2) == 1.0
