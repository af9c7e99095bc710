"""EvolveGCN-H's top-k summary (hpcdgnn/nn/pool.py) and weight recurrence, in one process."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.nn.models import build_model
from hpcdgnn.nn.models.evolvegcn import EvolveGCNHLayer
from hpcdgnn.nn.pool import topk_pool, topk_pool_reference

DT = torch.float64


@pytest.fixture(scope="module")
def comm():
    return Communicator()


def _score(p):
    return lambda x: (x @ p) / p.norm()


def test_topk_pool_equals_torch_topk_per_snapshot(comm):
    """Rows given in any order, keyed by (t, v): each step's summary is torch.topk's, values and gradients."""
    g = torch.Generator().manual_seed(0)
    S, N, F, k = 4, 9, 3, 4
    x = torch.randn(S * N, F, generator=g, dtype=DT, requires_grad=True)
    p = torch.randn(F, generator=g, dtype=DT, requires_grad=True)
    keys = np.arange(S * N, dtype=np.int64) + 2 * N  # steps 2..5
    perm = torch.from_numpy(np.random.default_rng(1).permutation(S * N))
    z = topk_pool(x[perm], keys[perm.numpy()], N, 2, 2 + S, k, _score(p), comm)
    ref = torch.stack([topk_pool_reference(x[s * N:(s + 1) * N], k, _score(p)) for s in range(S)])
    torch.testing.assert_close(z, ref, rtol=0, atol=0)
    w = torch.randn(S, k, F, generator=g, dtype=DT)
    gx, gp = torch.autograd.grad((z * w).sum(), (x, p))
    rx, rp = torch.autograd.grad((ref * w).sum(), (x, p))
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(gp, rp)


def test_topk_pool_breaks_ties_by_vertex_id_and_pads_short_steps(comm):
    """Equal scores go to the lower vertex id whatever the row order; a step with fewer than k rows repeats its last."""
    x = torch.tensor([[1.0], [2.0], [1.0], [1.0]], dtype=DT)  # vertices 3, 0, 1, 2 of step 0
    keys = np.array([3, 0, 1, 2])
    z = topk_pool(x, keys, 4, 0, 1, 3, lambda r: torch.ones(r.shape[0], dtype=DT), comm)
    # all scores 1: vertices 0, 1, 2 (rows 1, 2, 3), each times tanh(1)
    torch.testing.assert_close(z[0, :, 0], torch.tensor([2.0, 1.0, 1.0], dtype=DT) * np.tanh(1.0))
    short = topk_pool(x[:2], keys[:2], 4, 0, 1, 3, lambda r: r[:, 0], comm)
    # two rows (v 3 score 1, v 0 score 2): v 0, v 3, then v 3 again
    torch.testing.assert_close(short[0, :, 0], torch.tensor([2 * np.tanh(2.0), np.tanh(1.0), np.tanh(1.0)], dtype=DT))


def test_evolvegcn_h_weights_over_blocks_equal_one_pass():
    """W_t of steps 0..8 in two blocks, the state carried (SPEC S2), equal one block's; W_t has shape (F, F')."""
    torch.manual_seed(0)
    layer = EvolveGCNHLayer(5, 3).to(DT)
    pooled = torch.randn(9, 3, 5, dtype=DT)
    full, _ = layer.time_params_block(0, 9, None, pooled)
    a, state = layer.time_params_block(0, 4, None, pooled[:4])
    b, _ = layer.time_params_block(4, 9, state, pooled[4:])
    assert full.stacked.shape == (9, 5, 3)
    torch.testing.assert_close(torch.cat([a.stacked, b.stacked]), full.stacked)
    with pytest.raises(ValueError, match="summaries"):
        layer.time_params_block(0, 9, None, pooled[:4])
    with pytest.raises(ValueError, match="carried"):
        layer.time_params_block(4, 9, None, pooled[4:])


def test_evolvegcn_h_builds_pooling_layers():
    """Each layer pools k = F' rows of its input (the columns of W_t) and reads X_t itself (not precomputed)."""
    model = build_model("evolvegcn_h", in_features=5, hidden=4, layers=2)
    for i, layer in enumerate(model.layers):
        assert (layer.in_features, layer.out_features, layer.pool_rows) == (5 if i == 0 else 4, 4, 4)
        assert not layer.precomputable and not layer.temporal_mixing
        assert tuple(layer.w0.shape) == (layer.in_features, 4) and layer.gru.input_size == layer.in_features
