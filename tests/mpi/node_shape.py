"""Run under mpirun: the ``hpcdgnn`` command line on a node of another shape than this one.

Usage: mpirun -np P python tests/mpi/node_shape.py [--memory-mib M] -- ARGS...

On a cluster some set-up decisions read the node: ``strategy.fusion_memory_mb: auto`` asks how much memory
each rank may count on (:func:`hpcdgnn.comm.device.memory_share`). So a job requeued on another node type
decides differently from run to run. One machine cannot be given two shapes, so this wrapper answers that
question for it:

* ``--memory-mib``: every rank may count on M MiB.

Everything else is the real command line: the run's MPI, its exchanges and its records.
"""

import argparse
import sys

import hpcdgnn.strategies.chunk as chunk
from hpcdgnn.__main__ import main


def _memory_share_of(mib: float):
    def memory_share(comm, device) -> int:
        comm.world.node()  # a collective in the real one: keep every rank's calls in step
        return int(mib * 2**20)
    return memory_share


if __name__ == "__main__":
    cut = sys.argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--memory-mib", type=float)
    shape = p.parse_args(sys.argv[1:cut])
    if shape.memory_mib is not None:
        chunk.memory_share = _memory_share_of(shape.memory_mib)
    sys.exit(main(sys.argv[cut + 1:]))
