"""strategy: chunk (D1): exact against one process at P = 2 and 3 (stale off), and with P > T."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from tests.conftest import make_dataset, write_job
from tests.train.test_exactness import _losses, _losses_many


# CD-GCN under chunk at P = 3 against P = 1: the exact run of tests/strategies/test_stale.py and
# test_chunk_strategy_more_ranks_than_snapshots below
# TM-GCN (its RNN-owner bytes and the plan checked too) is chunk's case in the quick subset
@pytest.mark.parametrize("model", ["evolvegcn_o", pytest.param("tmgcn", marks=pytest.mark.quick(strategy="chunk")),
                                   "tgcn"])
def test_chunk_strategy_is_exact(launcher, small_dataset, tmp_path, model):
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                    strategy={"name": "chunk", "chunk_size": 20})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    for P in (2, 3):
        got, recs = _losses(launcher, P, job, tmp_path / f"p{P}")
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{model} P={P}")
        assert recs[0]["bytes_by_tag"]["task.fwd"] > 0  # the task fetches destination rows it lacks
        if model == "tmgcn":  # the first layer's Ã·X (F wide) moves to the RNN owners in epoch 1 only, then
            # three moves of `hidden` rows an epoch (layer 0 back, layer 1 there and back); the same rows each
            F = json.loads((small_dataset / "manifest.json").read_text())["num_features"]
            H = yaml.safe_load(job.read_text())["model"]["hidden"]
            first, last = recs[0]["bytes_by_tag"], recs[-1]["bytes_by_tag"]
            assert first["rnn.fwd"] * 3 * H == last["rnn.fwd"] * (F + 3 * H) and first["rnn.bwd"] == last["rnn.bwd"]
    plan = json.loads((tmp_path / "p3" / "plan.json").read_text())
    assert plan["kind"] == "chunk" and plan["chunks"]["num_chunks"] > 3 and len(plan["ranks"]) == 3
    assert sum(r["appearances"] for r in plan["ranks"][:3]) == 7 * 23  # every (v, t) has one owner


def test_chunk_strategy_more_ranks_than_snapshots(launcher, tmp_path):
    data = make_dataset(tmp_path / "tiny", T=2, N=11, m=20)
    job = write_job(tmp_path / "job.yaml", data, model={"name": "cdgcn"}, task={"name": "node_classification"},
                    strategy={"name": "chunk", "chunk_size": 4})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, _ = _losses(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_fusion_on_and_off_give_identical_outputs(launcher, small_dataset, tmp_path):
    """Spatial fusion (DGC §5.1.1) changes how rows are loaded, never what is computed."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn"},
                    strategy={"name": "chunk", "chunk_size": 4})
    runs = {"off": ["strategy.fusion=off"], "all": ["strategy.fusion=on"],
            "capped": ["strategy.fusion=on", "strategy.fusion_memory_mb=0.004"]}
    (off, recs_off), *ons = _losses_many(launcher, 3, [(job, tmp_path / name, o) for name, o in runs.items()])
    groups, caps = {}, {}
    for name, (on, recs) in zip(list(runs)[1:], ons, strict=True):
        assert on[0, 0] == off[0, 0], name  # the first forward is bit-identical
        np.testing.assert_allclose(on, off, rtol=1e-12, err_msg=name)
        fusion, unfused = recs[0]["fusion"], recs_off[0]["fusion"]
        # unfused: one group per chunk, plus one per rank for its inactive appearances (if any)
        assert fusion["chunks"] == unfused["chunks"] <= unfused["groups"] <= unfused["chunks"] + 3
        assert fusion["groups"] < unfused["groups"] and fusion["rows_loaded"] < unfused["rows_loaded"], name
        assert fusion["rows_loaded_unfused"] == unfused["rows_loaded"]
        groups[name] = fusion["groups"]
        caps[name] = fusion["cap_mb"]
    assert groups["all"] < groups["capped"]  # the cap keeps some chunks apart
    # the default (auto) cap is the device memory a rank may use: far above any test graph's groups
    assert caps["capped"] == 0.004 and caps["all"] > 64


@pytest.mark.parametrize("model", ["tgcn"])  # mpnn_lstm (a 2-layer LSTM) takes the same packed path
def test_active_sequences_temporal_fusion_is_exact(launcher, small_dataset, tmp_path, model):
    """sequences: active (DGC's time encoder over active appearances): P = 3 equals P = 1, and temporal
    fusion (packed lanes, Eq. 4–5 masks) equals padding (fusion off)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                    strategy={"name": "chunk", "chunk_size": 8, "sequences": "active"})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    full, _ = _losses(launcher, None, job, tmp_path / "all", "strategy.sequences=all")
    assert not np.allclose(ref[:, 0], full[:, 0]), "sequences: active changed nothing: the test is vacuous"
    (fused, recs), (padded, recs_off) = _losses_many(launcher, 3, [(job, tmp_path / "on", ("strategy.fusion=on",)),
                                                                   (job, tmp_path / "off", ("strategy.fusion=off",))])
    np.testing.assert_allclose(fused, ref, rtol=1e-6)
    np.testing.assert_allclose(padded, fused, rtol=1e-12)
    on, off = recs[0]["fusion"], recs_off[0]["fusion"]
    # packing never takes more slots than padding (the gain itself: tests/nn/test_temporal_fusion.py)
    assert on["time_slots"] <= on["time_slots_padded"] == off["time_slots"] == off["time_slots_padded"]


@pytest.mark.mpi
def test_active_lookup_equals_the_tables(launcher, tmp_path):
    """``strategy.lookup: active`` (owners and rows from the active appearances, no (T, N) table) names the same
    rows as ``table``: bit-identical losses and the same bytes per tag at P = 3, on a graph with inactive
    appearances, the time encoder over active steps and the task fetching rows in place."""
    data = make_dataset(tmp_path / "sparse", T=5, N=40, m=12)
    job = write_job(tmp_path / "job.yaml", data, model={"name": "tgcn"},
                    strategy={"name": "chunk", "chunk_size": 6, "sequences": "active"})
    (table, recs_t), (active, recs_a) = _losses_many(
        launcher, 3, [(job, tmp_path / "table", ("strategy.lookup=table",)),
                      (job, tmp_path / "active", ("strategy.lookup=active",))])
    np.testing.assert_array_equal(active, table)
    assert [r["bytes_by_tag"] for r in recs_a] == [r["bytes_by_tag"] for r in recs_t]
    assert recs_t[0]["bytes_by_tag"]["task.fwd"] > 0
    # each rank reports holding the map (host_payload_bytes), the same on every rank
    from hpcdgnn.config import load_job
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.partition.chunk_plan import plan_chunks

    for lookup in ("table", "active"):
        held = json.loads((tmp_path / lookup / "summary.json").read_text())["memory"]["host_payload_bytes"]
        where = plan_chunks(load_manifest(data), 3, load_job(job, [f"strategy.lookup={lookup}"])).chunks.appearances
        assert held == [where.nbytes()] * 3, lookup


@pytest.mark.parametrize("lookup", ["table", "active"])
def test_the_planner_prices_the_appearance_map_a_run_holds(small_dataset, tmp_path, lookup):
    """``plan``'s host bytes for a chunk job are the appearance map each rank of its run holds."""
    from hpcdgnn.config import load_job
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.partition.chunk_plan import plan_chunks
    from hpcdgnn.planner.predict import plan_job
    from hpcdgnn.planner.rates import MachineRates

    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn"},
                             strategy={"name": "chunk", "chunk_size": 6, "lookup": lookup}))
    m = load_manifest(small_dataset)
    pred = [p for p in plan_job(job, m, str(small_dataset), [3], MachineRates(), strategies=["chunk"])
            if p.strategy == "chunk"][0]
    where = plan_chunks(m, 3, job).chunks.appearances
    assert pred.memory_parts["host"] == where.nbytes() > 0
    # what a rank holds: the map as the broadcast delivers it, its tables built where it looks up
    import pickle

    delivered = pickle.loads(pickle.dumps(where))
    delivered.local_of(np.zeros(1, np.int64))
    assert delivered.nbytes() == where.nbytes()


def test_the_planner_offers_lookup_active_where_only_it_fits(tmp_path):
    """A sparse graph whose (T, N) tables do not fit a rank's budget while its active appearances do: ``plan``
    offers the chunk job with ``lookup: active`` (``ChunkStrategy.smaller``), priced as fitting."""
    from hpcdgnn.config import load_job
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.planner.predict import plan_job
    from hpcdgnn.planner.rates import MachineRates

    data = make_dataset(tmp_path / "sparse", T=5, N=400, m=12)
    m = load_manifest(data)
    path = write_job(tmp_path / "job.yaml", data, model={"name": "tgcn"}, strategy={"name": "chunk", "chunk_size": 8})

    def chunk(over, budget=None):
        preds = plan_job(load_job(path, over), m, str(data), [3], MachineRates(), strategies=["chunk"],
                         memory_per_rank=budget)
        return [p for p in preds if p.strategy == "chunk"]

    table, = chunk(["strategy.lookup=table"])
    active, = chunk(["strategy.lookup=active"])
    assert active.memory_bytes < table.memory_bytes
    offered = chunk(["strategy.lookup=table"], budget=(active.memory_bytes + table.memory_bytes) / 2)
    assert [(p.options["lookup"], p.fits) for p in offered] == [("table", False), ("active", True)]
    assert offered[1].memory_bytes == active.memory_bytes


@pytest.mark.parametrize("lookup", ["table", "active"])
def test_pricing_a_chunk_plan_holds_a_snapshot_of_owners_at_a_time(tmp_path, lookup):
    """``chunk_cost`` (what ``plan`` and ``strategy: auto`` run on rank 0) looks a snapshot's owners up in the
    plan's map, as a rank does: beyond the map and the graph it holds O(N), never a (T, N) int64 owner table
    (8 bytes an appearance, with its temporaries ~30). Its price is the same either way (the planner tests)."""
    import tracemalloc

    from hpcdgnn.config import load_job
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.partition.chunk_plan import plan_chunks
    from hpcdgnn.planner.cost import GraphStats
    from hpcdgnn.strategies.chunk import chunk_cost

    T, N = 80, 3000
    data = make_dataset(tmp_path / "long", T=T, N=N, m=30)
    m = load_manifest(data)
    job = load_job(write_job(tmp_path / "job.yaml", data, model={"name": "tgcn"},
                             strategy={"name": "chunk", "chunk_size": 16, "lookup": lookup}))
    plan, graph = plan_chunks(m, 3, job), GraphStats(m, str(data))
    graph.csr()
    plan.chunks.appearances.nbytes()  # the map's lookup tables: what every rank holds anyway
    tracemalloc.start()
    try:
        ranks = chunk_cost(plan, job, m, graph)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sum(r.spatial_rows for r in ranks) == T * N
    assert peak < 3 * T * N, f"{peak} bytes for T·N = {T * N} appearances"
