"""S3, graph-difference transfer of snapshots (IBM §3.2, §6.2).

The first snapshot of a block crosses the host->device link as full CSR; each
next ``A_{i+1}`` crosses as a diff against ``A_i``, which the receiver holds:

    removed  int32|int64 (r,)    ascending positions into A_i's nonzero list
    added    int32|int64 (a,)    ascending keys row*N+col of the new edges
    values   float       (nnz',) all values of A_{i+1} (smoothing, S5, changes common edges too)

Edge keys ``row * N + col`` ascend along a canonical CSR's nonzero list, so a
position and a rank in key order coincide. Removals are positions (a direct
keep-mask on the receiver); additions are keys (one number per edge); both use
the narrowest dtype that cannot overflow. Decoding is torch-only, sync-free and
bit-exact. ``transfer: base`` (:class:`COOSnapshot`) is IBM's baseline.
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

    Shapes:
        ``indptr``: (N+1,) int64; ``indices``: (nnz,) int32/int64 sorted per row;
        ``values``: (nnz,) float.
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
    """``A_{i+1}`` relative to ``A_i`` (IBM §3.2); ``num_vertices`` is host metadata, not sent.

    Shapes:
        ``removed``: (r,) positions into ``A_i``; ``added``: (a,) keys of new edges;
        ``values``: (nnz(A_{i+1}),) in CSR order.
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
    """``A_t`` as int64 (row, col) pairs plus values: IBM's "Base" wire format, ``(16 + V) nnz`` bytes.

    ``index_dtype`` is host metadata so the rebuilt CSR is bit-identical to the sender's.
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


#: One element of an encoded block: a full CSR, a diff, or (``base``) COO pairs.
Payload = Union[CSRSnapshot, GraphDiff, COOSnapshot]


def csr_nbytes(csr: CSRSnapshot) -> int:
    """Bytes moved by sending ``csr`` in full (IBM §6.2 "Base"): ``8 (N+1) + (I + V) nnz``."""
    return csr.nbytes


# ----------------------------------------------------------------------------- encoder (host, numpy)


def _host_keys(csr: CSRSnapshot, what: str) -> np.ndarray:
    """Edge keys ``row * N + col`` (int64, host); refuses a non-canonical CSR, which could not round-trip."""
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
    """Encode ``nxt`` (``A_{i+1}``) relative to ``prev`` (``A_i``) on the host (IBM §3.2).

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
    """Encode ``[A_s, ..., A_e]`` as ``[A_s (CSR), diff(A_s, A_s+1), ...]``, or all COO with ``mode="base"``.

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

    # Merge two ascending, disjoint key lists by rank instead of a sort: position = own rank +
    # count of the other list's keys below (added keys are never in A_i, so searches agree).
    pos_kept = kept_before[:-1] + torch.searchsorted(added, prev_keys)
    pos_added = torch.arange(n_add, device=dev) + kept_before[torch.searchsorted(prev_keys, added)]
    # removed entries go to a spare slot at nnz: keeps shapes host-known (no device->host sync)
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
    """Rebuild ``A_{i+1}`` bit-identically from ``A_i`` and the diff, on ``prev``'s device, without host sync.

    Raises:
        ValueError: the diff's N or lengths do not fit ``prev`` (contents are trusted).
    """
    return _decode(prev, _device_keys(prev), diff)[0]


def decode_block(payloads: Sequence[Payload], device: torch.device | str | None = None) -> list[CSRSnapshot]:
    """Rebuild a block from :func:`encode_block`'s payloads on ``device`` (default: where they are).

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
        mode: ``"base"`` (COO), ``"csr"`` (full CSR each, a reference point) or
            ``"graph_difference"`` (full CSR per block, then diffs).
        num_blocks: split into this many near-equal contiguous blocks (S2's nb).
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
