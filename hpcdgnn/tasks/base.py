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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = ["Embeddings", "RowShard", "SampleEmbeddings", "ShardedEmbeddings", "Task", "TaskBatch", "split_steps",
           "SPLITS"]

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
        emb = cls(zip(steps, block.unbind(0), strict=True))
        emb.block, emb.position = block, {t: k for k, t in enumerate(steps)}
        return emb


@dataclass
class RowShard:
    """Where the embedding rows live when a task scores them in place.

    The vertex (S6) and chunk (D1) strategies give every appearance (v, t) one owner rank. A task
    with :attr:`Task.in_place` gets this from ``Strategy.setup`` instead of a list of whole
    snapshots: it scores each example on the rank that owns its row (link prediction: the source
    row of the pair) and fetches only the other rows it reads (the destination rows it lacks),
    instead of the whole (T, N, F) block moving to snapshot owners after the last layer.

    Attributes:
        keys: key ``t * N + v`` of each of this rank's rows, in row order (time-major: the rows of
            a step are one contiguous range).
        num_vertices: N.
        rank: this rank.
        owner_of: rank owning each key (vectorised).
        local_of: row of each key on its owner (vectorised; meaningful for keys the caller owns).
        steps: the steps this rank has rows of, ascending.
        num_ranks: P.
    """

    keys: np.ndarray
    num_vertices: int
    rank: int
    owner_of: Callable[[np.ndarray], np.ndarray]
    local_of: Callable[[np.ndarray], np.ndarray]
    steps: list[int]
    num_ranks: int = 1

    @property
    def alone(self) -> bool:
        """One rank holds every row (P = 1): nothing to filter or fetch."""
        return self.num_ranks == 1

    def step_rows(self) -> dict[int, tuple[int, int]]:
        """Row range ``[start, stop)`` of each step this rank has rows of."""
        t = self.keys // self.num_vertices
        bounds = np.searchsorted(t, np.arange(int(t.max(initial=-1)) + 2))
        return {s: (int(bounds[s]), int(bounds[s + 1])) for s in self.steps}

    def vertices(self, t: int, rows: tuple[int, int]) -> np.ndarray:
        """Vertex ids of my rows ``rows`` (a :meth:`step_rows` range) of step ``t``."""
        return self.keys[rows[0] : rows[1]] - t * self.num_vertices

    def mine(self, keys: np.ndarray) -> np.ndarray:
        """Whether each key's row is on this rank."""
        return np.ones(keys.shape[0], dtype=bool) if self.alone else self.owner_of(keys) == self.rank


class ShardedEmbeddings:
    """This rank's embedding rows where they live (:class:`RowShard`), and the fetch of any others.

    ``rows`` (R, F) are the rows of ``shard.keys``; :meth:`fetch` is a collective — every rank
    calls it exactly once per forward pass, with the keys it lacks (possibly none) — that returns
    the rows of other ranks, differentiable (the backward sends their gradients to the owners).
    """

    def __init__(self, shard: RowShard, rows: torch.Tensor, fetch: Callable[[np.ndarray], torch.Tensor]) -> None:
        self.shard, self.rows, self._fetch = shard, rows, fetch

    def fetch(self, keys: np.ndarray) -> torch.Tensor:
        """Rows (len(keys), F) of ``keys`` (ascending, unique, none of them this rank's); collective."""
        return self._fetch(keys)

    def by_step(self, step_rows: dict[int, tuple[int, int]]) -> dict[int, torch.Tensor]:
        """``{t: my rows of step t}`` for the ranges of :meth:`RowShard.step_rows` (which cover my rows in
        order): one split — slicing each would zero-fill a full-size gradient per step in the backward."""
        if not step_rows:
            return {}
        return dict(zip(step_rows, self.rows.split([b - a for a, b in step_rows.values()]), strict=True))


@dataclass
class SampleEmbeddings:
    """Z_t of one mini-batch sample (the ``sequences`` strategy, ReInc §3.4.2): the rows of ``vertices``
    (ascending) at step ``t``, the last of the sample's window; the task scores the examples of
    ``batch`` (ascending, ⊆ ``vertices``) at t — link prediction the pairs whose source is in it,
    node tasks its vertices — and reads the other rows it asked for (:meth:`Task.sample_vertices`).
    """

    t: int
    rows: torch.Tensor
    vertices: np.ndarray
    batch: np.ndarray

    def index(self, v: np.ndarray) -> torch.Tensor:
        """Row of each vertex ``v`` (all in :attr:`vertices`)."""
        return torch.from_numpy(np.searchsorted(self.vertices, v))


class TaskBatch:
    """What a task returns for one forward pass on one rank: ``loss_sum``, the sum of training-example
    losses over this rank's snapshots (differentiable), and ``stats``, float64 sums all-reduced by the
    trainer and turned into metrics by ``Task.metrics``.

    ``later``: the part of the sums that only evaluation needs (the validation and test scoring), added
    into the array when ``stats`` is first read. Why: a strategy reads ``stats`` after its backward pass,
    so a rank's evaluation work comes after the gradients other ranks wait for (a time halo's, a
    redistribution's) instead of before them — with blocks of time, the rank holding the evaluation
    snapshots would be the one the others wait for. The values are the same as if scored
    at once: ``later`` reads this forward's tensors and the parameters, which every strategy's step reads
    ``stats`` before the optimizer changes.
    """

    def __init__(self, loss_sum: torch.Tensor, stats: np.ndarray,
                 later: Callable[[np.ndarray], object] | None = None) -> None:
        self.loss_sum = loss_sum
        self._stats, self._later = stats, later

    @property
    def stats(self) -> np.ndarray:
        """The metric sums, with the deferred part (``later``) added on first read."""
        if self._later is not None:
            later, self._later = self._later, None
            with torch.no_grad():
                later(self._stats)
        return self._stats


class Task(nn.Module):
    """Base of the task heads; subclasses own a decoder and the per-snapshot targets."""

    metric: str = "acc"
    """Name of the headline validation metric printed in the epoch line."""

    buckets_pairs: bool = False
    """Whether the decoder orders its pairs in buckets of ``HPCDGNN_BUCKET_BYTES`` (their order sets the rounding
    of its gradient sums, so every rank must use the same size)."""

    in_place: bool = False
    """Whether the task scores rows where they live (:class:`RowShard`, :class:`ShardedEmbeddings`)
    under strategies that partition vertices; else those strategies move whole snapshots to it."""

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

    @staticmethod
    def footprint(cfg, manifest, hidden: int) -> tuple[int, int]:
        """Lower bounds for :mod:`hpcdgnn.train.footprint`: (the head's weights on embeddings of width
        ``hidden``, bytes of one step's examples held at once); none by default."""
        return 0, 0

    def setup(self, reader, snapshots: list[int] | RowShard, comm) -> None:
        """Read the targets of the snapshots this rank scores (whole), or of its rows (a :class:`RowShard`,
        for tasks with :attr:`in_place`)."""
        raise NotImplementedError

    def global_train_count(self) -> float:
        """Number of training examples over all ranks (the loss denominator)."""
        raise NotImplementedError

    @staticmethod
    def steps(cfg, manifest) -> list[range]:
        """The prediction steps t (Z_t scores examples), split into train / val / test ranges."""
        raise NotImplementedError

    def sample_vertices(self, t: int, batch: np.ndarray, epoch: int) -> np.ndarray:
        """Vertices whose Z_t a sample scoring ``batch`` at step t reads (ascending; ⊇ ``batch``).
        Node tasks: the batch itself; link prediction adds the destinations of its pairs."""
        return batch

    def sample_examples(self, t: int, batch: np.ndarray, epoch: int) -> float:
        """Training examples of a sample scoring ``batch`` at step t (0 when t is not a training step)."""
        raise NotImplementedError

    def forward(self, emb: dict[int, torch.Tensor] | ShardedEmbeddings | SampleEmbeddings, epoch: int) -> TaskBatch:
        """Loss sum and metric sums for embeddings ``{t: Z_t (N, F')}`` (or rows in place).

        Contract: ``loss_sum`` must depend on every tensor in ``emb`` (add
        ``z.sum() * 0`` for the ones it does not use) — in place, on ``emb.rows`` and
        on what :meth:`ShardedEmbeddings.fetch` returned — so that the backward pass
        reaches every collective that produced them on every rank.
        """
        raise NotImplementedError

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """Finish metrics from all-reduced ``stats``."""
        raise NotImplementedError
