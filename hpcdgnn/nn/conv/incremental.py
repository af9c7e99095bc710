r"""R2, incremental aggregation over consecutive snapshots: ReInc §3.2, Eq. 2 (SPEC Family B, R2).

.. math::
    Agg_t = Agg_{t-1} - F_{t-1} *_{aggr} G^-_t + F_t *_{aggr} G^+_t          (ReInc Eq. 2)

Every ``kind`` is written ``Agg_t = r_t ⊙ (M_t F_t)`` with ``M_t[v, u] = Â_t[v, u] c_t[u]``:
``sum`` (Â = A, c = r = 1), ``mean`` (r = 1 / row sum, 0 for an empty row) and ``gcn``
(Â = A without input self-loops plus I, c = r = d^-1/2, as ``gcn_norm``, IBM Eq. 1). The carried
state is ``S_t = M_t F_t``; ``G⁻_t``/``G⁺_t`` hold the entries of ``M_{t-1}``/``M_t`` that were
removed/added, changed value (including a ``gcn`` column-degree change) or read a changed feature
row (§3.2: a feature change is a deletion plus an insertion). A row whose delta is at least its
nnz is recomputed from scratch (exact, no more work); a step whose change ratio
``ρ_t = (|G⁻_t| + |G⁺_t|) / max(1, nnz(M_t[R]))`` exceeds ``threshold`` falls back to from scratch
(ReInc's fallback); step 0 always is. Structure is built once per aggregator; the feature delta
is found per call. Two distinct tensors that require grad count as changed everywhere (reading
F_{t−1} for an equal F_t would send F_t's gradient to F_{t−1}). Snapshots must be canonical CSR;
edges are matched by the key ``row * N + col`` as in :mod:`hpcdgnn.data.graph_diff`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

__all__ = [
    "AGGREGATIONS",
    "IncrementalAggregator",
    "IncrementalStats",
    "RowAdjacency",
    "StepStats",
    "build_row_adjacency",
]

#: ``kind`` choices: ReInc's built-in sum and mean (§3.2) and IBM Eq. 1's GCN normalisation.
AGGREGATIONS = ("sum", "mean", "gcn")

Aggregation = Literal["sum", "mean", "gcn"]


def _as_tensor(a, device=None) -> torch.Tensor:
    t = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
    return t if device is None else t.to(device)


def _csr_arrays(snap) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(indptr int64, indices int64, weights float64) of a CSRSnapshot, a Snapshot or a 3-tuple."""
    if isinstance(snap, (tuple, list)):
        indptr, indices, values = snap
    else:
        indptr = snap.indptr
        indices = snap.indices
        values = snap.values if hasattr(snap, "values") else snap.weights
    indptr = _as_tensor(indptr).to(torch.int64)
    dev = indptr.device
    return indptr, _as_tensor(indices, dev).to(torch.int64), _as_tensor(values, dev).to(torch.float64)


def _row_ids(counts: torch.Tensor, total: int) -> torch.Tensor:
    """Row index of each of ``total`` entries stored row by row, ``counts[r]`` in row r (gcn.py's scatter + cumsum)."""
    ends = torch.cumsum(counts, 0)
    marks = torch.zeros(total + 1, dtype=torch.int64, device=counts.device)
    marks.index_add_(0, ends, torch.ones_like(ends))
    return torch.cumsum(marks[:total], 0)


def _searchsorted(sorted_keys: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """``torch.searchsorted`` (left); numpy's on the CPU, faster for ascending queries."""
    if sorted_keys.device.type == "cpu":
        return torch.from_numpy(np.searchsorted(sorted_keys.numpy(), query.numpy()))
    return torch.searchsorted(sorted_keys, query)


def _expand(starts: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Concatenated ranges ``[starts[i], starts[i] + lens[i])`` as one index tensor, and its length."""
    total = int(lens.sum()) if lens.numel() else 0
    if total == 0:
        return torch.zeros(0, dtype=torch.int64, device=starts.device), 0
    offsets = torch.cumsum(lens, 0) - lens
    base = torch.repeat_interleave(starts - offsets, lens, output_size=total)
    return base + torch.arange(total, device=starts.device), total


def _crow(rows: torch.Tensor, nrows: int) -> torch.Tensor:
    """Row pointer of entries whose (ascending) row indices are ``rows``."""
    crow = torch.zeros(nrows + 1, dtype=torch.int64, device=rows.device)
    if rows.numel():
        torch.cumsum(torch.bincount(rows, minlength=nrows), 0, out=crow[1:])
    return crow


def _spmm(crow: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, shape: tuple[int, int], x: torch.Tensor):
    """CSR(crow, cols, vals) @ x, differentiable in x (torch.sparse.mm's own backward)."""
    a = torch.sparse_csr_tensor(crow, cols, vals, shape, check_invariants=False)
    return torch.sparse.mm(a, x)


@dataclass
class RowAdjacency:
    """``M_t[R, :]`` and ``r_t[R]`` of one snapshot, in canonical CSR.

    Shapes (k = |R|, m = nnz(M_t[R, :])):
        ``ptr`` (k+1,); ``rowpos`` (m,) R-position of each entry's row; ``cols`` (m,); ``vals`` (m,);
        ``scale`` (k,) or None (``sum``); ``keys`` (m,) ``rowpos * N + col``, ascending."""

    num_vertices: int
    ptr: torch.Tensor
    rowpos: torch.Tensor
    cols: torch.Tensor
    vals: torch.Tensor
    scale: torch.Tensor | None
    keys: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # keys rowpos * N + col, ascending: how consecutive snapshots are matched
        self.keys = self.rowpos * self.num_vertices + self.cols

    @property
    def nnz(self) -> int:
        """Entries of ``M_t[R, :]`` (for ``gcn`` including the diagonal)."""
        return int(self.cols.shape[0])

    @property
    def num_rows(self) -> int:
        """The number of rows, k = |R|."""
        return int(self.ptr.shape[0]) - 1

    def spmm(self, x: torch.Tensor) -> torch.Tensor:
        """``M_t[R, :] @ x``: the un-scaled aggregation from scratch, (k, d)."""
        return _spmm(self.ptr, self.cols, self.vals, (self.num_rows, self.num_vertices), x)


def build_row_adjacency(
    snap, kind: Aggregation, rows: torch.Tensor | None = None, dtype: torch.dtype = torch.float32
) -> RowAdjacency:
    """Build ``M_t[R, :]`` and ``r_t[R]`` of one canonical CSR snapshot.

    Args:
        snap: a ``CSRSnapshot``, a ``Snapshot`` or ``(indptr, indices, values)`` (result on ``indptr``'s device).
        kind: ``"sum"``, ``"mean"`` or ``"gcn"``.
        rows: R, unique vertex ids (output rows follow it), or None for all N.
        dtype: dtype of the values and scales (computed in float64, then cast, as ``gcn_norm``).

    Raises:
        ValueError: unknown ``kind`` or a CSR that is not canonical."""
    if kind not in AGGREGATIONS:
        raise ValueError(f"incremental aggregation: unknown kind {kind!r}; choose from {', '.join(AGGREGATIONS)}")
    indptr, indices, w = _csr_arrays(snap)
    dev = indptr.device
    n, nnz = int(indptr.shape[0]) - 1, int(indices.shape[0])
    counts = torch.diff(indptr)
    all_rows = _row_ids(counts, nnz)
    if nnz > 1 and bool(((all_rows * n + indices).diff() <= 0).any()):
        raise ValueError("incremental aggregation: snapshot CSR must be canonical (columns sorted, unique per row)")
    if rows is None:
        rows = torch.arange(n, device=dev)
        rowpos, cols, wr = all_rows, indices, w
    else:
        rows = rows.to(dev, torch.int64)
        lens = counts[rows]
        idx, total = _expand(indptr[rows], lens)
        rowpos = _row_ids(lens, total)
        cols, wr = indices[idx], w[idx]
    k = int(rows.shape[0])
    if kind == "sum":
        return RowAdjacency(n, _crow(rowpos, k), rowpos, cols, wr.to(dtype), None)
    if kind == "mean":
        total = torch.zeros(k, dtype=torch.float64, device=dev).index_add_(0, rowpos, wr)
        nz = total != 0
        scale = torch.where(nz, 1.0 / torch.where(nz, total, torch.ones_like(total)), torch.zeros_like(total))
        return RowAdjacency(n, _crow(rowpos, k), rowpos, cols, wr.to(dtype), scale.to(dtype))
    # gcn: the degree of every vertex (columns reach beyond R), input self-loops dropped as in gcn_norm
    off = all_rows != indices
    deg = torch.ones(n, dtype=torch.float64, device=dev).index_add_(0, all_rows[off], w[off])
    dinv = 1.0 / torch.sqrt(deg)
    v = rows[rowpos]
    keep = cols != v
    rowpos, cols, wr, v = rowpos[keep], cols[keep], wr[keep], v[keep]
    m = int(rowpos.shape[0])
    per_row = torch.bincount(rowpos, minlength=k)
    ptr = torch.zeros(k + 1, dtype=torch.int64, device=dev)
    torch.cumsum(per_row + 1, 0, out=ptr[1:])
    # slot the diagonal into each row in column order (stacked_gcn_norm's construction)
    left = torch.zeros(k, dtype=torch.int64, device=dev).index_add_(0, rowpos, (cols < v).to(torch.int64))
    diag = ptr[:-1] + left
    pos = torch.arange(m, device=dev) + rowpos + (cols > v).to(torch.int64)
    ar = torch.arange(k, device=dev)
    out_rowpos = torch.empty(m + k, dtype=torch.int64, device=dev)
    out_rowpos.scatter_(0, pos, rowpos).scatter_(0, diag, ar)
    out_cols = torch.empty(m + k, dtype=torch.int64, device=dev)
    out_cols.scatter_(0, pos, cols).scatter_(0, diag, rows)
    vals = torch.empty(m + k, dtype=torch.float64, device=dev)
    vals.scatter_(0, pos, wr * dinv[cols]).scatter_(0, diag, dinv[rows])
    return RowAdjacency(n, ptr, out_rowpos, out_cols, vals.to(dtype), dinv[rows].to(dtype))


_Csr = tuple


@dataclass
class _StepWork:
    """One incremental step's CSR matrices (``minus`` None: ``plus`` holds both, G⁻ negated)."""

    ratio: float
    touched: torch.Tensor
    plus: _Csr
    minus: _Csr | None
    rec: torch.Tensor
    rec_csr: _Csr
    rows_updated: int
    processed: int


def _take(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return a.index_select(0, idx)


def _ratio(n_delta: int, nnz: int) -> float:
    """ρ_t = (|G⁻_t| + |G⁺_t|) / nnz(M_t[R, :]); inf for a delta into an empty matrix, 0 for none."""
    return n_delta / nnz if nnz else (math.inf if n_delta else 0.0)


def _step_work(
    prev: RowAdjacency,
    cur: RowAdjacency,
    minus_idx: torch.Tensor,
    plus_idx: torch.Tensor,
    count: torch.Tensor,
    merge: bool,
) -> _StepWork:
    """The per-row choice and the compact matrices of a step with delta ``G^±``."""
    n, k, dev = cur.num_vertices, cur.num_rows, cur.ptr.device
    ratio = _ratio(int(minus_idx.shape[0]) + int(plus_idx.shape[0]), cur.nnz)
    row_nnz = cur.ptr[1:] - cur.ptr[:-1]
    touched_mask = count > 0
    scratch = touched_mask & (count >= row_nnz)
    rec = torch.nonzero(scratch).flatten()
    rm, rp = _take(prev.rowpos, minus_idx), _take(cur.rowpos, plus_idx)
    if rec.numel():
        keep_m, keep_p = ~_take(scratch, rm), ~_take(scratch, rp)
        minus_idx, rm = minus_idx[keep_m], rm[keep_m]
        plus_idx, rp = plus_idx[keep_p], rp[keep_p]
    touched = torch.nonzero(touched_mask & ~scratch).flatten()
    m = int(touched.shape[0])
    compact = torch.full((k,), -1, dtype=torch.int64, device=dev)
    compact[touched] = torch.arange(m, device=dev)
    rm, rp = _take(compact, rm), _take(compact, rp)
    cm, cp = _take(prev.cols, minus_idx), _take(cur.cols, plus_idx)
    vm, vp = _take(prev.vals, minus_idx), _take(cur.vals, plus_idx)
    if merge:
        keys, order = torch.sort(torch.cat([rm * n + cm, rp * n + cp]), stable=True)
        rows = torch.div(keys, max(n, 1), rounding_mode="floor")
        plus, minus = (_crow(rows, m), keys - rows * n, torch.cat([-vm, vp])[order]), None
    else:
        plus, minus = (_crow(rp, m), cp, vp), (_crow(rm, m), cm, vm)
    lens = _take(row_nnz, rec)
    idx, total = _expand(_take(cur.ptr, rec), lens)
    rec_crow = torch.zeros(int(rec.shape[0]) + 1, dtype=torch.int64, device=dev)
    torch.cumsum(lens, 0, out=rec_crow[1:])
    rec_csr = (rec_crow, _take(cur.cols, idx), _take(cur.vals, idx))
    processed = int(minus_idx.shape[0]) + int(plus_idx.shape[0]) + total
    return _StepWork(ratio, touched, plus, minus, rec, rec_csr, m, processed)


@dataclass
class _StepDelta:
    """Structural part of ``G^±_t`` between two :class:`RowAdjacency` of the same rows."""

    minus_mask: torch.Tensor  # (nnz_{t-1},) bool: entry of M_{t-1} removed or with a changed value
    plus_mask: torch.Tensor  # (nnz_t,) bool: entry of M_t added or with a changed value
    work: _StepWork


def _delta_count(prev: RowAdjacency, cur: RowAdjacency, minus_idx, plus_idx) -> torch.Tensor:
    k = cur.num_rows
    return torch.bincount(_take(prev.rowpos, minus_idx), minlength=k) + torch.bincount(
        _take(cur.rowpos, plus_idx), minlength=k
    )


def _step_delta(prev: RowAdjacency, cur: RowAdjacency) -> _StepDelta:
    kp, kc = prev.keys, cur.keys
    plus_mask = torch.ones(cur.nnz, dtype=torch.bool, device=kc.device)
    if cur.nnz and prev.nnz:
        pos = _searchsorted(kc, kp).clamp_(max=cur.nnz - 1)
        same = (_take(kc, pos) == kp) & (_take(cur.vals, pos) == prev.vals)
        plus_mask[pos[same]] = False
        minus_mask = ~same
    else:
        minus_mask = torch.ones(prev.nnz, dtype=torch.bool, device=kp.device)
    minus_idx, plus_idx = torch.nonzero(minus_mask).flatten(), torch.nonzero(plus_mask).flatten()
    count = _delta_count(prev, cur, minus_idx, plus_idx)
    return _StepDelta(minus_mask, plus_mask, _step_work(prev, cur, minus_idx, plus_idx, count, merge=True))


@dataclass
class StepStats:
    """What one step did: ``mode`` ``"scratch"`` (``reason`` ``"first"``/``"threshold"``) or ``"incremental"``.

    ``change_ratio`` is ρ_t (None at step 0); ``entries_scratch`` is nnz(M_t[R, :]) and
    ``entries_processed`` the entries this step multiplied."""

    t: int
    mode: str
    reason: str
    change_ratio: float | None
    rows_recomputed: int
    rows_updated: int
    rows_untouched: int
    entries_scratch: int
    entries_processed: int


@dataclass
class IncrementalStats:
    """Per-step :class:`StepStats` of one :meth:`IncrementalAggregator.aggregate` call; totals over steps 1..L−1."""

    steps: list[StepStats] = field(default_factory=list)

    def _inc(self) -> list[StepStats]:
        return self.steps[1:]

    @property
    def rows_recomputed(self) -> int:
        """Rows aggregated from scratch over steps 1..L−1."""
        return sum(s.rows_recomputed for s in self._inc())

    @property
    def rows_updated(self) -> int:
        """Rows updated by their delta over steps 1..L−1."""
        return sum(s.rows_updated for s in self._inc())

    @property
    def rows_untouched(self) -> int:
        """Rows left as they were over steps 1..L−1."""
        return sum(s.rows_untouched for s in self._inc())

    @property
    def recomputed_fraction(self) -> float:
        """Rows recomputed / (|R| · (L − 1)); 0 for a one-snapshot window."""
        total = self.rows_recomputed + self.rows_updated + self.rows_untouched
        return self.rows_recomputed / total if total else 0.0

    @property
    def work_fraction(self) -> float:
        """Entries multiplied / entries from scratch would multiply, over steps 1..L−1."""
        scratch = sum(s.entries_scratch for s in self._inc())
        done = sum(s.entries_processed for s in self._inc())
        return done / scratch if scratch else 0.0

    @property
    def fallbacks(self) -> int:
        """Steps ≥ 1 aggregated from scratch because ρ_t exceeded the threshold."""
        return sum(s.reason == "threshold" for s in self._inc())

    def as_dict(self) -> dict:
        """Totals and fractions as plain numbers (for logs and JSON)."""
        return {
            "rows_recomputed": self.rows_recomputed,
            "rows_updated": self.rows_updated,
            "rows_untouched": self.rows_untouched,
            "recomputed_fraction": self.recomputed_fraction,
            "work_fraction": self.work_fraction,
            "fallbacks": self.fallbacks,
        }


class IncrementalAggregator:
    """Aggregations of rows R over a window of snapshots A_0..A_{L−1}, by ReInc Eq. 2.

    Args:
        snapshots: L canonical CSR snapshots over the same N (see :func:`build_row_adjacency`).
        kind: ``"sum"``, ``"mean"`` or ``"gcn"``.
        rows: R, unique vertex ids (output rows follow their order), or None for all N.
        threshold: ``incremental_threshold``; a step with ρ_t > threshold is aggregated from scratch.
        dtype: value dtype; features passed to :meth:`aggregate` must have it.

    Raises:
        ValueError: unknown kind, no or mismatched snapshots, non-canonical CSR, bad row ids, negative threshold."""

    def __init__(
        self,
        snapshots: Sequence,
        kind: Aggregation = "gcn",
        rows=None,
        threshold: float = 0.5,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if not len(snapshots):
            raise ValueError("IncrementalAggregator: no snapshots")
        if not threshold >= 0:
            raise ValueError(f"IncrementalAggregator: threshold must be >= 0 (got {threshold})")
        self.kind, self.threshold, self.dtype = kind, float(threshold), dtype
        first = _csr_arrays(snapshots[0])[0]
        n = int(first.shape[0]) - 1
        if rows is not None:
            rows = _as_tensor(rows, first.device).to(torch.int64).flatten()
            if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n):
                raise ValueError(f"IncrementalAggregator: row ids must lie in [0, {n})")
            if torch.unique(rows).numel() != rows.numel():
                raise ValueError("IncrementalAggregator: row ids must be unique")
        self.num_vertices = n
        self.rows = rows
        self.adj = [build_row_adjacency(s, kind, rows, dtype) for s in snapshots]
        if any(a.num_vertices != n for a in self.adj):
            raise ValueError("IncrementalAggregator: snapshots have different N")
        self.deltas = [_step_delta(p, c) for p, c in zip(self.adj[:-1], self.adj[1:], strict=True)]

    @property
    def num_rows(self) -> int:
        """The number of rows, k = |R|."""
        return self.adj[0].num_rows

    def __len__(self) -> int:
        return len(self.adj)

    def _features(self, features) -> list[torch.Tensor]:
        fs = [features] * len(self.adj) if isinstance(features, torch.Tensor) else list(features)
        if len(fs) != len(self.adj):
            raise ValueError(f"IncrementalAggregator: {len(fs)} feature matrices for {len(self.adj)} snapshots")
        for t, f in enumerate(fs):
            if f.dim() != 2 or f.shape[0] != self.num_vertices or f.dtype != self.dtype:
                raise ValueError(
                    f"IncrementalAggregator: features of snapshot {t} are {tuple(f.shape)} {f.dtype}; "
                    f"expected (N={self.num_vertices}, d) {self.dtype}"
                )
        return fs

    def _out(self, t: int, s: torch.Tensor) -> torch.Tensor:
        scale = self.adj[t].scale
        return s if scale is None else s * scale.unsqueeze(1)

    def aggregate_from_scratch(self, features) -> list[torch.Tensor]:
        """``Agg_t[R]`` of every snapshot by ReInc Eq. 1 (the baseline).

        Args:
            features: one (N, d) tensor for all snapshots, or L of them.

        Returns:
            L tensors (|R|, d)."""
        fs = self._features(features)
        return [self._out(t, a.spmm(f)) for t, (a, f) in enumerate(zip(self.adj, fs, strict=True))]

    def aggregate(self, features, threshold: float | None = None) -> tuple[list[torch.Tensor], IncrementalStats]:
        """``Agg_t[R]`` of every snapshot, incrementally by ReInc Eq. 2.

        Args:
            features: one (N, d) tensor for all snapshots, or L tensors F_t (the same object = unchanged).
            threshold: overrides the constructor's ``threshold`` for this call.

        Returns:
            (L tensors (|R|, d), :class:`IncrementalStats`), differentiable in the features."""
        thr = self.threshold if threshold is None else float(threshold)
        fs = self._features(features)
        k = self.num_rows
        stats = IncrementalStats()
        a0 = self.adj[0]
        state = a0.spmm(fs[0])
        outs = [self._out(0, state)]
        stats.steps.append(StepStats(0, "scratch", "first", None, k, 0, 0, a0.nnz, a0.nnz))
        for t in range(1, len(self.adj)):
            prev, cur, delta = self.adj[t - 1], self.adj[t], self.deltas[t - 1]
            f_prev, f_cur = fs[t - 1], fs[t]
            work = delta.work
            ratio = work.ratio
            # feature deltas only add entries to G^±: a step over the threshold already falls back
            if f_cur is not f_prev and ratio <= thr:
                if torch.is_grad_enabled() and (f_cur.requires_grad or f_prev.requires_grad):
                    # distinct differentiable tensors are never 'unchanged': F_t's gradient would reach F_{t−1}
                    changed = torch.ones(self.num_vertices, dtype=torch.bool, device=f_cur.device)
                else:
                    changed = (f_cur != f_prev).any(dim=1)
                if bool(changed.any()):
                    minus_idx = torch.nonzero(delta.minus_mask | _take(changed, prev.cols)).flatten()
                    plus_idx = torch.nonzero(delta.plus_mask | _take(changed, cur.cols)).flatten()
                    ratio = _ratio(int(minus_idx.shape[0]) + int(plus_idx.shape[0]), cur.nnz)
                    if ratio <= thr:
                        count = _delta_count(prev, cur, minus_idx, plus_idx)
                        work = _step_work(prev, cur, minus_idx, plus_idx, count, merge=False)
            if ratio > thr:
                state = cur.spmm(f_cur)
                stats.steps.append(StepStats(t, "scratch", "threshold", ratio, k, 0, 0, cur.nnz, cur.nnz))
                outs.append(self._out(t, state))
                continue
            # Eq. 2 on the touched rows: S_t = S_{t−1} − M⁻_t F_{t−1} + M⁺_t F_t
            new = state.clone()
            m = int(work.touched.shape[0])
            if m:
                upd = _spmm(*work.plus, (m, self.num_vertices), f_cur)
                if work.minus is not None:
                    upd = upd - _spmm(*work.minus, (m, self.num_vertices), f_prev)
                new.index_add_(0, work.touched, upd)
            n_rec = int(work.rec.shape[0])
            if n_rec:
                new.index_copy_(0, work.rec, _spmm(*work.rec_csr, (n_rec, self.num_vertices), f_cur))
            state = new
            stats.steps.append(
                StepStats(t, "incremental", "", ratio, n_rec, m, k - n_rec - m, cur.nnz, work.processed)
            )
            outs.append(self._out(t, state))
        return outs, stats
