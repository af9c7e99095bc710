"""Whole-row vector operations for the decoder's numba loop (``_numba_kernels.edge_bce_train``, imported only
there): LLVM IR written with llvmlite as numba intrinsics, for rows of one cache line — 64 bytes, :data:`LINE`
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

    def __init__(self, context, builder, sig, args):
        self.context, self.builder, self.sig, self.args = context, builder, sig, args
        dtype = sig.args[0].dtype  # the rows' dtype: that of the first argument
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
