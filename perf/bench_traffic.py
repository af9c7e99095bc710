"""Bytes per epoch of the vertex-partitioned strategies, by kind, with and without stale aggregation (issue 13 item 5).

    python perf/bench_traffic.py --data DIR [--before REF] [--strategies vertex chunk] [--ranks 2]
                                 [--model tmgcn] [--epochs 8] [--theta 0.5] [--mode static]

For each strategy, one run with ``strategy.stale.mode: off`` (exact) and one with
stale aggregation (DGC §5.2, D3) at ``--theta``; with ``--before`` the same two
runs also from that commit's tree (``git archive``, run through ``PYTHONPATH``),
side by side. Bytes are the training traffic every rank sent in an epoch
(``bytes_by_tag`` of metrics.jsonl), averaged over the epochs after the first,
grouped as

* halo: the GCN halo exchange (``halo.*``, ``stale.*``);
* task: what the task needs after the last layer — the move of every row to
  snapshot owners before issue 13 item 5 (``redistribute.*`` of the vertex
  strategy, the chunk strategy's task exchange), the destination rows a rank
  lacks after it (``task.*``);
* other: the chunk strategy's RNN-owner exchange (``rnn.*``) and the gradient
  all-reduce.

Prints per run: the groups, the total, the share stale aggregation saves of the
exact run's total (over the steady epochs, and the least and most of any one
epoch: the share swings from epoch to epoch, the task's fetches most — generator
graph, TM-GCN, P = 2, epochs 2-4: 50 %, 41 %, 69 %, the task's part alone 35 %,
9 %, 84 %, the halo's 59-61 % — so a mean over few epochs is a rough figure), and the
final test AUC beside the exact run's (the issue's target: ≥ 60 % saved at
θ = 0.5 with test AUC within 1 %).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import run_job  # noqa: E402
from bench_regression import export_tree  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GROUPS = {"halo": ("halo.", "stale."), "task": ("task.", "redistribute."), "other": ("rnn.", "grad_allreduce")}


def group_bytes(by_tag: dict[str, int], strategy: str) -> dict[str, float]:
    """One epoch's bytes by group (:data:`GROUPS`). The chunk strategy's ``redistribute`` is its task exchange too."""
    out = dict.fromkeys(GROUPS, 0.0)
    for tag, b in by_tag.items():
        group = next((g for g, prefixes in GROUPS.items() if tag.startswith(prefixes)), "other")
        out[group] += b
    return out


def run(tree: Path, work: Path, data: Path, strategy: str, stale: dict, args, tag: str) -> dict:
    """One job from ``tree``; mean bytes per steady epoch by group, and the last epoch's test AUC."""
    section = {"name": strategy, "stale": stale}
    if strategy == "chunk":
        section["chunk_size"] = args.chunk_size
    recs = run_job({
        "data": {"path": str(data), "validate": "structure"},
        "model": {"name": args.model, "hidden": 16, "layers": 2},
        "task": {"name": "link_prediction"},
        "train": {"epochs": args.epochs, "threads": 1, "dtype": "float32", "warmup_epochs": 1, "seed": 0},
        "strategy": section,
    }, args.ranks, work, tag, tree)
    steady = recs[1:] or recs
    groups = [group_bytes(r["bytes_by_tag"], strategy) for r in steady]
    mean = {g: sum(x[g] for x in groups) / len(groups) for g in GROUPS}
    return {**mean, "total": sum(mean.values()), "auc": recs[-1]["test_auc"],
            "epochs": [sum(x.values()) for x in groups]}


def main() -> None:
    """Run exact and stale for each strategy (and tree), print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="a dataset directory (prepare / generate)")
    ap.add_argument("--before", default=None, help="git commit to compare against (optional)")
    ap.add_argument("--strategies", nargs="+", default=["vertex", "chunk"], choices=["vertex", "chunk"])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--model", default="tmgcn")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--theta", type=float, default=0.5)
    ap.add_argument("--mode", default="static", choices=["static", "adaptive"])
    ap.add_argument("--chunk-size", type=int, default=256)
    args = ap.parse_args()
    mib = 2.0**20
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-traffic-") as tmp:
        work = Path(tmp)
        trees = [("after", REPO)]
        if args.before:
            trees.insert(0, (f"before {args.before}", export_tree(args.before, work / "before")))
        print(f"{args.data}: {args.model}, P={args.ranks}, {args.epochs} epochs (first left out), "
              f"stale {args.mode} theta={args.theta}; MiB per epoch, all ranks")
        print(f"{'tree':18s} {'strategy':8s} {'stale':6s} {'halo':>9s} {'task':>9s} {'other':>9s} {'total':>9s} "
              f"{'saved':>7s} {'by epoch':>13s} {'test AUC':>9s} {'AUC vs exact':>13s}")
        for name, tree in trees:
            for strategy in args.strategies:
                exact = None
                for label, stale in (("off", {"mode": "off"}), ("on", {"mode": args.mode, "theta": args.theta})):
                    tag = f"{name.split()[0]}-{strategy}-{label}"
                    r = run(tree, work, args.data, strategy, stale, args, tag)
                    exact = exact or r
                    saved = 1 - r["total"] / exact["total"] if exact["total"] else 0.0
                    each = [1 - t / exact["total"] if exact["total"] else 0.0 for t in r["epochs"]]
                    spread = f"{min(each):.0%}-{max(each):.0%}"
                    dauc = (r["auc"] - exact["auc"]) / exact["auc"] if exact["auc"] else float("nan")
                    print(f"{name:18s} {strategy:8s} {label:6s} {r['halo'] / mib:9.2f} {r['task'] / mib:9.2f} "
                          f"{r['other'] / mib:9.2f} {r['total'] / mib:9.2f} {saved:7.1%} {spread:>13s} "
                          f"{r['auc']:9.4f} {dauc:+13.2%}",
                          flush=True)


if __name__ == "__main__":
    main()
