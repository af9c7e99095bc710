"""The batch loop every training phase runs: the epochs of a run and a strategy's pre-training phase."""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import nullcontext

import numpy as np
import torch

from hpcdgnn import preemption
from hpcdgnn.metrics.log import get_logger
from hpcdgnn.metrics.timers import is_train_tag
from hpcdgnn.optim import Adam

__all__ = ["BatchStop", "grad_norm", "pretrain", "train_batches"]


def grad_norm(params: list[torch.nn.Parameter]) -> float:
    """‖∇‖₂ over every parameter's gradient, summed in float64 (the same on every rank after the all-reduce)."""
    return float(torch.sqrt(sum(p.grad.detach().double().pow(2).sum() for p in params)))


class BatchStop:
    """The ranks' agreement on stopping an epoch between two of its batches for a pre-emption signal, so that a
    run of long epochs stops within about :attr:`INTERVAL_S` and a batch, not at the epoch's end (a scheduler's
    grace period may not hold the rest of the epoch).

    Before batch i ≥ 1 (an epoch of one batch never asks: it ends as soon), at indices every rank computes alike,
    the ranks all-reduce (max) [this rank received a signal, this rank's seconds a batch since the last agreement]:
    a signal anywhere stops every rank before the same batch; else the next agreement comes after
    ⌊:attr:`INTERVAL_S` / the slowest rank's seconds a batch⌋ batches, at least one and at most twice as many
    as since the last (1, 3, 7, … at first). On one rank the flag is read before every batch. The all-reduce is
    tagged ``control.stop`` (not training traffic). Only in an epoch the strategy
    :meth:`~hpcdgnn.strategies.base.Strategy.stops_between_batches` in, and only where the run can resume: from a
    checkpoint written at the stop, between training batches where the strategy
    :meth:`~hpcdgnn.strategies.base.Strategy.resumes_between_batches`, in the evaluation pass where it
    :meth:`~hpcdgnn.strategies.base.Strategy.resumes_evaluation`; else from the epoch's start (the epoch is
    abandoned) — checkpointed at its boundary, held in memory by the trainer (which it does when the epoch before
    took :attr:`HOLD_AFTER_S` or more) and then written, or a new run's first epoch (it leaves no checkpoint).
    :meth:`begin` says which of the two passes may stop.

    Args:
        comm: the run's communicator.
        flag: this rank's :class:`~hpcdgnn.preemption.PreemptionFlag`.
    """

    #: seconds of batches between two agreements (the all-reduce of 16 bytes costs microseconds)
    INTERVAL_S = 1.0
    #: an epoch whose predecessor took less (slowest rank) runs to its end unless its start was checkpointed: it
    #: ends soon after a signal anyway, and holding its start (a ``torch.save`` to memory) would cost a
    #: noticeable share of it (perf/results/preemption/)
    HOLD_AFTER_S = 1.0

    def __init__(self, comm, flag: preemption.PreemptionFlag) -> None:
        self.comm, self.flag = comm, flag
        #: batches the abandoned epoch trained before its stop (None: not stopped)
        self.stopped_at: int | None = None
        #: the epoch's training batches (set at their end), and whether its evaluation pass is under way
        self.trained, self.evaluating = 0, False
        self._next, self._last, self._t0 = 1, 0, 0.0

    def begin(self, start: int = 0, training: bool = True, evaluation: bool = True) -> None:
        """Start an epoch at batch ``start`` (a resume within it): the first agreement comes before the next.
        ``training``, ``evaluation``: whether the ranks may stop between its training batches, and in its
        evaluation pass (the same on every rank)."""
        self.stopped_at, self.trained, self.evaluating = None, start, False
        self.training, self.evaluation = training, evaluation
        #: what the task held after the training batches (``Task.held_scores``), set as evaluation starts
        self.scores = None
        self._next, self._last, self._t0 = start + 1, start, time.perf_counter()

    def in_evaluation(self, index: int) -> bool:
        """:meth:`before` batch ``index`` of the epoch's evaluation pass (``Strategy.evaluate``'s ``stop``): its
        batches count on after the training batches."""
        self.evaluating = True
        return self.evaluation and self.before(self.trained + index)

    def before(self, index: int) -> bool:
        """Whether every rank stops before batch ``index`` (collective at the agreed indices)."""
        if index < self._next:
            return False
        if self.comm.size == 1:
            stop = self.flag.raised
        else:
            now = time.perf_counter()
            raised, slowest = self.comm.allreduce_array(
                [float(self.flag.raised), (now - self._t0) / (index - self._last)], op="max", tag="control.stop")
            stop = raised > 0
            # the same on every rank (the maximum's); the gap at most doubles, so that cheap first batches do not
            # put the next agreement past a run of dearer ones (or past the epoch's end)
            gap = min(int(self.INTERVAL_S / max(slowest, 1e-9)), 2 * (index - self._last))
            self._next = index + max(1, gap)
            self._last, self._t0 = index, now
        if stop:
            self.stopped_at = index
        return stop


def train_batches(strategy, model, task, params: list[torch.nn.Parameter], optimizer, batches: Iterable,
                  examples: float, meter=None, stop: BatchStop | None = None, start: int = 0,
                  stats: np.ndarray | None = None, norm: float = 0.0) -> tuple[np.ndarray | None, float]:
    """One epoch's batches: zero grads, step with loss / global examples, sync gradients, optimizer step.

    ``examples``: the denominator of a full batch; ``meter``: a context manager around each step, or None;
    ``stop`` (begun by the caller, :meth:`BatchStop.begin`): asked before each batch but the first whether the
    ranks stop the epoch, where its ``training`` says so (its ``stopped_at`` then says after how many batches;
    the caller closes ``batches``); it counts the batches trained. ``start``: the index of ``batches``' first (a
    resume within the epoch), ``stats`` the metric sums of those before it and ``norm`` the last one's gradient
    norm. Returns this rank's metric sums (None without batches) and the last batch's gradient norm, the same
    on every rank: a check of exactness that Adam's scale-free update would hide.
    """
    ran = False
    for index, batch in enumerate(batches, start):
        # never before an attempt's first batch: every attempt trains one at least
        if stop is not None and stop.training and index > start and stop.before(index):
            break
        ran = True
        if stop is not None:
            stop.trained = index + 1
        optimizer.zero_grad(set_to_none=True)
        scale = 1.0 / (examples if batch.examples is None else batch.examples)
        with meter if meter is not None else nullcontext():
            batch_stats = strategy.step(model, task, batch, scale)
        strategy.sync_gradients(params)
        optimizer.step()
        stats = batch_stats if stats is None else stats + batch_stats
    # once, after the loop: the gradients stay those of the last batch (the step reads them, the next
    # zero_grad drops them), and a per-batch norm costs ~3 ops per parameter on every batch
    return stats, (grad_norm(params) if ran else norm)


def pretrain(strategy, comm, lr: float) -> tuple[float, int]:
    """Run the strategy's pre-training phase, if any, with its own Adam; then let it keep what it made. A
    pre-emption signal to any rank stops it at an epoch boundary, unfinished (the set-up then stops the run).

    Returns:
        Its seconds, and the bytes this rank sent in its training exchanges (its gradient all-reduces: in no
        epoch's record, nor set-up-tagged); (0, 0) without one."""
    phase = strategy.pretraining()
    if phase is None:
        return 0.0, 0
    t0 = time.perf_counter()
    before = comm.stats.snapshot()

    def sent() -> int:
        return sum(v.bytes_sent for tag, v in comm.stats.delta(before).items() if is_train_tag(tag))

    params = [p for mod in (phase.model, phase.task) for p in mod.parameters()]
    optimizer = Adam(params, lr=lr)
    losses = []
    for epoch in range(1, phase.epochs + 1):
        stats, _ = train_batches(strategy, phase.model, phase.task, params, optimizer, phase.batches(epoch),
                                 phase.examples)
        losses.append(phase.task.metrics(comm.allreduce_array(stats))["train_loss"])
        # the grace period of a pre-emption may not hold the remaining epochs: agree on stopping now
        if epoch < phase.epochs and comm.allreduce_array([float(preemption.requested())], tag="setup")[0] > 0:
            if comm.rank == 0:
                get_logger().info(f"{phase.name} pre-training stopped by a signal after epoch {epoch} of "
                                  f"{phase.epochs}")
            return time.perf_counter() - t0, sent()
    phase.finish()
    if comm.rank == 0:
        get_logger().info(f"{phase.name} pre-trained: {phase.epochs} epoch(s), loss {losses[0]:.4f} -> "
                          f"{losses[-1]:.4f}, {time.perf_counter() - t0:.2f}s")
    return time.perf_counter() - t0, sent()
