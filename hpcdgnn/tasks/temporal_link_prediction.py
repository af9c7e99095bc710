"""Temporal link prediction on an event stream (DistTGL §4, TGL): BCE in training, MRR and AP in evaluation.

Training: for each positive event (u, v, t) of a batch the model embeds u, v and ``task.negatives``
random destinations at time t; TGL's edge predictor scores a pair as
``W_o ReLU(W_s z_u + W_d z_v)`` and the loss of the event is
``softplus(−s(u, v)) + mean_j softplus(s(u, n_j))`` — TGL's ``BCE(pos) + BCE(neg)`` with one negative,
a sum over events here (the trainer divides by the global batch's events, so i ranks sharing a
batch reproduce one rank).

Evaluation (validation, then test, chronologically after training): each positive is ranked against
``task.eval_negatives`` (default 49) negative destinations — from the destination side for a bipartite
graph — and MRR = mean 1 / (1 + #{negatives scored above the positive}) (DistTGL's evaluation). AP is
scikit-learn's average precision over the positives and negatives of one global evaluation batch,
averaged over batches, as TGL reports ``val_ap`` (so it depends on ``batch_events``, never on the rank
count). Metric sums (reciprocal ranks, AP per batch) are all-reduced like every task's.

Scores are compared at 1e-9 (rounded to 9 decimals first): candidates that are equal in exact arithmetic —
a negative that is the true destination, or two nodes with no memory and no history yet — then tie on
every rank count, instead of ranking by the last bits of a GEMM whose rows were computed in different
positions of a batch slice. A tie does not count against the positive (TGL's strict comparison).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hpcdgnn.tasks.base import SPLITS, Task, TaskBatch

__all__ = ["EventEmbeddings", "TemporalLinkPrediction", "average_precision"]

#: stats slots: train loss sum, train events, then per evaluation split (val, test): reciprocal-rank sum,
#: events, AP sum over batches, batches
_TRAIN, _EVAL = 2, 4


@dataclass
class EventEmbeddings:
    """Root embeddings of one batch slice: ``z`` rows are [sources (n), destinations (n), negatives (n·m)],
    negatives positive-major (row 2n + i·m + j is the j-th negative of event i)."""

    z: torch.Tensor
    n: int
    negatives: int


def _quantized(scores: np.ndarray) -> np.ndarray:
    return np.round(scores, 9)


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """scikit-learn's ``average_precision_score``: Σ_k (R_k − R_{k−1}) P_k over the distinct score
    thresholds, highest first (tied scores enter together); scores compared at 1e-9."""
    scores = _quantized(scores)
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order].astype(np.float64)
    last = np.r_[np.flatnonzero(np.diff(s) != 0), s.shape[0] - 1]  # the end of each run of equal scores
    tp = np.cumsum(y)[last]
    precision = tp / (last + 1)
    recall = tp / max(tp[-1], 1.0)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


class TemporalLinkPrediction(Task):
    """TGL's edge predictor over TGN embeddings (see the module docstring)."""

    metric = "mrr"

    def __init__(self, cfg, manifest, emb_features: int, seed: int) -> None:
        super().__init__()
        h = emb_features
        self.src_fc, self.dst_fc, self.out_fc = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, 1)
        self.negatives, self.eval_negatives = cfg.negatives, cfg.eval_negatives
        self.train_events = 0

    @staticmethod
    def train_horizon(cfg, manifest) -> int:
        """No snapshot enters the training loss (the task scores events): -1."""
        return -1

    @staticmethod
    def snapshot_work(cfg, manifest) -> np.ndarray:
        """An empty array: there are no snapshots to score."""
        return np.zeros(0)

    def setup(self, reader, scored, comm) -> None:
        """``scored``: the strategy's event counts per split ({"train": E_train, ...})."""
        self.train_events = int(scored["train"])

    def global_train_count(self) -> float:
        """Training events over all ranks (``scored["train"]`` in :meth:`setup`)."""
        return float(self.train_events)

    def scores(self, emb: EventEmbeddings) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (n,) of the positives and (n, m) of their negatives."""
        n, m, z = emb.n, emb.negatives, emb.z
        hs = self.src_fc(z[:n])
        pos = self.out_fc(torch.relu(hs + self.dst_fc(z[n : 2 * n]))).view(n)
        neg = self.out_fc(torch.relu(hs.repeat_interleave(m, 0) + self.dst_fc(z[2 * n :]))).view(n, m)
        return pos, neg

    def forward(self, emb: EventEmbeddings, epoch: int) -> TaskBatch:
        """Training loss sum of one batch slice (every event is a training event)."""
        pos, neg = self.scores(emb)
        loss = nn.functional.softplus(-pos).sum() + nn.functional.softplus(neg).mean(1).sum()
        stats = np.zeros(self.stats_width())
        stats[0], stats[1] = float(loss.detach()), emb.n
        return TaskBatch(loss, stats)

    def stats_width(self) -> int:
        """Length of the metric sums: the training loss and its count, then per evaluation split the
        reciprocal-rank sum, its count, the AP sum and its count."""
        return _TRAIN + _EVAL * (len(SPLITS) - 1)

    def eval_stats(self, split: str, pos: np.ndarray, neg: np.ndarray, batch_ap: float | None) -> np.ndarray:
        """Metric sums of one evaluation slice: reciprocal ranks of ``pos`` (n,) against ``neg`` (n, m), and
        the AP of the whole global batch (``batch_ap``; given by one rank of the batch only, else None)."""
        stats = np.zeros(self.stats_width())
        b = _TRAIN + _EVAL * (SPLITS.index(split) - 1)
        stats[b] = float(np.sum(1.0 / (1.0 + (_quantized(neg) > _quantized(pos)[:, None]).sum(1))))
        stats[b + 1] = pos.shape[0]
        if batch_ap is not None:
            stats[b + 2], stats[b + 3] = batch_ap, 1.0
        return stats

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """Finish metrics from all-reduced ``stats``: the training loss per event, and per evaluation split the
        MRR and the mean AP over batches."""
        out = {"train_loss": float(stats[0] / stats[1]) if stats[1] else float("nan")}
        for split in SPLITS[1:]:
            b = _TRAIN + _EVAL * (SPLITS.index(split) - 1)
            out[f"{split}_mrr"] = float(stats[b] / stats[b + 1]) if stats[b + 1] else float("nan")
            out[f"{split}_ap"] = float(stats[b + 2] / stats[b + 3]) if stats[b + 3] else float("nan")
        return out
