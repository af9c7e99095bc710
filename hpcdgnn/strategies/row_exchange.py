"""Naming rows to other ranks: the index exchange behind a keyed fetch and the stale halo's fresh rows.

Rows are named by position among the owner's rows, as int32 or a bitmask, whichever is shorter; both sides
know the counts, so the encoding needs no flag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.indices import index_dtype

__all__ = ["RowRequest", "ask_owners", "decode_positions", "encode_positions", "exchange_positions", "fresh_bytes"]


def fresh_bytes(count: int, rows: int) -> int:
    """Bytes naming ``count`` of ``rows`` rows: int32 positions, or a bitmask where smaller or int32 overflows."""
    mask = (rows + 7) // 8
    return mask if index_dtype(rows - 1) != np.int32 else min(4 * count, mask)


def encode_positions(positions: list[np.ndarray], rows: list[int]) -> tuple[np.ndarray, list[int]]:
    """Encode ``positions[q]`` among ``rows[q]`` rows per destination: (concatenated bytes, bytes per q)."""
    parts, sizes = [], []
    for pos, r in zip(positions, rows, strict=True):
        n = fresh_bytes(pos.shape[0], r)
        if n == 4 * pos.shape[0]:
            parts.append(pos.astype(np.int32).view(np.uint8))
        else:
            mask = np.zeros(r, dtype=np.bool_)
            mask[pos] = True
            parts.append(np.packbits(mask))
        sizes.append(n)
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)), sizes


def decode_positions(raw: np.ndarray, counts: list[int], rows: list[int]) -> list[np.ndarray]:
    """The inverse of :func:`encode_positions`: per sender, ``counts[q]`` ascending int64 positions."""
    out, off = [], 0
    for c, r in zip(counts, rows, strict=True):
        n = fresh_bytes(c, r)
        seg, off = raw[off : off + n], off + n
        idx = seg.copy().view(np.int32) if n == 4 * c else np.flatnonzero(np.unpackbits(seg, count=r))
        out.append(idx.astype(np.int64))
    return out


def exchange_positions(comm, positions: list[np.ndarray], send_rows: list[int], recv_rows: list[int],
                       tag: str) -> tuple[list[int], list[np.ndarray]]:
    """Name ``positions[q]`` among ``send_rows[q]`` rows to each rank q (collective: counts, then positions).

    Returns (how many rows each rank named to me, their positions among ``recv_rows``).
    """
    P = comm.size
    counts = torch.tensor([p.shape[0] for p in positions], dtype=torch.int64)
    got = comm.exchange.alltoallv(counts.view(P, 1), [1] * P, [1] * P, tag=tag).view(-1).tolist()
    raw, sizes = encode_positions(positions, send_rows)
    got_sizes = [fresh_bytes(g, r) for g, r in zip(got, recv_rows, strict=True)]
    raw = comm.exchange.alltoallv(torch.from_numpy(raw).view(-1, 1), sizes, got_sizes, tag=tag).view(-1).numpy()
    return got, decode_positions(raw, got, recv_rows)


@dataclass
class RowRequest:
    """One rank's side of a keyed fetch: ``order`` (arrival order of my keys), owners' rows, counts, asked rows."""

    order: np.ndarray
    local: np.ndarray
    counts: list[int]
    got: list[int]
    asked: torch.Tensor

    def in_key_order(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows received in owner order, back in the order of the keys."""
        back = np.empty_like(self.order)
        back[self.order] = np.arange(self.order.shape[0])
        return rows.index_select(0, torch.from_numpy(back).to(rows.device))


def ask_owners(comm, keys: np.ndarray, owner_of: Callable[[np.ndarray], np.ndarray],
               local_of: Callable[[np.ndarray], np.ndarray], row_counts: list[int], tag: str) -> RowRequest:
    """The index exchange of a keyed fetch for the unique ``keys`` (collective, tag ``<tag>.index``)."""
    P = comm.size
    owner = owner_of(keys)
    local_all = local_of(keys)
    order = np.lexsort((local_all, owner))
    local = local_all[order]
    counts = np.bincount(owner, minlength=P)
    bounds = np.r_[0, np.cumsum(counts)]
    got, asked = exchange_positions(comm, [local[bounds[q] : bounds[q + 1]] for q in range(P)], list(row_counts),
                                    [row_counts[comm.rank]] * P, f"{tag}.index")
    return RowRequest(order, local, counts.tolist(), got, torch.from_numpy(np.concatenate(asked)))
