"""Random dynamic graphs for weak-scaling studies (IBM §6.3), written as a dataset directory.

Snapshot t draws ``m = round(N * f)`` ordered pairs uniformly from ``[0, N)²`` with
``default_rng([seed, t])``; self-loops are dropped (the GCN adds ``I``, IBM §2) and
duplicates collapse in the writer. Features are in/out degrees (IBM §6.1), weights 1.
Non-uniform graphs (DGC §7.3.1), off by default:

* ``spatial_spread`` δ: ``m_t ~ Normal(N·f, (δ·N·f)²)`` pairs, from ``default_rng([seed, t, 1])``;
* ``temporal_spread`` τ in [0, 1): vertex v lives ``L_v ~ U[max(1, round((1-τ)·T)), T]``
  consecutive snapshots from a uniform start (``default_rng([seed, 2**31])``); pairs are
  drawn among the live vertices (DGC Fig. 13b).

Per-snapshot RNG streams make the output depend only on ``(N, T, f, seed)`` and the spreads.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from hpcdgnn.data.manifest import Manifest
from hpcdgnn.data.writer import RawSnapshot, write_dataset
from hpcdgnn.errors import DataError

__all__ = ["add_generate_arguments", "run_generate", "generate_dataset", "random_snapshots"]


def random_snapshots(
    vertices: int,
    snapshots: int,
    density: float,
    seed: int,
    spatial_spread: float = 0.0,
    temporal_spread: float = 0.0,
) -> Iterator[RawSnapshot]:
    """Yield the IBM §6.3 random snapshots one at a time (DGC §7.3.1 non-uniform when asked).

    Args:
        vertices: N.
        snapshots: T.
        density: f; each snapshot draws ``round(N * f)`` pairs before dropping self-loops.
        seed: snapshot t uses ``np.random.default_rng([seed, t])``.
        spatial_spread: δ, relative standard deviation of the pairs per snapshot.
        temporal_spread: τ, spread of vertex lifetimes (module docstring).

    Yields:
        :class:`RawSnapshot` with int64 ``src``/``dst`` and ``time = (t, t + 1)``.
    """
    n, T = int(vertices), int(snapshots)
    m = int(round(n * float(density)))
    start = stop = None
    if temporal_spread > 0:
        life_rng = np.random.default_rng([int(seed), 2**31])
        shortest = max(1, int(round((1.0 - temporal_spread) * T)))
        length = life_rng.integers(shortest, T + 1, size=n)
        start = (life_rng.random(n) * (T - length + 1)).astype(np.int64)
        stop = start + length
    for t in range(T):
        rng = np.random.default_rng([int(seed), t])
        m_t = m
        if spatial_spread > 0:
            m_t = max(0, int(round(np.random.default_rng([int(seed), t, 1]).normal(m, spatial_spread * m))))
        if start is None:
            pairs = rng.integers(0, n, size=(2, m_t), dtype=np.int64)
        else:
            alive = np.flatnonzero((start <= t) & (t < stop))
            pairs = (alive[rng.integers(0, alive.shape[0], size=(2, m_t))] if alive.shape[0]
                     else np.zeros((2, 0), np.int64))
        keep = pairs[0] != pairs[1]  # self-loops removed: the GCN adds I itself (IBM §2)
        yield RawSnapshot(src=pairs[0][keep], dst=pairs[1][keep], time=(float(t), float(t + 1)))


def generate_dataset(
    output: str | Path,
    vertices: int,
    snapshots: int,
    density: float,
    seed: int,
    edge_life: int = 1,
    mtransform: int = 1,
    shard_size: int = 8,
    force: bool = False,
    spatial_spread: float = 0.0,
    temporal_spread: float = 0.0,
) -> Manifest:
    """Write an IBM §6.3 weak-scaling random dynamic graph to ``output``; return its manifest.

    Args:
        output: dataset directory to create.
        vertices: N >= 2.
        snapshots: T >= 1.
        density: f > 0, edges drawn per vertex per snapshot (the paper uses 3).
        seed: same arguments and seed give byte-identical shard contents.
        edge_life: IBM §5.4 edge-life l (1 = off).
        mtransform: IBM §5.3/§5.4 M-transform window w (1 = off).
        shard_size: snapshots per shard file.
        force: replace a non-empty ``output``.
        spatial_spread: DGC §7.3.1 δ (0 = uniform).
        temporal_spread: DGC §7.3.1 τ in [0, 1) (0 = uniform).

    Raises:
        DataError: on impossible sizes, naming ``output``.
    """
    if vertices < 2:
        raise DataError(f"{output}: --vertices must be >= 2 (got {vertices})")
    if snapshots < 1:
        raise DataError(f"{output}: --snapshots must be >= 1 (got {snapshots})")
    if not density > 0 or not np.isfinite(density):
        raise DataError(f"{output}: --density must be a positive number (got {density})")
    if not spatial_spread >= 0 or not np.isfinite(spatial_spread):
        raise DataError(f"{output}: --spatial-spread must be >= 0 (got {spatial_spread})")
    if not 0 <= temporal_spread < 1:
        raise DataError(f"{output}: --temporal-spread must be in [0, 1) (got {temporal_spread})")
    if not 0 <= seed < 2**63:  # numpy's seed sequences take non-negative integers
        raise DataError(f"{output}: --seed must be in [0, 2^63) (got {seed})")
    uniform = spatial_spread == 0 and temporal_spread == 0
    return write_dataset(
        output,
        random_snapshots(vertices, snapshots, density, seed, spatial_spread, temporal_spread),
        num_vertices=vertices,
        directed=True,
        weights="ones",
        edge_life=edge_life,
        mtransform_window=mtransform,
        shard_snapshots=shard_size,
        expected_snapshots=snapshots,
        source={
            "generator": "ibm-6.3-uniform" if uniform else "dgc-7.3.1-nonuniform",
            **({} if uniform else {"spatial_spread": float(spatial_spread), "temporal_spread": float(temporal_spread)}),
            "vertices": int(vertices),
            "snapshots": int(snapshots),
            "density": float(density),
            "seed": int(seed),
            "self_loops": "removed",
        },
        force=force,
    )


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``hpcdgnn generate`` options to ``parser``."""
    parser.description = (
        "Write a random dynamic graph for weak-scaling studies (IBM §6.3): each snapshot draws "
        "round(N*f) uniform vertex pairs independently; self-loops are dropped and duplicates collapse."
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="dataset directory to create")
    parser.add_argument("--vertices", type=int, required=True, metavar="N", help="number of vertices N")
    parser.add_argument("--snapshots", type=int, required=True, metavar="T", help="number of snapshots T")
    parser.add_argument("--density", type=float, required=True, metavar="f", help="edges per vertex per snapshot f")
    parser.add_argument("--seed", type=int, required=True, help="RNG seed >= 0 (snapshot t: default_rng([seed, t]))")
    parser.add_argument(
        "--edge-life", type=int, default=1, metavar="L", help="edge-life smoothing l (IBM §5.4; default 1 = off)"
    )
    parser.add_argument(
        "--mtransform", type=int, default=1, metavar="W", help="M-transform window w (IBM §5.4; default 1 = off)"
    )
    parser.add_argument("--shard-size", type=int, default=8, metavar="S", help="snapshots per shard file (default 8)")
    parser.add_argument("--spatial-spread", type=float, default=0.0, metavar="DELTA",
                        help="DGC §7.3.1: relative std of the edges per snapshot (default 0 = uniform)")
    parser.add_argument("--temporal-spread", type=float, default=0.0, metavar="TAU",
                        help="DGC §7.3.1: vertex lifetimes vary from (1-TAU)*T to T snapshots (default 0 = all T)")
    parser.add_argument("--force", action="store_true", help="replace a non-empty --output directory")


def run_generate(args: argparse.Namespace) -> int:
    """Run ``hpcdgnn generate`` from parsed arguments; print a one-line summary and return 0 (under ``mpirun``,
    rank 0 writes and the other ranks wait for it, as ``prepare``'s)."""
    from hpcdgnn.comm.world import world_rank_size
    from hpcdgnn.data.adapters import once_per_job

    t0 = time.perf_counter()
    m = once_per_job(generate_dataset)(
        args.output,
        vertices=args.vertices,
        snapshots=args.snapshots,
        density=args.density,
        seed=args.seed,
        edge_life=args.edge_life,
        mtransform=args.mtransform,
        shard_size=args.shard_size,
        force=args.force,
        spatial_spread=args.spatial_spread,
        temporal_spread=args.temporal_spread,
    )
    if world_rank_size()[0] != 0:  # rank 0 says what it wrote
        return 0
    size = sum(s.bytes for s in m.shards)
    print(
        f"generated {args.output}: N={m.num_vertices} T={m.num_snapshots} F={m.num_features} "
        f"edges={sum(m.snapshot_edges)} nnz={sum(m.snapshot_nnz)} "
        f"shards={len(m.shards)} ({size / 2**20:.1f} MiB) in {time.perf_counter() - t0:.1f}s"
    )
    return 0
