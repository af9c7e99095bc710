"""Mini-batch sequences (ReInc R1/R4) beside full-batch training: traffic, activation memory, epoch time (issue 14).

    python perf/bench_sequences.py --data DIR [--ranks 1 2 3] [--model cdgcn] [--window 4]
                                   [--batch-vertices 1024] [--fanouts 10 5] [--epochs 3]

Runs, on one dataset, side by side in one invocation:

* ``strategy: sequences`` with ``placement: overlap`` and with ``fetch`` at every ``--ranks``
  (one thread per rank; ranks beyond the cores are oversubscribed, so their times are not
  scaling figures) — training bytes per epoch by tag (ReInc Table 1: with overlap only the
  gradient all-reduce and the per-step example count move; with fetch the window's snapshots);
* the full-batch ``snapshot`` strategy at P = 1 on the same graph and model — the activation
  peak (``activation_peak_bytes``: tensors saved for the backward pass) of one mini-batch step
  against the full batch, and the epoch times.

Prints one row per run; a benchmark measures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import run_job  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def run(work: Path, data: Path, P: int, strategy: dict, args, tag: str) -> dict:
    """One job; its steady epochs' mean bytes by tag, median epoch time, activation peak and final val metric."""
    recs = run_job({
        "data": {"path": str(data), "validate": "structure"},
        "model": {"name": args.model, "hidden": 16, "layers": 2},
        "task": {"name": "link_prediction"},
        "train": {"epochs": args.epochs, "threads": 1, "dtype": "float32", "warmup_epochs": 1, "seed": 0},
        "strategy": strategy,
    }, P, work, tag, REPO)
    steady = recs[1:] or recs
    tags: dict[str, float] = {}
    for r in steady:
        for k, v in r["bytes_by_tag"].items():
            tags[k] = tags.get(k, 0.0) + v / len(steady)
    times = sorted(r["time"]["epoch"]["max"] for r in steady)
    return {"tags": tags, "epoch": times[len(times) // 2], "peak": max(r["activation_peak_bytes"] for r in recs),
            "val_auc": recs[-1].get("val_auc")}


def main() -> None:
    """Run every configuration and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--model", default="cdgcn")
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--batch-vertices", type=int, default=1024)
    ap.add_argument("--fanouts", type=int, nargs="*", default=[10, 5])
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    seq = {"name": "sequences", "window": args.window, "batch_vertices": args.batch_vertices,
           "fanouts": list(args.fanouts)}
    kib = 1024.0
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-seq-") as tmp:
        work = Path(tmp)
        print(f"{args.data}: {args.model}, window {args.window}, batch {args.batch_vertices} vertices, fanouts "
              f"{args.fanouts}; {args.epochs} epochs (first left out); KiB per epoch over all ranks")
        print(f"{'strategy':26s} {'P':>2s} {'s/epoch':>8s} {'act. peak MiB':>13s} {'val AUC':>8s}  bytes by tag (KiB)")
        full = run(work, args.data, 1, {"name": "snapshot"}, args, "snapshot-p1")
        print(f"{'snapshot (full batch)':26s} {1:2d} {full['epoch']:8.3f} {full['peak'] / 2**20:13.2f} "
              f"{full['val_auc'] or float('nan'):8.4f}  -", flush=True)
        for placement in ("overlap", "fetch"):
            for P in args.ranks:
                r = run(work, args.data, P, {**seq, "placement": placement}, args, f"{placement}-p{P}")
                tags = ", ".join(f"{k} {v / kib:.1f}" for k, v in sorted(r["tags"].items())) or "none"
                print(f"{'sequences ' + placement:26s} {P:2d} {r['epoch']:8.3f} {r['peak'] / 2**20:13.2f} "
                      f"{r['val_auc'] or float('nan'):8.4f}  {tags}  (peak {r['peak'] / max(full['peak'], 1):.3f}"
                      " of full batch)", flush=True)


if __name__ == "__main__":
    main()
