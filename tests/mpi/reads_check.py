"""Run under mpirun: what each rank reads in the vertex / chunk set-up, and that it is exact. Exit 0 = pass.

Usage: mpirun -np P python tests/mpi/reads_check.py JOB.yaml CASE [CASE ...] [JOB2.yaml CASE ...]

CASE is ``STRATEGY[:PARTITION]:MODEL:DTYPE[:GAP]`` (e.g. ``vertex:hash:cdgcn:float64:0``; GAP sets
``ShardReader.max_gap_bytes``), or ``block:DTYPE`` — every snapshot's rows on one rank, snapshots in
contiguous blocks (a layout where a rank owns no row of most shards). For each case the strategy's
set-up runs on a fresh reader and its :func:`read_owned_rows` output is compared, bit for bit, with
the reference below: the former implementation, which read every snapshot in full and normalised it
with ``gcn_norm``. Prints one JSON line per rank and case: the reader's counters, the shards the
rank's rows lie in, and the bytes of the set-up halo exchange.
"""

import json
import sys

import numpy as np
import torch

from hpcdgnn.comm import Communicator
from hpcdgnn.config.load import load_job
from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.metrics import is_train_tag
from hpcdgnn.nn.models import build_from_options
from hpcdgnn.ops.sparse import gcn_norm, sorted_csr
from hpcdgnn.partition.plan import balanced_bounds
from hpcdgnn.strategies import StrategyContext, get_strategy
from hpcdgnn.strategies import halo as halo_mod


def reference_owned_rows(reader, num_snapshots, num_vertices, vertices_at, dtype, precompute=True):
    """The former ``read_owned_rows``: every snapshot read in full and normalised (IBM Eq. 1)."""
    N = num_vertices
    rows, keys, vals, ax = [], [], [], []
    offset = 0
    F = reader.manifest.num_features
    for t in range(num_snapshots):
        snap = reader.read(t)
        a = gcn_norm(t, snap.indptr, snap.indices, snap.weights, dtype).a
        crow, col, val = a.crow_indices(), a.col_indices(), a.values()
        vs = torch.from_numpy(np.asarray(vertices_at(t), dtype=np.int64))
        k = vs.shape[0]
        start, count = crow[vs], crow[vs + 1] - crow[vs]
        idx = torch.repeat_interleave(start - torch.cumsum(count, 0) + count, count) + torch.arange(int(count.sum()))
        local = torch.repeat_interleave(torch.arange(k), count)
        c, v = col[idx], val[idx]
        x = torch.from_numpy(snap.x).to(dtype)
        if not precompute:
            ax.append(x[vs])
        else:
            ax.append(torch.sparse.mm(sorted_csr(local, c, v, (k, N)), x) if k else x.new_zeros(0, F))
        rows.append(local + offset)
        keys.append(c.numpy().astype(np.int64) + t * N)  # keys t * N + v are int64 (gcn_norm keeps int32 columns)
        vals.append(v)
        offset += k
    empty = torch.zeros(0, dtype=torch.int64)
    return (torch.cat(rows) if rows else empty, np.concatenate(keys) if keys else empty.numpy(),
            torch.cat(vals) if vals else torch.zeros(0, dtype=dtype),
            torch.cat(ax) if ax else torch.zeros(0, F, dtype=dtype))


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical: dtype, shape and every value."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def run_case(comm, job_path: str, case: str, manifest) -> dict:
    """Set up one case on a fresh reader; check it against the reference; return this rank's counts."""
    P, me = comm.size, comm.rank
    parts = case.split(":")
    T, N = manifest.num_snapshots, manifest.num_vertices
    captured = {}
    real = halo_mod.read_owned_rows

    def spy(reader, T_, N_, vertices_at, dtype, comm_, owner_of, local_of, precompute=True):
        captured.update(vertices_at=vertices_at, dtype=dtype, precompute=precompute)
        captured["out"] = real(reader, T_, N_, vertices_at, dtype, comm_, owner_of, local_of, precompute)
        return captured["out"]

    before = comm.stats.snapshot()
    reader = ShardReader(load_job(job_path).data.path, manifest)
    if parts[0] == "block":  # not a strategy: read_owned_rows with whole snapshots in contiguous blocks
        dtype = getattr(torch, parts[1])
        sb = np.asarray(balanced_bounds(T, P))
        owner = np.repeat(np.arange(P), np.diff(sb))
        captured.update(vertices_at=lambda t: np.arange(N) if owner[t] == me else np.zeros(0, np.int64),
                        dtype=dtype, precompute=True)
        captured["out"] = real(reader, T, N, captured["vertices_at"], dtype, comm, lambda k: owner[k // N],
                               lambda k: (k // N - sb[owner[k // N]]) * N + k % N)
    else:
        name = parts[0]
        overrides = [f"strategy.name={name}"]
        if name == "vertex":
            overrides.append(f"strategy.partition={parts[1]}")
            parts = parts[1:]
        model_name, dtype_name = parts[1], parts[2]
        if len(parts) > 3:
            reader.max_gap_bytes = int(parts[3])
        overrides += [f"model.name={model_name}", f"train.dtype={dtype_name}"]
        job = load_job(job_path, overrides)
        dtype = getattr(torch, dtype_name)
        plan = comm.bcast_obj(get_strategy(name).make_plan(manifest, P, job) if me == 0 else None)
        torch.manual_seed(0)
        model = build_from_options(job.model, manifest.num_features).to(dtype=dtype)
        strategy = get_strategy(name)(StrategyContext(job, manifest, comm, dtype, job.data.path))
        halo_mod.read_owned_rows = spy
        try:
            strategy.setup(plan, model, None, reader)
        finally:
            halo_mod.read_owned_rows = real
    counters = {k: getattr(reader, k) for k in ("shards_opened", "bytes_read", "rows_read", "entries_read")}
    reader.close()
    tags = comm.stats.delta(before)

    owned, halo = captured["out"]
    with ShardReader(load_job(job_path).data.path, manifest) as full:
        ref = reference_owned_rows(full, T, N, captured["vertices_at"], captured["dtype"], captured["precompute"])
    got = (owned.row, owned.key, owned.val, owned.ax)
    exact = [same(got[0], ref[0]), np.array_equal(got[1], ref[1]) and got[1].dtype == ref[1].dtype,
             same(got[2], ref[2]), same(got[3], ref[3])]
    assert all(exact), f"rank {me} {case}: row/key/val/ax identical to the full read: {exact}"
    assert halo.n_local == sum(len(captured["vertices_at"](t)) for t in range(T))
    needed = sorted({manifest.shard_of(t).file for t in range(T) if len(captured["vertices_at"](t))})
    assert not any(is_train_tag(k) and v.bytes_sent for k, v in tags.items()), f"training bytes at set-up: {tags}"
    return {"rank": me, "case": case, **counters, "shards_needed": len(needed), "n": int(halo.n_local),
            "halo_rows": int(halo.num_rows), "precompute": captured["precompute"],
            "setup_halo_sent": tags["setup.halo"].bytes_sent if "setup.halo" in tags else 0}


def main() -> None:
    """Run every case of every job given (see the module docstring)."""
    comm = Communicator()
    job_path = manifest = None
    for arg in sys.argv[1:]:
        if arg.endswith((".yaml", ".yml")):  # the job (dataset) of the cases that follow
            job_path = arg
            manifest = load_manifest(load_job(job_path).data.path)
            torch.set_num_threads(max(load_job(job_path).train.threads, 1))
            continue
        print(json.dumps({"job": job_path, **run_case(comm, job_path, arg, manifest)}), flush=True)


if __name__ == "__main__":
    main()
