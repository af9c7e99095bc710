"""The appearance maps (``hpcdgnn.partition.appearances``) against the (T, N) owner table they replace."""

import numpy as np
import pytest

from hpcdgnn.partition.appearances import DenseChunks, GridCells, SparseChunks, chunk_map, map_bytes_at_least
from hpcdgnn.partition.plan import balanced_bounds


def _reference(T, N, P, key, label, chunk_owner, rnn_owner):
    """(T·N,) owner and row on the owner: the owner table and a per-owner cumulative count over it."""
    chunk = np.full(T * N, -1, dtype=np.int64)
    chunk[key] = label
    owner = np.where(chunk >= 0, chunk_owner[np.maximum(chunk, 0)], np.tile(rnn_owner, T))
    local = np.empty(T * N, dtype=np.int64)
    for p in range(P):
        local[owner == p] = np.arange(int((owner == p).sum()))
    return owner, local, chunk


def _random_plan(seed, T, N, P, active):
    rng = np.random.default_rng(seed)
    key = rng.choice(T * N, size=int(active * T * N), replace=False)
    C = max(1, key.shape[0] // 5)
    label = rng.integers(0, C, key.shape[0])
    chunk_owner = rng.integers(0, P, C)
    rnn_owner = rng.integers(0, P, N)
    return key, label, chunk_owner, rnn_owner


@pytest.mark.parametrize("form", [SparseChunks, DenseChunks])
@pytest.mark.parametrize("seed,T,N,P,active", [(0, 5, 7, 3, 0.3), (1, 4, 11, 2, 0.9), (2, 6, 5, 3, 0.0),
                                                (3, 3, 13, 4, 1.0), (4, 7, 9, 5, 0.1), (5, 9, 300, 4, 0.05),
                                                (6, 8, 200, 3, 0.5)])
def test_chunk_maps_equal_the_owner_table(form, seed, T, N, P, active):
    key, label, chunk_owner, rnn_owner = _random_plan(seed, T, N, P, active)
    owner, local, chunk = _reference(T, N, P, key, label, chunk_owner, rnn_owner)
    if form is SparseChunks:
        order = np.argsort(key)
        m = SparseChunks(T, N, P, key[order], label[order], chunk_owner, rnn_owner)
    else:
        m = DenseChunks(P, chunk.reshape(T, N).astype(np.int32), chunk_owner, rnn_owner)
    every = np.arange(T * N)
    np.testing.assert_array_equal(m.owner_of(every), owner)
    np.testing.assert_array_equal(m.local_of(every), local)
    np.testing.assert_array_equal(m.label_of(every), chunk)
    np.testing.assert_array_equal(m.counts(), np.bincount(owner, minlength=P))
    np.testing.assert_array_equal(m.dense_owner(), owner.reshape(T, N))
    rng = np.random.default_rng(seed + 100)
    some = rng.integers(0, T * N, 17)  # any order, repeats
    np.testing.assert_array_equal(m.local_of(some), local[some])
    for p in range(P):
        np.testing.assert_array_equal(m.keys_of(p), np.flatnonzero(owner == p))
        np.testing.assert_array_equal(m.active_rnn(p), chunk.reshape(T, N)[:, rnn_owner == p] >= 0)


def test_chunk_map_picks_the_smaller_form_and_survives_pickling(monkeypatch):
    import pickle

    from hpcdgnn.partition import appearances

    T, N, P = 6, 40, 3
    few, most = _random_plan(0, T, N, P, 0.1), _random_plan(0, T, N, P, 0.8)
    assert isinstance(chunk_map(T, N, P, *few), DenseChunks), "small tables stay tables (faster lookups)"
    assert isinstance(chunk_map(T, N, P, *most, lookup="active"), SparseChunks)
    monkeypatch.setattr(appearances, "TABLE_BYTES", 0)
    sparse, dense = chunk_map(T, N, P, *few), chunk_map(T, N, P, *most)
    assert isinstance(sparse, SparseChunks) and isinstance(dense, DenseChunks)
    assert isinstance(chunk_map(T, N, P, *few, lookup="table"), DenseChunks)
    for m in (sparse, dense):
        before = m.local_of(np.arange(T * N))
        again = pickle.loads(pickle.dumps(m))
        assert not any(k.startswith("_c_") for k in vars(again)), "lookup tables travel with the plan"
        np.testing.assert_array_equal(again.local_of(np.arange(T * N)), before)


@pytest.mark.parametrize("T,N,Ps,Pv,cyclic", [(5, 7, 2, 2, True), (4, 9, 1, 3, False), (7, 5, 3, 1, False),
                                              (6, 11, 3, 2, False)])
def test_grid_cells_equal_the_owner_table(T, N, Ps, Pv, cyclic):
    P = Ps * Pv
    group = np.arange(T) % Ps if cyclic else np.repeat(np.arange(Ps), np.diff(balanced_bounds(T, Ps)))
    vb = np.asarray(balanced_bounds(N, Pv))
    column = np.repeat(np.arange(Pv), np.diff(vb))
    rnn_owner = np.random.default_rng(0).integers(0, P, N)
    m = GridCells(P, group, vb, rnn_owner)
    cell = (group[:, None] * Pv + column[None, :]).reshape(-1)
    owner, local, _ = _reference(T, N, P, np.arange(T * N), cell, np.arange(P), rnn_owner)
    every = np.arange(T * N)
    np.testing.assert_array_equal(m.owner_of(every), owner)
    np.testing.assert_array_equal(m.local_of(every), local)
    np.testing.assert_array_equal(m.counts(), np.bincount(owner, minlength=P))
    for p in range(P):
        np.testing.assert_array_equal(m.keys_of(p), np.flatnonzero(owner == p))


def test_popcount_without_numpy_2(monkeypatch):
    from hpcdgnn.partition import appearances

    words = np.random.default_rng(0).integers(0, 2**63, 50, dtype=np.int64).astype(np.uint64) * np.uint64(3)
    expected = np.array([bin(int(w)).count("1") for w in words])
    np.testing.assert_array_equal(appearances._popcount(words), expected)
    monkeypatch.delattr(np, "bitwise_count", raising=False)
    np.testing.assert_array_equal(appearances._popcount(words), expected)


@pytest.mark.parametrize("name", ["chunk", "grid"])
def test_a_plan_saved_with_the_chunk_table_loads_as_a_map(small_dataset, name):
    """A checkpoint written before the appearance maps holds a chunk or grid plan's (T, N) chunk table and RNN
    owners; loaded (``--resume``, ``embed``, ``predict`` on its P keep it), it names every appearance's rank and row
    as the plan made now does, not an AttributeError in the strategy's set-up."""
    import pickle

    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.partition.plan import ChunkAssignment, PartitionPlan
    from hpcdgnn.strategies import get_strategy
    from tests.partition.test_plan import load_job_for

    P = 3
    plan = get_strategy(name).make_plan(load_manifest(small_dataset), P,
                                        load_job_for(small_dataset, name, {"chunk_size": 8} if name == "chunk" else {}))
    c, every = plan.chunks, np.arange(plan.num_snapshots * plan.num_vertices)
    old = object.__new__(ChunkAssignment)  # the fields as the earlier ChunkAssignment pickled them
    vars(old).update(chunk=c.appearances.label_of(every).astype(np.int32).reshape(plan.num_snapshots, -1),
                     chunk_owner=c.chunk_owner, rnn_owner=c.rnn_owner, num_chunks=c.num_chunks,
                     lp_iterations=c.lp_iterations, cut_fraction=c.cut_fraction, size_cap=c.size_cap)
    saved = object.__new__(PartitionPlan)
    vars(saved).update(vars(plan), chunks=old)
    loaded = pickle.loads(pickle.dumps(saved))
    got = loaded.chunks
    np.testing.assert_array_equal(got.rnn_owner, c.rnn_owner)
    np.testing.assert_array_equal(got.appearances.owner_of(every), c.appearances.owner_of(every))
    np.testing.assert_array_equal(got.appearances.local_of(every), c.appearances.local_of(every))
    np.testing.assert_array_equal(got.appearances.counts(), c.appearances.counts())
    assert got.summary() == c.summary() and not hasattr(got, "chunk")


@pytest.mark.parametrize("lookup", ["active", "table"])
def test_dense_owner_holds_little_beyond_the_table_it_returns(lookup):
    """The planner's (T, N) owner table (``chunk_cost``) from either form: its int64 result and per-snapshot
    lookups, not T·N keys and their lookups' temporaries at once (~74 bytes an appearance from the sparse form, 9×
    the table, on the graphs the sparse form is for)."""
    import tracemalloc

    T, N, P = 64, 10_000, 4
    key, label, chunk_owner, rnn_owner = _random_plan(0, T, N, P, 0.05)
    m = chunk_map(T, N, P, key, label, chunk_owner, rnn_owner, lookup)
    m.counts()  # the lookup tables, built by the plan already
    tracemalloc.start()
    try:
        owner = m.dense_owner()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert owner.shape == (T, N) and owner.dtype == np.int64
    assert peak < 1.5 * owner.nbytes, f"{peak / (T * N):.1f} bytes an appearance"


@pytest.mark.parametrize("T,N,P,active", [(1, 1, 1, 0.0), (1, 1, 3, 1.0), (5, 1, 2, 0.6), (1, 7, 3, 0.5),
                                          (1, 64, 2, 0.5), (2, 64, 3, 0.7), (3, 43, 2, 0.5), (1, 65, 2, 1.0),
                                          (4, 32, 5, 0.0), (2, 3, 12, 1.0), (3, 200, 130, 0.6)])
@pytest.mark.parametrize("lookup", ["active", "table"])
def test_chunk_maps_at_the_edges(T, N, P, active, lookup):
    """T = 1, N = 1, no appearance active or all, T·N a multiple of 64 or not, P above the chunks (ranks holding
    nothing), P > 127 (int16 owners); keys asked in descending order and at the bitmap's last word."""
    for seed in range(3):
        key, label, chunk_owner, rnn_owner = _random_plan(seed, T, N, P, active)
        chunk_owner, rnn_owner = chunk_owner % max(1, P - 1), rnn_owner % max(1, P - 1)  # rank P-1 may hold nothing
        owner, local, chunk = _reference(T, N, P, key, label, chunk_owner, rnn_owner)
        m = chunk_map(T, N, P, key, label, chunk_owner, rnn_owner, lookup)
        ask = np.arange(T * N)[::-1]
        np.testing.assert_array_equal(m.owner_of(ask), owner[ask])
        np.testing.assert_array_equal(m.local_of(ask), local[ask])
        np.testing.assert_array_equal(m.label_of(ask), chunk[ask])
        np.testing.assert_array_equal(m.counts(), np.bincount(owner, minlength=P))
        for p in range(P):
            np.testing.assert_array_equal(m.keys_of(p), np.flatnonzero(owner == p))
            np.testing.assert_array_equal(m.active_rnn(p), chunk.reshape(T, N)[:, rnn_owner == p] >= 0)


@pytest.mark.parametrize("lookup", ["table", "active", "auto"])
@pytest.mark.parametrize("seed,T,N,P,active", [(0, 5, 7, 3, 0.3), (2, 6, 5, 3, 0.0), (3, 3, 13, 4, 1.0),
                                                (5, 9, 300, 4, 0.05), (6, 8, 200, 200, 0.5)])
def test_the_footprint_s_map_bound_is_the_form_made_and_below_its_bytes(monkeypatch, lookup, seed, T, N, P,
                                                                        active):
    """``map_bytes_at_least`` (the footprint check's term, before any plan) names the form ``chunk_map`` makes
    and never more bytes than that map holds on a rank (a job that fits is never refused), within 20 % of them
    where the maps are more than their scalars."""
    from hpcdgnn.partition import appearances

    monkeypatch.setattr(appearances, "TABLE_BYTES", 0 if seed % 2 else appearances.TABLE_BYTES)
    key, label, chunk_owner, rnn_owner = _random_plan(seed, T, N, P, active)
    m = chunk_map(T, N, P, key, label, chunk_owner, rnn_owner, lookup)
    form, nbytes = map_bytes_at_least(T, N, P, key.shape[0], lookup)
    assert form == ("active" if isinstance(m, SparseChunks) else "table")
    assert nbytes <= m.nbytes(), (nbytes, m.nbytes())
    if T * N >= 1000:
        assert nbytes >= 0.8 * m.nbytes(), (nbytes, m.nbytes())


def test_table_rows_stay_int32_while_every_rank_s_rows_fit(monkeypatch):
    """A row is its place among its owner's appearances: past T·N = 2³¹ the row table stays int32 (4 bytes an
    appearance, not 8) while each rank holds fewer rows than that — here with int32's limit lowered to 30."""
    from hpcdgnn import indices

    T, N, P = 4, 10, 3
    key, label, chunk_owner, rnn_owner = _random_plan(7, T, N, P, 0.6)
    owner, local, chunk = _reference(T, N, P, key, label, chunk_owner, rnn_owner)
    monkeypatch.setattr(indices, "INT32_MAX", 30)
    assert T * N > 30 > np.bincount(owner).max()
    m = DenseChunks(P, chunk.reshape(T, N).astype(np.int32), chunk_owner, rnn_owner)
    np.testing.assert_array_equal(m.local_of(np.arange(T * N)), local)
    assert m._tables()[1].dtype == np.int32
    assert map_bytes_at_least(T, N, P, key.shape[0], "table")[1] <= m.nbytes()
    monkeypatch.setattr(indices, "INT32_MAX", int(np.bincount(owner).max()) - 2)  # one rank past it: int64
    m = DenseChunks(P, chunk.reshape(T, N).astype(np.int32), chunk_owner, rnn_owner)
    np.testing.assert_array_equal(m.local_of(np.arange(T * N)), local)
    assert m._tables()[1].dtype == np.int64
