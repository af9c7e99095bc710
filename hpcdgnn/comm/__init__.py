"""Communication: one :class:`Communicator` over mpi4py, its parts and the autograd all-to-all."""

from hpcdgnn.comm.autograd import AllToAllV, Redistribute, all_to_all_rows, redistribute
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.comm.exchange import Box, Exchange, Pending
from hpcdgnn.comm.stats import CommStats, TagStats, payload_bytes
from hpcdgnn.comm.world import World

__all__ = [
    "AllToAllV",
    "Box",
    "CommStats",
    "Communicator",
    "Exchange",
    "Pending",
    "Redistribute",
    "TagStats",
    "World",
    "all_to_all_rows",
    "payload_bytes",
    "redistribute",
]

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.comm.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
