"""The integer type of every stored index array (vertex ids, CSR offsets, pairs, halo positions)."""

from __future__ import annotations

import numpy as np

__all__ = ["INT32_MAX", "index_dtype", "intersect_ints", "setdiff_ints", "torch_index_dtype", "union_ints",
           "unique_ints"]

INT32_MAX = int(np.iinfo(np.int32).max)
#: :func:`unique_ints` and the set operations take a table of the values' range up to this many times the
#: values counted (O(n + range), as numpy's ``isin`` does), a sort beyond (O(n log n))
DENSE = 4


def index_dtype(largest: int) -> np.dtype:
    """int32 where ``largest`` fits it, else int64: half the bytes, and MKL's sparse products take int32."""
    return np.dtype(np.int32) if largest <= INT32_MAX else np.dtype(np.int64)


def torch_index_dtype(largest: int):
    """:func:`index_dtype` as a torch dtype."""
    import torch  # here, not at the top: the data layer imports this module without torch

    return getattr(torch, index_dtype(largest).name)


def unique_ints(x) -> np.ndarray:
    """The sorted distinct values of an integer array, as ``np.unique(x)`` returns them: by a table of the values'
    range where it is at most :data:`DENSE` times the array's length (vertex ids of one graph), else by one sort.

    ``np.unique`` without ``return_*`` takes a hash table from numpy 2.3 on; on the id arrays of this code (a TGN
    batch's few thousand vertices, a snapshot's pair keys) that path is many times slower than a sort
    (perf/results/unique: ``python perf/bench_unique.py``).

    Args:
        x: integers, any shape (flattened, as ``np.unique`` does).

    Shapes:
        x: any; returns (k,) of x's dtype, k distinct values ascending.
    """
    y = np.asarray(x).reshape(-1)
    if y.dtype.kind not in "iub":
        raise TypeError(f"unique_ints takes integers, not {y.dtype}")
    if y.shape[0] >= 2 and y.dtype.kind != "b":
        lo, hi = int(y.min()), int(y.max())
        if hi - lo <= DENSE * y.shape[0]:
            seen = np.zeros(hi - lo + 1, dtype=bool)
            seen[_offsets(y, lo)] = True
            wide = np.uint64 if y.dtype.kind == "u" else np.int64  # lo + offset computed where it fits
            return (np.flatnonzero(seen).astype(wide) + wide(lo)).astype(y.dtype)
    y = np.sort(y)
    if y.shape[0] < 2:
        return y
    keep = np.empty(y.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(y[1:], y[:-1], out=keep[1:])
    return y[keep]


def _offsets(x: np.ndarray, lo: int) -> np.ndarray:
    """``x - lo`` for integers x >= lo, without the overflow of x's own type (int8 from -100 to 100)."""
    return x - x.dtype.type(lo) if x.dtype.kind == "u" else x.astype(np.int64) - lo


def union_ints(a, b) -> np.ndarray:
    """``np.union1d(a, b)`` of integer arrays by :func:`unique_ints` (``union1d`` calls ``np.unique``)."""
    return unique_ints(np.concatenate([np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)]))


def _in_sorted(values: np.ndarray, b) -> np.ndarray:
    """Whether each of ``values`` (sorted, distinct) occurs in ``b``: by a table over the values' range where it
    is at most :data:`DENSE` times the two lengths, else by a sort of b and a binary search each."""
    b = np.asarray(b).reshape(-1)
    if b.shape[0] == 0 or values.shape[0] == 0:
        return np.zeros(values.shape[0], dtype=bool)
    lo, hi = int(values[0]), int(values[-1])
    if values.dtype.kind != "b" and hi - lo <= DENSE * (values.shape[0] + b.shape[0]):
        within = b[(b >= lo) & (b <= hi)]
        table = np.zeros(hi - lo + 1, dtype=bool)
        table[_offsets(within, lo)] = True
        return table[_offsets(values, lo)]
    b = np.sort(b)
    at = np.minimum(np.searchsorted(b, values), b.shape[0] - 1)
    return b[at] == values


def setdiff_ints(a, b) -> np.ndarray:
    """``np.setdiff1d(a, b)`` of integer arrays: a's distinct values not in b, ascending."""
    a = unique_ints(a)
    return a[~_in_sorted(a, b)]


def intersect_ints(a, b) -> np.ndarray:
    """``np.intersect1d(a, b)`` of integer arrays: the distinct values in both, ascending."""
    a = unique_ints(a)
    return a[_in_sorted(a, b)]
