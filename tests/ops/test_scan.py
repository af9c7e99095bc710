"""The sequence-level LSTM / GRU scans equal torch's modules: outputs, final states and every gradient."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpcdgnn.nn.temporal_fusion import fused_rnn, pack_sequences
from hpcdgnn.ops.scan import run_torch_rnn, self_fed_lstm, supports


def _state(cls, layers: int, batch: int, hidden: int, grad: bool = True):
    def one():
        return torch.randn(layers, batch, hidden, dtype=torch.float64, requires_grad=grad)

    return (one(), one()) if cls is nn.LSTM else one()


def _flat(state) -> tuple:
    return state if isinstance(state, tuple) else (state,)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("initial", [False, True])
def test_scan_matches_torch(cls, layers, initial):
    """Same outputs, final states and gradients (input, initial state, all weights) as the module, float64."""
    torch.manual_seed(layers)
    rnn = cls(5, 7, num_layers=layers).double()
    x = torch.randn(6, 4, 5, dtype=torch.float64, requires_grad=True)
    state = _state(cls, layers, 4, 7) if initial else None
    y_ref, s_ref = rnn(x, state)
    y, s = run_torch_rnn(rnn, x, state)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-13)
    for a, b in zip(_flat(s), _flat(s_ref), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)
    w = torch.randn_like(y)
    leaves = [x, *(_flat(state) if initial else ()), *rnn.parameters()]

    def loss(y, s):
        return (y * w).sum() + sum((q * q).sum() for q in _flat(s))

    for g, g_ref in zip(torch.autograd.grad(loss(y, s), leaves), torch.autograd.grad(loss(y_ref, s_ref), leaves),
                        strict=True):
        torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_masked_scan_restarts_each_sequence(cls):
    """With a reset mask (temporal fusion, DGC Eq. 4-5) every packed sequence equals the module run on it alone."""
    torch.manual_seed(3)
    rnn = cls(3, 4).double()
    lengths = [5, 2, 3, 1, 4]
    seqs = [torch.randn(n, 3, dtype=torch.float64) for n in lengths]
    pk = pack_sequences(torch.tensor(lengths).numpy())
    x = torch.zeros(pk.steps, pk.lanes, 3, dtype=torch.float64)
    for k, s in enumerate(seqs):
        x[pk.start[k] : pk.start[k] + lengths[k], pk.lane[k]] = s
    x.requires_grad_(True)
    y = fused_rnn(rnn, x, pk.reset_mask())
    for k, s in enumerate(seqs):
        ref, _ = rnn(s.unsqueeze(1))
        torch.testing.assert_close(y[pk.start[k] : pk.start[k] + lengths[k], pk.lane[k]], ref[:, 0], rtol=0,
                                   atol=1e-13)
    # gradients through the mask: a sequence's loss reaches no other sequence's inputs
    g = torch.autograd.grad(y[pk.start[0] : pk.start[0] + lengths[0], pk.lane[0]].sum(), x)[0]
    others = torch.ones_like(g, dtype=torch.bool)
    others[pk.start[0] : pk.start[0] + lengths[0], pk.lane[0]] = False
    assert g[others].abs().max() == 0 and g[~others].abs().max() > 0


def _self_fed_equals_cell_loop(hidden: int, steps: int, device: torch.device, atol: float) -> torch.Tensor:
    """The scan's outputs, final (w, c) and every gradient equal ``steps`` calls of the LSTMCell, all on
    ``device``; returns the outputs (their ``grad_fn`` tells where the scan ran)."""
    cell = nn.LSTMCell(hidden, hidden).double().to(device)
    w0 = torch.randn(3, hidden, dtype=torch.float64, device=device, requires_grad=True)
    c0 = torch.zeros(3, hidden, dtype=torch.float64, device=device)
    w, c, outs = w0, c0, []
    for _ in range(steps):
        w, c = cell(w, (w, c))
        outs.append(w)
    y_ref = torch.stack(outs)
    y, (w_end, c_end) = self_fed_lstm(cell, w0, c0, steps)
    assert y.device == w_end.device == c_end.device == w0.device
    torch.testing.assert_close(y, y_ref, rtol=0, atol=atol)
    torch.testing.assert_close(c_end, c, rtol=0, atol=atol)
    wt = torch.randn_like(y)
    leaves = [w0, *cell.parameters()]
    grads = torch.autograd.grad((y * wt).sum() + (c_end * c_end).sum(), leaves)
    refs = torch.autograd.grad((y_ref * wt).sum() + (c * c).sum(), leaves)
    for g, g_ref in zip(grads, refs, strict=True):
        assert g.device == w0.device
        torch.testing.assert_close(g, g_ref, rtol=0, atol=10 * atol)
    return y


def test_self_fed_lstm_is_the_cell_loop():
    """EvolveGCN-O's W_t = LSTM(W_{t-1}, (W_{t-1}, C_{t-1})): the scan equals T calls of the LSTMCell."""
    torch.manual_seed(1)
    _self_fed_equals_cell_loop(7, 5, torch.device("cpu"), atol=1e-13)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the host scan serves GPU tensors)")
@pytest.mark.parametrize("hidden", [7, 160])  # below and above HOST_SCAN_MAX_MACS: host scan, GPU scan
def test_self_fed_lstm_on_gpu_is_the_cell_loop(hidden):
    """On a GPU the small scan runs on the host (copied down and up through autograd): outputs on the GPU,
    values and every gradient equal to the cell loop on the GPU, for a scan on either side of the limit."""
    from hpcdgnn.ops import scan as recurrent

    assert (3 * hidden * 4 * hidden <= recurrent.HOST_SCAN_MAX_MACS) == (hidden == 7)
    torch.manual_seed(2)
    y = _self_fed_equals_cell_loop(hidden, 6, torch.device("cuda", torch.cuda.current_device()), atol=1e-12)
    # the host scan's outputs come up to the GPU by a copy; the GPU scan's end in a transpose
    assert (type(y.grad_fn).__name__ == "ToCopyBackward0") == (hidden == 7), y.grad_fn


def test_supports_only_plain_modules():
    """Bidirectional, batch-first, projected or bias-free RNNs go to torch itself."""
    assert supports(nn.LSTM(3, 4)) and supports(nn.GRU(3, 4, num_layers=2))
    for rnn in (nn.LSTM(3, 4, bidirectional=True), nn.GRU(3, 4, batch_first=True), nn.LSTM(3, 4, proj_size=2),
                nn.LSTM(3, 4, bias=False), nn.RNN(3, 4)):
        assert not supports(rnn)
