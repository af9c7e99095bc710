"""Peak engine-held bytes and epoch time of a model with and without gradient-checkpoint blocks (SPEC S2, IBM §3.1).

    python perf/bench_memory.py [--vertices 65536] [--snapshots 64] [--density 3] [--blocks 1 4 16]
                                [--model tmgcn] [--ranks 1] [--epochs 3] [--repeat 1] [--data DIR]

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
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import generate_graph, mpirun_cmd, run_env  # noqa: E402

_MiB = 1024.0 * 1024.0


def run_blocks(work: Path, data: Path, args, nb: int, rep: int) -> tuple[dict, float]:
    """One run with ``strategy.blocks: nb``: its summary and its median steady epoch time (slowest rank)."""
    job = work / f"nb{nb}.yaml"
    job.write_text(yaml.safe_dump({
        "data": {"path": str(data)}, "model": {"name": args.model, "hidden": 16, "layers": 2},
        "strategy": {"name": "snapshot", "blocks": nb},
        "train": {"epochs": args.epochs, "threads": 1, "warmup_epochs": 1 if args.epochs > 1 else 0},
    }))
    out = work / f"run-nb{nb}-r{rep}"
    cmd = [*mpirun_cmd(args.ranks), sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env())
    if proc.returncode != 0:
        sys.exit(f"blocks={nb} failed:\n{proc.stdout}\n{proc.stderr}")
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = sorted(r["time"]["epoch"]["max"] for r in recs if not r["warmup"]) or [recs[-1]["time"]["epoch"]["max"]]
    summary = json.loads((out / "summary.json").read_text())
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-mem-") as tmp:
        work = Path(tmp)
        data = args.data if args.data is not None else work / "graph"
        if not (data / "manifest.json").exists():
            generate_graph(data, args.vertices, args.snapshots, args.density)
        print(f"{args.model}, N={args.vertices} T={args.snapshots} density={args.density}, P={args.ranks}, "
              f"{args.epochs} epochs (1 warm-up), 1 thread per rank, best of {args.repeat}; bytes of the largest rank")
        print(f"{'blocks':>6s} {'inputs MiB':>11s} {'activations MiB':>16s} {'engine peak MiB':>16s} "
              f"{'host MiB':>9s} {'moved MiB':>10s} {'peak RSS MiB':>13s} {'loss':>8s} "
              f"{'s/epoch':>8s} {'load s':>7s}")
        peaks, times = {}, {nb: float("inf") for nb in args.blocks}
        for rep in range(args.repeat):
            for nb in args.blocks:  # block counts in turn: a slow spell hits all of them alike
                s, t = run_blocks(work, data, args, nb, rep)
                times[nb] = min(times[nb], t)
                mem = s["memory"]
                peak = max(mem["engine_peak_bytes"])
                peaks[nb] = peak
                moved = s["final"]["transfer_bytes"]
                print(f"{nb:6d} {max(mem['engine_bytes']) / _MiB:11.1f} "
                      f"{max(mem['activation_peak_bytes']) / _MiB:16.1f} {peak / _MiB:16.1f} "
                      f"{max(mem['host_payload_bytes']) / _MiB:9.1f} {moved / _MiB:10.1f} "
                      f"{max(mem['peak_rss_bytes']) / _MiB:13.1f} {s['final']['loss']:8.4f} "
                      f"{t:8.3f} {s['_load_s']:7.3f}", flush=True)
        base = args.blocks[0]
        print(f"{'blocks':>6s} {'engine peak / nb=' + str(base):>20s} {'s/epoch':>8s} {'time / nb=' + str(base):>14s}")
        for nb in args.blocks:
            print(f"{nb:6d} {peaks[nb] / peaks[base]:20.3f} {times[nb]:8.3f} {times[nb] / times[base]:14.2f}")


if __name__ == "__main__":
    main()
