"""Run under mpirun with P = 2: torch tensors inside objects through ``Communicator.isend_obj`` / ``recv_obj``
and ``bcast_obj`` (a pipeline's states and gradients, ``sequences``' fetched snapshots).

Usage: mpirun -np 2 python tests/mpi/obj_tensor_check.py
First rank 0 sends rank 1 a list holding one 128 MiB float32 tensor: the peak resident memory each side adds (the
sender's copy of it, if any; the receiver's buffers). Then both ranks build the same object of tensors (float32,
float64, int64, bool, bfloat16, int32, non-contiguous, zero-size, 0-dim, one requiring grad, a Parameter, one
tensor twice, large ones that mpi4py's messages carry out of band, nested in dicts, lists and tuples); rank 0 sends
it to rank 1 and broadcasts it; each receiver compares what it got with its own. Last, rank 0 sends a tensor that
is not on the host. Prints one JSON line per rank.
"""

import json
import resource
import traceback

import numpy as np
import torch

from hpcdgnn.comm import Communicator

BIG = 32 << 20  # float32s: 128 MiB


def peak_mib() -> float:
    """This process's peak resident memory, MiB (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make() -> dict:
    """The object both ranks build alike."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(6, 5, generator=g, dtype=torch.float64)
    twice = torch.arange(4.0)
    leaf = torch.randn(3, generator=g).requires_grad_()
    return {
        "f32": torch.randn(4, 3, generator=g),
        "f64": base,
        "i64": torch.arange(-5, 7),
        "bool": torch.tensor([True, False, True]),
        "bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "nested": [(torch.ones(2, dtype=torch.int32), {"deep": [torch.zeros(1, 2, 3)]}), 7, "text"],
        "transposed": base.t(),
        "strided": base[::2, 1:4],
        "empty": torch.empty(0, 3),
        "empty_bf16": torch.empty(0, dtype=torch.bfloat16),
        "scalar": torch.tensor(2.5),
        "leaf_grad": leaf,
        "nonleaf_grad": leaf * 2,
        "param": torch.nn.Parameter(torch.full((2, 2), 0.5)),
        "twice": [twice, twice],
        "big": torch.randn(300_000, generator=g),
        "big_bf16": torch.randn(700, 500, generator=g).to(torch.bfloat16).t(),
        "array": np.arange(5),
    }


def leaves(obj, path: str = ""):
    """(path, value) of every tensor and array in ``obj``."""
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{path}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}/{i}")


def compare(got, want) -> list[str]:
    """What differs between the received object and the one built here (empty: nothing)."""
    bad = []
    g, w = dict(leaves(got)), dict(leaves(want))
    if g.keys() != w.keys():
        return [f"paths {sorted(g)} != {sorted(w)}"]
    for path, x in g.items():
        y = w[path]
        if isinstance(y, np.ndarray):
            if not np.array_equal(x, y):
                bad.append(f"{path}: {x} != {y}")
            continue
        if type(x) is not type(y) or x.dtype != y.dtype or x.shape != y.shape:
            bad.append(f"{path}: {type(x).__name__} {x.dtype} {tuple(x.shape)}")
        elif not torch.equal(x.detach(), y.detach()):
            bad.append(f"{path}: values differ")
        elif x.requires_grad != isinstance(y, torch.nn.Parameter):  # data only, but a Parameter stays one
            bad.append(f"{path}: requires_grad {x.requires_grad}")
        elif x.device.type != "cpu" or not x.is_contiguous():
            bad.append(f"{path}: {x.device} contiguous={x.is_contiguous()}")
    with torch.no_grad():  # each writable (after the comparisons: "twice" is one tensor)
        for x in g.values():
            if isinstance(x, torch.Tensor):
                x.logical_not_() if x.dtype == torch.bool else x.add_(1)
    twice = got["twice"]
    if twice[0] is not twice[1]:
        bad.append("twice: one tensor arrived as two")
    if got["nested"][1:] != [7, "text"]:
        bad.append(f"nested: {got['nested'][1:]}")
    return bad


def main(comm: Communicator) -> None:
    me = comm.rank
    out: dict = {"rank": me}
    # the 128 MiB tensor first, while neither rank has freed memory a later allocation could reuse
    x = torch.ones(BIG) if me == 0 else None
    comm.wait_all([comm.isend_obj([torch.ones(4)], 1, 3, "r.warm")] if me == 0 else [], "r.warm")
    if me == 1:
        comm.recv_obj(0, 3, "r.warm")
    before = peak_mib()
    if me == 0:
        comm.wait_all([comm.isend_obj([x], 1, 4, "r.big")], "r.big")
    else:
        (y,) = comm.recv_obj(0, 4, "r.big")
        out["big_ok"] = bool(y.shape == (BIG,) and torch.equal(y[-3:], torch.ones(3)))
    out["added_mib"] = peak_mib() - before
    del x
    comm.barrier()

    want = make()
    if me == 0:
        comm.wait_all([comm.isend_obj(want, 1, 5, "r.obj")], "r.obj")
    else:
        out["p2p"] = compare(comm.recv_obj(0, 5, "r.obj"), want)
    out["bcast"] = compare(comm.bcast_obj(make() if me == 0 else None, tag="r.bcast"), want)

    refused = None
    if me == 0:
        try:
            comm.wait_all([comm.isend_obj([torch.empty(2, device="meta")], 1, 6, "r.meta")], "r.meta")
        except ValueError as e:
            refused = str(e)
    out["refused"] = refused
    if comm.bcast_obj(refused is None) and me == 1:  # it went: receive it
        comm.recv_obj(0, 6, "r.meta")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    world = Communicator()
    try:
        main(world)
    except BaseException:
        traceback.print_exc()
        world.abort(1)  # the other rank would wait in its receive for ever
