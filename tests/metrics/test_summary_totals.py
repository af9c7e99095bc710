"""summary.json's totals count every byte a run sends: a pre-training phase's gradient all-reduces (TGN's static
node memory) are in no epoch's record and not set-up-tagged, so ``totals.pretrain_bytes_sent`` counts them."""

from __future__ import annotations

import json

import pytest

from tests.conftest import read_metrics
from tests.strategies.test_memory import _college, _job


@pytest.fixture(scope="module")
def college(tmp_path_factory):
    """CollegeMsg's first events, times in days (tests/strategies/test_memory.py's)."""
    return _college(tmp_path_factory.mktemp("events") / "college", 86400.0)


@pytest.mark.mpi
def test_pretraining_traffic_is_counted_in_the_totals(launcher, college, tmp_path):
    """At i = 2 the pre-training runs every training batch once per epoch with the whole model's gradients
    all-reduced over both ranks, as a training epoch does: 2 pre-training epochs send twice epoch 1's
    ``grad_allreduce`` bytes. Without a pre-training phase: 0."""
    job = _job(tmp_path, college)
    common = ("strategy.minibatch=2", "train.epochs=1")
    static = ("model.static_memory=on", "model.static_pretrain_epochs=2")
    procs = launcher.run_many(2, [
        ["run", str(job), "--output", str(tmp_path / "static"), "--set", *common, *static],
        ["run", str(job), "--output", str(tmp_path / "plain"), "--set", *common]])
    for proc in procs:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    totals = json.loads((tmp_path / "static" / "summary.json").read_text())["totals"]
    epoch = read_metrics(tmp_path / "static")[0]["bytes_by_tag"]["grad_allreduce"]
    assert epoch > 0 and totals["pretrain_bytes_sent"] == 2 * epoch
    assert totals["bytes_sent"] == read_metrics(tmp_path / "static")[0]["bytes_sent"]  # not in the epochs' sum
    assert json.loads((tmp_path / "plain" / "summary.json").read_text())["totals"]["pretrain_bytes_sent"] == 0
