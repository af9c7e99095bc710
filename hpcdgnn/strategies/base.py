"""The strategy contract: who owns what, how data moves, how a step is taken (STYLE G5).

Generic over the batch type (:class:`FullBatch`, :class:`SampleBatch`, :class:`EventBatch`); the trainer calls::

    plan = Strategy.make_plan(manifest, P, job)        rank 0; broadcast
    scored = strategy.setup(plan, model, task, reader)
    phase = strategy.pretraining()                     None, or epochs run by the same loop
    strategy.attach_optimizer(optimizer)
    for epoch:
        for batch in strategy.batches(epoch):              batches(epoch, start=B): a resume within the epoch
            stats = strategy.step(model, task, batch, 1 / examples)
            strategy.sync_gradients(params); optimizer.step()
        strategy.evaluate(model, task, epoch)
        strategy.report(epoch, train_loss)

plus ``usage``, ``state_dict`` / ``load_state_dict``, ``rebalanced_plan`` and ``close``; where a pre-emption
may stop an epoch between batches ``stops_between_batches``, and where it may checkpoint there
``resumes_between_batches`` / ``resumes_evaluation``; and before the plan, on
rank 0, ``check_job`` (options that cannot work at P), ``check_data`` (or on the dataset's sizes), ``resolve``
(``auto``: the job with the planner's pick), ``variants`` / ``smaller`` (the option sets the planner prices; a
strategy's ``cost`` gives its per-rank work, :mod:`hpcdgnn.planner`; ``unpriced`` what it leaves out), and for
``check`` ``check_reads`` (what the set-up refuses only once it has read the data). Strategies:

* ``snapshot`` — S1 snapshot partitioning (IBM §4.2), S2 checkpoint blocks (§3.1), S3 graph differences (§3.2);
* ``pss`` — contiguous snapshots, RNN state pipelined rank to rank (DGC §2.1);
* ``vertex`` — S6 vertex partitioning with halo exchange (IBM §4.1), D3 stale aggregation;
* ``chunk`` — D1 chunk partitioning (DGC §4), D2 fusion (§5.1), D3 stale aggregation (§5.2);
* ``sequences`` — R1 placement, R4 sequence mini-batches (ReInc §3.4), R2 incremental aggregation (§3.2),
  R3 reuse caches (§3.1, §3.3);
* ``hybrid`` — H1 load-aware partition (DynaHB §4.1–4.2), H2 hybrid batches (Def. 3), H3 batch-size adjuster
  (§5.1), H5 asynchronous model averaging (Alg. 2);
* ``memory`` — M2 i×j×k parallelism over an event stream (DistTGL §3.2–3.3), M1 pre-training (§3.1);
* ``grid`` — snapshot groups × vertex ranges (IBM §6.5's future work), run by ``chunk``'s machinery;
* ``auto`` — the planner's pick of one of the above (trains nothing itself).
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
    #: epochs already trained (resume, re-cut); see :attr:`resumed` for set-up whose state the model already holds
    start_epoch: int = 0
    #: batches of the next epoch already trained (a resume within it, :meth:`Strategy.resumes_between_batches`)
    start_batch: int = 0

    @property
    def resumed(self) -> bool:
        """Whether the model holds trained state: epochs, or batches of one, already trained."""
        return self.start_epoch > 0 or self.start_batch > 0


@dataclass
class Batch:
    """One optimizer step: ``epoch`` (1-based), ``index`` (same on every rank), ``examples`` (loss
    denominator over all ranks; None = the whole task)."""

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
    """Cumulative counters: device-held and host-held input bytes, host->device transfer bytes/seconds (S3),
    seconds reading or moving input data."""

    engine_bytes: int = 0
    host_bytes: int = 0
    transfer_bytes: int = 0
    transfer_seconds: float = 0.0
    load_seconds: float = 0.0


@dataclass
class Pretraining(Generic[B]):
    """Epochs training a model copy before epoch 1 in the trainer's loop (DistTGL §3.1); ``finish`` runs after."""

    name: str
    model: DGNN
    task: Any
    epochs: int
    batches: Callable[[int], Iterator[B]]
    examples: float
    finish: Callable[[], None]


class Strategy(Generic[B]):
    """Base class of partitioning strategies; subclasses register with :func:`register_strategy`."""

    #: the YAML ``strategy.name``
    name: ClassVar[str] = ""
    #: one batch per epoch (reproduces every other full-batch strategy's losses)
    full_batch: ClassVar[bool] = False
    #: its plan partitions a graph (seconds to minutes on a large one): the set-up does not make it a second time
    #: to predict the job's peak memory (:func:`~hpcdgnn.train.footprint.check_predicted_peak`)
    costly_plan: ClassVar[bool] = False
    #: the splits whose Z_t the pass that computes a checkpoint's metrics yields (``embed``; see
    #: :mod:`hpcdgnn.train.inference`): a full batch all of them
    embeds: ClassVar[tuple[str, ...]] = ("train", "val", "test")
    #: what the set-up does, in a few words (start line)
    setup_work: ClassVar[str] = "read + normalise + precompute Ã·X"
    #: a choice of another strategy (``auto``), replaced by :meth:`resolve` before anything trains
    picks_another: ClassVar[bool] = False
    #: :meth:`state_dict` is the same on every rank, or any rank's serves every rank (agreed choices, global batch
    #: serials): a resume on another number of ranks restores rank r mod P_old's on rank r; else that resume gets
    #: none
    replicated_state: ClassVar[bool] = False

    def __init__(self, ctx: StrategyContext) -> None:
        self.ctx = ctx
        self.comm = ctx.comm
        self.load_seconds = 0.0
        self.task: Any = None

    @classmethod
    def check_job(cls, job: JobConfig, num_ranks: int, where: str | None) -> None:
        """Refuse (one line, ConfigError) options that cannot work at ``num_ranks``; before the plan, on rank 0."""

    @classmethod
    def check_data(cls, job: JobConfig, manifest: Any, where: str | None) -> None:
        """Refuse (one line, ConfigError) options that cannot work on this dataset (its sizes); rank 0, before
        the plan, and in ``python -m hpcdgnn check``: what the set-up would refuse, refused before it."""

    @classmethod
    def keeps_rank_state(cls, opts: Any) -> bool:
        """Whether a pass of these options reads per-rank state that only the run's own P and options restore
        from a checkpoint (stale-aggregation caches here; the event regime's node memory)."""
        stale = getattr(opts, "stale", None)
        return stale is not None and stale.mode != "off"

    @classmethod
    def variants(cls, opts: Any, num_ranks: int, manifest: Manifest) -> list[Any]:
        """The option sets the planner prices for this strategy at ``num_ranks`` (the job's own by default); the
        first is what the job's options train as written (the planner says so when there are several)."""
        return [opts]

    @classmethod
    def footprint(cls, job: JobConfig, manifest: Manifest, num_ranks: int) -> dict[str, tuple[int, str]]:
        """Lower bounds of what this strategy holds on a rank beyond its regime's terms, as the regime's
        ``footprint`` gives them (:mod:`hpcdgnn.train.footprint`): term -> (bytes, the keys that set it); none by
        default."""
        return {}

    @classmethod
    def smaller(cls, opts: Any, manifest: Manifest) -> list[Any]:
        """Option sets using less memory per rank, in order, that the planner tries when ``opts`` does not fit."""
        return []

    @classmethod
    def check_reads(cls, plan: Any, job: JobConfig, manifest: Manifest) -> None:
        """``check`` (rank 0, one process): refuse what the set-up refuses only once it reads the data (one line,
        a :class:`~hpcdgnn.errors.ConfigError`); by default nothing."""

    @classmethod
    def check_nodes(cls, plan: Any, ranks_per_node: int) -> None:
        """``check --ranks-per-node R`` (ranks filling nodes R at a time, in rank order): refuse (one line, a
        :class:`~hpcdgnn.errors.ConfigError`) a plan whose ranks must share a node and would not; by default
        nothing."""

    @classmethod
    def unpriced(cls, job: JobConfig) -> list[str]:
        """What of ``job``'s options the planner's :meth:`cost` leaves out, as notes for its prediction."""
        return []

    @classmethod
    def resolve(cls, job: JobConfig, where: str, num_ranks: int, budget: float, device: str
                ) -> tuple[JobConfig, dict | None]:
        """Rank 0, before the plan: the job this strategy trains (itself), and what ``plan.json`` adds (None)."""
        return job, None

    @classmethod
    def make_plan(cls, manifest: Manifest, num_ranks: int, job: JobConfig) -> Any:
        """The partition plan (rank 0 only; broadcast)."""
        raise NotImplementedError

    def setup(self, plan: Any, model: DGNN, task: Any, reader: Any) -> Scored:
        """Read this rank's data for ``plan``; return what it scores (``task`` is not yet set up)."""
        raise NotImplementedError

    def pretraining(self) -> Pretraining[B] | None:
        """A phase before epoch 1, or None."""
        return None

    def batches(self, epoch: int, start: int = 0) -> Iterator[B]:
        """The batches of one epoch, in order, the same number on every rank; from batch ``start`` on (a resume within
        the epoch: > 0 only where :meth:`resumes_between_batches`, or all of them where :meth:`resumes_evaluation`)."""
        raise NotImplementedError

    def step(self, model: DGNN, task: Any, batch: B, scale: float) -> np.ndarray:
        """Forward, task loss times ``scale``, backward; returns the task's metric sums."""
        raise NotImplementedError

    def stops_between_batches(self, epoch: int) -> bool:
        """Whether a pre-emption may abandon epoch ``epoch`` between two of its batches (the same on every rank):
        it has more than one, and after drawing the same batch from :meth:`batches` no rank waits in a collective
        of the rest of the epoch (an asynchronous exchange would). The run then writes the checkpoint of the
        epoch's start, or where :meth:`resumes_between_batches` the state at the stop
        (``hpcdgnn.train.loop.BatchStop``); False: the epoch runs to its end first."""
        return False

    def resumes_between_batches(self, epoch: int) -> bool:
        """Whether a stop between two of epoch ``epoch``'s training batches (:meth:`stops_between_batches`) may
        checkpoint where it is instead of abandoning the epoch (the same on every rank): :meth:`state_dict` then
        holds all a later batch depends on beside the weights, Adam's moments and the RNG states the checkpoint
        keeps, and ``batches(epoch, start=B)`` continues with batch B as the uninterrupted epoch would — no side
        effect of the batches before B runs again — so that the resume is bit for bit. An epoch longer than a job's
        allocation then still progresses. False: a stop abandons the epoch (its start is resumed)."""
        return False

    def resumes_evaluation(self, epoch: int) -> bool:
        """Whether a stop in epoch ``epoch``'s evaluation pass (where :meth:`evaluate` asks ``stop``) may checkpoint
        the epoch as its training batches left it, the resume evaluating it again (``batches(epoch, start=B)``
        with B all of them yields none): an abandoned pass leaves :meth:`state_dict` as training left it and draws
        from no process-wide RNG. False: the stop abandons the epoch."""
        return False

    def evaluate(self, model: DGNN, task: Any, epoch: int, stop: Callable[[int], bool] | None = None
                 ) -> np.ndarray | None:
        """Validation / test metric sums from a pass of its own; None when the training pass yields them.

        ``stop(i)``: where a pass of several batches may be abandoned (``BatchStop.in_evaluation``): asked before
        its batch i on every rank, in order — a collective at the indices it agrees at — and True abandons the
        pass (the return value is then unused); a strategy whose ranks do not all run the pass ignores it."""
        return None

    def attach_optimizer(self, optimizer: Any) -> None:
        """The trainer's optimizer, once, before epoch 1 (a strategy averaging Adam's moments keeps it)."""

    def sync_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum gradients over ranks (missing = zero): one flat all-reduce, or buckets overlapped with backward."""
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
        if self.comm.size == 1:  # the sum is the gradient itself: no flat copy; the call keeps the tag counted
            for p, g in zip(params, grads, strict=True):
                p.grad = g
            self.comm.allreduce_(grads[0], "sum", tag="grad_allreduce")
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.comm.allreduce_(flat, "sum", tag="grad_allreduce")
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n

    def _bucketed(self, params: list[torch.nn.Parameter]) -> bool:
        """Whether gradients go in buckets; the same on every rank."""
        return (self.ctx.job.comm.grad_buckets > 1 and self.comm.size > 1 and self.comm.backend == "mpi"
                and len(params) > 1 and all(p.device.type == "cpu" for p in params))

    def shape(self) -> str:
        """The layout the start line names after the strategy, where the set-up derived it from P (``grid``'s
        sides); empty by default."""
        return ""

    def report(self, epoch: int, train_loss: float) -> dict[str, Any]:
        """What the epoch's record adds; called on every rank, so it may run collectives."""
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
        """Per-rank state later epochs depend on beyond plan and model (caches, node memory)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` after ``setup`` on resume (empty when P changed, unless
        :attr:`replicated_state`)."""
        if state:
            raise NotImplementedError(f"strategy {self.name!r} saved state it cannot restore")

    def rebalanced_plan(self, plan: Any, compute: list[float]) -> Any | None:
        """Rank 0: a plan re-cut from each rank's compute seconds, or None to keep ``plan``."""
        return None

    def close(self, collective: bool = True) -> None:
        """Let go of what outlives a pass: the gradient buckets' hooks and communicator (collective: every rank
        calls it at the same point), a strategy's threads. ``collective=False``: an error unwinds this rank,
        maybe alone — only what is local (threads, hooks). Idempotent."""
        buckets = getattr(self, "_grad_buckets", None)
        if buckets is not None:
            buckets.close(collective)
            if collective:
                self._grad_buckets = None


class FullBatchStrategy(Strategy[FullBatch]):
    """The whole timeline in one batch an epoch (IBM §2.2): subclasses give :meth:`layout`."""

    full_batch = True

    def layout(self) -> Layout:
        """The whole timeline as one batch."""
        raise NotImplementedError

    def batches(self, epoch: int, start: int = 0) -> Iterator[FullBatch]:
        """One batch: the whole timeline."""
        yield FullBatch(epoch, 0, None, self.layout())

    def step(self, model: DGNN, task: Any, batch: FullBatch, scale: float) -> np.ndarray:
        """Forward over ``batch.layout``, loss × ``scale``, backward."""
        emb = model(batch.layout)
        out = task(emb, batch.epoch)
        self.backward(out.loss_sum * scale, batch.layout)
        return out.stats

    def backward(self, loss: torch.Tensor, layout: Layout) -> None:
        """Backpropagate ``loss`` so every rank runs the same collectives in the same order.

        A rank scoring nothing adds the empty ``layout.last`` as a root so its backward still joins the
        collective; ``layout.roots`` (pipeline sends) join with a zero gradient.
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
