"""Chunk workload models for DGC's chunk assignment (§4.2, Alg. 1): a vertex/edge count, or two profiled MLPs.

DGC §4.2/§6: g_a is the sum of two MLPs' predicted times, structure encoder (GCN) and time
encoder (RNN), 3 hidden layers of 256 ReLU units. A sample is one layer of one chunk, widths
among the inputs, so one predictor serves any depth. :mod:`hpcdgnn.profile` makes predictors
and imports this module, never the reverse: a plan pulls in no timing or fitting code.
"""

from __future__ import annotations

import math
import os
import platform
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hpcdgnn.atomic import atomic_write
from hpcdgnn.errors import PlanError
from hpcdgnn.indices import unique_ints
from hpcdgnn.partition.chunks import SuperGraph

__all__ = [
    "FORMAT",
    "STRUCTURE_INPUTS",
    "TIME_INPUTS",
    "CountWorkload",
    "EncoderMLP",
    "LayerShape",
    "MLPWorkload",
    "build_mlp",
    "cache_root",
    "chunk_features",
    "chunk_work",
    "default_predictor_path",
    "machine_slug",
    "layer_shape",
    "layer_shapes",
    "machine_info",
    "profile_command",
    "resolve_device",
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




def chunk_features(g: SuperGraph, labels: np.ndarray, num_chunks: int | None = None) -> dict[str, np.ndarray]:
    """Per chunk (label 0..C-1; -1 = none), the predictor's raw inputs (DGC §4.2, §6).

    Structure: ``nodes``, ``spatial_edges``, ``row_nnz`` (Ã rows' nonzeros, halo included), ``snapshots``;
    time: ``sequences``, ``total_length``, ``max_length`` (the RNN's sequential steps), ``padded``.
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
    snaps = np.bincount(unique_ints(lab * T + g.time[valid]) // T, minlength=C)
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


def layer_shapes(model_name: str, features: int, hidden: int, layers: int, **model_args) -> list[LayerShape]:
    """The layers of a registered model as the workload sees them (built once, tiny)."""
    from hpcdgnn.nn.models import build_model

    model = build_model(model_name, features, hidden, layers, **model_args)
    return [layer_shape(ly, i) for i, ly in enumerate(model.layers)]


def _aggregates(layer, index: int) -> bool:
    """Whether the layer aggregates neighbours every epoch: all but a first layer whose Ã·X is a constant."""
    return index > 0 or not layer.precomputable


def layer_shape(layer, index: int) -> LayerShape:
    """The workload's view of ``layer`` at position ``index`` of its model (the profiler's and the plan's)."""
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




class CountWorkload:
    """DGC §4.2's baseline: a chunk's work is its vertex appearances plus its spatial edges."""

    name = "count"

    def chunk_work(self, g: SuperGraph, labels: np.ndarray, stats: dict) -> np.ndarray:
        """``nodes + spatial_edges`` of :func:`~hpcdgnn.partition.chunks.chunk_stats`, as float."""
        return (stats["nodes"] + stats["spatial_edges"]).astype(float)


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
        net = build_mlp(d["sizes"])
        net.load_state_dict(d["state"])
        return cls(net, d["x_mean"].numpy(), d["x_std"].numpy(), d["y_mean"], d["y_std"], d["inputs"])


def build_mlp(sizes: Sequence[int]) -> nn.Sequential:
    """Linear layers of ``sizes`` with ReLU between them, float64: an :class:`EncoderMLP`'s network."""
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods).double()


def _sizes(net: nn.Sequential) -> list[int]:
    lins = [m for m in net if isinstance(m, nn.Linear)]
    return [lins[0].in_features] + [m.out_features for m in lins]


class MLPWorkload:
    """DGC §4.2's learned workload: structure MLP + time MLP (None when no RNN mixes sequences), summed over layers."""

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
        """Raise :class:`PlanError` if this predictor's profile is for another model, device, dtype or widths."""
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
        """Write atomically and durably (:func:`atomic_write`): a reader never sees half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"format": FORMAT, "meta": self.meta, "structure": self.structure.to_dict(),
                   "time": None if self.time is None else self.time.to_dict()}
        with atomic_write(path, "wb") as fh:
            torch.save(payload, fh)
        return path

    @classmethod
    def load(cls, path: str | Path) -> MLPWorkload:
        """Read a predictor written by :meth:`save`; a missing or foreign file is a one-line :class:`PlanError`."""
        path = Path(path)
        if not path.is_file():
            raise PlanError(f"workload predictor '{path}' " + ("is not a file" if path.exists() else "does not exist"))
        try:
            d = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(d, dict) or d.get("format") != FORMAT:
                raise ValueError(f"format is not {FORMAT}")
            return cls(EncoderMLP.from_dict(d["structure"]),
                       None if d["time"] is None else EncoderMLP.from_dict(d["time"]), d["meta"])
        except Exception as e:  # any unpickling/shape problem means: not our file, re-profile
            # torch's message for a foreign file can be a bare pickle opcode: name the exception too
            text = ' '.join(str(e).split())
            why = f"{type(e).__name__}: {text if len(text) <= 120 else text[:119] + '…'}"
            raise PlanError(f"workload predictor '{path}' cannot be read: not a predictor file written by "
                            f"python -m hpcdgnn profile ({why}); re-create it with python -m hpcdgnn profile") from None




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

    Raises PlanError naming the ``profile`` command when an MLP predictor is missing or mismatched.
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
    return pred.chunk_work(g, labels, stats, layer_shapes(model, F, H, L, **job.model.model_args()))




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
    """``<cache>/workload-<machine>-<model>-<device>-<dtype>.pt``, cache ``$HPCDGNN_CACHE`` or the XDG cache.

    ``<machine>`` is the GPU/CPU name, not the host: the next job's rank 0 is another node of the same kind.
    """
    return cache_root() / f"workload-{machine_slug(device)}-{model}-{device}-{dtype}.pt"


def cache_root() -> Path:
    """Where per-machine files live: ``$HPCDGNN_CACHE``, else ``$XDG_CACHE_HOME/hpcdgnn`` or ``~/.cache/hpcdgnn``."""
    root = os.environ.get("HPCDGNN_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = str(Path(xdg) / "hpcdgnn") if xdg else str(Path.home() / ".cache" / "hpcdgnn")
    return Path(root)


def machine_slug(device: str = "cpu") -> str:
    """The GPU name on ``cuda``, else the CPU name, as a file-name part (the kind of machine, not the host)."""
    info = machine_info(device)
    return _slug(info["gpu"] if device == "cuda" and info["gpu"] else info["cpu"])

