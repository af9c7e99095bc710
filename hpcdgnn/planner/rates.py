"""Machine rates the planner turns counted work into seconds with; measured by ``python -m hpcdgnn calibrate``.

One file per kind of machine (CPU or GPU name, device, dtype) beside the chunk workload predictor's
(:func:`~hpcdgnn.partition.workload.cache_root`): dense and sparse product rates per width, the time of one
framework call, collective latency and bandwidth per rank count, host-to-device bandwidth. Without a file the
documented defaults below apply (a 2020s server core, one thread per rank, an InfiniBand-class network) and
the plan says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hpcdgnn.atomic import atomic_write
from hpcdgnn.errors import ConfigError

__all__ = ["MachineRates", "load_rates", "rates_path", "save_rates"]


def _nearest(table: dict[str, float], key: int, default: float) -> float:
    """The value of the nearest measured key (log scale), or ``default``."""
    if not table:
        return default
    import math

    best = min(table, key=lambda k: abs(math.log(int(k)) - math.log(max(key, 1))))
    return float(table[best])


@dataclass
class MachineRates:
    """Per rank (one thread on a CPU, one GPU): what a second buys."""

    dense_flops: dict[str, float] = field(default_factory=dict)
    """FLOP/s of a (rows, w) x (w, w) product, by width w (default 5e9: one AVX2 core)."""
    rnn_flops: dict[str, float] = field(default_factory=dict)
    """FLOP/s of torch's fused LSTM forward and backward over (steps, rows, w), by width w (default 3e9)."""
    sparse_rate: dict[str, float] = field(default_factory=dict)
    """nnz x width per second of a CSR (n, n) x (n, w) product, by width w (default 3e8)."""
    op_seconds: float = 1.0e-5
    """Seconds of one framework call (dispatch, Python): what tiny graphs cost."""
    allreduce: dict[str, list[float]] = field(default_factory=dict)
    """P -> [latency s, bandwidth bytes/s] of a sum all-reduce (default 2e-5 s, 5e9 B/s)."""
    alltoall: dict[str, list[float]] = field(default_factory=dict)
    """P -> [latency s, bandwidth bytes/s per rank] of an all-to-all-v (default 3e-5 s, 5e9 B/s)."""
    sample_seconds: float = 1.5e-7
    """Seconds per entry of Ã_t the host-side sampler scans building a sample's block (``sequences``,
    ``hybrid``)."""
    pair_seconds: float = 6.0e-8
    """Host and framework seconds per pair a pair task (link prediction) scores from whole snapshots: drawing its
    negatives, ordering, scoring forward and backward (the decoder's multiply-adds apart)."""
    drawn_pair_seconds: float = 2.0e-8
    """Scoring in place (rows where they live): seconds per pair of all ranks, every one of which each rank draws."""
    placed_pair_seconds: float = 9.0e-8
    """Scoring in place: seconds per pair a rank keeps (a source row of its own) and scores."""
    norm_seconds: float = 6.0e-8
    """Seconds per stored entry of Ã_t normalised again (:func:`~hpcdgnn.ops.sparse.stacked_gcn_norm`): what
    a checkpoint block, which keeps no Ã_t, costs each time it runs forward (IBM §3.2)."""
    transpose_seconds: float = 9.0e-8
    """Seconds per stored entry of Ã_t transposed (:func:`~hpcdgnn.ops.sparse.csr_transpose`): a checkpoint
    block's backward builds its Ãᵀ anew."""
    h2d_bandwidth: float = 2.0e10
    """Host-to-device bytes/s (GPU; 0 on a CPU)."""
    machine: dict = field(default_factory=dict)
    source: str = "defaults"
    """The file these came from, or ``defaults``."""

    def dense(self, width: int) -> float:
        """Dense FLOP/s at ``width``."""
        return _nearest(self.dense_flops, width, 5.0e9)

    def rnn(self, width: int) -> float:
        """Fused RNN FLOP/s at ``width``."""
        return _nearest(self.rnn_flops, width, 3.0e9)

    def sparse(self, width: int) -> float:
        """Sparse nnz x width per second at ``width``."""
        return _nearest(self.sparse_rate, width, 3.0e8)

    def collective(self, kind: str, num_ranks: int) -> tuple[float, float]:
        """(latency s, bandwidth B/s) of ``allreduce`` or ``alltoall`` at the measured P nearest ``num_ranks``."""
        table = self.allreduce if kind == "allreduce" else self.alltoall
        default = (2.0e-5, 5.0e9) if kind == "allreduce" else (3.0e-5, 5.0e9)
        if not table:
            return default
        lat = _nearest({k: v[0] for k, v in table.items()}, num_ranks, default[0])
        bw = _nearest({k: v[1] for k, v in table.items()}, num_ranks, default[1])
        return lat, bw


def rates_path(device: str, dtype: str) -> Path:
    """``<cache>/rates-<machine>-<device>-<dtype>.json`` (``$HPCDGNN_RATES`` overrides)."""
    from hpcdgnn.partition.workload import cache_root, machine_slug

    env = os.environ.get("HPCDGNN_RATES")
    if env:
        return Path(env)
    return cache_root() / f"rates-{machine_slug(device)}-{device}-{dtype}.json"


def load_rates(device: str = "cpu", dtype: str = "float32", path: str | Path | None = None) -> MachineRates:
    """This machine's rates from ``path`` (or :func:`rates_path`); the defaults when no file exists.

    Raises:
        ConfigError: the file exists but is not a rates file (one line naming it).
    """
    p = Path(path) if path is not None else rates_path(device, dtype)
    if not p.is_file():
        if path is not None:
            raise ConfigError(f"--rates {p}: no such file; make one with python -m hpcdgnn calibrate --out {p}")
        return MachineRates()
    try:
        raw = json.loads(p.read_text())
        if not isinstance(raw, dict) or raw and not raw.keys() & MachineRates.__dataclass_fields__.keys():
            raise ValueError("it holds none of the rates")  # another JSON file: never merged into, never rewritten
        rates = MachineRates(**{k: v for k, v in raw.items() if k in MachineRates.__dataclass_fields__})
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{p}: not a rates file written by python -m hpcdgnn calibrate ({e})") from None
    rates.source = str(p)
    return rates


def save_rates(rates: MachineRates, path: Path) -> None:
    """Write ``rates`` atomically (a job reading it meanwhile sees the old or the new file, never half) and durably
    (:func:`atomic_write`; calibrations on several nodes sharing the cache never share a temporary)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(rates)
    data.pop("source")
    with atomic_write(path) as f:
        f.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
