"""T-GCN (DGC §7.1: GCN layers, then a GRU) is exact under every strategy, and with checkpoint blocks."""

from __future__ import annotations

import numpy as np

from tests.conftest import write_job
from tests.train.test_exactness import _losses, _losses_many


def test_tgcn_exact_under_every_strategy(launcher, small_dataset, tmp_path):
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn"})
    ref, recs = _losses(launcher, None, job, tmp_path / "plain")
    assert not np.isclose(ref[0, 0], ref[-1, 0], rtol=1e-6)
    runs = {
        "snapshot": ["strategy.name=snapshot"],
        "blocks": ["strategy.name=snapshot", "strategy.blocks=3"],
        "pss": ["strategy.name=pss"],
        "vertex": ["strategy.name=vertex", "strategy.partition=hash"],
    }
    gots = _losses_many(launcher, 3, [(job, tmp_path / name, overrides) for name, overrides in runs.items()])
    for name, (got, recs) in zip(runs, gots, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=name)
        if name == "snapshot":
            # only the last layer has a GRU, so one layer's pair of redistributions moves data
            assert recs[0]["bytes_by_tag"]["redistribute.fwd"] > 0
