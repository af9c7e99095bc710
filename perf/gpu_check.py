"""Every model and strategy for a few epochs on a GPU, beside the CPU (issue 13 item 8).

    python perf/gpu_check.py --data DIR [--out DIR] [--epochs 3] [--workers 6] [--only NAME ...]

For each (model, strategy) of ``CASES``: one run on the CPU at P = 1 (the reference), then
``train.device: cuda`` at P = 1 and 2 over MPI — and for EvolveGCN-O and TM-GCN also P = 3 and
``comm.backend: nccl`` at P = 1 (NCCL refuses two ranks on one GPU, so that is the NCCL path a
one-GPU machine can run). Each run is ``python -m hpcdgnn run`` (through ``hpcdgnn.launch`` for
P > 1) on the prepared dataset ``--data``, link prediction, float32, hidden 8, 2 layers. Prints the
loss trajectories and the largest relative difference of each GPU run from the CPU one, or the
run's error line; for chunk, also the fusion cap its ranks chose (``fusion_memory_mb: auto``: the GPU's memory shared
among the ranks on it). ``--workers`` runs that many cases at once (a 16-core GPU node takes 6); ``--only`` keeps
the cases whose model or strategy is named.

Measured 2026-11-25 on an H100 (torch 2.11+cu130), email-Eu-core in 64 equal-event slices:
every case within 2.1e-6 of the CPU (``perf/results/gpu-h100/gpu_check.log``; ``gconv_lstm`` under
``pss`` was added after that run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

CASES = [(m, "snapshot") for m in ("evolvegcn_o", "cdgcn", "tmgcn", "tgcn_cell", "tgcn", "gconv_lstm", "gconv_gru",
                                   "gcrn_m1", "dcrnn", "mpnn_lstm", "dysat")]
# not the event-stream ``memory`` strategy (TGN): it takes another dataset kind
CASES += [("tmgcn", "vertex"), ("cdgcn", "vertex"), ("evolvegcn_o", "vertex"), ("tmgcn", "chunk"),
          ("evolvegcn_o", "chunk"), ("evolvegcn_o", "pss"), ("gconv_lstm", "pss"), ("tgcn", "sequences")]
#: (P, comm.backend) of the GPU runs beyond P = 1 and 2 over MPI, for these models under ``snapshot``
MORE = {"evolvegcn_o": [(3, "mpi"), (1, "nccl")], "tmgcn": [(3, "mpi"), (1, "nccl")]}


def run(args, model: str, strategy: str, device: str, P: int, backend: str = "mpi", dtype: str = "float32",
        task: str = "link_prediction", sets: list[str] | tuple[str, ...] = (),
        norms: bool = False) -> tuple[list | None, str]:
    """One training run into ``args.out`` (on ``args.data``, ``args.epochs`` epochs), with ``hpcdgnn run --set``
    overrides ``sets`` (``KEY=VALUE`` each).

    Returns (losses, 'epoch s') or (None, its error lines); ``norms``: the losses followed by each epoch's
    gradient norm (Adam hides a wrong gradient scale from the losses) and validation and test metrics.
    ``check_exactness.py`` runs its cases with it too.
    """
    name = f"{model}-{strategy}-{device}-p{P}-{backend}-{dtype}-{task}"
    job = args.out / f"{name}.yaml"
    section = {"name": task, "negatives": 1} if task == "link_prediction" else {"name": task}
    job.write_text(yaml.safe_dump({
        # TGN has no ``layers`` (one attention layer), and ``memory`` reproduces one rank with i = P (minibatch)
        "data": {"path": str(args.data)},
        "model": {"name": model, "hidden": 8, **({} if model == "tgn" else {"layers": 2})},
        "task": section, "strategy": {"name": strategy, **({"minibatch": P} if strategy == "memory" else {})},
        "train": {"epochs": args.epochs, "lr": 0.01, "seed": 0, "threads": 1, "dtype": dtype,
                  "warmup_epochs": 1, "device": device},
        "comm": {"backend": backend}, "output": {"dir": str(args.out)},
    }))
    launch = [sys.executable, "-m", "hpcdgnn.launch", "-np", str(P)] if P > 1 else []
    # cwd: ``-m`` looks in the working directory first, and this script checks the tree it lives in
    proc = subprocess.run([*launch, sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(args.out / name),
                           *(["--set", *sets] if sets else [])],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=900,
                          cwd=REPO)
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        return None, f"exit {proc.returncode}: " + " | ".join([ln for ln in lines if "rror" in ln][-3:] or lines[-4:])
    recs = [json.loads(line) for line in (args.out / name / "metrics.jsonl").read_text().splitlines()]
    cap = recs[-1].get("fusion", {}).get("cap_mb")
    values = [r["loss"] for r in recs]
    if norms:  # and the evaluation: a difference there alone would pass the losses and norms
        values += [r["grad_norm"] for r in recs] + [
            r[k] for r in recs for k in sorted(r) if k.startswith(("val_", "test_")) and isinstance(r[k], (int, float))]
    return values, f"epoch {recs[-1]['time']['epoch']['max']:.4f} s" + (
        f", fusion cap {cap:.0f} MiB" if cap is not None else "")


def fresh_out(base: Path | None, prefix: str) -> Path:
    """A new, empty directory for one check's runs, under ``base`` (created if missing) or the temporary directory.

    A run never writes over another, so a second check into the same place needs a directory of its own.
    """
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def check(args, case: tuple[str, str], emit) -> None:
    """The CPU reference and the GPU runs of one case, each line given to ``emit`` as its run ends (so a
    check cut short by a time limit still shows what it ran)."""
    model, strategy = case
    head = f"{model:12s} {strategy:9s}"
    ref, msg = run(args, model, strategy, "cpu", 1)
    emit(f"{head} cpu P1: " + (msg if ref is None else " ".join(f"{x:.6f}" for x in ref)))
    for P, backend in [(1, "mpi"), (2, "mpi"), *(MORE.get(model, []) if strategy == "snapshot" else [])]:
        got, msg = run(args, model, strategy, "cuda", P, backend)
        if got is None:
            emit(f"{head} cuda P{P} {backend}: FAIL {msg}")
            continue
        diff = max(abs(a - b) / abs(b) for a, b in zip(got, ref, strict=True)) if ref else float("nan")
        emit(f"{head} cuda P{P} {backend}: {' '.join(f'{x:.6f}' for x in got)}  rel.diff vs cpu {diff:.2e}  ({msg})")


def main() -> None:
    """Run every case, ``--workers`` at a time, and print each as it ends."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="a prepared hpcdgnn dataset directory")
    ap.add_argument("--out", type=Path, default=None,
                    help="where a new directory of this check's runs goes (default: the temporary directory)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME",
                    help="models or strategies to keep (default: all)")
    args = ap.parse_args()
    cases = [c for c in CASES if args.only is None or set(c) & set(args.only)]
    if not cases:
        sys.exit(f"gpu_check: --only {' '.join(args.only)} names no case; models and strategies: "
                 f"{' '.join(sorted({x for c in CASES for x in c}))}")
    args.data = args.data.resolve()  # the runs start in the repository
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_check: needs a GPU (torch sees none)")
    args.out = fresh_out(args.out, "hpcdgnn-gpu-check-")
    print(f"runs in {args.out}", flush=True)
    lock = threading.Lock()

    def emit(line: str) -> None:
        with lock:
            print(line, flush=True)

    with ThreadPoolExecutor(args.workers) as ex:
        list(ex.map(lambda case: check(args, case, emit), cases))


if __name__ == "__main__":
    main()
