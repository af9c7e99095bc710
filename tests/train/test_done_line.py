"""Rank 0's closing line (``hpcdgnn.train.trainer._done_line``), as README.md's Results section shows it. No MPI."""

from __future__ import annotations

from types import SimpleNamespace

from hpcdgnn.train.trainer import _done_line


def _run(resumed: bool = False, start_epoch: int = 0):
    return SimpleNamespace(task=SimpleNamespace(metric="auc"), resumed=resumed, start_epoch=start_epoch,
                           start_batch=0, run_dir="runs/r")


def test_one_epoch_is_singular():
    """A 1-epoch run (``--set train.epochs=1``, a planner's trial) said ``done: 1 epochs``."""
    totals = SimpleNamespace(final={"epoch": 1, "val_auc": 0.5, "test_auc": 0.25})
    assert _done_line(_run(), totals, 1) == "done: 1 epoch, val_auc 0.5000, test_auc 0.2500; results in runs/r"
    totals.final["epoch"] = 10
    assert _done_line(_run(), totals, 10).startswith("done: 10 epochs, val_auc 0.5000")
