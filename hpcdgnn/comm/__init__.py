"""Communication: one :class:`Communicator` over mpi4py and the autograd all-to-all."""

from hpcdgnn.comm.autograd import AllToAllV, Redistribute, all_to_all_rows, redistribute
from hpcdgnn.comm.communicator import Box, CommStats, Communicator, TagStats

__all__ = [
    "AllToAllV",
    "Box",
    "CommStats",
    "Communicator",
    "Redistribute",
    "TagStats",
    "all_to_all_rows",
    "redistribute",
]
