"""The compiled kernels of another revision against this tree's, in one process (issue 13 item 1).

    python perf/bench_kernels.py --before REV --job JOB.yaml [--epochs 120] [--set KEY=VALUE ...]
    python perf/bench_kernels.py --before REV --micro [--repeat 12]

Why one process: this VM's speed varies from process to process (the same one-rank job 18.8-30.2 ms an
epoch from run to run, pinned or not), while the epochs of one run agree to a few per cent; a kernel
change of 5-10 % is lost between two runs. So REV's ``hpcdgnn/nn/_numba_kernels.py`` (``git show``) is
loaded beside this tree's, and

* ``--job``: one ``hpcdgnn run`` of the job (one rank, through ``hpcdgnn.__main__``, with its allocator
  restart) trains with REV's kernels on odd epochs and this tree's on even ones; the first four epochs
  (compilation, warm-up) are dropped. Prints the median epoch of each and new / old.
* ``--micro``: each decoder kernel on random arrays (N = 986 and 2^15 rows, hidden 16) and the LSTM
  recurrence (T = 64, H = 16, B = 2 and 16), the two modules alternating; prints ns a pair / us a call and
  how far their outputs part (relative to the largest).

A kernel REV defines with fewer trailing arguments than this tree passes (a flag added since) is called
without them. Only the compiled module differs between the two halves: the Python around it is this
tree's.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODULE = "hpcdgnn/nn/_numba_kernels.py"


class _Shim:
    """REV's module, each kernel called with at most as many positional arguments as it takes."""

    def __init__(self, module) -> None:
        self.module = module

    def __getattr__(self, name: str):
        fn = getattr(self.module, name)
        py = getattr(fn, "py_func", None)
        if py is None:
            return fn
        takes = len(inspect.signature(py).parameters)
        return lambda *args: fn(*args[:takes])


def load_before(rev: str, where: Path) -> _Shim:
    """REV's compiled-kernel module, written to ``where`` and imported under its own name."""
    src = subprocess.run(["git", "show", f"{rev}:{MODULE}"], cwd=REPO, capture_output=True, text=True)
    if src.returncode != 0:
        sys.exit(f"perf/bench_kernels.py: git show {rev}:{MODULE}: {src.stderr.strip()}")
    path = where / "_kernels_before.py"
    path.write_text(src.stdout)
    spec = importlib.util.spec_from_file_location("_kernels_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _Shim(module)


def epochs_ab(before: _Shim, job: str, epochs: int, sets: list[str]) -> None:
    """One training run, REV's kernels on odd epochs and this tree's on even ones."""
    import hpcdgnn.nn._numba_kernels as now
    import hpcdgnn.train.trainer as trainer
    from hpcdgnn.__main__ import main
    from hpcdgnn.nn import kernels

    times: dict[str, list[float]] = {"before": [], "now": []}
    train_epoch = trainer.train_epoch

    def alternating(run, task, epoch, meter):
        which = "before" if epoch % 2 else "now"
        kernels._compile()
        kernels._kernels = before if which == "before" else now
        t0 = time.perf_counter()
        out = train_epoch(run, task, epoch, meter)
        if epoch > 4:
            times[which].append(time.perf_counter() - t0)
        return out

    trainer.train_epoch = alternating
    sys.argv = ["hpcdgnn", "run", job, "--set", f"train.epochs={epochs}", *[a for s in sets for a in ("--set", s)]]
    try:
        main()
    except SystemExit as stop:
        if stop.code:
            raise
    if not times["now"] or not times["before"]:
        sys.exit("perf/bench_kernels.py: too few epochs to compare (the first four are dropped)")
    old, new = float(np.median(times["before"])), float(np.median(times["now"]))
    print(f"epoch (median of {len(times['before'])} / {len(times['now'])}): before {old * 1e3:.2f} ms, "
          f"now {new * 1e3:.2f} ms, now / before {new / old:.3f}")


def _relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over max |a|: how far two kernels' outputs part, at the outputs' scale."""
    return float(np.abs(a - b).max() / max(float(np.abs(a).max()), np.finfo(np.float64).tiny))


def micro(before: _Shim, repeat: int) -> None:
    """Each kernel on random arrays, the two modules alternating."""
    import hpcdgnn.nn._numba_kernels as now

    rng = np.random.default_rng(0)
    f32 = np.float32

    def timed(calls: dict, fresh) -> dict[str, tuple[float, list]]:
        out: dict[str, tuple[list[float], list]] = {k: ([], []) for k in calls}
        for it in range(repeat + 1):
            for name, call in calls.items():
                args = fresh()
                t0 = time.perf_counter()
                call(*args)
                if it:
                    out[name][0].append(time.perf_counter() - t0)
                out[name] = (out[name][0], args)
        return {k: (float(np.median(ts)), args) for k, (ts, args) in out.items()}

    for n, pairs in ((986, 200_000), (1 << 15, 2_000_000)):
        H = 16
        pu, pv = rng.standard_normal((n, H)).astype(f32), rng.standard_normal((n, H)).astype(f32)
        b1, w2 = (rng.standard_normal(H) * 0.1).astype(f32), rng.standard_normal(H).astype(f32)
        src, dst = np.sort(rng.integers(0, n, pairs)), rng.integers(0, n, pairs)
        label = (rng.random(pairs) < 0.5).astype(f32)

        def train_args():
            return (pu, pv, b1, w2, f32(0.1), src, dst, label, np.zeros(pairs, f32), np.zeros_like(pu),
                    np.zeros_like(pv), np.zeros(H), True)

        def forward_args():
            return (pu, pv, b1, w2, f32(0.1), src, dst, np.zeros(pairs, f32))

        for kernel, fresh, outs in (("edge_bce_train", train_args, (8, 9, 10, 11)),
                                    ("edge_mlp_forward", forward_args, (7,))):
            res = timed({"before": getattr(before, kernel), "now": getattr(now, kernel)}, fresh)
            diff = max(_relative_difference(res["before"][1][i], res["now"][1][i]) for i in outs)
            print(f"{kernel:17s} N={n:<6d} {pairs:>9d} pairs: before {res['before'][0] / pairs * 1e9:6.2f}, "
                  f"now {res['now'][0] / pairs * 1e9:6.2f} ns a pair; outputs differ by {diff:.1e} of their largest")
    for B in (2, 16):
        T, H = 64, 16
        gates = (rng.standard_normal((T, 4 * H, B)) * 2).astype(f32)
        w_hh = (rng.standard_normal((4 * H, H)) * 0.3).astype(f32)

        def lstm_args():
            states = [np.zeros((T + 1, H, B), f32) for _ in range(2)] + [np.zeros((T, H, B), f32) for _ in range(3)]
            return (gates.copy(), w_hh, *states, np.ones((0, 1, B), f32), True)

        res = timed({"before": before.lstm_forward, "now": now.lstm_forward}, lstm_args)
        diff = max(_relative_difference(res["before"][1][i], res["now"][1][i]) for i in (0, 2, 3, 6))
        print(f"lstm_forward      T={T} H={H} B={B:<3d}: before {res['before'][0] * 1e6:7.1f}, now "
              f"{res['now'][0] * 1e6:7.1f} us a call; outputs differ by {diff:.1e} of their largest")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="git revision whose compiled kernels are the baseline")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--job", help="a one-rank hpcdgnn job to train, alternating the kernels by epoch")
    what.add_argument("--micro", action="store_true", help="the kernels alone on random arrays")
    ap.add_argument("--epochs", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=12, help="--micro: timed calls per kernel and module")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="job overrides, as for run")
    args = ap.parse_args()
    if args.job:  # the allocator restart of `run` (hpcdgnn/allocator.py) happens here, before the temporary module
        from hpcdgnn.allocator import reexec

        reexec()
    with tempfile.TemporaryDirectory(prefix="hpcdgnn-kernels-") as tmp:
        before = load_before(args.before, Path(tmp))
        if args.micro:
            micro(before, args.repeat)
        else:
            epochs_ab(before, args.job, args.epochs, args.set)


if __name__ == "__main__":
    main()
