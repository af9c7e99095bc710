"""The numba-compiled loops behind :mod:`hpcdgnn.nn.kernels` (imported only there, and only when used:
importing numba costs a quarter of a second)."""

from __future__ import annotations

import numba
import numpy as np

#: reassociation and contraction only — no ``nnan`` / ``ninf``: a NaN loss must still surface
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True)
def edge_mlp_forward(pu, pv, b1, w2, b2, src, dst, out):  # pragma: no cover - compiled
    """out[e] = w2 · relu(pu[src[e]] + pv[dst[e]] + b1) + b2."""
    zero = b1[0] * 0
    for e in range(src.shape[0]):
        s, d = src[e], dst[e]
        acc = zero
        for k in range(pu.shape[1]):
            acc += w2[k] * max(pu[s, k] + pv[d, k] + b1[k], zero)
        out[e] = acc + b2


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True)
def edge_mlp_backward(pu, pv, b1, w2, src, dst, g, dpu, dpv, dw2):  # pragma: no cover - compiled
    """Adds the pairs' gradients into dpu, dpv (scatter by src, dst) and dw2, recomputing the hidden layer."""
    zero = b1[0] * 0
    acc = np.zeros(pu.shape[1], dtype=pu.dtype)
    for e in range(src.shape[0]):
        s, d, ge = src[e], dst[e], g[e]
        for k in range(pu.shape[1]):
            h = pu[s, k] + pv[d, k] + b1[k]
            m = ge if h > zero else zero  # dL/dh: the ReLU passes g where the unit was active
            dh = m * w2[k]
            dpu[s, k] += dh
            dpv[d, k] += dh
            acc[k] += m * h
    dw2 += acc


@numba.njit(cache=True, boundscheck=False, nogil=True)  # no fastmath: the bins must be numpy's, bit for bit
def score_stats(logits, npos, bins, half_range, pos_hist, neg_hist):  # pragma: no cover - compiled
    """Counts the correct logits (the first npos positive: > 0; the rest: <= 0) and adds each logit's AUC
    bin, ``clip(int64((x + R) / (2R) * bins), 0, bins - 1)`` in float64 as numpy computes it, to pos_hist
    or neg_hist. Returns the correct count."""
    correct = 0
    width = 2.0 * half_range
    for e in range(logits.shape[0]):
        x = np.float64(logits[e])
        if e < npos:
            correct += x > 0
        else:
            correct += x <= 0
        v = (x + half_range) / width * bins
        if v != v or v >= 9.223372036854775808e18:  # NaN, inf, >= 2^63: numpy's astype(int64) gives INT64_MIN, clipped to bin 0
            b = 0
        elif v < 1.0:  # truncation toward zero, then the clip at 0
            b = 0
        else:
            b = min(np.int64(v), bins - 1)
        if e < npos:
            pos_hist[b] += 1
        else:
            neg_hist[b] += 1
    return correct
