"""``comm.grad_buckets``: the gradient all-reduce in buckets started during backward (issue 13 item 6).

The bucketed, overlapped reduction must give the gradients of the flat all-reduce (P = 2: bit for
bit; P = 3 to rounding), also when a step accumulates a gradient more often than the step before
(the late bucket is reduced again, on every rank alike), and must have started buckets before the
backward pass ended.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from hpcdgnn.comm.buckets import bucket_bounds
from hpcdgnn.config.schema import CommConfig
from tests.conftest import REPO, assert_same_run, json_records, write_job
from tests.train.test_exactness import _losses_many


def test_bucket_bounds_cover_in_order_without_empties():
    for sizes, k in (([5, 1, 1, 1, 8], 3), ([1] * 7, 3), ([100, 1, 1], 5), ([3], 4), ([2, 2], 1)):
        bounds = bucket_bounds(sizes, k)
        assert bounds[0][0] == 0 and bounds[-1][1] == len(sizes)
        assert all(a < b for a, b in bounds) and all(b == c for (_, b), (c, _) in pairwise(bounds))
        assert len(bounds) == min(k, len(sizes))
    # about equal elements: 8 equal parameters in 4 buckets of 2
    assert bucket_bounds([4] * 8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]


def test_grad_buckets_must_be_positive():
    with pytest.raises(ValueError, match="grad_buckets"):
        CommConfig(grad_buckets=0)


@pytest.mark.parametrize(("model", "strategy"), [("cdgcn", {"blocks": 2, "overlap_chunks": 2}),
                                                 ("evolvegcn_o", {})])
def test_buckets_equal_flat_allreduce(launcher, small_dataset, tmp_path, model, strategy):
    """P = 2 bit for bit and P = 3 to 1e-12 against one all-reduce, in float64 (checkpoint blocks and
    chunked encoders accumulate a parameter's gradient several times in one step)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model},
                    train={"dtype": "float64", "epochs": 4}, strategy=strategy)
    for P in (2, 3):
        (flat, _), (got, recs) = _losses_many(launcher, P, [(job, tmp_path / f"flat{P}", ()),
                                                            (job, tmp_path / f"b{P}", ("comm.grad_buckets=3",))])
        if P == 2:
            assert_same_run(got, flat)
        else:
            np.testing.assert_allclose(got, flat, rtol=1e-12)
        calls = [r["comm_by_tag"]["grad_allreduce"] for r in recs]
        # 3 buckets + the flags all-reduce every step, posted without blocking: less exposed than under way
        assert all(c["exposed"] <= c["seconds"] + 1e-6 for c in calls)
        assert recs[-1]["bytes_by_tag"]["grad_allreduce"] > 0


@pytest.mark.parametrize("P", [2, 3])
def test_buckets_against_flat_step_by_step(launcher, P):
    """tests/mpi/buckets_check.py: gradients equal a flat all-reduce's every step, when a rank accumulates
    after its bucket left (every rank then repeats the bucket), and when a parameter goes unused."""
    proc = launcher.run(P, [str(REPO / "tests" / "mpi" / "buckets_check.py")], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == list(range(P))
    assert out[1]["stale"][2] > 0  # rank 1's extra pass in step 3 came after its buckets were posted
    assert all(sum(r["stale"][:2]) == 0 and sum(r["stale"][3:]) == 0 for r in out.values())
    # 5 steps x (3 buckets + the flags) + the buckets repeated in step 3, the same on every rank
    calls = {r["calls"] for r in out.values()}
    assert len(calls) == 1 and calls.pop() == 5 * 4 + 3
    assert all(r["early"] > 0 for r in out.values())  # some buckets left during backward passes
