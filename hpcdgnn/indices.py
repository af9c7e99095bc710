"""The integer type of index arrays: one rule for every array of positions, ids or offsets the project
stores (shards' vertex ids, CSR offsets and columns, decoder pairs, graph differences, halo positions)."""

from __future__ import annotations

import numpy as np

__all__ = ["INT32_MAX", "index_dtype", "torch_index_dtype"]

INT32_MAX = int(np.iinfo(np.int32).max)


def index_dtype(largest: int) -> np.dtype:
    """int32 where every value to be stored is at most ``largest`` and that fits int32, else int64.

    Why narrow where it fits: half the bytes of every index array (on disk, in memory, in a graph
    difference on the wire), and MKL's sparse products take int32 — torch converted int64 indices on
    every call. :func:`torch_index_dtype` is the torch type.
    """
    return np.dtype(np.int32) if largest <= INT32_MAX else np.dtype(np.int64)


def torch_index_dtype(largest: int):
    """:func:`index_dtype` as a torch dtype."""
    import torch  # here, not at the top: the data layer imports this module without torch

    return getattr(torch, index_dtype(largest).name)
