"""The encoder–decoder (``model.encoder_decoder``, ReInc §2.1 / DCRNN) against a numpy unrolling, float64.

One encoder→decoder pass of 2 + 2 GConvGRU cells on a tiny directed weighted graph: the encoder over a
3-step window, its final states starting the decoder on the last step's graph, GO = 0, each decoder step's
input the previous step's target (teacher forcing 1; a missing target -> the own prediction) or the own
previous prediction (teacher forcing 0), the shared projection F' -> 1 — written gate by gate in numpy
from the cell's equations (dense L̂) and compared to 1e-10. Gradients reach every parameter. The snapshot
form (``decoder_input: snapshots``, ReInc §3.1) likewise: step 0 reads X_t on G_t, a teacher-forced step d
reads X_{t+d} on G_{t+d} through the encoder's first filter, the others their prediction on G_t; its input
basis handed in (``aggregated``) gives the same forecasts.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.nn.models import DecoderInputs, EncoderDecoder, build_encoder_decoder
from tests.nn.test_graph_rnn import _step
from tests.strategies.test_sequences_cells import _FullLayout

S, N, F, HID, K, HOR = 3, 7, 3, 5, 2, 3


def _graphs(seed: int = 0, steps: int = S) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        a = (rng.random((N, N)) < 0.35) * (rng.random((N, N)) + 0.5)
        np.fill_diagonal(a, 0.0)
        a[N - 1, :] = a[:, N - 1] = 0.0  # a vertex without edges
        out.append(a.astype(np.float32).astype(np.float64))
    return out


def _lhat(a):
    d = a.sum(1)
    dinv = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return -(dinv[:, None] * a * dinv[None, :])


def _terms(L, x):
    ts = [x, L @ x]
    while len(ts) < K:
        ts.append(2 * L @ ts[-1] - ts[-2])
    return ts[:K]


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gru(layer, L, x, h, w_x=None):
    """One GConvGRU step (gconv_gru.py's equations), h = 0 before the first; ``w_x``: another input filter."""
    fin = x.shape[1]
    wx, whzr, whh, b = (p.detach().numpy() for p in (w_x if w_x is not None else layer.w_x, layer.w_hzr,
                                                     layer.w_hh, layer.bias))

    def conv(terms, w, width, gate):
        return sum(tk @ w[k * width : (k + 1) * width, gate * HID : (gate + 1) * HID] for k, tk in enumerate(terms))

    tx, th = _terms(L, x), _terms(L, h)
    z = _sig(conv(tx, wx, fin, 0) + conv(th, whzr, HID, 0) + b[:HID])
    r = _sig(conv(tx, wx, fin, 1) + conv(th, whzr, HID, 1) + b[HID : 2 * HID])
    cand = np.tanh(conv(tx, wx, fin, 2) + conv(_terms(L, h * r), whh, HID, 0) + b[2 * HID :])
    return z * h + (1 - z) * cand


def _reference(model: EncoderDecoder, adj, xs, y, teacher: bool, snapshots: bool = False) -> np.ndarray:
    """The forecasts; ``snapshots``: the snapshot form, adj and xs then run on H - 1 steps past the window."""
    h = [np.zeros((N, HID)), np.zeros((N, HID))]
    for a, x in zip(adj[:S], xs[:S], strict=True):  # the encoder over the window
        inp = x
        for li, cell in enumerate(model.layers):
            h[li] = _gru(cell, _lhat(a), inp, h[li])
            inp = h[li]
    w, b = model.proj.weight.detach().numpy(), model.proj.bias.detach().numpy()
    x, preds = np.zeros((N, 1)), []
    for d in range(HOR):
        L = _lhat(adj[S - 1])  # the decoder: on the last step's graph, from the encoder's final states
        tied = None
        if d > 0:
            x = preds[-1]
            if teacher and not snapshots:
                x = np.where(np.isnan(y[:, d - 1 : d]), preds[-1], y[:, d - 1 : d])
        if snapshots and (d == 0 or teacher):  # snapshot t + d on its graph, read with the encoder's filter
            x, L, tied = xs[S - 1 + d], _lhat(adj[S - 1 + d]), model.layers[0].w_x
        inp = x
        for li, cell in enumerate(model.decoder):
            h[li] = _gru(cell, L, inp, h[li], tied if li == 0 else None)
            inp = h[li]
        preds.append(inp @ w.T + b)
    return np.concatenate(preds, axis=1)


@pytest.mark.parametrize("teacher", [True, False])
def test_one_pass_matches_numpy(teacher):
    torch.manual_seed(3)
    model = build_encoder_decoder("gconv_gru", F, HID, 2, 3, K, HOR).double()
    with torch.no_grad():  # the cells' biases start at zero: move them so the test sees them
        for cell in (*model.layers, *model.decoder):
            cell.bias.uniform_(-0.5, 0.5)
    assert len(model.layers) == len(model.decoder) == 2 and model.decoder[0].in_features == 1
    assert model.out_features == HOR
    adj = _graphs()
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(S, N, F))
    y = rng.normal(size=(N, HOR))
    y[2, 0] = np.nan  # vertex 2 reads its own prediction at decoder step 1
    ty = torch.from_numpy(y)
    tf = [None] + [ty[:, d - 1 : d] if teacher else None for d in range(1, HOR)]
    out = model(_FullLayout(torch.from_numpy(xs), [_step(t, a) for t, a in enumerate(adj)], tf, 2))
    ref = _reference(model, adj, xs, y, teacher)
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=0, atol=1e-10)
    other = _reference(model, adj, xs, y, not teacher)
    assert np.allclose(ref[:, 0], other[:, 0]) and not np.allclose(ref[:, 1:], other[:, 1:])
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


class _SnapshotLayout(_FullLayout):
    """The window's first S steps for the encoder; decoder step d reads snapshot S - 1 + d at ``reads[d]``."""

    def __init__(self, xs, graphs, reads, aggregated=False):
        super().__init__(xs[:S], graphs[:S], [None] * HOR, 2)
        self.all_xs, self.all_graphs, self.reads, self.aggregated = xs, graphs, reads, aggregated

    def decoder_inputs(self):
        cell = self.model.decoder[0]
        snaps, graphs = [None] * HOR, [None] * HOR
        for d in range(HOR):
            if self.reads[d]:
                graphs[d] = self.all_graphs[S - 1 + d]
                x = self.all_xs[S - 1 + d]
                snaps[d] = cell.basis(cell.operator(graphs[d], x.dtype), x) if self.aggregated else x
        return DecoderInputs(self.graphs[-1], self.teacher, snaps, graphs, self.aggregated)


@pytest.mark.parametrize("teacher", [True, False])
def test_snapshot_form_matches_numpy(teacher):
    torch.manual_seed(4)
    model = build_encoder_decoder("gconv_gru", F, HID, 2, 3, K, HOR).double()
    with torch.no_grad():
        for cell in (*model.layers, *model.decoder):
            cell.bias.uniform_(-0.5, 0.5)
    adj = _graphs(2, S + HOR - 1)
    xs = np.random.default_rng(5).normal(size=(S + HOR - 1, N, F))
    reads = [True] + [teacher] * (HOR - 1)
    ref = _reference(model, adj, xs, None, teacher, snapshots=True)
    graphs = [_step(t, a) for t, a in enumerate(adj)]
    for aggregated in (False, True):
        layout = _SnapshotLayout(torch.from_numpy(xs), graphs, reads, aggregated)
        layout.model = model
        out = model(layout)
        np.testing.assert_allclose(out.detach().numpy(), ref, rtol=0, atol=1e-10)
    other = _reference(model, adj, xs, None, not teacher, snapshots=True)
    assert np.allclose(ref[:, 0], other[:, 0]) and not np.allclose(ref[:, 1:], other[:, 1:])
    out.sum().backward()
    # every step teacher-forced: the decoder's own first filter (1 -> F') reads nothing
    unused = {"decoder.0.w_x"} if teacher else set()
    for name, p in model.named_parameters():
        assert (p.grad is None) if name in unused else (p.grad is not None and p.grad.abs().sum() > 0), name
