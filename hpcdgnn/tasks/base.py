"""The task contract: turn embeddings Z_t into a loss and metrics, exactly across ranks.

A task returns the *sum* of per-example losses over what this rank scores; the trainer divides
by the global training-example count, so P ranks reproduce P = 1 up to summation order.
Metrics are sums all-reduced once per epoch; steps split chronologically (``task.split``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from hpcdgnn.config.schema import TaskConfig

__all__ = ["Embeddings", "RowShard", "SampleEmbeddings", "Scored", "ShardedEmbeddings", "Task", "TaskBatch",
           "first_step", "split_steps", "SPLITS"]

SPLITS = ("train", "val", "test")


def split_steps(num_steps: int, fractions: tuple[float, float, float], first: int = 0) -> list[range]:
    """Cut steps first..num_steps-1 into consecutive train / val / test ranges by fraction (the steps before
    ``first`` in none)."""
    n = max(num_steps - first, 0)
    a = int(round(fractions[0] * n))
    b = int(round((fractions[0] + fractions[1]) * n))
    a = max(1, min(a, n)) if n > 0 else 0
    b = max(a, min(b, n))
    return [range(first, first + a), range(first + a, first + b), range(first + b, first + n)]


def first_step(manifest) -> int:
    """The first step a node task scores: L - 1 for a signal of windows of L steps (``from_signal``'s
    ``source["windows"]``: snapshot k + L - 1 ends window k, the L - 1 before window 0's end are its history, no
    sample's end, and have no target), so ``task.split`` cuts the windows as PyG Temporal's
    ``temporal_signal_split`` cuts its samples; else 0."""
    source = getattr(manifest, "source", None)
    windows = source.get("windows") if isinstance(source, dict) else None
    return max(int(windows.get("window", 1)) - 1, 0) if isinstance(windows, dict) else 0


class Embeddings(dict):
    """``{t: Z_t}``, plus the (S, n, F) ``block`` they are rows of, if any (scoring from it avoids a re-stack)."""

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
    """Where the embedding rows live when a task scores them in place (vertex S6 and chunk D1 strategies).

    Attributes:
        keys: ``t * N + v`` of this rank's rows, in row order (time-major).
        owner_of, local_of: owning rank, and row on the owner, of each key (vectorised).
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


@dataclass(frozen=True)
class Scored:
    """What a rank scores, from its strategy's ``setup``: ``snapshots``, in-place ``rows``, or ``events`` per split."""

    snapshots: tuple[int, ...] = ()
    rows: RowShard | None = None
    events: dict[str, int] | None = None


class ShardedEmbeddings:
    """This rank's rows (:class:`RowShard`) and :meth:`fetch`, a differentiable collective run once per forward."""

    def __init__(self, shard: RowShard, rows: torch.Tensor, fetch: Callable[[np.ndarray], torch.Tensor]) -> None:
        self.shard, self.rows, self._fetch = shard, rows, fetch

    def fetch(self, keys: np.ndarray) -> torch.Tensor:
        """Rows (len(keys), F) of ``keys`` (ascending, unique, none of them this rank's); collective."""
        return self._fetch(keys)

    def by_step(self, step_rows: dict[int, tuple[int, int]]) -> dict[int, torch.Tensor]:
        """``{t: my rows of step t}`` by one split: slicing each would zero-fill a full-size gradient per step."""
        if not step_rows:
            return {}
        return dict(zip(step_rows, self.rows.split([b - a for a, b in step_rows.values()]), strict=True))


@dataclass
class SampleEmbeddings:
    """Z_t of one mini-batch sample (ReInc §3.4.2): rows of ``vertices`` at ``t``; the task scores ``batch``."""

    t: int
    rows: torch.Tensor
    vertices: np.ndarray
    batch: np.ndarray

    def index(self, v: np.ndarray) -> torch.Tensor:
        """Row of each vertex ``v`` (all in :attr:`vertices`)."""
        return torch.from_numpy(np.searchsorted(self.vertices, v))


class TaskBatch:
    """One forward pass on one rank: ``loss_sum`` and float64 ``stats`` (``later``: evaluation sums, after backward)."""

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

    options: type[TaskConfig] = TaskConfig
    """The ``task:`` options class of this task (the regime registers it under the task's name)."""

    buckets_pairs: bool = False
    """Whether the decoder orders pairs in ``HPCDGNN_BUCKET_BYTES`` buckets (same size on every rank: rounding)."""

    in_place: bool = False
    """Whether the task scores rows where they live (:class:`RowShard`) under vertex-partitioning strategies."""

    predicts: str = "nodes"
    """What ``predict`` makes of Z_t: ``nodes`` (an output per vertex) or ``pairs`` (a score per (u, v))."""

    def predict(self, z: torch.Tensor, src: torch.Tensor | None = None,
                dst: torch.Tensor | None = None) -> torch.Tensor:
        """The trained head on Z_t, for ``predict``: per vertex (N, ·), or per pair (K,) of ``src``, ``dst``.

        Shapes:
            z: (N, F); src, dst: (K,) vertex ids.
        """
        raise NotImplementedError

    @staticmethod
    def train_horizon(cfg, manifest) -> int:
        """The last snapshot whose embedding enters the training loss (-1 if none); no autograd needed past it."""
        raise NotImplementedError

    @staticmethod
    def snapshot_work(cfg, manifest) -> np.ndarray:
        """Relative cost of scoring each snapshot (multiply-adds; for work-balanced plans)."""
        raise NotImplementedError

    @staticmethod
    def vertex_work(cfg, manifest, emb_features: int) -> np.ndarray:
        """(T,) multiply-adds of the head's dense transform of every vertex's ``emb_features``-wide embedding in
        each snapshot it scores, ×3 where the snapshot trains (forward, and the backward's two products): what
        :meth:`snapshot_work`'s relative cost leaves out and the planner adds. None by default."""
        return np.zeros(manifest.num_snapshots)

    @staticmethod
    def scored_pairs(cfg, manifest) -> np.ndarray | None:
        """(T,) pairs (positive and negative) scored from Z_t per epoch, or None for a task that scores vertices
        (what the planner prices at the machine's seconds per pair)."""
        return None

    @staticmethod
    def scored_positives(cfg, manifest) -> tuple[np.ndarray, np.ndarray] | None:
        """(T,) positive pairs Z_t scores per epoch and (T,) their distinct endpoints (the rest of
        :meth:`scored_pairs` are drawn uniformly), for the planner's estimate of the rows an in-place scoring
        fetches; None where the task scores vertices."""
        return None

    @staticmethod
    def saved_bytes(cfg, emb_features: int, itemsize: int) -> tuple[float, float]:
        """(per row, per training example) bytes autograd keeps for the head's backward: by default the rows the
        head reads (its first product saves its input), nothing per example."""
        return float(emb_features * itemsize), 0.0

    @staticmethod
    def held_bytes_per_pair(itemsize: int) -> float:
        """Bytes kept per scored pair from :meth:`hold_scores` to :meth:`rebin`, i.e. until the epoch's end, for
        every split (what the planner adds to a rank's memory); none by default."""
        return 0.0

    @staticmethod
    def check(cfg, manifest) -> None:
        """Refuse, before any plan or run directory, what this dataset cannot serve (one line naming the key).

        Raises:
            ConfigError, DataError: e.g. targets the dataset lacks, a horizon past T, more negatives than candidates.
        """

    @staticmethod
    def footprint(cfg, manifest, hidden: int) -> tuple[int, int, int]:
        """Lower bounds for :mod:`hpcdgnn.train.footprint`: (head weights at width ``hidden``, bytes of one step's
        examples held at once, bytes of every training step's examples, which a full-batch epoch holds at once
        over its ranks); none by default."""
        return 0, 0, 0

    def setup(self, reader, scored: Scored, comm) -> None:
        """Read the targets of what this rank scores: whole snapshots, or (:attr:`in_place`) its ``scored.rows``."""
        raise NotImplementedError

    def global_train_count(self) -> float:
        """Number of training examples over all ranks (the loss denominator)."""
        raise NotImplementedError

    @staticmethod
    def steps(cfg, manifest) -> list[range]:
        """The prediction steps t (Z_t scores examples), split into train / val / test ranges."""
        raise NotImplementedError

    def sample_vertices(self, t: int, batch: np.ndarray, epoch: int) -> np.ndarray:
        """Vertices whose Z_t a sample scoring ``batch`` at step t reads (ascending; ⊇ ``batch``)."""
        return batch

    @classmethod
    def reads_beyond_batch(cls) -> bool:
        """Whether a sample reads vertices besides its batch (:meth:`sample_vertices` overridden: link prediction's
        destinations and negatives, drawn each epoch), so that any row may be read."""
        return cls.sample_vertices is not Task.sample_vertices

    def sample_examples(self, t: int, batch: np.ndarray, epoch: int) -> float:
        """Training examples of a sample scoring ``batch`` at step t (0 when t is not a training step)."""
        raise NotImplementedError

    def forward(self, emb: dict[int, torch.Tensor] | ShardedEmbeddings | SampleEmbeddings, epoch: int) -> TaskBatch:
        """Loss sum and metric sums for ``{t: Z_t (N, F')}`` (or rows in place).

        ``loss_sum`` must depend on every tensor in ``emb`` and every fetch, so the backward reaches every collective.
        """
        raise NotImplementedError

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """Finish metrics from all-reduced ``stats``."""
        raise NotImplementedError

    def hold_scores(self, on: bool, kept: Any = None) -> None:
        """Keep what this rank scores from now on for :meth:`rebin` (a task whose metric sums need a second look
        at the scores, e.g. link prediction's AUC bins), after ``kept`` (:meth:`held_scores` of an earlier attempt
        at the epoch: a resume within it); nothing by default."""

    def held_scores(self) -> Any:
        """What :meth:`hold_scores` has kept so far, for a checkpoint within the epoch (None: nothing)."""
        return None

    def held_bytes(self) -> int:
        """Bytes of the scores kept since :meth:`hold_scores` (``held_score_bytes`` of an epoch's record)."""
        return 0

    def rebin(self, comm, stats: np.ndarray) -> tuple[np.ndarray, float]:
        """This rank's metric sums finished from the scores kept since :meth:`hold_scores` (collective over
        ``comm``, called by every rank before the sums are all-reduced), and the seconds of its own work outside
        the collective (the epoch's compute); ``(stats, 0.0)`` by default."""
        return stats, 0.0
