"""DGNN.forward over a layout, on one process and without any strategy (issue 11, item 3).

The layer loop lives once, in :meth:`DGNN.forward`; a layout says where rows are.
These tests build two layouts by hand — whole snapshots, and all snapshots'
rows in one time-major block with one block-diagonal Ã (what the vertex and
chunk strategies hold at P = 1) — and check both against the layers called one
by one, and that running time in blocks with the boundary states in
``layout.states`` (SPEC S2) gives the same embeddings as one pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.nn.layout import (
    Layout,
    RowLayout,
    horizon_temporal,
    phase_head,
    phase_join,
    phase_join_into,
    phase_view,
    relu_into,
)
from hpcdgnn.nn.models import available_models, build_model, needs_step_graphs
from hpcdgnn.nn.pool import topk_pool_reference
from hpcdgnn.ops.sparse import NormalizedAdjacency, gcn_norm, sorted_csr

T, N, F, H = 5, 9, 3, 4
DT = torch.float64
#: models whose time encoder takes no step graphs (tests/nn/test_graph_rnn.py runs DGNN.forward over the others)
MODELS = [m for m in available_models() if not needs_step_graphs(m)]


def _graph(seed: int = 0):
    rng = np.random.default_rng(seed)
    adj, xs = [], []
    for t in range(T):
        keys = np.unique(rng.integers(0, N, 14) * N + rng.integers(0, N, 14))
        src, dst = keys // N, keys % N
        indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=N))])
        adj.append(gcn_norm(t, indptr, dst, np.ones(dst.shape[0]), DT))
        xs.append(torch.from_numpy(rng.standard_normal((N, F))))
    return adj, xs


class WholeSnapshots(Layout):
    """Snapshots [start, stop) whole, on one process: rows (k, N, F), the RNN over all N vertices."""

    def __init__(self, adj, xs, start: int, stop: int, layers: int, states=None) -> None:
        super().__init__(start, stop, layers, states)
        self.adj, self.xs = adj[start:stop], xs[start:stop]

    def spatial(self, layer, li, h, tparams):
        hs = self.xs if h is None else h.unbind(0)
        ys = [layer.spatial(layer.aggregate(LocalGraph(a), x), self.start + j, tparams)
              for j, (a, x) in enumerate(zip(self.adj, hs, strict=True))]
        return torch.stack(ys)

    def pool_input(self, li, h):
        x = torch.stack(list(self.xs)) if h is None else h
        keys = np.arange(self.start * N, self.stop * N, dtype=np.int64)
        return x.reshape(-1, x.shape[-1]), keys, N, Communicator()

    def output(self, h):
        self.last = h
        return {self.start + j: z for j, z in enumerate(h.unbind(0))}


def _block_diagonal(adj) -> NormalizedAdjacency:
    """All snapshots' Ã as one (T·N, T·N) matrix: row t·N + v is v's row of Ã_t."""
    rows, cols, vals = [], [], []
    for t, a in enumerate(adj):
        crow, col = a.a.crow_indices(), a.a.col_indices()
        rows.append(torch.repeat_interleave(torch.arange(N), torch.diff(crow)) + t * N)
        cols.append(col + t * N)
        vals.append(a.a.values())
    r, c, v = torch.cat(rows), torch.cat(cols), torch.cat(vals)
    return NormalizedAdjacency(-1, sorted_csr(r, c, v, (T * N, T * N)), sorted_csr(c, r, v, (T * N, T * N)))


class TimeMajorRows(RowLayout):
    """All T·N appearances time-major in one block, as a vertex or chunk rank holds them at P = 1."""

    def __init__(self, adj, xs, layers: int) -> None:
        graph = LocalGraph(_block_diagonal(adj))
        x = torch.cat(xs)
        super().__init__(0, T, layers, [(t, N) for t in range(T)],
                         lambda layer, li, h: layer.aggregate(graph, x if h is None else h))
        self.x = x

    def to_temporal(self, y, li):
        return y.view(T, N, y.shape[-1])

    def pool_input(self, li, h):
        x = self.x if h is None else h
        return x, np.arange(T * N, dtype=np.int64), N, Communicator()

    def to_spatial(self, z, li):
        return z.reshape(T * N, z.shape[-1])

    def output(self, h):
        self.last = h
        return dict(enumerate(h.view(T, N, -1).unbind(0)))


def _by_hand(model, adj, xs):
    """The layers called one by one: aggregate + spatial per snapshot, temporal over the timeline."""
    hs = xs
    for layer in model.layers:
        if layer.pool_rows:  # EvolveGCN-H: each step's top-k by torch.topk
            pooled = torch.stack([topk_pool_reference(hs[t], layer.pool_rows, layer.pool_scores) for t in range(T)])
            tparams, _ = layer.time_params_block(0, T, None, pooled)
        else:
            tparams, _ = layer.time_params_block(0, T, None)
        y = torch.stack([layer.spatial(layer.aggregate(LocalGraph(adj[t]), hs[t]), t, tparams) for t in range(T)])
        if layer.temporal_mixing:
            y, _ = layer.temporal(y, None)
        hs = list(y.unbind(0))
    return hs


@pytest.mark.parametrize("name", MODELS)
def test_forward_is_the_layers_called_one_by_one(name):
    adj, xs = _graph()
    torch.manual_seed(0)
    model = build_model(name, F, H, 2, 3).to(DT)
    want = _by_hand(model, adj, xs)
    got = model(WholeSnapshots(adj, xs, 0, T, len(model.layers)))
    rows = model(TimeMajorRows(adj, xs, len(model.layers)))
    for t in range(T):
        torch.testing.assert_close(got[t], want[t], rtol=0, atol=0)
        torch.testing.assert_close(rows[t], want[t], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", MODELS)
def test_blocks_of_time_continue_from_the_layout_states(name):
    """Forward over [0, 2) then [2, T) from the states the first block left equals one pass (S2)."""
    adj, xs = _graph(1)
    torch.manual_seed(1)
    model = build_model(name, F, H, 2, 3).to(DT)
    L = len(model.layers)
    whole = model(WholeSnapshots(adj, xs, 0, T, L))
    first = WholeSnapshots(adj, xs, 0, 2, L)
    emb = model(first)
    emb.update(model(WholeSnapshots(adj, xs, 2, T, L, first.states)))
    for t in range(T):
        torch.testing.assert_close(emb[t], whole[t], rtol=1e-12, atol=1e-12)


def test_a_rank_with_no_rows_stays_in_the_backward_graph():
    """No rows here (P > N): the empty output still depends on the parameters' graph through the aggregation,
    so a rank that holds nothing joins the backward of every exchange before it."""
    torch.manual_seed(0)
    model = build_model("cdgcn", F, H, 2, 3).to(DT)
    empty = NormalizedAdjacency(-1, sorted_csr(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
                                               torch.zeros(0, dtype=DT), (0, 0)),
                                sorted_csr(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
                                           torch.zeros(0, dtype=DT), (0, 0)))
    h_in = torch.zeros(0, F, dtype=DT, requires_grad=True)  # stands for an exchange's (empty) output
    graph = LocalGraph(empty)
    layout = RowLayout(0, T, 2, [(t, 0) for t in range(T)],
                       lambda layer, li, h: layer.aggregate(graph, h_in if h is None else h))
    layout.to_temporal = lambda y, li: y.view(T, 0, y.shape[-1])
    layout.to_spatial = lambda z, li: z.reshape(0, z.shape[-1])
    layout.output = lambda h: (setattr(layout, "last", h), {})[1]
    assert model(layout) == {}
    assert layout.last.shape[0] == 0 and layout.last.requires_grad
    layout.last.sum().backward()
    assert h_in.grad is not None  # the backward reached the input, i.e. the exchange that produced it


def test_phase_head_is_the_joined_head_and_its_gradient_goes_there_alone():
    """phase_join / phase_head: reading the head rows of a join gives the head itself (no slice of the join,
    whose backward would build a zero-filled gradient of the join's shape), the same values and gradients
    as the slice; any other rows, or either tensor changed in place since the join, give the slice."""
    torch.manual_seed(0)
    x = torch.randn(5, 3, 2, requires_grad=True)
    head = x[:3] * 2.0
    with torch.no_grad():
        tail = x[3:] * 2.0
    out = phase_join(head, tail)
    assert torch.equal(out, torch.cat([head, tail]))
    got = phase_head(out, 3)
    assert got is head
    got.pow(2).sum().backward()
    ref = torch.zeros_like(x)
    ref[:3] = 8.0 * x.detach()[:3]
    torch.testing.assert_close(x.grad, ref)
    assert phase_head(out, 2).grad_fn is not None and torch.equal(phase_head(out, 2), out[:2])  # other rows: slice
    with torch.no_grad():
        out[0] += 1.0  # the join changed: its head rows are no longer `head`
    assert phase_head(out, 3) is not head and torch.equal(phase_head(out, 3), out[:3])
    out2 = phase_join(head, tail)
    with torch.no_grad():
        head.mul_(3.0)  # the head changed after the join: the join's rows hold the old values
    assert torch.equal(phase_head(out2, 3), out2[:3]) and phase_head(out2, 3) is not head
    with torch.no_grad():  # a join without an autograd head remembers nothing
        plain = phase_join(x[:3].detach(), tail)
    assert phase_head(plain, 3) is not None and not hasattr(plain, "_phase_head")


@pytest.mark.parametrize("read", ["head", "slice", "whole"])
def test_phases_written_into_one_buffer_equal_the_copying_join_bit_for_bit(read):
    """EvolveGCN-O's ``spatial_steps(..., out=)`` (writes_out) with relu_into / phase_join_into: the phases
    written straight into one buffer give the bits of relu + phase_join forward and backward, whether the
    consumer takes the remembered head (phase_head), a slice of the join or the whole join; the head is
    the buffer's own rows (no copy), and a head that is not the buffer's first rows is refused."""
    from hpcdgnn.nn.models.evolvegcn import EvolveGCNOLayer

    torch.manual_seed(3)
    layer = EvolveGCNOLayer(5, 4)
    assert layer.writes_out
    T, k, n = 7, 4, 6
    ax = torch.randn(T, n, 5, requires_grad=True)
    weights = torch.randn(T, n, 4)
    grads = []
    for written in (False, True):
        ax.grad = None
        layer.zero_grad()
        ws, _ = layer.time_params_block(0, T)
        buf = torch.empty(T, n, 4) if written else None
        with torch.no_grad():  # the tail first, as the snapshot strategy writes them
            tail = layer.spatial_steps(ax[k:], list(range(k, T)), ws, out=None if buf is None else buf[k:])
        head = layer.spatial_steps(ax[:k], list(range(k)), ws, out=None if buf is None else buf[:k])
        out = phase_join_into(head, buf) if written else phase_join(head, tail)
        if written:
            assert out.data_ptr() == buf.data_ptr() and head.data_ptr() == buf.data_ptr()
        got = phase_head(out, k) if read == "head" else out[:k + 1] if read == "slice" else out
        (got * weights[:got.shape[0]]).sum().backward()
        grads.append((out.detach().clone(), ax.grad.clone(), layer.w0.grad.clone(),
                      [p.grad.clone() for p in layer.cell.parameters()]))
    (o0, a0, w0, c0), (o1, a1, w1, c1) = grads
    assert torch.equal(o0, o1) and torch.equal(a0, a1) and torch.equal(w0, w1)
    assert all(torch.equal(p, q) for p, q in zip(c0, c1, strict=True))
    if read == "head":
        assert phase_head(out, k).data_ptr() == out.data_ptr()
    with pytest.raises(ValueError, match="first rows"):
        phase_join_into(relu_into(torch.randn(2, n, 4, requires_grad=True), torch.empty(T, n, 4)[1:3]),
                        torch.empty(T, n, 4))


def test_phase_view_keeps_the_remembered_head():
    """A join's rows seen as (T, n, F) or back (phase_view): phase_head of the view is the head's own
    rows viewed alike (no slice, so no block-sized zero-filled gradient), with the same gradient as a
    slice; a head that no longer fills whole rows, or a join changed in place, falls back to the slice."""
    T, k, n, F = 5, 3, 4, 2
    x = torch.randn(T * n, F, requires_grad=True)
    head = x[: k * n] * 2
    with torch.no_grad():
        tail = x[k * n :] * 2
    joined = phase_join(head, tail)
    block = phase_view(joined, (T, n, F))
    assert torch.equal(block, joined.view(T, n, F))
    got = phase_head(block, k)
    assert got.data_ptr() == head.data_ptr() and got.shape == (k, n, F) and got._base is head
    (got * torch.arange(k * n * F, dtype=x.dtype).view(k, n, F)).sum().backward(retain_graph=True)
    want = x.grad.clone()
    x.grad = None
    (block[:k] * torch.arange(k * n * F, dtype=x.dtype).view(k, n, F)).sum().backward()
    assert torch.equal(x.grad, want)
    flat = phase_view(block, (-1, F))  # and back: the head's rows again
    assert phase_head(flat, k * n).data_ptr() == head.data_ptr() and phase_head(flat, k * n)._base is head
    odd = phase_view(phase_join(x[:3] * 1, x[3:].detach()), (T, n, F))  # 3 rows: not whole (n, F) rows
    assert not hasattr(odd, "_phase_head")
    joined.add_(0)  # changed in place: the memo is stale, the view slices
    assert not hasattr(phase_view(joined, (T, n, F)), "_phase_head")


def test_the_time_encoder_before_the_horizon_saves_the_head_not_the_block():
    """Past the training horizon the time encoder runs without autograd; before it, what it keeps for the
    backward is the head's storage alone, also when its input was joined from phases (a slice of the join
    would keep the whole block, tail included, until the backward)."""
    from types import SimpleNamespace

    from hpcdgnn.metrics.memory import SavedTensorMeter

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 4).double()
    layer = SimpleNamespace(temporal=lambda y, state: lstm(y, state))
    T, k, n = 9, 3, 50
    x = torch.randn(T, n, 4, dtype=torch.float64, requires_grad=True)
    head = x[:k] * 2
    with torch.no_grad():
        tail = x[k:] * 2
    saved = []
    for y, steps in ((phase_join(head, tail), k), (head, None)):
        with SavedTensorMeter() as meter:
            z, _ = horizon_temporal(layer, y, None, steps) if steps else lstm(y)
        saved.append(meter.peak)
        # to rounding: MKL's GEMM may round a row differently with the row count (k·n rows here, T·n there),
        # seen on an AVX-512 EPYC (5.6e-17)
        torch.testing.assert_close(z[:k], lstm(torch.cat([head, tail]))[0][:k], rtol=1e-13, atol=1e-15)
    assert saved[0] == saved[1]


def test_a_pyg_style_call_on_tensors_says_where_a_run_s_outputs_come_from():
    """``model(x, edge_index)``, PyG's call, read "forward() takes 2 positional arguments but 3 were given" (and
    TGN's or the encoder–decoder's one tensor an AttributeError inside): each is one TypeError line naming the
    API's embed / predict / export(to='pygt')."""
    from hpcdgnn.nn.models import build_encoder_decoder
    from hpcdgnn.nn.models.tgn import TGN

    x, edge_index = torch.randn(5, 3), torch.tensor([[0, 1], [1, 2]])
    for model in (build_model("cdgcn", 3, 4, 2, 3), build_encoder_decoder("gconv_gru", 3, 4, 1, 2, 2, 2),
                  TGN(5, 2, 4, 4, 4, 2, False)):
        for args in ((x, edge_index), (x,)):
            with pytest.raises(TypeError, match=rf"^{type(model).__name__}\.forward takes a strategy's input, not "
                                                r"tensors: a run's Z_t come from TrainedRun\.embed\(\)"):
                model(*args)
