"""Whole-row vector operations for the decoder's numba loop, as llvmlite intrinsics on one 64-byte cache line.

Why: with a run-time width LLVM vectorises a row loop for any width (epilogues, alias checks every pair);
here a row is one ``<W x float>`` value. The operations and their order are the replaced loops', without
fast-math flags (a row's dot product summed by halves)."""

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
    """Pointers to whole rows of the intrinsics' array arguments as ``<W x dtype>*``, and their shared vector ops."""

    def __init__(self, context, builder, sig, args):
        self.context, self.builder, self.sig, self.args = context, builder, sig, args
        dtype = sig.args[0].dtype
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
    """Prefetch the cache line holding ``rows[i, 0]`` (``llvm.prefetch``: read, keep in every level; never faults).

    Why: the decoder reads rows at random and does too little per pair to keep misses in flight; asked
    ``_AHEAD`` pairs ahead, the rows arrive in time. Only the first line of a wider row (a loop costs more)."""
    if not (isinstance(rows, types.Array) and rows.ndim == 2 and isinstance(i, types.Integer)):
        return None  # a typing error at compile time, not a prefetch of something else

    def codegen(context, builder, sig, args):
        r = _Rows(context, builder, sig, args)
        byte = builder.bitcast(r.row(0, r.index(1)), ir.IntType(8).as_pointer())
        signature = ir.FunctionType(ir.VoidType(), [byte.type, _I32, _I32, _I32])
        fn = cgutils.get_or_insert_function(builder.module, signature, "llvm.prefetch.p0i8")
        builder.call(fn, [byte, _I32(0), _I32(3), _I32(1)])
        return context.get_dummy_value()

    return types.void(rows, i), codegen


@intrinsic
def pair_logit(typingctx, pu, s, pv, d, b1, w2):  # pragma: no cover - compiled
    """``w2 · relu(pu[s] + pv[d] + b1)`` for one-line rows; ReLU as ``0 if 0 > h else h`` (a NaN passes)."""
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
    """:func:`pair_logit`'s backward, m = g where h > 0 else 0, ``part += m h``, ``dpu[s]``, ``dpv[d] += m w2``."""
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
