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
the copies asynchronous; on the CPU the same encode/decode path runs, so CI
exercises it, and the "copy" is a real memory copy into fresh tensors.

Every load adds its payload bytes to :attr:`SnapshotTransfer.bytes` and its
wall time (synchronised on CUDA) to :attr:`SnapshotTransfer.seconds`; the
trainer reports both (``transfer_bytes`` in metrics.jsonl and summary.json;
the seconds in the ``load`` column).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from hpcdgnn.data.graph_diff import CSRSnapshot, Payload, decode_block, encode_block

__all__ = ["SnapshotTransfer"]


def _clone_payload(p: Payload) -> Payload:
    """A copy whose tensors own their memory (the CPU "transfer": decode must not alias host data)."""
    return type(p)(*(a.clone() if isinstance(a, torch.Tensor) else a for a in p.__dict__.values()))


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
        payloads = self._payloads[b]
        if self.device.type == "cpu":
            payloads = [_clone_payload(p) for p in payloads]
        out = decode_block(payloads, self.device)
        if self._cuda:
            torch.cuda.synchronize(self.device)  # the time of the copies, not of their launch
        self.seconds += time.perf_counter() - t0
        self.bytes += self.block_bytes(b)
        return out
