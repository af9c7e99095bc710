"""Bytes every rank holds to look up appearances under a chunk plan (DGC §4): the (T, N) owner table against the
appearance map (``hpcdgnn/partition/appearances.py``), side by side.

    python perf/bench_chunk_map.py [--data DIR ...] [--synthetic N T ACTIVE ...] [--ranks 4] [--chunk 4096]
                                   [--lookup table active]

Per case, P ranks' worth of set-up on one process, traced by ``tracemalloc`` (numpy reports its buffers to it):

- *table*: what a rank held before: the plan's (T, N) int32 chunk table, the int64 owner table made from it, the
  argsort numbering each owner's rows, and the rank's own keys;
- *map*: the plan's map in each ``--lookup`` form (``strategy.lookup``) as the broadcast delivers it (a pickle
  round trip), its lookup tables, the rank's keys.

Printed: active appearances A / T·N, the map's form, the peak and the bytes still held after set-up (both per rank,
MiB, the largest over the ranks), their ratios, the pickled bytes each rank receives, and the seconds a rank spends
on ``owner_of`` + ``local_of`` of 10⁶ random keys in each form (what a halo set-up or an in-place fetch asks).
``--data``: a prepared dataset, its chunks by label propagation (``plan_chunks``, as a run makes them);
``--synthetic``: N vertices, T snapshots, a fraction ACTIVE of appearances active, in random chunks of ``--chunk``.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hpcdgnn.partition.appearances import AppearanceMap, chunk_map  # noqa: E402
from hpcdgnn.strategies.halo import local_rows  # noqa: E402

MIB = 2**20


def _table_way(chunk: np.ndarray, chunk_owner: np.ndarray, rnn_owner: np.ndarray, rank: int, P: int) -> tuple:
    """The lookups as a rank made them from the (T, N) table: owner (int64), row on the owner, own keys."""
    owner = np.where(chunk >= 0, chunk_owner[np.maximum(chunk, 0)] if chunk_owner.shape[0] else 0,
                     rnn_owner[None, :]).ravel()
    local = local_rows(owner, P)
    mine = np.flatnonzero(owner == rank)
    return owner, local, mine


def _traced(fn) -> tuple[float, float, object]:
    """(peak MiB, MiB held by the result, result) of ``fn()``."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    out = fn()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / MIB, held / MIB, out


def _lookup_seconds(owner_of, local_of, total: int) -> float:
    keys = np.random.default_rng(0).integers(0, total, 1_000_000)
    t0 = time.perf_counter()
    owner_of(keys)
    local_of(keys)
    return time.perf_counter() - t0


def measure(name: str, T: int, N: int, P: int, key: np.ndarray, label: np.ndarray, chunk_owner: np.ndarray,
            rnn_owner: np.ndarray, lookup: str) -> dict:
    """Both ways for every rank; the largest rank's figures."""
    chunk = np.full((T, N), -1, dtype=np.int32)
    chunk.reshape(-1)[key] = label
    where = chunk_map(T, N, P, key, label, chunk_owner, rnn_owner, lookup)
    sent_table = len(pickle.dumps(chunk, protocol=5))
    sent_map = len(pickle.dumps(where, protocol=5))
    table_peak = table_held = map_peak = map_held = 0.0
    for rank in range(P):
        p, h, _ = _traced(lambda r=rank: (pickle.loads(pickle.dumps(chunk, protocol=5)),
                                          *_table_way(chunk, chunk_owner, rnn_owner, r, P)))
        table_peak, table_held = max(table_peak, p), max(table_held, h)

        def map_way(r=rank) -> tuple[AppearanceMap, np.ndarray]:
            m = pickle.loads(pickle.dumps(where, protocol=5))
            mine = m.keys_of(r)
            m.local_of(mine[:1])  # builds the lookup tables, as the halo set-up does
            return m, mine

        p, h, _ = _traced(map_way)
        map_peak, map_held = max(map_peak, p), max(map_held, h)
    owner, local, _ = _table_way(chunk, chunk_owner, rnn_owner, 0, P)
    fresh = pickle.loads(pickle.dumps(where, protocol=5))
    fresh.local_of(np.zeros(1, np.int64))  # its tables built, as the table way's are
    return {"case": name, "T": T, "N": N, "P": P, "active": key.shape[0] / (T * N), "form": type(where).__name__,
            "table_peak": table_peak, "map_peak": map_peak, "table_held": table_held, "map_held": map_held,
            "sent_table": sent_table / MIB, "sent_map": sent_map / MIB,
            "lookup_table": _lookup_seconds(lambda k: owner[k], lambda k: local[k], T * N),
            "lookup_map": _lookup_seconds(fresh.owner_of, fresh.local_of, T * N)}


def from_data(path: str, P: int) -> tuple:
    """A prepared dataset's chunk plan for P ranks (label propagation, Alg. 1), as ``run`` makes it."""
    from hpcdgnn.config.schema import DataConfig, JobConfig
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.partition.chunk_plan import plan_chunks
    from hpcdgnn.regimes import options_class

    m = load_manifest(path)
    job = JobConfig(data=DataConfig(path=path), strategy=options_class("strategy", "chunk")(name="chunk"))
    c = plan_chunks(m, P, job).chunks
    T, N = m.num_snapshots, m.num_vertices
    label = c.appearances.label_of(np.arange(T * N))
    key = np.flatnonzero(label >= 0)
    return Path(path).name, T, N, key, label[key], c.chunk_owner, c.rnn_owner


def synthetic(N: int, T: int, active: float, P: int, size: int) -> tuple:
    """Random active appearances in random chunks of ``size``, chunks and RNN owners dealt to P ranks."""
    rng = np.random.default_rng(1)
    key = np.sort(rng.choice(T * N, size=int(active * T * N), replace=False))
    C = max(1, key.shape[0] // size)
    label = rng.integers(0, C, key.shape[0]).astype(np.int32)
    return f"synthetic N={N} T={T}", T, N, key, label, rng.integers(0, P, C), rng.integers(0, P, N)


def main() -> None:
    """Measure each case; print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="*", default=[], help="prepared dataset directories")
    ap.add_argument("--synthetic", nargs=3, action="append", default=[], metavar=("N", "T", "ACTIVE"),
                    help="a random plan: vertices, snapshots, fraction of appearances active (repeatable)")
    ap.add_argument("--ranks", type=int, default=4, help="P")
    ap.add_argument("--chunk", type=int, default=4096, help="synthetic chunks' size, in appearances")
    ap.add_argument("--lookup", nargs="+", default=["table", "active"], choices=["auto", "table", "active"],
                    help="the map's forms to measure (strategy.lookup)")
    args = ap.parse_args()
    cases = [from_data(d, args.ranks) for d in args.data]
    for n, t, a in args.synthetic:  # one line for what numpy would refuse mid-way (a fraction past 1, say)
        try:
            n, t, a = int(n), int(t), float(a)
        except ValueError:
            ap.error(f"--synthetic {n} {t} {a}: N and T are whole numbers, ACTIVE a fraction")
        if n < 1 or t < 1 or not 0 < a <= 1:
            ap.error(f"--synthetic {n} {t} {a}: N, T >= 1 and 0 < ACTIVE <= 1")
        cases.append(synthetic(n, t, a, args.ranks, args.chunk))
    if not cases:
        ap.error("give --data DIR or --synthetic N T ACTIVE")
    print(f"{'case':<28} {'A/TN':>6} {'form':<12} {'peak MiB table/map':>19} {'ratio':>6} "
          f"{'held MiB table/map':>19} {'ratio':>6} {'sent MiB table/map':>19} {'lookup s table/map':>19}")
    for name, T, N, key, label, chunk_owner, rnn_owner in cases:
        for lookup in args.lookup:
            r = measure(name, T, N, args.ranks, key, label, chunk_owner, rnn_owner, lookup)
            print(f"{r['case']:<28} {r['active']:>6.3f} {r['form']:<12} "
                  f"{r['table_peak']:>9.1f}/{r['map_peak']:<9.1f} {r['table_peak'] / max(r['map_peak'], 1e-9):>6.2f} "
                  f"{r['table_held']:>9.1f}/{r['map_held']:<9.1f} {r['table_held'] / max(r['map_held'], 1e-9):>6.2f} "
                  f"{r['sent_table']:>9.1f}/{r['sent_map']:<9.1f} "
                  f"{r['lookup_table']:>9.3f}/{r['lookup_map']:<9.3f}", flush=True)


if __name__ == "__main__":
    main()
