"""The numba-compiled loops behind :mod:`hpcdgnn.nn.kernels` (imported only there, and only when used:
importing numba costs a quarter of a second)."""

from __future__ import annotations

import numba  # after hpcdgnn.nn.kernels._cache_of_this_cpu, which sets what numba's import reads
import numpy as np

from hpcdgnn.nn._simd import (
    LINE,
    csr_row,
    csr_row_scatter,
    pair_backward,
    pair_logit,
    prefetch_row,
    project_back_rows,
    project_row,
)

#: reassociation and contraction only — no ``nnan`` / ``ninf``: a NaN loss must still surface
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
#: numpy's error model where a loop divides: under Python's, numba tests every float divisor for zero (to raise
#: ZeroDivisionError), and that branch stops LLVM vectorising the loop (the decoder's sigmoid and loss, and
#: the LSTM's activations, would run one lane at a time). The divisors there are 1 + t, 2 + t (t >= 0) and
#: 2 + m (m > -1): never zero.
_DIVIDE = "numpy"


#: pairs ahead of the one being scored whose rows the decoder's loops ask the CPU to fetch (:func:`_fetch_ahead`)
_AHEAD = 32


@numba.njit(cache=True, nogil=True, inline="always")
def _fetch_ahead(a, b, src, dst, e):  # pragma: no cover - compiled
    """Ask for the rows ``a[src[f]]`` and ``b[dst[f]]`` of the pair f = e + :data:`_AHEAD`, clamped to the last
    pair, not branched (:func:`hpcdgnn.nn._simd.prefetch_row`: why, and what it saved)."""
    f = min(e + _AHEAD, src.shape[0] - 1)
    prefetch_row(a, src[f])
    prefetch_row(b, dst[f])


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True)
def edge_mlp_forward(pu, pv, b1, w2, b2, src, dst, out):  # pragma: no cover - compiled
    """out[e] = w2 · relu(pu[src[e]] + pv[dst[e]] + b1) + b2 (the rows of pair e + :data:`_AHEAD` fetched meanwhile)."""
    zero = pu.dtype.type(0)
    E = src.shape[0]
    line = pu.shape[1] == LINE // pu.itemsize  # a row is one cache line: whole-row operations (_simd)
    for e in range(E):
        _fetch_ahead(pu, pv, src, dst, e)
        s, d = src[e], dst[e]
        if line:
            out[e] = pair_logit(pu, s, pv, d, b1, w2) + b2
            continue
        acc = zero
        for k in range(pu.shape[1]):
            acc += w2[k] * max(pu[s, k] + pv[d, k] + b1[k], zero)
        out[e] = acc + b2


#: pairs per chunk of :func:`edge_bce_train`: the chunk's rows are still in L1/L2 for its backward loop
_BCE_CHUNK = 256


@numba.njit(cache=True, fastmath=_FASTMATH, nogil=True, inline="always")
def _exp_reduced(a):  # pragma: no cover - compiled
    """exp(a) for float32 a in [−87, 0] as (e^r − 1, k), exp(a) = 2^k e^r: Cody–Waite reduction a = k ln2 + r,
    |r| <= ln2 / 2, and a degree-7 polynomial — arithmetic LLVM vectorises, where a libm call per element
    does not vectorise (no SVML here). e^r − 1 is returned without the 1, so that expm1(a) = 2^k (e^r − 1)
    + (2^k − 1) keeps its relative precision near a = 0 (:func:`_tanh_vec`)."""
    k = np.floor(a * np.float32(1.4426950408889634) + np.float32(0.5))
    r = a - k * np.float32(0.693359375) - k * np.float32(-2.12194440e-4)  # ln2 in two parts
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
    """exp(−c|x[i]|) = 2^k (1 + p[i]) for float32 x (1-D), 2^k = ``bits.view(float32)[i]`` (``p``, ``bits``:
    scratch at least as long as x): :func:`_exp_reduced` per element, a loop LLVM vectorises, several times
    faster than a libm call per element (no SVML here). Below exp(−87) (float32's smallest normals) the value
    is clamped there."""
    for i in range(x.shape[0]):
        em, k = _exp_reduced(max(-c * abs(x[i]), np.float32(-87.0)))
        p[i] = em
        bits[i] = (np.int32(k) + np.int32(127)) << 23  # 2^k, k in [-126, 0]


@numba.njit(cache=True, fastmath=_FASTMATH, nogil=True, inline="always")
def _sigmoid_of(x, t, one):  # pragma: no cover - compiled
    """σ(x) from t = exp(−|x|) ≤ 1 (no overflow): 1 / (1 + t) for x ≥ 0, t / (1 + t) below."""
    s = one / (one + t)
    return s if x >= 0 else t * s


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True, error_model=_DIVIDE)
def _sigmoid_vec(x, out, p, bits):  # pragma: no cover - compiled
    """out[i] = σ(x[i]) (float32, 1-D; out may be x or p), with t = exp(−|x|) ≤ 1 from :func:`_exp_parts`
    (no overflow): within 1.2e-7 of torch's sigmoid, as the libm path is."""
    one = x.dtype.type(1)
    scale = bits.view(np.float32)
    _exp_parts(x, one, p, bits)
    for i in range(x.shape[0]):
        out[i] = _sigmoid_of(x[i], (p[i] + one) * scale[i], one)


@numba.njit(cache=True, fastmath=_FASTMATH, nogil=True, inline="always")
def _log1p_unit(t):  # pragma: no cover - compiled
    """log(1 + t) for float32 t in [0, 1] as 2 atanh(s), s = t / (2 + t) <= 1/3: the odd series to s^15 (the
    rest < 2e-8 relative), arithmetic LLVM vectorises where a libm call per element does not. s keeps t's
    relative precision near 0, where log(1 + t) would lose it."""
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
    """max(x, 0) − x y, chosen for labels 0 and 1 (max(x, 0), max(−x, 0): exact), so that a loss term's
    log(1 + t) is not lost when it is added (torch's (1 − y) x − log σ(x) loses it so, to 0). Selects, not
    (1 − y) max(x, 0) + y max(−x, 0): fastmath folds that back into max(x, 0) − x y, with the log term
    reassociated into the cancellation — in numba a function compiled apart without fastmath did not stop it."""
    u = max(x, zero)
    if y == one:
        return u - x
    if y == zero:
        return u
    return u - x * y


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True, error_model=_DIVIDE)
def _bce_parts(x, y, g, bits, vector_exp):  # pragma: no cover - compiled
    """g[i] = σ(x[i]) − y[i] and returns Σ_i BCE(x[i], y[i]) in float64, BCE = max(x, 0) − x y + log(1 + t),
    t = exp(−|x|) ≤ 1 (no overflow; torch's ``binary_cross_entropy_with_logits``, to rounding): ``vector_exp``
    (float32) by :func:`_exp_parts` and :func:`_log1p_unit` (``bits``: int32 scratch), else by libm."""
    one = g.dtype.type(1)
    zero = g.dtype.type(0)
    total = 0.0
    if vector_exp:
        scale = bits.view(np.float32)
        _exp_parts(x, one, g, bits)  # g holds e^r − 1 until overwritten below
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
    """out[i] = tanh(x[i]) (float32, 1-D; out may be x): with m = expm1(−2|x|) = 2^k p + (2^k − 1) from
    :func:`_exp_parts`, tanh|x| = −m / (2 + m) — no cancellation near 0, where (1 − e^−2|x|) / (1 + e^−2|x|)
    would lose it."""
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
    """Forward and backward of L = Σ_e BCE(x_e, label_e), x_e = :func:`edge_mlp_forward`'s logit, in one pass:
    the logits into out; dL/dpu, dL/dpv and dL/dw2 added into dpu, dpv and dw2 (float64, from float32 sums
    per chunk); returns (L, dL/db2 = Σ_e g_e), g_e = σ(x_e) − label_e, both summed in float64 (:func:`_bce_parts`:
    the loss here, not in a torch pass over the logits after it). dL/db1 is the column sum of dpu (each pair's
    dL/dh reaches b1 and one source row), not carried here: it would cost more per pair.

    Why chunks of three loops: the logits of a chunk, then their g, then the chunk's backward while its
    rows are still in cache, where separate forward and backward passes stream every row through memory
    twice. pu and pv stay two arrays, not one (n, 2H): the destinations are random rows, and interleaved
    halves double the lines a step's pairs pull into cache. The backward keeps two inner loops: LLVM cannot
    prove that dpu / dpv do not alias pu / pv, and with the scatter-adds in the loop that reads the rows
    nothing is vectorised.
    """
    H = pu.shape[1]
    zero = pu.dtype.type(0)
    acc = np.zeros(H, dtype=np.float64)
    part = np.zeros(H, dtype=pu.dtype)  # a chunk's share of dw2, added to acc per chunk
    dh = np.empty(H, dtype=pu.dtype)
    g = np.empty(_BCE_CHUNK, dtype=pu.dtype)
    bits = np.empty(_BCE_CHUNK, dtype=np.int32)
    gsum = 0.0
    loss = 0.0
    E = src.shape[0]
    line = H == LINE // pu.itemsize  # a row is one cache line: whole-row operations (_simd)
    for c0 in range(0, E, _BCE_CHUNK):
        c1 = min(E, c0 + _BCE_CHUNK)
        for e in range(c0, c1):
            _fetch_ahead(pu, pv, src, dst, e)  # the rows of a pair ahead
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
            # the gradient rows of a pair ahead: here, not in the loop above, where a chunk's four lines a
            # pair outgrow L1 before this loop reaches them
            _fetch_ahead(dpu, dpv, src, dst, e)
            s, d, ge = src[e], dst[e], g[e - c0]
            gsum += ge
            if line:
                pair_backward(pu, s, pv, d, b1, w2, ge, dpu, dpv, part)
                continue
            a, b, da, db = pu[s], pv[d], dpu[s], dpv[d]
            for k in range(H):
                h = a[k] + b[k] + b1[k]
                m = ge if h > zero else zero  # dL/dh: the ReLU passes g where the unit was active
                dh[k] = m * w2[k]
                part[k] += m * h
            # two loops, not one: with one store each LLVM vectorises them behind a runtime alias check;
            # with both stores in one loop it does not
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


@numba.njit(cache=True, boundscheck=False, nogil=True)
def project(z, wu, wv, pu, pv):  # pragma: no cover - compiled
    """The decoder's projections pu = z wu and pv = z wv for z (n, F) and wu, wv (F, W), rows of W values one line
    (:func:`hpcdgnn.nn._simd.project_row`: each row summed over k in order, as torch's GEMM did here, bit for
    bit on this machine). Why not torch's GEMM: at these widths (16 x 16) MKL runs at a fraction of the core's
    rate."""
    for i in range(z.shape[0]):
        project_row(z, i, wu, wv, pu, pv)


#: rows per call of :func:`hpcdgnn.nn._simd.project_back_rows`: its weight-gradient sums run in the rows'
#: dtype over so many rows, then are added in float64 (over a million float32 rows in one sum would lose
#: digits, as :func:`edge_bce_train`'s dw2 would)
_PROJECT_ROWS = 512


@numba.njit(cache=True, boundscheck=False, nogil=True)
def project_backward(z, dpu, dpv, wu, wv, dz, dw, db1):  # pragma: no cover - compiled
    """The backward of :func:`project` with the gradients dpu, dpv (n, W) of its outputs and its weights
    as the first layer stores them, wu, wv (W, F), F = W: dz = dpu wu + dpv wv into dz (n, F); into the
    float64 dw (W, 2F) the weight gradients [dpu^T z, dpv^T z], into db1 (W,) the column sums of dpu
    (the first layer's bias gradient), in one pass over the rows (torch: five GEMM and sum passes)."""
    n, F = z.shape
    W = dpu.shape[1]
    su, sv, sb = np.zeros((W, F), z.dtype), np.zeros((W, F), z.dtype), np.zeros(W, z.dtype)
    for r0 in range(0, n, _PROJECT_ROWS):
        project_back_rows(z, dpu, dpv, wu, wv, dz, r0, min(n, r0 + _PROJECT_ROWS), su, sv, sb)
        for m in range(W):
            for k in range(F):
                dw[m, k] += su[m, k]
                dw[m, F + k] += sv[m, k]
            db1[m] += sb[m]
        su[:] = 0
        sv[:] = 0
        sb[:] = 0


@numba.njit(cache=True, boundscheck=False, nogil=True)
def csr_mm(crow, col, val, x, out):  # pragma: no cover - compiled
    """The product A x into out, for the CSR A (crow, col, val) and x (n, F), F a multiple of a line's values: each
    row's sum over its entries in order (:func:`hpcdgnn.nn._simd.csr_row`), one line of columns at a time."""
    W = LINE // x.itemsize
    for i in range(crow.shape[0] - 1):
        for j in range(0, x.shape[1], W):
            csr_row(crow, col, val, x, out, i, j)


@numba.njit(cache=True, boundscheck=False, nogil=True)
def csr_mm_t(crow, col, val, x, out):  # pragma: no cover - compiled
    """The product Aᵀ x added into out (zeros, (A's columns, F)), for the CSR A (crow, col, val) and x (A's rows,
    F), F a multiple of a line's values: each row of x scattered to the rows its entries name
    (:func:`hpcdgnn.nn._simd.csr_row_scatter`), rows in order — :func:`csr_mm` over Aᵀ, bit for bit."""
    W = LINE // x.itemsize
    for i in range(crow.shape[0] - 1):
        for j in range(0, x.shape[1], W):
            csr_row_scatter(crow, col, val, x, out, i, j)


@numba.njit(cache=True, boundscheck=False, nogil=True)
def _vertex(key, i, n):  # pragma: no cover - compiled
    """Draw i (from 0) of the stream ``key`` over n vertices: splitmix64's output at counter i + 1 times
    n / 2^64, the 64 x 32-bit high product in two halves (exact for n < 2^32)."""
    z = key + np.uint64(i + 1) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    high = (z >> np.uint64(32)) * n + (((z & np.uint64(0xFFFFFFFF)) * n) >> np.uint64(32))
    return np.int64(high >> np.uint64(32))


@numba.njit(cache=True, boundscheck=False, nogil=True)
def draw_negatives(keys, counts, offsets, num_vertices, src, dst, tally):  # pragma: no cover - compiled
    """Per step j (``counts[j]`` pairs, written one step after another): sources = the first m draws of
    stream ``keys[j]``, sorted; destinations = the next m, in draw order; both plus ``offsets[j]`` (the
    step's first row). ``tally`` (num_vertices,) is the counting sort's scratch."""
    n = np.uint64(num_vertices)
    base = 0
    for j in range(keys.shape[0]):
        key, m, off = keys[j], counts[j], offsets[j]
        if 8 * m < num_vertices:  # few pairs: sort them, not an O(N) count (the same sorted sources)
            part = np.empty(m, dtype=np.int64)
            for i in range(m):
                part[i] = _vertex(key, i, n) + off
            part.sort()
            src[base : base + m] = part
        else:
            tally[:] = 0
            for i in range(m):
                tally[_vertex(key, i, n)] += 1
            pos = base
            for v in range(num_vertices):
                for _ in range(tally[v]):
                    src[pos] = v + off
                    pos += 1
        for i in range(m):
            dst[base + i] = _vertex(key, m + i, n) + off
        base += m


@numba.njit(cache=True, boundscheck=False, nogil=True)
def pairs_by_bucket(pos_src, pos_dst, pos_bounds, neg_src, neg_dst, neg_bounds, firsts, shift,
                    out_src, out_dst, out_label, tally_pos, tally_neg):  # pragma: no cover - compiled
    """Step j's positives ``pos_bounds[j]:pos_bounds[j+1]`` (already in bucket order) and its negatives,
    written at ``pos_bounds[j] + neg_bounds[j]`` of the outputs in destination buckets
    ``(dst - firsts[j]) >> shift`` (a shift: a division by a run-time divisor costs more than the rest): each
    bucket's positives (label 1, copied as the run they are), then its negatives (label 0, a stable counting sort).
    The tallies have a slot per bucket; a vertex out of range counts in the nearest bucket. With one bucket: the
    positives, then the negatives."""
    top = tally_pos.shape[0] - 1
    for j in range(pos_bounds.shape[0] - 1):
        pa, pb, na, nb, first = pos_bounds[j], pos_bounds[j + 1], neg_bounds[j], neg_bounds[j + 1], firsts[j]
        tally_pos[:] = 0
        tally_neg[:] = 0
        for e in range(pa, pb):
            tally_pos[min(max((pos_dst[e] - first) >> shift, 0), top)] += 1
        for e in range(na, nb):
            tally_neg[min(max((neg_dst[e] - first) >> shift, 0), top)] += 1
        o, q = pa + na, pa
        for k in range(top + 1):
            for i in range(tally_pos[k]):
                out_src[o + i] = pos_src[q + i]
                out_dst[o + i] = pos_dst[q + i]
                out_label[o + i] = 1.0
            o += tally_pos[k]
            q += tally_pos[k]
            c = tally_neg[k]
            out_label[o : o + c] = 0.0
            tally_neg[k] = o
            o += c
        for e in range(na, nb):
            k = min(max((neg_dst[e] - first) >> shift, 0), top)
            q = tally_neg[k]
            tally_neg[k] = q + 1
            out_src[q] = neg_src[e]
            out_dst[q] = neg_dst[e]


@numba.njit(cache=True, boundscheck=False, nogil=True)  # no fastmath: gcn_norm's sums, bit for bit
def gcn_norm_degrees(indptr, indices, weights, deg):  # pragma: no cover - compiled
    """deg[r] = 1 + Σ w over row r's entries off the diagonal, in entry order (float64, as gcn_norm's
    index_add_); returns how many entries lie off the diagonal (gcn_norm drops input self-loops)."""
    m = 0
    for r in range(indptr.shape[0] - 1):
        d = 1.0
        for e in range(indptr[r], indptr[r + 1]):
            if indices[e] != r:
                d += np.float64(weights[e])
                m += 1
        deg[r] = d
    return m


@numba.njit(cache=True, boundscheck=False, nogil=True)  # no fastmath: the values must be gcn_norm's, bit for bit
def gcn_norm_fill(indptr, indices, weights, dinv, r0, off, crow, col_a, val_a):  # pragma: no cover - compiled
    """One snapshot of :func:`hpcdgnn.nn.conv.gcn.stacked_gcn_norm` from its D^-1/2 (``dinv``, computed by
    torch as gcn_norm computes it: torch's sqrt is not numpy's in the last bit on every CPU): Ã =
    D^-1/2 (A + I) D^-1/2 (IBM Eq. 1) written at entry ``off`` and row ``r0`` of the stacked CSR arrays of
    Ã (``crow``, ``col_a``, ``val_a``), columns shifted by ``r0``. The values are gcn_norm's products in its
    order, (w · dinv_r) · dinv_c and the diagonal dinv_r · dinv_r, rounded once to the dtype. Ãᵀ is not
    built here: the backward scatters over Ã (:func:`csr_mm_t`), and :func:`csr_transpose` builds it where
    something asks for it."""
    n = indptr.shape[0] - 1
    p = off
    for r in range(n):  # Ã: the row's entries left of the diagonal, the diagonal, the rest
        dr = dinv[r]
        placed = False
        for e in range(indptr[r], indptr[r + 1]):
            c = indices[e]
            if c == r:
                continue
            if not placed and c > r:
                col_a[p] = r + r0
                val_a[p] = dr * dr
                p += 1
                placed = True
            col_a[p] = c + r0
            val_a[p] = np.float64(weights[e]) * dr * dinv[c]
            p += 1
        if not placed:
            col_a[p] = r + r0
            val_a[p] = dr * dr
            p += 1
        crow[r0 + r + 1] = p


@numba.njit(cache=True, boundscheck=False, nogil=True)
def graph_diff_merge(indptr, indices, removed, added, n, out_indptr, out_indices):  # pragma: no cover - compiled
    """The next snapshot of a graph difference (:func:`hpcdgnn.data.transfer.decode_block_host`): the previous
    CSR (``indptr``, ``indices``; n rows of n columns) without its entries at the ascending positions
    ``removed``, with the ascending keys ``added`` (row * n + column) merged in, written to ``out_indptr``
    (n + 1) and ``out_indices``. Returns the entries written, or -1 where the diff does not fit the
    previous snapshot (a position or key out of range, or out of order so that some are never reached; more
    entries than ``out_indices`` holds): nothing is written past the arrays. The wire format's positions and
    keys are ascending and unique (the encoder's); this pass relies on it and checks what it reads."""
    cap, nr, na = out_indices.shape[0], removed.shape[0], added.shape[0]
    ri = ai = p = 0
    out_indptr[0] = 0
    for r in range(n):
        base = np.int64(r) * n
        e0, e1 = indptr[r], indptr[r + 1]
        # a row whose every entry is removed (positions ascending and unique: the first and the last match)
        # is skipped whole: snapshots that share few edges have mostly such rows, and the test per entry
        # mispredicts
        if e1 > e0 and ri + (e1 - e0) <= nr and removed[ri] == e0 and removed[ri + (e1 - e0) - 1] == e1 - 1:
            ri += e1 - e0
            e0 = e1
        for e in range(e0, e1):
            if ri < nr and removed[ri] == e:
                ri += 1
                continue
            key = base + indices[e]
            while ai < na and added[ai] < key:
                if p == cap or added[ai] < base:
                    return -1
                out_indices[p] = added[ai] - base
                p += 1
                ai += 1
            if p == cap:
                return -1
            out_indices[p] = indices[e]
            p += 1
        while ai < na and added[ai] < base + n:
            if p == cap or added[ai] < base:
                return -1
            out_indices[p] = added[ai] - base
            p += 1
            ai += 1
        out_indptr[r + 1] = p
    return p if ri == nr and ai == na else -1


@numba.njit(cache=True, boundscheck=False, nogil=True)
def csr_transpose(crow, col, val, crow_t, col_t, val_t):  # pragma: no cover - compiled
    """Aᵀ's CSR arrays (``crow_t`` zeroed, of A's column count + 1) from A's: a counting sort of A's entries by
    column, stable, so each column's entries keep A's row order — (column, row) order, as a key sort gives."""
    for e in range(col.shape[0]):
        crow_t[col[e] + 1] += 1
    for c in range(crow_t.shape[0] - 1):
        crow_t[c + 1] += crow_t[c]
    for r in range(crow.shape[0] - 1):
        for e in range(crow[r], crow[r + 1]):
            c = col[e]
            q = crow_t[c]
            col_t[q] = r
            val_t[q] = val[e]
            crow_t[c] = q + 1
    for c in range(crow_t.shape[0] - 1, 0, -1):  # each pointer was moved to its column's end: shift back
        crow_t[c] = crow_t[c - 1]
    crow_t[0] = 0


#: logits per chunk of :func:`score_stats`: their bins are computed in one loop, then counted
_STATS_CHUNK = 1024
#: interleaved count slots per bin of :func:`score_stats` (a power of two), for calls of at least
#: :data:`_STATS_LANED` logits; fewer take one slot (zeroing and summing the slots has a fixed cost a call)
_STATS_LANES = 4
_STATS_LANED = 1 << 16


@numba.njit(cache=True, boundscheck=False, nogil=True)
def put_rows(dst, index, src):  # pragma: no cover - compiled
    """dst[index[i]] = src[i] for each row i (``index_copy_``)."""
    F = dst.shape[1]
    for i in range(index.shape[0]):
        r = index[i]
        for j in range(F):
            dst[r, j] = src[i, j]


@numba.njit(cache=True, boundscheck=False, nogil=True)  # no fastmath: one add per element, as torch's
def add_rows(dst, index, src):  # pragma: no cover - compiled
    """dst[index[i]] += src[i] for each row i in order (``index_add_``)."""
    F = dst.shape[1]
    for i in range(index.shape[0]):
        r = index[i]
        for j in range(F):
            dst[r, j] += src[i, j]


@numba.njit(cache=True, boundscheck=False, nogil=True)  # no fastmath: the bins must be numpy's, bit for bit
def score_stats(logits, positive, bins, half_range, pos_hist, neg_hist):  # pragma: no cover - compiled
    """Counts the correct logits (positive pairs, ``positive[e] > 0`` — a bool mask or the float labels:
    > 0; the rest: <= 0) and adds each logit's AUC bin, ``clip(int64((x + R) / (2R) * bins), 0, bins - 1)``
    in float64 as numpy computes it, to pos_hist or neg_hist. Returns the correct count.

    Why two loops a chunk and interleaved int64 counts: a model near chance puts most logits in a few
    bins, and one float64 ``hist[b] += 1`` after another into the same bin waits for the last (an add's
    latency plus a store-to-load forward). The bins are computed in a loop LLVM vectorises (the clip done in
    float64 first: the same bin), and consecutive logits count in different slots, summed at the end (counts,
    so the sums are exact)."""
    correct = 0
    width = 2.0 * half_range
    top = np.float64(bins - 1)
    E = logits.shape[0]
    lanes = _STATS_LANES if E >= _STATS_LANED else 1
    counts = np.zeros((2 * bins, lanes), dtype=np.int64)  # row b: positives in bin b; bins + b: negatives
    slot = np.empty(_STATS_CHUNK, dtype=np.int64)
    for c0 in range(0, E, _STATS_CHUNK):
        c1 = min(E, c0 + _STATS_CHUNK)
        for e in range(c0, c1):
            x = np.float64(logits[e])
            p = positive[e] > 0
            correct += (x > 0) if p else (x <= 0)
            v = (x + half_range) / width * bins
            # numpy's astype(int64) then clip: NaN, inf and >= 2^63 give INT64_MIN, so bin 0; below 1, 0
            w = min(v, top) if 1.0 <= v < 9.223372036854775808e18 else 0.0
            slot[e - c0] = np.int64(w) + (0 if p else bins)
        for i in range(c1 - c0):
            counts[slot[i], i & (lanes - 1)] += 1
    for b in range(bins):
        pos_hist[b] += counts[b].sum()
        neg_hist[b] += counts[bins + b].sum()
    return correct


@numba.njit(cache=True, boundscheck=False, fastmath=_FASTMATH, nogil=True, error_model=_DIVIDE)
def lstm_forward(gates, w_hh, hs, cs, hin, cin, tc, mask, vector_exp):  # pragma: no cover - compiled
    """The LSTM recurrence over feature-major gates (T, 4H, B) holding the input's pre-activations: adds
    ``w_hh @ hin[t]``, activates in place (i, f, o: sigmoid; g: tanh), writes the states hs / cs (T+1, H, B)
    from hs[0] / cs[0], the states entering each step hin / cin (T, H, B: hs[t], cs[t] times the reset
    mask (T, 1, B) when it has T rows) and tanh(c_t) to tc (T, H, B).

    ``vector_exp`` (float32): the activations as passes over a step's contiguous gate blocks through
    :func:`_sigmoid_vec` / :func:`_tanh_vec`, which LLVM vectorises, instead of five libm calls per
    (unit, lane), which would be most of the step."""
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
    """Backpropagation through :func:`lstm_forward`'s steps (activated ``gates``): from dh = dL/dh_T, dc =
    dL/dc_T (H, B) and the outputs' gradient dy (T, H, B), writes the pre-activation gradients dgates
    (T, 4H, B) and leaves in dh, dc the gradients of the initial state (h0, c0)."""
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
