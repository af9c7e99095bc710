"""Reuse caches (SPEC R3, ReInc §3.1, §3.3) with incremental aggregation (R2): epoch time on vs off, and the
hit rate of the Eq. 3 priority policy against LRU at a cache of 10 % of the working set (issue 14).

    python perf/bench_reuse.py [--vertices 2048] [--snapshots 24] [--density 3] [--edge-life 10]
                               [--window 8] [--stride 1] [--batch-vertices 512] [--fanout 10]
                               [--model cdgcn] [--epochs 2] [--ranks 1] [--cache-fraction F]
                               [--decoder-horizon 4] [--decoder-vertices 512] [--teacher-forcing 1.0]

Generates an IBM §6.3 random graph with edge-life smoothing l (``python -m hpcdgnn generate
--edge-life``: about 2/l of the edges change from one snapshot to the next, 20 % at l = 10) and
runs ``strategy: sequences`` on it (windows of ``--window`` snapshots every ``--stride``, node
batches of ``--batch-vertices``, the last layer's ``--fanout`` neighbours sampled and the first
layer over full neighbourhoods — the case whose input aggregation Ã_t·X_t is shared by the
overlapping windows; link prediction, float32, one thread per rank), four times:

1. ``reuse: on, incremental: on`` with the default cache (256 MiB: everything fits);
2. ``reuse: off, incremental: off``: every sample aggregates its own first layer;
3. and 4. ``reuse: on`` with ``cache_mb`` = ``--cache-fraction`` of the working set that run 1
   reports (``reuse.working_set_bytes``: the distinct Ã_t·X_t one epoch reads), per rank, policy
   ``priority`` then ``lru``. A cache holds one entry at least (hpcdgnn refuses less): the default
   fraction, 10 %, is raised to one entry where the working set is under ten entries (a small graph,
   :func:`cache_mb`); a fraction given that holds less stops the benchmark, naming the least that holds one.

Prints the median steady epoch time (slowest rank; the first epoch is warm-up) of 1 and 2 and their
ratio, the largest relative difference of their per-epoch losses (reuse never changes results), and
the steady epochs' hit rate, hits, misses, evictions and bypassed admissions of 3 and 4. Setup
(reading, normalising, R2's fill of the cache) is not in the epoch time. A benchmark measures; it
asserts nothing.

Then, unless ``--decoder-horizon 0``, ReInc's own setting for its hit-rate figure (§5, Fig. 11: an
integrated GraphRNN in the encoder–decoder form with teacher forcing): GConvLSTM (K = 2) 2 + 2 cells with
``model.decoder_input: snapshots`` (teacher-forced decoder steps read the future snapshots, whose input
bases later windows' encoders read), regression of the next snapshot's out-degree over ``--decoder-horizon``
steps, full neighbourhoods (what makes the cells' input bases shareable), on an edge-life graph of
``--decoder-vertices`` vertices written with that target, windows of ``--window``; cache_mb = the same
fraction of that run's working set, priority then LRU. Prints the global level's hit rate, the hits of the
encoder on entries the decoder made and the other way round, and the local level (the gates' reuse of
each state aggregation, a counter: module docstring of :mod:`hpcdgnn.nn.reuse_cache`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from bench_epoch import run_job  # noqa: E402

from hpcdgnn.data.generate import generate_dataset  # noqa: E402
from hpcdgnn.data.writer import RawSnapshot, write_dataset  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
#: the cache of runs 3 and 4 (and of the encoder–decoder's) as a fraction of the working set, unless --cache-fraction
CACHE_FRACTION = 0.1


def entry_bytes(job: dict) -> int:
    """Bytes of one reuse-cache entry of ``job`` — the least ``strategy.cache_mb`` a run accepts — as the run's set-up
    counts them (:meth:`hpcdgnn.strategies.sequences.SequencesStrategy.check_data`: the model built on the meta
    device; Ã_t·X_t, N × F, or a graph-recurrent cell's input basis, N × B·F); 0 where the model reads neither."""
    import torch

    from hpcdgnn.config.load import load_job_dict
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.regimes import regime_of
    from hpcdgnn.strategies.sequences import _entry_bytes, sampling_of

    job = load_job_dict(job, "perf/bench_reuse.py")
    manifest = load_manifest(job.data.path)
    with torch.device("meta"):
        model = regime_of("model", job.model.name).build_model(job, manifest)
    s = sampling_of(model, job)
    if not (s["reads_ax"] or s["reads_basis"]):
        return 0
    return _entry_bytes(model, s["reads_basis"], manifest.num_vertices, manifest.num_features,
                        getattr(torch, job.train.dtype))


def cache_mb(fraction: float | None, working_set: int, P: int, entry: int) -> float:
    """``strategy.cache_mb`` (MiB per rank) of ``fraction`` of ``working_set`` bytes over P ranks, each cache holding
    one ``entry`` at least. ``fraction`` None: :data:`CACHE_FRACTION`, raised to one entry where that holds less (a
    working set under ten entries); a fraction given that holds less: one line naming ``--cache-fraction`` and the
    least fraction that holds one entry, exit 2."""
    share = (CACHE_FRACTION if fraction is None else fraction) * working_set / P
    if share >= entry:
        return share / 2**20
    if fraction is None:
        return entry / 2**20
    least = math.ceil(entry * P / working_set * 1e4) / 1e4
    print(f"perf/bench_reuse.py: --cache-fraction {fraction:g} of a {working_set}-byte working set over {P} rank(s) "
          f"holds less than one cache entry ({entry} bytes); give --cache-fraction {least:g} or more, or leave it "
          "out", file=sys.stderr)
    sys.exit(2)


def job_of(data: Path, args, **strategy) -> dict:
    """The job of runs 1–4 on ``data`` (``strategy``: the reuse keys of the run)."""
    return {
        "data": {"path": str(data), "validate": "structure"},
        "model": {"name": args.model, "hidden": 16, "layers": 2},
        "task": {"name": "link_prediction"},
        "train": {"epochs": args.epochs, "threads": 1, "dtype": "float32", "warmup_epochs": 1, "seed": 0},
        "strategy": {"name": "sequences", "window": args.window, "stride": args.stride,
                     "batch_vertices": args.batch_vertices, "fanouts": [args.fanout, 0], **strategy},
    }


def run(work: Path, data: Path, P: int, args, tag: str, **strategy) -> tuple[float, list[dict]]:
    """One job; its median steady epoch time (slowest rank) and its records."""
    recs = run_job(job_of(data, args, **strategy), P, work, tag, REPO)
    steady = [r for r in recs if not r["warmup"]] or recs[-1:]
    times = sorted(r["time"]["epoch"]["max"] for r in steady)
    return times[len(times) // 2], recs


def cache_line(name: str, recs: list[dict], extra: tuple[str, ...] = ()) -> str:
    """Steady epochs' cache counters, summed (``extra``: more counters of the ``reuse`` record)."""
    steady = [r["reuse"] for r in recs if not r["warmup"]] or [recs[-1]["reuse"]]
    keys = ("hits", "misses", "evictions", "bypassed", "expired", *extra)
    tot = {k: sum(r[k] for r in steady) for k in keys}
    rate = tot["hits"] / max(tot["hits"] + tot["misses"], 1)
    return f"{name:9s} hit rate {100 * rate:5.1f} %   " + "  ".join(f"{k} {tot[k]:6d}" for k in keys)


def degree_target_graph(root: Path, N: int, T: int, density: float, edge_life: int, seed: int) -> None:
    """An IBM §6.3-style random graph (``density`` · N edges drawn per snapshot, edge-life smoothing) with a
    regression target per vertex and snapshot: its out-degree among the edges drawn for the next snapshot."""
    rng = np.random.default_rng(seed)
    m = int(density * N)
    drawn = [(rng.integers(0, N, m), rng.integers(0, N, m)) for _ in range(T + 1)]

    def snapshots():
        for t in range(T):
            s, d = drawn[t]
            keep = s != d
            yield RawSnapshot(s[keep], d[keep], targets=np.bincount(drawn[t + 1][0], minlength=N).astype(float))

    write_dataset(root, snapshots(), num_vertices=N, edge_life=edge_life, targets="next_out_degree")


def decoder_job(data: Path, args) -> dict:
    """The encoder–decoder job of :func:`decoder_runs` on ``data`` (reuse on, the default cache)."""
    return {
        "data": {"path": str(data), "validate": "structure"},
        "model": {"name": "gconv_lstm", "hidden": 16, "layers": 2, "order": 2, "encoder_decoder": True,
                  "decoder_input": "snapshots", "teacher_forcing": args.teacher_forcing},
        "task": {"name": "regression", "horizon": args.decoder_horizon},
        "train": {"epochs": args.epochs, "threads": 1, "dtype": "float32", "warmup_epochs": 1, "seed": 0},
        "strategy": {"name": "sequences", "window": args.window, "stride": args.stride,
                     "batch_vertices": args.batch_vertices, "fanouts": []},
    }


def decoder_runs(work: Path, P: int, args) -> None:
    """ReInc's hit-rate setting (module docstring): the encoder–decoder with snapshot inputs, priority vs LRU."""
    data = work / "decoder-graph"
    degree_target_graph(data, args.decoder_vertices, args.snapshots, args.density, args.edge_life, 2)
    job = decoder_job(data, args)
    print(f"decoder form: gconv_lstm 2 + 2 cells, decoder_input snapshots, teacher forcing {args.teacher_forcing}, "
          f"horizon {args.decoder_horizon}; N={args.decoder_vertices} T={args.snapshots} edge_life={args.edge_life}, "
          f"window {args.window}, batches of {args.batch_vertices}, full neighbourhoods", flush=True)
    t0 = time.perf_counter()
    full = run_job(job, P, work, "decoder-full")
    ws = full[-1]["reuse"]["working_set_bytes"]
    mb = cache_mb(args.cache_fraction, ws, P, entry_bytes(job))
    print(f"working set {ws / 2**20:.4g} MiB (input bases); cache_mb = {mb:.4g} per rank "
          f"({100 * mb * 2**20 * P / ws:.3g} %); everything cached: "
          f"{cache_line('full', full, ('decoder_to_encoder_hits', 'encoder_to_decoder_hits'))} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    extra = ("decoder_to_encoder_hits", "encoder_to_decoder_hits", "local_hits", "local_misses")
    for policy in ("priority", "lru"):
        job["strategy"].update(cache_mb=mb, cache_policy=policy)
        print(cache_line(policy, run_job(job, P, work, f"decoder-{policy}"), extra), flush=True)


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
    ap.add_argument("--cache-fraction", type=float, default=None,
                    help=f"cache size / working set of runs 3 and 4 and the encoder-decoder's; default "
                         f"{CACHE_FRACTION:g}, raised to one cache entry where that holds less (a small graph)")
    ap.add_argument("--decoder-horizon", type=int, default=4, help="encoder-decoder runs' decoder steps (0 = skip)")
    ap.add_argument("--decoder-vertices", type=int, default=512, help="N of the encoder-decoder runs' graph")
    ap.add_argument("--teacher-forcing", type=float, default=1.0, help="teacher forcing of the encoder-decoder runs")
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
        diff = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(on, off, strict=True))
        inc = on[-1].get("incremental", {})
        print(f"reuse+incremental on : {on_s:8.3f} s/epoch   (hit rate {100 * on[-1]['reuse']['hit_rate']:.1f} %; "
              f"R2 at setup: rows recomputed {inc.get('recomputed_fraction', float('nan')):.3f}, "
              f"{inc.get('fallbacks', 0)} snapshots from scratch above the threshold)")
        print(f"reuse+incremental off: {off_s:8.3f} s/epoch")
        print(f"ratio off/on: {off_s / on_s:.2f}x   max relative loss difference on vs off: {diff:.1e}", flush=True)
        ws = on[-1]["reuse"]["working_set_bytes"]
        mb = cache_mb(args.cache_fraction, ws, P, entry_bytes(job_of(data, args, reuse="on")))
        print(f"working set {ws / 2**20:.4g} MiB over {P} rank(s); cache_mb = {mb:.4g} per rank "
              f"({100 * mb * 2**20 * P / ws:.3g} %)", flush=True)
        for policy in ("priority", "lru"):
            _, recs = run(work, data, P, args, f"cache-{policy}", reuse="on", cache_mb=mb, cache_policy=policy)
            print(cache_line(policy, recs), flush=True)
        if args.decoder_horizon > 0:
            decoder_runs(work, P, args)


if __name__ == "__main__":
    main()
