"""Run under mpirun: ``python -m hpcdgnn run`` where rank RANK's node is said to have MIB MiB of memory per rank.

Usage: mpirun -np P python tests/mpi/small_node.py RANK MIB -- ARGS...  (MIB may be fractional)

Rank 0 checks the job's memory for every rank: against the smallest share of any rank, not its own node's.
"""

import sys

from mpi4py import MPI

from hpcdgnn.__main__ import main
from hpcdgnn.train import setup

if __name__ == "__main__":
    cut = sys.argv.index("--")
    if MPI.COMM_WORLD.rank == int(sys.argv[1]):
        real, small = setup.memory_share, int(float(sys.argv[2]) * 2**20)

        def memory_share(comm, device):
            real(comm, device)  # the node's collective, as every rank makes it
            return small

        setup.memory_share = memory_share
    sys.exit(main(sys.argv[cut + 1:]))
