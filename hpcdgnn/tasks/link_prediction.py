"""Link prediction: embeddings of snapshot t score the edges of snapshot t+1 (IBM §2.2, §6.1).

An edge (u, v) is scored from the concatenation [Z_t[u], Z_t[v]] by a small
MLP decoder (one logit; binary cross-entropy). Positives are the raw edges of
snapshot t+1 (before smoothing, SPEC S5); ``negatives`` × as many negative
pairs are drawn uniformly from V×V by a counter-based generator keyed by
``(seed, epoch, t)`` — the same pairs whichever rank scores snapshot t
(:func:`draw_negatives_steps`).

AUC is computed from per-split histograms of the logits (``AUC_BINS`` bins
over ``[-AUC_RANGE, AUC_RANGE]``, clipped): integer counts all-reduce exactly,
so the AUC is identical for any P; pairs whose logits fall in the same bin
count as ties (1/2), which bounds the departure from the exact AUC by half
the fraction of positive-negative pairs sharing a bin. Accuracy thresholds the
logit at 0.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hpcdgnn.config.schema import TaskConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.indices import index_dtype
from hpcdgnn.nn import kernels
from hpcdgnn.nn.layout import phase_head, phase_view
from hpcdgnn.tasks.base import (
    SPLITS,
    Embeddings,
    RowShard,
    SampleEmbeddings,
    ShardedEmbeddings,
    Task,
    TaskBatch,
    split_steps,
)

__all__ = ["EdgeDecoder", "LinkPrediction", "AUC_BINS", "AUC_RANGE", "auc_from_histograms", "decoder_bucket_bytes",
           "draw_negatives", "draw_negatives_joined", "draw_negatives_steps", "negatives_key", "score_stats_torch"]

AUC_BINS = 1 << 14
AUC_RANGE = 16.0


def auc_from_histograms(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUC = P(score_pos > score_neg) + P(tie)/2 from histograms over the same ascending bins."""
    npos, nneg = pos.sum(), neg.sum()
    if npos == 0 or nneg == 0:
        return float("nan")
    neg_below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    return float((pos * (neg_below + 0.5 * neg)).sum() / (npos * nneg))


#: splitmix64 (Steele, Lea & Flood 2014): the stream's increment and its finaliser's multipliers
_GAMMA, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U64 = (1 << 64) - 1


def score_stats_torch(logits: torch.Tensor, positive: torch.Tensor, bins: int, half_range: float,
                      pos: np.ndarray, neg: np.ndarray) -> int:
    """:func:`hpcdgnn.nn.kernels.score_stats` in torch, where the logits live (a GPU): the correct count,
    and each logit's AUC bin ``clip(int64((x + R) / (2R) * bins), 0, bins - 1)`` in float64 added to
    ``pos`` / ``neg`` (host float64 arrays), bin for bin as the compiled pass and numpy on x86-64 give them
    (NaN, inf and values past 2^63 in bin 0, that cast's result). One ``bincount`` of positives and
    negatives together and one copy of 2·bins + 1 counts back to the host, where numpy's passes over a host
    copy of every logit took a few hundred milliseconds per epoch at 12.6 M pairs.
    """
    x = logits.detach().to(torch.float64)
    # a divisor on the device: CUDA divides by a host scalar as a product with its reciprocal, which moves
    # values at bin edges unless 2R is a power of two
    width = torch.tensor(2.0 * half_range, dtype=torch.float64, device=x.device)
    v = (x + half_range) / width * bins
    zero = (v != v) | (v >= 9.223372036854775808e18) | (v < 1.0)  # the int64 cast and the clip at 0
    b = torch.where(zero, 0.0, v.clamp(max=bins - 1)).to(torch.int64) + bins * (~positive).to(torch.int64)
    correct = torch.where(positive, x > 0, x <= 0).sum().reshape(1)
    counts = torch.cat([torch.bincount(b, minlength=2 * bins), correct]).to("cpu", torch.float64).numpy()
    pos += counts[:bins]
    neg += counts[bins : 2 * bins]
    return int(counts[-1])


def _mix64(z: int) -> int:
    """splitmix64's finaliser on a Python int (the key of a step's stream)."""
    z = ((z ^ (z >> 30)) * _MIX1) & _U64
    z = ((z ^ (z >> 27)) * _MIX2) & _U64
    return z ^ (z >> 31)


def negatives_key(seed: int, epoch: int, t: int) -> int:
    """The 64-bit key of step t's negatives in ``epoch``: a function of (seed, epoch, t) alone."""
    k = _mix64((seed + _GAMMA) & _U64)
    k = _mix64((k + epoch + _GAMMA) & _U64)
    return _mix64((k + t + _GAMMA) & _U64)


def _draws(key: int, count: int, num_vertices: int) -> np.ndarray:
    """The first ``count`` vertices of the stream ``key`` (int64): the i-th (from 0) is
    ``⌊mix(key + (i+1)·γ) · N / 2^64⌋``, the 64 x 32-bit high product taken in two halves (exact for
    N < 2^32); uint64 arithmetic wraps, as the generator intends."""
    z = np.uint64(key) + np.arange(1, count + 1, dtype=np.uint64) * np.uint64(_GAMMA)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    z ^= z >> np.uint64(31)
    n = np.uint64(num_vertices)
    high = (z >> np.uint64(32)) * n + (((z & np.uint64(0xFFFFFFFF)) * n) >> np.uint64(32))
    return (high >> np.uint64(32)).astype(np.int64)


def draw_negatives_steps(seed: int, epoch: int, steps: list[int], num_vertices: int,
                         counts: list[int]) -> list[np.ndarray]:
    """:func:`draw_negatives_joined`, step by step: step ``steps[j]``'s pairs as a (2, counts[j]) view."""
    pairs, bounds = draw_negatives_joined(seed, epoch, steps, num_vertices, counts)
    return [pairs[:, a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def draw_negatives_joined(seed: int, epoch: int, steps: list[int], num_vertices: int, counts: list[int],
                          offsets: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Step ``steps[j]``'s ``counts[j]`` negative pairs of ``epoch``, for every j: pairs drawn uniformly
    and independently from V x V, each step's ordered by source vertex; returned as one (2, Σ counts) int64
    array with step j's pairs at ``bounds[j]:bounds[j+1]`` (its vertices plus ``offsets[j]``, default 0:
    rows of stacked embeddings), and ``bounds``.

    Each step has its own counter-based stream (splitmix64, keyed by :func:`negatives_key` of
    (seed, epoch, t)): the first m draws are the sources, the next m the destinations, each vertex
    ``⌊r · N / 2^64⌋`` of a 64-bit draw r — uniform over V to within N / 2^64 of each probability (no
    rejection). So any rank draws any step's pairs alone, and the same ones, however the steps are
    grouped into calls. The sources are then sorted (a counting sort, O(m + N), or a sort when m is
    small next to N); the destinations keep their draw order. The pairs are i.i.d., so their order
    carries no information and the multiset is distributed exactly as m uniform draws — but sorted
    sources make the decoder's gathers of source rows sequential and its backward scatter-add into
    source rows faster than with sources in random order.

    Why not a seeded ``numpy.random.default_rng`` per step: its set-up and separate draw, count and
    repeat passes cost tens of µs a step even for a few thousand pairs. One compiled call draws all steps
    of an epoch (:func:`hpcdgnn.nn.kernels.draw_negatives`, from :data:`~hpcdgnn.nn.kernels.MIN_PAIRS`
    pairs in all); numpy computes the same bits where it does not apply (tested).
    """
    if not 1 <= num_vertices < 1 << 32:
        raise ValueError(f"draw_negatives: N = {num_vertices} vertices; the generator takes 1 <= N < 2^32")
    keys = [negatives_key(seed, epoch, t) for t in steps]
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    offsets = [0] * len(counts) if offsets is None else offsets
    compiled = kernels.draw_negatives(keys, counts, num_vertices, offsets)
    if compiled is not None:
        return compiled, bounds
    out = np.empty((2, int(bounds[-1])), dtype=np.int64)
    for key, m, a, off in zip(keys, counts, bounds[:-1], offsets, strict=True):
        v = _draws(key, 2 * m, num_vertices)
        pairs = out[:, a : a + m]
        if 8 * m < num_vertices:  # few pairs: a sort, not an O(N) count (the same sorted sources)
            pairs[0] = np.sort(v[:m])
        else:
            pairs[0] = np.repeat(np.arange(num_vertices, dtype=np.int64), np.bincount(v[:m], minlength=num_vertices))
        pairs[1] = v[m:]
        pairs += off
    return out, bounds


def draw_negatives(seed: int, epoch: int, t: int, num_vertices: int, m: int) -> np.ndarray:
    """Step t's m negative pairs of ``epoch``, (2, m) ordered by source (:func:`draw_negatives_steps`)."""
    return draw_negatives_steps(seed, epoch, [t], num_vertices, [m])[0]


#: bytes of the decoder's destination rows (their projection pv and its gradient) that one bucket of
#: :func:`pairs_by_step` covers by default on the CPU: 512 KiB, a quarter of a 2 MiB L2 (the fastest of the
#: sizes tried, :func:`pairs_by_step`). A constant, not the
#: machine's cache: the pairs' order sets the rounding of each row's gradient sum, which should not
#: depend on the node a run lands on. ``HPCDGNN_BUCKET_BYTES`` overrides it (0: no buckets).
#: A decoder on a GPU takes no buckets by default: the order serves a CPU core's cache, and building it
#: is host time the GPU waits for.
BUCKET_BYTES = 1 << 19


def bucket_bytes() -> int | None:
    """``HPCDGNN_BUCKET_BYTES`` (a byte count >= 0; 0 keeps the pairs in their drawn order), else None: the
    default of the decoder's device (:data:`BUCKET_BYTES` on the CPU, 0 elsewhere)."""
    value = os.environ.get("HPCDGNN_BUCKET_BYTES")
    if value is None:
        return None
    if not value.strip().isdigit():
        from hpcdgnn.errors import ConfigError

        raise ConfigError(f"environment HPCDGNN_BUCKET_BYTES={value!r}: a byte count >= 0 (0: no buckets)")
    return int(value)


def decoder_bucket_bytes(device: torch.device, size: int | None) -> int:
    """The bytes of destination rows a bucket covers for a decoder on ``device``: ``size`` (:func:`bucket_bytes`),
    else the device's default (:data:`BUCKET_BYTES` on the CPU, 0 — no buckets — elsewhere). The ranks compare
    it, not the variable (:func:`hpcdgnn.train.setup._check_device_agreement`): the default spelled out is the
    default."""
    if size is None:
        return BUCKET_BYTES if device.type == "cpu" else 0
    return size


def concat_steps(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step (src, dst) int64 pairs as one (src, dst, bounds) triple: step j's pairs at
    ``bounds[j]:bounds[j+1]``."""
    bounds = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([p[0].shape[0] for p in parts], out=bounds[1:])
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), bounds
    return (np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False),
            np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False), bounds)


def bucket_shift(rows: int, vertices: int) -> int:
    """log2 of the bucket size: ``rows`` rounded down to a power of two (the kernel shifts, not divides);
    one bucket (a size of at least ``vertices``) where ``rows >= vertices``."""
    if rows >= vertices:
        return max(1, vertices - 1).bit_length()
    return max(1, rows).bit_length() - 1


def _last_bucket(shift: int, vertices: int) -> int:
    """The highest destination bucket of ``vertices`` vertices in buckets of 2^shift (0: one bucket)."""
    return (max(vertices, 1) - 1) >> shift


def _bucket_order(dst: np.ndarray, bounds: np.ndarray, firsts, shift: int, vertices: int) -> np.ndarray:
    """The permutation that stably sorts each step's pairs (``bounds``) by destination bucket
    ``(dst - first) >> shift``, a vertex out of range in the nearest bucket."""
    top = _last_bucket(shift, vertices)
    return np.concatenate([a + np.argsort(np.clip((dst[a:b] - f) >> shift, 0, top), kind="stable")
                           for a, b, f in zip(bounds[:-1], bounds[1:], firsts, strict=True)])


def in_buckets(pairs: tuple[np.ndarray, np.ndarray, np.ndarray], firsts: list[int] | np.ndarray, shift: int,
               vertices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps' pairs (src, dst, bounds) with each step's pairs stably sorted by destination bucket
    (:func:`pairs_by_step`'s order; the positives it takes are in it: sorted once, when kept)."""
    src, dst, bounds = pairs
    if _last_bucket(shift, vertices) == 0 or src.shape[0] == 0:
        return pairs
    order = _bucket_order(dst, bounds, firsts, shift, vertices)
    return src[order], dst[order], bounds


def pair_index_dtype(rows: int) -> np.dtype:
    """The index type of pairs over ``rows`` rows (:func:`pairs_by_step`'s ``index_dtype``): int32 where every
    row fits, else int64. Half the index bytes, so the pairs of an epoch take 12 bytes each with their label,
    not 20, at about the same time."""
    return index_dtype(rows - 1)


def pairs_by_step(pos: tuple[np.ndarray, np.ndarray, np.ndarray], neg: tuple[np.ndarray, np.ndarray, np.ndarray],
                  firsts: list[int] | np.ndarray, shift: int, vertices: int,
                  index_dtype: np.dtype = np.int64) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """(src, dst, label) of the pairs of several steps, given as the steps' positives (in bucket order,
    :func:`in_buckets`) and negatives, each (src, dst, bounds) (:func:`concat_steps`; step j's vertices are
    ``dst - firsts[j]``, below ``vertices``): step by step, and within a step by destination bucket of
    2^shift vertices (:func:`bucket_shift`), each bucket's positives (label 1), then its negatives
    (label 0), each in their given order (a stable sort; a vertex out of range counts in the nearest
    bucket). One bucket: the step's positives then its negatives. src and dst come as ``index_dtype``
    (:func:`pair_index_dtype`), whichever path writes them.

    Why step by step: a step's pairs read only that step's rows, so the decoder's loops find a step's
    rows in cache for its negatives after its positives, where all positives, then all negatives,
    would stream every row through the cache twice.

    Why buckets: the decoder's training pass (:func:`hpcdgnn.nn.kernels.edge_bce_train`) reads a random
    destination row and adds into its gradient for every pair; over a whole step those rows span
    2 x N x hidden values, and most accesses would miss the cache. A bucket's rows (:data:`BUCKET_BYTES`)
    stay in it while the sources stream by (they stay ascending within a bucket where they were: the
    positives' CSR order, the negatives' sorted sources). The order is a function of each step's
    pairs alone, so every rank scoring a step orders its pairs alike, and a subset of them (pairs scored
    by source) in their relative order. One compiled pass (:func:`hpcdgnn.nn.kernels.pairs_by_bucket`)
    writes the result, copying the positives' runs and scattering the negatives (scattering both, with
    labels, costs more); else numpy's stable sort, the same order. One bucket keeps numpy's concatenation,
    faster than the compiled pass there.
    """
    firsts = np.asarray(firsts, dtype=np.int64)
    top = _last_bucket(shift, vertices)
    if top > 0:
        compiled = kernels.pairs_by_bucket(pos, neg, firsts, shift, top + 1, index_dtype)
        if compiled is not None:
            src, dst, label = compiled
            return src, dst, torch.from_numpy(label)
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


#: metric sums per split: loss, pairs, correct, then the positive and the negative AUC histograms
_WIDTH = 3 + 2 * AUC_BINS

#: Edges per chunk of the fused decoder on the CPU: (chunk, hidden) temporaries stay in a core's L2 cache.
_EDGE_CHUNK = 8192
#: Bytes of one (chunk, hidden) temporary of the fused decoder on a GPU. There a chunk costs some 20 kernel
#: launches whatever its size, so the GPU's chunks are as large as this memory bound allows.
_EDGE_CHUNK_DEVICE_BYTES = 64 << 20


def _edge_chunk(pu: torch.Tensor) -> int:
    """Pairs per chunk of :class:`_EdgeMLP` for projections ``pu`` (rows, hidden): L2-sized on the CPU,
    :data:`_EDGE_CHUNK_DEVICE_BYTES` per temporary elsewhere."""
    if pu.device.type == "cpu":
        return _EDGE_CHUNK
    return max(_EDGE_CHUNK, _EDGE_CHUNK_DEVICE_BYTES // max(1, pu.shape[1] * pu.element_size()))


def _project(z: torch.Tensor, w1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The first layer's halves applied once per row of ``z`` (N, F): (pu, pv) = (z W1[:, :F]^T, z W1[:, F:]^T);
    compiled where autograd does not follow and the widths allow (:func:`hpcdgnn.nn.kernels.projection_available`)."""
    if not (torch.is_grad_enabled() and (z.requires_grad or w1.requires_grad)) and kernels.projection_available(z, w1):
        return kernels.project(z, w1)
    f = z.shape[1]
    return z @ w1[:, :f].t(), z @ w1[:, f:].t()


class _EdgeMLP(torch.autograd.Function):
    """``w2 · relu(pu[src] + pv[dst] + b1) + b2`` per edge, in cache-sized chunks, with its adjoint.

    Unfused, each of the ~10 elementwise steps of forward and backward streams an
    (E, hidden) tensor through memory — for millions of edges per snapshot that
    traffic dominates the epoch and is what two ranks on one node fight over.
    Here the per-edge hidden layer lives only inside a chunk and is recomputed
    in the backward pass; only (N, hidden) gradients and (E,) logits are stored.
    On the CPU the forward is one compiled loop over the pairs (:mod:`hpcdgnn.nn.kernels`),
    and training there takes :class:`_EdgeBCE`, which fuses the backward into it;
    the chunked torch passes remain for GPUs, small calls and where numba is missing.
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
        ctx.save_for_backward(pu, pv, b1, w2, src, dst)
        if kernels.available(pu, pv, b1, w2, b2, pairs=src.shape[0]):
            return kernels.edge_mlp_forward(pu, pv, b1, w2, b2, src, dst)
        E, chunk = src.shape[0], _edge_chunk(pu)
        out = pu.new_empty(E)
        for s in range(0, E, chunk):
            e = min(E, s + chunk)
            torch.mv(_EdgeMLP._hidden(pu, pv, b1, src[s:e], dst[s:e]), w2, out=out[s:e])
        out += b2
        return out

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        pu, pv, b1, w2, src, dst = ctx.saved_tensors
        dpu, dpv = torch.zeros_like(pu), torch.zeros_like(pv)
        db1, dw2 = torch.zeros_like(b1), torch.zeros_like(w2)
        E, chunk = src.shape[0], _edge_chunk(pu)
        for s in range(0, E, chunk):
            e = min(E, s + chunk)
            h = _EdgeMLP._hidden(pu, pv, b1, src[s:e], dst[s:e])  # recomputed, not stored
            gc = g[s:e]
            dw2 += h.t() @ gc
            dh = torch.outer(gc, w2)
            dh.mul_(h > 0)
            db1 += dh.sum(0)
            dpu.index_add_(0, src[s:e], dh)
            dpv.index_add_(0, dst[s:e], dh)
        return dpu, dpv, db1, dw2, g.sum().reshape(1), None, None


class _EdgeBCE(torch.autograd.Function):
    """The training loss of the decoder on the CPU: ``Σ_e BCE(logit_e, label_e)`` from the embeddings ``z``,
    forward and backward in one compiled pass over the pairs (:func:`hpcdgnn.nn.kernels.edge_bce_train`).

    The loss is a scalar, so its gradient is that of the sum times the one upstream number: the pass
    computes the sum's gradients during the forward, and the backward folds the upstream factor into
    the (h, F) weights of the projection's backward GEMMs, not into (n, h) rows. Returns the loss, the
    logits and the projections (pu, pv) (none of the last three differentiable: the metrics read the
    logits, and evaluation pairs scored on the same rows reuse the projections). The same function as
    :class:`_EdgeMLP` plus ``binary_cross_entropy_with_logits``, to rounding (the pass sums the loss too).
    """

    @staticmethod
    def forward(ctx, z, w1, b1, w2, b2, src, dst, label):  # noqa: D102
        ctx.compiled = kernels.projection_available(z, w1)  # then its backward is one compiled pass too
        pu, pv = _project(z, w1)  # no autograd inside a Function's forward: compiled where ctx.compiled
        loss, logits, dpu, dpv, db1, dw2, db2 = kernels.edge_bce_train(pu, pv, b1, w2[0], b2, src, dst, label,
                                                                       column_sum=not ctx.compiled)
        ctx.save_for_backward(z, w1, dpu, dpv)
        ctx.small = (db1, dw2, db2)
        ctx.mark_non_differentiable(logits, pu, pv)
        # the logits and projections get no gradient: without this autograd would hand the backward zero
        # tensors for them, two (rows, h) fills and one (pairs,) per call
        ctx.set_materialize_grads(False)
        return loss, logits, pu, pv

    @staticmethod
    def backward(ctx, g, *_):  # noqa: D102
        z, w1, dpu, dpv = ctx.saved_tensors
        db1, dw2, db2 = ctx.small
        if ctx.compiled:
            dz, dw1, db1 = kernels.project_backward(z, w1, dpu, dpv, g, ctx.needs_input_grad[0])
        else:
            f = z.shape[1]
            wu, wv = w1[:, :f] * g, w1[:, f:] * g
            dz = (dpu @ wu).addmm_(dpv, wv) if ctx.needs_input_grad[0] else None  # in place: addmm would copy
            dw1 = torch.cat([dpu.t() @ z, dpv.t() @ z], 1) * g
            db1 = db1 * g
        return dz, dw1, db1, (dw2 * g).reshape(1, -1), db2 * g, None, None, None


class EdgeDecoder(nn.Module):
    """MLP on the concatenated endpoint embeddings: ``w2 · relu(W1 [z_u ; z_v] + b1) + b2``.

    ``W1 [z_u ; z_v] = W1[:, :F] z_u + W1[:, F:] z_v``, so the first layer is
    applied once per vertex, giving (N, h) projections ``pu``, ``pv``; the
    per-edge rest runs fused in chunks (:class:`_EdgeMLP`), and on the CPU the
    training loss in one compiled pass (:meth:`train_loss`). The function equals
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

    def project(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The first layer's halves applied once per row of ``z`` (N, F): (pu, pv), each (N, h)."""
        return _project(z, self.lin1.weight)

    def score(self, pu: torch.Tensor, pv: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Logits (E,) of edges ``src[i] -> dst[i]`` from the projections of :meth:`project`."""
        return _EdgeMLP.apply(pu, pv, self.lin1.bias, self.lin2.weight[0], self.lin2.bias, src, dst)

    def forward(self, z: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Logits (E,) of edges ``src[i] -> dst[i]`` from embeddings ``z`` (N, F)."""
        return self.score(*self.project(z), src, dst)

    def train_loss(self, z: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                   label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(loss, logits, (pu, pv)): the summed BCE of the edges' logits against ``label`` (with autograd), the
        logits and the projections of :meth:`project` (both detached) — one compiled pass where the kernels
        apply (:class:`_EdgeBCE`), else :meth:`forward`'s path and torch's loss."""
        params = (self.lin1.weight, self.lin1.bias, self.lin2.weight, self.lin2.bias)
        if kernels.available(z, *params, label, pairs=src.shape[0]):
            loss, logits, pu, pv = _EdgeBCE.apply(z, *params, src, dst, label)
            return loss, logits, (pu, pv)
        pu, pv = self.project(z)
        logits = self.score(pu, pv, src, dst)
        loss = F.binary_cross_entropy_with_logits(logits, label, reduction="sum")
        return loss, logits.detach(), (pu.detach(), pv.detach())


class LinkPrediction(Task):
    """Link-prediction head and targets.

    Stats layout per split s (train, val, test): [loss_sum, pairs, correct,
    pos_hist (AUC_BINS), neg_hist (AUC_BINS)].
    """

    metric = "auc"
    in_place = True
    buckets_pairs = True

    def __init__(self, cfg: TaskConfig, manifest: Manifest, emb_features: int, seed: int) -> None:
        super().__init__()
        self.cfg, self.manifest, self.seed = cfg, manifest, seed
        self.decoder = EdgeDecoder(emb_features, cfg.decoder_hidden)
        # step t uses Z_t to predict the edges of t+1, so there are T-1 steps
        self.ranges = split_steps(manifest.num_snapshots - 1, cfg.split)
        self.targets: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: per (steps, positions, rows): each step's positive pairs, constant over epochs
        self._fixed: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = {}
        #: in place (:class:`RowShard`): where the rows are; whether pairs are scored on their source row's
        #: rank (else on their step's, t mod P); the steps I score pairs of
        self.shard: RowShard | None = None
        self.by_source = True
        self._steps: list[int] = []
        #: one rank holding every row of its steps (:meth:`_alone_block`): the rows' order into keys t * N + v
        #: (an empty tensor where they are in it already); None otherwise
        self._alone_order: torch.Tensor | None = None
        #: mini-batch samples: the epoch whose draws are kept, each step's negatives of it (by t) and each
        #: sample's selected pairs (by (t, batch))
        self._epoch_negatives: tuple[int, dict] = (-1, {})
        #: the pairs' destination buckets (:meth:`_bucket_shift`), read once: every epoch orders alike
        self._bucket_bytes = bucket_bytes()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Reset the decoder MLP."""
        self.decoder.reset_parameters()

    @staticmethod
    def train_horizon(cfg: TaskConfig, manifest: Manifest) -> int:
        """Last training step: Z_t of t = split end - 1 scores the edges of t + 1."""
        return split_steps(manifest.num_snapshots - 1, cfg.split)[0].stop - 1

    @staticmethod
    def steps(cfg: TaskConfig, manifest: Manifest) -> list[range]:
        """Steps t = 0..T-2 (Z_t scores the edges of t + 1), split in time order."""
        return split_steps(manifest.num_snapshots - 1, cfg.split)

    @staticmethod
    def footprint(cfg: TaskConfig, manifest: Manifest, hidden: int) -> tuple[int, int]:
        """The decoder's first layer, 2·hidden × decoder_hidden weights; one step's scored pairs, the largest
        snapshot's edges × (1 + negatives), as two int64 indices each (they exist at once in every path)."""
        pairs = 16 * max(manifest.snapshot_edges) * (1 + cfg.negatives) if manifest.snapshot_edges else 0
        return 2 * hidden * cfg.decoder_hidden, pairs

    @staticmethod
    def snapshot_work(cfg: TaskConfig, manifest: Manifest) -> np.ndarray:
        """Per-pair work of scoring each snapshot: hidden x (5 when training: forward, the fused decoder's
        recomputation and backward; 1 when evaluating), plus a few per-pair passes (sampling, loss,
        histogram) that every split pays. The factors were fitted to per-rank compute times of
        perf/bench_epoch.py's graph at P = 2 for the chunked torch passes; the compiled loop
        (:mod:`hpcdgnn.nn.kernels`) trains a pair for 2.7 evaluations, fitted the same way.
        """
        T = manifest.num_snapshots
        train = split_steps(T - 1, cfg.split)[0]
        factor = 2.7 if kernels.expected() else 5.0
        work = np.zeros(T)
        for t in range(T - 1):
            pairs = manifest.snapshot_edges[t + 1] * (1 + cfg.negatives)
            work[t] = pairs * (cfg.decoder_hidden * (factor if t in train else 1.0) + 4.0)
        return work

    def _split_of(self, step: int) -> int:
        for i, r in enumerate(self.ranges):
            if step in r:
                return i
        return -1

    def setup(self, reader, snapshots: list[int] | RowShard, comm) -> None:
        """Read the raw edges of t+1 for every scored snapshot t < T-1 (may lie in the next shard);
        in place (a :class:`RowShard`), see :meth:`_setup_in_place`."""
        if isinstance(snapshots, RowShard):
            self._setup_in_place(reader, snapshots, comm)
            return
        for t in snapshots:
            if t + 1 < self.manifest.num_snapshots:
                src, dst = reader.read_target(t + 1)
                self.targets[t] = (torch.from_numpy(src), torch.from_numpy(dst))

    def global_train_count(self) -> float:
        """Positive plus negative training pairs over all train steps (from the manifest)."""
        edges = self.manifest.snapshot_edges
        return float(sum(edges[t + 1] for t in self.ranges[0]) * (1 + self.cfg.negatives))

    def _bucket_shift(self, vertices: int) -> int:
        """log2 of the destination rows a bucket of :func:`pairs_by_step` covers over ``vertices``:
        :func:`bucket_bytes` of the decoder's rows (pv and its gradient), by default :data:`BUCKET_BYTES` where
        the decoder runs on the CPU and none elsewhere; 0 bytes: one bucket."""
        weight = self.decoder.lin1.weight
        size = decoder_bucket_bytes(weight.device, self._bucket_bytes)
        row = 2 * self.cfg.decoder_hidden * weight.element_size()
        return bucket_shift(size // row if size else vertices, vertices)

    def _draw(self, t: int, epoch: int, m: int) -> np.ndarray:
        """The (2, m) negative pairs of step t in ``epoch`` (:func:`draw_negatives`)."""
        return draw_negatives(self.seed, epoch, t, self.manifest.num_vertices, m)

    def _negative_count(self, t: int) -> int:
        """Step t's negatives an epoch: ``task.negatives`` per positive."""
        return self.targets[t][0].shape[0] * self.cfg.negatives

    def _step_negatives(self, t: int, epoch: int, offset: int = 0) -> np.ndarray:
        """Step t's negatives of ``epoch`` (:meth:`_negative_count`, :meth:`_draw`) as a (2, m) array of rows
        ``offset + v``."""
        pairs = self._draw(t, epoch, self._negative_count(t))
        pairs += offset
        return pairs

    def _negatives_joined(self, steps: list[int], epoch: int, offsets: list[int]):
        """The negatives of several steps (:meth:`_step_negatives`) as one (src, dst, bounds) triple
        (:func:`concat_steps`), drawn in one call (:func:`draw_negatives_joined`): step j's rows ``offsets[j] + v``."""
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
        """(src, dst, label) of every scored pair of ``steps``, step by step (:func:`pairs_by_step`): step t's
        positives, then its negatives, in destination buckets (:meth:`_bucket_shift`); step t's vertices are
        rows ``where[t] * n + v`` of the stacked embeddings.

        Positives are the same every epoch and kept; the negatives of step t are drawn from
        the stream of (seed, epoch, t) (:func:`draw_negatives_steps`) — the same pairs whichever rank scores t.
        """
        firsts, shift = [where[t] * n for t in steps], self._bucket_shift(n)
        key = (tuple(steps), tuple(where[t] for t in steps), n, shift)  # the shift follows the decoder's device
        fixed = self._fixed.get(key)
        if fixed is None:
            if len(self._fixed) >= 64:  # mini-batch strategies vary the steps: keep the cache bounded
                self._fixed.clear()
            fixed = self._fixed[key] = in_buckets(
                concat_steps([self._positives(t, f) for t, f in zip(steps, firsts, strict=True)]), firsts, shift, n)
        negatives = self._negatives_joined(steps, epoch, firsts)
        src, dst, label = pairs_by_step(fixed, negatives, firsts, shift, n,
                                        pair_index_dtype(max(firsts, default=0) + n))
        return torch.from_numpy(src), torch.from_numpy(dst), label

    def _setup_in_place(self, reader, shard: RowShard, comm) -> None:
        """Rows where they live: choose where each pair is scored, keep its positives.

        Two placements, both exact:

        * **by source**: on the rank that owns the pair's source row, fetching the destination rows
          it lacks — little traffic when a step's pairs touch few of its rows;
        * **by step**: all pairs of step t on rank t mod P, fetching the rows of either end it lacks —
          at most the move of whole snapshots to their scoring rank that it replaces (only rows some
          pair reads), and less than *by source* when pairs are dense (then every rank would fetch
          nearly all other rows of every step, P - 1 copies where the snapshot move makes one).

        The rows each would fetch are counted exactly for epoch 1's pairs on every rank, summed over
        ranks once here (an epoch-independent choice: a resumed run makes the same one), and the
        smaller wins; rank 0 logs both counts.
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
            counts.append(self._fetched(self._pairs_in_place(1)).shape[0])
        by_source, by_step = comm.allreduce_array(counts, tag="setup")
        self.by_source = bool(by_source < by_step)
        self._steps = [t for t in sorted(self.targets) if self.by_source or t % shard.num_ranks == shard.rank]
        self._fixed.clear()
        if shard.rank == 0:
            from hpcdgnn.metrics.log import get_logger

            get_logger().info(f"link prediction in place: pairs scored by {'source row' if self.by_source else 'step'} "
                              f"(rows fetched per epoch: {int(by_source)} by source row, {int(by_step)} by step)")

    def _pairs_in_place(self, epoch: int) -> dict[int, tuple[np.ndarray, np.ndarray, torch.Tensor]]:
        """``{split: (src keys, dst keys, labels)}`` of the pairs I score (keys ``t * N + v``), step by step
        (:func:`pairs_by_step`): the positives, then the negatives of each step drawn as on one rank
        (:meth:`_draw`, the same stream), all of my steps' or — by source — those whose source row is mine.
        """
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
        """On one rank (nothing to fetch) with every row of steps 0..S-1: those rows as the (S, N, F) block
        the snapshot strategy hands (:class:`~hpcdgnn.tasks.base.Embeddings`), in key order ``t * N + v``
        (a view, or one gather where the strategy keeps another order, e.g. chunk's); else None.

        Why: scored in place, P = 1 would pay for machinery it does not need — a key lookup per pair end,
        pairs in source-row order, every row projected with autograd, the evaluation pairs drawn before
        the backward. The block path scores the same pairs, step by
        step, as for ``snapshot``.
        """
        order, N = self._alone_order, self.manifest.num_vertices
        if order is None:  # several ranks, or rows missing
            return None
        rows = emb.rows if not order.numel() else emb.rows.index_select(0, order.to(emb.rows.device))
        S = rows.shape[0] // N
        return Embeddings.of_block(phase_view(rows, (S, N, rows.shape[-1])), list(range(S)))

    def _fetched(self, pairs: dict) -> np.ndarray:
        """The keys of the rows ``pairs`` read that are not mine, ascending, once each."""
        ends = [p[1] for p in pairs.values()] + ([] if self.by_source else [p[0] for p in pairs.values()])
        keys = np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64)
        return np.unique(keys[~self.shard.mine(keys)])

    def _forward_in_place(self, emb: ShardedEmbeddings, epoch: int) -> TaskBatch:
        """My pairs (:meth:`_setup_in_place`) scored on my rows plus the rows I lack, fetched once for all
        splits (:meth:`ShardedEmbeddings.fetch`), then as :meth:`forward`."""
        shard, rows = self.shard, emb.rows
        pairs = self._pairs_in_place(epoch)
        need = self._fetched(pairs)
        fetched = emb.fetch(need)  # collective: every rank, once, even with nothing to fetch
        loss_sum = (sum(p.sum() for p in self.decoder.parameters()) + rows.sum() + fetched.sum()) * 0.0
        if not pairs:
            return TaskBatch(loss_sum, np.zeros(3 * _WIDTH))
        z = torch.cat([rows, fetched]) if need.size else rows
        R = rows.shape[0]

        def index(keys: np.ndarray) -> torch.Tensor:  # row of each key in [my rows ; fetched]
            at = shard.local_of(keys)
            if need.size:
                lacking = ~shard.mine(keys)
                at[lacking] = R + np.searchsorted(need, keys[lacking])
            return torch.from_numpy(at)

        scored = {s: (index(src), index(dst), label) for s, (src, dst, label) in pairs.items()}
        return self._score(dict.fromkeys(scored, z), scored, loss_sum, rows.device, rows.dtype)

    # -- mini-batch samples (the sequences strategy) --------------------------------------------
    def _sample_pairs(self, t: int, batch: np.ndarray, epoch: int) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
        """(src, dst, labels) of step t's pairs whose source is in ``batch``: its positives, then
        its negatives of ``epoch`` (:meth:`_draw`: the whole step's stream, as on one rank, kept for the
        epoch's other samples) — so the samples of all node batches score each pair of t exactly once.
        """
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
        return np.union1d(batch, self._sample_pairs(t, batch, epoch)[1])

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
        """Decoder logits, the training loss sum and every split's metric sums for ``{split: (src, dst,
        label)}`` or ``{split: a function returning them}`` (rows of that split's embeddings ``inputs[split]``;
        label 1 marks the positive pairs, wherever they are). The training split is scored now; the others
        when the metric sums are read (:class:`TaskBatch`'s ``later``: after the backward pass), on a
        projection of their rows without autograd — the training pass's own where they read the same rows."""
        now = {s: p for s, p in pairs.items() if s == 0}
        rest = {s: p for s, p in pairs.items() if s != 0}
        stats = np.zeros(3 * _WIDTH)
        projected: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        loss_sum = self._sums(inputs, now, loss_sum, device, dtype, stats, projected)
        later = (lambda into: self._sums(inputs, rest, None, device, dtype, into, projected)) if rest else None
        return TaskBatch(loss_sum, stats, later)

    def _sums(self, inputs: dict, pairs: dict, loss_sum: torch.Tensor | None, device, dtype, stats: np.ndarray,
              projected: dict) -> torch.Tensor | None:
        """:meth:`_score` for the splits of ``pairs``: their metric sums added into ``stats`` (in place: the
        histograms are 3 x 2^15 float64, and fresh ones per call cost more than the small splits' scoring),
        and the loss sum with the training split's added. ``projected``: the decoder projections made so far,
        by the identity of the rows they project (kept beside them)."""
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
            else:  # val/test (or no training): metrics only
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
            if kernels.available(logit, pairs=logit.shape[0], same_bits=True):  # one compiled pass, the same bins
                correct = kernels.score_stats(logit.detach(), host_label.numpy(), AUC_BINS, AUC_RANGE,
                                              into=(pos, neg))[0]
            else:  # where the logits are (a GPU; or no numba): the same bins
                correct = score_stats_torch(logit, label > 0, AUC_BINS, AUC_RANGE, pos, neg)
            stats[base + 2] += correct
        return loss_sum

    def forward(self, emb: dict[int, torch.Tensor] | ShardedEmbeddings | SampleEmbeddings, epoch: int) -> TaskBatch:
        """BCE loss sum over the train steps held here; histogram/accuracy sums for all splits.

        Snapshot-parallel (as PiPAD batches snapshots): the decoder's first layer is one GEMM
        over the rows of every scored step — the layout's block itself when it hands one
        (:class:`~hpcdgnn.tasks.base.Embeddings`), else the stacked Z_t — then one fused
        decoder pass per split over all its pairs, and one loss.
        """
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
            # scoring the training split reaches what produced the block (its rows are a view of it, or the
            # head the layout joined it from, phase_join: the join itself is local): a sum over every row,
            # whose backward is a block-sized add into the gradient, only where no training step is scored here
            reach = block.sum() if 0 not in by_split else 0.0
        else:
            scored = [t for _, steps in sorted(by_split.items()) for t in steps]
            where = {t: k for k, t in enumerate(scored)}
            n = emb[scored[0]].shape[0] if scored else 0
            rows = torch.cat([emb[t] for t in scored]) if scored else None
            reach = sum(z.sum() for z in emb.values())
        # a zero that depends on every embedding (Task.forward's contract: all collectives get a backward)
        # and on the decoder, so every parameter has a gradient on every rank
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
        """The rows each split's pairs read, and the position of their first row per split.

        Why not one projection of every row: the rows of the steps after the last training step get no
        gradient, yet a projection with autograd would run its backward over them too — two block-sized
        GEMMs, and the fused decoder's zero-filled (rows, hidden) gradients — on the rank that holds the
        evaluation snapshots, work the block plan's estimate does not count. So when
        the training steps' rows come first (positions in time order: every layout here), the evaluation
        steps read the rows after them, detached, projected only when they are scored (after the
        backward, :class:`TaskBatch`).
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
        """Mean loss, accuracy and AUC per split."""
        width = _WIDTH
        out: dict[str, float] = {}
        for s, name in enumerate(SPLITS):
            b = s * width
            pairs = stats[b + 1]
            out[f"{name}_loss"] = float(stats[b] / pairs) if pairs else float("nan")
            out[f"{name}_acc"] = float(stats[b + 2] / pairs) if pairs else float("nan")
            out[f"{name}_auc"] = auc_from_histograms(stats[b + 3 : b + 3 + AUC_BINS],
                                                     stats[b + 3 + AUC_BINS : b + width])
        return out
