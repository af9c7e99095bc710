"""Tests of hpcdgnn.data.graph_diff (SPEC S3, IBM §3.2): exact round trips and byte accounting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcdgnn.data.graph_diff import (
    COOSnapshot,
    CSRSnapshot,
    GraphDiff,
    csr_nbytes,
    decode_block,
    decode_diff,
    encode_block,
    encode_diff,
    transfer_bytes,
)

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
EMAIL = SHARED_DATA / "email-Eu-core-temporal.txt.gz"

INDEX_DTYPES = {"int32": np.int32, "int64": np.int64}
VALUE_DTYPES = {"float32": np.float32, "float64": np.float64}


def csr_of_keys(keys, n: int, rng: np.random.Generator, value_dtype=np.float32, index_dtype=np.int32) -> CSRSnapshot:
    """Canonical CSR with edge set ``keys`` (row * n + col) and random values, built with numpy only."""
    keys = np.unique(np.asarray(list(keys), dtype=np.int64))
    rows = keys // n if n else keys
    indptr = np.zeros(n + 1, dtype=np.int64)
    if n:
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    # values spread over many magnitudes and signs so a mis-ordered copy cannot pass by chance
    values = (rng.standard_normal(keys.shape[0]) * 10.0 ** rng.integers(-3, 4, keys.shape[0])).astype(value_dtype)
    return CSRSnapshot.from_arrays(indptr, (keys - rows * n).astype(index_dtype), values)


def keys_of(csr: CSRSnapshot) -> list[int]:
    """Edge keys of a CSR with a plain Python loop (independent of the module's vectorised code)."""
    n, ip, ix = csr.num_vertices, csr.indptr.tolist(), csr.indices.tolist()
    return [r * n + ix[p] for r in range(n) for p in range(ip[r], ip[r + 1])]


def assert_same(got: CSRSnapshot, want: CSRSnapshot) -> None:
    """torch.equal on all three arrays and identical dtypes."""
    for name in ("indptr", "indices", "values"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype, name
        assert torch.equal(a, b), name
    assert got.equal(want)


# prev/next edge sets over N*N cells; the named kinds force the corner cases
KINDS = ["random", "identical", "disjoint", "empty_prev", "empty_next", "both_empty", "full_prev", "full_next", "full"]


@st.composite
def snapshot_pairs(draw):
    """(prev, nxt) canonical CSRs over N <= 50 vertices, with a named corner case or random overlap."""
    n = draw(st.integers(1, 50))
    kind = draw(st.sampled_from(KINDS))
    vdt = VALUE_DTYPES[draw(st.sampled_from(sorted(VALUE_DTYPES)))]
    idt = INDEX_DTYPES[draw(st.sampled_from(sorted(INDEX_DTYPES)))]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    density = draw(st.sampled_from([0.0, 0.02, 0.1, 0.3, 0.7, 1.0]))
    cells = n * n
    a = set(np.flatnonzero(rng.random(cells) < density).tolist())
    # next snapshot: drop some of prev's edges, add some new ones (slow evolution, IBM §3.2)
    churn = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
    b = {k for k in a if rng.random() >= churn} | set(np.flatnonzero(rng.random(cells) < density * churn).tolist())
    full = set(range(cells))
    a, b = {
        "random": (a, b),
        "identical": (a, a),
        "disjoint": (a, set(range(cells)) - a),
        "empty_prev": (set(), b),
        "empty_next": (a, set()),
        "both_empty": (set(), set()),
        "full_prev": (full, b),
        "full_next": (a, full),
        "full": (full, full),
    }[kind]
    return csr_of_keys(a, n, rng, vdt, idt), csr_of_keys(b, n, rng, vdt, idt)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot_pairs())
def test_round_trip_is_exact(pair):
    """decode(A_i, encode(A_i, A_{i+1})) == A_{i+1}, bit for bit, and the diff is the set difference."""
    prev, nxt = pair
    diff = encode_diff(prev, nxt)
    assert_same(decode_diff(prev, diff), nxt)
    # the wire content is exactly IBM §3.2's A_i^ext (as positions) and A_{i+1}^ext (as keys)
    kp, kn = keys_of(prev), keys_of(nxt)
    sp, sn = set(kp), set(kn)
    assert diff.removed.tolist() == [p for p, k in enumerate(kp) if k not in sn]
    assert diff.added.tolist() == [k for k in kn if k not in sp]
    assert torch.equal(diff.values, nxt.values)


@settings(max_examples=100, deadline=None, database=None)
@given(snapshot_pairs())
def test_nbytes_matches_independent_count(pair):
    """GraphDiff.nbytes and csr_nbytes against counts made from Python sets and the documented itemsizes."""
    prev, nxt = pair
    n = prev.num_vertices
    kp, kn = set(keys_of(prev)), set(keys_of(nxt))
    idx_size = 4 if prev.indices.dtype == torch.int32 else 8
    val_size = 4 if nxt.values.dtype == torch.float32 else 8
    # N <= 50 and nnz <= 2500 here: both index arrays of the diff are int32 (4 bytes)
    expected = 4 * len(kp - kn) + 4 * len(kn - kp) + val_size * len(kn)
    diff = encode_diff(prev, nxt)
    assert diff.nbytes == expected
    assert csr_nbytes(nxt) == 8 * (n + 1) + (idx_size + val_size) * len(kn)
    assert transfer_bytes([prev, nxt], "csr") == csr_nbytes(prev) + csr_nbytes(nxt)
    # base = (index, value) pairs: int64 row + int64 column + the value per edge (IBM's baseline)
    assert transfer_bytes([prev, nxt], "base") == (16 + val_size) * (len(kp) + len(kn))
    assert transfer_bytes([prev, nxt], "graph_difference") == csr_nbytes(prev) + expected


def test_identical_snapshots_move_only_values():
    """Same edge set, new values: the diff is the values and nothing else (no header bytes)."""
    rng = np.random.default_rng(0)
    keys = rng.choice(40 * 40, 300, replace=False)
    a = csr_of_keys(keys, 40, rng)
    b = csr_of_keys(keys, 40, rng)  # same pattern, fresh values (as after M-transform smoothing)
    d = encode_diff(a, b)
    assert d.removed.numel() == 0 and d.added.numel() == 0
    assert d.nbytes == b.values.numel() * b.values.element_size() == 300 * 4
    assert csr_nbytes(b) == 41 * 8 + 300 * (4 + 4)
    assert_same(decode_diff(a, d), b)


def test_wide_index_dtypes_when_narrow_would_overflow():
    """Keys need int64 once N*N exceeds int32; positions stay int32 for nnz < 2^31."""
    n = 50_000  # N*N = 2.5e9 > 2^31 - 1
    rng = np.random.default_rng(1)
    a = csr_of_keys([5, n * n - 1], n, rng, index_dtype=np.int64)
    b = csr_of_keys([5, n * (n - 2) + 7], n, rng, index_dtype=np.int64)
    d = encode_diff(a, b)
    assert d.added.dtype == torch.int64 and d.removed.dtype == torch.int32
    assert d.added.tolist() == [n * (n - 2) + 7] and d.removed.tolist() == [1]
    assert_same(decode_diff(a, d), b)


def test_block_round_trip_and_bytes():
    """encode_block/decode_block over an evolving sequence; transfer_bytes per number of blocks."""
    rng = np.random.default_rng(2)
    n, T = 37, 9
    sets, cur = [], set(rng.choice(n * n, 200, replace=False).tolist())
    for _ in range(T):
        cur = {k for k in cur if rng.random() > 0.1} | set(rng.choice(n * n, 20).tolist())
        sets.append(cur)
    sets[4] = set()  # an empty snapshot in the middle
    csrs = [csr_of_keys(s, n, rng, np.float64, np.int64) for s in sets]
    payloads = encode_block(csrs)
    assert isinstance(payloads[0], CSRSnapshot) and all(isinstance(p, GraphDiff) for p in payloads[1:])
    out = decode_block(payloads)
    assert len(out) == T
    for got, want in zip(out, csrs, strict=True):
        assert_same(got, want)
    # decoding is deterministic
    for got, again in zip(out, decode_block(payloads), strict=True):
        assert_same(got, again)
    assert transfer_bytes(csrs, "csr") == sum(csr_nbytes(c) for c in csrs)
    assert transfer_bytes(csrs, "base") == sum(24 * len(s) for s in sets)  # float64 values
    gd1 = csr_nbytes(csrs[0]) + sum(encode_diff(csrs[t - 1], csrs[t]).nbytes for t in range(1, T))
    assert transfer_bytes(csrs, "graph_difference") == gd1
    # 3 blocks of 3: snapshots 0, 3, 6 go in full (IBM §6.2)
    gd3 = sum(csr_nbytes(csrs[t]) if t % 3 == 0 else encode_diff(csrs[t - 1], csrs[t]).nbytes for t in range(T))
    assert transfer_bytes(csrs, "graph_difference", num_blocks=3) == gd3
    # more blocks than snapshots: every snapshot is a block of its own = full CSR each
    assert transfer_bytes(csrs, "graph_difference", num_blocks=20) == transfer_bytes(csrs, "csr")
    assert encode_block([]) == [] and decode_block([]) == []
    # the baseline wire format round-trips too, bit for bit, including the index dtype
    base = encode_block(csrs, "base")
    assert all(isinstance(p, COOSnapshot) for p in base)
    assert sum(p.nbytes for p in base) == transfer_bytes(csrs, "base")
    for got, want in zip(decode_block(base), csrs, strict=True):
        assert_same(got, want)


def test_errors():
    """Mismatched N or index dtype, non-canonical CSR, misuse of blocks and modes are refused."""
    rng = np.random.default_rng(3)
    a, b = csr_of_keys([1, 2], 4, rng), csr_of_keys([1, 2], 5, rng)
    with pytest.raises(ValueError, match="N = 4 and 5"):
        encode_diff(a, b)
    with pytest.raises(ValueError, match="index dtypes"):
        encode_diff(a, csr_of_keys([1], 4, rng, index_dtype=np.int64))
    unsorted = CSRSnapshot.from_arrays(np.array([0, 2, 2, 2, 2]), np.array([3, 1], np.int32), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="sorted and unique"):
        encode_diff(a, unsorted)
    d = encode_diff(a, a)
    with pytest.raises(ValueError, match="diff is for N = 4"):
        decode_diff(b, d)
    with pytest.raises(ValueError, match="values"):
        decode_diff(a, GraphDiff(4, d.removed, d.added, d.values[:1]))
    with pytest.raises(ValueError, match="no full snapshot"):
        decode_block([d])
    with pytest.raises(ValueError, match="choose from base, graph_difference"):
        transfer_bytes([a], "gd")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_decode_on_gpu():
    """The decoder runs on the device of A_i and gives the same arrays as on the host."""
    rng = np.random.default_rng(4)
    a = csr_of_keys(rng.choice(900, 300, replace=False), 30, rng)
    b = csr_of_keys(rng.choice(900, 300, replace=False), 30, rng)
    got = decode_diff(a.to("cuda"), encode_diff(a, b).pin_memory())
    assert got.device.type == "cuda"
    assert_same(got.to("cpu"), b)


@pytest.fixture(scope="module")
def email_snapshots(tmp_path_factory):
    """email-Eu-core with edge-life 10 (IBM §5.4), read back from its shards as CSRSnapshots."""
    if not EMAIL.is_file():
        pytest.skip(f"{EMAIL} not present")
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.prepare import prepare_dataset
    from hpcdgnn.data.shard_reader import ShardReader

    out = tmp_path_factory.mktemp("email") / "email"
    prepare_dataset(EMAIL, "snap", out, snapshots=64, edge_life=10)
    with ShardReader(out, load_manifest(out)) as reader:
        return [CSRSnapshot.from_snapshot(reader.read(t)) for t in range(reader.manifest.num_snapshots)]


def test_email_eu_core_round_trip(email_snapshots):
    """Every consecutive pair of the real dataset round-trips exactly; GD moves fewer bytes than base."""
    csrs = email_snapshots
    assert len(csrs) == 64
    for prev, nxt in zip(csrs[:-1], csrs[1:], strict=True):
        assert_same(decode_diff(prev, encode_diff(prev, nxt)), nxt)
    for got, want in zip(decode_block(encode_block(csrs)), csrs, strict=True):
        assert_same(got, want)
    assert transfer_bytes(csrs, "graph_difference") < transfer_bytes(csrs, "base")
