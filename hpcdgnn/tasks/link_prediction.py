"""Link prediction: embeddings of snapshot t score the edges of snapshot t+1 (IBM §2.2, §6.1).

An edge (u, v) is scored from the concatenation [Z_t[u], Z_t[v]] by a small
MLP decoder (one logit; binary cross-entropy). Positives are the raw edges of
snapshot t+1 (before smoothing, SPEC S5); ``negatives`` × as many negative
pairs are drawn uniformly from V×V by a generator seeded with
``(seed, epoch, t)`` — the same pairs whichever rank scores snapshot t.

AUC is computed from per-split histograms of the logits (``AUC_BINS`` bins
over ``[-AUC_RANGE, AUC_RANGE]``, clipped): integer counts all-reduce exactly,
so the AUC is identical for any P; pairs whose logits fall in the same bin
count as ties (1/2), which bounds the departure from the exact AUC by half
the fraction of positive-negative pairs sharing a bin. Accuracy thresholds the
logit at 0.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hpcdgnn.config.schema import TaskConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.tasks.base import SPLITS, Task, TaskBatch, split_steps

__all__ = ["LinkPrediction", "AUC_BINS", "AUC_RANGE", "auc_from_histograms"]

AUC_BINS = 1 << 14
AUC_RANGE = 16.0


def auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUC = P(score_pos > score_neg) + P(tie)/2 from histograms over the same ascending bins."""
    npos, nneg = pos.sum(), neg.sum()
    if npos == 0 or nneg == 0:
        return float("nan")
    neg_below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float((pos * (neg_below + 0.5 * neg)).sum() / (npos * nneg))


class LinkPrediction(Task):
    """Link-prediction head and targets.

    Stats layout per split s (train, val, test): [loss_sum, pairs, correct,
    pos_hist (AUC_BINS), neg_hist (AUC_BINS)].
    """

    metric = "auc"

    def __init__(self, cfg: TaskConfig, manifest: Manifest, emb_features: int, seed: int) -> None:
        super().__init__()
        self.cfg, self.manifest, self.seed = cfg, manifest, seed
        self.decoder = nn.Sequential(
            nn.Linear(2 * emb_features, cfg.decoder_hidden), nn.ReLU(), nn.Linear(cfg.decoder_hidden, 1)
        )
        # step t uses Z_t to predict the edges of t+1, so there are T-1 steps
        self.ranges = split_steps(manifest.num_snapshots - 1, cfg.split)
        self.targets: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the decoder MLP."""
        for m in self.decoder:
            if isinstance(m, nn.Linear):
                m.reset_parameters()

    def _split_of(self, step: int) -> int:
        for i, r in enumerate(self.ranges):
            if step in r:
                return i
        return -1

    def setup(self, reader, snapshots: list[int], comm) -> None:
        """Read the raw edges of t+1 for every scored snapshot t < T-1 (may lie in the next shard)."""
        for t in snapshots:
            if t + 1 < self.manifest.num_snapshots:
                src, dst = reader.read_target(t + 1)
                self.targets[t] = (torch.from_numpy(src), torch.from_numpy(dst))

    def global_train_count(self) -> float:
        """Positive plus negative training pairs over all train steps (from the manifest)."""
        edges = self.manifest.snapshot_edges
        return float(sum(edges[t + 1] for t in self.ranges[0]) * (1 + self.cfg.negatives))

    def _negatives(self, t: int, epoch: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, epoch, t])
        n = self.manifest.num_vertices
        pairs = rng.integers(0, n, size=(2, m), dtype=np.int64)
        return torch.from_numpy(pairs[0]), torch.from_numpy(pairs[1])

    def forward(self, emb: dict[int, torch.Tensor], epoch: int) -> TaskBatch:
        """BCE loss sum over the train steps held here; histogram/accuracy sums for all splits."""
        width = 3 + 2 * AUC_BINS
        stats = np.zeros(3 * width)
        loss_sum = None
        for t, z in emb.items():
            s = self._split_of(t)
            if s < 0 or t not in self.targets:
                continue
            ps, pd = self.targets[t]
            ns, nd = self._negatives(t, epoch, ps.shape[0] * self.cfg.negatives)
            src, dst = torch.cat([ps, ns]), torch.cat([pd, nd])
            label = torch.cat([torch.ones(ps.shape[0]), torch.zeros(ns.shape[0])]).to(z.dtype)
            logit = self.decoder(torch.cat([z[src], z[dst]], dim=-1)).squeeze(-1)
            loss = F.binary_cross_entropy_with_logits(logit, label, reduction="sum")
            if s == 0:
                loss_sum = loss if loss_sum is None else loss_sum + loss
            lg = logit.detach().to(torch.float64).numpy()
            lb = label.detach().numpy() > 0.5
            base = s * width
            stats[base] += float(loss.detach())
            stats[base + 1] += lg.shape[0]
            stats[base + 2] += float(((lg > 0) == lb).sum())
            bins = np.clip(((lg + AUC_RANGE) / (2 * AUC_RANGE) * AUC_BINS).astype(np.int64), 0, AUC_BINS - 1)
            stats[base + 3 : base + 3 + AUC_BINS] += np.bincount(bins[lb], minlength=AUC_BINS)
            stats[base + 3 + AUC_BINS : base + width] += np.bincount(bins[~lb], minlength=AUC_BINS)
        if loss_sum is None:  # nothing to train on here: a zero that still reaches every parameter
            loss_sum = sum(p.sum() * 0.0 for p in self.decoder.parameters())
            for z in emb.values():
                loss_sum = loss_sum + z.sum() * 0.0
        return TaskBatch(loss_sum, stats)

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """Mean loss, accuracy and AUC per split."""
        width = 3 + 2 * AUC_BINS
        out: dict[str, float] = {}
        for s, name in enumerate(SPLITS):
            b = s * width
            pairs = stats[b + 1]
            out[f"{name}_loss"] = float(stats[b] / pairs) if pairs else float("nan")
            out[f"{name}_acc"] = float(stats[b + 2] / pairs) if pairs else float("nan")
            out[f"{name}_auc"] = auc_from_histograms(stats[b + 3 : b + 3 + AUC_BINS], stats[b + 3 + AUC_BINS : b + width])
        return out
