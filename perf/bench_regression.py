"""Epoch time of every strategy before and after a change, side by side in one run (issue 11: no strategy slower).

    python perf/bench_regression.py --before 4f770ce [--after WORKTREE] [--vertices 16384] [--snapshots 32]
                                    [--density 3] [--ranks 2] [--epochs 5] [--repeat 3] [--models cdgcn tmgcn]
                                    [--spatial-spread 0 --temporal-spread 0] [--strategies LABEL ...]
                                    [--events college]

``--before`` is a git commit (or tag, branch) of this repository: its tree is
exported with ``git archive`` into a temporary directory (nothing in the
checkout changes) and run from there through ``PYTHONPATH``; ``--after`` is the
working tree (default) or another commit. One generated graph (IBM §6.3; with
``--spatial-spread``/``--temporal-spread`` DGC §7.3.1's skewed variant) serves
both. For every model and strategy configuration — snapshot (cyclic), snapshot
with 4 checkpoint blocks, pss, vertex (range), chunk (``chunk default``: each
tree's default ``chunk_size``), and the batch regimes: sequences (ReInc, full
neighbourhoods: its reuse cache holds Ã_t·X_t), hybrid (DynaHB, random actions), memory (TGN on the event
stream ``--events`` prepares: DistTGL's i, j or k = P; its model is TGN
whatever ``--models`` says) — each repeat runs before and after back to
back, in alternating order, so a slow spell of this shared machine hits both
alike; the fastest repeat's median steady epoch (slowest rank) counts. Prints
one row per configuration: both times, after / before, and whether the final
losses agree bit for bit (the refactor promise) or only to 1e-6.

Jobs are written in the key layout each tree understands: release 0.2 moved
``train.blocks`` / ``train.transfer`` / ``stale`` under ``strategy:``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import generate_graph, run_job  # noqa: E402
from bench_tgnn import prepare  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

#: the event regime's job (jobs/examples/m2-memory-parallelism.yaml's widths): model and task replace the rows'
EVENTS_JOB = {
    "model": {"name": "tgn", "memory_dim": 32, "time_dim": 32, "hidden": 32, "neighbors": 10, "heads": 2},
    "task": {"name": "temporal_link_prediction", "batch_events": 600, "negatives": 1, "eval_negatives": 49},
}

#: (label, strategy section ("P": the rank count), options that moved under strategy: in 0.2, the job's data:
#: "graph" (generated, one row per --models) or "events" (the event stream, EVENTS_JOB's model))
CONFIGS = [
    ("snapshot", {"name": "snapshot"}, {}, "graph"),
    ("snapshot nb=4", {"name": "snapshot"}, {"blocks": 4}, "graph"),
    ("pss", {"name": "pss"}, {}, "graph"),
    ("vertex", {"name": "vertex"}, {}, "graph"),
    ("chunk", {"name": "chunk", "chunk_size": 256}, {}, "graph"),
    ("chunk default", {"name": "chunk"}, {}, "graph"),
    # full neighbourhoods: the reuse cache holds the first layer's Ã_t·X_t (R2, R3)
    ("sequences", {"name": "sequences", "window": 4, "batch_vertices": 4096, "fanouts": [],
                   "reuse": "on"}, {}, "graph"),
    ("hybrid", {"name": "hybrid", "snapshot_fractions": [0.2, 0.4], "vertex_fractions": [0.1, 0.2],
                "adjuster": {"kind": "random"}}, {}, "graph"),
    ("memory i=P", {"name": "memory", "minibatch": "P"}, {}, "events"),
    ("memory j=P", {"name": "memory", "epoch": "P"}, {}, "events"),
    ("memory k=P", {"name": "memory", "memory": "P"}, {}, "events"),
]


def export_tree(ref: str, dest: Path) -> Path:
    """The files of commit ``ref`` under ``dest`` (git archive: the checkout is not touched)."""
    dest.mkdir(parents=True)
    archive = dest.with_suffix(".tar")
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(REPO), "archive", ref], stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return dest


def new_layout(tree: Path) -> bool:
    """Whether ``tree`` reads strategy options under ``strategy:`` (release 0.2) rather than ``train:``."""
    return "RENAMED_KEYS" in (tree / "hpcdgnn" / "config" / "schema.py").read_text()


def run_one(tree: Path, work: Path, data: Path, model: str, strategy: dict, moved: dict, args, tag: str):
    """One run from ``tree``; returns (median steady epoch seconds, final loss). ``model`` None: the event
    regime's (:data:`EVENTS_JOB`)."""
    train = {"epochs": args.epochs, "threads": 1, "dtype": "float32", "warmup_epochs": 1, "seed": 0,
             **({} if model else {"lr": 1e-4})}
    section = {k: args.ranks if v == "P" else v for k, v in strategy.items()}
    if new_layout(tree):
        section.update(moved)
    else:
        train.update(moved)
    job = {"model": {"name": model, "hidden": 16, "layers": 2}, "task": {"name": "link_prediction"}} \
        if model else EVENTS_JOB
    recs = run_job({
        "data": {"path": str(data), "validate": "structure"},
        "train": train,
        "strategy": section,
        **job,
    }, args.ranks, work, tag, tree)
    steady = sorted(r["time"]["epoch"]["max"] for r in recs if not r["warmup"]) or [recs[-1]["time"]["epoch"]["max"]]
    return steady[len(steady) // 2], recs[-1]["loss"]


def main() -> None:
    """Export the trees, generate the graph, run every configuration before and after, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="git commit to compare against")
    ap.add_argument("--after", default=None, help="git commit; default: the working tree")
    ap.add_argument("--vertices", type=int, default=16384)
    ap.add_argument("--snapshots", type=int, default=32)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--spatial-spread", type=float, default=0.0)
    ap.add_argument("--temporal-spread", type=float, default=0.0)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5, help="epochs per run; the first is warm-up")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", nargs="+", default=["cdgcn", "tmgcn"])
    ap.add_argument("--strategies", nargs="+", default=[c[0] for c in CONFIGS], help="labels of CONFIGS to run")
    ap.add_argument("--events", choices=["college", "email"], default="college",
                    help="the event stream the memory rows train on (perf/bench_tgnn.py's inputs)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-regression-") as tmp:
        work = Path(tmp)
        before = export_tree(args.before, work / "before")
        after = export_tree(args.after, work / "after") if args.after else REPO
        data = work / "graph"
        generate_graph(data, args.vertices, args.snapshots, args.density, args.spatial_spread, args.temporal_spread)
        events = None
        if any(c[3] == "events" and c[0] in args.strategies for c in CONFIGS):
            events, _ = prepare(args.events, work, None)
            os.sync()
        print(f"graph N={args.vertices} T={args.snapshots} density={args.density} spreads={args.spatial_spread}/"
              f"{args.temporal_spread}; P={args.ranks}, 1 thread/rank, "
              f"{len(os.sched_getaffinity(0))} cores here; before {args.before}, after {args.after or 'working tree'}")
        print(f"{'model':8s} {'strategy':14s} {'before s':>9s} {'after s':>9s} {'after/before':>13s}  losses")
        rows = [(model, c) for model in args.models for c in CONFIGS if c[3] == "graph"] + \
               [(None, c) for c in CONFIGS if c[3] == "events"]
        for model, (label, strategy, moved, _) in (r for r in rows if r[1][0] in args.strategies):
            if "batch_vertices" in strategy:  # a node batch larger than the graph is refused
                strategy = {**strategy, "batch_vertices": min(strategy["batch_vertices"], args.vertices)}
            times: dict[str, list[float]] = {"before": [], "after": []}
            loss = {}
            for rep in range(args.repeat):
                order = [("before", before), ("after", after)]
                for which, tree in order if rep % 2 == 0 else order[::-1]:
                    tag = f"{which}-{model}-{label.replace(' ', '').replace('=', '')}-{rep}"
                    s, loss[which] = run_one(tree, work, data if model else events, model, strategy, moved,
                                             args, tag)
                    times[which].append(s)
            b, a = min(times["before"]), min(times["after"])
            same = "identical" if loss["before"] == loss["after"] else (
                "1e-6" if abs(loss["before"] - loss["after"]) <= 1e-6 * abs(loss["before"]) else "DIFFER")
            flag = "  SLOWER" if a > 1.05 * b else ""
            print(f"{model or 'tgn':8s} {label:14s} {b:9.3f} {a:9.3f} {a / b:13.3f}  {same}{flag}", flush=True)


if __name__ == "__main__":
    main()
