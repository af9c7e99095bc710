"""TGN's time encoding on raw-second timestamps: i-parallel exactness and accuracy of each encoding (issue 61 §2).

    python perf/bench_time_encoding.py [--inputs college] [--max-events 20000] [--epochs 2] [--width 32]
                                       [--minibatch 2 3] [--batch-events 600] [--dtype float64]

Each input is prepared twice with ``python -m hpcdgnn prepare --kind events``: timestamps as the file has them
(seconds) and ``--time-unit 86400`` (days). On each, for each encoding —

* ``fixed/auto`` (the default): Φ(Δt) = cos((Δt/s)·w), w = 10^{-linspace(0, 9, d)} never trained (GraphMixer
  §3.1), s = the stream's median gap between training events (the manifest's ``time_gap``);
* ``learnable/1``: TGAT's trained w, b on Δt as stored (``model.time_encoding: learnable``,
  ``model.time_scale: 1``; the behaviour before issue 61) —

runs ``strategy: memory`` at 1×1×1 and at each ``--minibatch`` i (i×1×1 on i ranks, exact in exact arithmetic)
with ``perf/bench_tgnn.py``'s model (memory = time = hidden = ``--width``, 10 neighbours, 2 heads, 49 evaluation
negatives, ``--batch-events`` per batch: by default 600, or a quarter of the training events where the stream
is too short for four such batches — a tiny ``--max-events`` still runs, on batches of which every rank of the
largest ``--minibatch`` gets one event at least; see :func:`batch_events`), and prints per row the largest relative
difference of the per-epoch losses from 1×1×1 and the last epoch's validation and test MRR and AP. A benchmark
measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import run_job  # noqa: E402
from bench_tgnn import prepare  # noqa: E402

ENCODINGS = {"fixed/auto": {"time_encoding": "fixed", "time_scale": "auto"},
             "learnable/1": {"time_encoding": "learnable", "time_scale": 1}}
UNITS = {"seconds": (), "days": ("--time-unit", "86400")}
#: events per batch of the default, where the stream holds four such batches
BATCH_EVENTS = 600


def batch_events(train_events: int, ranks: int, given: int | None = None) -> int:
    """Events per training batch: ``given`` as it is (hpcdgnn refuses one larger than the stream, naming the key), else
    :data:`BATCH_EVENTS`, lowered on a short stream to a quarter of its ``train_events`` — four batches an epoch, so
    the memory carries state from batch to batch — and raised to ``ranks``, the most ranks that split a batch, so
    that none of them waits for a batch with no event of its own."""
    if given is not None:
        return given
    return max(min(BATCH_EVENTS, train_events // 4), ranks, 1)


def main() -> None:
    """Prepare, run every (unit, encoding, i), print one table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", nargs="+", default=["college"], choices=["college", "email", "jodie"])
    ap.add_argument("--max-events", type=int, default=20000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--minibatch", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--batch-events", type=int, default=None,
                    help=f"events per batch (task.batch_events); default {BATCH_EVENTS}, or a quarter of the training "
                         "events where the stream holds fewer than four such batches (at least the largest "
                         "--minibatch), so that a small --max-events runs")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    args = ap.parse_args()
    if args.batch_events is not None and args.batch_events < 1:
        ap.error(f"--batch-events: {args.batch_events} is not a positive number of events")
    os.environ.setdefault("OMPI_MCA_osc", "^ucx")
    w = args.width
    print(f"tgn width {w}, 10 neighbours, {args.epochs} epochs, {args.dtype}; "
          f"|Δloss| = max over epochs of |loss_i − loss_1| / |loss_1|")
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-timeenc-") as tmp:
        work = Path(tmp)
        for name in args.inputs:
            head = f"\n{name}, first {args.max_events} events"
            for unit, options in UNITS.items():
                data, manifest = prepare(name, work, args.max_events, *options)
                lo, hi = manifest["split"]["train"]
                batch = batch_events(hi - lo, max(args.minibatch, default=1), args.batch_events)
                if head:  # both units are the same events in the same splits: one batch size
                    print(f"{head}, {hi - lo} of them training events, {batch} events per batch")
                    print(f"{'unit':8s} {'encoding':12s} {'i':>2s} {'|Δloss|':>9s} {'val MRR':>8s} {'test MRR':>8s} "
                          f"{'val AP':>7s} {'test AP':>7s}", flush=True)
                    head = ""
                for enc, model in ENCODINGS.items():
                    ref = None
                    for i in (1, *args.minibatch):
                        job = {"data": {"path": str(data)},
                               "model": {"name": "tgn", "hidden": w, "memory_dim": w, "time_dim": w, "neighbors": 10,
                                         "heads": 2, **model},
                               "task": {"name": "temporal_link_prediction", "batch_events": batch,
                                        "eval_negatives": 49},
                               "strategy": {"name": "memory", "minibatch": i},
                               "train": {"epochs": args.epochs, "threads": 1, "dtype": args.dtype, "seed": 0}}
                        recs = run_job(job, i, work, f"{name}-{unit}-{enc.replace('/', '-')}-{i}")
                        loss = np.array([r["loss"] for r in recs])
                        ref = loss if ref is None else ref
                        last = recs[-1]
                        print(f"{unit:8s} {enc:12s} {i:2d} {np.max(np.abs(loss - ref) / np.abs(ref)):9.2e} "
                              f"{last['val_mrr']:8.4f} {last['test_mrr']:8.4f} {last['val_ap']:7.4f} "
                              f"{last['test_ap']:7.4f}", flush=True)


if __name__ == "__main__":
    main()
