"""The CPU decoder of the S3 wire formats (numpy merges) rebuilds what the device decoder does, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.data.graph_diff import CSRSnapshot, decode_block, encode_block
from hpcdgnn.data.transfer import SnapshotTransfer, decode_block_host


def _csr(rng, n: int, m: int, index_dtype, overlap_with=None) -> CSRSnapshot:
    """A canonical CSR with about m edges (some kept from ``overlap_with``), empty rows, weighted values."""
    keys = rng.integers(0, n * n, m)
    if overlap_with is not None and overlap_with.shape[0]:
        keys = np.concatenate([keys, rng.choice(overlap_with, overlap_with.shape[0] // 2, replace=False)])
    keys = np.unique(keys)
    rows, cols = keys // n, keys % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return CSRSnapshot.from_arrays(indptr, cols.astype(index_dtype), rng.random(keys.shape[0]).astype(np.float32))


def _keys(c: CSRSnapshot) -> np.ndarray:
    n = c.num_vertices
    return np.repeat(np.arange(n), np.diff(c.indptr.numpy())) * n + c.indices.numpy().astype(np.int64)


@pytest.mark.parametrize("mode", ["graph_difference", "base"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_host_decoder_matches_device_decoder(mode, index_dtype):
    """The host merge of a diff rebuilds what the device decoder does, into fresh memory."""
    rng = np.random.default_rng(5)
    n = 37
    csrs = [_csr(rng, n, 60, index_dtype)]
    for m in (80, 0, 3, 50):  # an empty snapshot and a nearly empty one in the sequence
        csrs.append(_csr(rng, n, m, index_dtype, overlap_with=_keys(csrs[-1])))
    payloads = encode_block(csrs, mode)
    ref, got = decode_block(payloads), decode_block_host(payloads)
    assert len(got) == len(csrs)
    for c, r, g in zip(csrs, ref, got, strict=True):
        assert g.equal(r) and g.equal(c)
    # fresh memory: the decoded block must not alias the host payloads (the CPU "transfer" is a copy)
    held = {a.untyped_storage().data_ptr() for p in payloads for a in vars(p).values() if isinstance(a, torch.Tensor)}
    for g in got:
        for a in (g.indptr, g.indices, g.values):
            assert a.numel() == 0 or a.untyped_storage().data_ptr() not in held


def test_cpu_transfer_uses_host_decoder_and_counts_bytes():
    rng = np.random.default_rng(2)
    csrs = [_csr(rng, 20, 40, np.int32)]
    csrs.append(_csr(rng, 20, 30, np.int32, overlap_with=_keys(csrs[-1])))
    tr = SnapshotTransfer(csrs, [[0, 1]], "graph_difference", torch.device("cpu"))
    out = tr.load(0)
    assert all(a.equal(b) for a, b in zip(out, csrs, strict=True))
    assert tr.bytes == tr.block_bytes(0) > 0
