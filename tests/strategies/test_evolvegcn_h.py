"""EvolveGCN-H (IBM §5; EvolveGCN §3.3): exact under every full-batch strategy, its top-k pooled over all ranks."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_dataset, write_job
from tests.train.test_exactness import _losses

POOL_TAGS = ("layer0.pool.index", "layer0.pool.fwd", "layer0.pool.bwd", "layer1.pool.fwd", "layer1.pool.bwd")


@pytest.mark.parametrize(("strategy", "options"), [
    ("snapshot", {}), ("snapshot", {"blocks": 2}), ("pss", {}), ("vertex", {}), ("chunk", {})],
    ids=["snapshot", "snapshot-blocks", "pss", "vertex", "chunk"])
def test_evolvegcn_h_is_exact_at_three_ranks(launcher, small_dataset, tmp_path, strategy, options):
    """Losses and gradient norms at P = 3 equal one process's to 1e-6 (float64, T = 7, N = 23); the summaries
    move through the pool's all-reduces (a per-rank top-k would pick other rows under vertex and chunk)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "evolvegcn_h"},
                    strategy={"name": strategy, **options})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    assert not np.allclose(ref[0, 0], ref[-1, 0], rtol=1e-6), "loss did not move: the comparison is vacuous"
    got, recs = _losses(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"evolvegcn_h {strategy} {options} P=3")
    sent = recs[0]["bytes_by_tag"]
    assert all(sent.get(tag, 0) > 0 for tag in POOL_TAGS), sent


def test_evolvegcn_h_with_more_ranks_than_snapshots(launcher, tmp_path):
    """P = 3 > T = 2: the rank without snapshots still joins every pool's forward and backward sums."""
    data = make_dataset(tmp_path / "tiny", T=2, N=11, m=20)
    job = write_job(tmp_path / "job.yaml", data, model={"name": "evolvegcn_h"}, task={"name": "node_classification"})
    ref, _ = _losses(launcher, None, job, tmp_path / "plain")
    got, _ = _losses(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_evolvegcn_h_under_a_sampled_strategy_is_one_line(launcher, small_dataset, tmp_path):
    """A sampled strategy sees part of each snapshot, so it cannot pool over all vertices: exit 2, one line."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "evolvegcn_h"},
                    strategy={"name": "sequences"})
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "out")])
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "evolvegcn_h" in lines[0] and "strategy.name: sequences" in lines[0], lines


@pytest.mark.parametrize("strategy", ["sequences", "hybrid"])
def test_the_sampled_strategy_refusal_offers_every_full_batch_strategy(small_dataset, tmp_path, strategy):
    """The refusal's fix names each full-batch strategy EvolveGCN-H trains under (grid among them), no other."""
    from hpcdgnn.config import load_job
    from hpcdgnn.errors import ConfigError
    from hpcdgnn.regimes.timeline import TIMELINE

    job = load_job(write_job(tmp_path / "job.yaml", small_dataset, model={"name": "evolvegcn_h"},
                             strategy={"name": strategy}))
    with pytest.raises(ConfigError) as refused:
        TIMELINE.check(job, "job.yaml", 2)
    assert str(refused.value).endswith("use a full-batch strategy (snapshot, pss, vertex, chunk or grid)"), refused
