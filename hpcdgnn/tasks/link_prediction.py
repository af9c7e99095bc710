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

__all__ = ["EdgeDecoder", "LinkPrediction", "AUC_BINS", "AUC_RANGE", "auc_from_histograms"]

AUC_BINS = 1 << 14
AUC_RANGE = 16.0


def auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUC = P(score_pos > score_neg) + P(tie)/2 from histograms over the same ascending bins."""
    npos, nneg = pos.sum(), neg.sum()
    if npos == 0 or nneg == 0:
        return float("nan")
    neg_below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float((pos * (neg_below + 0.5 * neg)).sum() / (npos * nneg))


#: Edges per chunk of the fused decoder: (chunk, hidden) temporaries stay in a core's L2 cache.
_EDGE_CHUNK = 8192


class _EdgeMLP(torch.autograd.Function):
    """``w2 · relu(pu[src] + pv[dst] + b1) + b2`` per edge, in cache-sized chunks, with its adjoint.

    Unfused, each of the ~10 elementwise steps of forward and backward streams an
    (E, hidden) tensor through memory — for millions of edges per snapshot that
    traffic dominated the epoch and was what two ranks on one node fought over.
    Here the per-edge hidden layer lives only inside a chunk and is recomputed
    in the backward pass; only (N, hidden) gradients and (E,) logits are stored.
    """

    @staticmethod
    def _hidden(pu, pv, b1, src, dst):
        """relu(pu[src] + pv[dst] + b1) for one chunk of edges, in one (chunk, hidden) buffer."""
        h = pu.index_select(0, src)
        h += pv.index_select(0, dst)
        h += b1
        return h.relu_()

    @staticmethod
    def forward(ctx, pu, pv, b1, w2, b2, src, dst):  # noqa: D102
        E = src.shape[0]
        out = pu.new_empty(E)
        for s in range(0, E, _EDGE_CHUNK):
            e = min(E, s + _EDGE_CHUNK)
            torch.mv(_EdgeMLP._hidden(pu, pv, b1, src[s:e], dst[s:e]), w2, out=out[s:e])
        out += b2
        ctx.save_for_backward(pu, pv, b1, w2, src, dst)
        return out

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        pu, pv, b1, w2, src, dst = ctx.saved_tensors
        dpu, dpv = torch.zeros_like(pu), torch.zeros_like(pv)
        db1, dw2 = torch.zeros_like(b1), torch.zeros_like(w2)
        E = src.shape[0]
        for s in range(0, E, _EDGE_CHUNK):
            e = min(E, s + _EDGE_CHUNK)
            h = _EdgeMLP._hidden(pu, pv, b1, src[s:e], dst[s:e])  # recomputed, not stored
            gc = g[s:e]
            dw2 += h.t() @ gc
            dh = torch.outer(gc, w2)
            dh.mul_(h > 0)
            db1 += dh.sum(0)
            dpu.index_add_(0, src[s:e], dh)
            dpv.index_add_(0, dst[s:e], dh)
        return dpu, dpv, db1, dw2, g.sum().reshape(1), None, None


class EdgeDecoder(nn.Module):
    """MLP on the concatenated endpoint embeddings: ``w2 · relu(W1 [z_u ; z_v] + b1) + b2``.

    ``W1 [z_u ; z_v] = W1[:, :F] z_u + W1[:, F:] z_v``, so the first layer is
    applied once per vertex, giving (N, h) projections ``pu``, ``pv``; the
    per-edge rest runs fused in chunks (:class:`_EdgeMLP`). The function equals
    ``Linear(2F, h) -> ReLU -> Linear(h, 1)`` on the concatenation.
    """

    def __init__(self, emb_features: int, hidden: int) -> None:
        super().__init__()
        self.emb_features = emb_features
        self.lin1 = nn.Linear(2 * emb_features, hidden)
        self.lin2 = nn.Linear(hidden, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset both linear layers."""
        self.lin1.reset_parameters()
        self.lin2.reset_parameters()

    def forward(self, z: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Logits (E,) of edges ``src[i] -> dst[i]`` from embeddings ``z`` (N, F)."""
        f = self.emb_features
        w = self.lin1.weight
        pu = z @ w[:, :f].t()
        pv = z @ w[:, f:].t()
        return _EdgeMLP.apply(pu, pv, self.lin1.bias, self.lin2.weight[0], self.lin2.bias, src, dst)


class LinkPrediction(Task):
    """Link-prediction head and targets.

    Stats layout per split s (train, val, test): [loss_sum, pairs, correct,
    pos_hist (AUC_BINS), neg_hist (AUC_BINS)].
    """

    metric = "auc"

    def __init__(self, cfg: TaskConfig, manifest: Manifest, emb_features: int, seed: int) -> None:
        super().__init__()
        self.cfg, self.manifest, self.seed = cfg, manifest, seed
        self.decoder = EdgeDecoder(emb_features, cfg.decoder_hidden)
        # step t uses Z_t to predict the edges of t+1, so there are T-1 steps
        self.ranges = split_steps(manifest.num_snapshots - 1, cfg.split)
        self.targets: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the decoder MLP."""
        self.decoder.reset_parameters()

    @staticmethod
    def train_horizon(cfg: TaskConfig, manifest: Manifest) -> int:
        """Last training step: Z_t of t = split end - 1 scores the edges of t + 1."""
        return split_steps(manifest.num_snapshots - 1, cfg.split)[0].stop - 1

    @staticmethod
    def snapshot_work(cfg: TaskConfig, manifest: Manifest) -> np.ndarray:
        """Per-pair work of scoring each snapshot: hidden x (5 when training: forward, the fused decoder's
        recomputation and backward; 1 when evaluating), plus a few per-pair passes (sampling, loss,
        histogram) that every split pays. The factors were fitted to per-rank compute times measured
        with perf/bench_epoch.py's graph at P = 2.
        """
        T = manifest.num_snapshots
        train = split_steps(T - 1, cfg.split)[0]
        work = np.zeros(T)
        for t in range(T - 1):
            pairs = manifest.snapshot_edges[t + 1] * (1 + cfg.negatives)
            work[t] = pairs * (cfg.decoder_hidden * (5.0 if t in train else 1.0) + 4.0)
        return work

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

    def _pairs(self, steps: list[int], epoch: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(src, dst, label) of every scored pair of ``steps``, step k's vertices offset by k * n.

        Positives then negatives per step, steps in order: the pairs of a stack of
        embeddings (steps, n, F) flattened to (steps * n, F).
        """
        srcs, dsts, labels = [], [], []
        for k, t in enumerate(steps):
            ps, pd = self.targets[t]
            ns, nd = self._negatives(t, epoch, ps.shape[0] * self.cfg.negatives)
            srcs += [ps + k * n, ns + k * n]
            dsts += [pd + k * n, nd + k * n]
            labels += [torch.ones(ps.shape[0]), torch.zeros(ns.shape[0])]
        return torch.cat(srcs), torch.cat(dsts), torch.cat(labels)

    def forward(self, emb: dict[int, torch.Tensor], epoch: int) -> TaskBatch:
        """BCE loss sum over the train steps held here; histogram/accuracy sums for all splits.

        All steps of a split are scored at once (snapshot-parallel, as PiPAD batches
        snapshots): their embeddings stacked, one projection GEMM and one fused decoder
        pass over every pair, one loss — not one small kernel chain per step.
        """
        width = 3 + 2 * AUC_BINS
        stats = np.zeros(3 * width)
        # a zero that depends on every embedding (Task.forward's contract: all collectives get a backward)
        # and on the decoder, so every parameter has a gradient on every rank
        zero = sum(p.sum() for p in self.decoder.parameters()) + sum(z.sum() for z in emb.values())
        loss_sum = zero * 0.0
        by_split: dict[int, list[int]] = {}
        for t in emb:
            s = self._split_of(t)
            if s >= 0 and t in self.targets:
                by_split.setdefault(s, []).append(t)
        for s, steps in sorted(by_split.items()):
            z = torch.stack([emb[t] for t in steps]) if len(steps) > 1 else emb[steps[0]].unsqueeze(0)
            src, dst, label = self._pairs(steps, epoch, z.shape[1])
            # pairs are drawn on the host (same stream on every rank and device), then follow z
            src, dst, label = src.to(z.device), dst.to(z.device), label.to(z.device, z.dtype)
            with torch.set_grad_enabled(s == 0 and torch.is_grad_enabled()):  # val/test: metrics only
                logit = self.decoder(z.reshape(-1, z.shape[-1]), src, dst)
                loss = F.binary_cross_entropy_with_logits(logit, label, reduction="sum")
            if s == 0:
                loss_sum = loss_sum + loss
            lg = logit.detach().to("cpu", torch.float64).numpy()
            lb = label.detach().cpu().numpy() > 0.5
            base = s * width
            stats[base] += float(loss.detach())
            stats[base + 1] += lg.shape[0]
            stats[base + 2] += float(((lg > 0) == lb).sum())
            bins = np.clip(((lg + AUC_RANGE) / (2 * AUC_RANGE) * AUC_BINS).astype(np.int64), 0, AUC_BINS - 1)
            stats[base + 3 : base + 3 + AUC_BINS] += np.bincount(bins[lb], minlength=AUC_BINS)
            stats[base + 3 + AUC_BINS : base + width] += np.bincount(bins[~lb], minlength=AUC_BINS)
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
