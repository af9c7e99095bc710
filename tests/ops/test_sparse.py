"""GCN normalisation (IBM Eq. 1) and the explicit-adjoint sparse product, against dense numpy.

The reference is written from the paper, not from the implementation:
``Ã = D^{-1/2} (A + I) D^{-1/2}`` with ``D = diag(1 + row sums of A)``, where an
input self-loop is dropped first (``gcn_norm`` adds I itself, so a stored loop
would otherwise count twice).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.ops.sparse import NormalizedAdjacency, block_diagonal, csr_mm, gcn_norm, row_phases, sorted_csr, spmm


def random_dense(n: int, density: float, seed: int, self_loops: bool) -> np.ndarray:
    """A random weighted directed adjacency (weights in (0.1, 3)), optionally with self-loops."""
    rng = np.random.default_rng(seed)
    a = np.where(rng.random((n, n)) < density, rng.uniform(0.1, 3.0, (n, n)), 0.0)
    if not self_loops:
        np.fill_diagonal(a, 0.0)
    else:
        a[np.diag_indices(n)] = np.where(rng.random(n) < 0.5, rng.uniform(0.1, 3.0, n), 0.0)
    return a


def to_csr(a: np.ndarray, index_dtype=np.int32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shard representation of a dense matrix: indptr int64, sorted indices, float32 weights."""
    n = a.shape[0]
    rows, cols = np.nonzero(a)  # row-major: columns ascend within a row
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols.astype(index_dtype), a[rows, cols].astype(np.float32)


def dense_norm(a: np.ndarray) -> np.ndarray:
    """IBM Eq. 1 in dense float64; the weights go through float32 as they do in a shard."""
    a = a.astype(np.float32).astype(np.float64)
    np.fill_diagonal(a, 0.0)
    d = 1.0 + a.sum(axis=1)
    s = np.diag(1.0 / np.sqrt(d))
    return s @ (a + np.eye(a.shape[0])) @ s


CASES = [
    pytest.param(13, 0.3, False, id="directed"),
    pytest.param(13, 0.3, True, id="directed-with-self-loops"),
    pytest.param(1, 1.0, True, id="single-vertex-self-loop"),
    pytest.param(40, 0.05, True, id="sparse-with-self-loops"),
]


@pytest.mark.parametrize("n,density,loops", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_gcn_norm_matches_dense_eq1(n, density, loops, seed):
    """Ã and its stored transpose equal dense D^{-1/2}(A+I)D^{-1/2} (IBM Eq. 1) and its transpose."""
    a = random_dense(n, density, seed, loops)
    if loops and n > 1:
        assert np.count_nonzero(np.diag(a)) > 0  # precondition: the input really has self-loops
    with torch.sparse.check_sparse_tensor_invariants():  # valid CSR: sorted columns, consistent crow
        adj = gcn_norm(5, *to_csr(a), torch.float64)
    ref = dense_norm(a)
    assert isinstance(adj, NormalizedAdjacency) and adj.t == 5
    np.testing.assert_allclose(adj.a.to_dense().numpy(), ref, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(adj.a_t.to_dense().numpy(), ref.T, rtol=1e-13, atol=1e-15)
    # the transpose is exactly the same numbers, not a recomputation
    assert torch.equal(adj.a_t.to_dense(), adj.a.to_dense().T)


def test_input_self_loops_are_dropped_before_adding_identity():
    """A stored self-loop changes nothing: I is added once, D counts no loop weight."""
    a = random_dense(11, 0.3, 7, self_loops=False)
    with_loops = a.copy()
    np.fill_diagonal(with_loops, 2.5)
    plain = gcn_norm(0, *to_csr(a), torch.float64).a.to_dense()
    looped = gcn_norm(0, *to_csr(with_loops), torch.float64).a.to_dense()
    assert torch.equal(plain, looped)
    # the diagonal is exactly 1/D_uu: the loop contributes 1, not 1 + 2.5
    d = 1.0 + a.astype(np.float32).astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(np.diag(looped.numpy()), 1.0 / d, rtol=1e-14)


def test_empty_graph_is_identity():
    """No edges: Ã = I and Ã·X = X exactly."""
    n = 6
    adj = gcn_norm(0, np.zeros(n + 1, dtype=np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), torch.float32)
    assert torch.equal(adj.a.to_dense(), torch.eye(n))
    assert torch.equal(adj.a_t.to_dense(), torch.eye(n))
    x = torch.randn(n, 3)
    assert torch.equal(spmm(adj, x), x)


def test_isolated_vertex_keeps_its_own_features():
    """An isolated vertex (only a self-loop in the input) has row and column e_v in Ã."""
    a = random_dense(9, 0.5, 3, self_loops=False)
    iso = 4
    a[iso, :] = 0.0
    a[:, iso] = 0.0
    a[iso, iso] = 1.7  # only a self-loop: still isolated after the loop is dropped
    adj = gcn_norm(0, *to_csr(a), torch.float64)
    dense = adj.a.to_dense().numpy()
    e = np.zeros(9)
    e[iso] = 1.0
    np.testing.assert_array_equal(dense[iso], e)
    np.testing.assert_array_equal(dense[:, iso], e)
    np.testing.assert_allclose(dense, dense_norm(a), rtol=1e-13, atol=1e-15)


def test_int64_indices_and_unweighted_degree_is_one_plus_deg():
    """For 0/1 weights D_uu = 1 + deg_u (out-degree: rows are sources), IBM §2.2."""
    rng = np.random.default_rng(5)
    a = (rng.random((10, 10)) < 0.3).astype(np.float64)
    np.fill_diagonal(a, 0.0)
    adj = gcn_norm(0, *to_csr(a, np.int64), torch.float64)
    deg = a.sum(axis=1)
    rows, cols = np.nonzero(a)
    dense = adj.a.to_dense().numpy()
    np.testing.assert_allclose(dense[rows, cols], 1.0 / np.sqrt((1 + deg[rows]) * (1 + deg[cols])), rtol=1e-14)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_spmm_forward_and_backward_match_dense(dtype, tol):
    """Forward Ã·X and its backward gives Ãᵀ·G, in float64 and float32."""
    a = random_dense(17, 0.25, 11, self_loops=True)
    adj = gcn_norm(3, *to_csr(a), dtype)
    assert adj.a.dtype == dtype and adj.a_t.dtype == dtype
    ref = torch.from_numpy(dense_norm(a))
    x64 = torch.randn(17, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = x64.to(dtype).requires_grad_(True)
    y = spmm(adj, x)
    torch.testing.assert_close(y.double(), ref @ x64.to(dtype).double(), rtol=tol, atol=tol)
    g64 = torch.randn(17, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y.backward(g64.to(dtype))
    # dX = Ãᵀ G
    torch.testing.assert_close(x.grad.double(), ref.T @ g64.to(dtype).double(), rtol=tol, atol=tol)


def test_spmm_backward_accepts_non_contiguous_gradient():
    """The explicit adjoint is correct for a non-contiguous upstream gradient."""
    a = random_dense(8, 0.4, 2, self_loops=False)
    adj = gcn_norm(0, *to_csr(a), torch.float64)
    x = torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, 8, dtype=torch.float64).T  # non-contiguous upstream gradient
    spmm(adj, x).backward(g)
    torch.testing.assert_close(x.grad, torch.from_numpy(dense_norm(a)).T @ g, rtol=1e-12, atol=1e-12)


def test_spmm_gradcheck_float64():
    """torch.autograd.gradcheck of spmm with respect to X."""
    a = random_dense(7, 0.4, 4, self_loops=True)
    adj = gcn_norm(0, *to_csr(a), torch.float64)
    x = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: spmm(adj, x), (x,), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_csr_mm_equals_torch_sparse_mm_bit_for_bit(dtype):
    """csr_mm (an addmm into an uninitialised output, beta = 0) gives torch.sparse.mm's bits: empty rows
    come out zero whatever the fresh output held, for a strided x too, with no rows or no columns."""
    a = random_dense(23, 0.2, 5, self_loops=True)
    a[[3, 11]] = 0.0  # rows without entries: their output rows must be written, not left as allocated
    m = gcn_norm(0, *to_csr(a), dtype).a
    gen = torch.Generator().manual_seed(2)
    for x in (torch.randn(23, 6, dtype=dtype, generator=gen), torch.randn(6, 23, dtype=dtype, generator=gen).T,
              torch.randn(23, 0, dtype=dtype)):
        for _ in range(3):  # fresh outputs come from memory the previous products freed
            torch.full((23, 6), float("nan"), dtype=dtype)  # leave NaN in the allocator's free memory
            assert torch.equal(csr_mm(m, x), torch.sparse.mm(m, x))
    empty = torch.sparse_csr_tensor(torch.zeros(1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
                                    torch.zeros(0, dtype=dtype), (0, 23))
    assert csr_mm(empty, torch.ones(23, 4, dtype=dtype)).shape == (0, 4)


def test_csr_mm_keeps_autograd_where_it_must():
    """A product autograd must record (x requiring grad, grad mode on) takes torch.sparse.mm's autograd
    (addmm's out= has none)."""
    a = random_dense(9, 0.3, 3, self_loops=False)
    m = gcn_norm(0, *to_csr(a), torch.float64).a
    x = torch.randn(9, 2, dtype=torch.float64, requires_grad=True)
    csr_mm(m, x).sum().backward()
    torch.testing.assert_close(x.grad, torch.from_numpy(dense_norm(a)).sum(0, keepdim=True).T.expand(9, 2))


def test_nbytes_counts_both_matrices():
    """The nbytes property is the storage of both CSR matrices (crow, col, values)."""
    a = random_dense(9, 0.3, 1, self_loops=False)
    nnz = int(np.count_nonzero(a)) + 9  # plus the added identity
    adj = gcn_norm(0, *to_csr(a), torch.float32)
    # two CSR matrices: crow (N+1) int32, col (nnz) int32 (sorted_csr: they fit), values (nnz) float32
    assert adj.a.col_indices().dtype == adj.a_t.crow_indices().dtype == torch.int32
    assert adj.nbytes == 2 * ((9 + 1) * 4 + nnz * 4 + nnz * 4)
    wide = sorted_csr(torch.tensor([0, 1]), torch.tensor([3, 2**31 + 1]), torch.ones(2), (2, 2**31 + 2))
    assert wide.col_indices().dtype == torch.int64 and wide.col_indices().tolist() == [3, 2**31 + 1]


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize(("halo", "square"), [(0, True), (0, False), (5, True)])
def test_row_phases_split_the_operator_at_a_row(halo, square, transposed):
    """Ã of time-major rows split at the horizon row: the head's product and its backward, and the tail's
    product, are the whole operator's rows bit for bit. Without halo columns (block-diagonal in time) the
    head is square when asked and both its matrices are views of Ã's arrays (its transpose left unbuilt, as
    the whole's, where Ã was made without one); else it keeps every column."""
    rng = np.random.default_rng(4)
    sizes = [6, 4, 7]
    blocks = [gcn_norm(t, *to_csr(random_dense(n, 0.4, t, False)), torch.float64) for t, n in enumerate(sizes)]
    diag = block_diagonal(blocks)
    n = sum(sizes)
    if halo:  # columns past the rows: a few entries of every row read rows other ranks own
        r = torch.from_numpy(np.repeat(np.arange(n), 2))
        c = torch.from_numpy(n + rng.integers(0, halo, 2 * n))
        a = diag.a.to_dense()
        dense = torch.cat([a, torch.zeros(n, halo, dtype=a.dtype)], 1)
        dense.index_put_((r, c), torch.rand(2 * n, dtype=a.dtype), accumulate=True)
        rows, cols = dense.nonzero(as_tuple=True)
        vals = dense[rows, cols]
        diag = NormalizedAdjacency(-1, sorted_csr(rows, cols, vals, (n, n + halo)),
                                   sorted_csr(cols, rows, vals, (n + halo, n)))
    if not transposed:
        diag = NormalizedAdjacency(-1, diag.a)
    k = sizes[0] + sizes[1]
    head, tail, narrow = row_phases(diag, k, square)
    assert narrow == (square and halo == 0)
    assert head.a.shape == (k, k if narrow else n + halo) and tail.shape == (n - k, n + halo)
    assert diag.has_transpose == transposed and head.has_transpose == (transposed or not narrow)
    if narrow:  # views, not copies
        assert head.a.values().data_ptr() == diag.a.values().data_ptr()
        if transposed:
            assert head.a_t.values().data_ptr() == diag.a_t.values().data_ptr()
    x = torch.randn(n + halo, 3, dtype=torch.float64, requires_grad=True)
    full = spmm(diag, x)
    g = torch.randn(n, 3, dtype=torch.float64)
    g[k:] = 0  # no training gradient reaches the rows after the horizon
    (full * g).sum().backward()
    want, x.grad = x.grad.clone(), None
    got = spmm(head, x[:k] if narrow else x)
    (got * g[:k]).sum().backward()
    assert torch.equal(got, full[:k]) and torch.equal(csr_mm(tail, x.detach()), full[k:])
    assert torch.equal(x.grad, want)  # the head's backward alone is the whole one's
