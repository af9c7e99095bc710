"""The strategy protocol: who owns what and how data moves (STYLE G5).

The trainer calls, per run: ``plan`` (rank 0) -> broadcast -> ``setup``; per
epoch: ``step`` (by default ``forward`` -> task loss -> ``backward``) ->
``sync_gradients`` -> optimizer step. It never branches on a strategy's name. A strategy owns the
data placement and every collective of the training step, so it alone knows
which tensors must take part in the backward pass for the collectives to
line up on every rank (see :meth:`Strategy.backward`).

Later strategies (vertex halo S6, PSS, chunks D1, ReInc blocks, DynaHB batches,
DistTGL memory parallelism) implement the same five methods; optional
techniques (S2 checkpoint blocks, S3 graph-difference transfer) wrap a
strategy's data path rather than adding flags to the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.nn.models.base import DGNN

__all__ = ["Strategy", "StrategyContext"]


@dataclass
class StrategyContext:
    """Everything a strategy consumes, built once by the trainer."""

    job: JobConfig
    manifest: Manifest
    comm: Communicator
    dtype: torch.dtype
    data_root: str
    device: torch.device = torch.device("cpu")
    extra: dict[str, Any] = field(default_factory=dict)


class Strategy:
    """Base class of partitioning strategies; subclasses register with :func:`register_strategy`."""

    name: ClassVar[str] = ""
    #: whether the strategy implements gradient-checkpoint blocks (``train.blocks`` > 1, SPEC S2)
    supports_blocks: ClassVar[bool] = False
    #: whether the strategy implements stale aggregation of halo rows (``stale``, SPEC D3)
    supports_stale: ClassVar[bool] = False
    #: whether the time encoder can run over active appearances only (``strategy.sequences: active``)
    supports_active_sequences: ClassVar[bool] = False
    #: whether the plan weighs its units with ``strategy.workload`` (the DGC §4.2 predictor)
    uses_workload_model: ClassVar[bool] = False
    #: output of the last layout change of the current step (see :meth:`backward`)
    _last: torch.Tensor | None = None

    def __init__(self, ctx: StrategyContext) -> None:
        self.ctx = ctx
        self.comm = ctx.comm
        #: seconds spent reading or moving input data in the current epoch (the "load" column)
        self.load_seconds = 0.0

    @classmethod
    def make_plan(cls, manifest: Manifest, num_ranks: int, job: JobConfig) -> Any:
        """Compute the partition plan (called on rank 0 only; the result is broadcast)."""
        raise NotImplementedError

    def setup(self, plan: Any, model: DGNN, reader: Any) -> list[int]:
        """Load this rank's data for ``plan``; return the snapshots whose embeddings this rank scores."""
        raise NotImplementedError

    def forward(self, model: DGNN) -> dict[int, torch.Tensor]:
        """Run the model; return ``{t: Z_t}`` for the snapshots this rank scores (each t on one rank)."""
        raise NotImplementedError

    def step(self, model: DGNN, task: Any, epoch: int, scale: float) -> np.ndarray:
        """Forward, task loss (times ``scale``) and backward of one full-batch step; returns the
        task's metric sums. Strategies that interleave the three (checkpoint blocks) override it.
        """
        emb = self.forward(model)
        batch = task(emb, epoch)
        self.backward(batch.loss_sum * scale)
        return batch.stats

    def backward(self, loss: torch.Tensor) -> None:
        """Backpropagate ``loss`` so that every rank runs the same collectives in the same order.

        ``self._last`` is the output of the strategy's last layout change (set by
        ``forward``). Tasks keep their loss connected to every embedding they get
        (Task.forward's contract), so only a rank that scores nothing needs it as an
        extra root: it is empty then, so it costs nothing, but its backward still
        takes part in the collective.
        """
        self._backward([loss], [torch.ones_like(loss)], self._last)
        self._last = None

    @staticmethod
    def _backward(roots: list[torch.Tensor], grads: list[torch.Tensor], last: torch.Tensor | None) -> None:
        """``torch.autograd.backward`` of ``roots``, plus ``last`` with a zero gradient when it is empty."""
        if last is not None and last.requires_grad and last.shape[0] == 0:
            roots, grads = [*roots, last], [*grads, torch.zeros_like(last)]
        torch.autograd.backward(roots, grads)

    def sync_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum partial gradients over ranks (one flat all-reduce; missing grads count as zero)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.comm.allreduce_(flat, "sum", tag="grad_allreduce")
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n

    def engine_bytes(self) -> int:
        """Peak bytes of input data and precomputed tensors this strategy holds on the device."""
        return 0

    def host_bytes(self) -> int:
        """Bytes of input data this strategy keeps in host memory for later transfers."""
        return 0

    def end_epoch(self, epoch: int, train_loss: float) -> dict[str, Any]:
        """Called on every rank after each epoch with the global training loss; returns what the
        strategy reports in that epoch's metrics record (approximate techniques say how far they
        depart here). May run collectives: every rank calls it at the same point.
        """
        return {}

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a restart (saved per rank in every checkpoint). The strategies
        so far keep none beyond the plan, which is recomputed; later ones (DistTGL memory, stale
        caches) return theirs here.
        """
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` after ``setup`` on resume (empty when P changed)."""
        if state:
            raise NotImplementedError(f"strategy {self.name!r} saved state it cannot restore")

    def transfer_stats(self) -> tuple[int, float]:
        """Input bytes moved host -> device so far and the seconds it took (S3); cumulative."""
        return 0, 0.0
