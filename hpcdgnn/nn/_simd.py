"""Whole-row vector operations for the numba kernels (:mod:`hpcdgnn.nn._numba_kernels`, imported only there):
LLVM IR written with llvmlite as numba intrinsics, for rows of one cache line — 64 bytes, :data:`LINE`
(16 float32 or 8 float64 values; on a CPU with AVX-512 one register, with AVX2 two).

Why not numba loops over the row: a row's width is known only at run time, so LLVM vectorises such a loop
for any width — a main loop of 4 x 16 lanes, an epilogue of 8, scalar remainders, alias checks between the
arrays — and a row of 16 float32 runs through the epilogue and the checks every pair. With the width fixed
by a compile-time constant instead, LLVM unrolls the row into scalars and vectorises less. Here a row is one
``<W x float>`` value: one load, one add, one store.

Floating point: the operations are those of the loops they replace, in the stated order (a row's dot product
summed by halves), without fast-math flags.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

#: bytes of a row these operations take: one cache line
LINE = 64

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def lanes(dtype) -> int:
    """Values of the numba type ``dtype`` in one :data:`LINE`."""
    return LINE // (dtype.bitwidth // 8)


class _Rows:
    """Pointers to whole rows of the intrinsics' array arguments, as ``<W x dtype>*`` (W = :func:`lanes`), and the
    vector operations the intrinsics share."""

    def __init__(self, context, builder, sig, args, vector_of: int = 0):
        self.context, self.builder, self.sig, self.args = context, builder, sig, args
        dtype = sig.args[vector_of].dtype  # the rows' dtype: that of argument ``vector_of``
        self.width = lanes(dtype)
        self.vec = ir.VectorType(context.get_data_type(dtype), self.width)
        self._arrays = {}

    def array(self, k: int):
        if k not in self._arrays:
            self._arrays[k] = self.context.make_array(self.sig.args[k])(self.context, self.builder, self.args[k])
        return self._arrays[k]

    def index(self, k: int):
        """Argument k (an integer) as an intp."""
        return self.context.cast(self.builder, self.args[k], self.sig.args[k], types.intp)

    def item(self, k: int, e):
        """``array_k[e]`` (1-D, e an intp), as an intp where the array holds integers (indices)."""
        aty = self.sig.args[k]
        value = self.builder.load(cgutils.get_item_pointer(self.context, self.builder, aty, self.array(k), [e]))
        return self.context.cast(self.builder, value, aty.dtype, types.intp) if isinstance(aty.dtype, types.Integer) \
            else value

    def entries(self, crow: int, i):
        """A loop over the entries e of CSR row i (argument ``crow``: the row pointers): ``with r.entries(0, i) as (e,
        _):``."""
        lo, hi = self.item(crow, i), self.item(crow, self.builder.add(i, _I64(1)))
        return cgutils.for_range_slice(self.builder, lo, hi, _I64(1))

    def at(self, k: int, *index):
        """``&array_k[index]`` as a vector pointer (index: intp values)."""
        ary, aty = self.array(k), self.sig.args[k]
        b = self.builder
        ptr = cgutils.get_item_pointer2(self.context, b, ary.data, cgutils.unpack_tuple(b, ary.shape),
                                        cgutils.unpack_tuple(b, ary.strides), aty.layout, list(index))
        return self.builder.bitcast(ptr, self.vec.as_pointer())

    def row(self, k: int, i) -> ir.Value:
        """``&array_k[i, 0]`` (2-D) or ``&array_k[0]`` (1-D, ``i`` None)."""
        return self.at(k, i, _I64(0)) if i is not None else self.at(k, _I64(0))

    def load(self, ptr):
        return self.builder.load(ptr, align=1)

    def store(self, value, ptr):
        self.builder.store(value, ptr, align=1)

    def add_into(self, ptr, value):
        """``*ptr += value``."""
        self.store(self.builder.fadd(self.load(ptr), value), ptr)

    def splat(self, scalar):
        """A vector of ``scalar`` in every lane."""
        b = self.builder
        v = b.insert_element(ir.Constant(self.vec, ir.Undefined), scalar, _I32(0))
        return b.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, self.width), [0] * self.width))

    def lane(self, v, m: int):
        """Lane m of v in every lane."""
        return self.builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, self.width), [m] * self.width))

    def hsum(self, v):
        """The sum of v's lanes, by halves: (v[:W/2] + v[W/2:]), then the same of that, to one lane."""
        b, n = self.builder, self.width
        while n > 1:
            half = n // 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, half), list(range(half))))
            hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, half), list(range(half, n))))
            v, n = b.fadd(lo, hi), half
        return b.extract_element(v, _I32(0))

    def hidden(self, pu: int, s: int, pv: int, d: int, b1: int):
        """``pu[s] + pv[d] + b1`` (rows of arguments pu and pv at the indices of arguments s and d), in that order."""
        b = self.builder
        return b.fadd(b.fadd(self.load(self.row(pu, self.index(s))), self.load(self.row(pv, self.index(d)))),
                      self.load(self.row(b1, None)))


def _float_rows(*arrays) -> bool:
    """Arrays of one float dtype, C-contiguous (a row is one run of memory)."""
    return all(isinstance(a, types.Array) and a.layout == "C" and isinstance(a.dtype, types.Float)
               and a.dtype == arrays[0].dtype for a in arrays)


def _csr_args(crow, col, val, x, out, i, j) -> bool:
    """A CSR matrix (integer ``crow``, ``col``; ``val`` of x's dtype), rows x and out, integer row i and column j."""
    return (_float_rows(x, out) and isinstance(val, types.Array) and val.dtype == x.dtype
            and isinstance(crow, types.Array) and isinstance(crow.dtype, types.Integer)
            and isinstance(col, types.Array) and isinstance(col.dtype, types.Integer)
            and isinstance(i, types.Integer) and isinstance(j, types.Integer))


@intrinsic
def prefetch_row(typingctx, rows, i):  # pragma: no cover - compiled
    """Ask the CPU to fetch the cache line holding ``rows[i, 0]`` of the 2-D array ``rows`` (``llvm.prefetch``:
    read, keep in every level). A hint: it never faults, and compiles to nothing where the CPU has no such
    instruction. A row wider than a line gets its first line only (the hardware's adjacent-line prefetch
    may bring the next): a loop over the lines, or a branch around the call, costs more than the
    prefetch saves. The name has the typed-pointer mangling (``p0i8``); LLVM with opaque pointers upgrades it.

    Why: the decoder's pairs read rows at random (a bucket of destination rows, sources rising through each
    step's rows), so most first reads of a step's rows miss every cache, and the few operations of a pair
    leave the core too little work to keep many misses in flight. Asked 32 pairs ahead (the kernels'
    ``_AHEAD``), the rows arrive while the pairs before them are scored (``perf/bench_kernels.py``)."""
    if not (isinstance(rows, types.Array) and rows.ndim == 2 and isinstance(i, types.Integer)):
        return None  # a typing error at compile time, not a prefetch of something else

    def codegen(context, builder, sig, args):
        r = _Rows(context, builder, sig, args)
        byte = builder.bitcast(r.row(0, r.index(1)), ir.IntType(8).as_pointer())
        signature = ir.FunctionType(ir.VoidType(), [byte.type, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, signature, "llvm.prefetch.p0i8")
        builder.call(fn, [byte, _I32(0), _I32(3), _I32(1)])  # read, keep in every level, data
        return context.get_dummy_value()

    return types.void(rows, i), codegen


@intrinsic
def pair_logit(typingctx, pu, s, pv, d, b1, w2):  # pragma: no cover - compiled
    """``w2 · relu(pu[s] + pv[d] + b1)`` for rows of :func:`lanes` values: the ReLU as ``0 if 0 > h else h``
    (numba's ``max(h, 0)``: a NaN passes), the dot product's lanes summed by halves."""
    if not (_float_rows(pu, pv, b1, w2) and isinstance(s, types.Integer) and isinstance(d, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        r = _Rows(context, builder, sig, args)
        h = r.hidden(0, 1, 2, 3, 4)
        zero = ir.Constant(r.vec, None)
        relu = builder.select(builder.fcmp_ordered(">", zero, h), zero, h)
        return r.hsum(builder.fmul(relu, r.load(r.row(5, None))))

    return pu.dtype(pu, s, pv, d, b1, w2), codegen


@intrinsic
def pair_backward(typingctx, pu, s, pv, d, b1, w2, g, dpu, dpv, part):  # pragma: no cover - compiled
    """The backward of :func:`pair_logit` for an upstream gradient g: with m = g where h = pu[s] + pv[d] + b1
    is > 0, else 0: ``part += m h`` (the dot's weight gradient), ``dpu[s] += m w2``, ``dpv[d] += m w2``."""
    if not (_float_rows(pu, pv, b1, w2, dpu, dpv, part) and isinstance(g, types.Float)):
        return None

    def codegen(context, builder, sig, args):
        r = _Rows(context, builder, sig, args)
        h = r.hidden(0, 1, 2, 3, 4)
        zero = ir.Constant(r.vec, None)
        gv = r.splat(context.cast(builder, args[6], sig.args[6], sig.args[0].dtype))
        m = builder.select(builder.fcmp_ordered(">", h, zero), gv, zero)
        dh = builder.fmul(m, r.load(r.row(5, None)))
        r.add_into(r.row(9, None), builder.fmul(m, h))
        r.add_into(r.row(7, r.index(1)), dh)
        r.add_into(r.row(8, r.index(3)), dh)
        return context.get_dummy_value()

    return types.void(pu, s, pv, d, b1, w2, g, dpu, dpv, part), codegen


@intrinsic
def project_row(typingctx, z, i, wu, wv, pu, pv):  # pragma: no cover - compiled
    """``pu[i] = z[i] @ wu``, ``pv[i] = z[i] @ wv``: z (n, F), wu and wv (F, W), rows of W = :func:`lanes`;
    each output row summed over k = 0 .. F-1 in that order."""
    if not (_float_rows(z, wu, wv, pu, pv) and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        r = _Rows(context, builder, sig, args)
        i = r.index(1)
        acc_u = cgutils.alloca_once_value(builder, ir.Constant(r.vec, None))
        acc_v = cgutils.alloca_once_value(builder, ir.Constant(r.vec, None))
        features = builder.extract_value(r.array(0).shape, 1)
        scalar_ptr = ir.PointerType(context.get_data_type(sig.args[0].dtype))
        with cgutils.for_range(builder, features) as loop:
            zk = r.splat(builder.load(builder.bitcast(r.at(0, i, loop.index), scalar_ptr)))
            for w, acc in ((2, acc_u), (3, acc_v)):
                builder.store(builder.fadd(builder.load(acc), builder.fmul(zk, r.load(r.row(w, loop.index)))), acc)
        r.store(builder.load(acc_u), r.row(4, i))
        r.store(builder.load(acc_v), r.row(5, i))
        return context.get_dummy_value()

    return types.void(z, i, wu, wv, pu, pv), codegen


@intrinsic
def project_back_rows(typingctx, z, dpu, dpv, wu, wv, dz, r0, r1, dwu, dwv, db1):  # pragma: no cover - compiled
    """The backward of :func:`project_row` over rows r0 .. r1-1, where F = W = :func:`lanes`: ``dz[i] =
    Σ_m dpu[i, m] wu[m] + Σ_m dpv[i, m] wv[m]`` (wu, wv (W, F): the projection's weights as stored, not
    transposed), and into (W, F) ``dwu[m] += Σ_i dpu[i, m] z[i]`` and ``dwv`` alike, ``db1 += Σ_i dpu[i]``:
    the sums over the rows kept in registers, added to memory once at the end (the caller bounds the rows
    of a call, so that these float sums stay short)."""
    if not (_float_rows(z, dpu, dpv, wu, wv, dz, dwu, dwv, db1) and isinstance(r0, types.Integer)
            and isinstance(r1, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        r = _Rows(context, builder, sig, args)
        w = r.width
        weights_u = [r.load(r.row(3, _I64(m))) for m in range(w)]
        weights_v = [r.load(r.row(4, _I64(m))) for m in range(w)]
        sums = [cgutils.alloca_once_value(builder, ir.Constant(r.vec, None)) for _ in range(2 * w + 1)]
        with cgutils.for_range_slice(builder, r.index(6), r.index(7), _I64(1)) as (i, _):
            zi, du, dv = r.load(r.row(0, i)), r.load(r.row(1, i)), r.load(r.row(2, i))
            out = ir.Constant(r.vec, None)
            for grad, weights, base in ((du, weights_u, 0), (dv, weights_v, w)):
                for m in range(w):
                    gm = r.lane(grad, m)
                    out = builder.fadd(out, builder.fmul(gm, weights[m]))
                    acc = sums[base + m]
                    builder.store(builder.fadd(builder.load(acc), builder.fmul(gm, zi)), acc)
            builder.store(builder.fadd(builder.load(sums[2 * w]), du), sums[2 * w])
            r.store(out, r.row(5, i))
        for m in range(w):
            r.add_into(r.row(8, _I64(m)), builder.load(sums[m]))
            r.add_into(r.row(9, _I64(m)), builder.load(sums[w + m]))
        r.add_into(r.row(10, None), builder.load(sums[2 * w]))
        return context.get_dummy_value()

    return types.void(z, dpu, dpv, wu, wv, dz, r0, r1, dwu, dwv, db1), codegen


@intrinsic
def csr_row(typingctx, crow, col, val, x, out, i, j):  # pragma: no cover - compiled
    """``out[i, j:j+W] = Σ_e val[e] x[col[e], j:j+W]`` over the entries e of CSR row i in order, from 0 (a
    multiply, then an add: MKL's CSR product's arithmetic, bit for bit, :func:`hpcdgnn.nn.conv.gcn.csr_mm`)."""
    if not _csr_args(crow, col, val, x, out, i, j):
        return None

    def codegen(context, builder, sig, args):
        r = _Rows(context, builder, sig, args, vector_of=3)
        i, j = r.index(5), r.index(6)

        acc = cgutils.alloca_once_value(builder, ir.Constant(r.vec, None))
        with r.entries(0, i) as (e, _):
            term = builder.fmul(r.splat(r.item(2, e)), r.load(r.at(3, r.item(1, e), j)))
            builder.store(builder.fadd(builder.load(acc), term), acc)
        r.store(builder.load(acc), r.at(4, i, j))
        return context.get_dummy_value()

    return types.void(crow, col, val, x, out, i, j), codegen


@intrinsic
def csr_row_scatter(typingctx, crow, col, val, x, out, i, j):  # pragma: no cover - compiled
    """``out[col[e], j:j+W] += val[e] x[i, j:j+W]`` for the entries e of CSR row i in order: row i's share of
    Aᵀ x without Aᵀ (:func:`hpcdgnn.nn.kernels.csr_mm_t`). Rows i taken in ascending order, each output row
    gets its terms in the order of Aᵀ's entries (A's rows ascending), each a multiply then an add, onto
    zeros: :func:`csr_row` over Aᵀ, bit for bit."""
    if not _csr_args(crow, col, val, x, out, i, j):
        return None

    def codegen(context, builder, sig, args):
        r = _Rows(context, builder, sig, args, vector_of=3)
        i, j = r.index(5), r.index(6)

        xi = r.load(r.at(3, i, j))
        with r.entries(0, i) as (e, _):
            r.add_into(r.at(4, r.item(1, e), j), builder.fmul(r.splat(r.item(2, e)), xi))
        return context.get_dummy_value()

    return types.void(crow, col, val, x, out, i, j), codegen
