"""Torch tensors inside the objects the communicator sends point to point and broadcasts (a pipeline's states and
gradients, ``sequences``' fetched snapshots): out of band, uncopied, as numpy views (tests/mpi/obj_tensor_check.py)."""

from __future__ import annotations

from tests.conftest import REPO, json_records


def test_tensors_in_objects_travel_out_of_band_and_arrive_whole(launcher):
    """P = 2. Sending a list holding a 128 MiB tensor adds no copy of it to the sender's memory (torch's own
    reduction pickles the storage into the stream, in band) and one to the receiver's (mpi4py's receive buffer, which
    the tensor then views). Tensors of every dtype the runs send — bfloat16 too, which numpy lacks — non-contiguous,
    zero-size, 0-dim, nested in dicts, lists and tuples, arrive through ``isend_obj`` / ``recv_obj`` and
    ``bcast_obj`` equal, contiguous, writable and detached (a Parameter stays one); one tensor twice arrives as one.
    A tensor on another device than the host is refused, naming it."""
    proc = launcher.run(2, [str(REPO / "tests" / "mpi" / "obj_tensor_check.py")], timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {r["rank"]: r for r in json_records(proc.stdout)}
    assert sorted(out) == [0, 1]
    assert out[1]["big_ok"], out
    assert out[0]["added_mib"] < 16, out  # the sender copied nothing
    assert out[1]["added_mib"] < 128 * 1.5, out  # the receiver one buffer
    assert out[1]["p2p"] == [], out[1]["p2p"]
    for r in out.values():
        assert r["bcast"] == [], r
    assert "meta tensor" in out[0]["refused"] and ".cpu()" in out[0]["refused"], out
