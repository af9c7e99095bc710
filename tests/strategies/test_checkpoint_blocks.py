"""S2 checkpoint blocks (IBM §3.1): the per-block Ã is gcn_norm's bit for bit, and more blocks never hold more
activations for backward (``activation_peak_bytes``, SavedTensorMeter) — the point of the technique.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hpcdgnn.data.graph_diff import CSRSnapshot
from hpcdgnn.ops.sparse import block_diagonal, csr_mm, gcn_norm, stacked_gcn_norm
from tests.conftest import make_dataset, read_metrics, write_job


def _snapshot(rng, n: int, m: int, index_dtype, self_loops: bool, unit: bool = False) -> CSRSnapshot:
    keys = np.unique(rng.integers(0, n * n, m))
    rows, cols = keys // n, keys % n
    if not self_loops:
        rows, cols = rows[rows != cols], cols[rows != cols]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    # weighted (smoothed) edges: the degrees are not integers; or unit weights: integer degrees, whose
    # square roots torch's vectorised sqrt and a correctly rounded one give apart in the last bit (2, on AVX-512)
    w = np.ones(rows.shape[0]) if unit else rng.random(rows.shape[0]) + 0.5
    return CSRSnapshot.from_arrays(indptr, cols.astype(index_dtype), w.astype(np.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_stacked_normalisation_is_gcn_norm_bit_for_bit(dtype, index_dtype):
    """diag(Ã_t) built in place equals block_diagonal(gcn_norm(...)) exactly: input self-loops, empty rows,
    an empty snapshot, one snapshot alone, unit weights; its transpose too, built with it or when first read."""
    rng = np.random.default_rng(0)
    n = 29
    snaps = [_snapshot(rng, n, m, index_dtype, self_loops=k % 2 == 0, unit=k == 2)
             for k, m in enumerate((120, 0, 40, 300, 7))]
    for group in (snaps, snaps[3:4], snaps[1:3]):
        ref = block_diagonal([gcn_norm(0, c.indptr, c.indices, c.values, dtype) for c in group])
        got = stacked_gcn_norm(group, list(range(len(group))), dtype)
        kept = stacked_gcn_norm(group, list(range(len(group))), dtype, transpose=True)
        # Ãᵀ only where asked for (a resident operator with a backward); else built when something reads it
        assert kept.has_transpose and not got.has_transpose and got.nbytes < kept.nbytes
        for r, g in ((ref.a, got.a), (ref.a_t, got.a_t), (ref.a_t, kept.a_t)):
            assert g.shape == r.shape
            for x, y in ((r.crow_indices(), g.crow_indices()), (r.col_indices(), g.col_indices())):
                # every path stores MKL's int32 indices where they fit (sorted_csr's rule): the same numbers
                assert y.dtype == x.dtype == torch.int32 and torch.equal(x, y)
            assert r.values().dtype == g.values().dtype and torch.equal(r.values(), g.values())
        x = torch.randn(ref.a.shape[1], 3, dtype=dtype)
        assert torch.equal(csr_mm(ref.a, x), csr_mm(got.a, x))  # MKL's product: the same bits either way
        assert torch.equal(csr_mm(ref.a_t, x), csr_mm(got.a_t, x))
        assert got.nbytes <= ref.nbytes


def test_a_block_operator_counts_a_transpose_built_at_its_backward():
    """A block's Ã is built without Ãᵀ; its backward builds the transpose then, and the block's reported peak
    (engine_bytes' streamed part) grows by it — once, bound to the bytes, not to the operator."""
    from functools import partial
    from types import SimpleNamespace

    from hpcdgnn.ops.sparse import spmm
    from hpcdgnn.strategies.snapshot import SnapshotStrategy

    rng = np.random.default_rng(3)
    snaps = [_snapshot(rng, 40, m, np.int32, self_loops=False) for m in (150, 90)]
    op = stacked_gcn_norm(snaps, [0, 1], torch.float32)
    built = op.nbytes
    owner = SimpleNamespace(_block_adj_peak=built)
    op.on_transpose = partial(SnapshotStrategy._late_transpose, owner, built)
    x = torch.randn(80, 3, requires_grad=True)
    spmm(op, x).sum().backward()
    assert op.has_transpose and owner._block_adj_peak == op.nbytes == 2 * built  # Ãᵀ: as many entries and rows
    assert torch.equal(x.grad, csr_mm(op.a_t, torch.ones(80, 3)))
    spmm(op, x).sum().backward()  # built once
    assert owner._block_adj_peak == 2 * built


@pytest.fixture(scope="module")
def blocks_dataset(tmp_path_factory):
    """T = 16 (blocks 2 and 4 nest: [0, 8, 16] and [0, 4, 8, 12, 16]), enough edges that activations dominate."""
    return make_dataset(tmp_path_factory.mktemp("blocks") / "data", T=16, N=60, m=240)


@pytest.mark.parametrize("np_", [None, 2])
def test_more_blocks_never_raise_the_activation_peak(launcher, blocks_dataset, tmp_path, np_):
    """Causal TM-GCN, blocks 1 -> 2 -> 4: the measured peak of saved activations does not grow, and 4 blocks
    hold strictly less than one (each re-run block keeps only its own snapshots' activations)."""
    job = write_job(tmp_path / "job.yaml", blocks_dataset, model={"name": "tmgcn"}, train={"epochs": 2})
    peaks, losses = {}, {}
    blocks = (1, 2, 4)
    # one launch (each run measures its own peak: a SavedTensorMeter of its own, reset every epoch)
    procs = launcher.run_many(np_, [["run", str(job), "--output", str(tmp_path / f"nb{nb}"),
                                     "--set", f"strategy.blocks={nb}"] for nb in blocks])
    for nb, proc in zip(blocks, procs, strict=True):
        assert proc.returncode == 0, f"nb={nb} P={np_}:\n{proc.stdout}\n{proc.stderr}"
        recs = read_metrics(tmp_path / f"nb{nb}")
        peaks[nb] = max(r["activation_peak_bytes"] for r in recs)
        losses[nb] = [r["loss"] for r in recs]
    assert peaks[1] >= peaks[2] >= peaks[4] > 0, peaks
    assert peaks[4] < peaks[1], peaks
    for nb in (2, 4):  # and the blocks change nothing else
        np.testing.assert_allclose(losses[nb], losses[1], rtol=1e-6)
