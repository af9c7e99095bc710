"""DGC §6's offline workload profiler: time random chunks on this machine and fit the §4.2 workload MLPs.

Run once per machine kind (``python -m hpcdgnn profile``); the plan reads the result through
:mod:`hpcdgnn.partition.workload`, which this package imports and never the reverse.
"""

from hpcdgnn.profile.chunks import Topology, profile_graph, random_chunks
from hpcdgnn.profile.command import run_profile
from hpcdgnn.profile.fit import fit_mlp, mape
from hpcdgnn.profile.profiler import profile
from hpcdgnn.profile.timer import ChunkTimer, detached_time_params

__all__ = [
    "ChunkTimer",
    "Topology",
    "detached_time_params",
    "fit_mlp",
    "mape",
    "profile",
    "profile_graph",
    "random_chunks",
    "run_profile",
]

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.profile.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
