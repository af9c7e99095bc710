"""Link prediction: embeddings of snapshot t score the edges of snapshot t+1 (IBM §2.2, §6.1).

An MLP decoder scores [Z_t[u], Z_t[v]] against t+1's raw edges (S5) and uniform negatives keyed by
``(seed, epoch, t)``; AUC histograms of integer counts all-reduce exactly, so metrics do not depend on P where
the logits do not (logits P ranks compute a rounding apart differ in bin only where one straddles a bin edge, as
an exact AUC's pair flips where its two straddle each other; bins are never narrower than :data:`TIE`).
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hpcdgnn.config.schema import TaskConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.indices import index_dtype, union_ints
from hpcdgnn.nn.layout import phase_head, phase_view
from hpcdgnn.ops import decoder, kernels
from hpcdgnn.ops.negatives import draw_negatives, draw_negatives_joined, draw_negatives_on
from hpcdgnn.tasks.base import (
    SPLITS,
    Embeddings,
    RowShard,
    SampleEmbeddings,
    Scored,
    ShardedEmbeddings,
    Task,
    TaskBatch,
    split_steps,
)
from hpcdgnn.tasks.temporal_link_prediction import TIE

__all__ = ["EdgeDecoder", "LinkPrediction", "LinkPredictionOptions", "AUC_BINS", "AUC_RANGE", "auc_from_histograms",
           "decoder_bucket_bytes", "rebinned", "score_stats_torch"]

AUC_BINS = 1 << 14
AUC_RANGE = 16.0


def auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUC = P(score_pos > score_neg) + P(tie)/2 from histograms over the same ascending bins."""
    npos, nneg = pos.sum(), neg.sum()
    if npos == 0 or nneg == 0:
        return float("nan")
    neg_below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float((pos * (neg_below + 0.5 * neg)).sum() / (npos * nneg))


def _bins(x: torch.Tensor, positive: torch.Tensor, bins: int, low: float, span: float) -> torch.Tensor:
    """Each float64 logit's AUC bin ``clip(int64((x - low) / span * bins), 0, bins - 1)`` (numpy's expression,
    bit for bit), the negatives' shifted by ``bins``."""
    # a device divisor: CUDA turns division by a host scalar into a reciprocal product, moving bin edges
    width = torch.tensor(span, dtype=torch.float64, device=x.device)
    v = (x - low) / width * bins
    zero = (v != v) | (v >= 9.223372036854775808e18) | (v < 1.0)  # the int64 cast and the clip at 0
    return torch.where(zero, 0.0, v.clamp(max=bins - 1)).to(torch.int64) + bins * (~positive).to(torch.int64)


def score_stats_torch(logits: torch.Tensor, positive: torch.Tensor, bins: int, half_range: float,
                      pos: np.ndarray, neg: np.ndarray) -> int:
    """(correct count) of link-prediction ``logits`` (E,) against the ``positive`` mask, each logit's AUC bin,
    ``clip(int64((x + R) / (2R) * bins), 0, bins - 1)`` in float64 (numpy's expression, bit for bit), added to
    ``pos`` or ``neg``: on the logits' device, one transfer of the counts."""
    x = logits.detach().to(torch.float64)
    b = _bins(x, positive, bins, -half_range, 2.0 * half_range)
    correct = torch.where(positive, x > 0, x <= 0).sum().reshape(1)
    counts = torch.cat([torch.bincount(b, minlength=2 * bins), correct]).to("cpu", torch.float64).numpy()
    pos += counts[:bins]
    neg += counts[bins : 2 * bins]
    return int(counts[-1])


def rebinned(held: list[tuple[int, torch.Tensor, torch.Tensor]], stats: np.ndarray, comm, splits: int,
             width: int, bins: int, half_range: float) -> tuple[np.ndarray, float]:
    """``stats`` with each split's AUC histograms binned again over the split's logits' own range on every rank
    (collective: one all-reduce of 2 numbers per split and a flag), and the seconds this rank spent outside it.

    ``bins`` bins over [min, max] ∩ [-R, R] instead of the whole fixed [-R, R]: logits that crowd together (a
    first epoch's, a bias's) no longer share bins, and an outlier is clipped into an end bin as before, never
    widening the bins beyond the fixed ones. A bin is never narrower than :data:`TIE`: logits within it of the
    lowest tie, on any P, as TGN's AP ties them (a crowd only rounding spreads, which P ranks compute a rounding
    apart, would fill the bins by its rounding: AUC 1 or 0 where one rank reads 0.5). ``held``: the (split,
    logits, positive mask) this rank scored since its histograms were last cleared; where their count differs
    from the pairs ``stats`` counts on any rank (scores ``stats`` does not hold), ``stats`` as it is.

    Layout of ``stats`` per split s: ``[loss, pairs, correct, pos (bins), neg (bins)]`` at ``s * width``."""
    start = time.perf_counter()
    lo, hi, n = np.full(splits, np.inf), np.full(splits, -np.inf), np.zeros(splits)
    for s in range(splits):
        xs = [x for k, x, _ in held if k == s]
        n[s] = sum(x.shape[0] for x in xs)
        ends = []
        for x in xs:
            if x.numel():  # each reduction stays on the logits' device: one transfer per split
                bad = ~torch.isfinite(x)
                ends.append(torch.stack([x.masked_fill(bad, np.inf).amin(), x.masked_fill(bad, -np.inf).amax()]))
        if ends:
            e = torch.stack(ends).to("cpu", torch.float64).numpy()
            lo[s], hi[s] = e[:, 0].min(), e[:, 1].max()
    differs = float(any(n[s] != stats[s * width + 1] for s in range(splits)))
    local = time.perf_counter() - start
    top = comm.allreduce_array(np.concatenate([-lo, hi, [differs]]), op="max", tag="metrics")
    start = time.perf_counter()
    if top[-1] > 0:
        return stats, local
    out = stats.copy()
    for s in range(splits):
        low, high = max(-top[s], -half_range), min(top[splits + s], half_range)
        if not low <= high:  # no finite logit on any rank, or all beyond one end: the fixed bins
            low, high = -half_range, half_range
        span = max(high - low, bins * TIE)  # all alike, or alike to rounding: one bin, ties
        counts = torch.zeros(2 * bins, dtype=torch.float64)
        for k, x, positive in held:
            if k == s:
                b = _bins(x.to(torch.float64), positive, bins, low, span)
                counts += torch.bincount(b, minlength=2 * bins).to("cpu", torch.float64)
        out[s * width + 3 : (s + 1) * width] = counts.numpy()
    return out, local + time.perf_counter() - start


#: Bytes of decoder destination rows (pv and its gradient) one :func:`pairs_by_step` bucket covers
#: on the CPU: a quarter of a 2 MiB L2. A constant, not the machine's cache: pair order sets the
#: rounding of gradient sums. ``HPCDGNN_BUCKET_BYTES`` overrides it (0: no buckets); GPUs default to 0.
BUCKET_BYTES = 1 << 19


def bucket_bytes() -> int | None:
    """``HPCDGNN_BUCKET_BYTES`` (bytes >= 0; 0: drawn order), else None for the device default."""
    value = os.environ.get("HPCDGNN_BUCKET_BYTES")
    if value is None:
        return None
    if not value.strip().isdigit():
        from hpcdgnn.errors import ConfigError

        raise ConfigError(f"environment HPCDGNN_BUCKET_BYTES={value!r}: a byte count >= 0 (0: no buckets)")
    return int(value)


def decoder_bucket_bytes(device: torch.device, size: int | None) -> int:
    """Destination-row bytes per bucket on ``device``: ``size``, else :data:`BUCKET_BYTES` on the CPU, 0 elsewhere."""
    if size is None:
        return BUCKET_BYTES if device.type == "cpu" else 0
    return size


def concat_steps(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step (src, dst) int64 pairs as one (src, dst, bounds) triple."""
    bounds = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([p[0].shape[0] for p in parts], out=bounds[1:])
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), bounds
    return (np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False),
            np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False), bounds)


def bucket_shift(rows: int, vertices: int) -> int:
    """log2 of the bucket size: ``rows`` rounded down to a power of two; one bucket when ``rows >= vertices``."""
    if rows >= vertices:
        return max(1, vertices - 1).bit_length()
    return max(1, rows).bit_length() - 1


def _last_bucket(shift: int, vertices: int) -> int:
    """The highest destination bucket of ``vertices`` vertices in buckets of 2^shift (0: one bucket)."""
    return (max(vertices, 1) - 1) >> shift


def _bucket_order(dst: np.ndarray, bounds: np.ndarray, firsts, shift: int, vertices: int) -> np.ndarray:
    """Permutation stably sorting each step's pairs by destination bucket ``(dst - first) >> shift`` (clipped)."""
    top = _last_bucket(shift, vertices)
    return np.concatenate([a + np.argsort(np.clip((dst[a:b] - f) >> shift, 0, top), kind="stable")
                           for a, b, f in zip(bounds[:-1], bounds[1:], firsts, strict=True)])


def in_buckets(pairs: tuple[np.ndarray, np.ndarray, np.ndarray], firsts: list[int] | np.ndarray, shift: int,
               vertices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps' (src, dst, bounds) pairs, each step's stably sorted by destination bucket (:func:`pairs_by_step`)."""
    src, dst, bounds = pairs
    if _last_bucket(shift, vertices) == 0 or src.shape[0] == 0:
        return pairs
    order = _bucket_order(dst, bounds, firsts, shift, vertices)
    return src[order], dst[order], bounds


def pair_index_dtype(rows: int) -> np.dtype:
    """int32 where every one of ``rows`` fits, else int64: 12 bytes per labelled pair instead of 20."""
    return index_dtype(rows - 1)


def pairs_by_step(pos: tuple[np.ndarray, np.ndarray, np.ndarray], neg: tuple[np.ndarray, np.ndarray, np.ndarray],
                  firsts: list[int] | np.ndarray, shift: int, vertices: int,
                  index_dtype: np.dtype = np.int64) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """(src, dst, label) of several steps' pairs: step by step, by destination bucket, positives first.

    Keeps a step's and a bucket's rows in cache; the order depends only on each step's pairs.
    """
    firsts = np.asarray(firsts, dtype=np.int64)
    top = _last_bucket(shift, vertices)
    # step by step, each step's positives then its negatives; with buckets, then stably sorted per step
    cuts = [(x[2][j], x[2][j + 1], x) for j in range(firsts.shape[0]) for x in (pos, neg)]
    if not cuts:
        return np.zeros(0, dtype=index_dtype), np.zeros(0, dtype=index_dtype), torch.zeros(0)
    label = np.repeat(np.tile(np.array([1.0, 0.0], dtype=np.float32), firsts.shape[0]), [b - a for a, b, _ in cuts])
    src = np.concatenate([x[0][a:b] for a, b, x in cuts], dtype=index_dtype)
    dst = np.concatenate([x[1][a:b] for a, b, x in cuts], dtype=index_dtype)
    if top > 0:
        order = _bucket_order(dst, pos[2] + neg[2], firsts, shift, vertices)
        src, dst, label = src[order], dst[order], label[order]
    return src, dst, torch.from_numpy(label)


def pairs_by_step_on(pos: tuple[torch.Tensor, torch.Tensor, np.ndarray],
                     neg: tuple[torch.Tensor, torch.Tensor, np.ndarray],
                     index_dtype: torch.dtype = torch.int64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`pairs_by_step` without buckets, on the pairs' device: each step's positives, then its negatives.

    One small host-to-device copy (the runs' lengths and starts) and no result-sized sync.

    Shapes:
        pos, neg: (src (K,), dst (K,), bounds (steps + 1,) on the host); returns src, dst (K_pos + K_neg,) and
        label (K_pos + K_neg,) float32 on the pairs' device.
    """
    device = pos[0].device
    lengths = np.stack([np.diff(pos[2]), np.diff(neg[2])], axis=1).reshape(-1)  # pos_0, neg_0, pos_1, ...
    starts = np.stack([pos[2][:-1], pos[2][-1] + neg[2][:-1]], axis=1).reshape(-1)  # where each run is in [pos; neg]
    total = int(lengths.sum())
    # k-th pair of the output = element starts[run] + (k - run's first output position) of [pos; neg]
    runs, shift = torch.from_numpy(np.stack([lengths, starts - (np.cumsum(lengths) - lengths)])).to(device).unbind(0)
    take = torch.repeat_interleave(shift, runs, output_size=total) + torch.arange(total, device=device)
    src = torch.cat([pos[0], neg[0]])[take].to(index_dtype)
    dst = torch.cat([pos[1], neg[1]])[take].to(index_dtype)
    positive = (torch.arange(lengths.shape[0], device=device) % 2 == 0).to(torch.float32)
    return src, dst, torch.repeat_interleave(positive, runs, output_size=total)


#: metric sums per split: loss, pairs, correct, then the positive and the negative AUC histograms
_WIDTH = 3 + 2 * AUC_BINS

class EdgeDecoder(nn.Module):
    """MLP on concatenated endpoint embeddings: ``w2 · relu(W1 [z_u ; z_v] + b1) + b2``, first layer once per vertex.

    Shapes:
        z: (N, F); src, dst: (E,); output: (E,) logits.
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

    def project(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The first layer's halves applied once per row of ``z`` (N, F): (pu, pv), each (N, h)."""
        return decoder.project(z, self.lin1.weight)

    def score(self, pu: torch.Tensor, pv: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Logits (E,) of edges ``src[i] -> dst[i]`` from the projections of :meth:`project`."""
        return decoder.edge_logits(pu, pv, self.lin1.bias, self.lin2.weight[0], self.lin2.bias, src, dst)

    def forward(self, z: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Logits (E,) of edges ``src[i] -> dst[i]`` from embeddings ``z`` (N, F)."""
        return self.score(*self.project(z), src, dst)

    def train_loss(self, z: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                   label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(summed BCE with autograd, detached logits, detached (pu, pv)); one compiled pass where the kernels apply."""
        loss, logits, pu, pv = decoder.edge_bce(z, self.lin1.weight, self.lin1.bias, self.lin2.weight,
                                                self.lin2.bias, src, dst, label)
        return loss, logits, (pu, pv)


@dataclass(frozen=True, kw_only=True)
class LinkPredictionOptions(TaskConfig):
    """``task: {name: link_prediction}``: Z_t scores the edges of snapshot t+1 against drawn negatives (IBM §2.2)."""

    name: str = "link_prediction"
    """The task these options belong to."""
    negatives: int = 1
    """Negative pairs per positive edge: (u, v) each uniform over all N vertices, with replacement, unfiltered,
    keyed by (train.seed, epoch, t): the same at any P."""
    decoder_hidden: int = 16
    """Hidden width of the edge decoder MLP on [z_u, z_v]."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._at_least_one("negatives", "decoder_hidden")


class LinkPrediction(Task):
    """Link-prediction head and targets; stats per split: [loss_sum, pairs, correct, pos_hist, neg_hist]."""

    metric = "auc"
    in_place = True
    buckets_pairs = True
    predicts = "pairs"
    options = LinkPredictionOptions

    def __init__(self, cfg: LinkPredictionOptions, manifest: Manifest, emb_features: int, seed: int) -> None:
        super().__init__()
        self.cfg, self.manifest, self.seed = cfg, manifest, seed
        self.decoder = EdgeDecoder(emb_features, cfg.decoder_hidden)
        # step t uses Z_t to predict the edges of t+1, so there are T-1 steps
        self.ranges = split_steps(manifest.num_snapshots - 1, cfg.split)
        self.targets: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: per (steps, positions, rows): each step's positive pairs, constant over epochs
        self._fixed: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = {}
        #: in place: where the rows are; whether pairs are scored by source row (else by step); my steps
        self.shard: RowShard | None = None
        self.by_source = True
        self._steps: list[int] = []
        #: one rank with every row (:meth:`_alone_block`): their order into keys t * N + v (empty: in order)
        self._alone_order: torch.Tensor | None = None
        #: mini-batch samples: the kept epoch's negatives (by t) and selected pairs (by (t, batch))
        self._epoch_negatives: tuple[int, dict] = (-1, {})
        #: the pairs' destination buckets (:meth:`_bucket_shift`), read once: every epoch orders alike
        self._bucket_bytes = bucket_bytes()
        #: (split, logits, positive) scored since :meth:`hold_scores`, for :meth:`rebin`; None: not held
        self._held: list[tuple[int, torch.Tensor, torch.Tensor]] | None = None
        self.reset_parameters()

    def hold_scores(self, on: bool, kept: list | None = None) -> None:
        """Keep (``on``) the logits scored from now on for :meth:`rebin`, after ``kept`` (a resume within the
        epoch), or stop keeping them; clears what was kept."""
        self._held = (list(kept) if kept else []) if on else None

    def held_scores(self) -> list | None:
        """The (split, logits, positive) kept so far, in scoring order (None: not kept)."""
        return None if self._held is None else list(self._held)

    def held_bytes(self) -> int:
        """Bytes of the logits and labels kept since :meth:`hold_scores`."""
        return sum(logit.nbytes + positive.nbytes for _, logit, positive in self._held or ())

    @staticmethod
    def held_bytes_per_pair(itemsize: int) -> float:
        """A logit and its label (a bool) per scored pair of every split, until :meth:`rebin`."""
        return float(itemsize + 1)

    def rebin(self, comm, stats: np.ndarray) -> tuple[np.ndarray, float]:
        """This rank's ``stats`` with the AUC histograms binned over each split's own logit range (collective;
        :func:`rebinned`), from the logits kept since :meth:`hold_scores`, which stops keeping, and the seconds
        of this rank's own work; ``(stats, 0.0)`` when none were kept."""
        held, self._held = self._held, None
        if held is None:
            return stats, 0.0
        return rebinned(held, stats, comm, len(SPLITS), _WIDTH, AUC_BINS, AUC_RANGE)

    def reset_parameters(self) -> None:
        """Reset the decoder MLP."""
        self.decoder.reset_parameters()

    def predict(self, z: torch.Tensor, src: torch.Tensor | None = None,
                dst: torch.Tensor | None = None) -> torch.Tensor:
        """σ(decoder(z_u, z_v)): the probability (K,) that edge u -> v appears in snapshot t+1, given Z_t ``z``."""
        return torch.sigmoid(self.decoder(z, src.to(z.device), dst.to(z.device)))

    @staticmethod
    def train_horizon(cfg: LinkPredictionOptions, manifest: Manifest) -> int:
        """Last training step: Z_t of t = split end - 1 scores the edges of t + 1."""
        return split_steps(manifest.num_snapshots - 1, cfg.split)[0].stop - 1

    @staticmethod
    def steps(cfg: LinkPredictionOptions, manifest: Manifest) -> list[range]:
        """Steps t = 0..T-2 (Z_t scores the edges of t + 1), split in time order."""
        return split_steps(manifest.num_snapshots - 1, cfg.split)

    @staticmethod
    def footprint(cfg: LinkPredictionOptions, manifest: Manifest, hidden: int) -> tuple[int, int, int]:
        """Decoder first-layer weights; pairs as two int64 indices each (drawn on the host, shared with their
        tensors): one step's (the largest snapshot × (1 + negatives), drawn whole even where a sample scores a
        batch of them), and every training step's (a full-batch epoch's loss scores them all before its
        backward). Only what must exist: the decoder's hidden layer runs in chunks of pairs, and which rows are
        projected depends on the strategy."""
        pairs = LinkPrediction.scored_pairs(cfg, manifest)
        train = pairs[: LinkPrediction.train_horizon(cfg, manifest) + 1]
        return 2 * hidden * cfg.decoder_hidden, int(16 * pairs.max(initial=0)), int(16 * train.sum())

    @staticmethod
    def scored_pairs(cfg: LinkPredictionOptions, manifest: Manifest) -> np.ndarray:
        """(T,) pairs Z_t scores: the edges of t + 1, each with ``negatives`` negatives (none for the last t)."""
        pairs = np.zeros(manifest.num_snapshots)
        pairs[:-1] = np.asarray(manifest.snapshot_edges[1:], dtype=np.float64) * (1 + cfg.negatives)
        return pairs

    @staticmethod
    def scored_positives(cfg: LinkPredictionOptions, manifest: Manifest) -> tuple[np.ndarray, np.ndarray]:
        """(T,) the edges of t + 1 and (T,) their endpoints, the vertices active at t + 1 (none for the last t)."""
        positives, ends = np.zeros(manifest.num_snapshots), np.zeros(manifest.num_snapshots)
        positives[:-1] = np.asarray(manifest.snapshot_edges[1:], dtype=np.float64)
        ends[:-1] = np.asarray(manifest.snapshot_active[1:], dtype=np.float64)
        return positives, ends

    @staticmethod
    def saved_bytes(cfg: LinkPredictionOptions, emb_features: int, itemsize: int) -> tuple[float, float]:
        """Per row: Z and the gradients of both projections (the compiled loss, :func:`decoder.edge_bce`); in
        torch ops the projections instead, and per pair its two indices, logit and label."""
        per_row = float((emb_features + 2 * cfg.decoder_hidden) * itemsize)
        return (per_row, 0.0) if kernels.expected() else (per_row, 16.0 + 2 * itemsize)

    @staticmethod
    def snapshot_work(cfg: LinkPredictionOptions, manifest: Manifest) -> np.ndarray:
        """Per-pair work of scoring each snapshot: hidden × (5 train, 2.7 compiled, 1 eval) + 4 (empirical)."""
        train = split_steps(manifest.num_snapshots - 1, cfg.split)[0]
        factor = 2.7 if kernels.expected() else 5.0
        per = np.full(manifest.num_snapshots, cfg.decoder_hidden + 4.0)
        per[train.start : train.stop] = cfg.decoder_hidden * factor + 4.0
        return LinkPrediction.scored_pairs(cfg, manifest) * per

    @staticmethod
    def vertex_work(cfg: LinkPredictionOptions, manifest: Manifest, emb_features: int) -> np.ndarray:
        """The decoder's first layer once per vertex (:meth:`EdgeDecoder.project`: N·F·2h) on every scored step."""
        ranges = split_steps(manifest.num_snapshots - 1, cfg.split)
        work = np.zeros(manifest.num_snapshots)
        work[ranges[0].start : ranges[-1].stop] = manifest.num_vertices * emb_features * 2.0 * cfg.decoder_hidden
        work[ranges[0].start : ranges[0].stop] *= 3.0
        return work

    def _split_of(self, step: int) -> int:
        for i, r in enumerate(self.ranges):
            if step in r:
                return i
        return -1

    def setup(self, reader, scored: Scored, comm) -> None:
        """Read the raw edges of t+1 for every scored t < T-1; in place, :meth:`_setup_in_place`."""
        if scored.rows is not None:
            self._setup_in_place(reader, scored.rows, comm)
            return
        for t in scored.snapshots:
            if t + 1 < self.manifest.num_snapshots:
                src, dst = reader.read_target(t + 1)
                self.targets[t] = (torch.from_numpy(src), torch.from_numpy(dst))

    def global_train_count(self) -> float:
        """Positive plus negative training pairs over all train steps (from the manifest)."""
        edges = self.manifest.snapshot_edges
        return float(sum(edges[t + 1] for t in self.ranges[0]) * (1 + self.cfg.negatives))

    def _bucket_shift(self, vertices: int) -> int:
        """log2 of the destination rows per :func:`pairs_by_step` bucket (:func:`decoder_bucket_bytes`)."""
        weight = self.decoder.lin1.weight
        size = decoder_bucket_bytes(weight.device, self._bucket_bytes)
        row = 2 * self.cfg.decoder_hidden * weight.element_size()
        return bucket_shift(size // row if size else vertices, vertices)

    def _draw(self, t: int, epoch: int, m: int) -> np.ndarray:
        """The (2, m) negative pairs of step t in ``epoch`` (:func:`draw_negatives`)."""
        return draw_negatives(self.seed, epoch, t, self.manifest.num_vertices, m)

    def _negative_count(self, t: int) -> int:
        """Step t's negatives per epoch: ``task.negatives`` per positive."""
        return self.targets[t][0].shape[0] * self.cfg.negatives

    def _step_negatives(self, t: int, epoch: int, offset: int = 0) -> np.ndarray:
        """Step t's negatives of ``epoch`` as a (2, m) array of rows ``offset + v``."""
        pairs = self._draw(t, epoch, self._negative_count(t))
        pairs += offset
        return pairs

    def _negatives_joined(self, steps: list[int], epoch: int, offsets: list[int]):
        """Several steps' negatives as one (src, dst, bounds) triple, drawn in one call; rows ``offsets[j] + v``."""
        counts = [self._negative_count(t) for t in steps]
        pairs, bounds = draw_negatives_joined(self.seed, epoch, steps, self.manifest.num_vertices, counts, offsets)
        return pairs[0], pairs[1], bounds

    def _positives(self, t: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
        """Step t's positive pairs (src, dst) as int64 rows ``offset + v``."""
        return tuple(x.numpy().astype(np.int64) + offset for x in self.targets[t])

    def _negatives(self, t: int, epoch: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_draw` as (src, dst) tensors."""
        pairs = torch.from_numpy(self._draw(t, epoch, m))
        return pairs[0], pairs[1]

    def _pairs(self, steps: list[int], where: dict[int, int], n: int, epoch: int):
        """(src, dst, label) of every scored pair of ``steps``, rows ``where[t] * n + v``; positives cached."""
        firsts, shift = [where[t] * n for t in steps], self._bucket_shift(n)
        device = self.decoder.lin1.weight.device
        if device.type == "cuda" and _last_bucket(shift, n) == 0:
            return self._pairs_on(steps, firsts, n, epoch, device)
        # the shift follows the decoder's device
        fixed = self._kept_positives((tuple(steps), tuple(where[t] for t in steps), n, shift), lambda: in_buckets(
            concat_steps([self._positives(t, f) for t, f in zip(steps, firsts, strict=True)]), firsts, shift, n))
        negatives = self._negatives_joined(steps, epoch, firsts)
        src, dst, label = pairs_by_step(fixed, negatives, firsts, shift, n,
                                        pair_index_dtype(max(firsts, default=0) + n))
        return torch.from_numpy(src), torch.from_numpy(dst), label

    def _kept_positives(self, key: tuple, build):
        """The positives of ``key`` (steps, where, N, and the bucket shift or device), built once."""
        fixed = self._fixed.get(key)
        if fixed is None:
            if len(self._fixed) >= 64:  # mini-batch strategies vary the steps: keep the cache bounded
                self._fixed.clear()
            fixed = self._fixed[key] = build()
        return fixed

    def _pairs_on(self, steps: list[int], firsts: list[int], n: int, epoch: int, device: torch.device):
        """:meth:`_pairs` built on ``device`` (a GPU; no buckets): the positives kept there, the negatives drawn there
        (:func:`draw_negatives_on`, the host's pairs bit for bit); per epoch the host sends a few numbers per step."""
        def build():
            src, dst, bounds = concat_steps([self._positives(t, f) for t, f in zip(steps, firsts, strict=True)])
            return torch.from_numpy(src).to(device), torch.from_numpy(dst).to(device), bounds

        fixed = self._kept_positives((tuple(steps), tuple(firsts), n, device), build)
        counts = [self._negative_count(t) for t in steps]
        negatives = draw_negatives_on(self.seed, epoch, steps, self.manifest.num_vertices, counts, firsts, device)
        dtype = torch.int32 if pair_index_dtype(max(firsts, default=0) + n) == np.int32 else torch.int64
        return pairs_by_step_on(fixed, negatives, dtype)

    def _setup_in_place(self, reader, shard: RowShard, comm) -> None:
        """Rows where they live: choose where pairs are scored (both exact), keep the positives.

        *By source* or *by step* (rank t mod P), whichever fetches fewer rows for epoch 1 over all ranks.
        """
        self.shard, N, T = shard, shard.num_vertices, self.manifest.num_snapshots
        for t in range(T - 1):  # the edges of every step: a pair's scoring rank is decided here
            if self._split_of(t) >= 0:
                src, dst = reader.read_target(t + 1)
                self.targets[t] = (torch.from_numpy(src), torch.from_numpy(dst))
        if shard.alone:
            self._steps = sorted(self.targets)
            keys = shard.keys
            if keys.size and keys.size % N == 0:
                order = np.argsort(keys, kind="stable")
                if np.array_equal(keys[order], np.arange(keys.size)):
                    in_order = np.array_equal(order, np.arange(keys.size))
                    self._alone_order = torch.from_numpy(order[:0] if in_order else order)
            return
        counts = []
        for self.by_source in (True, False):
            self._steps = [t for t in sorted(self.targets) if self.by_source or t % shard.num_ranks == shard.rank]
            self._fixed.clear()
            counts.append(self._rows_of(self._pairs_in_place(1))[0].shape[0])
        by_source, by_step = comm.allreduce_array(counts, tag="setup")
        self.by_source = bool(by_source < by_step)
        self._steps = [t for t in sorted(self.targets) if self.by_source or t % shard.num_ranks == shard.rank]
        self._fixed.clear()
        if shard.rank == 0:
            from hpcdgnn.metrics.log import get_logger

            get_logger().info(f"link prediction in place: pairs scored by {'source row' if self.by_source else 'step'} "
                              f"(rows fetched per epoch: {int(by_source)} by source row, {int(by_step)} by step)")

    def _pairs_in_place(self, epoch: int) -> dict[int, tuple[np.ndarray, np.ndarray, torch.Tensor]]:
        """``{split: (src keys, dst keys, labels)}`` of the pairs I score (keys ``t * N + v``)."""
        shard, N = self.shard, self.manifest.num_vertices
        mine_src = self.by_source and not shard.alone
        shift = self._bucket_shift(N)

        def kept(pairs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """Steps' pairs (src, dst, bounds) with those whose source row is mine, where that decides."""
            if not mine_src:
                return pairs
            src, dst, bounds = pairs
            keep = shard.mine(src)
            before = np.zeros(keep.shape[0] + 1, dtype=np.int64)  # kept pairs before each position
            np.cumsum(keep, out=before[1:])
            return src[keep], dst[keep], before[bounds]

        out = {}
        for s in range(len(SPLITS)):
            steps = [t for t in self._steps if self._split_of(t) == s]
            if not steps:
                continue
            firsts = [t * N for t in steps]
            fixed = self._fixed.get(("in place", s, shift))
            if fixed is None:
                fixed = self._fixed[("in place", s, shift)] = in_buckets(
                    kept(concat_steps([self._positives(t, f) for t, f in zip(steps, firsts, strict=True)])),
                    firsts, shift, N)
            out[s] = pairs_by_step(fixed, kept(self._negatives_joined(steps, epoch, firsts)), firsts, shift, N)
        return out

    def _alone_block(self, emb: ShardedEmbeddings) -> Embeddings | None:
        """P = 1 with every row of steps 0..S-1: the (S, N, F) block in key order (no lookups), else None."""
        order, N = self._alone_order, self.manifest.num_vertices
        if order is None:
            return None
        rows = emb.rows if not order.numel() else emb.rows.index_select(0, order.to(emb.rows.device))
        S = rows.shape[0] // N
        return Embeddings.of_block(phase_view(rows, (S, N, rows.shape[-1])), list(range(S)))

    def _rows_of(self, pairs: dict) -> tuple[np.ndarray, dict[int, tuple[torch.Tensor, torch.Tensor]]]:
        """The keys of the rows ``pairs`` read that are not mine (ascending, once each), and each split's (src, dst)
        rows in ``[my rows ; those rows]``.

        Every end's owner is found once, and the fetched rows' positions come from the same sort that makes
        them unique: these per-epoch passes over every pair are what in-place scoring adds to the model's work.
        """
        shard, R = self.shard, self.shard.keys.shape[0]
        empty = np.zeros(0, dtype=np.int64)
        src = np.concatenate([p[0] for p in pairs.values()]) if pairs else empty
        dst = np.concatenate([p[1] for p in pairs.values()]) if pairs else empty
        # by source row, the sources are mine (kept so): only destinations may lack
        keys = dst if self.by_source else np.concatenate([src, dst])
        lacking = ~shard.mine(keys)
        at = np.empty(keys.shape[0], dtype=np.int64)
        at[~lacking] = shard.local_of(keys[~lacking])
        need, inverse = np.unique(keys[lacking], return_inverse=True)
        at[lacking] = R + inverse.reshape(-1)
        src_at, dst_at = (shard.local_of(src), at) if self.by_source else (at[: src.shape[0]], at[src.shape[0] :])
        bounds = np.cumsum([0] + [p[0].shape[0] for p in pairs.values()])
        return need, {s: (torch.from_numpy(src_at[a:b]), torch.from_numpy(dst_at[a:b]))
                      for s, a, b in zip(pairs, bounds[:-1], bounds[1:], strict=True)}

    def _forward_in_place(self, emb: ShardedEmbeddings, epoch: int) -> TaskBatch:
        """My pairs scored on my rows plus the rows I lack, fetched once for all splits, then as :meth:`forward`."""
        rows = emb.rows
        pairs = self._pairs_in_place(epoch)
        need, at = self._rows_of(pairs)
        fetched = emb.fetch(need)  # collective: every rank, once, even with nothing to fetch
        loss_sum = (sum(p.sum() for p in self.decoder.parameters()) + rows.sum() + fetched.sum()) * 0.0
        if not pairs:
            return TaskBatch(loss_sum, np.zeros(3 * _WIDTH))
        z = torch.cat([rows, fetched]) if need.size else rows
        scored = {s: (*at[s], label) for s, (_, _, label) in pairs.items()}
        return self._score(dict.fromkeys(scored, z), scored, loss_sum, rows.device, rows.dtype)

    # -- mini-batch samples (the sequences strategy) --
    def _sample_pairs(self, t: int, batch: np.ndarray, epoch: int) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
        """(src, dst, labels) of step t's pairs with a source in ``batch``, positives first; each in one sample."""
        cached_epoch, negatives = self._epoch_negatives
        if cached_epoch != epoch:
            negatives = {}
            self._epoch_negatives = (epoch, negatives)
        # a sample asks three times (its vertices, its example count, its loss): select once per epoch
        key = (t, batch.shape[0], hash(batch.tobytes()))
        if key in negatives:
            return negatives[key]
        if t not in negatives:
            negatives[t] = self._step_negatives(t, epoch)
        in_batch = np.zeros(self.manifest.num_vertices, dtype=bool)
        in_batch[batch] = True
        ps, pd = (x.numpy() for x in self.targets[t])
        keep = in_batch[ps]
        ns, nd = negatives[t]
        nkeep = in_batch[ns]
        src = np.concatenate([ps[keep], ns[nkeep]]).astype(np.int64)
        dst = np.concatenate([pd[keep], nd[nkeep]]).astype(np.int64)
        label = torch.zeros(src.shape[0])
        label[: int(keep.sum())] = 1.0
        negatives[key] = (src, dst, label)
        return negatives[key]

    def sample_vertices(self, t: int, batch: np.ndarray, epoch: int) -> np.ndarray:
        """The batch (sources) and the destinations of their pairs at t."""
        if t not in self.targets:
            return batch
        return union_ints(batch, self._sample_pairs(t, batch, epoch)[1])

    def sample_examples(self, t: int, batch: np.ndarray, epoch: int) -> float:
        """Pairs (positive and negative) with a source in ``batch`` at a training step t."""
        if self._split_of(t) != 0 or t not in self.targets:
            return 0.0
        return float(self._sample_pairs(t, batch, epoch)[0].shape[0])

    def _forward_sample(self, emb: SampleEmbeddings, epoch: int) -> TaskBatch:
        """A sample's pairs (:meth:`_sample_pairs`) scored from its rows, as :meth:`forward`."""
        loss_sum = (sum(p.sum() for p in self.decoder.parameters()) + emb.rows.sum()) * 0.0
        s = self._split_of(emb.t)
        if s < 0 or emb.t not in self.targets:
            return TaskBatch(loss_sum, np.zeros(3 * _WIDTH))
        src, dst, label = self._sample_pairs(emb.t, emb.batch, epoch)
        return self._score({s: emb.rows}, {s: (emb.index(src), emb.index(dst), label)}, loss_sum,
                           emb.rows.device, emb.rows.dtype)

    def _score(self, inputs: dict, pairs: dict, loss_sum: torch.Tensor, device, dtype) -> TaskBatch:
        """Logits, training loss and per-split metric sums; evaluation scored when ``stats`` is read (TaskBatch)."""
        now = {s: p for s, p in pairs.items() if s == 0}
        rest = {s: p for s, p in pairs.items() if s != 0}
        stats = np.zeros(3 * _WIDTH)
        projected: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        loss_sum = self._sums(inputs, now, loss_sum, device, dtype, stats, projected)
        later = (lambda into: self._sums(inputs, rest, None, device, dtype, into, projected)) if rest else None
        return TaskBatch(loss_sum, stats, later)

    def _sums(self, inputs: dict, pairs: dict, loss_sum: torch.Tensor | None, device, dtype, stats: np.ndarray,
              projected: dict) -> torch.Tensor | None:
        """:meth:`_score`'s sums for the splits of ``pairs``, added into ``stats`` in place; returns the loss sum."""
        width = _WIDTH
        for s, split_pairs in sorted(pairs.items()):
            src, dst, host_label = split_pairs() if callable(split_pairs) else split_pairs
            z = inputs[s]
            # pairs are drawn on the host (same stream on every rank and device), then follow the rows
            src, dst, label = src.to(device), dst.to(device), host_label.to(device, dtype)
            if s == 0 and torch.is_grad_enabled():
                loss, logit, both = self.decoder.train_loss(z, src, dst, label)
                loss_sum = loss_sum + loss
                if any(inputs[t] is z for t in inputs if t != s):  # evaluation pairs read these rows too
                    projected[id(z)] = (z, both)
            else:
                with torch.no_grad():
                    both = projected.get(id(z), (z, None))[1]
                    if both is None:
                        both = self.decoder.project(z)
                        projected[id(z)] = (z, both)
                    logit = self.decoder.score(*both, src, dst)
                    loss = F.binary_cross_entropy_with_logits(logit, label, reduction="sum")
                if s == 0:
                    loss_sum = loss_sum + loss
            base = s * width
            stats[base] += float(loss.detach())
            stats[base + 1] += logit.shape[0]
            pos, neg = stats[base + 3 : base + 3 + AUC_BINS], stats[base + 3 + AUC_BINS : base + width]
            correct = score_stats_torch(logit, label > 0, AUC_BINS, AUC_RANGE, pos, neg)
            stats[base + 2] += correct
            if self._held is not None:
                self._held.append((s, logit.detach(), label > 0))
        return loss_sum

    def forward(self, emb: dict[int, torch.Tensor] | ShardedEmbeddings | SampleEmbeddings, epoch: int) -> TaskBatch:
        """BCE loss sum over the train steps held here, metric sums for all splits: one first-layer GEMM, one fused pass
        per split."""
        if isinstance(emb, ShardedEmbeddings):
            block = self._alone_block(emb)
            if block is None:
                return self._forward_in_place(emb, epoch)
            emb = block
        if isinstance(emb, SampleEmbeddings):
            return self._forward_sample(emb, epoch)
        by_split: dict[int, list[int]] = {}
        for t in sorted(emb):
            s = self._split_of(t)
            if s >= 0 and t in self.targets:
                by_split.setdefault(s, []).append(t)
        block = getattr(emb, "block", None)
        if block is not None:
            where, n = emb.position, block.shape[1]
            rows = block.reshape(-1, block.shape[-1])
            # no training step here: a zero sum over the block keeps the backward reaching what produced it
            reach = block.sum() if 0 not in by_split else 0.0
        else:
            scored = [t for _, steps in sorted(by_split.items()) for t in steps]
            where = {t: k for k, t in enumerate(scored)}
            n = emb[scored[0]].shape[0] if scored else 0
            rows = torch.cat([emb[t] for t in scored]) if scored else None
            reach = sum(z.sum() for z in emb.values())
        # a zero on every embedding and decoder parameter (Task.forward's contract)
        loss_sum = (sum(p.sum() for p in self.decoder.parameters()) + reach) * 0.0
        if not by_split:
            return TaskBatch(loss_sum, np.zeros(3 * _WIDTH))
        inputs, first = self._split_rows(rows, n, where, by_split, block)

        def pairs(s: int):  # the evaluation splits' pairs are drawn when they are scored
            return self._pairs(by_split[s], {t: where[t] - first[s] for t in by_split[s]}, n, epoch)

        return self._score(inputs, {s: functools.partial(pairs, s) for s in by_split}, loss_sum,
                           rows.device, rows.dtype)

    def _split_rows(self, rows: torch.Tensor, n: int, where: dict[int, int], by_split: dict[int, list[int]],
                    block: torch.Tensor | None = None):
        """The rows each split's pairs read, and their first row's position per split.

        Evaluation rows are read detached: their backward is work the block plan does not count.
        """
        train = [where[t] for t in by_split.get(0, ())]
        cut = max(train) + 1 if train else 0
        after = all(where[t] >= cut for s, steps in by_split.items() if s for t in steps)
        if not (after and rows.requires_grad and torch.is_grad_enabled()) or cut * n == rows.shape[0]:
            return dict.fromkeys(by_split, rows), dict.fromkeys(by_split, 0)
        if not train:
            inputs = {}
        elif block is not None:  # the block's training head itself where the layout joined it (phase_join)
            inputs = {0: phase_head(block, cut).reshape(-1, rows.shape[1])}
        else:
            inputs = {0: rows[: cut * n]}
        tail = rows[cut * n :].detach()
        inputs.update((s, tail) for s in by_split if s)
        return inputs, {s: cut if s else 0 for s in by_split}

    def metrics(self, stats: np.ndarray) -> dict[str, float]:
        """Mean loss, accuracy and AUC per split; NaN where the loss is not finite (a diverged model's NaN logits
        fall in one bin and compare false: their AUC would read 0.5, their accuracy a class's share)."""
        width = _WIDTH
        out: dict[str, float] = {}
        for s, name in enumerate(SPLITS):
            b = s * width
            pairs = stats[b + 1]
            scored = pairs and np.isfinite(stats[b])
            out[f"{name}_loss"] = float(stats[b] / pairs) if pairs else float("nan")
            out[f"{name}_acc"] = float(stats[b + 2] / pairs) if scored else float("nan")
            out[f"{name}_auc"] = auc_from_histograms(stats[b + 3 : b + 3 + AUC_BINS],
                                                     stats[b + 3 + AUC_BINS : b + width]) if scored else float("nan")
        return out
