"""SavedTensorMeter: activation bytes counted once per storage, released with the graph."""

from __future__ import annotations

import gc

import torch

from hpcdgnn.metrics.memory import SavedTensorMeter


def test_counts_saved_storages_once_and_releases_them():
    w = torch.nn.Parameter(torch.randn(100, 100))
    x = torch.randn(1000, 100)
    with SavedTensorMeter() as m:
        y = torch.relu(x @ w)  # mm saves x (not w: parameters are not activations); relu saves y
        z = (y * y).sum()  # mul saves y twice: the same storage, counted once
        assert m.current == x.nbytes + y.nbytes == 800_000
        z.backward()
        del y, z
        gc.collect()
        assert m.current == 0
        assert m.peak == 800_000
        m.reset_peak()
        assert m.peak == 0
        with torch.no_grad():
            torch.relu(x @ w)  # nothing is saved without autograd
        assert m.peak == 0


def test_views_share_their_base_storage():
    x = torch.randn(64, 1000, requires_grad=True)
    with SavedTensorMeter() as m:
        y = x * 2
        parts = y.unbind(0)
        out = sum((p * p).sum() for p in parts)  # each p*p saves a view of y's storage
        assert m.current == y.nbytes
        out.backward()
