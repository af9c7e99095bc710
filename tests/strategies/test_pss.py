"""strategy: pss (S6): exact against one process at P = 2 and 3; the pipeline moves one state per boundary."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SMALL_N, make_dataset, write_job
from tests.train.test_exactness import MODELS, _losses, _losses_many


# LSTM state and weight state pipelined; CD-GCN's (its bytes checked too) is pss's case in the quick subset
@pytest.mark.parametrize("model", [pytest.param("cdgcn", marks=pytest.mark.quick(strategy="pss")), "evolvegcn_o"])
def test_pss_is_exact(launcher, small_dataset, tmp_path, model):
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model}, strategy={"name": "pss"})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    for P in (2, 3):
        got, recs = _losses(launcher, P, job, tmp_path / f"p{P}")
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{model} P={P}")
        if model == "cdgcn":
            # LSTM state (h, c), each (1, N, hidden) float64, per layer and rank boundary, each way
            state = 2 * SMALL_N * 6 * 8
            assert recs[0]["bytes_by_tag"]["pipeline.fwd"] == (P - 1) * 2 * state
            assert recs[0]["bytes_by_tag"]["pipeline.bwd"] == (P - 1) * 2 * state


def test_pss_more_ranks_than_snapshots(launcher, tmp_path):
    """P = 3 > T = 2: the idle rank passes the state through, forward and backward."""
    data = make_dataset(tmp_path / "tiny", T=2, N=11, m=20)
    jobs = {m: write_job(tmp_path / f"{m}.yaml", data, model={"name": m}, task={"name": "node_classification"},
                         strategy={"name": "pss"}) for m in MODELS}
    refs = _losses_many(launcher, None, [(job, tmp_path / f"{m}-plain", ()) for m, job in jobs.items()])
    gots = _losses_many(launcher, 3, [(job, tmp_path / f"{m}-p3", ()) for m, job in jobs.items()])
    for model, (ref, _), (got, _) in zip(MODELS, refs, gots, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=model)
