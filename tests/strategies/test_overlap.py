"""``strategy.overlap_chunks``: the snapshot strategy's redistributions hidden behind the RNN (issue 13 item 6).

The vertex range is cut into K chunks whose non-blocking exchanges overlap the
time encoder of the chunks before them (:func:`hpcdgnn.comm.autograd.pipelined_exchange`).
Rows of distinct vertices never mix in the RNN, so the losses and gradient norms
must be those of one process (the exactness suite's standard, rtol 1e-6 in
float64), the bytes those of K = 1, and metrics.jsonl reports the exposed part
of the communication time beside the whole.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from hpcdgnn.comm.communicator import CommStats
from hpcdgnn.config.schema import SnapshotOptions
from tests.conftest import SMALL_N, SMALL_T, write_job
from tests.train.test_exactness import _losses, _losses_many


@pytest.mark.parametrize("model", ["cdgcn"])  # tmgcn: test_overlap_with_checkpoint_blocks
def test_overlap_is_exact(launcher, small_dataset, tmp_path, model):
    """P = 1, 2, 3 (T = 7 and N = 23 divisible by neither), K = 4 and K = 50 > the rows of a rank
    (then one row per chunk), against one process; same bytes as K = 1."""
    assert SMALL_T % 2 and SMALL_T % 3 and SMALL_N % 2 and SMALL_N % 3
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model}, train={"dtype": "float64"})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain", "strategy.overlap_chunks=4")
    (_, recs1), p2 = _losses_many(launcher, 2, [(job, tmp_path / "p2-k1", ()),
                                                (job, tmp_path / "p2-k4", ("strategy.overlap_chunks=4",))])
    for P, K in ((2, 4), (3, 50)):
        got, recs = p2 if P == 2 else _losses(launcher, P, job, tmp_path / f"p{P}-k{K}",
                                              f"strategy.overlap_chunks={K}")
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{model} P={P} K={K}")
        if P == 2:
            assert [r["bytes_by_tag"] for r in recs] == [r["bytes_by_tag"] for r in recs1]
            assert recs[0]["loss"] == recs1[0]["loss"]  # the first forward: the same float operations
        t = recs[-1]["time"]
        assert 0 <= t["comm_exposed"]["min"] <= t["comm_exposed"]["max"]
        # the per-tag split adds up to the totals (means over ranks of sums over tags)
        by_tag = recs[-1]["comm_by_tag"]
        assert set(by_tag) == set(recs[-1]["bytes_by_tag"]) | {"epoch_end"}  # the closing wait moves no bytes
        # (the tags' times under way add up to at least the total, which counts time two tags were under way at
        # once only once: a rank's comm never exceeds its epoch)
        assert sum(v["seconds"] for v in by_tag.values()) >= t["comm"]["mean"] * (1 - 1e-9)
        assert sum(v["exposed"] for v in by_tag.values()) == pytest.approx(t["comm_exposed"]["mean"], rel=1e-9)
        assert all(v["exposed"] <= v["exposed_max"] + 1e-12 for v in by_tag.values())
        for r in recs:
            last = r["per_rank"]
            assert all(e <= c + 1e-6 for e, c in zip(last["comm_exposed"], last["comm"], strict=True))
            assert all(c <= w for c, w in zip(last["comm"], last["epoch"], strict=True)), last
    # without overlap, every call blocks: exposed is all of it (to rounding: summed in another order)
    t = recs1[-1]["time"]
    for k in ("min", "mean", "max"):
        assert t["comm_exposed"][k] == pytest.approx(t["comm"][k], rel=1e-12)


def test_every_layer_moves_in_chunks_and_the_trace_says_where_the_wait_went(launcher, small_dataset, tmp_path):
    """CD-GCN at P = 3, K = 3 with ``debug.trace_exchanges``: every layer's exchanges are chunked — the
    first layer's too, whose input (Ã·X, moved once) is already in the vertex layout, so only its output
    moves back: 3K exchanges a direction per epoch, none blocking (before, that one moved in a blocking
    exchange: a third of the bytes never hidden). Each rank's trace has a line per epoch whose blocked and
    late seconds add up to the epoch record's per-rank ``comm_late``."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn"}, train={"dtype": "float64"})
    K, P = 3, 3
    _, recs = _losses(launcher, P, job, tmp_path / "p3", f"strategy.overlap_chunks={K}",
                      "debug.trace_exchanges=true")
    for rank in range(P):
        lines = [json.loads(x) for x in (tmp_path / "p3" / "trace" / f"exchanges.rank{rank:05d}.jsonl").open()]
        assert [x["epoch"] for x in lines] == [r["epoch"] for r in recs] and {x["rank"] for x in lines} == {rank}
        for x, rec in zip(lines[1:], recs[1:], strict=True):  # steady epochs (the first moves Ã·X once)
            tags = [x["tags"][e[0]] for e in x["exchanges"]]
            assert tags.count("redistribute.fwd") == tags.count("redistribute.bwd") == 2 * K + K, tags
            arrivals = [e[1] for e in x["exchanges"]]
            assert arrivals == sorted(arrivals) and arrivals[0] >= 0
            assert all(0 <= e[3] <= e[2] + 1e-6 for e in x["exchanges"])
            assert sum(e[3] for e in x["exchanges"]) == pytest.approx(rec["per_rank"]["comm_late"][rank], abs=1e-4)


def test_overlap_with_checkpoint_blocks(launcher, small_dataset, tmp_path):
    """strategy.blocks: 2 (boundary states cross the chunked encoder, forward and backward), TM-GCN, P = 3."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"}, train={"dtype": "float64"},
                    strategy={"blocks": 2})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, _ = _losses(launcher, 3, job, tmp_path / "p3", "strategy.overlap_chunks=3")
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_overlap_chunks_must_be_positive():
    with pytest.raises(ValueError, match="overlap_chunks"):
        SnapshotOptions(overlap_chunks=0)


def test_nonblocking_time_accounting():
    """A tag's seconds: the union of its exchanges' post-to-completion intervals; exposed: time blocked."""
    st = CommStats()
    t0 = time.perf_counter()
    st.posted("x", 8, 8, t0)
    st.posted("x", 8, 8, t0)  # a second exchange in flight: the interval is counted once
    st.blocked("x", 0.25)
    st.finished("x", t0 + 1.0)
    assert st.tags["x"].seconds == 0.0  # one still in flight
    st.finished("x", t0 + 2.0)
    s = st.tags["x"]
    assert s.calls == 2 and s.bytes_sent == 16 and s.seconds == pytest.approx(2.0)
    assert 0.25 <= s.exposed < 0.3
    before = st.snapshot()
    st.add("x", 4, 4, 0.5)  # a blocking call: all of it exposed
    d = st.since(before)
    assert (d.calls, d.seconds, d.exposed) == (1, 0.5, 0.5)
