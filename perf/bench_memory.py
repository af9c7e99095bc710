"""Peak engine-held bytes of TM-GCN with and without gradient-checkpoint blocks (SPEC S2, IBM §3.1).

    python perf/bench_memory.py [--vertices 65536] [--snapshots 128] [--density 3] [--blocks 1 16]
                                [--model tmgcn] [--ranks 1]

Generates an IBM §6.3 random graph once, runs one training epoch per block
count (``strategy.blocks``) and prints, side by side, the bytes the engine held:
device-held inputs (without blocks: every normalised adjacency and the
precomputed Ã·X; with blocks: Ã·X plus the largest block's adjacencies, which
are reloaded from host memory per block, SPEC S3) plus the high-water mark of
activations saved for backward, counted per storage by
``hpcdgnn.metrics.memory.SavedTensorMeter`` (independent of the allocator).
For reference: the encoded snapshots kept in host memory, the bytes moved
host -> device in the epoch, and the process peak RSS. The issue's target:
nb = 16 at most a quarter of nb = 1.
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


def main() -> None:
    """Generate, run each block count, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vertices", type=int, default=1 << 16)
    ap.add_argument("--snapshots", type=int, default=128)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--blocks", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--model", default="tmgcn")
    ap.add_argument("--ranks", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-mem-") as tmp:
        work = Path(tmp)
        data = work / "graph"
        generate_graph(data, args.vertices, args.snapshots, args.density)
        print(f"{args.model}, N={args.vertices} T={args.snapshots} density={args.density}, P={args.ranks}, "
              "1 epoch; bytes of the largest rank")
        print(f"{'blocks':>6s} {'inputs MiB':>11s} {'activations MiB':>16s} {'engine peak MiB':>16s} "
              f"{'host MiB':>9s} {'moved MiB':>10s} {'peak RSS MiB':>13s} {'loss':>8s}")
        peaks = {}
        for nb in args.blocks:
            job = work / f"nb{nb}.yaml"
            job.write_text(yaml.safe_dump({
                "data": {"path": str(data)}, "model": {"name": args.model, "hidden": 16},
                "strategy": {"name": "snapshot", "blocks": nb},
                "train": {"epochs": 1, "threads": 1},
            }))
            out = work / f"run-nb{nb}"
            cmd = [*mpirun_cmd(args.ranks), sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(out)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env())
            if proc.returncode != 0:
                sys.exit(f"blocks={nb} failed:\n{proc.stdout}\n{proc.stderr}")
            s = json.loads((out / "summary.json").read_text())
            mem = s["memory"]
            peak = max(mem["engine_peak_bytes"])
            peaks[nb] = peak
            print(f"{nb:6d} {max(mem['engine_bytes']) / _MiB:11.1f} {max(mem['activation_peak_bytes']) / _MiB:16.1f} "
                  f"{peak / _MiB:16.1f} {max(mem['host_payload_bytes']) / _MiB:9.1f} "
                  f"{s['final']['transfer_bytes'] / _MiB:10.1f} "
                  f"{max(mem['peak_rss_bytes']) / _MiB:13.1f} {s['final']['loss']:8.4f}", flush=True)
        base = peaks[args.blocks[0]]
        for nb in args.blocks[1:]:
            print(f"engine peak nb={nb} / nb={args.blocks[0]}: {peaks[nb] / base:.3f}")


if __name__ == "__main__":
    main()
