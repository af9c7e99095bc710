"""S3, graph-difference transfer of snapshots: IBM §3.2 ("Graph-difference Based Input Transfer"), §6.2.

Within a block of consecutive snapshots ``A_s, ..., A_e`` (an S2 checkpoint
block, or the snapshots of one rank inside it), the first snapshot crosses the
host->device link in full, as CSR; every next snapshot ``A_{i+1}`` crosses as a
difference against ``A_i``, which the receiver already holds. IBM §3.2 splits
the edges into ``A^com`` (in both), ``A_i^ext`` (only in ``A_i``) and
``A_{i+1}^ext`` (only in ``A_{i+1}``) and sends the indices of the two ``ext``
sets plus *all* values of ``A_{i+1}`` (values change from one snapshot to the
next, e.g. after M-transform or edge-life smoothing, SPEC S5, so the values of
``A^com`` cannot be reused). The receiver rebuilds ``A_{i+1}`` exactly.

Edges are identified by their key ``row * N + col`` (row = source vertex). A
canonical CSR (rows in order, columns sorted within each row, no duplicates;
the layout of the dataset shards, see :mod:`hpcdgnn.data.shard_reader`) lists
its nonzeros in ascending key order, so "position ``p`` in the nonzero list"
and "the ``p``-th smallest key" are the same thing.

Wire format (what crosses the link; sizes in bytes, ``Ip``/``In`` = index
itemsize of the previous/next snapshot's CSR, ``V`` = value itemsize)::

    full CSR  (CSRSnapshot, first snapshot of a block)
        indptr   int64            (N+1,)   row pointer                 8 (N+1)
        indices  int32 | int64    (nnz,)   column ids, sorted per row  I nnz
        values   float32 | 64     (nnz,)   edge weights                V nnz

    diff      (GraphDiff, A_{i+1} relative to A_i)
        removed  int32 | int64    (r,)     ascending positions into A_i's nonzero
                                           list of the edges in A_i^ext; int32
                                           when nnz(A_i) < 2^31               4|8 r
        added    int32 | int64    (a,)     ascending edge keys row*N+col of the
                                           edges in A_{i+1}^ext; int32 when
                                           N*N <= 2^31 (N <= 46340)           4|8 a
        values   float32 | 64     (nnz',)  all values of A_{i+1}, in its CSR
                                           (= ascending key) order            V nnz'

We send removals as *positions* rather than keys because the receiver holds
``A_i`` in CSR order: a position marks an entry of a keep-mask directly, with
no search. Additions are *keys* (not insertion positions + columns) because a
key is one number per edge where the alternative is two, and because keys
merge with the kept keys by a sorted search. Both index arrays use the
narrowest integer type that cannot overflow, since their bytes are what the
method saves. Array lengths (``N``, ``r``, ``a``, ``nnz' = nnz - r + a``) are
tensor shapes, host metadata known before the copy is issued, so they are
counted as zero bytes; :attr:`GraphDiff.nbytes` is exactly the sum of the three
arrays' ``nbytes``, and a diff of two snapshots with the same edge set moves
only ``V nnz'`` bytes.

Decoding uses torch operations only, all on the device of ``A_i``'s tensors,
with no host synchronisation (every output length is known from shapes), and
is deterministic: the rebuilt ``indptr``, ``indices`` and ``values`` are
bit-identical to ``A_{i+1}``'s, including dtypes. Encoding runs on the host
with numpy (the sender holds every snapshot in host memory).

The baseline (``transfer: base``, IBM §6.2 "Base") sends every snapshot as
(index, value) pairs, :class:`COOSnapshot`: ``(8 + 8 + V) nnz`` bytes, the
PyTorch COO layout that §3.2 names. We also report full CSR for every
snapshot (``csr``) as a reference point: it is the better naive format, and
graph difference saves less against it (the values dominate).

Bytes per block of ``b`` snapshots: ``base = sum_t (16 + V) nnz_t``, ``csr = sum_t csr_nbytes(A_t)``;
``graph_difference = csr_nbytes(A_s) + sum_{i} diff(A_i, A_{i+1}).nbytes``
(IBM §6.2: only the first snapshot of each block is sent naively, so the share
of snapshots that benefit is ``(b - 1) / b``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Union

import numpy as np
import torch

from hpcdgnn.data.snapshot import csr_rows
from hpcdgnn.indices import index_dtype

__all__ = [
    "CSRSnapshot",
    "COOSnapshot",
    "GraphDiff",
    "Payload",
    "TRANSFER_MODES",
    "csr_nbytes",
    "encode_diff",
    "decode_diff",
    "encode_block",
    "decode_block",
    "transfer_bytes",
]

#: ``mode`` choices of :func:`transfer_bytes`: IBM §6.2's "Base" and "GD".
TRANSFER_MODES = ("base", "graph_difference")


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bit pattern (floats compared as raw bits: -0.0 != 0.0, NaN == same NaN)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.view(as_int), b.view(as_int)
    return bool(torch.equal(a, b))


@dataclass(frozen=True)
class CSRSnapshot:
    """Adjacency ``A_t`` of one snapshot in canonical CSR, as torch tensors (the "full" payload).

    Rows are source vertices; columns are sorted within each row and unique, so
    edge keys ``row * N + col`` ascend along the nonzero list (the shard layout
    of :mod:`hpcdgnn.data.shard_reader`).

    Shapes:
        ``indptr``: (N+1,) int64, ``indptr[0] == 0``, ``indptr[-1] == nnz``.
        ``indices``: (nnz,) int32 or int64 column ids.
        ``values``: (nnz,) float32 or float64 edge weights.
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor

    @classmethod
    def from_arrays(cls, indptr, indices, values) -> CSRSnapshot:
        """Wrap numpy arrays or tensors (numpy arrays are shared, not copied); ``indptr`` becomes int64."""
        t = [
            torch.as_tensor(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
            for a in (indptr, indices, values)
        ]
        return cls(t[0].to(torch.int64), t[1], t[2])

    @classmethod
    def from_snapshot(cls, snap) -> CSRSnapshot:
        """The adjacency of a :class:`~hpcdgnn.data.snapshot.Snapshot` read from a shard."""
        return cls.from_arrays(snap.indptr, snap.indices, snap.weights)

    @property
    def num_vertices(self) -> int:
        """N, the number of rows (and columns)."""
        return int(self.indptr.shape[0]) - 1

    @property
    def nnz(self) -> int:
        """Number of stored edges."""
        return int(self.indices.shape[0])

    @property
    def device(self) -> torch.device:
        """Device of the tensors."""
        return self.indptr.device

    @property
    def nbytes(self) -> int:
        """Bytes of the three arrays: what sending this snapshot in full moves."""
        return sum(a.numel() * a.element_size() for a in (self.indptr, self.indices, self.values))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> CSRSnapshot:
        """Copy to ``device`` (asynchronous from pinned host memory with ``non_blocking=True``)."""
        return CSRSnapshot(*(a.to(device, non_blocking=non_blocking) for a in (self.indptr, self.indices, self.values)))

    def pin_memory(self) -> CSRSnapshot:
        """Page-locked host copy (IBM §3.2 uses pinned memory for the transfer; needs a CUDA build)."""
        return CSRSnapshot(*(a.pin_memory() for a in (self.indptr, self.indices, self.values)))

    def equal(self, other: CSRSnapshot) -> bool:
        """Bit-identical arrays with the same dtypes (the exactness S3 requires)."""
        return all(
            _bits_equal(a, b)
            for a, b in zip(
                (self.indptr, self.indices, self.values), (other.indptr, other.indices, other.values), strict=True
            )
        )


@dataclass(frozen=True)
class GraphDiff:
    """``A_{i+1}`` relative to ``A_i`` (IBM §3.2): the wire format in the module docstring.

    Shapes:
        ``removed``: (r,) int32 or int64, ascending positions into ``A_i``'s
            nonzero list of the edges of ``A_i`` absent from ``A_{i+1}``.
        ``added``: (a,) int32 or int64, ascending keys ``row * N + col`` of the
            edges of ``A_{i+1}`` absent from ``A_i``.
        ``values``: (nnz(A_{i+1}),) float, every value of ``A_{i+1}`` in CSR order.

    ``num_vertices`` (N) is host metadata and is not sent.
    """

    num_vertices: int
    removed: torch.Tensor
    added: torch.Tensor
    values: torch.Tensor

    @property
    def nnz(self) -> int:
        """Nonzeros of the snapshot this diff rebuilds."""
        return int(self.values.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes that cross the host->device link: the sum of the three arrays' sizes (no header)."""
        return sum(a.numel() * a.element_size() for a in (self.removed, self.added, self.values))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> GraphDiff:
        """Copy the arrays to ``device`` unchanged (narrow index dtypes stay narrow on the link)."""
        return GraphDiff(
            self.num_vertices,
            *(a.to(device, non_blocking=non_blocking) for a in (self.removed, self.added, self.values)),
        )

    def pin_memory(self) -> GraphDiff:
        """Page-locked host copy (needs a CUDA build)."""
        return GraphDiff(self.num_vertices, *(a.pin_memory() for a in (self.removed, self.added, self.values)))


@dataclass(frozen=True)
class COOSnapshot:
    """``A_t`` as (index, value) pairs: IBM §3.2's baseline wire format ("Base", §6.2).

    IBM transfers a snapshot "using standard sparse matrix representation of
    (index, value) pairs", i.e. a PyTorch COO tensor: int64 row and column
    indices plus the values, ``(16 + V) nnz`` bytes. ``transfer: base`` sends
    every snapshot this way; the receiver builds the row pointer by a search
    over the (sorted) rows. ``index_dtype`` is host metadata so the rebuilt CSR
    is bit-identical to the sender's.
    """

    num_vertices: int
    rows: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor
    index_dtype: torch.dtype

    @classmethod
    def from_csr(cls, csr: CSRSnapshot) -> COOSnapshot:
        """The (index, value) pairs of a canonical CSR, in its (row, column) order."""
        n = csr.num_vertices
        rows = torch.repeat_interleave(torch.arange(n, device=csr.device), torch.diff(csr.indptr), output_size=csr.nnz)
        return cls(n, rows, csr.indices.to(torch.int64), csr.values, csr.indices.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes that cross the link: rows, columns and values."""
        return sum(a.numel() * a.element_size() for a in (self.rows, self.cols, self.values))

    def to(self, device: torch.device | str, non_blocking: bool = False) -> COOSnapshot:
        """Copy the arrays to ``device``."""
        return COOSnapshot(
            self.num_vertices,
            *(a.to(device, non_blocking=non_blocking) for a in (self.rows, self.cols, self.values)),
            self.index_dtype,
        )

    def pin_memory(self) -> COOSnapshot:
        """Page-locked host copy (needs a CUDA build)."""
        return COOSnapshot(
            self.num_vertices, *(a.pin_memory() for a in (self.rows, self.cols, self.values)), self.index_dtype
        )

    def to_csr(self) -> CSRSnapshot:
        """The CSR on this payload's device (rows are sorted, so the row pointer is a search)."""
        n, dev = self.num_vertices, self.rows.device
        indptr = torch.searchsorted(self.rows, torch.arange(n + 1, device=dev, dtype=torch.int64))
        return CSRSnapshot(indptr, self.cols.to(self.index_dtype), self.values)


#: One element of an encoded block: the first snapshot in full, then diffs (or, with
#: ``transfer: base``, every snapshot as (index, value) pairs).
Payload = Union[CSRSnapshot, GraphDiff, COOSnapshot]


def csr_nbytes(csr: CSRSnapshot) -> int:
    """Bytes moved by sending ``csr`` in full (IBM §6.2 "Base"): ``8 (N+1) + (I + V) nnz``."""
    return csr.nbytes


# ----------------------------------------------------------------------------- encoder (host, numpy)


def _host_keys(csr: CSRSnapshot, what: str) -> np.ndarray:
    """Edge keys ``row * N + col`` (int64, host) of a CSR, after checking it is canonical.

    The decoder always produces canonical CSR, so a non-canonical input could not
    round-trip exactly; we refuse it here rather than send something that decodes
    to a different array.
    """
    indptr = csr.indptr.detach().cpu().numpy()
    indices = csr.indices.detach().cpu().numpy()
    n, nnz = indptr.shape[0] - 1, indices.shape[0]
    if indptr.ndim != 1 or n < 0 or indices.ndim != 1 or csr.values.shape != (nnz,):
        raise ValueError(
            f"{what}: CSR arrays have shapes indptr {tuple(indptr.shape)}, indices "
            f"{tuple(indices.shape)}, values {tuple(csr.values.shape)}; expected (N+1,), (nnz,), (nnz,)"
        )
    if csr.indptr.dtype != torch.int64 or csr.indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"{what}: indptr must be int64 and indices int32/int64, got {csr.indptr.dtype}, {csr.indices.dtype}"
        )
    if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) < 0).any():
        raise ValueError(f"{what}: indptr is not a row pointer for {nnz} nonzeros (must start at 0, not decrease)")
    if nnz and (indices.min() < 0 or indices.max() >= n):
        raise ValueError(f"{what}: column index out of range [0, {n})")
    rows = csr_rows(indptr)
    keys = rows * np.int64(n) + indices.astype(np.int64)
    if nnz > 1 and (np.diff(keys) <= 0).any():
        raise ValueError(f"{what}: columns must be sorted and unique within each row (canonical CSR)")
    return keys


def _member(sorted_keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Boolean mask: which ``query`` keys occur in the ascending, unique ``sorted_keys``."""
    if sorted_keys.shape[0] == 0:
        return np.zeros(query.shape[0], dtype=bool)
    pos = np.searchsorted(sorted_keys, query)
    return sorted_keys[np.minimum(pos, sorted_keys.shape[0] - 1)] == query


def _encode_keys(prev_keys: np.ndarray, nxt_keys: np.ndarray, n: int, values: torch.Tensor) -> GraphDiff:
    """The diff of two canonical key lists (already validated)."""
    # A_i^ext: entries of A_i not in A_{i+1}, as positions (see module docstring for why positions)
    removed = np.flatnonzero(~_member(nxt_keys, prev_keys))
    # A_{i+1}^ext: keys of A_{i+1} not in A_i, ascending because nxt_keys is
    added = nxt_keys[~_member(prev_keys, nxt_keys)]
    # narrowest safe dtypes: these two arrays are the only index bytes GD sends
    rm_dtype = index_dtype(prev_keys.shape[0])
    key_dtype = index_dtype(n * n - 1)
    return GraphDiff(
        num_vertices=n,
        removed=torch.from_numpy(removed.astype(rm_dtype)),
        added=torch.from_numpy(added.astype(key_dtype)),
        # all values of A_{i+1}: smoothing changes the weights of common edges too (IBM §3.2)
        values=values.detach().cpu().contiguous(),
    )


def encode_diff(prev: CSRSnapshot, nxt: CSRSnapshot) -> GraphDiff:
    """Encode ``nxt`` (``A_{i+1}``) relative to ``prev`` (``A_i``), on the host (IBM §3.2).

    Args:
        prev: ``A_i``, canonical CSR (tensors on any device; copied to host).
        nxt: ``A_{i+1}``, canonical CSR over the same N with the same index dtype.

    Returns:
        The :class:`GraphDiff`; its ``values`` share memory with ``nxt.values``
        when that is a contiguous host tensor.

    Raises:
        ValueError: different N or index dtype, or a CSR that is not canonical.
    """
    if prev.num_vertices != nxt.num_vertices:
        raise ValueError(f"encode_diff: snapshots have N = {prev.num_vertices} and {nxt.num_vertices}")
    if prev.indices.dtype != nxt.indices.dtype:
        # the decoder gives A_{i+1} the index dtype of A_i, so they must agree to be bit-identical
        raise ValueError(f"encode_diff: index dtypes differ ({prev.indices.dtype} vs {nxt.indices.dtype})")
    return _encode_keys(
        _host_keys(prev, "encode_diff: prev"), _host_keys(nxt, "encode_diff: nxt"), prev.num_vertices, nxt.values
    )


def encode_block(csrs: Sequence[CSRSnapshot], mode: str = "graph_difference") -> list[Payload]:
    """Encode a block ``[A_s, ..., A_e]`` as ``[A_s (full CSR), diff(A_s, A_s+1), ..., diff(A_e-1, A_e)]``.

    Each snapshot's keys are computed once and reused for both diffs it takes part in.
    With ``mode="base"`` every snapshot is sent alone as (index, value) pairs (:class:`COOSnapshot`).

    Raises:
        ValueError: as :func:`encode_diff`.
    """
    if mode not in TRANSFER_MODES:
        raise ValueError(f"encode_block: unknown mode {mode!r}; choose from {', '.join(TRANSFER_MODES)}")
    if mode == "base":
        return [COOSnapshot.from_csr(c) for c in csrs]
    if not csrs:
        return []
    first = csrs[0]
    payloads: list[Payload] = [first]
    prev_keys = _host_keys(first, "encode_block: snapshot 0")
    for j in range(1, len(csrs)):
        prev, nxt = csrs[j - 1], csrs[j]
        if nxt.num_vertices != first.num_vertices or nxt.indices.dtype != first.indices.dtype:
            raise ValueError(
                f"encode_block: snapshot {j} has N = {nxt.num_vertices}, index dtype "
                f"{nxt.indices.dtype}; snapshot 0 has {first.num_vertices}, {first.indices.dtype}"
            )
        nxt_keys = _host_keys(nxt, f"encode_block: snapshot {j}")
        payloads.append(_encode_keys(prev_keys, nxt_keys, prev.num_vertices, nxt.values))
        prev_keys = nxt_keys
    return payloads


# ----------------------------------------------------------------------------- decoder (device, torch only)


def _device_keys(csr: CSRSnapshot) -> torch.Tensor:
    """Edge keys ``row * N + col`` (int64) on the CSR's device, without a host sync."""
    n = csr.num_vertices
    counts = torch.diff(csr.indptr)
    # output_size is known on the host, so repeat_interleave needs no device->host read
    rows = torch.repeat_interleave(torch.arange(n, device=csr.device), counts, output_size=csr.nnz)
    return rows * n + csr.indices.to(torch.int64)


def _decode(prev: CSRSnapshot, prev_keys: torch.Tensor, diff: GraphDiff) -> tuple[CSRSnapshot, torch.Tensor]:
    """Rebuild ``A_{i+1}`` and its keys from ``A_i`` (with its keys) and the diff."""
    n, dev = prev.num_vertices, prev.device
    nnz_prev, n_rm, n_add = prev.nnz, int(diff.removed.shape[0]), int(diff.added.shape[0])
    nnz = nnz_prev - n_rm + n_add
    if diff.num_vertices != n:
        raise ValueError(f"decode_diff: diff is for N = {diff.num_vertices}, previous snapshot has N = {n}")
    if diff.values.shape != (nnz,) or n_rm > nnz_prev:
        raise ValueError(
            f"decode_diff: {nnz_prev} - {n_rm} removed + {n_add} added = {nnz} nonzeros, "
            f"but the diff carries {tuple(diff.values.shape)} values"
        )
    # the copies below are the host->device transfer; widening happens after, on the device
    removed = diff.removed.to(dev, non_blocking=True).to(torch.int64)
    added = diff.added.to(dev, non_blocking=True).to(torch.int64)
    values = diff.values.to(dev, non_blocking=True)

    # A^com = A_i minus A_i^ext: a keep-mask over A_i's nonzero list
    keep = torch.ones(nnz_prev, dtype=torch.bool, device=dev)
    keep[removed] = False
    # kept_before[p] = number of kept entries at positions < p (exclusive prefix sum)
    kept_before = torch.zeros(nnz_prev + 1, dtype=torch.int64, device=dev)
    torch.cumsum(keep, 0, out=kept_before[1:])

    # Merge two ascending, disjoint key lists (kept and added) by rank instead of a full sort:
    # an element's output position = its rank in its own list + the number of the other
    # list's keys below it. Added keys are never in A_i, so left/right search agree.
    pos_kept = kept_before[:-1] + torch.searchsorted(added, prev_keys)
    pos_added = torch.arange(n_add, device=dev) + kept_before[torch.searchsorted(prev_keys, added)]
    # removed entries go to a spare slot at index nnz, dropped afterwards; this keeps every
    # shape host-known (a boolean-mask compaction would need a device->host sync)
    pos_kept = torch.where(keep, pos_kept, torch.full_like(pos_kept, nnz))
    keys = torch.empty(nnz + 1, dtype=torch.int64, device=dev)
    keys[pos_kept] = prev_keys
    keys[pos_added] = added
    keys = keys[:nnz]

    rows = torch.div(keys, max(n, 1), rounding_mode="floor")
    indices = (keys - rows * n).to(prev.indices.dtype)
    # indptr[r] = number of keys below r * N; a search, so no atomics and no sync
    indptr = torch.searchsorted(keys, torch.arange(n + 1, device=dev, dtype=torch.int64) * n)
    return CSRSnapshot(indptr, indices, values), keys


def decode_diff(prev: CSRSnapshot, diff: GraphDiff) -> CSRSnapshot:
    """Rebuild ``A_{i+1}`` from ``A_i`` and the diff, with torch ops on ``prev``'s device (IBM §3.2).

    The result is bit-identical to the ``A_{i+1}`` given to :func:`encode_diff`:
    the same ``indptr`` (int64), ``indices`` (``prev.indices.dtype``) and
    ``values``. Deterministic and free of device->host synchronisation. The
    diff's arrays are copied to ``prev``'s device first (this is the transfer);
    when they are already there, the result's ``values`` is ``diff.values``
    itself, not a copy.

    Raises:
        ValueError: the diff's N or lengths do not fit ``prev`` (host-side checks
            on shapes only; the contents are trusted, as produced by the encoder).
    """
    return _decode(prev, _device_keys(prev), diff)[0]


def decode_block(payloads: Sequence[Payload], device: torch.device | str | None = None) -> list[CSRSnapshot]:
    """Rebuild a block from :func:`encode_block`'s payloads.

    A :class:`CSRSnapshot` payload starts over (it must come first); each
    :class:`GraphDiff` is applied to the snapshot decoded before it. Keys of the
    last snapshot are carried forward instead of being recomputed.

    Args:
        payloads: ``[full CSR, diff, diff, ...]``.
        device: where to rebuild (the full CSR is copied there); default: where
            the first payload's tensors are.

    Raises:
        ValueError: a diff with no snapshot before it, or a diff that does not fit.
    """
    out: list[CSRSnapshot] = []
    prev: CSRSnapshot | None = None
    keys: torch.Tensor | None = None
    for j, p in enumerate(payloads):
        if isinstance(p, COOSnapshot):
            prev = (p if device is None else p.to(device, non_blocking=True)).to_csr()
            keys = None  # the next payload is (index, value) pairs again: no diff applies to it
        elif isinstance(p, CSRSnapshot):
            prev = p if device is None else p.to(device, non_blocking=True)
            keys = _device_keys(prev)
        elif isinstance(p, GraphDiff):
            if prev is None:
                raise ValueError(f"decode_block: payload {j} is a diff but no full snapshot precedes it")
            if keys is None:
                keys = _device_keys(prev)
            prev, keys = _decode(prev, keys, p)
        else:
            raise TypeError(f"decode_block: payload {j} is {type(p).__name__}, expected CSRSnapshot or GraphDiff")
        out.append(prev)
    return out


# ----------------------------------------------------------------------------- accounting


def _split(n: int, num_blocks: int) -> list[range]:
    """``num_blocks`` contiguous ranges over ``range(n)``, sizes differing by at most one (empty ones dropped)."""
    base, extra = divmod(n, num_blocks)
    out, start = [], 0
    for b in range(num_blocks):
        stop = start + base + (b < extra)
        if stop > start:
            out.append(range(start, stop))
        start = stop
    return out


def transfer_bytes(
    csrs: Sequence[CSRSnapshot], mode: Literal["base", "csr", "graph_difference"], num_blocks: int = 1
) -> int:
    """Total host->device bytes to send ``csrs`` (IBM §6.2 "Base" vs "GD").

    Args:
        csrs: consecutive snapshots ``A_s, ..., A_e``.
        mode: ``"base"``: every snapshot as (index, value) pairs (:class:`COOSnapshot`,
            IBM's baseline); ``"csr"``: every snapshot as a full CSR (a reference point, not a
            transfer mode); ``"graph_difference"``:
            the first snapshot of each block as a full CSR, each next one as a
            :class:`GraphDiff` against its predecessor.
        num_blocks: split ``csrs`` into this many contiguous blocks of nearly
            equal length (S2's nb); the default treats all of ``csrs`` as one block.

    Raises:
        ValueError: unknown ``mode`` or ``num_blocks < 1``.
    """
    if mode not in (*TRANSFER_MODES, "csr"):
        raise ValueError(f"transfer_bytes: unknown mode {mode!r}; choose from {', '.join(TRANSFER_MODES)}, csr")
    if num_blocks < 1:
        raise ValueError(f"transfer_bytes: num_blocks must be >= 1, got {num_blocks}")
    if mode == "csr":
        return sum(csr_nbytes(c) for c in csrs)
    if mode == "base":
        return sum(COOSnapshot.from_csr(c).nbytes for c in csrs)
    total = 0
    for r in _split(len(csrs), num_blocks):
        block = encode_block([csrs[t] for t in r])
        total += csr_nbytes(block[0]) + sum(d.nbytes for d in block[1:])
    return total
