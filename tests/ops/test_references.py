"""Every op of :mod:`hpcdgnn.ops` equals the reference its table names, forward and backward (float64)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from hpcdgnn.ops import decoder, kernels, negatives, scan, sparse
from tests.conftest import REPO

N, F, H, E = 13, 4, 5, 40


def _graph(seed: int = 0, n: int = N) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random weighted CSR adjacency with a self-loop and an empty row (indptr, indices, weights)."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((n, n)) < 0.3) * rng.uniform(0.5, 2.0, (n, n))
    dense[3, 3], dense[5] = 1.5, 0.0
    rows, cols = np.nonzero(dense)
    indptr = np.searchsorted(rows, np.arange(n + 1))
    return indptr, cols.astype(np.int64), dense[rows, cols]


def _dense(indptr, indices, weights) -> torch.Tensor:
    a = torch.zeros(len(indptr) - 1, len(indptr) - 1, dtype=torch.float64)
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    a[rows, indices] = torch.from_numpy(weights)
    return a


def test_gcn_norm_is_eq1_and_its_products_the_dense_ones():
    indptr, indices, weights = _graph()
    a = _dense(indptr, indices, weights)
    a.fill_diagonal_(0.0)  # A + I: an input self-loop is not counted twice
    a_hat = a + torch.eye(N, dtype=torch.float64)
    dinv = a_hat.sum(1).rsqrt()
    ref = dinv[:, None] * a_hat * dinv[None, :]
    adj = sparse.gcn_norm(0, indptr, indices, weights, torch.float64)
    torch.testing.assert_close(adj.a.to_dense(), ref, rtol=1e-15, atol=1e-15)
    assert torch.equal(sparse.csr_transpose(adj.a).to_dense(), adj.a.to_dense().t())
    x = torch.randn(N, F, dtype=torch.float64, requires_grad=True)
    assert torch.equal(sparse.csr_mm(adj.a, x.detach()), torch.sparse.mm(adj.a, x.detach()))
    y = sparse.spmm(adj, x)
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    xd = x.detach().clone().requires_grad_(True)
    yd = ref @ xd
    (gd,) = torch.autograd.grad(yd.square().sum(), xd)
    torch.testing.assert_close(y, yd, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(gx, gd, rtol=1e-13, atol=1e-13)


def test_stacked_gcn_norm_is_the_block_diagonal_bit_for_bit():
    from hpcdgnn.data.graph_diff import CSRSnapshot

    graphs = [_graph(s) for s in (1, 2, 3)]
    snaps = [CSRSnapshot(torch.from_numpy(p), torch.from_numpy(i), torch.from_numpy(w)) for p, i, w in graphs]
    got = sparse.stacked_gcn_norm(snaps, [0, 1, 2], torch.float64, transpose=True)
    ref = sparse.block_diagonal([sparse.gcn_norm(t, *g, torch.float64) for t, g in enumerate(graphs)])
    for a, b in ((got.a, ref.a), (got.a_t, ref.a_t)):
        assert torch.equal(a.crow_indices().long(), b.crow_indices().long())
        assert torch.equal(a.col_indices().long(), b.col_indices().long()) and torch.equal(a.values(), b.values())


def _decoder_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(N, F, dtype=torch.float64, generator=g, requires_grad=True)
    w1 = torch.randn(H, 2 * F, dtype=torch.float64, generator=g, requires_grad=True)
    b1, w2, b2 = (torch.randn(s, dtype=torch.float64, generator=g, requires_grad=True) for s in ((H,), (1, H), (1,)))
    src, dst = torch.randint(0, N, (E,), generator=g), torch.randint(0, N, (E,), generator=g)
    label = (torch.rand(E, generator=g) < 0.5).to(torch.float64)
    return z, w1, b1, w2, b2, src, dst, label


def test_edge_logits_are_the_dense_mlp():
    z, w1, b1, w2, b2, src, dst, _ = _decoder_inputs()
    pu, pv = decoder.project(z, w1)
    got = decoder.edge_logits(pu, pv, b1, w2[0], b2, src, dst)
    ref = torch.relu(torch.cat([z[src], z[dst]], 1) @ w1.t() + b1) @ w2[0] + b2
    torch.testing.assert_close(got, ref, rtol=1e-13, atol=1e-13)
    params = (z, w1, b1, w2, b2)
    for a, b in zip(torch.autograd.grad(got.sin().sum(), params), torch.autograd.grad(ref.sin().sum(), params),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_compiled_edge_bce_is_the_reference(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setenv("HPCDGNN_KERNELS", "always")
    z, w1, b1, w2, b2, src, dst, label = _decoder_inputs(1)
    params = (z, w1, b1, w2, b2)
    assert kernels.available(*params, label, pairs=E, kernel="edge_bce_train")
    before = kernels.calls().get("edge_bce_train", 0)
    got = decoder.edge_bce(*params, src, dst, label)
    assert kernels.calls()["edge_bce_train"] == before + 1  # the compiled pass ran
    ref = decoder.edge_bce_reference(*params, src, dst, label)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(got[0], params), torch.autograd.grad(ref[0], params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_the_bptt_scan_is_the_torch_module(cls):
    torch.manual_seed(0)
    rnn = cls(F, H, num_layers=2).double()
    x = torch.randn(6, 3, F, dtype=torch.float64, requires_grad=True)
    got, _ = scan.run_torch_rnn(rnn, x)
    ref, _ = rnn(x)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    params = (x, *rnn.parameters())
    for a, b in zip(torch.autograd.grad(got.square().sum(), params), torch.autograd.grad(ref.square().sum(), params),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


def test_the_self_fed_scan_is_the_cell_loop():
    torch.manual_seed(1)
    cell = nn.LSTMCell(H, H).double()
    w0, c0 = torch.randn(F, H, dtype=torch.float64), torch.randn(F, H, dtype=torch.float64)
    ys, (w, c) = scan.self_fed_lstm(cell, w0, c0, 4)
    rw, rc, outs = w0, c0, []
    for _ in range(4):
        rw, rc = cell(rw, (rw, rc))
        outs.append(rw)
    torch.testing.assert_close(ys, torch.stack(outs), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close((w, c), (rw, rc), rtol=1e-12, atol=1e-12)


def test_joined_negatives_are_the_per_step_draws():
    steps, counts, n = [0, 3, 4], [5, 0, 40], 17
    pairs, bounds = negatives.draw_negatives_joined(9, 2, steps, n, counts)
    for j, t in enumerate(steps):
        assert np.array_equal(pairs[:, bounds[j]:bounds[j + 1]], negatives.draw_negatives(9, 2, t, n, counts[j]))


def test_ops_import_nothing_above_them():
    """The layer's rule (its docstring): models, tasks and strategies call ops, never the other way."""
    allowed = ("hpcdgnn.ops", "hpcdgnn.indices", "hpcdgnn.errors")
    for path in sorted((REPO / "hpcdgnn" / "ops").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith("hpcdgnn") or name.startswith(allowed), f"{Path(path).name} imports {name}"
