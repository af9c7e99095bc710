"""The sixty-ninth session's exactness checks that ``perf/check_exactness.py`` does not run by itself.

    python perf/results/exactness-s69/extras.py memory --data EVENTS_DIR --layouts 2x1x2:1x1x2 ... [--out DIR]
    python perf/results/exactness-s69/extras.py grid --data DIR --models MODEL ... --shapes 2x2 1x5 ... [--out DIR]
    python perf/results/exactness-s69/extras.py resume --data DIR --ranks 5 --cases MODEL:STRATEGY ...
        [--variants fail grow sigterm] [--after S] [--from-ranks Q] [--out DIR]

``memory``: TGN under ``strategy: memory`` at the given i×j×k layouts, each against its reference layout
(``GOT:REF``; a reference of one rank is i = j = k = 1), float64, 3 epochs, as ``check_exactness.py`` runs it.
``grid``: each model under ``strategy: grid`` at each Ps×Pv shape (``strategy.snapshot_ranks``,
``vertex_ranks``; P = Ps·Pv), against the model under ``snapshot`` at P = 1 (``check_exactness.py``'s
``--set`` reaches the reference too, which refuses a grid key).
``resume``: each case at each P, three epochs uninterrupted, beside (``--variants``) ``fail``: a run whose rank 1
fails in epoch 2 after a checkpoint of epoch 1 (``checkpoint.every: 1``, ``debug.fail_rank``), resumed with
``--resume``; ``grow``: a run of one epoch resumed with ``--set train.epochs=3``; ``sigterm``: a run whose launcher
gets SIGTERM ``--after`` seconds into epoch 2 (a checkpoint between batches, exit 75), resumed; and with
``--from-ranks Q``, a run of one epoch at Q ranks resumed at P. Prints the largest relative difference of the
resumed runs' epochs 2 and 3 (losses, gradient norms, metrics) from the uninterrupted run's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from check_exactness import relative_difference, verdict  # noqa: E402
from gpu_check import REPO, fresh_out, run  # noqa: E402


def values(rundir: Path, epochs: set[int]) -> list[float]:
    """Losses, gradient norms and validation and test metrics of ``epochs`` (as ``gpu_check.run(norms=True)``)."""
    recs = [json.loads(ln) for ln in (rundir / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r["epoch"] in epochs]
    return [r["loss"] for r in recs] + [r["grad_norm"] for r in recs] + [
        r[k] for r in recs for k in sorted(r) if k.startswith(("val_", "test_")) and isinstance(r[k], (int, float))]


def launch(P: int, argv: list[str]) -> subprocess.CompletedProcess:
    pre = [sys.executable, "-m", "hpcdgnn.launch", "-np", str(P)] if P > 1 else []
    return subprocess.run([*pre, sys.executable, "-m", "hpcdgnn", "run", *argv], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=900, cwd=REPO)


def memory(args) -> int:
    bad = 0
    for pair in args.layouts:
        got, ref = (tuple(int(x) for x in s.split("x")) for s in pair.split(":"))
        res = {}
        for lay in (ref, got):
            i, j, k = lay
            ns = argparse.Namespace(data=args.data, epochs=args.epochs, out=fresh_out(args.out, f"mem{i}x{j}x{k}-"))
            sets = [f"strategy.minibatch={i}", f"strategy.epoch={j}", f"strategy.memory={k}", *args.sets]
            res[lay] = run(ns, "tgn", "memory", "cpu", i * j * k, dtype="float64", task=args.task, sets=sets,
                           norms=True)
        (g, gmsg), (r, rmsg) = res[got], res[ref]
        head = f"tgn memory {'x'.join(map(str, got))} (P{got[0] * got[1] * got[2]}) vs {'x'.join(map(str, ref))}"
        bad += verdict(head, g, r, gmsg, args.tol, ref_why=rmsg)
    return bad


def grid(args) -> int:
    bad = 0
    for model in args.models:
        ref, rmsg = run(argparse.Namespace(data=args.data, epochs=args.epochs, out=fresh_out(args.out, "grid-ref-")),
                        model, "snapshot", "cpu", 1, dtype="float64", task=args.task, sets=args.sets, norms=True)
        for shape in args.shapes:
            ps, pv = (int(x) for x in shape.split("x"))
            ns = argparse.Namespace(data=args.data, epochs=args.epochs, out=fresh_out(args.out, f"grid-{shape}-"))
            got, msg = run(ns, model, "grid", "cpu", ps * pv, dtype="float64", task=args.task,
                           sets=[f"strategy.snapshot_ranks={ps}", f"strategy.vertex_ranks={pv}", *args.sets],
                           norms=True)
            bad += verdict(f"{model:12s} grid {shape} (P{ps * pv})", got, ref, msg, args.tol, " vs snapshot P1",
                           rmsg)
    return bad


def stopped(P: int, job: Path, rundir: Path, sets: list[str], after: float) -> int:
    """Start ``job`` at P ranks into ``rundir``, SIGTERM the launcher ``after`` seconds into epoch 2 (once epoch 1's
    record is written): every rank checkpoints between batches (or at the epoch's end) and exits 75."""
    pre = [sys.executable, "-m", "hpcdgnn.launch", "-np", str(P)] if P > 1 else []
    rundir.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([*pre, sys.executable, "-m", "hpcdgnn", "run", str(job), "--output", str(rundir),
                             *(["--set", *sets] if sets else [])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=REPO)
    metrics = rundir / "metrics.jsonl"
    while proc.poll() is None and not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        time.sleep(0.05)
    time.sleep(after)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=900)


def resume(args) -> int:
    bad = 0
    for case in args.cases:
        model, _, strategy = case.partition(":")
        for P in args.ranks:
            head = f"{model:12s} {strategy:9s} P{P}"
            out = fresh_out(args.out, f"resume-{model}-{strategy}-p{P}-")
            ns = argparse.Namespace(data=args.data, epochs=3, out=out)
            full, msg = run(ns, model, strategy, "cpu", P, dtype="float64", task=args.task, sets=args.sets,
                            norms=True)
            if full is None:
                bad += 1
                print(f"{head} uninterrupted: FAIL {msg}", flush=True)
                continue
            name = f"{model}-{strategy}-cpu-p{P}-mpi-float64-{args.task}"
            full = values(out / name, {2, 3})
            todo = []
            if "fail" in args.variants:  # rank 1 fails in epoch 2 after epoch 1's checkpoint; resumed as it was
                ns_a = argparse.Namespace(data=args.data, epochs=3, out=out / "a")
                ns_a.out.mkdir()
                run(ns_a, model, strategy, "cpu", P, dtype="float64", task=args.task,
                    sets=[*args.sets, "checkpoint.every=1", "debug.fail_rank=1", "debug.fail_epoch=2"])
                todo.append(("fail+resume", P, ns_a.out / name, ["debug.fail_rank=-1"]))
            if "grow" in args.variants:  # one epoch, resumed to three
                ns_b = argparse.Namespace(data=args.data, epochs=1, out=out / "b")
                ns_b.out.mkdir()
                run(ns_b, model, strategy, "cpu", P, dtype="float64", task=args.task, sets=args.sets)
                todo.append(("1 epoch+resume to 3", P, ns_b.out / name, ["train.epochs=3"]))
            if "sigterm" in args.variants:  # SIGTERM in epoch 2: a checkpoint between batches, exit 75
                rundir = out / "c" / name
                rc = stopped(P, out / f"{name}.yaml", rundir, args.sets, args.after)
                step = sorted(p.name for p in (rundir / "checkpoints").glob("epoch-*"))
                todo.append((f"SIGTERM (exit {rc}, {step[-1] if step else 'no checkpoint'})+resume", P, rundir,
                             ["train.epochs=3"]))
            for Q in args.from_ranks:  # one epoch at Q ranks, resumed to three at P
                ns_d = argparse.Namespace(data=args.data, epochs=1, out=out / f"d{Q}")
                ns_d.out.mkdir()
                run(ns_d, model, strategy, "cpu", Q, dtype="float64", task=args.task, sets=args.sets)
                todo.append((f"1 epoch at P{Q}+resume to 3", P,
                             ns_d.out / f"{model}-{strategy}-cpu-p{Q}-mpi-float64-{args.task}", ["train.epochs=3"]))
            for tag, ranks, rundir, sets in todo:
                proc = launch(ranks, ["--resume", str(rundir), "--set", *sets])
                if proc.returncode != 0:
                    bad += 1
                    lines = (proc.stdout + proc.stderr).strip().splitlines()
                    print(f"{head} {tag}: FAIL exit {proc.returncode}: {' | '.join(lines[-3:])}", flush=True)
                    continue
                d = relative_difference(values(rundir, {2, 3}), full)
                bad += d > args.tol
                print(f"{head} {tag}: epochs 2-3 rel.diff {d:.2e} vs uninterrupted  "
                      f"{'ok' if d <= args.tol else 'DIFFERS'}", flush=True)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["memory", "grid", "resume"])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--layouts", nargs="+", default=[], metavar="IxJxK:IxJxK")
    ap.add_argument("--models", nargs="+", default=[])
    ap.add_argument("--shapes", nargs="+", default=[], metavar="PSxPV")
    ap.add_argument("--cases", nargs="+", default=[], metavar="MODEL:STRATEGY")
    ap.add_argument("--ranks", type=int, nargs="+", default=[5])
    ap.add_argument("--variants", nargs="+", default=["fail", "grow"], choices=["fail", "grow", "sigterm"])
    ap.add_argument("--after", type=float, default=2.0, help="sigterm: seconds into epoch 2")
    ap.add_argument("--from-ranks", type=int, nargs="+", default=[], help="resume at P a run of Q ranks")
    ap.add_argument("--task", default=None, help="default: link_prediction (memory: temporal_link_prediction)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", dest="sets")
    args = ap.parse_args()
    args.data = args.data.resolve()
    args.task = args.task or ("temporal_link_prediction" if args.what == "memory" else "link_prediction")
    bad = {"memory": memory, "grid": grid, "resume": resume}[args.what](args)
    print(f"{'all within' if not bad else f'{bad} failed or differ beyond'} {args.tol:g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
