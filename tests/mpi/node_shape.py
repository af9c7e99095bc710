"""Run under mpirun: the ``hpcdgnn`` command line on a node of another shape than this one.

Usage: mpirun -np P python tests/mpi/node_shape.py [--spare-core-ranks R,R...] [--memory-mib M] -- ARGS...

On a cluster some set-up decisions read the node: ``comm.progress: auto`` asks whether each rank has a
spare core (:func:`hpcdgnn.comm.progress.spare_core`), ``strategy.fusion_memory_mb: auto`` how much memory
each rank may count on (:func:`hpcdgnn.comm.device.memory_share`). So a job over nodes of two shapes, or
one requeued on another node type, decides differently from rank to rank or from run to run. One machine
cannot be given two shapes, so this wrapper answers those questions for it:

* ``--spare-core-ranks``: the ranks listed have a spare core, the others not;
* ``--memory-mib``: every rank may count on M MiB.

Everything else is the real command line: the run's MPI, its exchanges and its records.
"""

import argparse
import sys

import hpcdgnn.comm.progress as progress
import hpcdgnn.strategies.chunk as chunk
from hpcdgnn.__main__ import main


def _spare_core_for(ranks: set[int]):
    def spare_core(comm, threads: int) -> bool:
        return comm.rank in ranks
    return spare_core


def _memory_share_of(mib: float):
    def memory_share(comm, device) -> int:
        comm.world.node()  # a collective in the real one: keep every rank's calls in step
        return int(mib * 2**20)
    return memory_share


if __name__ == "__main__":
    cut = sys.argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--spare-core-ranks")
    p.add_argument("--memory-mib", type=float)
    shape = p.parse_args(sys.argv[1:cut])
    if shape.spare_core_ranks is not None:
        progress.spare_core = _spare_core_for({int(r) for r in shape.spare_core_ranks.split(",")})
    if shape.memory_mib is not None:
        chunk.memory_share = _memory_share_of(shape.memory_mib)
    sys.exit(main(sys.argv[cut + 1:]))
