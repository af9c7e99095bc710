"""The task contract: turn embeddings Z_t into a loss and metrics, exactly across ranks.

Exactness by design (STYLE G11): a task returns the *sum* of per-example
losses over the snapshots this rank scores; the trainer divides by the global
number of training examples, which every rank knows from the manifest or from
one all-reduce at setup. A P-rank step is then the P = 1 step up to float
summation order. Metrics are likewise sums (counts, histogram bins) that are
all-reduced once per epoch and finished on every rank.

Time split (no leakage from the future): prediction steps are ordered in time
and cut into train / validation / test by ``task.split``; metrics of epoch e
are measured on the same forward pass that produced its training loss
(parameters before that epoch's update).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = ["Embeddings", "Task", "TaskBatch", "split_steps", "SPLITS"]

SPLITS = ("train", "val", "test")


def split_steps(num_steps: int, fractions: tuple[float, float, float]) -> list[range]:
    """Cut steps 0..num_steps-1 into consecutive train / val / test ranges by fraction."""
    a = int(round(fractions[0] * num_steps))
    b = int(round((fractions[0] + fractions[1]) * num_steps))
    a = max(1, min(a, num_steps)) if num_steps > 0 else 0
    b = max(a, min(b, num_steps))
    return [range(0, a), range(a, b), range(b, num_steps)]


class Embeddings(dict):
    """``{t: Z_t}`` that a layout hands the task, and — when the Z_t are the rows of one (S, n, F)
    block, as under the snapshot strategy — that ``block`` and each step's position in it.

    A task may then score all steps from the block itself (one projection GEMM over every row,
    pairs indexed by ``position[t] * n + vertex``) instead of stacking the Z_t again: the stack
    copied the block forward and its backward zero-filled and re-stacked a block-sized gradient.
    """

    block: torch.Tensor | None = None
    position: dict[int, int] | None = None

    @classmethod
    def of_block(cls, block: torch.Tensor, steps: list[int]) -> Embeddings:
        """The rows ``block[k]`` as ``Z_{steps[k]}``."""
        emb = cls(zip(steps, block.unbind(0)))
        emb.block, emb.position = block, {t: k for k, t in enumerate(steps)}
        return emb


@dataclass
class TaskBatch:
    """What a task returns for one forward pass on one rank."""

    loss_sum: torch.Tensor
    """Sum of training-example losses over this rank's snapshots (differentiable)."""
    stats: np.ndarray
    """Float64 sums, all-reduced by the trainer and turned into metrics by ``Task.metrics``."""


class Task(nn.Module):
    """Base of the task heads; subclasses own a decoder and the per-snapshot targets."""

    metric: str = "acc"
    """Name of the headline validation metric printed in the epoch line."""

    @staticmethod
    def train_horizon(cfg, manifest) -> int:
        """The last snapshot whose embedding enters the training loss (-1 if none).

        With causal temporal layers no gradient reaches a later snapshot, so
        strategies may compute those without recording autograd history.
        """
        raise NotImplementedError

    @staticmethod
    def snapshot_work(cfg, manifest) -> np.ndarray:
        """Relative cost of scoring each snapshot (multiply-adds; for work-balanced plans)."""
        raise NotImplementedError

    def setup(self, reader, snapshots: list[int], comm) -> None:
        """Read the targets of the snapshots this rank scores."""
        raise NotImplementedError

    def global_train_count(self) -> float:
        """Number of training examples over all ranks (the loss denominator)."""
        raise NotImplementedError

    def forward(self, emb: dict[int, torch.Tensor], epoch: int) -> TaskBatch:
        """Loss sum and metric sums for embeddings ``{t: Z_t (N, F')}``.

        Contract: ``loss_sum`` must depend on every tensor in ``emb`` (add
        ``z.sum() * 0`` for the ones it does not use), so that the backward pass
        reaches every collective that produced them on every rank.
        """
        raise NotImplementedError

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """Finish metrics from all-reduced ``stats``."""
        raise NotImplementedError
