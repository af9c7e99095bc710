"""Run several ``python -m hpcdgnn ARGS`` command lines one after another in one MPI launch (the test harness).

``mpirun -np P python tests/multirun.py SPEC.json``, where SPEC.json is ``{"commands": [[ARGS...], ...],
"out": DIR}``: every rank calls :func:`hpcdgnn.__main__.main` on each command in turn and writes what it printed
to ``DIR/<i>.rank<r>.out`` / ``.err`` and its exit status to ``DIR/<i>.rank<r>.rc``
(:meth:`tests.conftest.Launcher.run_many` reads them back as one finished process per command).

Why: a rank spends ~3.5 s of CPU importing torch on the 2-core CI machine and ~0.5 s training one of the
suite's small jobs, so the jobs a test compares at one P share one launch. A rank that crashes ends the whole
launch (the commands after it have no ``.rc``); the streams are files, not buffers, so what a command printed
before an ``MPI_Abort`` is kept.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

# run as a script, Python puts tests/ first on the path, where tests/profile would shadow the standard library's
# profile module (cProfile, which torch.optim's import reaches, then fails); hpcdgnn itself is installed
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)


def main(spec_path: str) -> int:
    from hpcdgnn import preemption
    from hpcdgnn.__main__ import main as hpcdgnn_main
    from hpcdgnn.comm.world import init_mpi

    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["out"])
    rank = init_mpi().COMM_WORLD.Get_rank()
    for i, args in enumerate(spec["commands"]):
        base = out / f"{i}.rank{rank}"
        with open(f"{base}.out", "w", buffering=1) as o, open(f"{base}.err", "w", buffering=1) as e, \
                contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            try:
                code = hpcdgnn_main(list(args))
            except SystemExit as exit_:  # argparse
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
            finally:
                preemption.reset()  # each command's run installs its own handlers, as in a process of its own
        Path(f"{base}.rc").write_text(str(code))
    # 0 whatever the commands said (their statuses are in the .rc files): a rank exiting non-zero would make
    # Open MPI end the others, maybe before a slower one wrote its last .rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
