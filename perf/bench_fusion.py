"""Chunk fusion (DGC §5.1): rows loaded and time saved by spatial fusion, padding saved by temporal fusion.

    python perf/bench_fusion.py [--vertices 8192 --snapshots 16 | --data DIR] [--ranks 2] [--chunk-size 64]
                                [--memory-mb 0.5 4 512 auto] [--epochs 4] [--repeat 5]

Spatial fusion: the chunk strategy at P ranks with ``strategy.fusion: off``
(chunk by chunk, DGC's default) and ``on`` at several memory caps, side by
side: chunks and fused groups per run, rows read per aggregation (the
"loading" DGC Fig. 15a measures), epoch seconds and the last loss (identical
up to float order: fusion does not change what is computed).

Temporal fusion in training: the chunk strategy with ``strategy.sequences:
active`` (each vertex's time encoder over its active appearances), ``fusion``
off (padded to the longest) and on (packed, Eq. 4–5 masks): time-encoder
slots, epoch seconds, loss.

Temporal fusion alone: the dataset's *active runs* — maximal stretches of
consecutive snapshots in which a vertex has an edge, DGC Fig. 9a's sequences
of different lengths — batched padded to the longest (Fig. 9b) and packed by
:func:`~hpcdgnn.nn.temporal_fusion.pack_sequences` (Fig. 9c): slots, and the
seconds of a one-layer GRU over each (padded: ``torch.nn.GRU``; packed:
:func:`~hpcdgnn.nn.temporal_fusion.fused_gru` with the Eq. 4 mask). The GRU runs on one torch thread (as every
rank of the runs above, ``train.threads: 1``), the two sides timed by :func:`bench_kernels.time_calls`: two
untimed calls a side (the first allocates the buffers and picks the kernels), then ``--repeat`` samples a side,
the sides alternating call by call so that a slow spell of a shared machine falls on both; medians.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import generate_graph  # noqa: E402
from bench_kernels import time_calls  # noqa: E402
from compare_strategies import run  # noqa: E402

from hpcdgnn.nn.temporal_fusion import fused_gru, pack_sequences  # noqa: E402


def active_runs(data: Path) -> np.ndarray:
    """Lengths of every vertex's maximal runs of consecutive active snapshots."""
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.shard_reader import ShardReader

    m = load_manifest(data)
    active = np.zeros((m.num_snapshots + 1, m.num_vertices), dtype=bool)
    with ShardReader(data, m) as r:
        for t in range(m.num_snapshots):
            s, d = r.edges(t)
            keep = s != d
            active[t, s[keep]] = active[t, d[keep]] = True
    change = np.diff(np.vstack([np.zeros((1, m.num_vertices), bool), active]).astype(np.int8), axis=0)
    starts, ends = np.nonzero(change.T == 1), np.nonzero(change.T == -1)  # per vertex, in time order
    return (ends[1] - starts[1]).astype(np.int64)


def temporal(data: Path, width: int, repeat: int = 5) -> dict[str, float]:
    """Padded against packed slots and GRU seconds over the dataset's active runs; the two sides' median seconds.

    One torch thread (restored after), the sides alternating call by call after two untimed calls each
    (:func:`bench_kernels.time_calls`): torch's default thread count and a first call that allocates made the
    ratio noise on a loaded machine (padded/packed 327.66 once)."""
    lengths = active_runs(data)
    p = pack_sequences(lengths)
    padded = lengths.shape[0] * p.steps
    torch.manual_seed(0)
    gru = torch.nn.GRU(width, width)
    x_pad = torch.randn(p.steps, lengths.shape[0], width)
    x_pack = torch.randn(p.steps, p.lanes, width)
    mask = p.reset_mask()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            timed = time_calls({"padded": lambda: gru(x_pad), "packed": lambda: fused_gru(gru, x_pack, mask)},
                               lambda: (), repeat)
    finally:
        torch.set_num_threads(threads)
    t_pad, t_pack = timed["padded"][0], timed["packed"][0]
    print(f"\ntemporal fusion over {lengths.shape[0]} active runs (mean length {lengths.mean():.2f}, "
          f"longest {p.steps}), width {width}:")
    print(f"  padded {padded} slots ({lengths.shape[0]} lanes)   packed {p.lanes * p.steps} slots ({p.lanes} lanes)"
          f"   padded/packed {padded / max(p.lanes * p.steps, 1):.2f}")
    print(f"  GRU seconds, 1 thread, sides alternating, median of {repeat}: padded (torch.nn.GRU) {t_pad:.4f}   "
          f"packed (fused_gru, Eq. 4 mask) {t_pack:.4f}   padded/packed {t_pad / t_pack:.2f}")
    return {"padded": t_pad, "packed": t_pack}


def _cap(text: str) -> float | str:
    """A ``--memory-mb`` value: a number of MiB, or ``auto``."""
    return text if text == "auto" else float(text)


def main() -> None:
    """Spatial fusion runs side by side, then temporal fusion's padding."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="a prepared dataset directory (default: a generated graph)")
    ap.add_argument("--vertices", type=int, default=8192)
    ap.add_argument("--snapshots", type=int, default=16)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--spatial-spread", type=float, default=0.0)
    ap.add_argument("--temporal-spread", type=float, default=0.0)
    ap.add_argument("--model", default="tgcn")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2])
    ap.add_argument("--chunk-size", type=int, default=64)
    ap.add_argument("--memory-mb", type=_cap, nargs="+", default=[0.5, 4.0, 512.0, "auto"],
                    help="caps of the fused runs, MiB or auto (the default cap: the device memory a rank may use)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5,
                    help="timed samples a side of the GRU over the active runs (sides alternating; medians)")
    args = ap.parse_args()
    if args.repeat < 1:  # refused before the spatial runs: at 0 they ran, then the GRU's medians printed nan
        ap.error(f"--repeat {args.repeat}: the GRU's medians need at least one sample a side (>= 1)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = Path(args.data) if args.data else work / "graph"
        if not args.data:
            generate_graph(data, args.vertices, args.snapshots, args.density, args.spatial_spread,
                           args.temporal_spread)
        print(f"spatial fusion, chunk strategy, {args.model}, chunk_size {args.chunk_size}, data {data.name}")
        print(f"{'P':>3} {'fusion':>12} {'chunks':>8} {'groups':>8} {'rows read':>10} {'vs off':>7} "
              f"{'epoch s':>8} {'vs off':>7} {'loss':>12}")
        for P in args.ranks:
            runs = [("off", {"fusion": "off"})] + [
                ("on auto" if mb == "auto" else f"on {mb:g} MiB", {"fusion": "on", "fusion_memory_mb": mb})
                for mb in args.memory_mb
            ]
            base = None
            for label, keys in runs:
                r = run(work, data, args.model, "chunk", P, args.epochs, "range", args.chunk_size,
                        label=label.replace(" ", ""), **keys)
                f = r["record"]["fusion"]
                base = base or r
                print(f"{P:>3} {label:>12} {f['chunks']:>8} {f['groups']:>8} {f['rows_loaded']:>10} "
                      f"{f['rows_loaded'] / base['record']['fusion']['rows_loaded']:>7.3f} {r['epoch']:>8.3f} "
                      f"{r['epoch'] / base['epoch']:>7.3f} {r['loss']:>12.8f}")
            print(f"\ntemporal fusion in training (strategy.sequences: active), {args.model}:")
            print(f"{'P':>3} {'fusion':>8} {'time slots':>11} {'padded':>8} {'ratio':>6} {'epoch s':>8} {'vs off':>7}"
                  f" {'loss':>12}")
            base = None
            for fusion in ("off", "on"):
                r = run(work, data, args.model, "chunk", P, args.epochs, "range", args.chunk_size,
                        label=f"active{fusion}", sequences="active", fusion=fusion)
                f = r["record"]["fusion"]
                base = base or r
                print(f"{P:>3} {fusion:>8} {f['time_slots']:>11} {f['time_slots_padded']:>8} "
                      f"{f['time_slots_padded'] / max(f['time_slots'], 1):>6.2f} {r['epoch']:>8.3f} "
                      f"{r['epoch'] / base['epoch']:>7.3f} {r['loss']:>12.8f}")
        temporal(data, 16, args.repeat)


if __name__ == "__main__":
    main()
