"""Chunk generation (DGC §4.1) and assignment (§4.2, Alg. 1) on rank 0's side."""

from __future__ import annotations

import numpy as np

from hpcdgnn.data.generate import random_snapshots
from hpcdgnn.partition.chunks import (
    SuperGraph,
    assign_chunks,
    assign_chunks_reference,
    assign_rnn_owners,
    build_supergraph,
    chunk_stats,
    default_chunk_size,
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


def test_assignment_places_every_chunk_as_the_reference_does():
    """The heap-and-dict placement equals the numpy one chunk for chunk: ties, zero and equal workloads, P above
    the chunk count, any block size; negative workloads (outside the loads-only-grow premise) take the reference."""
    rng = np.random.default_rng(3)
    for trial in range(10):
        N, T = int(rng.integers(5, 300)), int(rng.integers(1, 6))
        snaps = [(s.src, s.dst) for s in random_snapshots(N, T, float(rng.uniform(0.5, 4.0)), trial)]
        g = build_supergraph(snaps, N, spatial_weight=32, temporal_weight=16)
        labels, _ = label_propagation(g, max_size=int(rng.integers(1, 60)))
        stats = chunk_stats(g, labels)
        counts = (stats["nodes"] + stats["spatial_edges"]).astype(float)
        zeros = np.where(rng.random(counts.shape[0]) < 0.3, 0.0, counts)
        for work in (counts, zeros, np.ones_like(counts), counts - 3.0):
            for P in (1, 2, 3, 7, 64):
                want = assign_chunks_reference(work, stats["cut_pairs"], P)
                got = assign_chunks(work, stats["cut_pairs"], P, block=int(rng.integers(1, 40)))
                assert np.array_equal(got, want), (trial, P)


def test_label_propagation_numbers_chunks_by_first_appearance():
    snaps, N = _two_communities(T=5, k=9, seed=4)
    labels, _ = label_propagation(build_supergraph(snaps, N, 2.0, 1.0), max_size=7)
    first = [int(np.flatnonzero(labels == c)[0]) for c in range(int(labels.max()) + 1)]
    assert first == sorted(first) and labels[0] == 0


def test_auto_chunk_size_keeps_chunks_below_a_quarter_of_a_ranks_share():
    assert default_chunk_size(20_000, 8) == 625  # ⌈20000 / 32⌉
    assert default_chunk_size(20_001, 8) == 626
    assert default_chunk_size(10**9, 2) == 4096  # the old fixed cap bounds it on large graphs
    assert default_chunk_size(3, 8) == 1 and default_chunk_size(0, 1) == 1


def _appearances(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(vertex, rank) of every active appearance, from a (N, P) count table."""
    v, p = np.nonzero(counts)
    reps = counts[v, p]
    return np.repeat(v, reps), np.repeat(p, reps)


def test_rnn_owner_is_the_majority_rank_while_that_stays_balanced():
    # vertex v has 3 appearances on rank v mod 3 and 1 on the next: majorities are balanced
    N, P = 9, 3
    counts = np.zeros((N, P), dtype=np.int64)
    counts[np.arange(N), np.arange(N) % P] = 3
    counts[np.arange(N), (np.arange(N) + 1) % P] = 1
    owner = assign_rnn_owners(*_appearances(counts), np.full(N, 5.0), P)
    assert owner.tolist() == (np.arange(N) % P).tolist()


def test_rnn_owners_spread_when_every_vertex_lives_on_one_rank():
    # every vertex's appearances on rank 0 (one giant chunk): the old majority rule gave rank 0 every time
    # encoder; balanced, each rank runs ⌈N/P⌉ or ⌊N/P⌋ vertices and rank 0 keeps the ones with most there
    N, P, T = 11, 3, 6
    counts = np.zeros((N, P), dtype=np.int64)
    counts[:, 0] = np.arange(N) % 5 + 1
    counts[:, 1] = (np.arange(N) % 5 + 1) // 2  # each vertex's second choice: rank 1
    owner = assign_rnn_owners(*_appearances(counts), np.full(N, float(T)), P)
    per_rank = np.bincount(owner, minlength=P)
    assert per_rank.max() - per_rank.min() <= 1 and per_rank.sum() == N
    assert counts[owner == 0, 0].min() >= counts[owner != 0, 0].max()  # strongest claims win rank 0
    kept = (owner == 0) | (counts[np.arange(N), owner] > 0)
    assert kept.sum() > per_rank[0]  # a vertex rank 0 refuses goes to its next rank, not anywhere


def test_rnn_owners_of_vertices_without_appearances_fill_the_rest():
    N, P = 10, 4
    counts = np.zeros((N, P), dtype=np.int64)
    counts[0, 2] = 4
    owner = assign_rnn_owners(*_appearances(counts), np.full(N, 8.0), P)
    assert owner[0] == 2
    assert np.bincount(owner, minlength=P).max() - np.bincount(owner, minlength=P).min() <= 1
    # weightless vertices (sequences: active, nothing active) are dealt round-robin; nothing is lost
    owner = assign_rnn_owners(*_appearances(counts), np.where(np.arange(N) == 0, 4.0, 0.0), P)
    assert owner[0] == 2 and np.bincount(owner[1:], minlength=P).max() <= 3
    assert assign_rnn_owners(np.zeros(0, int), np.zeros(0, int), np.zeros(0), 3).shape == (0,)


def test_rnn_owner_loads_stay_within_the_mean_plus_the_heaviest_vertex():
    """The bound of :func:`assign_rnn_owners` on adversarial inputs: skewed, zero and heavy-tailed weights, every
    appearance on one rank; and the case where the last leftover's end rounded past the room (it went to a full
    rank)."""
    owner = assign_rnn_owners(np.array([2, 0, 2]), np.array([2, 2, 0]), np.array([0.3, 0.3, 0.1]), 3)
    load = np.bincount(owner, weights=[0.3, 0.3, 0.1], minlength=3)
    assert load.max() <= 0.7 / 3 + 0.3 + 1e-12
    rng = np.random.default_rng(0)
    for case in range(300):
        N, P = int(rng.integers(1, 60)), int(rng.integers(1, 9))
        A = int(rng.integers(0, 4 * N))
        v = rng.integers(0, N, A)
        r = np.zeros(A, np.int64) if case % 3 == 0 else rng.integers(0, P, A)
        w = [rng.pareto(1.5, N), np.zeros(N), rng.integers(0, 3, N).astype(float)][case % 3] + (case % 2) * 0.5
        owner = assign_rnn_owners(v, r, w, P)
        assert owner.shape == (N,) and owner.min() >= 0 and owner.max() < P
        load = np.bincount(owner, weights=w, minlength=P)
        assert load.max() <= w.sum() / P + w.max() + 1e-9 * max(w.sum(), 1.0), case


def test_chunk_plan_of_a_skewed_graph_balances_chunks_and_time_encoders(tmp_path):
    """DGC §7.3.1's skewed generator graph at P = 8: a fixed 4096 cap left chunks larger than a rank's share
    and one rank running most time encoders (λ ≈ 42 predicted); with the auto cap and balanced RNN owners every
    chunk is at most a quarter of a rank's share and every rank runs N/P time encoders."""
    from hpcdgnn.config.schema import DataConfig, JobConfig
    from hpcdgnn.data.generate import generate_dataset
    from hpcdgnn.partition.chunk_plan import plan_chunks
    from hpcdgnn.regimes import options_class

    m = generate_dataset(tmp_path / "skewed", 1024, 8, 4.0, seed=1, spatial_spread=0.8, temporal_spread=0.5)
    P = 8
    job = JobConfig(data=DataConfig(path=str(tmp_path / "skewed")),
                    strategy=options_class("strategy", "chunk")(name="chunk"))
    plan = plan_chunks(m, P, job)
    c = plan.chunks
    label = c.appearances.label_of(np.arange(plan.num_snapshots * plan.num_vertices))
    active = int((label >= 0).sum())
    assert np.bincount(label[label >= 0]).max() <= default_chunk_size(active, P)
    R = np.bincount(c.rnn_owner, minlength=P)
    assert R.max() <= 1024 / P + 1 and R.sum() == 1024
    work = [r["chunk_work"] for r in plan.ranks]  # Alg. 1's loads (count: appearances + spatial edges)
    assert max(work) / min(work) < 1.6  # 2146 with the fixed cap of 4096


def _supergraph(src, dst, weight, n: int) -> SuperGraph:
    """A super-graph of ``n`` nodes with the given undirected edges (any order, repeats allowed)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    return SuperGraph(vertex=np.arange(n, dtype=np.int64), time=np.zeros(n, np.int64), src=src, dst=dst,
                      weight=np.asarray(weight, np.float64), spatial=np.ones(src.shape[0], bool))


def _varied_supergraphs():
    """(name, super-graph) of every shape label propagation meets, and some it should survive: empty, one node,
    isolated nodes, stars and cliques (all ties), repeated edges, one to four distinct integer weights, zero
    weights, weights that are not whole numbers."""
    rng = np.random.default_rng(74)
    yield "empty", _supergraph([], [], [], 0)
    yield "one node", _supergraph([], [], [], 1)
    yield "one edge", _supergraph([0], [1], [3.0], 2)
    yield "isolated nodes", _supergraph([1, 3], [3, 4], [1.0, 1.0], 6)
    yield "star", _supergraph(np.zeros(9, int), np.arange(1, 10), np.full(9, 2.0), 10)
    clique = np.array([(i, j) for i in range(7) for j in range(i + 1, 7)]).T
    yield "clique", _supergraph(clique[0], clique[1], np.ones(clique.shape[1]), 7)
    for trial in range(4):
        N, T = int(rng.integers(3, 150)), int(rng.integers(1, 6))
        snaps = [(s.src, s.dst) for s in random_snapshots(N, T, float(rng.uniform(0.5, 4.0)), trial)]
        for ws, wt in ((12, 12), (2, 1), (5, 3), (0, 4), (0, 0), (0.5, 0.25), (1.5, 1.0)):
            yield f"snapshots {trial} weights {ws}/{wt}", build_supergraph(snaps, N, ws, wt)
    for trial in range(4):
        n = int(rng.integers(2, 120))
        m = int(rng.integers(1, 4 * n))
        s, d = rng.integers(0, n, m), rng.integers(0, n, m)
        keep = s != d
        s, d = s[keep], d[keep]
        choices = [rng.integers(1, 5, s.shape[0]) * 3.0, rng.integers(0, 3, s.shape[0]) * 1.0,
                   rng.uniform(0.1, 3.0, s.shape[0]), np.full(s.shape[0], 7.0)]
        yield f"random multigraph {trial}", _supergraph(s, d, choices[trial % 4], n)


def test_label_propagation_labels_as_the_frozen_copy_does(monkeypatch):
    """The half-iterations that score only the nodes whose choice may have changed, a slice of nodes at a time,
    give the labels and iteration counts of scoring every node at once (the copy at 45180fd) on graphs of every
    shape, caps from 1 to none, any tolerance; passes before the change (then the same code) and after."""
    import hpcdgnn.partition.chunks as chunks
    from tests.partition.chunks_45180fd import label_propagation as frozen

    rng = np.random.default_rng(5)
    for i, (name, g) in enumerate(_varied_supergraphs()):
        n = g.num_nodes
        for cap in sorted({1, 3, max(1, n // 7), max(1, n)}):
            for max_iters, tol in ((30, 1e-3), (30, 0.0), (int(rng.integers(1, 4)), 1e-3))[int(rng.integers(0, 2)):]:
                want = frozen(g, cap, max_iters, tol)
                # and in slices of a few heard labels, or with keys too wide to carry the weights
                for block, limit in ((1 << 16, 2**63), ((int(rng.integers(4, 64)), 2**63), (1 << 16, 1))[i % 2]):
                    monkeypatch.setattr(chunks, "LP_BLOCK", block, raising=False)
                    monkeypatch.setattr(chunks, "KEY_LIMIT", limit, raising=False)
                    got = label_propagation(g, cap, max_iters, tol)
                    assert np.array_equal(got[0], want[0]) and got[1] == want[1], (name, cap, max_iters, tol, block)
                    assert got[0].dtype == want[0].dtype


def test_assignment_places_every_chunk_as_the_frozen_copy_does():
    """Alg. 1's placement equals the copy at 45180fd chunk for chunk: label-propagation chunks and random pairs
    (repeated, a chunk paired with itself), integer and fractional h, zero, equal and fractional workloads, P
    above the chunk count, any block size; passes before the change and after."""
    from tests.partition.chunks_45180fd import assign_chunks as frozen

    rng = np.random.default_rng(11)
    cases = []
    for trial in range(8):
        N, T = int(rng.integers(5, 300)), int(rng.integers(1, 6))
        snaps = [(s.src, s.dst) for s in random_snapshots(N, T, float(rng.uniform(0.5, 4.0)), trial)]
        g = build_supergraph(snaps, N, spatial_weight=12, temporal_weight=12)
        stats = chunk_stats(g, label_propagation(g, max_size=int(rng.integers(1, 60)))[0])
        cases.append(((stats["nodes"] + stats["spatial_edges"]).astype(float), stats["cut_pairs"]))
    for trial in range(8):
        C = int(rng.integers(1, 200))
        K = int(rng.integers(0, 4 * C))
        a, b = rng.integers(0, C, K), rng.integers(0, C, K)
        h = rng.integers(1, 4, K) * 12.0 if trial % 2 else rng.uniform(0.1, 5.0, K)
        cases.append((rng.integers(0, 9, C).astype(float), (a, b, h)))
    for work, pairs in cases:
        for w in (work, np.where(rng.random(work.shape[0]) < 0.3, 0.0, work), np.ones_like(work),
                  work * rng.uniform(0.5, 1.5, work.shape[0])):
            for P in (1, 2, 3, 7, 64):
                block = int(rng.integers(1, 40))
                assert np.array_equal(assign_chunks(w, pairs, P, block=block), frozen(w, pairs, P, block=block)), P


def test_rnn_owners_as_the_frozen_copy_gives_them():
    """The RNN owners equal those of the copy at 45180fd where the (vertex, rank) pairs are counted in a table
    (N·P up to 4 appearances each) and where they are sorted (sparse: few appearances, many vertices or ranks);
    passes before the change and after."""
    from tests.partition.chunks_45180fd import assign_rnn_owners as frozen

    rng = np.random.default_rng(8)
    for case in range(200):
        N, P = int(rng.integers(1, 80)), int(rng.integers(1, 12))
        A = int(rng.integers(0, 8 * N * P)) if case % 2 else int(rng.integers(0, N))
        v = rng.integers(0, N, A)
        r = np.zeros(A, np.int64) if case % 5 == 0 else rng.integers(0, P, A)
        w = [rng.pareto(1.5, N), np.zeros(N), rng.integers(0, 3, N).astype(float), np.full(N, 6.0)][case % 4]
        assert np.array_equal(assign_rnn_owners(v, r, w, P), frozen(v, r, w, P)), case


def test_chunk_plan_labels_and_owners_as_the_frozen_copies_do(tmp_path):
    """plan_chunks' appearance labels, chunk ranks and RNN owners on a small dataset are those of the pipeline with
    the copies at 45180fd (a plan is part of a checkpoint)."""
    from hpcdgnn.config.schema import DataConfig, JobConfig
    from hpcdgnn.data.generate import generate_dataset
    from hpcdgnn.data.shard_reader import ShardReader
    from hpcdgnn.partition.chunk_plan import plan_chunks
    from hpcdgnn.partition.workload import chunk_work
    from hpcdgnn.regimes import options_class
    from tests.partition.chunks_45180fd import assign_chunks as frozen_assign
    from tests.partition.chunks_45180fd import assign_rnn_owners as frozen_rnn
    from tests.partition.chunks_45180fd import label_propagation as frozen_lp

    m = generate_dataset(tmp_path / "g", 512, 6, 3.0, seed=2, spatial_spread=0.5, temporal_spread=0.5)
    P = 3
    chunk = options_class("strategy", "chunk")(name="chunk")
    job = JobConfig(data=DataConfig(path=str(tmp_path / "g")), strategy=chunk)
    plan = plan_chunks(m, P, job)
    with ShardReader(str(tmp_path / "g"), m) as reader:
        snaps = [reader.edges(t) for t in range(m.num_snapshots)]
    L, H, F = job.model.layers, job.model.hidden, m.num_features
    g = build_supergraph(snaps, m.num_vertices, L * max(F, H), L * H)
    labels, iters = frozen_lp(g, default_chunk_size(g.num_nodes, P))
    stats = chunk_stats(g, labels)
    owner = frozen_assign(chunk_work(job, F, g, labels, stats), stats["cut_pairs"], P)
    rows = np.full(m.num_vertices, float(m.num_snapshots))
    keys = g.time * m.num_vertices + g.vertex
    assert np.array_equal(plan.chunks.appearances.label_of(keys), labels) and plan.chunks.lp_iterations == iters
    assert np.array_equal(plan.chunks.chunk_owner, owner)
    assert np.array_equal(plan.chunks.rnn_owner, frozen_rnn(g.vertex, owner[labels], rows, P))
