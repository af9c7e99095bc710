"""DGC's workload predictor (§4.2, §6, §7.4): held-out MAPE, and the load divergence λ each workload model gives.

    python perf/bench_workload.py [--model cdgcn --features 2 --hidden 16 --layers 2]
                                  [--predictor PATH | --samples 600]
                                  [--vertices 4096 --snapshots 32 --density 3 | --data DIR]
                                  [--max-size 512] [--ranks 2 4 8] [--threads 1]

1. The predictor: loaded from ``--predictor`` when that file exists, else profiled
   here as ``python -m hpcdgnn profile`` does (random chunks of a generated
   non-uniform graph, 20% held out) and saved there if a path was given. Prints
   the held-out MAPE (DGC Eq. 8) of the structure-encoder MLP, the time-encoder
   MLP and their sum.
2. A graph to partition: DGC §7.3.1's non-uniform generated graph (δ = τ = 0.5)
   or a dataset's adjacencies (``--data``), made into chunks exactly as
   ``strategy: chunk`` plans (model-aware weights, label propagation with the
   ``--max-size`` cap). Every chunk is then *run*: each layer's structure and
   time encoder, forward and backward, best of ``--repeats`` — the ground truth.
3. The predictor's MAPE on these chunks (all layers, not seen in profiling), next
   to the count model's after its best single scale factor (counts are not seconds).
4. Per P: Alg. 1 assigns the chunks with the count workload, with the MLP
   workload, and (a bound) with the measured times themselves; λ = T_max / T_min
   (DGC §2.2.2) of the summed *measured* chunk times per rank for each (chunks
   run one by one, as DGC runs them without fusion), λ when each rank's chunks
   instead run as one batch (as ``strategy: chunk`` computes a rank's rows: no
   per-chunk overhead, which the count model ignores and the MLPs learned), and
   the edge weight each assignment cuts between ranks (Eq. 3's other term).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hpcdgnn.nn.models import build_model  # noqa: E402
from hpcdgnn.partition.chunks import (  # noqa: E402
    assign_chunks,
    build_supergraph,
    chunk_stats,
    label_propagation,
    load_divergence,
)
from hpcdgnn.partition.workload import CountWorkload, MLPWorkload, chunk_features, layer_shapes  # noqa: E402
from hpcdgnn.profile import ChunkTimer, detached_time_params, mape, profile, profile_graph  # noqa: E402


def _graph(args) -> tuple[list, int, int, str]:
    """(snapshots as (src, dst), N, F, name) of the graph to partition."""
    if args.data:
        from hpcdgnn.data.manifest import load_manifest
        from hpcdgnn.data.shard_reader import ShardReader

        m = load_manifest(args.data)
        with ShardReader(args.data, m) as r:
            snaps = [r.edges(t) for t in range(m.num_snapshots)]
        return snaps, m.num_vertices, m.num_features, args.data
    from hpcdgnn.data.generate import random_snapshots

    snaps = [(s.src, s.dst) for s in random_snapshots(args.vertices, args.snapshots, args.density, args.seed + 1,
                                                      args.spatial_spread, args.temporal_spread)]
    name = (f"generated N={args.vertices} T={args.snapshots} f={args.density} "
            f"δ={args.spatial_spread} τ={args.temporal_spread}")
    return snaps, args.vertices, args.features, name


def _cross_weight(owner: np.ndarray, cut_pairs) -> float:
    """Super-graph weight between chunks on different ranks (the traffic Eq. 3's affinity term avoids)."""
    a, b, h = cut_pairs
    return float(h[owner[a] != owner[b]].sum())


def main() -> None:
    """Profile or load, chunk, measure, assign; print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="cdgcn")
    ap.add_argument("--features", type=int, default=2, help="F of a generated graph (a dataset has its own)")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--predictor", help="load this predictor (profile and save it there when missing)")
    ap.add_argument("--samples", type=int, default=600, help="profiled random chunks when profiling here")
    ap.add_argument("--profile-max-size", type=int, default=4096, help="largest profiled chunk")
    ap.add_argument("--vertices", type=int, default=4096)
    ap.add_argument("--snapshots", type=int, default=32)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--spatial-spread", type=float, default=0.5)
    ap.add_argument("--temporal-spread", type=float, default=0.5)
    ap.add_argument("--data", help="a dataset directory instead of a generated graph")
    ap.add_argument("--max-size", type=int, default=512, help="chunk size cap (strategy.chunk_size)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tdtype = torch.float64 if args.dtype == "float64" else torch.float32

    snaps, N, F, name = _graph(args)
    H, L = args.hidden, args.layers

    # 1. the predictor
    path = Path(args.predictor) if args.predictor else None
    if path is not None and path.is_file():
        pred = MLPWorkload.load(path)
        m = pred.meta["mape"]
        tm = "-" if m["time"] is None else f"{100 * m['time']:.1f}%"
        print(f"predictor {path} (profiled on {pred.meta['machine']['cpu']}): held-out MAPE structure "
              f"{100 * m['structure']:.1f}%, time {tm}, total {100 * m['total']:.1f}%")
    else:
        pg, pname = profile_graph(None, 2048, 32, 3.0, args.seed)
        t0 = time.perf_counter()
        pred, rep = profile(args.model, [F], [H], args.samples, g=pg, max_size=args.profile_max_size,
                            device="cpu", dtype=args.dtype, repeats=args.repeats, seed=args.seed)
        s, t = rep["structure"], rep["time"]
        print(f"profiled {args.model} on {pname}: {args.samples} random chunks of {rep['chunk_sizes'][0]}.."
              f"{rep['chunk_sizes'][1]} appearances in {time.perf_counter() - t0:.1f}s")
        print(f"  structure encoder MLP: {s['train']} train / {s['held_out']} held-out, MAPE {100 * s['mape']:.1f}%")
        if t is not None:
            print(f"  time encoder MLP:      {t['train']} train / {t['held_out']} held-out, "
                  f"MAPE {100 * t['mape']:.1f}%")
        print(f"  chunk total (sum):     MAPE {100 * rep['total_mape']:.1f}%")
        if path is not None:
            print(f"  saved {pred.save(path)}")

    # 2. chunks as strategy: chunk makes them, each measured
    g = build_supergraph(snaps, N, spatial_weight=L * max(F, H), temporal_weight=L * H)
    labels, iters = label_propagation(g, max_size=args.max_size)
    stats = chunk_stats(g, labels)
    C = stats["num_chunks"]
    print(f"{name}: {g.num_nodes:,} appearances -> {C} chunks (cap {args.max_size}, {iters} LP iterations), "
          f"sizes {stats['nodes'].min()}..{stats['nodes'].max()}")
    T = int(g.time.max()) + 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(args.seed)
        model = build_model(args.model, F, H, L, 3).to(dtype=tdtype)
    tps = detached_time_params(model, T)
    timer = ChunkTimer(g, "cpu", tdtype, args.repeats)
    order = np.argsort(labels, kind="stable")
    members = np.split(order, np.cumsum(stats["nodes"])[:-1])
    t0 = time.perf_counter()
    meas = np.array([timer.model(np.sort(nodes), model, tps) for nodes in members])
    ms, mt = meas[:, 0], meas[:, 1]
    measured = ms + mt
    print(f"measured every chunk's encoders ({L} layers, forward + backward) in {time.perf_counter() - t0:.1f}s: "
          f"total {measured.sum():.3f}s, per chunk {1e3 * measured.min():.2f}..{1e3 * measured.max():.2f} ms")

    # 3. accuracy on these chunks
    shapes = layer_shapes(args.model, F, H, L)
    ps, pt = pred.encoder_times(chunk_features(g, labels, C), shapes)
    mlp_work = ps + pt
    count_work = CountWorkload().chunk_work(g, labels, stats)
    scale = float(np.median(measured / count_work))
    print(f"MAPE on these chunks: MLP structure {100 * mape(ps, ms):.1f}%"
          + (f", time {100 * mape(pt, mt):.1f}%" if mt.sum() > 0 else "")
          + f", total {100 * mape(mlp_work, measured):.1f}%; "
          f"count x best scale {100 * mape(scale * count_work, measured):.1f}%")
    rc = float(np.corrcoef(np.argsort(np.argsort(count_work)), np.argsort(np.argsort(measured)))[0, 1])
    rm = float(np.corrcoef(np.argsort(np.argsort(mlp_work)), np.argsort(np.argsort(measured)))[0, 1])
    print(f"rank correlation with measured chunk time: count {rc:.3f}, MLP {rm:.3f}")

    # 4. λ of the measured times under each assignment
    print(f"{'P':>3} | {'lambda: count':>13} {'mlp':>6} {'measured':>8} | {'together: count':>15} {'mlp':>6} "
          f"{'measured':>8} | {'cut: count':>10} {'mlp':>6} {'measured':>8}")
    for P in args.ranks:
        lam, together, cuts = [], [], []
        for work in (count_work, mlp_work, measured):
            owner = assign_chunks(work, stats["cut_pairs"], P)
            lam.append(load_divergence(owner, measured, P))
            # the same ranks' chunks run as one batch (today's runtime: one product over a rank's rows)
            per_rank = [np.flatnonzero(owner[labels] == p) for p in range(P)]
            run = np.array([sum(timer.model(nodes, model, tps)) if nodes.shape[0] else 0.0 for nodes in per_rank])
            together.append(float(run.max() / run.min()) if run.min() > 0 else float("inf"))
            cuts.append(_cross_weight(owner, stats["cut_pairs"]) / max(stats["total_weight"], 1e-300))
        print(f"{P:>3} | {lam[0]:>13.3f} {lam[1]:>6.3f} {lam[2]:>8.3f} | {together[0]:>15.3f} {together[1]:>6.3f} "
              f"{together[2]:>8.3f} | {cuts[0]:>10.3f} {cuts[1]:>6.3f} {cuts[2]:>8.3f}")
    print("lambda: T_max/T_min over ranks of the summed measured times of their chunks, each run on its own "
          "(DGC §2.2.2, chunk by chunk); together: of each rank's chunks run as one batch; cut: fraction of the "
          "super-graph weight between ranks. 'measured' assigns by the measured chunk times themselves (a bound).")


if __name__ == "__main__":
    main()
