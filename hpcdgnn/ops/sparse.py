r"""GCN propagation with IBM Eq. 1 normalisation and an explicit-adjoint sparse product.

.. math::
    \tilde A = D^{-1/2} (A + I) D^{-1/2},\qquad D_{uu} = 1 + \sum_v A_{uv}      (IBM Eq. 1)

``Y = σ(Ã X W)`` (Eq. 2) is split as ``Ã X`` then ``(Ã X) W`` (IBM §5.5) so the first layer's ``Ã X``
is computed once (SPEC S4)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from hpcdgnn.indices import torch_index_dtype

__all__ = ["NormalizedAdjacency", "block_diagonal", "csr_mm", "csr_nbytes", "csr_tensor", "csr_transpose", "gcn_norm",
           "row_phases", "sorted_csr", "spmm", "stacked_gcn_norm", "transposed_mm"]


class NormalizedAdjacency:
    """Ã of one snapshot (``t``; -1 for several) and its transpose for the backward pass, as torch CSR tensors.

    ``a_t=None`` builds the transpose on first use: a forward-only operator never needs it."""

    __slots__ = ("_a_t", "a", "on_transpose", "t")

    def __init__(self, t: int, a: torch.Tensor, a_t: torch.Tensor | None = None) -> None:
        self.t, self.a, self._a_t = t, a, a_t
        #: called with this operator when its transpose is built late (byte accounting)
        self.on_transpose: Callable[[NormalizedAdjacency], None] | None = None

    @property
    def a_t(self) -> torch.Tensor:
        """Ãᵀ, built now (and kept) where the operator was made without it."""
        return self.transposed()._a_t

    def transposed(self) -> NormalizedAdjacency:
        """This operator with Ãᵀ built (now, if it was not)."""
        if self._a_t is None:
            self._a_t = csr_transpose(self.a)
            if self.on_transpose is not None:
                self.on_transpose(self)
        return self

    @property
    def has_transpose(self) -> bool:
        """Whether Ãᵀ is built (:attr:`a_t` would not build it)."""
        return self._a_t is not None

    @property
    def nbytes(self) -> int:
        """Bytes held by the CSR matrices built so far."""
        return csr_nbytes(self.a) + (csr_nbytes(self._a_t) if self._a_t is not None else 0)


def csr_nbytes(m: torch.Tensor) -> int:
    """Bytes of a CSR tensor's three arrays."""
    return sum(x.numel() * x.element_size() for x in (m.crow_indices(), m.col_indices(), m.values()))


def _as_tensor(a) -> torch.Tensor:
    return a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))


def csr_tensor(crow: torch.Tensor, col: torch.Tensor, val: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The CSR tensor of valid arrays, indices int32 where they fit (MKL's product takes int32)."""
    idx = torch_index_dtype(max(col.shape[0], shape[1]))
    # the callers build valid arrays; skipping the check also skips its warning
    return torch.sparse_csr_tensor(crow.to(idx), col.to(idx), val, shape, check_invariants=False)


def sorted_csr(
    rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """CSR of (row, col, value) entries with unique (row, col), ordered by row then column (:func:`csr_tensor`)."""
    nrows, ncols = shape
    keys, order = torch.sort(rows.to(torch.int64) * ncols + cols)
    crow = torch.searchsorted(keys, torch.arange(nrows + 1, device=keys.device, dtype=torch.int64) * ncols)
    return csr_tensor(crow, cols[order], vals[order], shape)


def csr_entries(indptr, indices, weights) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(rows, cols, float64 weights, N) of a CSR adjacency's entries (numpy or torch), where ``indptr`` lives."""
    indptr, indices, weights = _as_tensor(indptr).to(torch.int64), _as_tensor(indices), _as_tensor(weights)
    dev = indptr.device
    n, nnz = indptr.shape[0] - 1, indices.shape[0]
    rows = torch.repeat_interleave(torch.arange(n, device=dev), torch.diff(indptr), output_size=nnz)
    return rows, indices.to(dev, torch.int64), weights.to(dev, torch.float64), n


def gcn_norm(t: int, indptr, indices, weights, dtype: torch.dtype) -> NormalizedAdjacency:
    """Build Ã (IBM Eq. 1) of a CSR adjacency with self-loops added, in float64 then cast, on ``indptr``'s device.

    Torch ops only, in a fixed order on the CPU: the same snapshot gives bit-identical Ã on every rank."""
    rows, cols, w, n = csr_entries(indptr, indices, weights)
    dev = rows.device
    keep = rows != cols  # A + I: an input self-loop would be counted twice otherwise
    rows, cols, w = rows[keep], cols[keep], w[keep]
    deg = torch.ones(n, dtype=torch.float64, device=dev).index_add_(0, rows, w)
    dinv = 1.0 / torch.sqrt(deg)
    loop = torch.arange(n, dtype=torch.int64, device=dev)
    r = torch.cat([rows, loop])
    c = torch.cat([cols, loop])
    v = (torch.cat([w, torch.ones(n, dtype=torch.float64, device=dev)]) * dinv[r] * dinv[c]).to(dtype)
    return NormalizedAdjacency(t, sorted_csr(r, c, v, (n, n)), sorted_csr(c, r, v, (n, n)))


def csr_mm(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``a @ x`` for a CSR ``a`` and a dense ``x``: ``torch.sparse.mm``'s result, bit for bit.

    On the CPU outside autograd, ``addmm(..., beta=0, out=out)`` skips sparse.mm's two extra passes over the output."""
    if not _plain_cpu_product(a, x):
        return torch.sparse.mm(a, x)
    x = x.contiguous()  # a strided x costs MKL a copy anyway; made here once
    out = x.new_empty(a.shape[0], x.shape[1])
    return torch.addmm(out, a, x, beta=0, out=out)


def _plain_cpu_product(a: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether a CPU CSR ``a`` and ``x`` outside autograd may take the ``out=`` products here."""
    return (a.layout == torch.sparse_csr and a.device.type == "cpu" and x.device.type == "cpu" and x.dim() == 2
            and a.dtype in (torch.float32, torch.float64) and x.dtype == a.dtype
            and not (x.requires_grad and torch.is_grad_enabled()))


def csr_transpose(a: torch.Tensor) -> torch.Tensor:
    """Aᵀ of a CSR ``a`` as a CSR tensor, its entries in (column, row) order (a key sort)."""
    crow = a.crow_indices().to(torch.int64)
    rows = _row_ids(torch.diff(crow), int(crow[-1]))
    return sorted_csr(a.col_indices().to(torch.int64), rows, a.values(), (a.shape[1], a.shape[0]))


def transposed_mm(adj: NormalizedAdjacency, x: torch.Tensor) -> torch.Tensor:
    """Ãᵀ·X: the product with Ãᵀ (built now where it is not yet)."""
    return csr_mm(adj.a_t, x)


class _SpMM(torch.autograd.Function):
    """Y = Ã X with dX = Ãᵀ dY (:func:`transposed_mm`; no sparse autograd needed)."""

    @staticmethod
    def forward(ctx, x, adj):  # noqa: D102
        ctx.adj = adj
        return csr_mm(adj.a, x)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return transposed_mm(ctx.adj, grad), None


def spmm(adj: NormalizedAdjacency, x: torch.Tensor) -> torch.Tensor:
    """Differentiable Ã·X for X of shape (N, F)."""
    return _SpMM.apply(x, adj)


def row_phases(adj: NormalizedAdjacency, k: int,
               square: bool = True) -> tuple[NormalizedAdjacency, torch.Tensor, bool]:
    """Rows [0, k) of Ã with their transpose, rows [k, n) without: an operator split at the training horizon.

    Returns ``(head, tail, square)``; both read Ã's arrays in place. With ``square`` the head is (k, k) when
    no entry crosses column k; else the head keeps all columns (its backward must reach the halo exchange)."""
    a = adj.a
    n, width = a.shape
    crow, col, val = a.crow_indices(), a.col_indices(), a.values()
    e = int(crow[k])
    square = square and (e == 0 or int(col[:e].max()) < k) and (e == col.shape[0] or int(col[e:].min()) >= k)
    if square:
        at = adj.a_t if adj.has_transpose else None
        head_t = None if at is None else csr_tensor(at.crow_indices()[: k + 1], at.col_indices()[:e],
                                                    at.values()[:e], (k, k))
        head = NormalizedAdjacency(adj.t, csr_tensor(crow[: k + 1], col[:e], val[:e], (k, k)), head_t)
    else:
        rows = _row_ids(torch.diff(crow[: k + 1].to(torch.int64)), e)
        head = NormalizedAdjacency(adj.t, csr_tensor(crow[: k + 1], col[:e], val[:e], (k, width)),
                                   sorted_csr(col[:e].to(torch.int64), rows, val[:e], (width, k)))
    tail = csr_tensor(crow[k:] - e, col[e:], val[e:], (n - k, width))
    return head, tail, square


def _block_diagonal_csr(ms: list[torch.Tensor]) -> torch.Tensor:
    crows, cols, vals = [], [], []
    nnz = rows = width = 0
    for m in ms:
        crow = m.crow_indices().to(torch.int64)
        crows.append(crow[:-1] + nnz)
        cols.append(m.col_indices().to(torch.int64) + width)
        vals.append(m.values())
        nnz += int(crow[-1])
        rows, width = rows + m.shape[0], width + m.shape[1]
    crows.append(crows[0].new_tensor([nnz]))
    return csr_tensor(torch.cat(crows), torch.cat(cols), torch.cat(vals), (rows, width))


def block_diagonal(adjs: list[NormalizedAdjacency]) -> NormalizedAdjacency:
    """diag(Ã_1, …, Ã_S): one sparse product over a phase's snapshots (snapshot-parallel, PiPAD), same sums."""
    if len(adjs) == 1:
        return adjs[0]
    transposed = all(a.has_transpose for a in adjs)
    return NormalizedAdjacency(-1, _block_diagonal_csr([a.a for a in adjs]),
                               _block_diagonal_csr([a.a_t for a in adjs]) if transposed else None)


def _row_ids(counts: torch.Tensor, total: int) -> torch.Tensor:
    """Row of each of ``total`` entries stored row by row: a scatter of ones and a prefix sum (repeat_interleave)."""
    ends = torch.cumsum(counts, 0)
    marks = torch.zeros(total + 1, dtype=torch.int64, device=counts.device)
    marks.index_add_(0, ends, torch.ones_like(ends))
    return torch.cumsum(marks[:total], 0)


def stacked_gcn_norm(snaps: list, ts: list[int], dtype: torch.dtype, transpose: bool = False) -> NormalizedAdjacency:
    """diag(Ã_1, …, Ã_S) of canonical CSR snapshots (IBM Eq. 1), bit for bit ``block_diagonal`` of ``gcn_norm``.

    Built in place: the diagonal is slotted into each canonical row, values by gcn_norm's float64 expressions in
    the same order. Ãᵀ is built only with ``transpose`` (else at the first backward)."""
    crow, col, val = _stacked_arrays(snaps, dtype)
    shape = (crow.shape[0] - 1, crow.shape[0] - 1)
    adj = NormalizedAdjacency(ts[0] if len(ts) == 1 else -1, csr_tensor(crow, col, val, shape))
    return adj.transposed() if transpose else adj


def _stacked_arrays(snaps: list, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """(crow, col, val) of diag(Ã_1, …, Ã_S) by torch's passes (:func:`stacked_gcn_norm`)."""
    dev = snaps[0].indptr.device
    parts = []
    for c in snaps:
        n, nnz = c.indptr.shape[0] - 1, c.indices.shape[0]
        counts = torch.diff(c.indptr)
        rows = _row_ids(counts, nnz)
        cols = c.indices.to(torch.int64)
        w = c.values.to(torch.float64)
        keep = rows != cols
        if not bool(keep.all()):
            rows, cols, w = rows[keep], cols[keep], w[keep]
            counts = torch.zeros(n, dtype=torch.int64, device=dev).index_add_(0, rows, torch.ones_like(rows))
        parts.append((n, rows, cols, w, counts))
    total = sum(n + rows.shape[0] for n, rows, *_ in parts)
    width = sum(p[0] for p in parts)
    crow = torch.zeros(width + 1, dtype=torch.int64, device=dev)
    col_a = torch.empty(total, dtype=torch.int64, device=dev)
    val_a = torch.empty(total, dtype=dtype, device=dev)
    off = r0 = 0
    for n, rows, cols, w, counts in parts:
        m = rows.shape[0]
        ar = torch.arange(n, device=dev)
        deg = torch.ones(n, dtype=torch.float64, device=dev).index_add_(0, rows, w)
        dinv = 1.0 / torch.sqrt(deg)
        ends = torch.cumsum(counts + 1, 0)
        crow[r0 + 1 : r0 + n + 1] = ends + off
        left = torch.zeros(n, dtype=torch.int64, device=dev).index_add_(0, rows, (cols < rows).to(torch.int64))
        diag = ends - (counts + 1) + left
        pos = torch.arange(m, device=dev).add_(rows).add_(cols > rows)
        ca = col_a[off : off + m + n]
        ca.scatter_(0, pos, cols).scatter_(0, diag, ar)
        v = torch.empty(m + n, dtype=torch.float64, device=dev)
        v.scatter_(0, pos, w * dinv.index_select(0, rows) * dinv.index_select(0, cols))
        v.scatter_(0, diag, torch.ones(n, dtype=torch.float64, device=dev) * dinv * dinv)
        va = val_a[off : off + m + n]
        va.copy_(v)
        if r0:
            ca += r0
        off, r0 = off + m + n, r0 + n
    return crow, col_a, val_a
