"""The numba-compiled loops behind :mod:`hpcdgnn.ops.kernels` (imported only there, and only when used)."""

from __future__ import annotations

import numba  # after hpcdgnn.ops.kernels._cache_of_this_cpu, which sets what numba's import reads
import numpy as np

from hpcdgnn.ops._simd import LINE, pair_backward, pair_logit, prefetch_row

#: reassociation and contraction only — no ``nnan`` / ``ninf``: a NaN loss must still surface
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
#: numpy's error model: Python's zero-divisor test stops LLVM vectorising; divisors 1 + t, 2 + t, 2 + m are > 0
_DIVIDE = "numpy"


#: pairs ahead of the one being scored whose rows the decoder prefetches
_AHEAD = 32


@numba.njit(cache=True, nogil=True, inline="always")
def _fetch_ahead(a, b, src, dst, e):  # pragma: no cover - compiled
    """Prefetch rows ``a[src[f]]``, ``b[dst[f]]`` of pair f = e + :data:`_AHEAD`, clamped, not branched."""
    f = min(e + _AHEAD, src.shape[0] - 1)
    prefetch_row(a, src[f])
    prefetch_row(b, dst[f])


#: pairs per chunk of :func:`edge_bce_train`: the chunk's rows are still in L1/L2 for its backward loop
_BCE_CHUNK = 256


@numba.njit(cache=True, fastmath=_FASTMATH, nogil=True, inline="always")
def _exp_reduced(a):  # pragma: no cover - compiled
    """exp(a) for float32 a in [−87, 0] as (e^r − 1, k): Cody–Waite reduction and a degree-7 polynomial.

    Arithmetic LLVM vectorises (a libm call does not, no SVML); e^r − 1 keeps expm1's precision near 0."""
    k = np.floor(a * np.float32(1.4426950408889634) + np.float32(0.5))
    r = a - k * np.float32(0.693359375) - k * np.float32(-2.12194440e-4)
    q = np.float32(1.0 / 5040)
    q = q * r + np.float32(1.0 / 720)
    q = q * r + np.float32(1.0 / 120)
    q = q * r + np.float32(1.0 / 24)
    q = q * r + np.float32(1.0 / 6)
    q = q * r + np.float32(0.5)
    q = q * r + np.float32(1.0)
    return q * r, k


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True)
def _exp_parts(x, c, p, bits):  # pragma: no cover - compiled
    """exp(−c|x[i]|) = 2^k (1 + p[i]) for float32 x, 2^k = ``bits.view(float32)[i]``, clamped at exp(−87)."""
    for i in range(x.shape[0]):
        em, k = _exp_reduced(max(-c * abs(x[i]), np.float32(-87.0)))
        p[i] = em
        bits[i] = (np.int32(k) + np.int32(127)) << 23


@numba.njit(cache=True, fastmath=_FASTMATH, nogil=True, inline="always")
def _sigmoid_of(x, t, one):  # pragma: no cover - compiled
    """σ(x) from t = exp(−|x|) ≤ 1 (no overflow): 1 / (1 + t) for x ≥ 0, t / (1 + t) below."""
    s = one / (one + t)
    return s if x >= 0 else t * s


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True, error_model=_DIVIDE)
def _sigmoid_vec(x, out, p, bits):  # pragma: no cover - compiled
    """out[i] = σ(x[i]) (float32; out may be x or p) via :func:`_exp_parts`: within 1.2e-7 of torch's."""
    one = x.dtype.type(1)
    scale = bits.view(np.float32)
    _exp_parts(x, one, p, bits)
    for i in range(x.shape[0]):
        out[i] = _sigmoid_of(x[i], (p[i] + one) * scale[i], one)


@numba.njit(cache=True, fastmath=_FASTMATH, nogil=True, inline="always")
def _log1p_unit(t):  # pragma: no cover - compiled
    """log(1 + t) for float32 t in [0, 1] as 2 atanh(t / (2 + t)), odd series to s^15 (vectorisable, exact near 0)."""
    s = t / (np.float32(2.0) + t)
    z = s * s
    q = np.float32(1.0 / 15)
    q = q * z + np.float32(1.0 / 13)
    q = q * z + np.float32(1.0 / 11)
    q = q * z + np.float32(1.0 / 9)
    q = q * z + np.float32(1.0 / 7)
    q = q * z + np.float32(1.0 / 5)
    q = q * z + np.float32(1.0 / 3)
    q = q * z + np.float32(1.0)
    return np.float32(2.0) * s * q


@numba.njit(cache=True, fastmath=_FASTMATH, nogil=True, inline="always")
def _bce_margin(x, y, zero, one):  # pragma: no cover - compiled
    """max(x, 0) − x y by selects for labels 0/1, so the log(1 + t) term is not lost to cancellation.

    Not (1 − y) max(x, 0) + y max(−x, 0): fastmath folds that back into the cancelling form."""
    u = max(x, zero)
    if y == one:
        return u - x
    if y == zero:
        return u
    return u - x * y


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True, error_model=_DIVIDE)
def _bce_parts(x, y, g, bits, vector_exp):  # pragma: no cover - compiled
    """g[i] = σ(x[i]) − y[i]; returns Σ_i BCE(x[i], y[i]) in float64, BCE = max(x, 0) − x y + log(1 + exp(−|x|))."""
    one = g.dtype.type(1)
    zero = g.dtype.type(0)
    total = 0.0
    if vector_exp:
        scale = bits.view(np.float32)
        _exp_parts(x, one, g, bits)
        for i in range(x.shape[0]):
            t = (g[i] + one) * scale[i]
            xi = x[i]
            g[i] = _sigmoid_of(xi, t, one) - y[i]
            total += np.float64(_bce_margin(xi, y[i], zero, one) + _log1p_unit(t))
    else:
        for i in range(x.shape[0]):
            xi = x[i]
            t = np.exp(-abs(xi))
            g[i] = _sigmoid_of(xi, t, one) - y[i]
            total += _bce_margin(xi, y[i], zero, one) + np.log1p(t)
    return total


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True, error_model=_DIVIDE)
def _tanh_vec(x, out, p, bits):  # pragma: no cover - compiled
    """out[i] = tanh(x[i]) (float32; out may be x) as −m / (2 + m), m = expm1(−2|x|): no cancellation near 0."""
    one = x.dtype.type(1)
    two = x.dtype.type(2)
    scale = bits.view(np.float32)
    _exp_parts(x, two, p, bits)
    for i in range(x.shape[0]):
        m = scale[i] * p[i] + (scale[i] - one)
        v = -m / (two + m)
        out[i] = v if x[i] >= 0 else -v


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True, error_model=_DIVIDE)
def edge_bce_train(pu, pv, b1, w2, b2, src, dst, label, out, dpu, dpv, dw2, vector_exp):  # pragma: no cover - compiled
    """Forward and backward of L = Σ_e BCE(x_e, label_e), x_e = w2 · relu(pu[src[e]] + pv[dst[e]] + b1) + b2.

    Writes the logits into out, adds dL/dpu, dL/dpv, dL/dw2 into dpu, dpv, dw2 and returns (L, dL/db2), both
    summed in float64. Why chunks of three loops (logits, g, backward): the chunk's rows are still in cache
    for its backward. pu and pv stay two arrays (random destinations would double the lines pulled in)."""
    H = pu.shape[1]
    zero = pu.dtype.type(0)
    acc = np.zeros(H, dtype=np.float64)
    part = np.zeros(H, dtype=pu.dtype)
    dh = np.empty(H, dtype=pu.dtype)
    g = np.empty(_BCE_CHUNK, dtype=pu.dtype)
    bits = np.empty(_BCE_CHUNK, dtype=np.int32)
    gsum = 0.0
    loss = 0.0
    E = src.shape[0]
    line = H == LINE // pu.itemsize
    for c0 in range(0, E, _BCE_CHUNK):
        c1 = min(E, c0 + _BCE_CHUNK)
        for e in range(c0, c1):
            _fetch_ahead(pu, pv, src, dst, e)
            if line:
                out[e] = pair_logit(pu, src[e], pv, dst[e], b1, w2) + b2
                continue
            a, b = pu[src[e]], pv[dst[e]]
            x = zero
            for k in range(H):
                x += w2[k] * max(a[k] + b[k] + b1[k], zero)
            out[e] = x + b2
        loss += _bce_parts(out[c0:c1], label[c0:c1], g[: c1 - c0], bits, vector_exp)
        for e in range(c0, c1):
            # prefetch a pair ahead here: in the loop above, a chunk's four lines a pair outgrow L1 first
            _fetch_ahead(dpu, dpv, src, dst, e)
            s, d, ge = src[e], dst[e], g[e - c0]
            gsum += ge
            if line:
                pair_backward(pu, s, pv, d, b1, w2, ge, dpu, dpv, part)
                continue
            a, b, da, db = pu[s], pv[d], dpu[s], dpv[d]
            for k in range(H):
                h = a[k] + b[k] + b1[k]
                m = ge if h > zero else zero
                dh[k] = m * w2[k]
                part[k] += m * h
            # two loops: with both stores in one loop LLVM does not vectorise (alias check)
            for k in range(H):
                da[k] += dh[k]
            for k in range(H):
                db[k] += dh[k]
        for k in range(H):  # float64 across chunks; within one, float32 (no conversion per pair)
            acc[k] += part[k]
            part[k] = zero
    for k in range(H):
        dw2[k] += acc[k]
    return loss, gsum


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True, error_model=_DIVIDE)
def lstm_forward(gates, w_hh, hs, cs, hin, cin, tc, mask, vector_exp):  # pragma: no cover - compiled
    """The LSTM recurrence over feature-major gates (T, 4H, B): adds ``w_hh @ hin[t]`` and activates in place.

    Writes hs / cs (T+1, H, B), hin / cin (T, H, B, reset by ``mask``) and tanh(c_t) to tc; ``vector_exp``
    (float32) activates through :func:`_sigmoid_vec` / :func:`_tanh_vec`, which LLVM vectorises."""
    T, G, B = gates.shape
    H = G // 4
    one = w_hh.dtype.type(1)
    masked = mask.shape[0] == T
    p = np.empty(G * B, dtype=gates.dtype)
    bits = np.empty(G * B, dtype=np.int32)
    for t in range(T):
        for j in range(H):
            for b in range(B):
                m = mask[t, 0, b] if masked else one
                hin[t, j, b] = hs[t, j, b] * m
                cin[t, j, b] = cs[t, j, b] * m
        for g in range(G):
            for j in range(H):
                w = w_hh[g, j]
                for b in range(B):
                    gates[t, g, b] += w * hin[t, j, b]
        if vector_exp:
            flat = gates[t].reshape(G * B)
            _sigmoid_vec(flat[: 2 * H * B], flat[: 2 * H * B], p, bits)
            _tanh_vec(flat[2 * H * B : 3 * H * B], flat[2 * H * B : 3 * H * B], p, bits)
            _sigmoid_vec(flat[3 * H * B :], flat[3 * H * B :], p, bits)
            for j in range(H):
                for b in range(B):
                    cs[t + 1, j, b] = gates[t, H + j, b] * cin[t, j, b] + gates[t, j, b] * gates[t, 2 * H + j, b]
            _tanh_vec(cs[t + 1].reshape(H * B), tc[t].reshape(H * B), p, bits)
            for j in range(H):
                for b in range(B):
                    hs[t + 1, j, b] = gates[t, 3 * H + j, b] * tc[t, j, b]
            continue
        for j in range(H):
            for b in range(B):
                i = one / (one + np.exp(-gates[t, j, b]))
                f = one / (one + np.exp(-gates[t, H + j, b]))
                gg = np.tanh(gates[t, 2 * H + j, b])
                o = one / (one + np.exp(-gates[t, 3 * H + j, b]))
                gates[t, j, b], gates[t, H + j, b], gates[t, 2 * H + j, b], gates[t, 3 * H + j, b] = i, f, gg, o
                c = f * cin[t, j, b] + i * gg
                cs[t + 1, j, b] = c
                tcv = np.tanh(c)
                tc[t, j, b] = tcv
                hs[t + 1, j, b] = o * tcv


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True)
def lstm_backward(gates, cin, tc, w_hh, mask, dy, dh, dc, dgates):  # pragma: no cover - compiled
    """Backpropagation through :func:`lstm_forward`: writes dgates (T, 4H, B); dh, dc end as (h0, c0)'s gradients."""
    T, G, B = gates.shape
    H = G // 4
    one = w_hh.dtype.type(1)
    masked = mask.shape[0] == T
    for t in range(T - 1, -1, -1):
        for j in range(H):
            for b in range(B):
                i, f = gates[t, j, b], gates[t, H + j, b]
                gg, o = gates[t, 2 * H + j, b], gates[t, 3 * H + j, b]
                tcv = tc[t, j, b]
                dhv = dh[j, b] + dy[t, j, b]
                dcv = dc[j, b] + dhv * o * (one - tcv * tcv)
                dgates[t, j, b] = dcv * gg * i * (one - i)
                dgates[t, H + j, b] = dcv * cin[t, j, b] * f * (one - f)
                dgates[t, 2 * H + j, b] = dcv * i * (one - gg * gg)
                dgates[t, 3 * H + j, b] = dhv * tcv * o * (one - o)
                dc[j, b] = dcv * f
        for j in range(H):
            for b in range(B):
                dh[j, b] = 0
        for g in range(G):
            for j in range(H):
                w = w_hh[g, j]
                for b in range(B):
                    dh[j, b] += w * dgates[t, g, b]
        if masked:
            for j in range(H):
                for b in range(B):
                    dh[j, b] *= mask[t, 0, b]
                    dc[j, b] *= mask[t, 0, b]
