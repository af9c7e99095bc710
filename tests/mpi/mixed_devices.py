"""Run under mpirun: ``python -m hpcdgnn run`` where rank RANK's device is said to be a GPU, the others' the CPU.

Usage: mpirun -np P python tests/mpi/mixed_devices.py RANK -- ARGS...

What ``train.device: auto`` does where only some nodes have a GPU: every rank must refuse the job in one line
(exit 2) before its first GPU call, instead of waiting in another collective than the others.
"""

import sys

import torch
from mpi4py import MPI

from hpcdgnn.__main__ import main
from hpcdgnn.train import setup

if __name__ == "__main__":
    cut = sys.argv.index("--")
    # no CUDA call follows: only the device's kind is read (and the others' CPU holds on a host with a GPU too)
    kind = "cuda" if MPI.COMM_WORLD.rank == int(sys.argv[1]) else "cpu"
    setup._device = lambda job, job_path, comm: torch.device(kind)
    sys.exit(main(sys.argv[cut + 1:]))
