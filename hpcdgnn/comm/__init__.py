"""Communication: one :class:`Communicator` over mpi4py and the autograd all-to-all."""

from hpcdgnn.comm.autograd import AllToAllV, all_to_all_rows
from hpcdgnn.comm.communicator import CommStats, Communicator, TagStats

__all__ = ["AllToAllV", "CommStats", "Communicator", "TagStats", "all_to_all_rows"]
