"""The strategy interface the trainer calls: who owns what, how data moves, how a step is taken (STYLE G5).

The trainer (:mod:`hpcdgnn.train.trainer`) never names a strategy. It calls::

    plan = Strategy.make_plan(manifest, P, job)        rank 0; built by hpcdgnn.partition, broadcast
    scored = strategy.setup(plan, model, reader)       each rank reads what the plan gives it
    for epoch:
        for batch in strategy.batches(epoch):          the regime: one full batch, or mini-batches
            stats = strategy.step(model, task, batch, 1 / examples)   forward (DGNN.forward over
                                                       batch.layout) -> task loss -> backward
            strategy.sync_gradients(params)            all-reduced sum (or none, for model averaging)
            optimizer.step()
        strategy.evaluate(model, task, epoch)          None: metrics came from the training pass

and the hooks ``end_epoch`` (per-epoch report of approximate techniques),
``state_dict`` / ``load_state_dict`` (state across epochs, in checkpoints) and
``engine_bytes`` / ``host_bytes`` / ``transfer_stats`` (memory and S3 reports).

What each strategy implements (SPEC IDs, paper sections):

* ``snapshot`` — S1 snapshot partitioning with redistribution (IBM §4.2, Fig. 3a), with
  S2 gradient-checkpoint blocks (§3.1, Fig. 2/3b) and S3 graph-difference transfer (§3.2);
* ``pss`` — contiguous snapshots with the RNN state pipelined rank to rank (DGC §2.1);
* ``vertex`` — S6 vertex partitioning with halo exchange (IBM §4.1), D3 stale aggregation;
* ``chunk`` — D1 chunk partitioning (DGC §4), D2 fusion (§5.1), D3 stale aggregation (§5.2);
* ``sequences`` — R1 consecutive-block placement and R4 sequence mini-batches with per-rank model
  replicas (ReInc §3.4), R2 incremental aggregation (§3.2), R3 reuse caches (§3.1, §3.3): many
  batches per epoch, each with its own ``examples`` count, gradients all-reduced per batch;
* ``memory`` — M2 mini-batch × epoch × memory parallelism over an event stream (DistTGL §3.2–3.3):
  chronological event batches, the node memory as strategy state (``state_dict``) in a shared
  window per group, its own ``evaluate`` pass.

A later regime (DynaHB's hybrid batches, model averaging in ``end_epoch`` instead of a gradient
all-reduce) plugs in beside them through the same five calls.

A strategy owns the data placement and every collective of the training step,
so it alone knows which tensors must take part in the backward pass for the
collectives to line up on every rank (:meth:`Strategy.backward`,
:func:`hpcdgnn.nn.layout.joined`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from hpcdgnn.comm.buckets import GradientBuckets
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.nn.backward import run_backward
from hpcdgnn.nn.layout import Layout
from hpcdgnn.nn.models.base import DGNN

__all__ = ["Batch", "Strategy", "StrategyContext"]


@dataclass
class StrategyContext:
    """Everything a strategy consumes, built once by the trainer."""

    job: JobConfig
    manifest: Manifest
    comm: Communicator
    dtype: torch.dtype
    data_root: str
    device: torch.device = torch.device("cpu")
    #: epochs the model has already been trained for: a resumed run's checkpoint epoch, or the epoch of a
    #: re-cut (:func:`~hpcdgnn.train.setup.replan`). State that training made lives in the restored model, so
    #: set-up steps that would make it afresh (TGN's static-memory pre-training) are skipped when > 0
    start_epoch: int = 0


@dataclass
class Batch:
    """One optimizer step's worth of work, as :meth:`Strategy.batches` yields it.

    Attributes:
        epoch: the epoch (1-based).
        index: the batch's number in the epoch, the same on every rank.
        layout: the rows the model runs over on this rank (:mod:`hpcdgnn.nn.layout`).
        examples: training examples of this batch over all ranks, the loss denominator;
            None = all of the task's (a full batch).
        samples: what a mini-batch strategy runs on this rank for this batch (its own description;
            ``layout`` is then None: each sample builds its own).
    """

    epoch: int
    index: int
    layout: Layout | None
    examples: float | None = None
    samples: list | None = None


class Strategy:
    """Base class of partitioning strategies; subclasses register with :func:`register_strategy`."""

    #: the YAML ``strategy.name``; its options class is ``hpcdgnn.regimes.options_class("strategy", name)``
    name: ClassVar[str] = ""
    #: trains the whole graph in one batch per epoch (so it reproduces every other such strategy's losses)
    full_batch: ClassVar[bool] = True
    #: what the set-up (the start line's ``setup`` seconds) does, in a few words
    setup_work: ClassVar[str] = "read + normalise + precompute Ã·X"

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

    def attach_task(self, task: Any) -> None:
        """Called once after setup with the task head; mini-batch strategies count each batch's training
        examples with it (:meth:`Task.sample_examples`). Full-batch strategies need nothing."""

    def layout(self) -> Layout:
        """The whole timeline as one batch (what full-batch strategies train on every epoch)."""
        raise NotImplementedError

    def batches(self, epoch: int) -> Iterator[Batch]:
        """The batches of one epoch, in order; full-batch strategies yield one (IBM §2.2: one step per epoch)."""
        yield Batch(epoch, 0, self.layout())

    def step(self, model: DGNN, task: Any, batch: Batch, scale: float) -> np.ndarray:
        """Forward (:meth:`DGNN.forward` over ``batch.layout``), task loss times ``scale`` and backward;
        returns the task's metric sums. Strategies that interleave the three (checkpoint blocks) override it.
        """
        emb = model(batch.layout)
        out = task(emb, batch.epoch)
        self.backward(out.loss_sum * scale, batch.layout)
        return out.stats

    def evaluate(self, model: DGNN, task: Any, epoch: int) -> np.ndarray | None:
        """Validation / test metric sums from a pass of its own; None when the training pass measured them
        (full batch: the metrics of epoch e come from the forward that produced its loss).
        """
        return None

    def backward(self, loss: torch.Tensor, layout: Layout) -> None:
        """Backpropagate ``loss`` so that every rank runs the same collectives in the same order.

        Tasks keep their loss connected to every embedding they get (Task.forward's
        contract), so only a rank that scores nothing needs ``layout.last`` (the output
        of the last layout change) as an extra root: it is empty then, so it costs
        nothing, but its backward still takes part in the collective. ``layout.roots``
        (pipeline sends) join with a zero gradient.
        """
        roots = [loss, *(r for r in layout.roots if r.requires_grad)]
        self._backward(roots, [torch.ones_like(loss), *(torch.zeros_like(r) for r in roots[1:])], layout.last)
        layout.finish()

    @staticmethod
    def _backward(roots: list[torch.Tensor], grads: list[torch.Tensor], last: torch.Tensor | None) -> None:
        """The backward pass of ``roots``, plus ``last`` with a zero gradient when it is empty."""
        if last is not None and last.requires_grad and last.shape[0] == 0:
            roots, grads = [*roots, last], [*grads, torch.zeros_like(last)]
        run_backward(roots, grads)

    def sync_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum partial gradients over ranks (missing grads count as zero): one flat all-reduce, or with
        ``comm.grad_buckets`` > 1 (MPI, host parameters) buckets started during the backward pass
        (:class:`~hpcdgnn.comm.buckets.GradientBuckets`; it installs its hooks at the first call)."""
        self.comm.complete_deferred()  # exchanges this rank only sent in, posted during the step
        buckets = getattr(self, "_grad_buckets", None)
        if buckets is not None and not buckets.serves(params):  # another model (a pre-training copy) before
            buckets.close()
            buckets = self._grad_buckets = None
        if buckets is None and self._bucketed(params):
            buckets = self._grad_buckets = GradientBuckets(self.comm, params, self.ctx.job.comm.grad_buckets)
        if buckets is not None:
            buckets.synchronize()
            return
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

    def _bucketed(self, params: list[torch.nn.Parameter]) -> bool:
        """Whether the gradient all-reduce runs in buckets (see :meth:`sync_gradients`); the same on every rank."""
        return (self.ctx.job.comm.grad_buckets > 1 and self.comm.size > 1 and self.comm.backend == "mpi"
                and len(params) > 1 and all(p.device.type == "cpu" for p in params))

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
        """State that must survive a restart (saved per rank in every checkpoint): what later epochs
        depend on beyond the plan (recomputed) and the model — e.g. the stale-aggregation caches, the
        node memory of ``memory``, the reuse cache of ``sequences``. None by default.
        """
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` after ``setup`` on resume (empty when P changed)."""
        if state:
            raise NotImplementedError(f"strategy {self.name!r} saved state it cannot restore")

    def transfer_stats(self) -> tuple[int, float]:
        """Input bytes moved host -> device so far and the seconds it took (S3); cumulative."""
        return 0, 0.0

    def rebalanced_plan(self, plan: Any, compute: list[float]) -> Any | None:
        """Rank 0, after the warm-up epochs: a plan re-cut from each rank's measured compute seconds (``compute``,
        one per rank), or None to keep ``plan`` (the default; strategies with ``balance: measured`` re-cut).
        The training loop then builds a new strategy on it (:func:`hpcdgnn.train.setup.replan`)."""
        return None

    def close(self) -> None:
        """Release what would outlive this object once a new strategy replaces it: the gradient buckets'
        hooks on the model's parameters (every rank calls it at the same point)."""
        buckets = getattr(self, "_grad_buckets", None)
        if buckets is not None:
            buckets.close()
            self._grad_buckets = None
