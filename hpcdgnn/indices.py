"""The integer type of every stored index array (vertex ids, CSR offsets, pairs, halo positions)."""

from __future__ import annotations

import numpy as np

__all__ = ["INT32_MAX", "index_dtype", "torch_index_dtype"]

INT32_MAX = int(np.iinfo(np.int32).max)


def index_dtype(largest: int) -> np.dtype:
    """int32 where ``largest`` fits it, else int64: half the bytes, and MKL's sparse products take int32."""
    return np.dtype(np.int32) if largest <= INT32_MAX else np.dtype(np.int64)


def torch_index_dtype(largest: int):
    """:func:`index_dtype` as a torch dtype."""
    import torch  # here, not at the top: the data layer imports this module without torch

    return getattr(torch, index_dtype(largest).name)
