"""Run under mpirun: ``python -m hpcdgnn run`` with a pre-emption signal on one rank before its set-up.

Usage: mpirun -np P python tests/mpi/preempted_in_setup.py RANK -- ARGS...

Rank RANK installs the pre-emption handlers and sends itself SIGUSR1 (the scheduler's warning, here
before the data is read); the rest is the real command line. Every rank must stop after the set-up,
before any epoch, and exit 75.
"""

import os
import signal
import sys

from mpi4py import MPI

from hpcdgnn import preemption
from hpcdgnn.__main__ import main

if __name__ == "__main__":
    cut = sys.argv.index("--")
    if MPI.COMM_WORLD.rank == int(sys.argv[1]):
        preemption.install()
        os.kill(os.getpid(), signal.SIGUSR1)
    sys.exit(main(sys.argv[cut + 1:]))
