"""Host -> device snapshot transfer, block by block (SPEC S3; IBM §3.2, §6.2), for any strategy.

:class:`SnapshotTransfer` encodes each block once at setup, in ``strategy.transfer``'s wire
format (``base`` or ``graph_difference``, :mod:`hpcdgnn.data.graph_diff`), keeps only the
payloads on the host (pinned on CUDA), and rebuilds a block's CSR snapshots on the device
at each load, bit-exactly. With S2 every block loads twice per epoch (IBM §3.2).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from hpcdgnn.data.graph_diff import COOSnapshot, CSRSnapshot, GraphDiff, Payload, decode_block, encode_block

__all__ = ["SnapshotTransfer", "decode_block_host"]


_NP_INDEX = {torch.int32: np.int32, torch.int64: np.int64}


def _host_keys(indptr: np.ndarray, indices: np.ndarray, n: int) -> np.ndarray:
    """Edge keys ``row * N + col`` (int64) of a canonical CSR, ascending."""
    return np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr)) * np.int64(n) + indices.astype(np.int64)


def decode_block_host(payloads: Sequence[Payload]) -> list[CSRSnapshot]:
    """:func:`~hpcdgnn.data.graph_diff.decode_block` on the CPU: the same arrays bit for bit, freshly allocated.

    Merges run as merges (a stable sort of two ascending runs): the device decoder's binary searches
    cost a CPU core several times more.
    """
    out: list[CSRSnapshot] = []
    keys: np.ndarray | None = None
    prev: CSRSnapshot | None = None
    for j, p in enumerate(payloads):
        if isinstance(p, COOSnapshot):
            n, rows = p.num_vertices, p.rows.numpy()
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
            prev = CSRSnapshot(torch.from_numpy(indptr), p.cols.to(p.index_dtype, copy=True), p.values.clone())
            keys = None
        elif isinstance(p, CSRSnapshot):
            prev = CSRSnapshot(p.indptr.clone(), p.indices.clone(), p.values.clone())
            keys = None
        elif isinstance(p, GraphDiff):
            if prev is None:
                raise ValueError(f"decode_block: payload {j} is a diff but no full snapshot precedes it")
            n = prev.num_vertices
            nnz_prev, nnz = prev.nnz, p.nnz
            if p.num_vertices != n:
                raise ValueError(f"decode_diff: diff is for N = {p.num_vertices}, previous snapshot has N = {n}")
            if nnz != nnz_prev - p.removed.shape[0] + p.added.shape[0]:
                raise ValueError(f"decode_diff: {nnz_prev} - {p.removed.shape[0]} removed + {p.added.shape[0]} "
                                 f"added = {nnz_prev - p.removed.shape[0] + p.added.shape[0]} nonzeros, "
                                 f"but the diff carries {nnz} values")
            if keys is None:
                keys = _host_keys(prev.indptr.numpy(), prev.indices.numpy(), n)
            keep = np.ones(nnz_prev, dtype=bool)
            keep[p.removed.numpy()] = False
            keys = np.sort(np.concatenate([keys[keep], p.added.numpy().astype(np.int64)]), kind="stable")
            rows = keys // np.int64(max(n, 1))
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
            indices = (keys - rows * np.int64(n)).astype(_NP_INDEX[prev.indices.dtype])
            prev = CSRSnapshot(torch.from_numpy(indptr), torch.from_numpy(indices), p.values.clone())
        else:
            raise TypeError(f"decode_block: payload {j} is {type(p).__name__}, expected CSRSnapshot or GraphDiff")
        out.append(prev)
    return out


class SnapshotTransfer:
    """Encoded blocks of one rank's snapshots in host memory, loaded onto the device on demand.

    Args:
        csrs: the rank's snapshots (host CSR), in processing order.
        groups: per block, positions in ``csrs``; graph difference restarts at each block (IBM §6.2).
        mode: ``"base"`` or ``"graph_difference"`` (``strategy.transfer``).
    """

    def __init__(
        self, csrs: Sequence[CSRSnapshot], groups: Sequence[Sequence[int]], mode: str, device: torch.device
    ) -> None:
        self.mode = mode
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        self._payloads: list[list[Payload]] = []
        for g in groups:
            payloads = encode_block([csrs[i] for i in g], mode)
            if self._cuda:
                payloads = [p.pin_memory() for p in payloads]  # page-locked: DMA, async copies (IBM §3.2)
            self._payloads.append(payloads)
        #: payload bytes moved to the device so far (a counter; the trainer takes per-epoch deltas)
        self.bytes = 0
        #: seconds spent moving and rebuilding snapshots so far
        self.seconds = 0.0

    @property
    def host_bytes(self) -> int:
        """Bytes of the encoded payloads kept in host memory."""
        return sum(p.nbytes for ps in self._payloads for p in ps)

    def block_bytes(self, b: int) -> int:
        """Bytes one load of block ``b`` moves."""
        return sum(p.nbytes for p in self._payloads[b])

    def load(self, b: int) -> list[CSRSnapshot]:
        """Copy block ``b``'s payloads to the device and rebuild its snapshots there, exactly."""
        t0 = time.perf_counter()
        if self.device.type == "cpu":
            out = decode_block_host(self._payloads[b])
        else:
            out = decode_block(self._payloads[b], self.device)
        if self._cuda:
            torch.cuda.synchronize(self.device)  # the time of the copies, not of their launch
        self.seconds += time.perf_counter() - t0
        self.bytes += self.block_bytes(b)
        return out
