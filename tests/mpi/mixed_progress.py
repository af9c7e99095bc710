"""Run under mpirun: ``hpcdgnn run`` with ``comm.progress: auto`` where only some ranks get a thread.

Usage: mpirun -np P python tests/mpi/mixed_progress.py RANKS -- run JOB [ARGS...]

On a cluster ``auto`` decides per node (:func:`hpcdgnn.comm.progress.spare_core`), so nodes of another
shape or binding give a job whose ranks progress their exchanges differently: some by a thread, the rest
in their own calls. One node cannot be given two shapes, so this wrapper answers the node's question for
it: the ranks listed in RANKS (comma-separated) have a spare core, the others not. Everything else is the
real command line: the run's MPI, its exchanges and its records.
"""

import sys

import hpcdgnn.comm.communicator as communicator
from hpcdgnn.__main__ import main


def _spare_core_for(ranks: set[int]):
    def spare_core(comm, threads: int) -> bool:
        return comm.rank in ranks
    return spare_core


if __name__ == "__main__":
    listed, sep, *argv = sys.argv[1:]
    assert sep == "--", "usage: mixed_progress.py RANKS -- run JOB [ARGS...]"
    communicator.spare_core = _spare_core_for({int(r) for r in listed.split(",")})
    sys.exit(main(argv))
