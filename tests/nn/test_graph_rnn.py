"""Integrated graph-RNN cells (issue 14 item 2) against dense numpy references of their equations, float64.

Per cell: the module's output over a small random dynamic graph (directed, weighted, with input
self-loops and a vertex without edges) equals a numpy implementation written gate by gate from the
cell's docstring (dense L̂, P_f, P_b, Ã; one filter per basis term and gate) to 1e-10; the single-step
API and a run in two blocks from the carried state give the same; gradcheck on a tiny case. PyG Temporal's
GConvLSTM, GConvGRU and TGCN (never a project dependency): with their weights the cells give their outputs,
stored in ``pygt_reference.pt`` (PyGT commit adefe44, torch_geometric 2.8.1) and, where PyGT imports
(``/tmp/pygt-site`` + ``/tmp/pygt-src``, or ``HPCDGNN_PYGT_PATH``), checked against a live run first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hpcdgnn.nn.conv.cheb import cheb_basis, scaled_laplacian
from hpcdgnn.nn.conv.diffusion import diffusion_basis, transitions
from hpcdgnn.nn.layout import StepGraph
from hpcdgnn.nn.models import build_model, needs_step_graphs
from hpcdgnn.nn.models.dcrnn import DCRNNLayer
from hpcdgnn.nn.models.gconv_gru import GConvGRULayer
from hpcdgnn.nn.models.gconv_lstm import GConvLSTMLayer
from hpcdgnn.nn.models.gcrn_m1 import GCRNM1Layer
from hpcdgnn.nn.models.tgcn_cell import TGCNCellLayer
from hpcdgnn.ops.sparse import gcn_norm, spmm

T, N, F, H = 4, 7, 3, 5
DT = torch.float64


def _dense_graphs(seed: int = 0, symmetric: bool = False, self_loops: bool = True) -> list[np.ndarray]:
    """T weighted N×N adjacencies; vertex N-1 has no edges; some input self-loops unless told otherwise."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(T):
        a = (rng.random((N, N)) < 0.35) * (rng.random((N, N)) + 0.5)
        if symmetric:
            a = np.triu(a, 1)
            a = a + a.T
        if not self_loops:
            np.fill_diagonal(a, 0.0)
        a[N - 1, :] = a[:, N - 1] = 0.0
        out.append(a)
    return out


def _step(t: int, a: np.ndarray) -> StepGraph:
    rows, cols = np.nonzero(a)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=a.shape[0]))])
    return StepGraph(t, torch.from_numpy(indptr), torch.from_numpy(cols.astype(np.int32)),
                     torch.from_numpy(a[rows, cols].astype(np.float32)))


def _np32(a: np.ndarray) -> np.ndarray:
    """Weights as the shards store them (float32), in float64."""
    return a.astype(np.float32).astype(np.float64)


# --- dense references --------------------------------------------------------------------------------------


def lhat(a):
    a = _np32(a).copy()
    np.fill_diagonal(a, 0.0)
    d = a.sum(1)
    dinv = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return -(dinv[:, None] * a * dinv[None, :])


def cheb_terms(L, x, K):
    ts = [x, L @ x]
    while len(ts) < K:
        ts.append(2 * L @ ts[-1] - ts[-2])
    return ts[:K]


def diffusion_terms(a, x, K):
    a = _np32(a)
    do, di = a.sum(1), a.sum(0)
    pf = np.where(do[:, None] > 0, a / np.where(do > 0, do, 1.0)[:, None], 0.0)
    pb = np.where(di[:, None] > 0, a.T / np.where(di > 0, di, 1.0)[:, None], 0.0)
    out = [x]
    for p in (pf, pb):
        y = x
        for _ in range(1, K):
            y = p @ y
            out.append(y)
    return out


def a_tilde(a):
    a = _np32(a).copy()
    np.fill_diagonal(a, 0.0)
    d = 1.0 + a.sum(1)
    return (a + np.eye(N)) / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def conv(terms, w, fin, gate):
    """Σ_k term_k Θ_{k,gate}: filter block k of gate ``gate`` from a (B·fin, gates·H) weight."""
    return sum(tk @ w[k * fin : (k + 1) * fin, gate * H : (gate + 1) * H] for k, tk in enumerate(terms))


def p(t):
    return t.detach().numpy()


def ref_gconv_lstm(layer, adj, xs, K):
    wx, wh, b, wc = p(layer.w_x), p(layer.w_h), p(layer.bias), p(layer.w_c)
    h, c, out = np.zeros((N, H)), np.zeros((N, H)), []
    for a, x in zip(adj, xs, strict=True):
        L = lhat(a)
        tx, th = cheb_terms(L, x, K), cheb_terms(L, h, K)
        g = [conv(tx, wx, F, k) + conv(th, wh, H, k) + b[k * H : (k + 1) * H] for k in range(4)]
        i = sig(g[0] + wc[0] * c)
        f = sig(g[1] + wc[1] * c)
        c = f * c + i * np.tanh(g[2])
        o = sig(g[3] + wc[2] * c)
        h = o * np.tanh(c)
        out.append(h)
    return np.stack(out)


def ref_gru(layer, adj, xs, K, terms):
    wx, whzr, whh, b = p(layer.w_x), p(layer.w_hzr), p(layer.w_hh), p(layer.bias)
    h, out = np.zeros((N, H)), []
    for a, x in zip(adj, xs, strict=True):
        tx, th = terms(a, x, K), terms(a, h, K)
        z = sig(conv(tx, wx, F, 0) + conv(th, whzr, H, 0) + b[:H])
        r = sig(conv(tx, wx, F, 1) + conv(th, whzr, H, 1) + b[H : 2 * H])
        cand = np.tanh(conv(tx, wx, F, 2) + conv(terms(a, h * r, K), whh, H, 0) + b[2 * H :])
        h = z * h + (1 - z) * cand
        out.append(h)
    return np.stack(out)


def ref_tgcn_cell(layer, adj, xs):
    wx, wh, b = p(layer.w_x), p(layer.w_h), p(layer.bias)
    h, out = np.zeros((N, H)), []
    for a, x in zip(adj, xs, strict=True):
        ax = a_tilde(a) @ x
        u = sig(ax @ wx[:, :H] + h @ wh[:, :H] + b[:H])
        r = sig(ax @ wx[:, H : 2 * H] + h @ wh[:, H : 2 * H] + b[H : 2 * H])
        c = np.tanh(ax @ wx[:, 2 * H :] + (r * h) @ wh[:, 2 * H :] + b[2 * H :])
        h = u * h + (1 - u) * c
        out.append(h)
    return np.stack(out)


def ref_gcrn_m1(layer, adj, xs, K):
    wx, b = p(layer.w_x), p(layer.bias)
    lstm = layer.lstm
    wi, wh, bi, bh = (p(x) for x in (lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0))
    h, c, out = np.zeros((N, H)), np.zeros((N, H)), []
    for a, x in zip(adj, xs, strict=True):
        y = conv(cheb_terms(lhat(a), x, K), wx, F, 0) + b
        g = y @ wi.T + bi + h @ wh.T + bh  # torch's gate order i, f, g, o
        i, f, gg, o = (g[:, k * H : (k + 1) * H] for k in range(4))
        c = sig(f) * c + sig(i) * np.tanh(gg)
        h = sig(o) * np.tanh(c)
        out.append(h)
    return np.stack(out)


def _layer(kind, K):
    torch.manual_seed(7)
    cls = {"gconv_lstm": GConvLSTMLayer, "gconv_gru": GConvGRULayer, "dcrnn": DCRNNLayer, "gcrn_m1": GCRNM1Layer}
    layer = cls[kind](F, H, K).to(DT)
    with torch.no_grad():  # biases and peepholes start at zero: move them so the test sees them
        layer.bias.uniform_(-0.5, 0.5)
        if kind == "gconv_lstm":
            layer.w_c.uniform_(-0.5, 0.5)
    return layer


def _reference(kind, layer, adj, xs, K):
    if kind == "gconv_lstm":
        return ref_gconv_lstm(layer, adj, xs, K)
    if kind == "gconv_gru":
        return ref_gru(layer, adj, xs, K, lambda a, x, K: cheb_terms(lhat(a), x, K))
    if kind == "dcrnn":
        return ref_gru(layer, adj, xs, K, diffusion_terms)
    return ref_gcrn_m1(layer, adj, xs, K)


# --- the operators -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_operators_match_dense_formulas(K):
    """L̂ and its Chebyshev basis, P_f/P_b and the diffusion basis, from CSR, equal the dense formulas."""
    a = _dense_graphs(3)[0]
    g = _step(0, a)
    x = np.random.default_rng(1).standard_normal((N, F))
    L = scaled_laplacian(0, g.indptr, g.indices, g.values, DT)
    np.testing.assert_allclose(L.a.to_dense().numpy(), lhat(a), rtol=0, atol=1e-15)
    np.testing.assert_allclose(L.a_t.to_dense().numpy(), lhat(a).T, rtol=0, atol=1e-15)
    got = cheb_basis(L, torch.from_numpy(x), K).numpy()
    np.testing.assert_allclose(got, np.concatenate(cheb_terms(lhat(a), x, K), axis=1), rtol=0, atol=1e-12)
    ops = transitions(0, g.indptr, g.indices, g.values, DT)
    got = diffusion_basis(ops, torch.from_numpy(x), K).numpy()
    np.testing.assert_allclose(got, np.concatenate(diffusion_terms(a, x, K), axis=1), rtol=0, atol=1e-12)


# --- the cells against their equations ----------------------------------------------------------------------


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("kind", ["gconv_lstm", "gconv_gru", "dcrnn", "gcrn_m1"])
def test_graph_recurrent_cell_matches_numpy_equations(kind, K):
    adj = _dense_graphs(K)
    xs = np.random.default_rng(K).standard_normal((T, N, F))
    graphs = [_step(t, a) for t, a in enumerate(adj)]
    layer = _layer(kind, K)
    assert layer.graph_recurrent and needs_step_graphs(kind)
    y = torch.from_numpy(xs)
    z, state = layer.temporal(y, None, graphs=graphs)
    want = _reference(kind, layer, adj, xs, K)
    np.testing.assert_allclose(z.detach().numpy(), want, rtol=0, atol=1e-10)
    # two blocks from the carried state (checkpoint blocks, pss): the same values
    z1, s1 = layer.temporal(y[:1], None, graphs=graphs[:1])
    z2, _ = layer.temporal(y[1:], s1, graphs=graphs[1:])
    torch.testing.assert_close(torch.cat([z1, z2]), z, rtol=0, atol=1e-13)
    # the single-step API, step by step
    s = None
    for t in range(T):
        h, s = layer.cell(y[t], graphs[t], s)
        torch.testing.assert_close(h, z[t], rtol=0, atol=1e-13)


@pytest.mark.parametrize("K", [2, 3])
def test_tgcn_cell_matches_numpy_equations(K):
    adj = _dense_graphs(K)
    xs = np.random.default_rng(K).standard_normal((T, N, F))
    torch.manual_seed(3)
    layer = TGCNCellLayer(F, H).to(DT)
    assert not layer.graph_recurrent and not needs_step_graphs("tgcn_cell")
    ax = []
    for t, a in enumerate(adj):
        g = _step(t, a)
        ax.append(spmm(gcn_norm(t, g.indptr, g.indices, g.values, DT), torch.from_numpy(xs[t])))
    y = torch.stack([layer.spatial(a, t, None) for t, a in enumerate(ax)])
    z, _ = layer.temporal(y, None)
    np.testing.assert_allclose(z.detach().numpy(), ref_tgcn_cell(layer, adj, xs), rtol=0, atol=1e-10)
    s = None
    for t in range(T):
        h, s = layer.cell(ax[t], s)
        torch.testing.assert_close(h, z[t], rtol=0, atol=1e-13)


@pytest.mark.parametrize("kind", ["gconv_lstm", "gconv_gru", "dcrnn", "gcrn_m1"])
def test_graph_recurrent_cell_gradcheck(kind):
    """Every parameter's and the input's gradient (the explicit-adjoint sparse products included)."""
    adj = _dense_graphs(5)[:2]
    graphs = [_step(t, a) for t, a in enumerate(adj)]
    layer = _layer(kind, 3)
    class Run(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer.temporal(x, None, graphs=graphs)[0]

    run = Run()
    names = [n for n, _ in run.named_parameters()]
    params = [q.detach().clone().requires_grad_(True) for q in run.parameters()]
    x = torch.randn(2, N, F, dtype=DT, requires_grad=True)

    def f(x, *ps):
        return torch.func.functional_call(run, dict(zip(names, ps, strict=True)), (x,))

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-7, fast_mode=True)


def test_models_build_with_order_and_refuse_missing_graphs():
    model = build_model("gconv_lstm", 3, 4, 2, 1, order=3)
    assert [ly.order for ly in model.layers] == [3, 3] and model.layers[1].in_features == 4
    assert model.layers[0].w_x.shape == (9, 16)
    assert build_model("dcrnn", 3, 4, 1, 1, order=3).layers[0].w_x.shape == (15, 12)
    with pytest.raises(RuntimeError, match="graphs="):
        model.layers[0].temporal(torch.zeros(2, 5, 3))


# --- PyG Temporal with the same weights ------------------------------------------------------------------------
# PyGT is never a dependency. Its cells' randomised parameters and outputs on this module's inputs are stored
# (``pygt_reference.pt``, written by ``python -m tests.nn.test_graph_rnn`` where PyGT imports), so the
# comparison runs everywhere; where PyGT imports, the stored outputs are also checked against a live run.

#: the stored PyGT parameters (state_dict, float64) and outputs per case
REFERENCE = Path(__file__).with_name("pygt_reference.pt")
#: case -> (PyGT class, K or None, the inputs' seeds: graphs, features)
CASES = {"gconv_lstm_2": ("GConvLSTM", 2, 12), "gconv_lstm_3": ("GConvLSTM", 3, 13),
         "gconv_gru_2": ("GConvGRU", 2, 12), "gconv_gru_3": ("GConvGRU", 3, 13), "tgcn": ("TGCN", None, 21)}


def _pygt_module():
    """PyG Temporal's ``nn.recurrent``, or None where it does not import."""
    extra = [p for p in os.environ.get("HPCDGNN_PYGT_PATH", "").split(os.pathsep) if p] or ["/tmp/pygt-site",
                                                                                             "/tmp/pygt-src"]
    if not all(os.path.isdir(d) for d in extra):
        return None
    for d in extra:  # appended: the project's own packages keep precedence
        if d not in sys.path:
            sys.path.append(d)
    try:
        import torch_geometric_temporal.nn.recurrent as rec
    except ImportError:
        return None
    return rec


def _pygt():
    """PyG Temporal's ``nn.recurrent``; skips the test where it does not import (HPCDGNN_PYGT_PATH or
    /tmp/pygt-site + /tmp/pygt-src)."""
    rec = _pygt_module()
    if rec is None:
        pytest.skip("PyG Temporal not available (HPCDGNN_PYGT_PATH or /tmp/pygt-site + /tmp/pygt-src)")
    return rec


def _pyg_edges(a):
    """PyG aggregates into edge_index[1]; hpcdgnn's row u sums over u's out-edges: the reversed edges."""
    rows, cols = np.nonzero(a)
    return torch.from_numpy(np.stack([cols, rows])), torch.from_numpy(_np32(a)[rows, cols])


def _case_inputs(case: str):
    """The case's T graphs (ChebConv's cells get symmetric ones: PyG's takes D on the sending side; TGCN directed,
    weighted, without self-loops, which PyG keeps and hpcdgnn drops) and features (T, N, F)."""
    kind, K, seed = CASES[case]
    adj = _dense_graphs(seed, symmetric=True) if K else _dense_graphs(seed, self_loops=False)
    xs = torch.from_numpy(np.random.default_rng(0 if K else 1).standard_normal((T, N, F)))
    return adj, xs


def _run_pygt(rec, case: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """PyGT's cell of ``case`` with parameters uniform in [−0.5, 0.5] (seed 0), its state dict and outputs (T, N, H)."""
    kind, K, _ = CASES[case]
    adj, xs = _case_inputs(case)
    torch.manual_seed(0)
    cell = (getattr(rec, kind)(F, H, K) if K else getattr(rec, kind)(F, H)).to(DT)
    with torch.no_grad():
        for q in cell.parameters():
            q.uniform_(-0.5, 0.5)
        h = c = torch.zeros(N, H, dtype=DT)  # PyGT's default state is float32
        out = []
        for t, a in enumerate(adj):
            ei, ew = _pyg_edges(a)
            if kind == "GConvLSTM":
                h, c = cell(xs[t], ei, ew.to(DT), h, c)
            else:
                h = cell(xs[t], ei, ew.to(DT), h)
            out.append(h)
    return {k: v.detach().clone() for k, v in cell.state_dict().items()}, torch.stack(out)


def _pygt_reference(case: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The stored PyGT parameters and outputs of ``case``; where PyGT imports, first checked against a live run."""
    stored = torch.load(REFERENCE, weights_only=True)[case]
    rec = _pygt_module()
    if rec is not None:
        params, out = _run_pygt(rec, case)
        assert params.keys() == stored["params"].keys()
        for k, v in params.items():
            torch.testing.assert_close(v, stored["params"][k], rtol=0, atol=0)
        torch.testing.assert_close(out, stored["out"], rtol=0, atol=1e-12)
    return stored["params"], stored["out"]


@pytest.mark.parametrize("K", [2, 3])
def test_gconv_lstm_and_gru_equal_pygt(K):
    """hpcdgnn's GConvLSTM and GConvGRU with PyG Temporal's weights give its outputs to 1e-12 (float64)."""
    p, want = _pygt_reference(f"gconv_lstm_{K}")
    adj, xs = _case_inputs(f"gconv_lstm_{K}")
    graphs = [_step(t, a) for t, a in enumerate(adj)]
    ours = GConvLSTMLayer(F, H, K).to(DT)
    with torch.no_grad():
        for g, name in enumerate("ifco"):
            for k in range(K):
                ours.w_x[k * F : (k + 1) * F, g * H : (g + 1) * H] = p[f"conv_x_{name}.lins.{k}.weight"].T
                ours.w_h[k * H : (k + 1) * H, g * H : (g + 1) * H] = p[f"conv_h_{name}.lins.{k}.weight"].T
            ours.bias[g * H : (g + 1) * H] = p[f"conv_x_{name}.bias"] + p[f"conv_h_{name}.bias"] + p[f"b_{name}"][0]
        ours.w_c.copy_(torch.cat([p["w_c_i"], p["w_c_f"], p["w_c_o"]]))
    z, _ = ours.temporal(xs, None, graphs=graphs)
    torch.testing.assert_close(z, want, rtol=0, atol=1e-12)

    p, want = _pygt_reference(f"gconv_gru_{K}")
    adj, xs = _case_inputs(f"gconv_gru_{K}")
    graphs = [_step(t, a) for t, a in enumerate(adj)]
    ours = GConvGRULayer(F, H, K).to(DT)
    with torch.no_grad():
        for g, name in enumerate("zrh"):
            for k in range(K):
                ours.w_x[k * F : (k + 1) * F, g * H : (g + 1) * H] = p[f"conv_x_{name}.lins.{k}.weight"].T
                wh = ours.w_hzr[:, g * H : (g + 1) * H] if g < 2 else ours.w_hh
                wh[k * H : (k + 1) * H] = p[f"conv_h_{name}.lins.{k}.weight"].T
            ours.bias[g * H : (g + 1) * H] = p[f"conv_x_{name}.bias"] + p[f"conv_h_{name}.bias"]
    z, _ = ours.temporal(xs, None, graphs=graphs)
    torch.testing.assert_close(z, want, rtol=0, atol=1e-12)


def test_tgcn_cell_equals_pygt_tgcn():
    """hpcdgnn's T-GCN cell with PyG Temporal's TGCN weights gives its outputs to 1e-12 (float64)."""
    p, want = _pygt_reference("tgcn")
    adj, xs = _case_inputs("tgcn")
    ours = TGCNCellLayer(F, H).to(DT)
    with torch.no_grad():
        for g, name in enumerate("zrh"):
            w = p[f"linear_{name}.weight"]
            left, right = w[:, :H].T, w[:, H:].T  # [GCN(X), H] @ Wᵀ
            ours.w_x[:, g * H : (g + 1) * H] = p[f"conv_{name}.lin.weight"].T @ left
            ours.bias[g * H : (g + 1) * H] = p[f"conv_{name}.bias"] @ left + p[f"linear_{name}.bias"]
            ours.w_h[:, g * H : (g + 1) * H] = right
    h_ours = None
    for t, a in enumerate(adj):
        g = _step(t, a)
        ax = spmm(gcn_norm(t, g.indptr, g.indices, g.values, DT), xs[t])
        mine, h_ours = ours.cell(ax, h_ours)
        torch.testing.assert_close(mine, want[t], rtol=0, atol=1e-12)


# --- DGNN.forward over a layout that offers step graphs -------------------------------------------------------


class _WholeSnapshots:
    """Snapshots [start, stop) whole on one process, offering their step graphs (what snapshot at P = 1 and
    pss hand the model)."""

    def __new__(cls, graphs, xs, start, stop, layers, states=None):
        from hpcdgnn.nn.layout import Layout

        class L(Layout):
            def spatial(self, layer, li, h, tparams):
                return xs[start:stop] if h is None else h

            def step_graphs(self, li):
                return graphs[start:stop]

            def output(self, h):
                self.last = h
                return {start + j: z for j, z in enumerate(h.unbind(0))}

        return L(start, stop, layers, states)


@pytest.mark.parametrize("kind", ["gconv_lstm", "gconv_gru", "dcrnn", "gcrn_m1"])
def test_forward_stacks_the_cells_and_continues_from_layout_states(kind):
    """DGNN.forward = the cells called layer by layer; two blocks of time from layout.states = one pass."""
    adj = _dense_graphs(4)
    graphs = [_step(t, a) for t, a in enumerate(adj)]
    xs = torch.from_numpy(np.random.default_rng(4).standard_normal((T, N, F)))
    torch.manual_seed(2)
    model = build_model(kind, F, H, 2, 1, order=3).to(DT)
    h = xs
    for layer in model.layers:
        h, _ = layer.temporal(h, None, graphs=graphs)
    whole = model(_WholeSnapshots(graphs, xs, 0, T, 2))
    first = _WholeSnapshots(graphs, xs, 0, 1, 2)
    emb = model(first)
    emb.update(model(_WholeSnapshots(graphs, xs, 1, T, 2, first.states)))
    for t in range(T):
        torch.testing.assert_close(whole[t], h[t], rtol=0, atol=0)
        torch.testing.assert_close(emb[t], h[t], rtol=0, atol=1e-13)


if __name__ == "__main__":  # python -m tests.nn.test_graph_rnn: store PyGT's parameters and outputs (needs PyGT)
    _rec = _pygt_module()
    if _rec is None:
        sys.exit("PyG Temporal does not import: set HPCDGNN_PYGT_PATH (see perf/bench_pygt.py)")
    _cases = {}
    for _case in CASES:
        _params, _out = _run_pygt(_rec, _case)
        _cases[_case] = {"params": _params, "out": _out}
    torch.save(_cases, REFERENCE)
    print(f"wrote {REFERENCE}")
