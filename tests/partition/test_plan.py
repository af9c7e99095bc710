"""Partition plans (STYLE G2; IBM §4.2): contiguous bounds, ownership queries, volume, JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hpcdgnn.data.manifest import Manifest, ShardInfo
from hpcdgnn.partition import PartitionPlan, balanced_bounds, build_snapshot_plan, weighted_bounds


def assert_valid_bounds(b: list[int], total: int, parts: int) -> None:
    """parts+1 integer bounds from 0 to total, never decreasing (contiguous ranges covering [0, total))."""
    assert len(b) == parts + 1
    assert all(isinstance(x, int) for x in b), b  # plain ints: the plan goes to JSON
    assert b[0] == 0 and b[-1] == total
    assert all(x <= y for x, y in zip(b[:-1], b[1:], strict=True)), b


SIZES = [(t, p) for t in (0, 1, 2, 5, 7, 13, 64, 100) for p in (1, 2, 3, 4, 7, 8, 16)]


@pytest.mark.parametrize("total,parts", SIZES)
def test_balanced_bounds(total, parts):
    """Contiguous cover of [0, T], sizes differ by <= 1, larger ranges first, empty ones trail."""
    b = balanced_bounds(total, parts)
    assert_valid_bounds(b, total, parts)
    sizes = np.diff(b)
    assert sizes.max() - sizes.min() <= 1
    # IBM's k = T/P generalised: the first T mod P ranks get the extra item, so empty ranges trail
    assert list(sizes) == sorted(sizes, reverse=True)
    if parts > total:
        assert list(sizes) == [1] * total + [0] * (parts - total)


@pytest.mark.parametrize("total,parts", [(t, p) for t, p in SIZES if t > p])
def test_weighted_bounds_uniform_work_is_near_balanced(total, parts):
    """Uniform work: sizes differ by <= 1 and each cut is the nearest to p*T/P."""
    b = weighted_bounds(np.ones(total), parts)
    assert_valid_bounds(b, total, parts)
    sizes = np.diff(b)
    assert sizes.max() - sizes.min() <= 1, b
    # the cut nearest to p*T/P: each bound is within 1/2 of its ideal position
    ideal = np.arange(parts + 1) * total / parts
    assert np.all(np.abs(np.array(b) - ideal) <= 0.5 + 1e-9), b


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("parts", [1, 2, 3, 5, 8, 20])
def test_weighted_bounds_random_work(seed, parts):
    """Random work: valid bounds, each cut within one snapshot's work of its target."""
    rng = np.random.default_rng(seed)
    T = int(rng.integers(1, 40))
    work = rng.exponential(1.0, T) * (rng.random(T) < 0.8)  # some zero-work snapshots too
    if work.sum() == 0:
        work[0] = 1.0
    b = weighted_bounds(work, parts)
    assert_valid_bounds(b, T, parts)
    if T <= parts:  # at most one snapshot per rank: the count split, idle ranks last
        assert b == balanced_bounds(T, parts)
        return
    assert np.all(np.diff(b) >= 1), "with T > P every rank owns a snapshot"
    cum = np.concatenate([[0.0], np.cumsum(work)])
    # every cut is within one snapshot's work of its target (the prefix sum at the cut brackets it)
    for p in range(1, parts):
        target = cum[-1] * p / parts
        pinned = b[p] == b[p - 1] + 1 or b[p] == T - (parts - p)  # moved by the every-rank-owns-one rule
        assert pinned or abs(cum[b[p]] - target) <= work.max() + 1e-9
    # so, unless cuts were pinned, no rank carries more than its share plus two snapshots' work
    if T >= 2 * parts:
        loads = np.array([work[b[p] : b[p + 1]].sum() for p in range(parts)])
        assert loads.max() <= cum[-1] / parts + 2 * work.max() + 1e-9


def test_weighted_bounds_zero_or_empty_work_falls_back_to_balanced():
    """Zero or no work: the count-balanced split."""
    assert weighted_bounds(np.zeros(7), 3) == balanced_bounds(7, 3)
    assert weighted_bounds(np.zeros(0), 3) == [0, 0, 0, 0]


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_weighted_bounds_heavy_first_snapshot_gets_its_own_rank(parts):
    """A snapshot heavier than all the rest is owned alone."""
    work = np.array([100.0] + [1.0] * 9)
    b = weighted_bounds(work, parts)
    assert_valid_bounds(b, 10, parts)
    owner = [p for p in range(parts) if b[p] <= 0 < b[p + 1]]
    assert len(owner) == 1 and (b[owner[0]], b[owner[0] + 1]) == (0, 1), b
    loads = [work[b[p] : b[p + 1]].sum() for p in range(parts)]
    assert max(loads) == 100.0  # the bottleneck is the heavy snapshot alone, as in the optimum


def test_weighted_bounds_follow_work_not_count():
    """Cuts follow the prefix sum of work, not the snapshot count."""
    # snapshots 0..3 cost 3 each, 4..9 cost 1 each: total 18, halves at 9 -> cut after snapshot 2
    work = np.array([3.0] * 4 + [1.0] * 6)
    assert weighted_bounds(work, 2) == [0, 3, 10]
    assert balanced_bounds(10, 2) == [0, 5, 10]


def test_weighted_bounds_p_greater_than_t_leaves_empty_ranges():
    """P > T: every snapshot owned once, P - T ranks own none."""
    b = weighted_bounds(np.ones(3), 7)
    assert_valid_bounds(b, 3, 7)
    assert sorted(np.diff(b).tolist()) == [0, 0, 0, 0, 1, 1, 1]


def test_weighted_bounds_p_greater_than_t_empty_ranges_trail():
    """P > T with work balance: the empty ranges are the last ones."""
    for T, P in [(2, 4), (3, 7), (5, 8)]:
        sizes = np.diff(weighted_bounds(np.ones(T), P)).tolist()
        assert sizes == [1] * T + [0] * (P - T), (T, P, sizes)


# --------------------------------------------------------------------------------------------
# PartitionPlan
# --------------------------------------------------------------------------------------------


def make_manifest(T: int, N: int, seed: int = 0) -> Manifest:
    """A manifest with random per-snapshot nnz (no files: plans need only the metadata)."""
    rng = np.random.default_rng(seed)
    nnz = rng.integers(0, 50, T).tolist()
    return Manifest(
        num_vertices=N,
        num_snapshots=T,
        num_features=2,
        feature_names=["in_degree", "out_degree"],
        directed=True,
        num_classes=0,
        index_dtype="int32",
        smoothing={"edge_life": 1, "mtransform_window": 1},
        snapshot_nnz=nnz,
        snapshot_edges=nnz,
        snapshot_active=[N] * T,
        snapshot_time=None,
        shards=[ShardInfo("shard-00000.h5", 0, T, 1, "0" * 64)],
    )


PLANS = [(7, 23, 1), (7, 23, 2), (7, 23, 3), (7, 23, 4), (3, 10, 5), (13, 5, 8), (64, 100, 16), (1, 1, 3)]


def _plans(T, N, P):
    m = make_manifest(T, N)
    work = np.asarray(m.snapshot_nnz, dtype=np.float64) + 1.0
    return m, [build_snapshot_plan(m, P), build_snapshot_plan(m, P, work)]


@pytest.mark.parametrize("T,N,P", PLANS)
def test_owner_queries_agree_with_ranges(T, N, P):
    """owner_of_snapshot / owner_of_vertex invert snapshots_of / vertices_of."""
    m, plans = _plans(T, N, P)
    for plan in plans:
        assert (plan.kind, plan.num_ranks, plan.num_snapshots, plan.num_vertices) == ("snapshot", P, T, N)
        assert_valid_bounds(plan.snapshot_bounds, T, P)
        assert plan.vertex_bounds == balanced_bounds(N, P)
        seen_t = [t for p in range(P) for t in plan.snapshots_of(p)]
        seen_v = [v for p in range(P) for v in plan.vertices_of(p)]
        assert seen_t == list(range(T)) and seen_v == list(range(N))
        for p in range(P):
            for t in plan.snapshots_of(p):
                assert plan.owner_of_snapshot(t) == p
            for v in plan.vertices_of(p):
                assert plan.owner_of_vertex(v) == p
        for t in range(T):
            assert t in plan.snapshots_of(plan.owner_of_snapshot(t))
        for v in range(N):
            assert v in plan.vertices_of(plan.owner_of_vertex(v))


@pytest.mark.parametrize("T,N,P", PLANS)
def test_per_rank_entries_and_redistribution_volume(T, N, P):
    """Per-rank counts and nnz; sum of send_units = T*N - sum_p T_p*N_p (IBM §4.2)."""
    m, plans = _plans(T, N, P)
    for plan in plans:
        assert len(plan.ranks) == P
        tp = [len(plan.snapshots_of(p)) for p in range(P)]
        np_ = [len(plan.vertices_of(p)) for p in range(P)]
        for p, r in enumerate(plan.ranks):
            assert r["snapshots"] == tp[p] and r["vertices"] == np_[p]
            assert r["nnz"] == sum(m.snapshot_nnz[t] for t in plan.snapshots_of(p))
        # IBM §4.2: each redistribution moves T*N - sum_p T_p*N_p feature vectors between ranks
        assert sum(r["send_units"] for r in plan.ranks) == T * N - sum(a * b for a, b in zip(tp, np_, strict=True))
        # rank p keeps its own (T_p x N_p) block and sends the rest of its T_p x N rows
        assert all(r["send_units"] == tp[p] * (N - np_[p]) for p, r in enumerate(plan.ranks))
    if T % P == 0 and N % P == 0:
        assert sum(r["send_units"] for r in plans[0].ranks) == T * N * (P - 1) // P


def test_work_plan_records_work_per_rank():
    """A work-balanced plan uses weighted_bounds and records each rank's work."""
    m = make_manifest(13, 9, seed=3)
    work = np.asarray(m.snapshot_nnz, dtype=np.float64) + 2.0
    plan = build_snapshot_plan(m, 4, work)
    assert plan.snapshot_bounds == weighted_bounds(work, 4)
    assert sum(r["work"] for r in plan.ranks) == pytest.approx(work.sum())
    for p, r in enumerate(plan.ranks):
        assert r["work"] == pytest.approx(work[plan.snapshot_bounds[p] : plan.snapshot_bounds[p + 1]].sum())
    assert all("work" not in r for r in build_snapshot_plan(m, 4).ranks)


@pytest.mark.parametrize("T,N,P", [(7, 23, 3), (3, 10, 5)])
def test_plan_save_round_trips(tmp_path, T, N, P):
    """plan.save writes JSON that rebuilds an equal PartitionPlan."""
    m, plans = _plans(T, N, P)
    for i, plan in enumerate(plans):
        path = tmp_path / f"plan{i}.json"
        plan.save(path)
        raw = json.loads(path.read_text())
        assert raw["snapshot_bounds"] == plan.snapshot_bounds and raw["vertex_bounds"] == plan.vertex_bounds
        back = PartitionPlan(**raw)
        assert back == plan
        assert [back.owner_of_snapshot(t) for t in range(T)] == [plan.owner_of_snapshot(t) for t in range(T)]


def test_plans_are_built_in_partition_by_keyword_with_typed_fields(small_dataset):
    """Vertex and chunk plans come from hpcdgnn.partition: one row per rank in ``ranks``, the vertex order
    and the chunks as typed fields, and plan.json holds the chunk summary, not its arrays (issue 11, item 4)."""
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.partition.chunk_plan import plan_chunks
    from hpcdgnn.partition.plan import ChunkAssignment
    from hpcdgnn.partition.vertex import plan_vertices

    m = load_manifest(small_dataset)
    T, N, P = m.num_snapshots, m.num_vertices, 3
    with pytest.raises(TypeError):
        PartitionPlan("snapshot", P, T, N, [0] * T, [0] * (P + 1), [])  # positional construction is refused
    job = load_job_for(small_dataset, "vertex", {"partition": "hash"})
    vplan = plan_vertices(m, P, job)
    assert len(vplan.ranks) == P and sorted(vplan.vertex_order) == list(range(N))
    assert [len(vplan.vertices_of(q)) for q in range(P)] == [r["vertices"] for r in vplan.ranks]
    cplan = plan_chunks(m, P, load_job_for(small_dataset, "chunk", {"chunk_size": 8}))
    assert len(cplan.ranks) == P and isinstance(cplan.chunks, ChunkAssignment)
    owner = cplan.chunks.appearances.dense_owner()
    assert owner.shape == (T, N)
    assert [int((owner == p).sum()) for p in range(P)] == [r["appearances"] for r in cplan.ranks]
    raw = cplan.to_json()
    assert raw["chunks"] == cplan.chunks.summary() and raw["chunks"]["num_chunks"] > 1
    json.dumps(raw)  # no arrays left


def load_job_for(dataset, name: str, options: dict):
    """A job on ``dataset`` with ``strategy: {name, **options}`` (no file needed)."""
    from hpcdgnn.config.schema import DataConfig, JobConfig
    from hpcdgnn.regimes import options_class

    return JobConfig(data=DataConfig(path=str(dataset)), strategy=options_class("strategy", name)(name=name, **options))


@pytest.mark.parametrize("P", [2, 3])
def test_sequence_blocks_balance_work_so_no_rank_is_left_without_training(tmp_path, P):
    """R1's blocks (T = 30, window 4; the validation and test sequences come last): by count the last of 3
    ranks held no training sequence; by work (a training sequence weighs TRAIN_WEIGHT evaluation ones) every
    rank trains and the blocks' work differs by at most one training sequence's."""
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.partition.sequences import TRAIN_WEIGHT, plan_sequences, sequences_of
    from tests.conftest import make_dataset

    data = make_dataset(tmp_path / "d", 30, 11, 20)
    job = load_job_for(data, "sequences", {"window": 4})
    m = load_manifest(data)
    seqs = sequences_of(m, job)
    n_train = [s.split for s in seqs].count(0)
    assert all(s.split == 0 for s in seqs[:n_train]) and len(seqs) - n_train >= 3 * TRAIN_WEIGHT
    if P == 3:  # the case equal counts got wrong
        assert all(s.split > 0 for s in seqs[balanced_bounds(len(seqs), P)[-2]:])
    plan = plan_sequences(m, P, job)
    work = [sum(TRAIN_WEIGHT if s.split == 0 else 1 for s in seqs[a:b]) for a, b in
            (r["sequences"] for r in plan.ranks)]
    assert all(r["train_sequences"] > 0 for r in plan.ranks), plan.ranks
    assert sum(r["train_sequences"] for r in plan.ranks) == n_train
    assert sum(work) == n_train * TRAIN_WEIGHT + len(seqs) - n_train
    assert max(work) - min(work) <= TRAIN_WEIGHT, work
