"""Tests of hpcdgnn.data.generate: the IBM §6.3 weak-scaling random graph generator."""

from __future__ import annotations

import argparse
import inspect as pyinspect
import time

import numpy as np
import pytest

from hpcdgnn.data.generate import add_generate_arguments, generate_dataset, random_snapshots, run_generate
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.errors import DataError


def _contents(root):
    """Every array of every snapshot, read back through the ShardReader."""
    m = load_manifest(root)
    out = []
    with ShardReader(root, m) as r:
        for t in range(m.num_snapshots):
            s = r.read(t)
            out.append((s.indptr, s.indices, s.weights, s.x, s.active))
    return out


def _same(a, b):
    return len(a) == len(b) and all(
        all(np.array_equal(x, y) for x, y in zip(sa, sb, strict=True)) for sa, sb in zip(a, b, strict=True)
    )


def test_same_seed_identical_different_seed_differs(tmp_path):
    """Same (N, T, f, seed) gives identical shard contents (whatever the shard size); another seed differs."""
    kw = dict(vertices=300, snapshots=7, density=2.5)
    generate_dataset(tmp_path / "a", seed=11, **kw)
    generate_dataset(tmp_path / "b", seed=11, shard_size=3, **kw)  # output independent of sharding
    generate_dataset(tmp_path / "c", seed=12, **kw)
    a, b, c = _contents(tmp_path / "a"), _contents(tmp_path / "b"), _contents(tmp_path / "c")
    assert _same(a, b)
    assert not _same(a, c)
    assert not any(np.array_equal(x[1], y[1]) for x, y in zip(a, c, strict=True))


def test_edge_counts_no_self_loops_and_rng_stream(tmp_path):
    """Edges <= round(N*f), no self-loops, and exactly the pairs of default_rng([seed, t])."""
    N, T, f, seed = 200, 5, 3.0, 4
    m = generate_dataset(tmp_path / "g", N, T, f, seed)
    assert (m.num_vertices, m.num_snapshots, m.feature_names) == (N, T, ["in_degree", "out_degree"])
    assert all(0 < e <= round(N * f) for e in m.snapshot_edges)
    assert m.snapshot_nnz == m.snapshot_edges
    with ShardReader(tmp_path / "g", m) as r:
        for t in range(T):
            s = r.read(t)
            rows = s.rows()
            assert not (rows == s.indices).any()
            pairs = np.random.default_rng([seed, t]).integers(0, N, size=(2, round(N * f)))
            want = {(a, b) for a, b in zip(*pairs.tolist(), strict=True) if a != b}
            assert set(zip(rows.tolist(), s.indices.tolist(), strict=True)) == want
            np.testing.assert_array_equal(s.weights, 1.0)


def test_snapshots_are_generated_lazily():
    """random_snapshots is a generator: asking for one snapshot of a huge T builds only that one."""
    assert pyinspect.isgeneratorfunction(random_snapshots)
    t0 = time.perf_counter()
    gen = random_snapshots(1000, 10**12, 3.0, seed=0)
    first = next(gen)
    assert time.perf_counter() - t0 < 1.0
    assert first.time == (0.0, 1.0) and first.src.shape[0] <= 3000


def test_smoothing_options(tmp_path):
    """Edge-life and M-transform reach the writer (IBM §5.4 applied to generated graphs, §6.3)."""
    m = generate_dataset(tmp_path / "l", 100, 6, 1.0, 0, edge_life=3)
    assert m.smoothing == {"edge_life": 3, "mtransform_window": 1}
    assert all(nnz >= e for nnz, e in zip(m.snapshot_nnz, m.snapshot_edges, strict=True))
    assert m.snapshot_nnz[2] > m.snapshot_edges[2]
    m = generate_dataset(tmp_path / "w", 100, 6, 1.0, 0, mtransform=2)
    assert m.smoothing["mtransform_window"] == 2 and m.snapshot_nnz[0] == m.snapshot_edges[0]


def test_errors(tmp_path):
    """Impossible sizes and an existing output are one-line DataErrors."""
    with pytest.raises(DataError, match="--vertices must be >= 2"):
        generate_dataset(tmp_path / "x", 1, 3, 1.0, 0)
    with pytest.raises(DataError, match="--density must be a positive"):
        generate_dataset(tmp_path / "x", 10, 3, 0.0, 0)
    with pytest.raises(DataError, match=r"--seed must be in \[0, 2\^63\) \(got -1\)"):
        generate_dataset(tmp_path / "x", 10, 3, 1.0, -1)
    generate_dataset(tmp_path / "x", 10, 2, 1.0, 0)
    with pytest.raises(DataError, match="--force"):
        generate_dataset(tmp_path / "x", 10, 2, 1.0, 0)


def test_cli(tmp_path, capsys):
    """The generate CLI writes the dataset and prints a one-line summary."""
    p = argparse.ArgumentParser(prog="hpcdgnn generate")
    add_generate_arguments(p)
    out = tmp_path / "g"
    args = p.parse_args(["--output", str(out), "--vertices", "64", "--snapshots", "3", "--density", "2", "--seed", "5"])
    assert run_generate(args) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"generated {out}: N=64 T=3 F=2 edges=")
    assert load_manifest(out).source["seed"] == 5


def test_nonuniform_generator_spreads_edges_and_lifetimes(tmp_path):
    """DGC §7.3.1: δ spreads edges per snapshot around N·f; τ gives vertices lifetimes of varied length."""
    from hpcdgnn.data.generate import random_snapshots

    N, T, f = 500, 40, 2.0
    uniform = [len(s.src) for s in random_snapshots(N, T, f, 3)]
    spread = [len(s.src) for s in random_snapshots(N, T, f, 3, spatial_spread=0.5)]
    assert np.std(uniform) < 0.02 * N * f < 0.3 * N * f < np.std(spread)
    assert abs(np.mean(spread) - N * f) < 0.25 * N * f
    # the default is the IBM graph, byte for byte
    for a, b in zip(random_snapshots(N, 3, f, 3), random_snapshots(N, 3, f, 3, 0.0, 0.0), strict=True):
        assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
    first, last = np.full(N, T), np.full(N, -1)
    for t, s in enumerate(random_snapshots(N, T, f, 3, temporal_spread=0.8)):
        for v in np.concatenate([s.src, s.dst]):
            first[v], last[v] = min(first[v], t), max(last[v], t)
    seen = last >= 0
    span = last[seen] - first[seen] + 1
    assert span.min() <= 0.4 * T and span.max() >= 0.9 * T  # short and long sequences
    m = generate_dataset(tmp_path / "nu", N, 6, f, 1, spatial_spread=0.3, temporal_spread=0.5)
    assert m.source["generator"] == "dgc-7.3.1-nonuniform" and m.source["temporal_spread"] == 0.5
    assert min(m.snapshot_active) < N  # vertices inactive in some snapshots are recorded as such
