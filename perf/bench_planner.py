"""The planner's accuracy: predicted against measured epoch time, bytes and memory of every strategy (issue 59).

    python perf/bench_planner.py [--datasets uniform skewed email bitcoinalpha] [--ranks 2 4]
                                 [--model cdgcn] [--task link_prediction] [--epochs 4] [--strategies ...]
                                 [--rates FILE] [--out DIR]

For each dataset and P, ``python -m hpcdgnn plan`` predicts every strategy with a cost model (the planner's
``--json``), then each strategy trains ``--epochs`` epochs under ``mpirun -np P`` (oversubscribed beyond this
machine's cores: labelled). Measured: the median steady epoch (slowest rank), the last epoch's ``bytes_sent``
less the task's ``task.*`` traffic (a link-prediction task's fetch of pair endpoints under ``vertex`` depends on
the drawn negatives, and is not predicted), and the largest rank's ``engine_peak_bytes`` (inputs + activation
peak; the prediction's ``inputs`` + ``activations``, parameters apart; a sampled strategy's host-held snapshots,
``host_payload_bytes``, beside its ``host`` part). Printed side by side with their ratios,
and for each P whether the planner's pick is within 10 % of the fastest measured strategy. Datasets: IBM §6.3
generator graphs (uniform, and DGC §7.3.1's skewed spreads), email-Eu-core and soc-sign-bitcoinalpha from
../shared/data. Results (JSON and the table, ``TIME.json`` and ``TIME.txt``) go to ``--out`` (default
perf/results/planner/, in the repository); a file of that name there already is kept and the new pair goes beside
it, as ``TIME-2.*`` (:func:`bench_epoch.write_results`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_convergence import DATASETS, prepare  # noqa: E402
from bench_epoch import generate_graph, mpirun_cmd, run_env, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GENERATED = {"uniform": (4096, 16, 4.0, 0.0, 0.0), "skewed": (4096, 16, 4.0, 0.8, 0.5)}


def dataset(name: str, cache: Path) -> Path:
    """A generator graph or a ../shared/data dataset, made once into ``cache``."""
    if name in GENERATED:
        out = cache / name
        if not (out / "manifest.json").is_file():
            generate_graph(out, *GENERATED[name])
        return out
    return prepare(name, cache)


def predict(job: Path, P: int, rates: str | None, strategies: list[str] | None = None) -> list[dict]:
    """``plan --json`` of ``job`` at P: the priced predictions (of ``strategies`` only, when given)."""
    cmd = [sys.executable, "-m", "hpcdgnn", "plan", str(job), "--ranks", str(P), "--json"]
    cmd += ["--rates", rates] if rates else []
    cmd += ["--strategies", *strategies] if strategies else []
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=run_env(), check=True)
    return [p for p in json.loads(proc.stdout)["predictions"] if p["epoch_s"] is not None]


def measure(job: Path, P: int, out: Path) -> dict:
    """Train ``job`` at P; the median steady epoch, last epoch's bytes, largest inputs + activation peak."""
    proc = subprocess.run([*mpirun_cmd(P), sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(out)],
                          capture_output=True, text=True, cwd=REPO, env=run_env())
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1][:200]}
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = sorted(r["time"]["epoch"]["max"] for r in recs if not r["warmup"]) or [recs[-1]["time"]["epoch"]["max"]]
    mem = json.loads((out / "summary.json").read_text())["memory"]
    tags = recs[-1]["bytes_by_tag"]
    # a link-prediction task's fetch of pair endpoints (vertex) depends on the drawn negatives: not predicted
    task = sum(v for k, v in tags.items() if k.startswith("task."))
    return {"epoch_s": steady[len(steady) // 2], "bytes": recs[-1]["bytes_sent"] - task, "task_bytes": task,
            "engine_peak": max(mem["engine_peak_bytes"]),
            "with_host": max(e + h for e, h in zip(mem["engine_peak_bytes"], mem["host_payload_bytes"], strict=True))}


def memory_pair(p: dict, m: dict) -> tuple[float, int]:
    """(predicted, measured) memory less parameters: a sampled strategy's inputs are host-held (``host``)."""
    parts = p["memory_parts"]
    pred = parts["inputs"] + parts["activations"] + parts.get("host", 0.0)
    return pred, m["with_host"] if "host" in parts else m["engine_peak"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["uniform", "skewed", "email", "bitcoinalpha"],
                    choices=sorted([*GENERATED, *DATASETS]))
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--model", default="cdgcn")
    ap.add_argument("--task", default="link_prediction")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rates", help="rates file (default: this machine's, else defaults)")
    ap.add_argument("--strategies", nargs="+", help="only these strategies (default: every one with a cost model; "
                    "the pick is then among these)")
    ap.add_argument("--out", default=str(REPO / "perf" / "results" / "planner"))
    args = ap.parse_args()
    out_dir = Path(args.out)
    cache = Path(os.environ.get("HPCDGNN_BENCH_CACHE", "/tmp/hpcdgnn-bench"))
    cache.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    rows = []
    for name in args.datasets:
        data = dataset(name, cache)
        for P in args.ranks:
            base = {"data": {"path": str(data), "validate": "structure"},
                    "model": {"name": args.model, "hidden": 16, "layers": 2},
                    "task": {"name": args.task}, "train": {"epochs": args.epochs, "warmup_epochs": 1,
                                                            "dtype": "float32", "threads": 1}}
            job = cache / f"plan-{name}-p{P}.yaml"
            job.write_text(yaml.safe_dump(base))
            preds = predict(job, P, args.rates, args.strategies)
            for p in preds:
                opts = {k: v for k, v in p["options"].items()}
                sjob = cache / f"plan-{name}-p{P}-{p['strategy']}-{opts.get('blocks', 1)}.yaml"
                sjob.write_text(yaml.safe_dump({**base, "strategy": opts}))
                run_dir = cache / f"run-{sjob.stem}-{time.time_ns()}"
                m = measure(sjob, P, run_dir)
                rows.append({"dataset": name, "P": P, "oversubscribed": P > cores, "strategy": p["strategy"],
                             "blocks": opts.get("blocks", 1), "picked": p["picked"], "predicted": p, "measured": m})
                mm = m.get("epoch_s")
                print(f"{name:<12} P={P}{'*' if P > cores else ' '} {p['strategy']:<9} "
                      f"epoch {p['epoch_s']:.4f}/{mm if mm is None else round(mm, 4)} s  "
                      f"bytes {p['bytes_per_epoch']:.0f}/{m.get('bytes')}  "
                      f"mem {'%.0f/%s' % memory_pair(p, m) if 'error' not in m else '-'}"
                      f"{'  <- pick' if p['picked'] else ''}", flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    lines = [f"{'dataset':<12} {'P':>3} {'strategy':<18} {'epoch pred s':>12} {'meas s':>8} {'ratio':>6} "
             f"{'bytes pred':>11} {'meas':>11} {'ratio':>7} {'mem pred':>10} {'meas':>10} {'ratio':>6}"]
    for r in rows:
        p, m = r["predicted"], r["measured"]
        if "error" in m:
            lines.append(f"{r['dataset']:<12} {r['P']:>3} {r['strategy']:<18} failed: {m['error']}")
            continue
        mem, meas = memory_pair(p, m)
        label = r["strategy"] + (f" nb={r['blocks']}" if r["blocks"] > 1 else "") + (" *" if r["picked"] else "")
        lines.append(f"{r['dataset']:<12} {r['P']:>2}{'+' if r['oversubscribed'] else ' '} {label:<18} "
                     f"{p['epoch_s']:>12.4f} {m['epoch_s']:>8.4f} {p['epoch_s'] / m['epoch_s']:>6.2f} "
                     f"{p['bytes_per_epoch']:>11.0f} {m['bytes']:>11} "
                     f"{(p['bytes_per_epoch'] / m['bytes'] if m['bytes'] else float('nan')):>7.3f} "
                     f"{mem:>10.0f} {meas:>10} {mem / meas:>6.2f}")
    for name in args.datasets:
        for P in args.ranks:
            got = [r for r in rows if r["dataset"] == name and r["P"] == P and "error" not in r["measured"]]
            if not got:
                continue
            best = min(r["measured"]["epoch_s"] for r in got)
            pick = next((r for r in got if r["picked"]), None)
            if pick is not None:
                lines.append(f"{name} P={P}: pick {pick['strategy']} measured {pick['measured']['epoch_s']:.4f} s, "
                             f"best {best:.4f} s ({pick['measured']['epoch_s'] / best:.2f}x)")
    text = "\n".join(lines)
    print(text)
    written = write_results(out_dir, stamp, {".json": json.dumps(rows, indent=1) + "\n", ".txt": text + "\n"})
    print(f"wrote {' and '.join(str(p) for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
