"""Does P ranks reproduce one process on this dataset? Every case's losses, norms and metrics at each P, beside P = 1.

    python perf/check_exactness.py --data DIR [--ranks 2 3] [--cases MODEL:STRATEGY ...]
                                   [--task link_prediction] [--epochs 3] [--tol 1e-9] [--workers 1] [--out DIR]
                                   [--set KEY=VALUE ...]

The test suite shows exactness on small generated graphs at P = 2 and 3; this runs the same claim on
your prepared dataset (``prepare`` / ``generate``) and your rank counts, on the CPU, in float64 (where
a sum's order changes only the last bits). For each case, ``python -m hpcdgnn run`` (through
``hpcdgnn.launch`` for P > 1) trains ``--epochs`` epochs (hidden 8, 2 layers, seed 0, one thread per
rank), and the largest relative difference of its losses, gradient norms (Adam hides a wrong gradient scale
from the losses) and validation and test metrics, every epoch's, from the reference is printed:

* a full-batch strategy (``Strategy.full_batch``: snapshot, pss, vertex, chunk, grid) against the model
  under ``snapshot`` at P = 1, the single-process engine;
* the others (``sequences``' mini-batches, ``hybrid``'s batches, ``memory``'s event batches) against the same
  strategy at P = 1: which samples form a step depends on the seed, the epoch and the step, never on P.
  ``hybrid``'s default adjuster rewards the measured step time, which differs from run to run: check it with
  ``--set strategy.adjuster.reward_time=work`` (or ``adjuster.kind=fixed``/``random``); ``averaging.mode:
  async`` is approximate by design. ``memory`` runs i = P (``strategy.minibatch``): on a raw-second stream the
  last step's gradient norm drifts by rounding grown through training (8e-9 after 3 epochs at P = 4, 7 on
  12,000 CollegeMsg events, as one process on 2 threads does beside 1), so give it ``--epochs 2`` or a
  looser ``--tol``.

``--set`` passes job settings to every run, the references included (``hpcdgnn run --set``), except a
``strategy.KEY`` that a reference's strategy has no option for (``--set strategy.lookup=active`` with chunk
cases: the ``snapshot`` references run without it, as the header line says): settings
that must change no result are checked this way at your rank counts — who moves the bytes, and in how
many pieces: ``--set comm.grad_buckets=3`` for any case, and with ``--cases
cdgcn:snapshot tgcn:snapshot`` also ``strategy.overlap_chunks=3`` or ``strategy.blocks=2`` (a ``strategy``
key belongs to the strategies that have it: the job's config refuses it for the others, so such a run fails
with that line; TM-GCN's time halo and EvolveGCN-O move no redistribution for the chunks to overlap: add
``strategy.time_halo=off`` for TM-GCN).

A run that fails prints its error line. Exit status 1 if any run failed or differs by more than
``--tol``, else 0. Stale aggregation (``strategy.stale``) is off: it is approximate by design.
Measured 2026-11-27 on this repository's 2-core VM: ``--data`` CollegeMsg in 37 snapshots ``--ranks 4 5``,
the 24 runs of the default cases within 9.9e-16; the same comparison on four more real datasets at P up
to 16 (> N) within 4e-15 (``perf/results/README.md``, nineteenth session). Again 2026-12-06 at P = 4, 5, 7
on CollegeMsg, bitcoinalpha and email-Eu-core, every exact strategy and these settings within 8.8e-14
(``perf/results/exactness-s69/``).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check import fresh_out, run  # noqa: E402

DEFAULT_CASES = [f"{m}:{s}" for s in ("snapshot", "pss", "vertex", "chunk") for m in ("tmgcn", "cdgcn", "evolvegcn_o")]


def parse_case(text: str) -> tuple[str, str]:
    """``MODEL:STRATEGY`` -> (model, strategy); a registered strategy, or a one-line exit."""
    from hpcdgnn.strategies.registry import available_strategies

    model, sep, strategy = text.partition(":")
    if not sep or not model or strategy not in available_strategies():
        sys.exit(f"check_exactness: --cases {text!r}: expected MODEL:STRATEGY with STRATEGY one of "
                 f"{', '.join(available_strategies())}")
    return model, strategy


def reference_of(model: str, strategy: str) -> tuple[str, str]:
    """The (model, strategy) whose P = 1 run a case must reproduce (the module docstring)."""
    from hpcdgnn.strategies.registry import get_strategy

    return (model, "snapshot") if get_strategy(strategy).full_batch else (model, strategy)


def taken_by(strategy: str, sets: list[str]) -> list[str]:
    """The ``--set`` settings a run of ``strategy`` accepts: all but a ``strategy.KEY`` it has no option for."""
    import dataclasses

    from hpcdgnn.regimes import options_class

    fields = {f.name for f in dataclasses.fields(options_class("strategy", strategy))}
    return [s for s in sets if not s.startswith("strategy.") or s.partition("=")[0].split(".")[1] in fields]


def relative_difference(got: list[float], ref: list[float]) -> float:
    """The largest |got - ref| / |ref| over epochs (inf where the trajectories differ in length)."""
    if len(got) != len(ref):
        return float("inf")
    return max((abs(a - b) / max(abs(b), 1e-300) for a, b in zip(got, ref, strict=True)), default=0.0)


def verdict(head: str, got: list[float] | None, ref: list[float] | None, why: str, tol: float, against: str = "",
            ref_why: str = "no reference run") -> int:
    """Print one case's line — its largest relative difference from ``ref`` (``against``: what ``ref`` is), or
    the failed run's error (``why`` / ``ref_why``) — and return 1 where it failed or differs by more than ``tol``."""
    if got is None or ref is None:
        print(f"{head}: FAIL {why if got is None else ref_why}", flush=True)
        return 1
    d = relative_difference(got, ref)
    print(f"{head}: rel.diff {d:.2e}{against}  {'ok' if d <= tol else 'DIFFERS'}  ({why})", flush=True)
    return int(d > tol)


def main() -> int:
    """Run the references, then every (case, P); print one line each and a verdict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="a prepared hpcdgnn dataset directory")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--cases", nargs="+", default=DEFAULT_CASES, metavar="MODEL:STRATEGY")
    ap.add_argument("--task", default="link_prediction")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--workers", type=int, default=1, help="runs at once (each P-rank run takes P cores)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where a new directory of this check's runs goes (default: the temporary directory)")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", dest="sets",
                    help="job settings for every run, the references too (hpcdgnn run --set)")
    args = ap.parse_args()
    if not args.data.is_dir():
        sys.exit(f"check_exactness: --data {args.data}: not a directory")
    if any(p < 1 for p in args.ranks):
        sys.exit(f"check_exactness: --ranks {args.ranks}: rank counts are >= 1")
    cases = [parse_case(c) for c in args.cases]
    args.data = args.data.resolve()  # the runs start in the repository
    args.out = fresh_out(args.out, "hpcdgnn-exactness-")
    sets = f", --set {' '.join(args.sets)}" if args.sets else ""
    refs = sorted({reference_of(*c) for c in cases})
    # a reference of another strategy than its cases' runs without their strategy's own options
    ref_sets = {s: taken_by(s, args.sets) for s in {s for _, s in refs}}
    left = {s: [x for x in args.sets if x not in kept] for s, kept in ref_sets.items()}
    sets += "".join(f" ({s} references without {' '.join(x)})" for s, x in sorted(left.items()) if x)
    print(f"{args.data}: {args.task}, {args.epochs} epochs, float64{sets}; runs in {args.out}", flush=True)

    def one(key: tuple[str, str, int]) -> tuple[list | None, str]:
        model, strategy, P = key
        reference = P == 1 and (model, strategy) in refs
        return run(args, model, strategy, "cpu", P, dtype="float64", task=args.task,
                   sets=ref_sets[strategy] if reference else args.sets, norms=True)

    keys = [(m, s, P) for m, s in cases for P in args.ranks]
    bad = 0

    def report(key: tuple[str, str, int]) -> None:  # printed as each run ends: a long check shows progress
        nonlocal bad
        model, strategy, P = key
        (got, msg), ref = done[key], done[(*reference_of(model, strategy), 1)][0]
        bad += verdict(f"{model:12s} {strategy:9s} P{P}", got, ref, msg, args.tol,
                       f" vs {reference_of(model, strategy)[1]} P1")

    with ThreadPoolExecutor(args.workers) as ex:
        done = dict(zip([(m, s, 1) for m, s in refs], ex.map(one, [(m, s, 1) for m, s in refs]), strict=True))
        for (m, s, _), (got, msg) in done.items():
            if got is None:
                print(f"{m:12s} {s:9s} P1 (reference): FAIL {msg}", flush=True)
        for key in keys:  # a case at P = 1 may be a reference itself: run once
            if key in done:
                report(key)
        todo = [k for k in keys if k not in done]
        for key, result in zip(todo, ex.map(one, todo), strict=True):
            done[key] = result
            report(key)
    print(f"{len(keys) - bad} of {len(keys)} runs reproduce P = 1 within {args.tol:g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
