"""DGC §6's offline workload profiler: time random chunks on this machine and fit the §4.2 workload MLPs.

DGC §4.2 weighs chunks in the Alg. 1 assignment by two MLPs (structure encoder,
time encoder) that §6 trains offline on measured times of random chunks on the
target devices. Making that predictor is a once-per-machine-kind step
(``python -m hpcdgnn profile``); using it is the chunk plan's, in
:mod:`hpcdgnn.partition.workload`, which defines the MLPs' inputs and the file
format. This package depends on that module and never the reverse, so planning
a job loads no sampling, timing or fitting code. One responsibility per module:

* :mod:`~hpcdgnn.profile.chunks` — the graph and the random chunks to time;
* :mod:`~hpcdgnn.profile.timer` — one chunk's encoder seconds, as the chunk strategy runs them;
* :mod:`~hpcdgnn.profile.fit` — fitting one MLP, and Eq. 8's MAPE;
* :mod:`~hpcdgnn.profile.profiler` — the profiling loop: sample, time, fit, score;
* :mod:`~hpcdgnn.profile.command` — the ``profile`` subcommand.
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
