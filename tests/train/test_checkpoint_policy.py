"""Periodic checkpoints by wall time (checkpoint.every_minutes, on by default) and the run's health warnings."""

from __future__ import annotations

import logging

from hpcdgnn.config import load_job
from hpcdgnn.train.trainer import _Health
from tests.conftest import write_job


def test_wall_time_checkpoints_agreed_by_all_ranks(launcher, tmp_path, small_dataset):
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 4},
                    checkpoint={"every_minutes": 1e-6, "keep": 10})
    assert load_job(write_job(tmp_path / "d.yaml", small_dataset)).checkpoint.every_minutes == 30.0  # the default
    run = tmp_path / "run"
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)])
    assert proc.returncode == 0, proc.stderr
    assert sorted(d.name for d in (run / "checkpoints").iterdir()) == [f"epoch-00000{e}" for e in (1, 2, 3, 4)]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("checkpoint:")]
    assert "MiB on disk" in lines[0] and all("MiB" not in line for line in lines[1:]), lines


def _record(epoch, loss, val):
    return {"epoch": epoch, "train_loss": loss, "val_auc": val}


def test_health_warns_once_each(caplog):
    log = logging.getLogger("test-health")
    health = _Health(log, "auc", "the regime's hint")
    with caplog.at_level(logging.WARNING, logger="test-health"):
        # NaN in the record with finite sums: its split's snapshots have no edges
        health.check(_record(1, 0.69, float("nan")), sums_finite=True)
        health.check(_record(2, 0.7, None))
        health.check(_record(3, 1e34, 0.5))
        health.check(_record(4, 1e35, 0.5))
        health.check(_record(5, float("nan"), 0.5))  # no warning: a loss that is not finite ends the run
        health.check(_record(6, float("nan"), 0.5), sums_finite=True)  # finite sums: no training examples
        health.check(_record(7, float("nan"), 0.5), sums_finite=True)
    text = [r.getMessage() for r in caplog.records]
    assert len(text) == 3, text
    assert "validation split is empty" in text[0] and text[0].endswith("the regime's hint")
    assert "grew from 0.69 to 1e+34 by epoch 3" in text[1]
    assert "epoch 6's batches held no training examples" in text[2]
    # a first epoch without examples is no baseline: the growth is measured from the first finite loss
    # the test split too, with the regime's hint for it
    both = _Health(log, "auc", "the {split} hint")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="test-health"):
        both.check({**_record(1, 0.69, 0.5), "test_auc": None}, sums_finite=True)
        both.check({**_record(2, 0.69, 0.5), "test_auc": float("nan")}, sums_finite=True)
    text = [r.getMessage() for r in caplog.records]
    assert text == ["warning: the test split is empty (test_auc is '-'): the test hint"], text
    # sums not finite: the NaN metric is a diverged model's scores, not an empty split
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="test-health"):
        _Health(log, "auc", "").check(_record(1, 0.69, float("nan")), sums_finite=False)
    assert not caplog.records
    late = _Health(log, "auc", "")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="test-health"):
        late.check(_record(1, float("nan"), 0.5), sums_finite=True)
        late.check(_record(2, 0.69, 0.5))
        late.check(_record(3, 1e34, 0.5))
    assert [r.getMessage() for r in caplog.records][-1].endswith("grew from 0.69 to 1e+34 by epoch 3: training is "
                                                                  "diverging; lower train.lr")
    quiet = _Health(log, "auc", "")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="test-health"):
        for e, loss in enumerate([0.69, 0.5, 0.8, 0.6], 1):
            quiet.check(_record(e, loss, 0.5))
    assert not caplog.records
