"""Rank 0's epoch line (``EpochRecorder.line``) has one shape in every epoch: scripts read it with awk and grep."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from hpcdgnn.metrics.epoch import EpochRecorder


def test_the_epoch_line_names_exposed_in_every_epoch():
    """``exposed`` was printed only where it differed from ``comm`` by over 0.5 ms, so the line changed its
    number of fields between epochs of one run (a new user's awk read the wrong column)."""
    comm = SimpleNamespace(stats=SimpleNamespace(), rank=0, size=2)
    recorder = EpochRecorder(comm, SimpleNamespace(), SimpleNamespace(metric="auc"), torch.device("cpu"), 1, None)

    def line(comm_s: float, exposed: float) -> str:
        slowest = {"epoch": 1.0, "load": 0.0, "compute": 1.0 - exposed, "comm": comm_s, "comm_exposed": exposed}
        return recorder.line({"epoch": 3, "train_loss": 0.5, "val_auc": 0.7, "slowest": slowest,
                              "bytes_sent": 2**20, "transfer_bytes": 0})

    overlapped, blocking = line(0.3, 0.1), line(0.3, 0.3)
    assert "comm 0.300 exposed 0.100)" in overlapped and "comm 0.300 exposed 0.300)" in blocking, (overlapped,
                                                                                                   blocking)
    assert len(overlapped.split()) == len(blocking.split())
