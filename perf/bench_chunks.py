"""Chunk generation time on rank 0 (DGC §4.1) and the load divergence of the assignment (§4.2, Alg. 1).

    python perf/bench_chunks.py [--vertices 32768 --snapshots 32 --density 3 | --data DIR]
                                [--max-size 4096] [--layers 2] [--hidden 16] [--ranks 2 4 8]
    python perf/bench_chunks.py --before REV [--vertices N --snapshots T --edges M | --data DIR]
                                [--hidden 6] [--ranks 4] [--repeat 3]

Builds the spatio-temporal super-graph of a generated IBM §6.3 graph (by
default about 10^6 vertex appearances: N = 2^15 vertices, nearly all active in
each of T = 32 snapshots) or of a dataset's raw edges, runs label propagation
with the model-aware weights (spatial: GCN layers × feature width = layers ×
hidden; temporal: RNN layers × hidden), then assigns the chunks to P ranks with
the vertex/edge-count workload model. Prints the time of each step, the chunk
sizes, the fraction of edge weight cut, and λ = T_max / T_min per P. The
issue's target: chunk generation for 10^6 appearances under 60 s here.

``--before REV`` times the whole plan instead, as rank 0 makes it for ``strategy:
chunk`` (``plan_chunks``: read the edges, super-graph, label propagation, chunk
statistics and workloads, Alg. 1, RNN owners, the appearance map), of revision REV
(a git commit of this repository, exported by ``git archive``) against this tree:
``--repeat`` rounds, each running both sides in fresh processes, which side goes
first alternating. The dataset is ``--data DIR`` or one written under a temporary
directory: ``--snapshots`` T of ``--edges`` M uniform random edges among
``--vertices`` N (seed 1; the tests' ``make_dataset``). The job: T-GCN, ``--layers``
L, ``--hidden`` H (2 and 6: spatial and temporal weights both 12), ``chunk_size: auto``,
P = the first of ``--ranks``. Printed per stage: the median wall and CPU (user +
system) seconds of each side, after / before, and whether the appearances' labels,
the chunks' ranks and the RNN owners are identical.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hpcdgnn.data.generate import random_snapshots  # noqa: E402
from hpcdgnn.partition.chunks import (  # noqa: E402
    assign_chunks,
    build_supergraph,
    chunk_stats,
    label_propagation,
    load_divergence,
)

REPO = Path(__file__).resolve().parents[1]
#: plan_chunks' steps, timed where chunk_plan calls them
STAGES = ("build_supergraph", "label_propagation", "chunk_stats", "assign_chunks", "assign_rnn_owners")
#: one timed plan in a fresh process: argv = tree, dataset, P, layers, hidden, output .npz; prints
#: {stage: [cpu, wall]}
PLAN_RUN = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
import hpcdgnn.partition.chunk_plan as cp
from hpcdgnn.config.load import load_job_dict
from hpcdgnn.data.manifest import load_manifest
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
seconds = {}
def timed(name, fn):
    def run(*a, **k):
        c, t = cpu(), time.perf_counter()
        out = fn(*a, **k)
        seconds[name] = [cpu() - c, time.perf_counter() - t]
        return out
    return run
for name in STAGES:
    setattr(cp, name, timed(name, getattr(cp, name)))
data, P = sys.argv[2], int(sys.argv[3])
job = load_job_dict({"data": {"path": data},
                     "model": {"name": "tgcn", "layers": int(sys.argv[4]), "hidden": int(sys.argv[5])},
                     "strategy": {"name": "chunk", "chunk_size": "auto"}}, "bench")
m = load_manifest(data)
plan = timed("plan_chunks", cp.plan_chunks)(m, P, job)
c = plan.chunks
keys = np.arange(m.num_snapshots * m.num_vertices)
np.savez(sys.argv[6], labels=c.appearances.label_of(keys), chunk_owner=c.chunk_owner, rnn_owner=c.rnn_owner)
print(json.dumps(seconds))
""".replace("STAGES", repr(STAGES))


def _uniform_dataset(root: Path, T: int, N: int, M: int) -> Path:
    """T snapshots of M uniform random edges among N vertices, as the tests' ``make_dataset`` (seed 1) writes."""
    from hpcdgnn.data.writer import RawSnapshot, write_dataset

    def snapshots():
        for t in range(T):
            rng = np.random.default_rng([1, t])
            s, d = rng.integers(0, N, M), rng.integers(0, N, M)
            lab = (rng.random(N) < 0.4).astype(np.int64)
            lab[rng.random(N) < 0.2] = -1
            yield RawSnapshot(s[s != d], d[s != d], labels=lab)

    write_dataset(root, snapshots(), num_vertices=N, num_classes=2, shard_snapshots=3)
    return root


def time_plans(args) -> None:
    """``--before``: plan_chunks of REV against this tree, fresh processes, sides alternating; print the table."""
    with tempfile.TemporaryDirectory(prefix="bench-chunks-") as tmp:
        work = Path(tmp)
        before = work / "before"
        before.mkdir()
        with open(work / "before.tar", "wb") as f:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.before], stdout=f,
                                     stderr=subprocess.PIPE, text=True)
        if archive.returncode:
            print(f"bench_chunks.py: --before {args.before}: not a revision of {REPO} "
                  f"({' '.join(archive.stderr.split())[:200]})", file=sys.stderr)
            sys.exit(2)
        with tarfile.open(work / "before.tar") as tar:
            tar.extractall(before, filter="data")
        data = Path(args.data) if args.data else _uniform_dataset(work / "data", args.snapshots, args.vertices,
                                                                   args.edges)
        P = args.ranks[0]
        sides = {"before": before, "after": REPO}
        runs: dict[str, list[dict]] = {side: [] for side in sides}
        for r in range(args.repeat):
            for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
                out = subprocess.run([sys.executable, "-c", PLAN_RUN, str(sides[side]), str(data), str(P),
                                      str(args.layers), str(args.hidden), str(work / f"{side}.npz")],
                                     capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"the {side} side's plan failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
                runs[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
        plans = {side: np.load(work / f"{side}.npz") for side in sides}
        same = {k: bool(np.array_equal(plans["before"][k], plans["after"][k]))
                for k in ("labels", "chunk_owner", "rnn_owner")}
    print(f"plan_chunks on {args.data or f'T={args.snapshots} N={args.vertices} M={args.edges} uniform'}, "
          f"P={P}, T-GCN {args.layers} x {args.hidden}; before {args.before}, after this tree; "
          f"medians of {args.repeat}")
    print(f"{'stage':18s} {'before wall':>11s} {'after wall':>10s} {'ratio':>6s} {'before cpu':>10s} "
          f"{'after cpu':>9s} {'ratio':>6s}")
    for stage in ("plan_chunks", *STAGES):
        b = np.median([run[stage] for run in runs["before"]], axis=0)
        a = np.median([run[stage] for run in runs["after"]], axis=0)
        print(f"{stage:18s} {b[1]:11.2f} {a[1]:10.2f} {a[1] / b[1]:6.2f} {b[0]:10.2f} {a[0]:9.2f} {a[0] / b[0]:6.2f}")
    print("identical: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items()))


def main() -> None:
    """Build, propagate, assign; print the figures (``--before``: time the plan against another revision)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vertices", type=int, default=1 << 15)
    ap.add_argument("--snapshots", type=int, default=32)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--data", help="a dataset directory instead of a generated graph (its raw edges)")
    ap.add_argument("--max-size", type=int, default=4096, help="largest chunk, in appearances")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, help="hidden width (default 16; --before: 6)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--before", help="time plan_chunks of this git revision against this tree")
    ap.add_argument("--edges", type=int, default=20000, help="--before: uniform random edges per snapshot")
    ap.add_argument("--repeat", type=int, default=3, help="--before: rounds (medians printed)")
    args = ap.parse_args()
    if args.before:
        args.hidden = 6 if args.hidden is None else args.hidden
        time_plans(args)
        return
    args.hidden = 16 if args.hidden is None else args.hidden
    t0 = time.perf_counter()
    if args.data:
        from hpcdgnn.data.manifest import load_manifest
        from hpcdgnn.data.shard_reader import ShardReader

        m = load_manifest(args.data)
        N = m.num_vertices
        with ShardReader(args.data, m) as r:
            snaps = [r.read_target(t) for t in range(m.num_snapshots)]
        name = args.data
    else:
        N = args.vertices
        snaps = [(s.src, s.dst) for s in random_snapshots(N, args.snapshots, args.density, 1)]
        name = f"IBM §6.3 graph N={N} T={args.snapshots} f={args.density}"
    g = build_supergraph(snaps, N, spatial_weight=args.layers * args.hidden, temporal_weight=args.hidden)
    t_build = time.perf_counter() - t0
    t1 = time.perf_counter()
    labels, iters = label_propagation(g, max_size=args.max_size)
    t_lpa = time.perf_counter() - t1
    stats = chunk_stats(g, labels)
    work = stats["nodes"] + stats["spatial_edges"]  # the vertex/edge-count workload model (§4.2 fallback)
    print(f"{name}: {g.num_nodes:,} appearances, {int(g.spatial.sum()):,} spatial and "
          f"{int((~g.spatial).sum()):,} temporal edges")
    cut = stats["cut_weight"] / stats["total_weight"]
    print(f"super-graph {t_build:.1f}s; label propagation {t_lpa:.1f}s ({iters} iterations) -> "
          f"{stats['num_chunks']:,} chunks, sizes min {stats['nodes'].min()} median {int(np.median(stats['nodes']))} "
          f"max {stats['nodes'].max()} (cap {args.max_size}); edge weight cut {cut:.3f}")
    verdict = "meets" if t_build + t_lpa < 60 else "does NOT meet"
    print(f"chunk generation {t_build + t_lpa:.1f}s: {verdict} the 60 s target")
    for P in args.ranks:
        t2 = time.perf_counter()
        owner = assign_chunks(work.astype(float), stats["cut_pairs"], P)
        print(f"P={P}: assignment {time.perf_counter() - t2:.1f}s, lambda = T_max/T_min = "
              f"{load_divergence(owner, work.astype(float), P):.3f} (vertex/edge-count workload)")


if __name__ == "__main__":
    main()
