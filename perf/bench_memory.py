"""Peak engine-held bytes and epoch time of a model with and without gradient-checkpoint blocks (SPEC S2, IBM §3.1).

    python perf/bench_memory.py [--vertices 65536] [--snapshots 64] [--density 3] [--blocks 1 4 16]
                                [--model tmgcn] [--ranks 1] [--epochs 3] [--repeat 1] [--data DIR]
                                [--before REF] [--device cpu|cuda] [--transfer graph_difference base]

Generates an IBM §6.3 random graph once (or reuses ``--data``, writing it there
when missing), runs ``--epochs`` training epochs per block count
(``strategy.blocks``; one torch thread per rank; the first epoch is warm-up),
and prints, side by side, the bytes the engine held: device-held inputs
(without blocks: every normalised adjacency and the precomputed Ã·X; with
blocks: Ã·X plus the largest block's adjacencies, which are reloaded from host
memory per block, SPEC S3) plus the high-water mark of activations saved for
backward, counted per storage by ``hpcdgnn.metrics.memory.SavedTensorMeter``
(independent of the allocator). For reference: the encoded snapshots kept in
host memory, the bytes moved host -> device per epoch, and the process peak
RSS. Then the epoch time of each block count — the median of its steady
(non-warm-up) epochs, slowest rank; with ``--repeat`` > 1 the block counts are
run in turn in every repeat (so a slow spell on a shared machine hits them
alike) and the fastest repeat counts — with its ratio to the first block
count. The issue's targets: nb = 16 at most a quarter of nb = 1 in engine peak
and at most 1.4x its epoch time (IBM §3.1 trades one extra forward for memory).
With ``--before REF`` every run is made from that commit's tree too (``git
archive``, run through ``PYTHONPATH``), the two trees in turn within each
repeat, and each tree's rows and ratios are printed: before and after, side
by side in one run. ``--transfer`` runs each block count under each host-to-device transfer
(``strategy.transfer``, SPEC S3): its rows' moved MiB and load seconds are the transfer's bytes and time, on
``--device`` (a GPU's link where ``cuda``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import generate_graph, run_job  # noqa: E402
from bench_regression import export_tree  # noqa: E402

_MiB = 1024.0 * 1024.0


def run_blocks(work: Path, data: Path, args, nb: int, rep: int, tree: Path | None = None,
               name: str = "now", transfer: str = "graph_difference") -> tuple[dict, float]:
    """One run with ``strategy.blocks: nb`` and ``strategy.transfer: transfer`` (from ``tree``'s code when given):
    its summary and its median steady epoch time (slowest rank)."""
    tag = f"{name}-{transfer}-nb{nb}-r{rep}"
    recs = run_job({
        "data": {"path": str(data)}, "model": {"name": args.model, "hidden": 16, "layers": 2},
        "strategy": {"name": "snapshot", "blocks": nb, "transfer": transfer},
        "train": {"epochs": args.epochs, "threads": 1, "warmup_epochs": 1 if args.epochs > 1 else 0,
                  "device": args.device},
    }, args.ranks, work, tag, tree=tree)
    steady = sorted(r["time"]["epoch"]["max"] for r in recs if not r["warmup"]) or [recs[-1]["time"]["epoch"]["max"]]
    summary = json.loads((work / f"run-{tag}" / "summary.json").read_text())
    summary["_load_s"] = sorted(r["time"]["load"]["max"] for r in recs if not r["warmup"])[len(steady) // 2] \
        if len(recs) > 1 else recs[-1]["time"]["load"]["max"]
    return summary, steady[len(steady) // 2]


def main() -> None:
    """Generate, run each block count, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vertices", type=int, default=1 << 16)
    ap.add_argument("--snapshots", type=int, default=64)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--blocks", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--model", default="tmgcn")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is warm-up")
    ap.add_argument("--repeat", type=int, default=1, help="runs per block count, in turn; the fastest counts")
    ap.add_argument("--data", type=Path, default=None,
                    help="dataset directory to reuse (generated there when missing; must match the sizes)")
    ap.add_argument("--before", default=None, help="git commit whose tree runs too, in turn (optional)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="train.device of every run")
    ap.add_argument("--transfer", nargs="+", choices=["graph_difference", "base"], default=["graph_difference"],
                    help="strategy.transfer of the runs: each block count under each")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-mem-") as tmp:
        work = Path(tmp)
        data = args.data if args.data is not None else work / "graph"
        if not (data / "manifest.json").exists():
            generate_graph(data, args.vertices, args.snapshots, args.density)
        trees: list[tuple[str, Path | None]] = [("now", None)]
        if args.before:
            trees.insert(0, ("before", export_tree(args.before, work / "before")))
        print(f"{args.model}, N={args.vertices} T={args.snapshots} density={args.density}, P={args.ranks}, "
              f"{args.epochs} epochs (1 warm-up), 1 thread per rank, best of {args.repeat}, {args.device}; bytes of "
              "the largest rank" + (f"; before = {args.before}" if args.before else ""))
        print(f"{'tree':6s} {'transfer':>16s} {'blocks':>6s} {'inputs MiB':>11s} {'activations MiB':>16s} "
              f"{'engine peak MiB':>16s} {'host MiB':>9s} {'moved MiB':>10s} {'peak RSS MiB':>13s} {'loss':>8s} "
              f"{'s/epoch':>8s} {'load s':>7s}")
        keys = [(name, tr, nb) for name, _ in trees for tr in args.transfer for nb in args.blocks]
        peaks, times = {}, dict.fromkeys(keys, float("inf"))
        for rep in range(args.repeat):
            for name, tree in trees:
                for tr in args.transfer:
                    for nb in args.blocks:  # all in turn: a slow spell hits all of them alike
                        s, t = run_blocks(work, data, args, nb, rep, tree, name, tr)
                        times[name, tr, nb] = min(times[name, tr, nb], t)
                        mem = s["memory"]
                        peak = max(mem["engine_peak_bytes"])
                        peaks[name, tr, nb] = peak
                        moved = s["final"]["transfer_bytes"]
                        print(f"{name:6s} {tr:>16s} {nb:6d} {max(mem['engine_bytes']) / _MiB:11.1f} "
                              f"{max(mem['activation_peak_bytes']) / _MiB:16.1f} {peak / _MiB:16.1f} "
                              f"{max(mem['host_payload_bytes']) / _MiB:9.1f} {moved / _MiB:10.1f} "
                              f"{max(mem['peak_rss_bytes']) / _MiB:13.1f} {s['final']['loss']:8.4f} "
                              f"{t:8.3f} {s['_load_s']:7.3f}", flush=True)
        base = args.blocks[0], args.transfer[0]
        print(f"{'tree':6s} {'transfer':>16s} {'blocks':>6s} {'engine peak / first':>20s} {'s/epoch':>8s} "
              f"{'time / first':>14s}   (first: blocks={base[0]}, {base[1]})")
        for name, tr, nb in keys:
            first = name, base[1], base[0]
            print(f"{name:6s} {tr:>16s} {nb:6d} {peaks[name, tr, nb] / peaks[first]:20.3f} "
                  f"{times[name, tr, nb]:8.3f} {times[name, tr, nb] / times[first]:14.2f}")


if __name__ == "__main__":
    main()
