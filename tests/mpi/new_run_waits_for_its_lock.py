"""Run under mpirun: ``python -m hpcdgnn run ... --output RUNDIR`` whose rank 0 finds the new run directory's
``run.lock`` held by another process right after it claimed the directory, so that it waits for it.

Usage: mpirun -np P python tests/mpi/new_run_waits_for_its_lock.py -- ARGS...

What holds it is a real process (another job's probe of the same RUNDIR, say: jobs/lib.sh's liveness check takes
the lock for a moment), which lets go when rank 0 exits. The rest is the real command line.
"""

import subprocess
import sys
from pathlib import Path

from hpcdgnn.__main__ import main
from hpcdgnn.train import setup

_HOLDER = """
import fcntl, os, sys, time
parent = os.getppid()
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
while os.getppid() == parent:  # until rank 0 is gone
    time.sleep(0.1)
"""


def _claim_then_lose_the_lock(claim):
    def claimed(run_dir: Path) -> bool:
        ok = claim(run_dir)
        holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(Path(run_dir) / "run.lock")],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "held"
        return ok

    return claimed


if __name__ == "__main__":
    setup.claim_run_dir = _claim_then_lose_the_lock(setup.claim_run_dir)
    sys.exit(main(sys.argv[sys.argv.index("--") + 1:]))
