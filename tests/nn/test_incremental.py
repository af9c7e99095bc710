"""R2 incremental aggregation (ReInc §3.2, Eq. 2): equal to from-scratch aggregation, with its statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hpcdgnn.data.graph_diff import CSRSnapshot
from hpcdgnn.nn.conv.incremental import IncrementalAggregator, build_row_adjacency
from hpcdgnn.ops.sparse import gcn_norm

N, L, D = 50, 6, 4
RTOL, ATOL = 1e-10, 1e-12


def _csr(dense: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows, cols = np.nonzero(dense)  # row-major: canonical CSR
    indptr = np.zeros(dense.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=dense.shape[0]), out=indptr[1:])
    return indptr, cols.astype(np.int32), dense[rows, cols]


def _random_edges(rng, isolated, density=0.1):
    a = np.where(rng.random((N, N)) < density, rng.uniform(0.5, 2.0, (N, N)), 0.0)
    a[isolated, :] = 0.0
    a[:, isolated] = 0.0
    return a


def _dynamic_graph(seed=0):
    """Dense A_0..A_5: small changes (add/remove/reweight, self-loops), no change, everything, an emptied row."""
    rng = np.random.default_rng(seed)
    isolated = np.array([3, 17, 41])  # no edge in any snapshot
    a = _random_edges(rng, isolated)
    a[[0, 5, 9], [0, 5, 9]] = 1.5  # input self-loops
    mats = [a]

    def small_change(a):
        a = a.copy()
        e = np.argwhere(a != 0)
        pick = rng.permutation(len(e))[: max(3, len(e) // 20)]
        a[tuple(e[pick[: len(pick) // 2]].T)] = 0.0  # remove
        rw = e[pick[len(pick) // 2 :]]
        a[tuple(rw.T)] *= 1.7  # reweight
        z = np.argwhere(a == 0)
        z = z[~np.isin(z[:, 0], isolated) & ~np.isin(z[:, 1], isolated)]
        add = z[rng.permutation(len(z))[: len(pick) // 2]]
        a[tuple(add.T)] = rng.uniform(0.5, 2.0, len(add))  # add (may hit the diagonal)
        return a

    mats.append(small_change(mats[-1]))  # t=1: small change
    mats.append(mats[-1].copy())  # t=2: no change
    b = _random_edges(rng, isolated, 0.15)
    b[[2, 7], [2, 7]] = 0.7
    mats.append(b)  # t=3: changes everything
    mats.append(small_change(mats[-1]))  # t=4: small change
    c = small_change(mats[-1])
    c[11, :] = 0.0  # t=5: row 11 loses all its edges, column 12 too
    c[:, 12] = 0.0
    mats.append(c)
    return mats


def _features(rng, mode, dtype=torch.float64):
    if mode == "constant":
        return torch.tensor(rng.standard_normal((N, D)), dtype=dtype)
    fs = [torch.tensor(rng.standard_normal((N, D)), dtype=dtype)]
    for t in range(1, L):
        if t == 2:
            fs.append(fs[-1])  # the same object: known unchanged
        elif t == 3:
            fs.append(torch.tensor(rng.standard_normal((N, D)), dtype=dtype))  # every row changes
        else:
            f = fs[-1].clone()
            f[rng.choice(N, 4, replace=False)] += torch.tensor(rng.standard_normal((4, D)), dtype=dtype)
            f[20, 1] += 1.0  # one component only
            fs.append(f)
    return fs


def _reference(kind, dense, f, rows):
    """From-scratch aggregation, independently of the module: dense products, and gcn_norm for gcn."""
    if kind == "gcn":
        adj = gcn_norm(0, *_csr(dense), f.dtype)
        out = torch.sparse.mm(adj.a, f)
    else:
        a = torch.tensor(dense, dtype=f.dtype)
        out = a @ f
        if kind == "mean":
            s = a.sum(1, keepdim=True)
            out = torch.where(s != 0, out / torch.where(s != 0, s, torch.ones_like(s)), torch.zeros_like(out))
    return out if rows is None else out[torch.as_tensor(rows)]


@pytest.mark.parametrize("kind", ["sum", "mean", "gcn"])
@pytest.mark.parametrize("feat", ["constant", "per_step"])
@pytest.mark.parametrize("subset", [False, True])
def test_equals_from_scratch_float64(kind, feat, subset):
    rng = np.random.default_rng(1)
    mats = _dynamic_graph()
    # unsorted subset (output follows its order) led by row 11, the row emptied at t=5
    rows = np.concatenate([[11], rng.permutation(np.delete(np.arange(N), 11))[:19]]) if subset else None
    snaps = [_csr(m) for m in mats]
    snaps[0] = CSRSnapshot.from_arrays(*snaps[0])  # any CSR container
    feats = _features(rng, feat)
    fs = [feats] * L if isinstance(feats, torch.Tensor) else feats
    agg = IncrementalAggregator(snaps, kind, rows=rows, threshold=0.5, dtype=torch.float64)
    for t, o in enumerate(agg.aggregate_from_scratch(feats)):
        torch.testing.assert_close(o, _reference(kind, mats[t], fs[t], rows), rtol=RTOL, atol=ATOL)
    k = N if rows is None else len(rows)
    for threshold in (0.5, math.inf):  # default fallback on the step that changes everything, and never
        outs, stats = agg.aggregate(feats, threshold=threshold)
        for t in range(L):
            torch.testing.assert_close(outs[t], _reference(kind, mats[t], fs[t], rows), rtol=RTOL, atol=ATOL)
        assert len(stats.steps) == L and stats.steps[0].reason == "first"
        for s in stats.steps:
            assert s.rows_recomputed + s.rows_updated + s.rows_untouched == k
        # t=2 repeats t=1's graph and features (the same object): nothing to do
        s2 = stats.steps[2]
        assert s2.mode == "incremental" and s2.rows_untouched == k and s2.entries_processed == 0
        assert s2.change_ratio == 0.0
        if threshold == math.inf:
            assert stats.fallbacks == 0
        else:
            assert stats.steps[3].reason == "threshold"  # the step that changes everything
        if rows is not None and kind != "gcn":
            # row 11 (position 0) is empty at t=5 and was not at t=4: recomputed, exactly zero
            assert torch.equal(outs[5][0], torch.zeros(D, dtype=torch.float64))


def test_no_change_sum_still_returns_new_tensors():
    mats = _dynamic_graph()
    agg = IncrementalAggregator([_csr(m) for m in mats], "sum", dtype=torch.float64)
    f = torch.randn(N, D, dtype=torch.float64)
    outs, _ = agg.aggregate(f)
    assert outs[2] is not outs[1] and torch.equal(outs[2], outs[1])


@pytest.mark.parametrize("kind", ["sum", "mean", "gcn"])
def test_float32(kind):
    rng = np.random.default_rng(2)
    mats = _dynamic_graph(2)
    feats = _features(rng, "per_step", torch.float32)
    agg = IncrementalAggregator([_csr(m) for m in mats], kind, threshold=math.inf)
    outs, _ = agg.aggregate(feats)
    for t in range(L):
        torch.testing.assert_close(outs[t], _reference(kind, mats[t], feats[t], None), rtol=1e-5, atol=1e-5)
        assert outs[t].dtype == torch.float32


@pytest.mark.parametrize("kind", ["sum", "mean", "gcn"])
def test_threshold_zero_recomputes_every_changed_step(kind):
    rng = np.random.default_rng(3)
    mats = _dynamic_graph(3)
    feats = _features(rng, "constant")
    agg = IncrementalAggregator([_csr(m) for m in mats], kind, threshold=0.0, dtype=torch.float64)
    outs, stats = agg.aggregate(feats)
    modes = [(s.mode, s.reason) for s in stats.steps]
    assert modes == [("scratch", "first"), ("scratch", "threshold"), ("incremental", ""),
                     ("scratch", "threshold"), ("scratch", "threshold"), ("scratch", "threshold")]
    for s in stats.steps[1:]:
        if s.mode == "scratch":
            assert s.rows_recomputed == N and s.entries_processed == s.entries_scratch and s.change_ratio > 0
    assert stats.fallbacks == 4 and stats.recomputed_fraction == pytest.approx(4 / 5)
    # the per-call override wins over the constructor's threshold
    _, st = agg.aggregate(feats, threshold=math.inf)
    assert st.fallbacks == 0
    for t in range(L):
        torch.testing.assert_close(outs[t], _reference(kind, mats[t], feats, None), rtol=RTOL, atol=ATOL)


def _slow_window(seed, n=400, steps=5, frac=0.04):
    """A sparser graph whose steps each change ``frac`` of the edges (removals, additions, reweights)."""
    rng = np.random.default_rng(seed)
    a = np.where(rng.random((n, n)) < 0.02, rng.uniform(0.5, 2.0, (n, n)), 0.0)
    mats = [a]
    for _ in range(steps - 1):
        a = a.copy()
        e = np.argwhere(a != 0)
        m = int(frac * len(e) / 3)
        pick = e[rng.permutation(len(e))[: 2 * m]]
        a[tuple(pick[:m].T)] = 0.0
        a[tuple(pick[m:].T)] *= 1.3
        z = np.argwhere(a == 0)
        add = z[rng.permutation(len(z))[:m]]
        a[tuple(add.T)] = 1.0
        mats.append(a)
    return mats


@pytest.mark.parametrize("kind", ["sum", "mean", "gcn"])
def test_small_changes_do_less_work(kind):
    mats = _slow_window(4)
    n = mats[0].shape[0]
    f = torch.randn(n, 8, dtype=torch.float64)
    agg = IncrementalAggregator([_csr(m) for m in mats], kind, dtype=torch.float64, threshold=math.inf)
    outs, stats = agg.aggregate(f)
    for t, m in enumerate(mats):
        torch.testing.assert_close(outs[t], _reference(kind, m, f, None), rtol=RTOL, atol=ATOL)
    assert stats.fallbacks == 0
    assert stats.recomputed_fraction < 0.5
    assert stats.work_fraction < 1.0  # fewer matrix entries multiplied than from scratch
    if kind != "gcn":  # gcn: a degree change at u reaches every row reading u
        assert stats.rows_untouched > 0
        assert stats.work_fraction < 0.25


@pytest.mark.parametrize("feat", ["constant", "per_step"])
def test_gradients_match_from_scratch(feat):
    rng = np.random.default_rng(5)
    mats = _dynamic_graph(5)
    agg = IncrementalAggregator([_csr(m) for m in mats], "gcn", rows=np.arange(0, N, 3), threshold=math.inf,
                                dtype=torch.float64)
    base = _features(rng, feat)
    w = [torch.randn(agg.num_rows, D, dtype=torch.float64) for _ in range(L)]
    grads = []
    for fn in (lambda fs: agg.aggregate(fs)[0], agg.aggregate_from_scratch):
        if feat == "constant":  # one learnable matrix shared by every snapshot
            leaves = [base.clone().requires_grad_(True)]
            fn_in = leaves[0]
        else:  # distinct leaves, some equal in value (t=2 repeats t=1): still each its own gradient
            leaves = [f.clone().requires_grad_(True) for f in base]
            fn_in = leaves
        loss = sum((o * wt).sum() for o, wt in zip(fn(fn_in), w, strict=True))
        loss.backward()
        grads.append([x.grad for x in leaves])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)


def test_gcn_matrix_matches_gcn_norm():
    mats = _dynamic_graph(6)
    ra = build_row_adjacency(_csr(mats[0]), "gcn", dtype=torch.float64)
    dense = torch.zeros(N, N, dtype=torch.float64)
    dense[ra.rowpos, ra.cols] = ra.vals * ra.scale[ra.rowpos]
    torch.testing.assert_close(dense, gcn_norm(0, *_csr(mats[0]), torch.float64).a.to_dense(), rtol=1e-15, atol=0)


def test_rejects_bad_input():
    mats = _dynamic_graph()
    good = _csr(mats[0])
    indptr, cols, vals = good
    bad = (indptr, cols[::-1].copy(), vals)
    with pytest.raises(ValueError, match="canonical"):
        IncrementalAggregator([good, bad], "sum")
    with pytest.raises(ValueError, match="unknown kind"):
        IncrementalAggregator([good], "max")
    with pytest.raises(ValueError, match="unique"):
        IncrementalAggregator([good], "sum", rows=[1, 1])
    agg = IncrementalAggregator([good, good], "sum")
    with pytest.raises(ValueError, match="features"):
        agg.aggregate(torch.zeros(N, 2, dtype=torch.float64))  # wrong dtype
    with pytest.raises(ValueError, match="2 snapshots"):
        agg.aggregate([torch.zeros(N, 2)])
