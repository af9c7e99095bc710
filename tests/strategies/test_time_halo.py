"""The time halo of banded encoders (``strategy.time_halo``): TM-GCN's M-transform on the owned snapshots.

Under ``layout: auto`` (contiguous blocks for TM-GCN) each rank receives only the w - 1 snapshots
before its block and runs the M-transform in place; the losses and gradient norms must equal one
process's and the redistribution's, with far fewer bytes, also where one rank's history spans two
other ranks (w - 1 > a rank's block).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SMALL_N, SMALL_T, write_job
from tests.train.test_exactness import _losses, _losses_many

HIDDEN, LAYERS = 6, 2


@pytest.mark.parametrize(("window", "balance"), [(3, "work"), (4, "count")])
def test_time_halo_equals_one_process_and_redistribution(launcher, small_dataset, tmp_path, window, balance):
    assert SMALL_T % 3 and SMALL_N % 3
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn", "window": window},
                    strategy={"balance": balance})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    assert not np.allclose(ref[0, 0], ref[-1, 0], rtol=1e-6), "loss did not move: the comparison is vacuous"
    (got, recs), (red, recs_off) = _losses_many(launcher, 3, [
        (job, tmp_path / "halo", ()), (job, tmp_path / "redistribute", ("strategy.time_halo=off",))])
    # the same rows summed in the same order: equal far below the strategies' 1e-6
    np.testing.assert_allclose(got, ref, rtol=1e-12, err_msg=f"time halo, w={window}")
    tags = recs[0]["bytes_by_tag"]
    assert not any(k.startswith("redistribute") for k in tags), tags
    halo = tags["time_halo.fwd"]
    # at most w - 1 snapshots per rank after the first, per layer, forward; the backward returns as much
    assert 0 < halo <= (3 - 1) * (window - 1) * SMALL_N * HIDDEN * 8 * LAYERS
    assert tags["time_halo.bwd"] == halo

    np.testing.assert_allclose(red, ref, rtol=1e-6)
    assert recs_off[0]["bytes_by_tag"]["redistribute.fwd"] > halo  # T = 7: the halo is 4-6 of 7 snapshots


def test_time_halo_needs_consecutive_snapshots(launcher, small_dataset, tmp_path):
    """An explicit cyclic layout scatters every rank's snapshots: the redistribution stays."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                    strategy={"layout": "cyclic"}, train={"epochs": 1})
    got, recs = _losses(launcher, 2, job, tmp_path / "cyclic")
    assert recs[0]["bytes_by_tag"]["redistribute.fwd"] > 0 and "time_halo.fwd" not in recs[0]["bytes_by_tag"]
