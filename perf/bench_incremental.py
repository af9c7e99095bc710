"""Incremental aggregation (SPEC R2, ReInc §3.2 Eq. 2) against aggregation from scratch over one window.

    python perf/bench_incremental.py [--vertices 32768] [--window 16] [--density 3] [--edge-life 10]
                                     [--dim 16] [--kinds sum mean gcn] [--threshold 0.5]
                                     [--rows 1.0] [--feature-change 0.0] [--repeat 3] [--threads 1]

Writes an IBM §6.3 random dynamic graph with ``python -m hpcdgnn generate``'s
generator and edge-life smoothing l (IBM §5.4: A_t sums the raw draws of
snapshots t−l+1..t, so about 2/l of the edges change from one snapshot to the
next) into a temporary directory, with ``l − 1`` warm-up snapshots before the
window so every snapshot of the window is in the smoothing's steady state. It
reads the last ``--window`` snapshots and, for each aggregation kind, prints:

* ``build``: building the structure once (``M_t[R, :]``, row scales and the
  structural deltas), which a strategy reuses across layers and epochs;
* ``scratch``: ``Agg_t = F_t *_aggr G_t`` for every t (Eq. 1), one CSR product each;
* ``incremental``: Eq. 2 with the change-ratio fallback at ``--threshold``;
* their ratio, the recomputed fraction, the work fraction (matrix entries
  multiplied / entries from scratch), the fallback steps, and the largest
  relative difference between the two results.

Times are medians of ``--repeat`` passes over the window after one untimed pass, float32, with
``--threads`` torch threads. Features are one (N, d) matrix for the whole window
(layer-0 input features) unless ``--feature-change`` p > 0, which gives every
snapshot its own matrix with a fraction p of the rows changed. It measures and
prints; it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from hpcdgnn.data.generate import generate_dataset
from hpcdgnn.data.graph_diff import CSRSnapshot
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.nn.conv.incremental import IncrementalAggregator


def median_time(fn, repeat: int) -> float:
    """Median wall time of ``fn()`` over ``repeat`` calls after one untimed call, in ms. Why the untimed call: the
    first product of a matrix pays one-off costs (its pages, torch's sparse set-up), 30x a steady pass on a small
    window, and from-scratch is timed first, so with ``--repeat`` 1 or 2 it alone would carry them."""
    fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs) * 1e3


def main() -> None:
    """Generate, read, time from scratch vs incremental per kind, print."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vertices", type=int, default=2**15, help="N")
    ap.add_argument("--window", type=int, default=16, help="L, snapshots in the window")
    ap.add_argument("--density", type=float, default=3.0, help="edges drawn per vertex per raw snapshot (IBM f)")
    ap.add_argument("--edge-life", type=int, default=10,
                    help="edge-life l (IBM §5.4); about 2/l of the edges change per step")
    ap.add_argument("--dim", type=int, default=16, help="feature width d")
    ap.add_argument("--kinds", nargs="+", default=["sum", "mean", "gcn"], choices=["sum", "mean", "gcn"])
    ap.add_argument("--threshold", type=float, default=0.5, help="incremental_threshold (change ratio)")
    ap.add_argument("--rows", type=float, default=1.0, help="fraction of the rows aggregated (random subset)")
    ap.add_argument("--feature-change", type=float, default=0.0, help="fraction of feature rows changed per step")
    ap.add_argument("--repeat", type=int, default=3, help="timing passes; the median counts")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n, L, life = args.vertices, args.window, args.edge_life

    with tempfile.TemporaryDirectory(prefix="hpcdgnn-bench-incremental-") as tmp:
        out = Path(tmp) / "data"
        t0 = time.perf_counter()
        m = generate_dataset(out, n, L + life - 1, args.density, args.seed, edge_life=life)
        gen = time.perf_counter() - t0
        with ShardReader(out, load_manifest(out)) as reader:
            snaps = [CSRSnapshot.from_snapshot(reader.read(t)) for t in range(life - 1, m.num_snapshots)]
    nnz = [s.nnz for s in snaps]
    print(
        f"graph: N={n} window L={L} density={args.density} edge_life={life} (generated in {gen:.1f}s); "
        f"nnz/snapshot mean {np.mean(nnz):.0f}; d={args.dim} float32, threads={torch.get_num_threads()}, "
        f"rows={args.rows:g}, feature_change={args.feature_change:g}, threshold={args.threshold:g}"
    )

    rng = np.random.default_rng(args.seed)
    rows = None if args.rows >= 1.0 else np.sort(rng.choice(n, int(args.rows * n), replace=False))
    feats = torch.from_numpy(rng.standard_normal((n, args.dim)).astype(np.float32))
    if args.feature_change > 0:
        fs = [feats]
        for _ in range(L - 1):
            f = fs[-1].clone()
            idx = rng.choice(n, int(args.feature_change * n), replace=False)
            f[idx] = torch.from_numpy(rng.standard_normal((idx.shape[0], args.dim)).astype(np.float32))
            fs.append(f)
        feats = fs

    print(
        f"{'kind':>5} {'build ms':>9} {'scratch ms':>11} {'incr ms':>9} {'scratch/incr':>12} "
        f"{'recomputed':>10} {'work':>6} {'fallbacks':>9} {'mean rho':>8} {'max rel diff':>12}"
    )
    with torch.no_grad():
        for kind in args.kinds:
            t0 = time.perf_counter()
            agg = IncrementalAggregator(snaps, kind, rows=rows, threshold=args.threshold, dtype=torch.float32)
            build = (time.perf_counter() - t0) * 1e3
            scratch_ms = median_time(lambda: agg.aggregate_from_scratch(feats), args.repeat)
            inc_ms = median_time(lambda: agg.aggregate(feats), args.repeat)
            ref = agg.aggregate_from_scratch(feats)
            res, st = agg.aggregate(feats)
            diff = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
                       for a, b in zip(res, ref, strict=True))
            rho = np.mean([s.change_ratio for s in st.steps[1:]]) if L > 1 else 0.0
            print(
                f"{kind:>5} {build:9.1f} {scratch_ms:11.1f} {inc_ms:9.1f} {scratch_ms / inc_ms:11.2f}x "
                f"{st.recomputed_fraction:10.3f} {st.work_fraction:6.3f} {st.fallbacks:>4}/{L - 1:<4} "
                f"{rho:8.3f} {diff:12.2e}"
            )


if __name__ == "__main__":
    main()
