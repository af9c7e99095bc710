"""R3 (ReInc §3.1, §3.3): the sequences strategy's reuse cache changes no result — on vs off, at any size,
under either policy, on one rank and on three — and reports its work per epoch in metrics.jsonl."""

from __future__ import annotations

import numpy as np

from tests.conftest import read_metrics, write_job
from tests.train.test_exactness import _losses, _losses_many

#: overlapping windows (L = 3, stride 1), full neighbourhoods in the first layer: Ã_t·X_t is shared
SEQ = {"name": "sequences", "window": 3, "batch_vertices": 8, "fanouts": [3, 0]}
#: room for one snapshot's Ã_t·X_t (23 vertices x 2 features x 8 bytes = 368 bytes) of the 6 read (0..5;
#: link prediction scores step t against the edges of t + 1)
ONE_ENTRY = "strategy.cache_mb=0.0005"


def _job(tmp_path, data):
    return write_job(tmp_path / "job.yaml", data, model={"name": "cdgcn"}, strategy=SEQ, train={"epochs": 2})


def test_reuse_changes_nothing_at_one_rank(launcher, small_dataset, tmp_path):
    """Off, on (everything fits), and a cache of one entry under Eq. 3 and under LRU: the same losses and
    gradient norms (float64); the counters say what happened — all hits when everything fits, some under
    the priority policy, none under LRU (the window of 3 cycles through a cache of 1)."""
    job = _job(tmp_path, small_dataset)
    off, recs_off = _losses(launcher, None, job, tmp_path / "off", "strategy.reuse=off")
    assert recs_off[-1]["reuse"]["mode"] == "off" and "incremental" not in recs_off[-1]
    runs = {"on": [], "priority": [ONE_ENTRY], "lru": [ONE_ENTRY, "strategy.cache_policy=lru"]}
    reuse = {}
    for name, over in runs.items():
        got, recs = _losses(launcher, None, job, tmp_path / name, *over)
        np.testing.assert_allclose(got, off, rtol=1e-12, err_msg=name)
        reuse[name] = [r["reuse"] for r in recs]
        assert all(r["unplanned"] == 0 and r["cached"] == "input aggregations" for r in reuse[name]), reuse[name]
    on, pri, lru = reuse["on"][-1], reuse["priority"][-1], reuse["lru"][-1]
    assert on["hits"] > 0 and on["misses"] == 0 and on["hit_rate"] == 1.0 and on["working_set_bytes"] == 6 * 368
    assert pri["policy"] == "priority" and pri["hits"] > 0 and pri["misses"] > 0 and pri["peak_bytes"] <= 368
    assert lru["policy"] == "lru" and lru["hits"] == 0 and lru["evictions"] > 0 and lru["bytes"] == 368
    assert pri["hits"] + pri["misses"] == lru["hits"] + lru["misses"] == on["hits"]  # the same reads


def test_reuse_changes_nothing_at_three_ranks(launcher, small_dataset, tmp_path):
    """P = 3 (windows split over ranks, each with its own cache of one entry): on equals off; the ranks'
    counters are summed."""
    job = _job(tmp_path, small_dataset)
    (off, _), (on, recs) = _losses_many(launcher, 3, [(job, tmp_path / "off", ("strategy.reuse=off",)),
                                                      (job, tmp_path / "on", (ONE_ENTRY,))])
    np.testing.assert_allclose(on, off, rtol=1e-12)
    r = recs[-1]["reuse"]
    assert r["hits"] > 0 and r["misses"] > 0 and r["unplanned"] == 0
    assert set(recs[-1]["bytes_by_tag"]) <= {"grad_allreduce", "batch"}  # the cache moves nothing


def test_resume_continues_with_the_checkpoints_cache(launcher, small_dataset, tmp_path):
    """A P = 2 run of 2 epochs with a three-entry cache, extended by ``--resume --set train.epochs=4``, repeats
    a straight 4-epoch run: losses, gradient norms and every reuse counter of all 4 epochs. Two things made it
    depart: the cache was not in the checkpoint (the resumed process started from set-up's fills: epoch 3
    counted 32 hits, 3 bypassed, 1 eviction against 31, 3, 2), and the last epoch's plan left out the next
    epoch's reads, so a 2-epoch run ended with an empty cache where a 4-epoch run holds a full one."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn"}, strategy=SEQ, train={"epochs": 4})
    three = f"strategy.cache_mb={3 * 368 / 2**20 + 1e-9:.9f}"  # 3 of the 6 snapshots' Ã_t·X_t: it evicts
    straight, part = tmp_path / "straight", tmp_path / "part"
    procs = launcher.run_many(2, [["run", str(job), "--output", str(straight), "--set", three],
                                  ["run", str(job), "--output", str(part), "--set", three, "train.epochs=2"]])
    # the resume in a fresh process, as after a pre-emption: nothing of the first runs' processes can help it
    procs.append(launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(part), "--set", "train.epochs=4"]))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
    assert "reuse cache: the checkpoint holds none" not in procs[-1].stdout + procs[-1].stderr  # the resume
    a, b = read_metrics(straight), read_metrics(part)
    assert [r["epoch"] for r in a] == [r["epoch"] for r in b] == [1, 2, 3, 4]
    assert all(r["reuse"]["evictions"] > 0 for r in a), [r["reuse"] for r in a]
    for x, y in zip(a, b, strict=True):
        assert (x["loss"], x["grad_norm"], x["reuse"]) == (y["loss"], y["grad_norm"], y["reuse"]), x["epoch"]
