"""Run under mpirun: a library caller's run that raises on rank 0 leaves no progress thread behind there.

Usage: mpirun -np P python tests/mpi/library_error_check.py JOB OUTPUT

The job asks for ``comm.progress: thread`` and a fault on rank 0 in epoch 1 (``debug.fail_rank``). Rank 0
catches the exception as a library caller would, prints one JSON line (the error, whether a progress thread
is still alive or attached), then aborts the job, as it must (the other ranks wait in the backward's
exchange).
"""

import json
import sys
import threading

from hpcdgnn.comm import Communicator
from hpcdgnn.train import run_training


def main() -> None:
    """Train, catch the injected fault on rank 0, report, abort."""
    comm = Communicator()
    try:
        run_training(sys.argv[1], [], sys.argv[2], comm)
    except RuntimeError as e:
        alive = [t.name for t in threading.enumerate() if t.name == "hpcdgnn-mpi-progress" and t.is_alive()]
        print(json.dumps({"rank": comm.rank, "error": str(e), "alive": alive,
                          "attached": comm.progress.thread is not None}), flush=True)
        comm.abort(3)


if __name__ == "__main__":
    main()
