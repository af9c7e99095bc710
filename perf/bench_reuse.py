"""Reuse caches (SPEC R3, ReInc §3.1, §3.3) with incremental aggregation (R2): epoch time on vs off, and the
hit rate of the Eq. 3 priority policy against LRU at a cache of 10 % of the working set (issue 14).

    python perf/bench_reuse.py [--vertices 2048] [--snapshots 24] [--density 3] [--edge-life 10]
                               [--window 8] [--stride 1] [--batch-vertices 512] [--fanout 10]
                               [--model cdgcn] [--epochs 2] [--ranks 1] [--cache-fraction 0.1]

Generates an IBM §6.3 random graph with edge-life smoothing l (``python -m hpcdgnn generate
--edge-life``: about 2/l of the edges change from one snapshot to the next, 20 % at l = 10) and
runs ``strategy: sequences`` on it (windows of ``--window`` snapshots every ``--stride``, node
batches of ``--batch-vertices``, the last layer's ``--fanout`` neighbours sampled and the first
layer over full neighbourhoods — the case whose input aggregation Ã_t·X_t is shared by the
overlapping windows; link prediction, float32, one thread per rank), four times:

1. ``reuse: on, incremental: on`` with the default cache (256 MiB: everything fits);
2. ``reuse: off, incremental: off``: every sample aggregates its own first layer;
3. and 4. ``reuse: on`` with ``cache_mb`` = ``--cache-fraction`` of the working set that run 1
   reports (``reuse.working_set_bytes``: the distinct Ã_t·X_t one epoch reads), policy ``priority``
   then ``lru``.

Prints the median steady epoch time (slowest rank; the first epoch is warm-up) of 1 and 2 and their
ratio, the largest relative difference of their per-epoch losses (reuse never changes results), and
the steady epochs' hit rate, hits, misses, evictions and bypassed admissions of 3 and 4. Setup
(reading, normalising, R2's fill of the cache) is not in the epoch time. A benchmark measures; it
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import run_job  # noqa: E402

from hpcdgnn.data.generate import generate_dataset  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def run(work: Path, data: Path, P: int, args, tag: str, **strategy) -> tuple[float, list[dict]]:
    """One job; its median steady epoch time (slowest rank) and its records."""
    recs = run_job({
        "data": {"path": str(data), "validate": "structure"},
        "model": {"name": args.model, "hidden": 16, "layers": 2},
        "task": {"name": "link_prediction"},
        "train": {"epochs": args.epochs, "threads": 1, "dtype": "float32", "warmup_epochs": 1, "seed": 0},
        "strategy": {"name": "sequences", "window": args.window, "stride": args.stride,
                     "batch_vertices": args.batch_vertices, "fanouts": [args.fanout, 0], **strategy},
    }, P, work, tag, REPO)
    steady = [r for r in recs if not r["warmup"]] or recs[-1:]
    times = sorted(r["time"]["epoch"]["max"] for r in steady)
    return times[len(times) // 2], recs


def cache_line(name: str, recs: list[dict]) -> str:
    """Steady epochs' cache counters, summed."""
    steady = [r["reuse"] for r in recs if not r["warmup"]] or [recs[-1]["reuse"]]
    tot = {k: sum(r[k] for r in steady) for k in ("hits", "misses", "evictions", "bypassed", "expired")}
    rate = tot["hits"] / max(tot["hits"] + tot["misses"], 1)
    return (f"{name:9s} hit rate {100 * rate:5.1f} %   hits {tot['hits']:6d}  misses {tot['misses']:6d}  "
            f"evictions {tot['evictions']:6d}  bypassed {tot['bypassed']:6d}  expired {tot['expired']:6d}")


def main() -> None:
    """Generate, run the four jobs, print."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vertices", type=int, default=2048)
    ap.add_argument("--snapshots", type=int, default=24)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--edge-life", type=int, default=10, help="IBM §5.4 l; about 2/l of the edges change per step")
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--batch-vertices", type=int, default=512)
    ap.add_argument("--fanout", type=int, default=10, help="neighbours sampled per vertex for the last layer")
    ap.add_argument("--model", default="cdgcn")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per run; the first is warm-up")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--cache-fraction", type=float, default=0.1, help="cache size / working set for runs 3 and 4")
    args = ap.parse_args()
    P = args.ranks
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-bench-reuse-") as tmp:
        work = Path(tmp)
        data = work / "graph"
        t0 = time.perf_counter()
        m = generate_dataset(data, args.vertices, args.snapshots, args.density, seed=1, edge_life=args.edge_life)
        os.sync()
        print(f"graph: N={m.num_vertices} T={m.num_snapshots} F={m.num_features} density={args.density} "
              f"edge_life={args.edge_life} (generated in {time.perf_counter() - t0:.1f}s); {args.model}, window "
              f"{args.window} stride {args.stride}, batches of {args.batch_vertices}, fanouts [{args.fanout}, 0]; "
              f"P={P}, {args.epochs} epochs (first = warm-up), float32, 1 thread/rank", flush=True)
        on_s, on = run(work, data, P, args, "on", reuse="on", incremental="on")
        off_s, off = run(work, data, P, args, "off", reuse="off", incremental="off")
        diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(on, off))
        inc = on[-1].get("incremental", {})
        print(f"reuse+incremental on : {on_s:8.3f} s/epoch   (hit rate {100 * on[-1]['reuse']['hit_rate']:.1f} %; "
              f"R2 at setup: rows recomputed {inc.get('recomputed_fraction', float('nan')):.3f}, "
              f"{inc.get('fallbacks', 0)} snapshots from scratch above the threshold)")
        print(f"reuse+incremental off: {off_s:8.3f} s/epoch")
        print(f"ratio off/on: {off_s / on_s:.2f}x   max relative loss difference on vs off: {diff:.1e}", flush=True)
        ws = on[-1]["reuse"]["working_set_bytes"]
        mb = args.cache_fraction * ws / P / 2**20
        print(f"working set {ws / 2**20:.2f} MiB over {P} rank(s); cache_mb = {mb:.3f} per rank "
              f"({100 * args.cache_fraction:g} %)", flush=True)
        for policy in ("priority", "lru"):
            _, recs = run(work, data, P, args, f"cache-{policy}", reuse="on", cache_mb=mb, cache_policy=policy)
            print(cache_line(policy, recs), flush=True)


if __name__ == "__main__":
    main()
