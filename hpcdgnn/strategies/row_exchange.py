"""Naming rows to other ranks: the index exchange behind a keyed fetch and the stale halo's fresh rows.

A rank names rows of another's by their positions among that rank's rows, as int32 or as a bitmask over all of
them, whichever is shorter (:func:`fresh_bytes`); both sides know the counts, so the encoding needs no flag.
:func:`ask_owners` is a keyed fetch's index exchange (:func:`hpcdgnn.strategies.halo.fetch_rows`), and
:class:`~hpcdgnn.strategies.stale.StaleFetch` names the rows it sends fresh the same way (DGC §5.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hpcdgnn.indices import index_dtype

__all__ = ["RowRequest", "ask_owners", "decode_positions", "encode_positions", "exchange_positions", "fresh_bytes"]


def fresh_bytes(count: int, rows: int) -> int:
    """Bytes that name ``count`` of a sender's ``rows`` rows (the halo rows that came fresh, the rows a
    fetch asks for): their positions as int32, or a bitmask over all ``rows`` where that is smaller (more
    than one row in 32), and always where int32 cannot hold a position. Both sides know both numbers, so
    the encoding needs no flag."""
    mask = (rows + 7) // 8
    return mask if index_dtype(rows - 1) != np.int32 else min(4 * count, mask)


def encode_positions(positions: list[np.ndarray], rows: list[int]) -> tuple[np.ndarray, list[int]]:
    """Per destination q, the ascending unique ``positions[q]`` among ``rows[q]`` rows in
    :func:`fresh_bytes`' encoding: (the concatenated bytes, bytes per destination). The bitmask is
    built only where it is the shorter form, so below 2^31 rows the work is bounded by 32 × the
    positions sent."""
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
    """The inverse of :func:`encode_positions` on the receiver: per sender, its ``counts[q]`` positions
    among ``rows[q]`` rows, ascending, as int64."""
    out, off = [], 0
    for c, r in zip(counts, rows, strict=True):
        n = fresh_bytes(c, r)
        seg, off = raw[off : off + n], off + n
        idx = seg.copy().view(np.int32) if n == 4 * c else np.flatnonzero(np.unpackbits(seg, count=r))
        out.append(idx.astype(np.int64))
    return out


def exchange_positions(comm, positions: list[np.ndarray], send_rows: list[int], recv_rows: list[int],
                       tag: str) -> tuple[list[int], list[np.ndarray]]:
    """Name rows to every rank, collectively: ``positions[q]`` (ascending, unique) among the
    ``send_rows[q]`` rows my message to rank q is about; rank q's to me are among ``recv_rows[q]``.
    The counts go first (8 bytes per rank pair), then each set in :func:`fresh_bytes`' shorter
    encoding, both under ``tag``. Returns (how many rows each rank named to me, their positions).

    The one mechanism behind the stale halo's fresh rows and a keyed fetch's requests
    (:func:`ask_owners`)."""
    P = comm.size
    counts = torch.tensor([p.shape[0] for p in positions], dtype=torch.int64)
    got = comm.exchange.alltoallv(counts.view(P, 1), [1] * P, [1] * P, tag=tag).view(-1).tolist()
    raw, sizes = encode_positions(positions, send_rows)
    got_sizes = [fresh_bytes(g, r) for g, r in zip(got, recv_rows, strict=True)]
    raw = comm.exchange.alltoallv(torch.from_numpy(raw).view(-1, 1), sizes, got_sizes, tag=tag).view(-1).numpy()
    return got, decode_positions(raw, got, recv_rows)


@dataclass
class RowRequest:
    """One rank's side of a keyed fetch after the index exchange (:func:`ask_owners`).

    Attributes:
        order: my keys sorted by (owner, owner's row): the order rows arrive in.
        local: the owner's row of each key, in that order (ascending per owner).
        counts: keys I ask of each rank; got: keys each rank asks of me.
        asked: my rows each rank asks for, in rank order (int64).
    """

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
    """The index exchange of a keyed fetch (collective, tag ``<tag>.index``) for the unique ``keys``:
    counts, then per owner the rows asked of it, ascending, as int32 positions or a bitmask over its
    ``row_counts[owner]`` rows, whichever is shorter (:func:`exchange_positions`;
    a fetch that asks for most of an owner's rows, as random negatives do, costs a bit a row, not 32)."""
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
