"""The strategy contract the trainer calls: who owns what, how data moves, how a step is taken (STYLE G5).

A strategy is generic over its batch type — :class:`FullBatch` (the whole timeline, one step an epoch),
:class:`SampleBatch` (sequence mini-batches) or :class:`EventBatch` (an event stream's iterations) — and the
trainer (:mod:`hpcdgnn.train.trainer`), which never names one, calls::

    plan = Strategy.make_plan(manifest, P, job)        rank 0, from hpcdgnn.partition; broadcast
    scored = strategy.setup(plan, model, task, reader)  this rank's data; then task.setup(reader, scored, comm)
    phase = strategy.pretraining()                     None, or epochs of a copy run by the same loop (below)
    for epoch:
        for batch in strategy.batches(epoch):
            stats = strategy.step(model, task, batch, 1 / examples)    forward -> loss -> backward
            strategy.sync_gradients(params); optimizer.step()
        strategy.evaluate(model, task, epoch)          None: the training pass measured the metrics
        strategy.report(epoch, train_loss)             what the epoch's record adds (collective)

with :meth:`~Strategy.usage` (memory and load/transfer counters, local), :meth:`~Strategy.state_dict` /
:meth:`~Strategy.load_state_dict` (checkpoints), :meth:`~Strategy.rebalanced_plan` (``balance: measured``)
and :meth:`~Strategy.close`.

What each strategy implements (paper sections):

* ``snapshot`` — S1 snapshot partitioning (IBM §4.2, Fig. 3a), S2 checkpoint blocks (§3.1), S3
  graph-difference transfer (§3.2);
* ``pss`` — contiguous snapshots, RNN state pipelined rank to rank (DGC §2.1);
* ``vertex`` — S6 vertex partitioning with halo exchange (IBM §4.1), D3 stale aggregation;
* ``chunk`` — D1 chunk partitioning (DGC §4), D2 fusion (§5.1), D3 stale aggregation (§5.2);
* ``sequences`` — R1 placement, R4 sequence mini-batches (ReInc §3.4), R2 incremental aggregation (§3.2),
  R3 reuse caches (§3.1, §3.3);
* ``memory`` — M2 mini-batch × epoch × memory parallelism over an event stream (DistTGL §3.2–3.3), M1's
  static-memory pre-training (§3.1) as a :class:`Pretraining` phase.

A strategy owns every collective of the training step, so it alone knows which tensors must join the backward
pass for the collectives to line up on every rank (:meth:`FullBatchStrategy.backward`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import torch

from hpcdgnn.comm.buckets import GradientBuckets
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.nn.backward import run_backward
from hpcdgnn.nn.layout import Layout
from hpcdgnn.nn.models.base import DGNN
from hpcdgnn.tasks.base import Scored

__all__ = ["Batch", "EventBatch", "FullBatch", "FullBatchStrategy", "Pretraining", "SampleBatch", "Scored",
           "Strategy", "StrategyContext", "Usage"]


@dataclass
class StrategyContext:
    """Everything a strategy consumes, built once by the trainer."""

    job: JobConfig
    manifest: Manifest
    comm: Communicator
    dtype: torch.dtype
    data_root: str
    device: torch.device = torch.device("cpu")
    #: epochs the model has already been trained for (a resume, a re-cut): > 0 skips set-up work that made
    #: state the restored model already holds (TGN's static-memory pre-training)
    start_epoch: int = 0


@dataclass
class Batch:
    """One optimizer step's worth of work.

    Attributes:
        epoch: the epoch (1-based; pre-training epochs count 1, 2, ... of their own phase).
        index: the batch's number in the epoch, the same on every rank.
        examples: training examples of this batch over all ranks, the loss denominator; None = all of the
            task's (a full batch).
    """

    epoch: int
    index: int
    examples: float | None = None


@dataclass
class FullBatch(Batch):
    """The whole timeline (IBM §2.2: one step an epoch); ``layout``: the rows the model runs over here."""

    layout: Layout | None = None


@dataclass
class SampleBatch(Batch):
    """Sequence mini-batch (ReInc §3.4): ``samples``, this rank's (sequence, node batch, batch number)."""

    samples: list = None  # type: ignore[assignment]


@dataclass
class EventBatch(Batch):
    """Iteration ``iteration`` of time segment ``segment`` of an event stream (DistTGL §3.3)."""

    segment: int = 0
    iteration: int = 0


B = TypeVar("B", bound=Batch)


@dataclass
class Usage:
    """A strategy's counters (cumulative over the run; the epoch records take differences).

    Attributes:
        engine_bytes: peak bytes of input data and precomputed tensors held on the device.
        host_bytes: bytes of input data kept in host memory for later transfers.
        transfer_bytes: input bytes moved host -> device so far (S3).
        transfer_seconds: seconds those transfers took.
        load_seconds: seconds spent reading or moving input data (the epoch line's "load" column).
    """

    engine_bytes: int = 0
    host_bytes: int = 0
    transfer_bytes: int = 0
    transfer_seconds: float = 0.0
    load_seconds: float = 0.0


@dataclass
class Pretraining(Generic[B]):
    """Epochs that train a copy of the model before epoch 1, run by the trainer's own loop (DistTGL §3.1).

    Attributes:
        name: what it trains (the log line).
        model: the copy trained (its parameters and the task's are the phase's optimizer's).
        task: the task head trained with it.
        epochs: how many epochs.
        batches: epoch -> the phase's batches (``Strategy.step`` takes them).
        examples: the loss denominator of an epoch (training examples over all ranks).
        finish: called once after the last epoch: keeps what the phase made.
    """

    name: str
    model: DGNN
    task: Any
    epochs: int
    batches: Callable[[int], Iterator[B]]
    examples: float
    finish: Callable[[], None]


class Strategy(Generic[B]):
    """Base class of partitioning strategies; subclasses register with :func:`register_strategy`."""

    #: the YAML ``strategy.name``; its options class is ``hpcdgnn.regimes.options_class("strategy", name)``
    name: ClassVar[str] = ""
    #: trains the whole graph in one batch per epoch (so it reproduces every other such strategy's losses)
    full_batch: ClassVar[bool] = False
    #: what the set-up (the start line's ``setup`` seconds) does, in a few words
    setup_work: ClassVar[str] = "read + normalise + precompute Ã·X"

    def __init__(self, ctx: StrategyContext) -> None:
        self.ctx = ctx
        self.comm = ctx.comm
        #: seconds spent reading or moving input data, cumulative (:attr:`Usage.load_seconds`)
        self.load_seconds = 0.0
        self.task: Any = None

    @classmethod
    def make_plan(cls, manifest: Manifest, num_ranks: int, job: JobConfig) -> Any:
        """The partition plan (rank 0 only; broadcast), made by :mod:`hpcdgnn.partition` (not named ``plan``:
        strategies keep the plan they were set up with as ``self.plan``)."""
        raise NotImplementedError

    def setup(self, plan: Any, model: DGNN, task: Any, reader: Any) -> Scored:
        """Read this rank's data for ``plan``; return what this rank scores (the trainer then runs
        ``task.setup(reader, scored, comm)``). ``task`` is kept for :meth:`batches`, not yet set up here."""
        raise NotImplementedError

    def pretraining(self) -> Pretraining[B] | None:
        """A phase before epoch 1 (after :meth:`setup` and the task's set-up), or None (the default)."""
        return None

    def batches(self, epoch: int) -> Iterator[B]:
        """The batches of one epoch, in order, the same number on every rank."""
        raise NotImplementedError

    def step(self, model: DGNN, task: Any, batch: B, scale: float) -> np.ndarray:
        """Forward, task loss times ``scale``, backward; returns the task's metric sums."""
        raise NotImplementedError

    def evaluate(self, model: DGNN, task: Any, epoch: int) -> np.ndarray | None:
        """Validation / test metric sums from a pass of its own; None when the training pass measured them
        (full batch: the metrics of epoch e come from the forward that produced its loss)."""
        return None

    def sync_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum partial gradients over ranks (missing grads count as zero): one flat all-reduce, or with
        ``comm.grad_buckets`` > 1 (MPI, host parameters) buckets started during the backward pass
        (:class:`~hpcdgnn.comm.buckets.GradientBuckets`; it installs its hooks at the first call)."""
        self.comm.exchange.complete_deferred()  # exchanges this rank only sent in, posted during the step
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

    def report(self, epoch: int, train_loss: float) -> dict[str, Any]:
        """What the epoch's metrics record adds (approximate techniques say how far they depart here); every
        rank calls it after each epoch with the global training loss, so it may run collectives."""
        return {}

    def usage(self) -> Usage:
        """This rank's memory and load/transfer counters (local: no collective)."""
        moved, seconds = self._transfer_stats()
        return Usage(self._engine_bytes(), self._host_bytes(), moved, seconds, self.load_seconds)

    def _engine_bytes(self) -> int:
        return 0

    def _host_bytes(self) -> int:
        return 0

    def _transfer_stats(self) -> tuple[int, float]:
        return 0, 0.0

    def state_dict(self) -> dict[str, Any]:
        """State later epochs depend on beyond the plan and the model (stale caches, the node memory, the
        reuse cache), saved per rank in every checkpoint."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` after ``setup`` on resume (empty when P changed)."""
        if state:
            raise NotImplementedError(f"strategy {self.name!r} saved state it cannot restore")

    def rebalanced_plan(self, plan: Any, compute: list[float]) -> Any | None:
        """Rank 0, after the warm-up epochs: a plan re-cut from each rank's measured compute seconds, or None
        to keep ``plan`` (the default). The trainer then builds a new strategy on it."""
        return None

    def close(self) -> None:
        """Release what would outlive this object once a new strategy replaces it: the gradient buckets'
        hooks on the model's parameters (every rank calls it at the same point)."""
        buckets = getattr(self, "_grad_buckets", None)
        if buckets is not None:
            buckets.close()
            self._grad_buckets = None


class FullBatchStrategy(Strategy[FullBatch]):
    """The whole timeline in one batch an epoch (IBM §2.2): subclasses give :meth:`layout`."""

    full_batch = True

    def layout(self) -> Layout:
        """The whole timeline as one batch."""
        raise NotImplementedError

    def batches(self, epoch: int) -> Iterator[FullBatch]:
        """One batch: the whole timeline."""
        yield FullBatch(epoch, 0, None, self.layout())

    def step(self, model: DGNN, task: Any, batch: FullBatch, scale: float) -> np.ndarray:
        """Forward over ``batch.layout``, loss × ``scale``, backward; strategies that interleave the three
        (checkpoint blocks) override it."""
        emb = model(batch.layout)
        out = task(emb, batch.epoch)
        self.backward(out.loss_sum * scale, batch.layout)
        return out.stats

    def backward(self, loss: torch.Tensor, layout: Layout) -> None:
        """Backpropagate ``loss`` so that every rank runs the same collectives in the same order.

        Tasks keep their loss connected to every embedding they get (Task.forward's contract), so only a rank
        that scores nothing needs ``layout.last`` (the output of the last layout change) as an extra root: it
        is empty then, so it costs nothing, but its backward still joins the collective. ``layout.roots``
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
