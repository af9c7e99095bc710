"""Spatial chunk fusion (DGC §5.1.1): greedy merging by transmission under a memory cap."""

from __future__ import annotations

import numpy as np
import torch

from hpcdgnn.nn.conv.graph import RowGroups
from hpcdgnn.ops.sparse import gcn_norm, spmm
from hpcdgnn.partition.fusion import fuse_chunks, group_cost

# rows 0-1 chunk A, 2-3 chunk B, 4-5 chunk C; A reads B three times, B reads C once
CHUNK = np.array([0, 0, 1, 1, 2, 2])
ROW = np.array([0, 1, 0, 1, 2, 3, 3, 0, 1, 2, 3, 4, 5, 4, 4])
COL = np.array([0, 1, 2, 3, 2, 3, 4, 1, 0, 0, 1, 4, 5, 5, 6])  # column 6 is a halo row


def test_the_heaviest_pair_fuses_first_and_the_cap_holds():
    cost = np.array([1.0, 1.0, 1.0])
    assert np.array_equal(fuse_chunks(CHUNK, ROW, COL, cost, cap=2.0), [0, 0, 0, 0, 1, 1])
    assert np.array_equal(fuse_chunks(CHUNK, ROW, COL, cost, cap=3.0), [0] * 6)
    assert np.array_equal(fuse_chunks(CHUNK, ROW, COL, cost, cap=1.0), CHUNK)  # nothing fits: unfused
    big = np.array([5.0, 1.0, 1.0])  # A alone is over any cap: B fuses with C instead
    assert np.array_equal(fuse_chunks(CHUNK, ROW, COL, big, cap=2.0), [0, 0, 1, 1, 1, 1])


def test_cost_counts_rows_in_and_out_and_entries():
    cost = group_cost(CHUNK, ROW, COL, width=2, itemsize=8)
    # chunk A: 2 rows, reads columns {0,1,2,3} (4), 6 entries
    assert cost[0] == (2 + 4) * 2 * 8 + 6 * (16 + 8)


def test_row_groups_aggregate_exactly_as_one_product():
    rng = np.random.default_rng(0)
    n = 40
    src, dst = rng.integers(0, n, 120), rng.integers(0, n, 120)
    dense = np.zeros((n, n))
    dense[src, dst] = dense[dst, src] = 1
    np.fill_diagonal(dense, 0)
    r, c = np.nonzero(dense)
    adj = gcn_norm(0, np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n))]), c, np.ones(r.shape[0]),
                   torch.float64)
    x = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
    whole = spmm(adj, x)
    (gw,) = torch.autograd.grad(whole.sum(), x)
    for group in (rng.integers(0, 7, n), np.zeros(n, dtype=np.int64), np.arange(n)):
        g = RowGroups(adj, group)
        out = g.propagate(x)
        assert torch.equal(out, whole)
        torch.testing.assert_close(torch.autograd.grad(out.sum(), x)[0], gw)
        assert g.loaded_rows >= n  # every row is read by some group at least once (self-loops)


def test_rows_read_counts_what_the_groups_load():
    adj = gcn_norm(0, np.array([0, 1, 3, 4, 5]), np.array([1, 0, 2, 1, 2]), np.ones(5), torch.float64)
    crow, col = adj.a.crow_indices().numpy(), adj.a.col_indices().numpy()
    row = np.repeat(np.arange(4), np.diff(crow))
    for group in (np.array([0, 0, 1, 1]), np.array([0, 1, 2, 3]), np.zeros(4, dtype=np.int64)):
        assert RowGroups.rows_read(group, row, col) == RowGroups(adj, group).loaded_rows
