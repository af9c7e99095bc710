"""The three DGNN layers (IBM §5.1–5.3) against hand-written numpy computations.

Every reference here is written from the paper / the layer docstrings and
computed in float64 numpy from the layer's own parameters, so a test fails if
the layer computes a different function, not only if it changes shape.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.nn.models import (
    DGNN,
    CDGCNLayer,
    EvolveGCNHLayer,
    EvolveGCNOLayer,
    TMGCNLayer,
    available_models,
    build_model,
    m_transform,
)

DT = torch.float64


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell_np(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """One LSTM step in numpy, torch's gate order (i, f, g, o)."""
    gates = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    i, f, g, o = np.split(gates, 4, axis=-1)
    i, f, g, o = _sigmoid(i), _sigmoid(f), np.tanh(g), _sigmoid(o)
    c = f * c + i * g
    return o * np.tanh(c), c


def randn(*shape, seed=0) -> torch.Tensor:
    """A float64 normal tensor from its own seeded generator."""
    return torch.randn(*shape, dtype=DT, generator=torch.Generator().manual_seed(seed))


def make_layer(kind: str, fin: int = 4, fout: int = 3, window: int = 3, seed: int = 0):
    """One float64 layer of the given kind, initialised from a fixed torch seed."""
    torch.manual_seed(seed)
    if kind == "cdgcn":
        return CDGCNLayer(fin, fout).to(DT)
    if kind == "evolvegcn_o":
        return EvolveGCNOLayer(fin, fout).to(DT)
    if kind == "evolvegcn_h":
        return EvolveGCNHLayer(fin, fout).to(DT)
    return TMGCNLayer(fin, fout, window).to(DT)


def m_matrix(T: int, w: int) -> np.ndarray:
    """IBM §5.3's M with 0-based t: M_tk = 1/min(w, t+1) for max(0, t-w+1) <= k <= t."""
    m = np.zeros((T, T))
    for t in range(T):
        for k in range(max(0, t - w + 1), t + 1):
            m[t, k] = 1.0 / min(w, t + 1)
    return m


# --------------------------------------------------------------------------------------------
# CD-GCN (IBM §5.1)
# --------------------------------------------------------------------------------------------


def test_cdgcn_spatial_is_relu_of_skip_concat():
    """IBM §5.1: spatial = relu([ÃX ; ÃX Wᵀ + b])."""
    layer = make_layer("cdgcn", 4, 3)
    ax = randn(11, 4, seed=1)
    w, b = _np(layer.lin.weight), _np(layer.lin.bias)
    ref = np.maximum(np.concatenate([_np(ax), _np(ax) @ w.T + b], axis=1), 0.0)
    out = layer.spatial(ax, 0, None)
    assert layer.spatial_features == 4 + 3
    np.testing.assert_allclose(_np(out), ref, rtol=1e-13, atol=1e-15)
    assert (ref[:, :4] == 0).any() and (ref[:, :4] > 0).any()  # precondition: relu acts on the skip half too


def _cdgcn_lstm_np(layer: CDGCNLayer, y: np.ndarray, h=None, c=None):
    p = {k: _np(v) for k, v in layer.lstm.named_parameters()}
    n, f = y.shape[1], layer.out_features
    h = np.zeros((n, f)) if h is None else h
    c = np.zeros((n, f)) if c is None else c
    outs = []
    for t in range(y.shape[0]):
        h, c = lstm_cell_np(y[t], h, c, p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"])
        outs.append(h)
    return np.stack(outs), h, c


def test_cdgcn_temporal_is_hand_unrolled_lstm():
    """The temporal op is an LSTM unrolled by hand with the layer's own weights; final (h, c) too."""
    layer = make_layer("cdgcn", 4, 3)
    y = randn(6, 9, 7, seed=2)
    out, (h, c) = layer.temporal(y)
    ref, h_ref, c_ref = _cdgcn_lstm_np(layer, _np(y))
    np.testing.assert_allclose(_np(out), ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_np(h)[0], h_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_np(c)[0], c_ref, rtol=1e-12, atol=1e-14)


def test_cdgcn_temporal_continues_from_given_state():
    """A given (h0, c0) is used, and time blocks with the state carried equal one run."""
    layer = make_layer("cdgcn", 4, 3)
    y = randn(5, 6, 7, seed=3)
    h0, c0 = randn(1, 6, 3, seed=4), randn(1, 6, 3, seed=5)
    out, _ = layer.temporal(y, (h0, c0))
    ref, _, _ = _cdgcn_lstm_np(layer, _np(y), _np(h0)[0], _np(c0)[0])
    np.testing.assert_allclose(_np(out), ref, rtol=1e-12, atol=1e-14)
    # time blocks with the state carried give the unblocked sequence (SPEC S2)
    for k in range(1, 5):
        a, s = layer.temporal(y[:k], (h0, c0))
        b, _ = layer.temporal(y[k:], s)
        torch.testing.assert_close(torch.cat([a, b]), out, rtol=1e-13, atol=1e-15)


def test_cdgcn_temporal_empty_vertex_batch_stays_connected():
    """A rank with no vertex rows gets an empty output that still back-propagates."""
    layer = make_layer("cdgcn", 4, 3)
    y = torch.zeros(5, 0, 7, dtype=DT, requires_grad=True)
    out, _ = layer.temporal(y)
    assert out.shape == (5, 0, 3) and out.requires_grad
    out.sum().backward()
    assert y.grad is not None and y.grad.shape == y.shape


# --------------------------------------------------------------------------------------------
# EvolveGCN-O (IBM §5.2)
# --------------------------------------------------------------------------------------------


def _evolve_np(layer: EvolveGCNOLayer, steps: int) -> list[np.ndarray]:
    """(W_t, C_t) = LSTMCell(input W_{t-1}, state (W_{t-1}, C_{t-1})), W_0 = w0, C_0 = 0."""
    p = {k: _np(v) for k, v in layer.cell.named_parameters()}
    w, c = _np(layer.w0), np.zeros_like(_np(layer.w0))
    out = []
    for _ in range(steps):
        w, c = lstm_cell_np(w, w, c, p["weight_ih"], p["weight_hh"], p["bias_ih"], p["bias_hh"])
        out.append(w)
    return out


def test_evolvegcn_time_params_are_hand_unrolled_lstm_cell():
    """IBM §5.2: W_t = LSTMCell(W_{t-1}, (W_{t-1}, C_{t-1})) from w0, C_0 = 0."""
    layer = make_layer("evolvegcn_o", 5, 3)
    ws = layer.time_params(7)
    ref = _evolve_np(layer, 7)
    assert len(ws) == 7
    for w, r in zip(ws, ref, strict=True):
        np.testing.assert_allclose(_np(w), r, rtol=1e-12, atol=1e-14)
    # W_0 is the first LSTM output, not w0 itself (docstring: "the LSTM's t+1-th output")
    assert not np.allclose(_np(ws[0]), _np(layer.w0))


def test_evolvegcn_time_params_prefix_is_bitwise_stable():
    """Ranks compute W_t up to their own horizon; W_t must not depend on that horizon."""
    layer = make_layer("evolvegcn_o", 5, 3)
    full = layer.time_params(9)
    for k in (1, 4, 9):
        part = layer.time_params(k)
        assert all(torch.equal(a, b) for a, b in zip(part, full[:k], strict=True))
    assert layer.time_params(0) == []


def test_evolvegcn_spatial_uses_the_evolved_weight_of_step_t():
    """On snapshot t, spatial is relu(ÃX W_t); temporal is the identity."""
    layer = make_layer("evolvegcn_o", 5, 3)
    ws = layer.time_params(4)
    ax = randn(8, 5, seed=6)
    for t in range(4):
        ref = np.maximum(_np(ax) @ _np(ws[t]), 0.0)
        np.testing.assert_allclose(_np(layer.spatial(ax, t, ws)), ref, rtol=1e-13, atol=1e-15)
    assert layer.temporal_mixing is False
    y = randn(4, 8, 3, seed=7)
    out, state = layer.temporal(y)
    assert out is y and state is None  # no per-vertex RNN: the LSTM runs over weights


def test_evolvegcn_glorot_bound():
    """w0 is Glorot-uniform: |w0| <= sqrt(6 / (F + F'))."""
    layer = make_layer("evolvegcn_o", 50, 30)
    bound = np.sqrt(6.0 / 80)
    w0 = _np(layer.w0)
    assert np.abs(w0).max() <= bound and np.abs(w0).max() > 0.9 * bound


def test_evolvegcn_two_epochs_same_module_backward_twice_is_fine():
    """Three epochs on one module: no 'backward through the graph a second time'."""
    torch.manual_seed(0)
    model = build_model("evolvegcn_o", in_features=4, hidden=3, layers=2, window=1).to(DT)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    T, N = 5, 7
    adj = [torch.eye(N, dtype=DT) + 0.1 * randn(N, N, seed=10 + t).abs() for t in range(T)]
    x = [randn(N, 4, seed=20 + t) for t in range(T)]
    losses = []
    for _epoch in range(3):
        opt.zero_grad()
        h = x
        for layer in model.layers:
            tp = layer.time_params(T)
            h = [layer.spatial(adj[t] @ h[t], t, tp) for t in range(T)]
        loss = sum((z - 0.5).pow(2).sum() for z in h)
        loss.backward()  # a weight kept on the module across epochs would fail here the second time
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        opt.step()
        losses.append(float(loss))
    assert losses[0] != losses[1] != losses[2]


# --------------------------------------------------------------------------------------------
# TM-GCN (IBM §5.3)
# --------------------------------------------------------------------------------------------


def test_tmgcn_spatial_is_relu_linear():
    """IBM Eq. 2 with bias: spatial = relu(ÃX Wᵀ + b)."""
    layer = make_layer("tmgcn", 4, 3)
    ax = randn(10, 4, seed=8)
    ref = np.maximum(_np(ax) @ _np(layer.lin.weight).T + _np(layer.lin.bias), 0.0)
    np.testing.assert_allclose(_np(layer.spatial(ax, 2, None)), ref, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("w", [1, 2, 3, 5, 12])
def test_tmgcn_temporal_is_windowed_mean(w):
    """IBM §5.3: temporal = M ×₁ Y with M_tk = 1/min(w, t+1); backward = Mᵀ ×₁ G."""
    T = 9
    layer = make_layer("tmgcn", 4, 3, window=w)
    y = randn(T, 6, 3, seed=9)
    out, state = layer.temporal(y)
    ref = np.einsum("tk,knf->tnf", m_matrix(T, w), _np(y))
    np.testing.assert_allclose(_np(out), ref, rtol=1e-13, atol=1e-15)
    # the state is the last w-1 inputs (the window's tail)
    assert torch.equal(state, y[max(0, T - (w - 1)) :]) if w > 1 else state.shape[0] == 0
    # the functional form agrees and the backward is Mᵀ G
    assert torch.equal(m_transform(y, w), out)
    yg = y.clone().requires_grad_(True)
    g = randn(T, 6, 3, seed=10)
    m_transform(yg, w).backward(g)
    np.testing.assert_allclose(_np(yg.grad), np.einsum("tk,tnf->knf", m_matrix(T, w), _np(g)), rtol=1e-13, atol=1e-15)


def test_tmgcn_m_transform_gradcheck():
    """Gradcheck of the hand-written adjoint, history included."""
    y = randn(6, 2, 2, seed=11).requires_grad_(True)
    h = randn(2, 2, 2, seed=12).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda y, h: m_transform(y, 3, h), (y, h))


@pytest.mark.parametrize(("T", "h", "w"), [(6, 2, 3), (1, 2, 3), (1, 0, 3), (2, 1, 4), (5, 0, 3), (3, 4, 5), (7, 2, 1),
                                         (4, 0, 2)])
def test_tmgcn_history_read_in_place_is_the_joined_transform_bit_for_bit(T, h, w):
    """m_transform(y, w, history) reads the history where it is: the same bits, forward and backward, as the
    transform of history and y joined (the rows of y), and the window's tail is the joined one's; both are
    each step's terms added in k order onto y's (k = 0, 1, ...) and divided once, as a loop per step adds them."""
    y = randn(T, 5, 3, seed=13).float().requires_grad_(True)
    hist = randn(h, 5, 3, seed=14).float().requires_grad_(True)
    g = randn(T, 5, 3, seed=15).float()
    out = m_transform(y, w, hist)
    out.backward(g)
    y2, hist2 = y.detach().clone().requires_grad_(True), hist.detach().clone().requires_grad_(True)
    joined = torch.cat([hist2, y2])
    ref = m_transform(joined, w)[h:]
    ref.backward(g)
    assert torch.equal(out, ref)
    assert torch.equal(y.grad, y2.grad) and torch.equal(hist.grad, hist2.grad)
    full = joined.detach()
    naive = []
    for t in range(T):
        acc = full[h + t].clone()
        for k in range(1, min(w, h + t + 1)):
            acc += full[h + t - k]
        naive.append(acc / min(w, h + t + 1))
    if T:
        assert torch.equal(out.detach(), torch.stack(naive))
        # y's gradient: the terms g_t / c_t of every step that reads y_s, added in k order onto step s's own
        gs = g / torch.tensor([min(w, h + t + 1) for t in range(T)], dtype=g.dtype).view(T, 1, 1)
        grad = []
        for t in range(T):
            acc = gs[t].clone()
            for k in range(1, min(w, T - t)):
                acc += gs[t + k]
            grad.append(acc)
        assert torch.equal(y.grad, torch.stack(grad))
    _, tail = make_layer("tmgcn", 4, 3, window=w).temporal(y.detach(), hist.detach())
    assert torch.equal(tail, joined.detach()[max(0, T + h - (w - 1)) :])


def _blocked(layer, y, cuts):
    """Run ``temporal`` over time blocks split at ``cuts`` with the state carried."""
    outs, state = [], None
    bounds = [0, *cuts, y.shape[0]]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        o, state = layer.temporal(y[a:b], state)
        outs.append(o)
    return torch.cat(outs), state


@pytest.mark.parametrize("w", [1, 2, 3, 5])
def test_tmgcn_time_blocks_reproduce_unblocked_output_and_gradient(w):
    """Blocks with the state carried: bitwise output and state, gradients to 1e-15."""
    T = 9
    layer = make_layer("tmgcn", 4, 3, window=w)
    y = randn(T, 5, 3, seed=13)
    g = randn(T, 5, 3, seed=14)
    y_full = y.clone().requires_grad_(True)
    out_full, st_full = layer.temporal(y_full)
    out_full.backward(g)
    # every single cut (before, at and after w) and a chain of short blocks
    splits = [[k] for k in range(1, T)] + [[1, 2, 3, 4, 5, 6, 7, 8], [2, 4, 7]]
    firsts = [c[0] for c in splits]
    assert max(firsts) > w and (w == 1 or min(firsts) < w)  # precondition: cuts before and after w
    for cuts in splits:
        yb = y.clone().requires_grad_(True)
        out_b, st_b = _blocked(layer, yb, cuts)
        assert torch.equal(out_b, out_full), cuts
        assert torch.equal(st_b, st_full), cuts
        out_b.backward(g)
        # the same terms, summed in another association at block boundaries: equal to the last ulp or so
        torch.testing.assert_close(yb.grad, y_full.grad, rtol=1e-15, atol=1e-15)


# --------------------------------------------------------------------------------------------
# Vertex-batch invariance of the temporal op (what lets P ranks reproduce P = 1)
# --------------------------------------------------------------------------------------------

SUBSETS = [[0], [3], [2, 5, 6], [9, 1, 4], list(range(4, 19)), list(range(1, 24, 2))]


@pytest.mark.parametrize("w", [1, 3, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tmgcn_temporal_is_vertex_batch_invariant_bitwise(w, dtype):
    """A vertex's M-transform output is the same bits whatever vertices share its batch."""
    layer = make_layer("tmgcn", 4, 3, window=w).to(dtype)
    y = randn(7, 24, 3, seed=15).to(dtype)
    full, _ = layer.temporal(y)
    head, st = layer.temporal(y[:3])
    tail, _ = layer.temporal(y[3:], st)
    for idx in SUBSETS:
        sub, _ = layer.temporal(y[:, idx])
        assert torch.equal(sub, full[:, idx]), idx
        h2, s2 = layer.temporal(y[:3, idx])
        t2, _ = layer.temporal(y[3:, idx], s2)
        assert torch.equal(h2, head[:, idx]) and torch.equal(t2, tail[:, idx]), idx


def test_evolvegcn_temporal_is_vertex_batch_invariant_bitwise():
    """EvolveGCN-O's temporal is the identity and its W_t recurrence is deterministic."""
    layer = make_layer("evolvegcn_o", 4, 3)
    y = randn(7, 24, 3, seed=16)
    full, _ = layer.temporal(y)
    for idx in SUBSETS:
        assert torch.equal(layer.temporal(y[:, idx])[0], full[:, idx])
    # the time recurrence (run by every rank on its own) is deterministic to the bit
    assert all(torch.equal(a, b) for a, b in zip(layer.time_params(6), layer.time_params(6), strict=True))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.float64, 1e-14)])
def test_cdgcn_temporal_is_vertex_batch_invariant_to_rounding(dtype, tol):
    """CD-GCN's LSTM output per vertex depends on the batch only at rounding level."""
    layer = make_layer("cdgcn", 4, 3).to(dtype)
    y = randn(7, 24, 7, seed=17).to(dtype)
    full, _ = layer.temporal(y)
    for idx in SUBSETS:
        torch.testing.assert_close(layer.temporal(y[:, idx])[0], full[:, idx], rtol=tol, atol=tol)


# --------------------------------------------------------------------------------------------
# reset_parameters and build_model
# --------------------------------------------------------------------------------------------


def assert_reset_resets_everything(module: torch.nn.Module) -> None:
    """Perturb every parameter, reset from a fixed seed, and compare with a reset from the same seed."""
    torch.manual_seed(1234)
    module.reset_parameters()
    ref = {k: v.detach().clone() for k, v in module.state_dict().items()}
    assert ref, "module has no parameters"
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.rand_like(p) + 0.5)  # every element moves
    torch.manual_seed(1234)
    module.reset_parameters()
    for k, v in module.state_dict().items():
        assert torch.equal(v, ref[k]), f"{k} not reset"
    # and every parameter is actually drawn from the generator (a different seed changes it)
    torch.manual_seed(99)
    module.reset_parameters()
    for k, v in module.state_dict().items():
        assert not torch.equal(v, ref[k]), f"{k} does not depend on the seed"


@pytest.mark.parametrize("kind", ["cdgcn", "evolvegcn_o", "evolvegcn_h", "tmgcn"])
def test_layer_reset_parameters_resets_every_parameter(kind):
    """Each layer's reset_parameters redraws every parameter from the torch generator."""
    assert_reset_resets_everything(make_layer(kind))


@pytest.mark.parametrize("name", ["cdgcn", "evolvegcn_o", "evolvegcn_h", "tmgcn"])
def test_model_reset_parameters_resets_every_parameter(name):
    """DGNN.reset_parameters redraws every parameter of every layer."""
    assert_reset_resets_everything(build_model(name, in_features=3, hidden=4, layers=2, window=2))


EXPECTED = {"cdgcn": CDGCNLayer, "evolvegcn_o": EvolveGCNOLayer, "tmgcn": TMGCNLayer}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_build_model_widths(name):
    """build_model chains in -> hidden -> ... -> hidden with the right layer class and widths."""
    model = build_model(name, in_features=5, hidden=4, layers=3, window=2)
    assert isinstance(model, DGNN) and len(model.layers) == 3 and model.out_features == 4
    for i, layer in enumerate(model.layers):
        fin = 5 if i == 0 else 4
        assert type(layer) is EXPECTED[name]
        assert (layer.in_features, layer.out_features) == (fin, 4)
        if name == "cdgcn":
            assert layer.spatial_features == fin + 4
            assert tuple(layer.lin.weight.shape) == (4, fin)
            assert (layer.lstm.input_size, layer.lstm.hidden_size) == (fin + 4, 4)
        elif name == "evolvegcn_o":
            assert layer.spatial_features == 4 and tuple(layer.w0.shape) == (fin, 4)
            assert (layer.cell.input_size, layer.cell.hidden_size) == (4, 4)
        else:
            assert layer.spatial_features == 4 and layer.window == 2
            assert tuple(layer.lin.weight.shape) == (4, fin)
    # consecutive layers chain: layer l's output width is layer l+1's input width
    for a, b in zip(model.layers[:-1], model.layers[1:], strict=True):
        assert a.out_features == b.in_features


def test_build_model_unknown_name_lists_choices():
    """An unknown model name is a KeyError that lists the registered names."""
    assert set(EXPECTED) <= set(available_models())
    with pytest.raises(KeyError) as e:
        build_model("gcrn", in_features=2, hidden=2, layers=1, window=1)
    msg = str(e.value)
    assert "gcrn" in msg
    for name in available_models():
        assert name in msg
