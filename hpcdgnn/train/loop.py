"""The batch loop every training phase runs: the epochs of a run and a strategy's pre-training phase."""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import nullcontext

import numpy as np
import torch

from hpcdgnn import preemption
from hpcdgnn.metrics.log import get_logger
from hpcdgnn.optim import Adam

__all__ = ["grad_norm", "pretrain", "train_batches"]


def grad_norm(params: list[torch.nn.Parameter]) -> float:
    """‖∇‖₂ over every parameter's gradient, summed in float64 (the same on every rank after the all-reduce)."""
    return float(torch.sqrt(sum(p.grad.detach().double().pow(2).sum() for p in params)))


def train_batches(strategy, model, task, params: list[torch.nn.Parameter], optimizer, batches: Iterable,
                  examples: float, meter=None) -> tuple[np.ndarray | None, float]:
    """One epoch's batches: zero grads, step with loss / global examples, sync gradients, optimizer step.

    ``examples``: the denominator of a full batch; ``meter``: a context manager around each step, or None.
    Returns this rank's metric sums (None without batches) and the last batch's gradient norm, the same on
    every rank: a check of exactness that Adam's scale-free update would hide.
    """
    stats = None
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        scale = 1.0 / (examples if batch.examples is None else batch.examples)
        with meter if meter is not None else nullcontext():
            batch_stats = strategy.step(model, task, batch, scale)
        strategy.sync_gradients(params)
        optimizer.step()
        stats = batch_stats if stats is None else stats + batch_stats
    # once, after the loop: the gradients stay those of the last batch (the step reads them, the next
    # zero_grad drops them), and a per-batch norm costs ~3 ops per parameter on every batch
    return stats, (grad_norm(params) if stats is not None else 0.0)


def pretrain(strategy, comm, lr: float) -> float:
    """Run the strategy's pre-training phase, if any, with its own Adam; then let it keep what it made. A
    pre-emption signal to any rank stops it at an epoch boundary, unfinished (the set-up then stops the run).

    Returns:
        Its seconds (0 without one)."""
    phase = strategy.pretraining()
    if phase is None:
        return 0.0
    t0 = time.perf_counter()
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
            return time.perf_counter() - t0
    phase.finish()
    if comm.rank == 0:
        get_logger().info(f"{phase.name} pre-trained: {phase.epochs} epoch(s), loss {losses[0]:.4f} -> "
                          f"{losses[-1]:.4f}, {time.perf_counter() - t0:.2f}s")
    return time.perf_counter() - t0
