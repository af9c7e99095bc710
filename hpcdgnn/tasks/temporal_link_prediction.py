"""Temporal link prediction on an event stream (DistTGL §4, TGL): BCE in training, MRR and AP in evaluation.

TGL's predictor ``s(u, v) = W_o ReLU(W_s z_u + W_d z_v)``; loss ``softplus(−s(u, v)) + mean_j softplus(s(u, n_j))``
summed over events. MRR ranks each positive against ``task.eval_negatives`` (a dataset with fixed negatives,
TGB's, against its own), a negative tied with it counting half, as TGB's evaluator does (a model that scores
everything alike ranks its positives in the middle, not first; a drawn negative that is the event's own
destination is the positive pair, and one whose input is the positive destination's is its twin: the strategy
gives either the positive's score); AP is per global batch of the
positives and the first negative of each (one negative per positive, as TGL's ``val_ap`` and PyG's TGN
example). Scores within 1e-9 of each other tie (:data:`TIE`), so exact ties tie on every rank count, where a
score comes out to rounding apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
from torch import nn

from hpcdgnn.config.schema import TaskConfig
from hpcdgnn.errors import ConfigError
from hpcdgnn.tasks.base import SPLITS, Scored, Task, TaskBatch

__all__ = ["EventEmbeddings", "TemporalLinkPrediction", "TemporalLinkPredictionOptions", "average_precision"]


@dataclass(frozen=True, kw_only=True)
class TemporalLinkPredictionOptions(TaskConfig):
    """``task: {name: temporal_link_prediction}``: TGL's edge predictor over the events of a stream, in global
    mini-batches of ``batch_events`` (DistTGL §4)."""

    name: str = "temporal_link_prediction"
    """The task these options belong to."""
    #: the split is the event dataset's (``prepare --kind events --split``, ``from_temporal_data(..., split=)``);
    #: ``task.split`` is refused
    fixed_by_data: ClassVar[tuple[str, ...]] = ("split",)
    split: tuple[float, float, float] | None = None
    """Not an option here: the stream's split is the dataset's, cut by ``prepare --kind events --split`` or, from
    Python, by the adapters' ``split=`` (``from_temporal_data(data, output, split=(0.7, 0.15, 0.15))``,
    ``from_arrays(..., kind="events", split=...)``). A job that gives one (any value, the snapshot tasks' default
    too) is refused; null: none given."""
    negatives: int = 1
    """Negative destinations per training event: uniform over the stream's candidate destinations, with
    replacement, keyed by train.seed."""
    batch_events: int = 600
    """Events per global mini-batch, in time order (TGL's and DistTGL's 600)."""
    eval_negatives: int = 49
    """Negatives ranked against each positive for the MRR (fixed by ``train.seed``)."""
    eval_protocol: Literal["per_event", "per_batch"] = "per_event"
    """How evaluation embeds what it ranks: ``per_event`` (TGL) embeds each source, destination and negative at
    its own event's time, one root each; ``per_batch`` (PyG's TGN example) embeds each distinct node of a global
    batch once, at the time of the batch's first event, from the memory and neighbours before it: at most N roots
    a batch instead of (2 + eval_negatives) per event, an earlier view of the batch's later events. Training and
    the memory's updates are the same under both."""
    train_protocol: Literal["per_event", "per_batch"] = "per_event"
    """How training embeds its roots: ``per_event`` (TGL, DistTGL) embeds and updates each source, destination
    and negative at its own event's time; ``per_batch`` (PyG's TGN example) each distinct node of a global batch
    once, at the batch's first time, from the memory and neighbours before it, and that one updated memory is
    what the node's events write: fewer roots and memory updates a batch (at most N), an earlier view of the
    batch's later events. Exact across i (``minibatch``) under both."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._at_least_one("negatives", "batch_events", "eval_negatives")

#: stats: train loss sum, train events, then per evaluation split RR sum, events, AP sum, batches
_TRAIN, _EVAL = 2, 4


@dataclass
class EventEmbeddings:
    """Root embeddings of one batch slice: rows [sources (n), destinations (n), negatives (n·m, positive-major)],
    ``z`` itself, or ``z[index]`` when ``index`` is given (one row per distinct node, each scored row naming its
    node's: the destination projection then runs once per node, not once per pair)."""

    z: torch.Tensor
    n: int
    negatives: int
    index: torch.Tensor | None = None


#: scores this close tie: a tolerance, not a grid — rounding to 9 decimals split two scores P ranks compute to
#: rounding apart wherever a decimal's half fell between them (AP 1 or 1/2, an MRR rank of 1 or 1.5)
TIE = 1e-9


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """scikit-learn's ``average_precision_score`` Σ_k (R_k − R_{k−1}) P_k, tied scores entering together (a run of
    sorted scores each within :data:`TIE` of the next); NaN where a score is not finite (a diverged model: NaN
    sorts last, which is no ranking)."""
    if not np.isfinite(scores).all():
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order].astype(np.float64)
    last = np.r_[np.flatnonzero(s[:-1] - s[1:] > TIE), s.shape[0] - 1]  # the end of each run of tied scores
    tp = np.cumsum(y)[last]
    precision = tp / (last + 1)
    recall = tp / max(tp[-1], 1.0)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


class TemporalLinkPrediction(Task):
    """TGL's edge predictor over TGN embeddings (see the module docstring)."""

    metric = "mrr"
    options = TemporalLinkPredictionOptions
    #: ``predict`` does not serve it: a pair's score needs the memory at the pair's own time
    predicts = ""

    def __init__(self, cfg: TemporalLinkPredictionOptions, manifest, emb_features: int, seed: int) -> None:
        super().__init__()
        h = emb_features
        self.src_fc, self.dst_fc, self.out_fc = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, 1)
        self.negatives, self.eval_negatives = cfg.negatives, cfg.eval_negatives
        self.train_events = 0

    @staticmethod
    def check(cfg, manifest) -> None:
        """Negatives are drawn from the stream's candidate destinations (with replacement): more of them per event
        than there are candidates ranks a positive against repeats (and can only exhaust memory). A stream with
        fixed evaluation negatives (TGB's) ranks against those: ``eval_negatives`` is not drawn."""
        lo, hi = manifest.destinations
        candidates = hi - lo
        drawn = ("negatives",) if manifest.eval_negatives is not None else (
            "negatives", "eval_negatives")
        for key in drawn:
            m = getattr(cfg, key)
            if m > candidates:
                raise ConfigError(f"task.{key}: {m} exceeds the stream's {candidates} candidate destinations "
                                  f"(negatives are drawn from them); choose at most {candidates}")

    @staticmethod
    def ranked_negatives(cfg, manifest) -> float:
        """Negatives an evaluation positive is ranked against: the stream's fixed ones' (TGB's) mean count per
        validation and test event, else ``eval_negatives`` (what memory and time estimates price)."""
        fixed = manifest.eval_negatives
        if fixed is None:
            return float(cfg.eval_negatives)
        events = manifest.split["test"][1] - manifest.split["val"][0]
        return (fixed["val"] + fixed["test"]) / max(events, 1)

    @staticmethod
    def train_horizon(cfg, manifest) -> int:
        """No snapshot enters the training loss (the task scores events): -1."""
        return -1

    @staticmethod
    def steps(cfg, manifest) -> list[range]:
        """The states ``embed`` writes: step 0, 1, 2 = every vertex's z after the training, validation, test events."""
        return [range(0, 1), range(1, 2), range(2, 3)]

    @staticmethod
    def snapshot_work(cfg, manifest) -> np.ndarray:
        """An empty array: there are no snapshots to score."""
        return np.zeros(0)

    def setup(self, reader, scored: Scored, comm) -> None:
        """``scored.events``: the strategy's event counts per split ({"train": E_train, ...})."""
        self.train_events = int(scored.events["train"])

    def global_train_count(self) -> float:
        """Training events over all ranks (``scored["train"]`` in :meth:`setup`)."""
        return float(self.train_events)

    def scores(self, emb: EventEmbeddings) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (n,) of the positives and (n, m) of their negatives."""
        n, m, z, index = emb.n, emb.negatives, emb.z, emb.index
        if index is None:
            hs, hd = self.src_fc(z[:n]), self.dst_fc(z[n:])
        else:
            hs, hd = self.src_fc(z.index_select(0, index[:n])), self.dst_fc(z).index_select(0, index[n:])
        pos = self.out_fc(torch.relu(hs + hd[:n])).view(n)
        # broadcast, not repeat_interleave: the same sums without an (n·m, h) copy of hs; in place in hd's
        # negative rows (nothing reads them after; the sum's and relu's backward need no input), two (n·m, h)
        # buffers fewer
        neg = self.out_fc(hd[n:].view(n, m, hd.shape[1]).add_(hs.unsqueeze(1)).relu_()).view(n, m)
        return pos, neg

    def forward(self, emb: EventEmbeddings, epoch: int) -> TaskBatch:
        """Training loss sum of one batch slice (every event is a training event)."""
        pos, neg = self.scores(emb)
        loss = nn.functional.softplus(-pos).sum() + nn.functional.softplus(neg).mean(1).sum()
        stats = np.zeros(self.stats_width())
        stats[0], stats[1] = float(loss.detach()), emb.n
        return TaskBatch(loss, stats)

    def stats_width(self) -> int:
        """Length of the metric sums (layout in the ``_TRAIN``/``_EVAL`` comment)."""
        return _TRAIN + _EVAL * (len(SPLITS) - 1)

    def eval_stats(self, split: str, pos: np.ndarray, neg: np.ndarray, batch_ap: float | None,
                   valid: np.ndarray | None = None) -> np.ndarray:
        """Metric sums of one evaluation slice: reciprocal ranks of ``pos`` (n,) against ``neg`` (n, m) — only its
        ``valid`` entries when given (fixed negatives of varying count) — and ``batch_ap`` (one rank per batch,
        else None).

        rank = 1 + (#negatives above + #at or above) / 2, TGB's (``tgb/linkproppred/evaluate.py``). A score that
        is not finite (a diverged model) makes the split's MRR NaN: NaN compares false, so it would rank first."""
        stats = np.zeros(self.stats_width())
        b = _TRAIN + _EVAL * (SPLITS.index(split) - 1)
        p = pos[:, None]
        keep = np.ones(neg.shape, dtype=bool) if valid is None else valid
        with np.errstate(invalid="ignore"):  # inf - inf: a diverged model's, whose MRR is NaN below
            gap = neg - p
        rank = 1.0 + 0.5 * (((gap > TIE) & keep).sum(1) + ((gap >= -TIE) & keep).sum(1))
        finite = np.isfinite(pos).all() and np.isfinite(neg[keep]).all()
        stats[b] = float(np.sum(1.0 / rank)) if finite else float("nan")
        stats[b + 1] = pos.shape[0]
        if batch_ap is not None:
            stats[b + 2], stats[b + 3] = batch_ap, 1.0
        return stats

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """Training loss per event; per evaluation split the MRR and the mean AP over batches."""
        out = {"train_loss": float(stats[0] / stats[1]) if stats[1] else float("nan")}
        for split in SPLITS[1:]:
            b = _TRAIN + _EVAL * (SPLITS.index(split) - 1)
            out[f"{split}_mrr"] = float(stats[b] / stats[b + 1]) if stats[b + 1] else float("nan")
            out[f"{split}_ap"] = float(stats[b + 2] / stats[b + 3]) if stats[b + 3] else float("nan")
        return out
