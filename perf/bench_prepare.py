"""``prepare`` on a large SNAP edge list or JODIE csv: wall seconds and peak resident memory, this checkout against
another (``--before``), with the two datasets compared file by file (the two readers of hpcdgnn/data/prepare/snap.py
and jodie.py).

    python perf/bench_prepare.py --events 10000000 --vertices 1000000 [--before DIR] [--snapshots 64]
    python perf/bench_prepare.py --format jodie --events 157474 --features 172 [--before DIR] [--repeat 3]

snap: writes a ``src dst time`` file of uniform random edges (sorted integer times, raw seconds) under a temporary
directory, then runs ``python -m hpcdgnn prepare FILE --format snap --snapshots T``. jodie: writes a JODIE csv
(``user_id,item_id,timestamp,state_label,...``: ``--users`` users, ``--items`` items, sorted float times, labels 0/1,
``--features`` features ``%.6f`` as wikipedia's and reddit's), then runs ``prepare --format jodie --kind snapshots
--snapshots T --labels state`` and ``--kind events`` (``--kind`` picks one). Each run is a fresh process (its peak
RSS from ``wait4``); with ``--before``, the two trees alternate ``--repeat`` times and the medians are reported.
Figures: perf/results/prepare-scale/.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import statistics
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


def write_jodie(path: Path, events: int, features: int, users: int, items: int, seed: int = 0) -> None:
    """A JODIE csv of ``events`` rows ``user,item,time,label,f_1..f_D``: ids uniform, times sorted floats (whole
    seconds, as wikipedia's ``36.0``), 1 % labels 1, normal features printed ``%.6f`` (4,096 feature lines, reused:
    formatting each would take longer than the runs)."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, 2_700_000, events)).astype(np.float64).tolist()
    lines = 1 << 12
    feats = [",".join(f"{x:.6f}" for x in row) for row in rng.normal(size=(lines, features))]
    with open(path, "w") as f:
        f.write("user_id,item_id,timestamp,state_label,comma_separated_list_of_features\n")
        for lo in range(0, events, 1 << 16):
            hi = min(events, lo + (1 << 16))
            u, i = rng.integers(0, users, hi - lo).tolist(), rng.integers(0, items, hi - lo).tolist()
            label = (rng.random(hi - lo) < 0.01).astype(int).tolist()
            f.write("".join(f"{u[k]},{i[k]},{t[lo + k]!r},{label[k]}" + ("," + feats[(lo + k) % lines] if features
                                                                        else "") + "\n" for k in range(hi - lo)))


def run_prepare(tree: Path, src: Path, out: Path, options: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``prepare SRC OPTIONS`` run from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, "-m", "hpcdgnn", "prepare", str(src), *options, "--output", str(out), "--force"]
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


def compare(tmp: Path, src: Path, options: list[str], trees: list[tuple[str, Path]], repeat: int) -> bool:
    """Run ``prepare SRC OPTIONS`` from each tree, alternating, ``repeat`` times; print the medians; whether the
    trees' datasets are identical (always True for one tree)."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in trees}
    for k in range(repeat):
        for name, tree in trees if k % 2 == 0 else trees[::-1]:
            runs[name].append(run_prepare(tree, src, tmp / name, options))
    med = {name: (statistics.median(w for w, _ in r), statistics.median(m for _, m in r)) for name, r in runs.items()}
    for name, (wall, rss) in med.items():
        print(f"{name:>8}: {wall:7.1f} s  peak {rss:7.0f} MiB", flush=True)
    if len(trees) == 1:
        return True
    (w0, r0), (w1, r1) = med["this"], med["before"]
    same = same_files(tmp / "this", tmp / "before")
    print(f"before / this: {w1 / w0:.2f}x the time, {r1 / r0:.2f}x the memory; datasets "
          f"{'identical' if same else 'DIFFER'}", flush=True)
    return same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", choices=("snap", "jodie"), default="snap")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--vertices", type=int, default=1_000_000, help="snap: ids in [0, vertices)")
    ap.add_argument("--features", type=int, default=172, help="jodie: feature columns (wikipedia's and reddit's)")
    ap.add_argument("--users", type=int, default=10_000, help="jodie: user ids in [0, users)")
    ap.add_argument("--items", type=int, default=1_000, help="jodie: item ids in [0, items)")
    ap.add_argument("--kind", choices=("snapshots", "events"), help="jodie: one kind only (default both)")
    ap.add_argument("--snapshots", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1, help="runs per tree (alternating; medians reported)")
    ap.add_argument("--before", type=Path, help="another checkout (a git worktree) to run side by side")
    args = ap.parse_args(argv)
    trees = [("this", REPO)] + ([("before", args.before.resolve())] if args.before else [])
    same = True
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp:
        if args.format == "snap":
            src = Path(tmp) / "edges.txt"
            write_edges(src, args.events, args.vertices)
            print(f"{args.events} events, ids < {args.vertices}, {src.stat().st_size / 2**20:.0f} MiB of text; "
                  f"prepare --format snap --snapshots {args.snapshots}")
            return 0 if compare(Path(tmp), src, ["--format", "snap", "--snapshots", str(args.snapshots)], trees,
                                args.repeat) else 1
        src = Path(tmp) / "interactions.csv"
        write_jodie(src, args.events, args.features, args.users, args.items)
        print(f"{args.events} events x {args.features} features, {args.users} users, {args.items} items, "
              f"{src.stat().st_size / 2**20:.0f} MiB of text; prepare --format jodie", flush=True)
        kinds = {"snapshots": ["--snapshots", str(args.snapshots), "--labels", "state"], "events": []}
        for kind, options in kinds.items():
            if args.kind in (None, kind):
                print(f"--kind {kind} {' '.join(options)}".rstrip())
                same &= compare(Path(tmp), src, ["--format", "jodie", "--kind", kind, *options], trees, args.repeat)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
