"""Run under mpirun: read_events_per_node against read_events. Exit 0 = pass.

Usage: mpirun -np P python tests/mpi/events_node_check.py DATASET_DIR

Every rank gets the whole stream equal to read_events'; only one rank of the node opened the shards
(counted by wrapping read_events), and the others' arrays are views of shared memory (they do not own
their data). Prints one JSON line per rank.
"""

import json
import sys

import numpy as np

import hpcdgnn.data.events as E
from hpcdgnn.comm import Communicator


def main() -> None:
    root = sys.argv[1]
    comm = Communicator()
    calls = []
    plain = E.read_events

    def counted(*a, **k):
        calls.append(1)
        return plain(*a, **k)

    E.read_events = counted
    ev, windows = E.read_events_per_node(comm, root)
    E.read_events = plain
    ref = plain(root)
    for name in ("src", "dst", "t", "efeat"):
        assert np.array_equal(getattr(ev, name), getattr(ref, name)), f"rank {comm.rank}: {name} differs"
    assert ev.start == ref.start
    shared = comm.size > 1 and not ev.src.flags.owndata and not ev.src.flags.writeable
    # the temporal CSR the memory strategy shares the same way: equal to a private one, queries alike
    from hpcdgnn.data.temporal_neighbors import TemporalNeighbors

    mine = TemporalNeighbors(ref.src, ref.dst, int(max(ref.src.max(), ref.dst.max())) + 1)
    arrays, more = comm.world.share_per_node(mine.arrays, "temporal neighbour index")
    got = TemporalNeighbors.from_arrays(arrays, mine.num_events, mine.num_vertices)
    for k, a in mine.arrays().items():
        assert np.array_equal(a, getattr(got, k)), f"rank {comm.rank}: CSR {k} differs"
    nodes = np.arange(mine.num_vertices)
    cut = np.full(nodes.shape, mine.num_events // 2)
    assert np.array_equal(got.recent(nodes, cut, 3).nodes, mine.recent(nodes, cut, 3).nodes)
    print(json.dumps({"rank": comm.rank, "reads": len(calls), "shared": shared, "windows": len(windows),
                      "csr_windows": len(more)}))


if __name__ == "__main__":
    main()
