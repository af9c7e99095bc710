"""The communicator stays split along its seams: collectives on :class:`Communicator`, the exchanges on
``comm.exchange``, the node and backend on ``comm.world``, the counters in :mod:`hpcdgnn.comm.stats` — none
of them a catch-all with dozens of public methods."""

from __future__ import annotations

import inspect

import pytest

from hpcdgnn.comm import CommStats, Communicator, Exchange, World

#: the most public methods (properties included) one class of the communicator may have
MOST = 16


def public_methods(cls: type) -> list[str]:
    """The public callables and properties ``cls`` itself defines (methods, static and class methods, properties)."""
    kinds = (staticmethod, classmethod, property)
    return sorted(name for name, value in vars(cls).items()
                  if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, kinds)))


@pytest.mark.parametrize("cls", [Communicator, Exchange, World, CommStats])
def test_no_part_of_the_communicator_has_too_many_public_methods(cls):
    names = public_methods(cls)
    assert 0 < len(names) <= MOST, f"{cls.__name__}: {len(names)} public methods: {names}"


def test_the_parts_hold_what_the_seams_say():
    """Each operation has one home: the exchanges are not on the communicator, nor the collectives on a part."""
    assert {"alltoallv", "alltoall_boxes", "ialltoall_boxes", "ibarrier", "test", "wait", "defer", "deferred",
            "complete_deferred", "buffer"} == set(public_methods(Exchange))
    assert {"node", "local_rank_size", "shared_array", "share_per_node", "library_version",
            "init_tensor_backend"} == set(public_methods(World))
    collectives = {"allreduce_", "iallreduce_", "bcast_", "allreduce_array", "gather_array", "isend_obj", "recv_obj",
                   "wait_all", "bcast_obj", "allgather_obj", "barrier", "abort", "split", "free", "close", "start"}
    assert set(public_methods(Communicator)) == collectives


def test_a_split_has_parts_of_its_own():
    """Exchange buffers, datatypes and the node split are per communicator; the counters are shared."""
    comm = Communicator()  # one process
    child = comm.split(0)
    try:
        assert child.exchange is not comm.exchange and child.world is not comm.world
        assert child.stats is comm.stats  # one table per rank, whatever communicator a byte crossed
    finally:
        child.free()


def test_the_mpi4py_floor_has_the_pickle_protocol_5_broadcast():
    """``bcast_obj`` goes through ``mpi4py.util.pkl5``'s broadcast, which mpi4py added in 4.0.0 (3.1 had pkl5's
    point-to-point calls only, those of ``isend_obj`` / ``recv_obj``): under 3.1 the wrapper inherits
    ``MPI.Comm.bcast``, one pickled message, and an object over 2 GiB fails again. pyproject.toml's floor must be
    4.0 or later (read as text: no MPI starts here, and tomllib needs Python 3.11)."""
    import re

    from tests.conftest import REPO

    floors = re.findall(r'"mpi4py\s*>=\s*([0-9]+)\.([0-9]+)', (REPO / "pyproject.toml").read_text())
    assert len(floors) == 1 and (int(floors[0][0]), int(floors[0][1])) >= (4, 0), floors
