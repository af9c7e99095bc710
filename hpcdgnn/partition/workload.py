"""Chunk workload models for DGC's chunk assignment (§4.2, Alg. 1): a vertex/edge count, or two profiled MLPs.

DGC §4.2: counting a chunk's vertices and edges "cannot provide sufficient
estimation accuracy because the execution time of a chunk on a GPU is
determined by many factors, such as the number of vertices, number of edges,
sequence lengths, feature dimension" — so DGC trains two MLPs, one predicting
the execution time of the structure encoder (GCN) on a chunk and one of the
time encoder (RNN), and takes their sum as the chunk's workload g_a. §6 gives
the recipe: inputs are chunk, feature and layer sizes; 3 hidden layers of 256
ReLU units; labels are measured times of randomly generated chunks; the error
reported is Eq. 8's mean absolute percentage error (MAPE).

What this module does:

* :func:`chunk_features` — per chunk, vectorised over a label array:
  structure-encoder inputs (appearances, spatial edges inside, nonzeros of the
  chunk's Ã rows including halo columns, distinct snapshots) and time-encoder
  inputs (vertex sequences, total and longest sequence length);
* :class:`CountWorkload` — the §4.2 fallback, ``nodes + spatial edges``;
* :class:`MLPWorkload` — the two MLPs. Each sample is *one layer* of one
  chunk, with the layer's input/output widths among the inputs (§6's "feature
  information" and "encoder information"), so one predictor serves any layer
  count: a chunk's workload is the sum over the job's layers of both
  predictions. Fitted on log-features → log-seconds (squared error of
  log-time is relative error, as §6's MAPE loss, but smooth);
* :func:`profile` — §6's offline profiling on this machine: random chunks
  (connected balls and sparse vertex × time blocks of random size and time
  extent) over a generated or given graph, each timed as the chunk strategy
  runs it: the structure encoder is ``Ã·H`` over the chunk's rows (halo
  columns included; layer 0 starts from the precomputed ``Ã·X``, SPEC S4) then
  ``layer.spatial`` per snapshot, forward and backward; the time encoder is
  ``layer.temporal`` over the chunk's vertex sequences as one padded
  ``(longest, sequences, width)`` batch, forward and backward. Best of a few
  repeats after a warm-up, ``torch.cuda.synchronize`` around each on a GPU;
* :func:`default_predictor_path` — one file per machine *kind* (CPU or GPU
  name, not host name: on a cluster rank 0 lands on a different node every
  job, DGC §6 assumes homogeneous devices), model, device and dtype.

Why a per-machine file and not shipped weights: the times are this machine's
(§6 profiles "offline" on the target GPUs); the file records the host, CPU/GPU
name, torch version, widths profiled, sample counts and held-out MAPE.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hpcdgnn.errors import ConfigError, DataError, PlanError
from hpcdgnn.nn.conv.graph import LocalGraph
from hpcdgnn.partition.chunks import SuperGraph, build_supergraph

__all__ = [
    "FORMAT",
    "STRUCTURE_INPUTS",
    "TIME_INPUTS",
    "ChunkTimer",
    "CountWorkload",
    "EncoderMLP",
    "LayerShape",
    "MLPWorkload",
    "chunk_features",
    "chunk_work",
    "default_predictor_path",
    "fit_mlp",
    "layer_shapes",
    "machine_info",
    "mape",
    "profile",
    "random_chunks",
    "run_profile",
    "structure_inputs",
    "time_inputs",
]

#: Tag of the saved predictor layout; a file with another tag is rejected (re-profile).
FORMAT = "hpcdgnn-workload-1"

#: MLP inputs of the structure encoder, one row per (chunk, layer); logs because times follow power laws.
STRUCTURE_INPUTS = ("log1p_nodes", "log1p_spatial_edges", "log1p_row_nnz", "log1p_snapshots",
                    "log_in_width", "log_out_width", "spmm")
#: MLP inputs of the time encoder, one row per (chunk, temporal layer).
TIME_INPUTS = ("log1p_sequences", "log1p_total_length", "log1p_max_length", "log1p_padded",
               "log_in_width", "log_out_width")


# --------------------------------------------------------------------------- features


@dataclass
class _Topology:
    """Spatial adjacency of a super-graph in CSR (both directions) and each appearance's spatial degree."""

    ptr: np.ndarray
    nbr: np.ndarray
    deg: np.ndarray

    @classmethod
    def of(cls, g: SuperGraph) -> _Topology:
        s, d = g.src[g.spatial], g.dst[g.spatial]
        fr, to = np.concatenate([s, d]), np.concatenate([d, s])
        o = np.argsort(fr, kind="stable")
        deg = np.bincount(fr, minlength=g.num_nodes)
        ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
        return cls(ptr, to[o].astype(np.int64), deg.astype(np.int64))

    def rows(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``nodes``, neighbour) of every spatial edge leaving ``nodes``, vectorised CSR gather."""
        start, cnt = self.ptr[nodes], self.deg[nodes]
        total = int(cnt.sum())
        pos = np.repeat(np.arange(nodes.shape[0]), cnt)
        first = np.repeat(start - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
        return pos, self.nbr[first + np.arange(total)]


def chunk_features(g: SuperGraph, labels: np.ndarray, num_chunks: int | None = None) -> dict[str, np.ndarray]:
    """Per chunk (label 0..C-1; label -1 = in no chunk), the workload predictor's raw inputs (DGC §4.2, §6).

    Structure encoder: ``nodes`` (appearances), ``spatial_edges`` (undirected, both ends
    inside), ``row_nnz`` (nonzeros of the chunk's Ã rows: self-loops plus every spatial
    neighbour, halo included — the sparse product's work), ``snapshots`` (distinct snapshots:
    one ``layer.spatial`` call each). Time encoder: ``sequences`` (distinct vertices),
    ``total_length`` (= nodes), ``max_length`` (most appearances of one vertex: the RNN's
    sequential steps), ``padded`` (sequences × max_length: the padded batch's size).
    """
    labels = np.asarray(labels, dtype=np.int64)
    valid = labels >= 0
    C = int(num_chunks) if num_chunks is not None else (int(labels[valid].max()) + 1 if valid.any() else 0)
    lab = labels[valid]
    nodes = np.bincount(lab, minlength=C)
    s, d = g.src[g.spatial], g.dst[g.spatial]
    la, lb = labels[s], labels[d]
    inside = (la == lb) & (la >= 0)
    edges = np.bincount(la[inside], minlength=C)
    deg = np.bincount(s, minlength=g.num_nodes) + np.bincount(d, minlength=g.num_nodes)
    row_nnz = nodes + np.bincount(lab, weights=deg[valid], minlength=C).astype(np.int64)
    T = int(g.time.max()) + 1 if g.num_nodes else 1
    snaps = np.bincount(np.unique(lab * T + g.time[valid]) // T, minlength=C)
    Nv = int(g.vertex.max()) + 1 if g.num_nodes else 1
    key, length = np.unique(lab * Nv + g.vertex[valid], return_counts=True)
    seq_lab = key // Nv
    sequences = np.bincount(seq_lab, minlength=C)
    max_len = np.zeros(C, dtype=np.int64)
    np.maximum.at(max_len, seq_lab, length)
    return {
        "nodes": nodes,
        "spatial_edges": edges,
        "row_nnz": row_nnz,
        "snapshots": snaps,
        "sequences": sequences,
        "total_length": nodes.copy(),
        "max_length": max_len,
        "padded": sequences * max_len,
    }


@dataclass(frozen=True)
class LayerShape:
    """What the workload of one model layer depends on besides the chunk: widths, Ã product, RNN."""

    in_width: int
    out_width: int
    spmm: bool  # aggregation run per epoch (False: layer 0's Ã·X is precomputed, SPEC S4)
    temporal: bool  # the layer's RNN runs along vertex sequences (temporal_mixing)
    temporal_in: int  # width the RNN reads (spatial_features)


def layer_shapes(model_name: str, features: int, hidden: int, layers: int, window: int = 3) -> list[LayerShape]:
    """The layers of a registered model, as the workload sees them (built once, tiny)."""
    from hpcdgnn.nn.models import build_model

    model = build_model(model_name, features, hidden, layers, window)
    return [_shape(ly, i) for i, ly in enumerate(model.layers)]


def _aggregates(layer, index: int) -> bool:
    """Whether the layer aggregates neighbours every epoch: all but a first layer whose Ã·X is a constant."""
    return index > 0 or not layer.precomputable


def _shape(layer, index: int) -> LayerShape:
    return LayerShape(int(layer.in_features), int(layer.out_features), _aggregates(layer, index),
                      bool(layer.temporal_mixing), int(layer.spatial_features))


def structure_inputs(f: dict[str, np.ndarray], shape: LayerShape) -> np.ndarray:
    """(C, len(STRUCTURE_INPUTS)) MLP inputs of one layer's structure encoder on every chunk."""
    C = f["nodes"].shape[0]
    spmm = float(shape.spmm)
    return np.stack([
        np.log1p(f["nodes"]), np.log1p(f["spatial_edges"]), np.log1p(f["row_nnz"]) * spmm,
        np.log1p(f["snapshots"]), np.full(C, math.log(shape.in_width)), np.full(C, math.log(shape.out_width)),
        np.full(C, spmm),
    ], axis=1).astype(np.float64)


def time_inputs(f: dict[str, np.ndarray], shape: LayerShape) -> np.ndarray:
    """(C, len(TIME_INPUTS)) MLP inputs of one temporal layer's time encoder on every chunk."""
    C = f["nodes"].shape[0]
    return np.stack([
        np.log1p(f["sequences"]), np.log1p(f["total_length"]), np.log1p(f["max_length"]), np.log1p(f["padded"]),
        np.full(C, math.log(shape.temporal_in)), np.full(C, math.log(shape.out_width)),
    ], axis=1).astype(np.float64)


# --------------------------------------------------------------------------- workload models


class CountWorkload:
    """DGC §4.2's baseline: a chunk's work is its vertex appearances plus its spatial edges."""

    name = "count"

    def chunk_work(self, g: SuperGraph, labels: np.ndarray, stats: dict) -> np.ndarray:
        """``nodes + spatial_edges`` of :func:`~hpcdgnn.partition.chunks.chunk_stats`, as float."""
        return (stats["nodes"] + stats["spatial_edges"]).astype(float)


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """DGC Eq. 8: mean of |predicted − measured| / measured."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    return float(np.mean(np.abs(predicted - measured) / measured)) if measured.shape[0] else float("nan")


class EncoderMLP:
    """One DGC §6 predictor: standardised log-inputs → MLP (ReLU) → standardised log-seconds."""

    def __init__(self, net: nn.Sequential, x_mean: np.ndarray, x_std: np.ndarray, y_mean: float, y_std: float,
                 inputs: Sequence[str]) -> None:
        self.net, self.inputs = net.double().eval(), tuple(inputs)
        self.x_mean, self.x_std = np.asarray(x_mean, float), np.asarray(x_std, float)
        self.y_mean, self.y_std = float(y_mean), float(y_std)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Seconds for each row of raw inputs ``x`` (n, len(inputs))."""
        if x.shape[0] == 0:
            return np.zeros(0)
        z = torch.from_numpy((x - self.x_mean) / self.x_std)
        with torch.no_grad():
            out = self.net(z).view(-1).numpy()
        return np.exp(out * self.y_std + self.y_mean)

    def to_dict(self) -> dict[str, Any]:
        """Plain tensors and lists (loadable with ``torch.load(weights_only=True)``)."""
        return {"state": {k: v.detach().clone() for k, v in self.net.state_dict().items()},
                "sizes": _sizes(self.net), "inputs": list(self.inputs),
                "x_mean": torch.from_numpy(self.x_mean.copy()), "x_std": torch.from_numpy(self.x_std.copy()),
                "y_mean": self.y_mean, "y_std": self.y_std}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderMLP:
        """Inverse of :meth:`to_dict`."""
        net = _mlp(d["sizes"])
        net.load_state_dict(d["state"])
        return cls(net, d["x_mean"].numpy(), d["x_std"].numpy(), d["y_mean"], d["y_std"], d["inputs"])


def _mlp(sizes: Sequence[int]) -> nn.Sequential:
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods).double()


def _sizes(net: nn.Sequential) -> list[int]:
    lins = [m for m in net if isinstance(m, nn.Linear)]
    return [lins[0].in_features] + [m.out_features for m in lins]


def fit_mlp(x: np.ndarray, seconds: np.ndarray, inputs: Sequence[str], width: int = 64, depth: int = 3,
            steps: int = 1500, seed: int = 0) -> EncoderMLP:
    """Fit a DGC §6 MLP (``depth`` hidden ReLU layers of ``width``) to log-seconds; deterministic for a seed.

    Full-batch Adam with a learning rate decaying 1e-2 → 1e-4 (a few hundred samples: no
    mini-batches needed); inputs constant over the samples (a single width) get unit scale.
    """
    x = np.asarray(x, float)
    y = np.log(np.asarray(seconds, float))
    x_mean, x_std = x.mean(0), x.std(0)
    x_std = np.where(x_std > 1e-12, x_std, 1.0)
    y_mean, y_std = float(y.mean()), float(y.std()) or 1.0
    xt = torch.from_numpy((x - x_mean) / x_std)
    yt = torch.from_numpy((y - y_mean) / y_std).view(-1, 1)
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is not disturbed
        torch.manual_seed(seed)
        net = _mlp([x.shape[1]] + [width] * depth + [1])
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=(1e-2) ** (1.0 / max(steps, 1)))
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.mean((net(xt) - yt) ** 2)
        loss.backward()
        opt.step()
        sched.step()
    return EncoderMLP(net, x_mean, x_std, y_mean, y_std, inputs)


class MLPWorkload:
    """DGC §4.2's learned workload: structure-encoder MLP + time-encoder MLP, summed over the job's layers.

    ``meta`` records where and for what the predictor was profiled (see :func:`profile`).
    ``time`` is None for a model whose RNN mixes no vertex sequences (EvolveGCN-O evolves weights).
    """

    name = "mlp"

    def __init__(self, structure: EncoderMLP, time_enc: EncoderMLP | None, meta: dict[str, Any]) -> None:
        self.structure, self.time, self.meta = structure, time_enc, dict(meta)

    def encoder_times(self, f: dict[str, np.ndarray], shapes: Sequence[LayerShape]) -> tuple[np.ndarray, np.ndarray]:
        """Predicted (structure, time) seconds of every chunk, each summed over ``shapes`` (the layers)."""
        C = f["nodes"].shape[0]
        s, t = np.zeros(C), np.zeros(C)
        for sh in shapes:
            s += self.structure.predict(structure_inputs(f, sh))
            if sh.temporal and self.time is not None:
                t += self.time.predict(time_inputs(f, sh))
        return s, t

    def chunk_work(self, g: SuperGraph, labels: np.ndarray, stats: dict, shapes: Sequence[LayerShape]) -> np.ndarray:
        """g_a of every chunk: predicted structure + time encoder seconds over all layers (DGC §4.2)."""
        s, t = self.encoder_times(chunk_features(g, labels, stats["num_chunks"]), shapes)
        return s + t

    def check(self, path: Path, model: str, features: int, hidden: int, device: str, dtype: str,
              fix: str) -> None:
        """Raise :class:`PlanError` if this predictor was profiled for another model, device, dtype or widths."""
        m = self.meta
        want = {"model": model, "device": device, "dtype": dtype}
        for key, value in want.items():
            if m.get(key) != value:
                raise PlanError(f"strategy.predictor: '{path}' was profiled for {key} {m.get(key)!r}, the job "
                                f"needs {value!r}; {fix}")
        for key, value in (("features", features), ("hidden", hidden)):
            got = [int(v) for v in m.get(key, [])]
            # an MLP interpolates between the widths it saw, it cannot be trusted beyond them
            if not got or not min(got) <= value <= max(got):
                raise PlanError(f"strategy.predictor: '{path}' was profiled for {key} {got}, the job has "
                                f"{value}; {fix}")

    def save(self, path: str | Path) -> Path:
        """Write atomically (temporary file in the same directory, then rename): a reader never sees half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"format": FORMAT, "meta": self.meta, "structure": self.structure.to_dict(),
                   "time": None if self.time is None else self.time.to_dict()}
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                torch.save(payload, fh)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path) -> MLPWorkload:
        """Read a predictor written by :meth:`save`; a missing or foreign file is a one-line :class:`PlanError`."""
        path = Path(path)
        if not path.is_file():
            raise PlanError(f"workload predictor '{path}' does not exist")
        try:
            d = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(d, dict) or d.get("format") != FORMAT:
                raise ValueError(f"format is not {FORMAT}")
            return cls(EncoderMLP.from_dict(d["structure"]),
                       None if d["time"] is None else EncoderMLP.from_dict(d["time"]), d["meta"])
        except Exception as e:  # any unpickling/shape problem means: not our file, re-profile
            raise PlanError(f"workload predictor '{path}' cannot be read ({' '.join(str(e).split())[:120]}); "
                            f"re-create it with python -m hpcdgnn profile") from None


# --------------------------------------------------------------------------- the plan's entry point


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when available, else ``cpu`` (as ``train.device`` does on rank 0)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def profile_command(model: str, features: int, hidden: int, device: str, dtype: str, out: Path | None) -> str:
    """The ``python -m hpcdgnn profile`` line that creates the predictor a job needs."""
    cmd = (f"python -m hpcdgnn profile --model {model} --features {features} --hidden {hidden} "
           f"--device {device} --dtype {dtype}")
    return cmd + (f" --out {out}" if out is not None else "")


def chunk_work(job, num_features: int, g: SuperGraph, labels: np.ndarray, stats: dict) -> np.ndarray:
    """The workload g_a of every chunk under ``job.strategy.workload`` (DGC §4.2): count, or the profiled MLPs.

    Raises:
        PlanError: ``workload: mlp`` and the predictor file is missing, unreadable, or was
            profiled for another model, device, dtype or widths (names the file and the
            ``profile`` command that makes the right one).
    """
    strat = job.strategy
    if getattr(strat, "workload", "count") == "count":
        return CountWorkload().chunk_work(g, labels, stats)
    model, F, H, L = job.model.name, int(num_features), int(job.model.hidden), int(job.model.layers)
    device, dtype = resolve_device(job.train.device), job.train.dtype
    explicit = strat.predictor is not None
    path = Path(strat.predictor) if explicit else default_predictor_path(model, device, dtype)
    fix = "run: " + profile_command(model, F, H, device, dtype, path if explicit else None)
    if not path.is_file():
        raise PlanError(f"strategy.workload: mlp needs the workload predictor '{path}', which does not exist; {fix}")
    pred = MLPWorkload.load(path)
    pred.check(path, model, F, H, device, dtype, fix)
    if stats["num_chunks"] == 0:
        return np.zeros(0)
    return pred.chunk_work(g, labels, stats, layer_shapes(model, F, H, L, job.model.window))


# --------------------------------------------------------------------------- machine identity


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def machine_info(device: str = "cpu") -> dict[str, Any]:
    """Host name, CPU name, GPU name (on ``cuda``), torch version: what the profile's times belong to."""
    gpu = torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else None
    return {"hostname": socket.gethostname(), "cpu": _cpu_name(), "gpu": gpu, "torch": str(torch.__version__),
            "python": platform.python_version()}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48] or "unknown"


def default_predictor_path(model: str, device: str = "cpu", dtype: str = "float32") -> Path:
    """The predictor file of this machine: ``<cache>/workload-<machine>-<model>-<device>-<dtype>.pt``.

    ``<cache>`` is ``$HPCDGNN_CACHE``, else ``$XDG_CACHE_HOME/hpcdgnn``, else ``~/.cache/hpcdgnn``;
    ``<machine>`` is the GPU name on ``cuda``, else the CPU name — the kind of device, not the
    host: on a cluster the next job's rank 0 is on another node of the same kind.
    """
    root = os.environ.get("HPCDGNN_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = str(Path(xdg) / "hpcdgnn") if xdg else str(Path.home() / ".cache" / "hpcdgnn")
    info = machine_info(device)
    kind = info["gpu"] if device == "cuda" and info["gpu"] else info["cpu"]
    return Path(root) / f"workload-{_slug(kind)}-{model}-{device}-{dtype}.pt"


# --------------------------------------------------------------------------- random chunks and timing


def random_chunks(g: SuperGraph, count: int, max_size: int, rng: np.random.Generator,
                  topo: _Topology | None = None) -> list[np.ndarray]:
    """``count`` random chunks (sorted appearance ids) of 1..``max_size`` appearances (log-uniform sizes).

    Half are *balls*: breadth-first over spatial and temporal edges from a random
    appearance, inside a random time window, each newly reached node kept with a random
    probability — connected, edge-rich, like label-propagation chunks. Half are *blocks*:
    random vertices × a random window — few internal edges, long or short sequences. The
    window length is log-uniform in 1..T, so chunks range from one snapshot's community
    to a few vertices' whole timelines (DGC §4.1's chunks cross both boundaries).
    """
    if g.num_nodes == 0:
        raise ValueError("random_chunks: the super-graph has no appearances")
    topo = topo or _Topology.of(g)
    n = g.num_nodes
    T = int(g.time.max()) + 1
    # temporal adjacency too, for the balls (consecutive appearances of a vertex)
    tm_s, tm_d = g.src[~g.spatial], g.dst[~g.spatial]
    tprev = np.full(n, -1, np.int64)
    tnext = np.full(n, -1, np.int64)
    tprev[tm_d], tnext[tm_s] = tm_s, tm_d
    out: list[np.ndarray] = []
    while len(out) < count:
        size = int(round(math.exp(rng.uniform(0.0, math.log(max_size)))))
        k = int(round(math.exp(rng.uniform(0.0, math.log(T)))))
        t0 = int(rng.integers(0, T - k + 1))
        lo, hi = np.searchsorted(g.time, [t0, t0 + k])  # Eq. 1 order: the window is a node range
        if hi <= lo:  # an empty window (snapshots without edges): draw again
            continue
        if rng.random() < 0.5:
            keep_p = rng.uniform(0.3, 1.0)
            seen = np.zeros(n, bool)
            front = np.array([int(rng.integers(lo, hi))])
            seen[front] = True
            members = [front]
            total = 1
            while total < size and front.shape[0]:
                _, nb = topo.rows(front)
                nb = np.concatenate([nb, tprev[front], tnext[front]])
                nb = np.unique(nb[(nb >= lo) & (nb < hi)])
                nb = nb[~seen[nb]]
                nb = nb[rng.random(nb.shape[0]) < keep_p]
                seen[nb] = True
                front = rng.permutation(nb)[: size - total]
                members.append(front)
                total += front.shape[0]
            chunk = np.sort(np.concatenate(members))
        else:
            window = np.arange(lo, hi)
            verts = np.unique(g.vertex[window])
            order = rng.permutation(verts)
            per = np.bincount(g.vertex[window], minlength=int(g.vertex.max()) + 1)[order]
            m = int(np.searchsorted(np.cumsum(per), size)) + 1
            chosen = np.zeros(int(g.vertex.max()) + 1, bool)
            chosen[order[:m]] = True
            chunk = window[chosen[g.vertex[window]]][:size]
        out.append(chunk.astype(np.int64))
    return out


class ChunkTimer:
    """Times one chunk's structure and time encoders as the chunk strategy runs them (forward + backward).

    Structure encoder of a layer: ``ax = Ã_rows · H`` (the chunk's Ã rows, halo columns
    after its own; skipped for layer 0, whose ``Ã·X`` is precomputed, SPEC S4), then
    ``layer.spatial`` on each snapshot's rows, then backward. Time encoder: ``layer.temporal``
    on a padded ``(longest sequence, sequences, width)`` batch, then backward. Each is run
    once to warm up, then ``repeats`` times; the best time counts (the others are the noise
    of a shared machine, not the chunk's work).
    """

    def __init__(self, g: SuperGraph, device: str = "cpu", dtype: torch.dtype = torch.float32, repeats: int = 3,
                 topo: _Topology | None = None) -> None:
        self.g, self.device, self.dtype, self.repeats = g, torch.device(device), dtype, max(1, repeats)
        self.topo = topo or _Topology.of(g)
        self.dinv = 1.0 / np.sqrt(1.0 + self.topo.deg)
        self._cuda = self.device.type == "cuda"

    def _best(self, fn: Callable[[], None]) -> float:
        fn()
        best = math.inf
        for _ in range(self.repeats):
            if self._cuda:
                torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            fn()
            if self._cuda:
                torch.cuda.synchronize(self.device)
            best = min(best, time.perf_counter() - t0)
        return best

    def adjacency(self, nodes: np.ndarray):
        """The chunk's normalised Ã rows (n × (n + halo)) and transpose, columns: the chunk, then its halo."""
        from hpcdgnn.nn.conv.gcn import NormalizedAdjacency, sorted_csr

        n = nodes.shape[0]
        pos, nb = self.topo.rows(nodes)
        at = np.clip(np.searchsorted(nodes, nb), 0, n - 1)
        inside = nodes[at] == nb
        halo, hinv = np.unique(nb[~inside], return_inverse=True)
        col = np.where(inside, at, 0)
        col[~inside] = n + hinv
        rows = np.concatenate([pos, np.arange(n)])
        cols = np.concatenate([col, np.arange(n)])
        gl = np.concatenate([nodes[pos], nodes])
        gc = np.concatenate([nb, nodes])
        vals = self.dinv[gl] * self.dinv[gc]  # IBM Eq. 1's D^-1/2 (A + I) D^-1/2 within the snapshot
        dev = self.device
        r, c = torch.from_numpy(rows).to(dev), torch.from_numpy(cols).to(dev)
        v = torch.from_numpy(vals).to(dev, self.dtype)
        shape = (n, n + halo.shape[0])
        return NormalizedAdjacency(0, sorted_csr(r, c, v, shape), sorted_csr(c, r, v, (shape[1], shape[0])))

    def structure(self, nodes: np.ndarray, layer, aggregate: bool, tparams=None) -> float:
        """Best seconds of one layer's structure encoder on the chunk ``nodes`` (sorted appearance ids).

        ``aggregate``: run the layer's neighbourhood aggregation (``layer.aggregate`` over a
        :class:`~hpcdgnn.nn.conv.graph.LocalGraph` whose gather appends the halo rows); False for
        a first layer whose Ã·X is precomputed (SPEC S4).
        """
        n = nodes.shape[0]
        t_of = self.g.time[nodes]
        cut = np.flatnonzero(np.diff(t_of)) + 1
        bounds = np.concatenate([[0], cut, [n]]).tolist()
        times = t_of[np.asarray(bounds[:-1], dtype=np.int64)].tolist()
        gen = torch.Generator().manual_seed(n)
        h = torch.randn(n, layer.in_features, generator=gen, dtype=self.dtype).to(self.device)
        agg: Callable[[torch.Tensor], torch.Tensor] | None = None
        if aggregate:
            adj = self.adjacency(nodes)
            # the halo's rows stand in as copies of own rows: same gather size, no communication timed
            src = torch.randint(0, n, (adj.a.shape[1] - n,), generator=gen).to(self.device)

            def gather(m: torch.Tensor) -> torch.Tensor:
                return torch.cat([m, m.index_select(0, src)])

            graph = LocalGraph(adj, gather)
            agg = lambda x: layer.aggregate(graph, x)  # noqa: E731
            h.requires_grad_(True)  # a later layer's input is an activation: its gradient is work too

        def run() -> None:
            ax = agg(h) if agg is not None else h
            parts = [layer.spatial(ax[a:b], t, tparams) for a, b, t in zip(bounds[:-1], bounds[1:], times, strict=True)]
            y = torch.cat(parts)
            y.backward(torch.ones_like(y))

        return self._best(run)

    def temporal(self, nodes: np.ndarray, layer) -> float:
        """Best seconds of one layer's time encoder over the chunk's vertex sequences (padded batch)."""
        _, length = np.unique(self.g.vertex[nodes], return_counts=True)
        gen = torch.Generator().manual_seed(int(nodes.shape[0]))
        y = torch.randn(int(length.max()), length.shape[0], layer.spatial_features, generator=gen, dtype=self.dtype)
        y = y.to(self.device).requires_grad_(True)

        def run() -> None:
            z, _ = layer.temporal(y, None)
            z.backward(torch.ones_like(z))

        return self._best(run)

    def model(self, nodes: np.ndarray, model, tparams: list) -> tuple[float, float]:
        """(structure, time) seconds of the chunk summed over every layer of ``model`` (the bench's ground truth)."""
        s = sum(self.structure(nodes, ly, _aggregates(ly, i), tparams[i]) for i, ly in enumerate(model.layers))
        t = sum(self.temporal(nodes, ly) for ly in model.layers if ly.temporal_mixing)
        return float(s), float(t)


def detached_time_params(model, T: int) -> list:
    """Every layer's per-step parameters for steps 0..T-1 (EvolveGCN's W_t) as fresh leaves.

    Evolving the weights is the layer's own work, not a chunk's; the leaves still take
    gradients, as W_t does in training, so a chunk's backward includes dY/dW_t.
    """
    out = []
    with torch.no_grad():
        for ly in model.layers:
            p, _ = ly.time_params_block(0, T, None)
            out.append(None if p is None else {t: w.detach().requires_grad_(True) for t, w in p.items()})
    return out


# --------------------------------------------------------------------------- profiling (DGC §6)


def profile_graph(data: str | None, vertices: int, snapshots: int, density: float, seed: int,
                  spatial_weight: float = 1.0, temporal_weight: float = 1.0) -> tuple[SuperGraph, str]:
    """The super-graph the random chunks come from: a dataset's adjacencies, or a non-uniform generated graph.

    The generated graph is DGC §7.3.1's non-uniform one (δ = τ = 0.5): snapshots of very
    different density and vertices of very different lifetimes, so chunks of every shape exist.
    """
    if data:
        from hpcdgnn.data.manifest import load_manifest
        from hpcdgnn.data.shard_reader import ShardReader

        m = load_manifest(data)
        with ShardReader(data, m) as r:
            snaps = [r.edges(t) for t in range(m.num_snapshots)]
        return build_supergraph(snaps, m.num_vertices, spatial_weight, temporal_weight), str(data)
    from hpcdgnn.data.generate import random_snapshots

    snaps = [(s.src, s.dst) for s in random_snapshots(vertices, snapshots, density, seed, 0.5, 0.5)]
    name = f"generated N={vertices} T={snapshots} f={density} δ=τ=0.5"
    return build_supergraph(snaps, vertices, spatial_weight, temporal_weight), name


def profile(model_name: str, features: Sequence[int], hidden: Sequence[int], samples: int, *,
            g: SuperGraph, max_size: int = 4096, window: int = 3, device: str = "cpu", dtype: str = "float32",
            repeats: int = 3, seed: int = 0, held_out: float = 0.2, mlp_width: int = 64, fit_steps: int = 1500,
            log: Callable[[str], None] | None = None) -> tuple[MLPWorkload, dict[str, Any]]:
    """DGC §6 on this machine: time ``samples`` random chunks' encoders, fit both MLPs, measure held-out MAPE.

    Each sample is one random chunk, one layer position (first: input width F, no sparse
    product; later: width H, with it) and one (F, H) drawn from ``features`` × ``hidden``; the
    time encoder is timed on one of the model's RNN layers. The chunks, layer positions, widths
    and the train/held-out split depend only on ``seed``; the times are this machine's.

    Returns the predictor and a report: per encoder the sample counts and held-out MAPE, and
    the MAPE of the chunk total (structure + time of the same held-out samples).
    """
    from hpcdgnn.nn.models import build_model

    tdtype = torch.float64 if dtype == "float64" else torch.float32
    rng = np.random.default_rng([seed, 6])
    topo = _Topology.of(g)
    T = int(g.time.max()) + 1
    chunks = random_chunks(g, samples, max_size, rng, topo)
    timer = ChunkTimer(g, device, tdtype, repeats, topo)
    models: dict[tuple[int, int], tuple[Any, list]] = {}
    xs, ys, xt, yt = [], [], [], []
    t_start = time.perf_counter()
    for i, nodes in enumerate(chunks):
        F, H = int(rng.choice(np.asarray(features))), int(rng.choice(np.asarray(hidden)))
        if (F, H) not in models:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                mdl = build_model(model_name, F, H, 2, window).to(device=device, dtype=tdtype)
            models[(F, H)] = (mdl, detached_time_params(mdl, T))
        mdl, tps = models[(F, H)]
        pos = int(rng.integers(0, 2))
        ly = mdl.layers[pos]
        shape = _shape(ly, pos)
        labels = np.full(g.num_nodes, -1, np.int64)
        labels[nodes] = 0
        f = chunk_features(g, labels, 1)
        xs.append(structure_inputs(f, shape)[0])
        ys.append(timer.structure(nodes, ly, shape.spmm, tps[pos]))
        rnn = [j for j, lj in enumerate(mdl.layers) if lj.temporal_mixing]
        if rnn:
            j = rnn[int(rng.integers(0, len(rnn)))]
            lj = mdl.layers[j]
            tshape = _shape(lj, j)
            xt.append(time_inputs(f, tshape)[0])
            yt.append(timer.temporal(nodes, lj))
        if log and (i + 1) % max(1, len(chunks) // 4) == 0:
            log(f"  timed {i + 1}/{len(chunks)} chunks ({time.perf_counter() - t_start:.1f}s)")
    elapsed = time.perf_counter() - t_start
    n = len(xs)
    perm = np.random.default_rng([seed, 7]).permutation(n)
    n_test = max(1, int(round(held_out * n)))
    test, train = perm[:n_test], perm[n_test:]
    X, Y = np.asarray(xs), np.asarray(ys)
    s_mlp = fit_mlp(X[train], Y[train], STRUCTURE_INPUTS, mlp_width, steps=fit_steps, seed=seed)
    ps = s_mlp.predict(X[test])
    report: dict[str, Any] = {
        "structure": {"train": int(train.shape[0]), "held_out": int(n_test), "mape": mape(ps, Y[test])},
        "time": None, "total_mape": mape(ps, Y[test]), "profile_seconds": elapsed,
        "max_size": int(max_size), "chunk_sizes": [int(min(c.shape[0] for c in chunks)),
                                                   int(max(c.shape[0] for c in chunks))],
    }
    t_mlp = None
    if xt:
        XT, YT = np.asarray(xt), np.asarray(yt)
        t_mlp = fit_mlp(XT[train], YT[train], TIME_INPUTS, mlp_width, steps=fit_steps, seed=seed + 1)
        pt = t_mlp.predict(XT[test])
        report["time"] = {"train": int(train.shape[0]), "held_out": int(n_test), "mape": mape(pt, YT[test])}
        report["total_mape"] = mape(ps + pt, Y[test] + YT[test])
    meta = {
        "model": model_name, "device": str(torch.device(device).type), "dtype": dtype, "window": int(window),
        "features": [int(v) for v in features], "hidden": [int(v) for v in hidden],
        "threads": int(torch.get_num_threads()), "repeats": int(repeats), "seed": int(seed),
        "machine": machine_info(device), "torch": str(torch.__version__),
        "samples": {"structure": report["structure"], "time": report["time"]},
        "mape": {"structure": report["structure"]["mape"],
                 "time": None if report["time"] is None else report["time"]["mape"],
                 "total": report["total_mape"]},
        "max_size": int(max_size), "mlp": {"width": int(mlp_width), "depth": 3, "steps": int(fit_steps)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return MLPWorkload(s_mlp, t_mlp, meta), report


# --------------------------------------------------------------------------- CLI: python -m hpcdgnn profile


def run_profile(args: argparse.Namespace) -> int:
    """``python -m hpcdgnn profile`` (options in :mod:`hpcdgnn.__main__`): profile, fit, print, save atomically."""
    from hpcdgnn.nn.models import available_models

    if args.model not in available_models():
        raise ConfigError(f"profile: --model {args.model!r} is unknown; choose from {', '.join(available_models())}")
    for name in ("samples", "max_size", "vertices", "snapshots", "threads", "repeats", "fit_steps", "window"):
        if getattr(args, name) < 1:
            raise ConfigError(f"profile: --{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    if args.samples < 5:
        raise ConfigError(f"profile: --samples must be >= 5 so some can be held out (got {args.samples})")
    if any(v < 1 for v in [*args.features, *args.hidden]):
        raise ConfigError("profile: --features and --hidden must be >= 1")
    if args.vertices < 2 or not args.density > 0:
        raise ConfigError("profile: --vertices must be >= 2 and --density > 0")
    device = resolve_device(args.device)
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("profile: --device cuda but torch sees no CUDA device")
    if args.data and not Path(args.data).is_dir():
        raise DataError(f"{args.data}: dataset directory does not exist")
    torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else default_predictor_path(args.model, device, args.dtype)
    if out.exists() and not out.is_file():
        raise ConfigError(f"profile: --out {out} exists and is not a file")
    g, name = profile_graph(args.data, args.vertices, args.snapshots, args.density, args.seed)
    if g.num_nodes == 0:
        raise DataError(f"{name}: the graph has no edges to make chunks of")
    info = machine_info(device)
    print(f"profiling {args.model} on {info['gpu'] or info['cpu']} ({info['hostname']}, {device}, {args.dtype}, "
          f"{args.threads} thread(s)): {args.samples} random chunks of 1..{args.max_size} appearances from {name}",
          flush=True)
    pred, rep = profile(args.model, args.features, args.hidden, args.samples, g=g, max_size=args.max_size,
                        window=args.window, device=device, dtype=args.dtype, repeats=args.repeats, seed=args.seed,
                        fit_steps=args.fit_steps, log=lambda s: print(s, flush=True))
    s = rep["structure"]
    print(f"structure encoder: {s['train']} train / {s['held_out']} held-out samples, held-out MAPE "
          f"{100 * s['mape']:.1f}%")
    if rep["time"] is None:
        print(f"time encoder: none ({args.model} runs no RNN along vertex sequences)")
    else:
        t = rep["time"]
        print(f"time encoder: {t['train']} train / {t['held_out']} held-out samples, held-out MAPE "
              f"{100 * t['mape']:.1f}%")
    print(f"chunk total (structure + time): held-out MAPE {100 * rep['total_mape']:.1f}% "
          f"(timing took {rep['profile_seconds']:.1f}s)")
    try:
        pred.save(out)
    except OSError as e:
        raise ConfigError(f"profile: cannot write {out}: {e.strerror or e}") from None
    print(f"saved {out}")
    sys.stdout.flush()
    return 0
