"""Communication volume and epoch time of the partitioning strategies side by side (IBM Table 2, DGC §2.1).

    python perf/compare_strategies.py [--data DIR | --vertices 16384 --snapshots 32 --density 3]
                                      [--model tmgcn] [--ranks 2 4 8] [--strategies snapshot pss vertex]
                                      [--partition range] [--epochs 3] [--out DIR]

For one dataset and model, runs every strategy at every rank count
(``mpirun -np P``, oversubscribed beyond this machine's cores) and prints the
per-epoch bytes sent by all ranks (median over non-warm-up epochs, split into
the strategy's own traffic and the gradient all-reduce) and the epoch time.
What IBM Table 2 shows, and this reproduces in shape: snapshot partitioning
with redistribution (``snapshot``, PSS-TS) moves T·N·F·(P-1)/P values per
redistribution, nearly flat in P, while vertex partitioning's halo grows with
P (more cut edges); ``pss`` moves only RNN states along the pipeline but
serialises the ranks. Times on this 2-core machine are oversubscribed for
P > 2: read them as behaviour, not scaling.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_epoch import generate_graph, mpirun_cmd, run_env  # noqa: E402

_MiB = 1024.0 * 1024.0


def _options(strategy: str, partition: str, chunk_size: int) -> dict:
    """The comparison's options that ``strategy`` takes (an option of another strategy is a config error)."""
    return {"vertex": {"partition": partition}, "chunk": {"chunk_size": chunk_size}}.get(strategy, {})


def run(work: Path, data: Path, model: str, strategy: str, P: int, epochs: int, partition: str,
        chunk_size: int = 4096, label: str = "", **strategy_keys) -> dict:
    """One run; returns median steady MiB/epoch (total, strategy, gradient) and epoch seconds, and the
    last epoch's record (``strategy_keys`` go into the job's ``strategy:`` section).
    """
    import subprocess

    name = f"{strategy}{label}-p{P}"
    job = work / f"{name}.yaml"
    job.write_text(yaml.safe_dump({
        "data": {"path": str(data), "validate": "structure"},
        "model": {"name": model, "hidden": 16},
        "strategy": {"name": strategy, **_options(strategy, partition, chunk_size), **strategy_keys},
        "train": {"epochs": epochs, "threads": 1},
    }))
    out = work / f"run-{name}"
    proc = subprocess.run([*mpirun_cmd(P), sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(out)],
                          capture_output=True, text=True, env=run_env())
    if proc.returncode != 0:
        raise SystemExit(f"{strategy} P={P} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = [r for r in recs if not r["warmup"]] or recs[-1:]

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    grad = [sum(b for k, b in r["bytes_by_tag"].items() if k.startswith("grad_allreduce")) for r in steady]
    # measured load divergence λ = T_max / T_min of the ranks' compute seconds (DGC's λ, measured)
    lam = [max(r["per_rank"]["compute"]) / max(min(r["per_rank"]["compute"]), 1e-9) for r in steady]
    total = [r["bytes_sent"] for r in steady]
    return {
        "total": median(total) / _MiB,
        "strategy": median([t - g for t, g in zip(total, grad)]) / _MiB,
        "grad": median(grad) / _MiB,
        "epoch": median([r["time"]["epoch"]["max"] for r in steady]),
        "loss": recs[-1]["loss"],
        "lambda": median(lam),
        "record": recs[-1],
    }


def main() -> None:
    """Run the grid and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="dataset directory (default: generate an IBM §6.3 graph)")
    ap.add_argument("--vertices", type=int, default=1 << 14)
    ap.add_argument("--snapshots", type=int, default=32)
    ap.add_argument("--density", type=float, default=3.0)
    ap.add_argument("--model", default="tmgcn")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--strategies", nargs="+", default=["snapshot", "pss", "vertex"])
    ap.add_argument("--partition", default="range", help="vertex strategy: range, hash or metis")
    ap.add_argument("--chunk-size", type=int, default=4096, help="chunk strategy: largest chunk (appearances)")
    ap.add_argument("--spatial-spread", type=float, default=0.0, help="generated graph: DGC §7.3.1 δ")
    ap.add_argument("--temporal-spread", type=float, default=0.0, help="generated graph: DGC §7.3.1 τ")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per run; the first is warm-up")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-cmp-") as tmp:
        work = Path(tmp)
        data = Path(args.data) if args.data else work / "graph"
        if not args.data:
            generate_graph(data, args.vertices, args.snapshots, args.density,
                           args.spatial_spread, args.temporal_spread)
        manifest = json.loads((data / "manifest.json").read_text())
        print(f"{args.model} on {data.name}: N={manifest['num_vertices']} T={manifest['num_snapshots']} "
              f"F={manifest['num_features']}; vertex partition {args.partition}; MiB per epoch, all ranks")
        print(f"{'strategy':10s} {'P':>3s} {'MiB/epoch':>10s} {'strategy':>10s} {'gradient':>9s} {'epoch s':>8s} "
              f"{'lambda':>7s} {'loss':>8s}")
        table: dict[str, dict[int, dict]] = {}
        for strategy in args.strategies:
            for P in args.ranks:
                r = run(work, data, args.model, strategy, P, args.epochs, args.partition, args.chunk_size)
                table.setdefault(strategy, {})[P] = r
                print(f"{strategy:10s} {P:>3d} {r['total']:>10.2f} {r['strategy']:>10.2f} {r['grad']:>9.3f} "
                      f"{r['epoch']:>8.3f} {r['lambda']:>7.2f} {r['loss']:>8.4f}", flush=True)
        lo, hi = min(args.ranks), max(args.ranks)
        print(f"\nvolume growth from P={lo} to P={hi} (strategy traffic, gradient all-reduce excluded):")
        for strategy, rows in table.items():
            a, b = rows[lo]["strategy"], rows[hi]["strategy"]
            print(f"  {strategy:10s} {a:9.2f} -> {b:9.2f} MiB  x{(b / a if a else float('nan')):.2f}")


if __name__ == "__main__":
    main()
