"""Host -> device snapshot transfer, block by block: IBM §3.2 and §6.2 (SPEC S3), for any strategy.

A rank's snapshots live in host memory; the compute device holds only the
ones the current block needs (with checkpoint blocks, S2, the forward pass and
the re-run of each block both load it: IBM §3.2 "this transfer happens
twice"). :class:`SnapshotTransfer` encodes every block once at setup, on the
host, into the wire format of ``strategy.transfer``:

* ``base`` — every snapshot as (index, value) pairs (IBM's baseline,
  :class:`~hpcdgnn.data.graph_diff.COOSnapshot`);
* ``graph_difference`` — the first snapshot of the block as CSR, each next one
  as its difference from the previous (:class:`~hpcdgnn.data.graph_diff.GraphDiff`).

and :meth:`SnapshotTransfer.load` copies a block's payloads to the device and
rebuilds the CSR snapshots there with torch ops (exact, bit-identical). Only
the payloads stay on the host (the diffs are smaller than the snapshots, so
graph difference also saves host memory). On CUDA the payloads are pinned and
the copies asynchronous. On the CPU the same wire format is decoded by
:func:`decode_block_host`, numpy's version of the device decoder: the same
arrays bit for bit, into fresh memory (the "copy"), but with the merges done
as merges (the device decoder's binary searches, written for the GPU, cost a
CPU core several times more: with checkpoint blocks every block is decoded
once or twice per epoch). ``tests/data/test_transfer_host.py`` checks the two
decoders against each other.

Every load adds its payload bytes to :attr:`SnapshotTransfer.bytes` and its
wall time (synchronised on CUDA) to :attr:`SnapshotTransfer.seconds`; the
trainer reports both (``transfer_bytes`` in metrics.jsonl and summary.json;
the seconds in the ``load`` column).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from hpcdgnn.data.graph_diff import COOSnapshot, CSRSnapshot, GraphDiff, Payload, decode_block, encode_block
from hpcdgnn.nn import kernels

__all__ = ["SnapshotTransfer", "decode_block_host"]


_NP_INDEX = {torch.int32: np.int32, torch.int64: np.int64}


def _host_keys(indptr: np.ndarray, indices: np.ndarray, n: int) -> np.ndarray:
    """Edge keys ``row * N + col`` (int64) of a canonical CSR, ascending."""
    return np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr)) * np.int64(n) + indices.astype(np.int64)


def decode_block_host(payloads: Sequence[Payload]) -> list[CSRSnapshot]:
    """:func:`~hpcdgnn.data.graph_diff.decode_block` on the CPU, with numpy: the same snapshots bit for bit
    (``indptr`` int64, the sender's index dtype, the payload's values), every array freshly allocated.

    A diff keeps the previous snapshot's keys that were not removed and merges the added ones in: the two
    lists are ascending and disjoint, so a stable sort of their concatenation is one linear merge
    (timsort finds the two runs). The row pointer counts the keys per row. On the CPU with numba the merge
    is one compiled pass over the previous CSR and the added keys (:func:`hpcdgnn.nn.kernels.graph_diff_merge`,
    the same arrays): checkpoint blocks decode every block once or twice an epoch, and numpy takes several passes.
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
            merged = kernels.graph_diff_merge(prev.indptr.numpy(), prev.indices.numpy(), p.removed.numpy(),
                                              p.added.numpy(), nnz)
            if merged is not None:  # one compiled pass over the two lists, no keys
                indptr, indices = merged
            else:
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
        csrs: the rank's snapshots (host CSR), in the order it processes them.
        groups: for each block, the positions in ``csrs`` of its snapshots, in order.
            Graph difference starts over at each block (IBM §6.2).
        mode: ``"base"`` or ``"graph_difference"`` (``strategy.transfer``).
        device: the compute device.
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
