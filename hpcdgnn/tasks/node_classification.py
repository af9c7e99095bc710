"""Node classification: a linear head U (F' x C) on Z_t, cross-entropy on labelled vertices (IBM §2.2).

Labels come from the shards (-1 = unlabelled); snapshots 0..T-1 split by time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hpcdgnn.config.schema import TaskConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.errors import DataError
from hpcdgnn.tasks.base import (
    SPLITS,
    SampleEmbeddings,
    Scored,
    ShardedEmbeddings,
    Task,
    TaskBatch,
    first_step,
    split_steps,
)

__all__ = ["NodeClassification", "NodeClassificationOptions"]


@dataclass(frozen=True, kw_only=True)
class NodeClassificationOptions(TaskConfig):
    """``task: {name: node_classification}``: a linear head on Z_t, cross-entropy on the labelled vertices
    (IBM §2.2); no options beyond ``split``."""

    name: str = "node_classification"
    """The task these options belong to."""


class NodeClassification(Task):
    """Node-classification head and labels. Stats per split: [loss_sum, labelled, correct]."""

    metric = "acc"
    in_place = True
    options = NodeClassificationOptions

    @staticmethod
    def check(cfg: NodeClassificationOptions, manifest: Manifest) -> None:
        """The dataset carries class labels (at least 2 classes)."""
        if manifest.num_classes < 2:
            raise DataError(
                "task.name: node_classification needs labels, but the dataset has none; prepare it with --labels "
                "(e.g. next_activity), or from Python with from_arrays(..., labels='next_activity') or "
                "from_signal(..., labels=True)"
            )

    def __init__(self, cfg: NodeClassificationOptions, manifest: Manifest, emb_features: int, seed: int) -> None:
        super().__init__()
        self.check(cfg, manifest)
        self.manifest = manifest
        self.head = nn.Linear(emb_features, manifest.num_classes)
        self.ranges = self.steps(cfg, manifest)
        self.labels: dict[int, torch.Tensor] = {}
        self._train_count = 0.0
        #: in place (:class:`RowShard`): the row range of each step's rows here (their labels in ``labels``)
        self._rows: dict[int, tuple[int, int]] | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the linear head."""
        self.head.reset_parameters()

    def predict(self, z: torch.Tensor, src: torch.Tensor | None = None,
                dst: torch.Tensor | None = None) -> torch.Tensor:
        """softmax(head(Z_t)): (N, C) class probabilities of every vertex at t."""
        return torch.softmax(self.head(z), dim=-1)

    @staticmethod
    def train_horizon(cfg: NodeClassificationOptions, manifest: Manifest) -> int:
        """Last training snapshot."""
        return NodeClassification.steps(cfg, manifest)[0].stop - 1

    @staticmethod
    def steps(cfg: NodeClassificationOptions, manifest: Manifest) -> list[range]:
        """Snapshots 0..T-1 (a signal of windows: from window 0's end on), split in time order."""
        return split_steps(manifest.num_snapshots, cfg.split, first_step(manifest))

    def sample_examples(self, t: int, batch: np.ndarray, epoch: int) -> float:
        """Labelled vertices of ``batch`` at a training snapshot t."""
        if t not in self.ranges[0] or t not in self.labels:
            return 0.0
        return float((self.labels[t].numpy()[batch] >= 0).sum())

    @staticmethod
    def snapshot_work(cfg: NodeClassificationOptions, manifest: Manifest) -> np.ndarray:
        """Head multiply-adds per snapshot (an upper bound: every vertex labelled), x3 when training; 0 before the
        first split step."""
        train = NodeClassification.steps(cfg, manifest)[0]
        first = train.start  # the split's first step: before it, no head runs
        per = manifest.num_vertices * max(manifest.num_classes, 2)
        return np.array([0.0 if t < first else per * (3.0 if t in train else 1.0)
                         for t in range(manifest.num_snapshots)])

    @staticmethod
    def vertex_work(cfg: NodeClassificationOptions, manifest: Manifest, emb_features: int) -> np.ndarray:
        """The linear head on every vertex's embedding (F wide): :meth:`snapshot_work` × F."""
        return NodeClassification.snapshot_work(cfg, manifest) * float(emb_features)

    def setup(self, reader, scored: Scored, comm) -> None:
        """Read labels of the scored snapshots — in place (``scored.rows``), of my rows of every step I
        have rows of; all-reduce the number of labelled training vertices."""
        local = 0.0
        shard = scored.rows
        if shard is not None:
            self._rows = shard.step_rows()
        for t in (shard.steps if shard is not None else scored.snapshots):
            y = reader.read(t).labels
            if y.max(initial=-1) >= self.manifest.num_classes:
                raise DataError(f"snapshot {t}: label {int(y.max())} >= num_classes {self.manifest.num_classes}")
            if shard is not None:  # my rows' labels only, in row order
                y = y[shard.vertices(t, self._rows[t])]
            self.labels[t] = torch.from_numpy(y)
            if t in self.ranges[0]:
                local += float((y >= 0).sum())
        self._train_count = float(comm.allreduce_array([local], tag="setup")[0])

    def global_train_count(self) -> float:
        """Labelled vertices over all training snapshots."""
        return self._train_count

    def forward(self, emb: dict[int, torch.Tensor] | ShardedEmbeddings | SampleEmbeddings, epoch: int) -> TaskBatch:
        """Cross-entropy sum over labelled train vertices held here; accuracy sums for all splits.
        In place (:class:`ShardedEmbeddings`): my rows of each step, with my rows' labels; nothing moves."""
        stats = np.zeros(3 * len(SPLITS))
        loss_sum = self.head.weight.sum() * 0.0 + self.head.bias.sum() * 0.0
        if isinstance(emb, ShardedEmbeddings):
            loss_sum = loss_sum + emb.rows.sum() * 0.0
            emb = emb.by_step(self._rows)
        labels = self.labels
        if isinstance(emb, SampleEmbeddings):
            loss_sum = loss_sum + emb.rows.sum() * 0.0
            if emb.t not in self.labels:
                return TaskBatch(loss_sum, stats)
            labels = {emb.t: self.labels[emb.t][torch.from_numpy(emb.batch)]}
            emb = {emb.t: emb.rows.index_select(0, emb.index(emb.batch).to(emb.rows.device))}
        for t, z in emb.items():
            s = next((i for i, r in enumerate(self.ranges) if t in r), -1)
            y = labels[t].to(z.device)
            mask = y >= 0
            if s < 0 or not bool(mask.any()):
                loss_sum = loss_sum + z.sum() * 0.0
                continue
            with torch.set_grad_enabled(s == 0 and torch.is_grad_enabled()):
                logits = self.head(z[mask])
                loss = F.cross_entropy(logits, y[mask], reduction="sum")
            if s == 0:
                loss_sum = loss_sum + loss
            else:
                loss_sum = loss_sum + z.sum() * 0.0
            stats[3 * s] += float(loss.detach())
            stats[3 * s + 1] += float(mask.sum())
            stats[3 * s + 2] += float((logits.detach().argmax(-1) == y[mask]).sum())
        return TaskBatch(loss_sum, stats)

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """Mean loss and accuracy per split; NaN where the loss is not finite (NaN logits' argmax is a class)."""
        out: dict[str, float] = {}
        for s, name in enumerate(SPLITS):
            n = stats[3 * s + 1]
            out[f"{name}_loss"] = float(stats[3 * s] / n) if n else float("nan")
            out[f"{name}_acc"] = float(stats[3 * s + 2] / n) if n and np.isfinite(stats[3 * s]) else float("nan")
        return out
