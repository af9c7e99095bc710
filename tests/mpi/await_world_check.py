"""Rank 0 in hpcdgnn's start handshake while rank 1 plays another MPI program (tests/test_cli_errors.py).

Usage: mpirun -np 2 python tests/mpi/await_world_check.py MODE
  stop:     rank 1 stays silent; rank 0's stop() turns true after 1 s: it stops waiting and says so
  stranger: rank 1 sends rank 0 a message with the handshake's tag but not its content: rank 0 names it
Rank 0 prints its error and ends the job with MPI_Abort(5), as python -m hpcdgnn does.
"""

import sys
import time

from mpi4py import MPI

from hpcdgnn.comm.world import _HELLO_TAG, await_world

mode, world = sys.argv[1], MPI.COMM_WORLD
if world.Get_rank() == 0:
    t0 = time.monotonic()
    try:
        error = await_world(world, 60.0, stop=lambda: mode == "stop" and time.monotonic() > t0 + 1)
        print(f"ERROR {error} AFTER {time.monotonic() - t0:.1f}", flush=True)
    finally:  # whatever happened: rank 1 sleeps, and only an abort ends it
        world.Abort(5)
if mode == "stranger":
    import numpy as np

    world.Send(np.array([7], dtype=np.uint64), dest=0, tag=_HELLO_TAG)
time.sleep(60)  # a program that never joins hpcdgnn: only rank 0's abort ends it
