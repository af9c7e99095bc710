"""``prepare`` on a large SNAP edge list: wall seconds and peak resident memory, this checkout against another
(``--before``), with the two datasets compared file by file (hpcdgnn/data/prepare/snap.py's two readers).

    python perf/bench_prepare.py --events 10000000 --vertices 1000000 [--before DIR] [--snapshots 64]

Writes a ``src dst time`` file of uniform random edges (sorted integer times, raw seconds) under a temporary
directory, then runs ``python -m hpcdgnn prepare FILE --format snap --snapshots T`` once per tree, each in a fresh
process (its peak RSS from ``wait4``). Figures: perf/results/prepare-scale/.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def write_edges(path: Path, events: int, vertices: int, seed: int = 0) -> None:
    """``events`` lines ``src dst time``, ids uniform in [0, vertices), times sorted in [1e9, 1.1e9)."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(1_000_000_000, 1_100_000_000, events))
    with open(path, "w") as f:
        for lo in range(0, events, 1 << 20):
            hi = min(events, lo + (1 << 20))
            rows = np.stack([rng.integers(0, vertices, hi - lo), rng.integers(0, vertices, hi - lo), t[lo:hi]], 1)
            np.savetxt(f, rows, fmt="%d")


def run_prepare(tree: Path, src: Path, out: Path, snapshots: int) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``prepare`` run from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "hpcdgnn", "prepare", str(src), "--format", "snap", "--snapshots", str(snapshots),
           "--output", str(out)]
    t0 = time.perf_counter()
    # cwd: python -m puts it first on sys.path, before PYTHONPATH
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench_prepare: prepare from {tree} exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024


def same_files(a: Path, b: Path) -> bool:
    """Whether two dataset directories hold the same files, byte for byte."""
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return fa == fb and all(filecmp.cmp(a / p, b / p, shallow=False) for p in fa)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--vertices", type=int, default=1_000_000)
    ap.add_argument("--snapshots", type=int, default=64)
    ap.add_argument("--before", type=Path, help="another checkout (a git worktree) to run side by side")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp:
        src = Path(tmp) / "edges.txt"
        write_edges(src, args.events, args.vertices)
        print(f"{args.events} events, ids < {args.vertices}, {src.stat().st_size / 2**20:.0f} MiB of text; "
              f"prepare --format snap --snapshots {args.snapshots}")
        trees = [("this", REPO)] + ([("before", args.before.resolve())] if args.before else [])
        rows = []
        for name, tree in trees:
            wall, rss = run_prepare(tree, src, Path(tmp) / name, args.snapshots)
            rows.append((name, wall, rss))
            print(f"{name:>8}: {wall:7.1f} s  peak {rss:7.0f} MiB", flush=True)
        if args.before:
            (_, w0, r0), (_, w1, r1) = rows
            same = same_files(Path(tmp) / "this", Path(tmp) / "before")
            print(f"before / this: {w1 / w0:.2f}x the time, {r1 / r0:.2f}x the memory; datasets "
                  f"{'identical' if same else 'DIFFER'}")
            return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
