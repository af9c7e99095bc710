"""DGC §6's offline profiling: time random chunks' encoders on this machine, fit both MLPs, report held-out MAPE.

Per sample: one random chunk, one layer position and one (F, H) width pair, both encoders
timed; the MLPs are fitted on 80% and scored on the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from hpcdgnn.partition.chunks import SuperGraph
from hpcdgnn.partition.workload import (
    STRUCTURE_INPUTS,
    TIME_INPUTS,
    EncoderMLP,
    MLPWorkload,
    chunk_features,
    layer_shape,
    machine_info,
    structure_inputs,
    time_inputs,
)
from hpcdgnn.profile.chunks import Topology, random_chunks
from hpcdgnn.profile.fit import fit_mlp, mape
from hpcdgnn.profile.timer import ChunkTimer, detached_time_params

__all__ = ["profile"]


def _fit_mlps(xs: list, ys: list, xt: list, yt: list, *, seed: int, held_out: float, mlp_width: int,
              fit_steps: int) -> tuple[EncoderMLP, EncoderMLP | None, dict[str, Any]]:
    """Fit both MLPs on one seeded train/held-out split; their sample counts and held-out MAPE, and the total's."""
    n = len(xs)
    perm = np.random.default_rng([seed, 7]).permutation(n)
    n_test = max(1, int(round(held_out * n)))
    test, train = perm[:n_test], perm[n_test:]
    X, Y = np.asarray(xs), np.asarray(ys)
    s_mlp = fit_mlp(X[train], Y[train], STRUCTURE_INPUTS, mlp_width, steps=fit_steps, seed=seed)
    ps = s_mlp.predict(X[test])
    scores: dict[str, Any] = {
        "structure": {"train": int(train.shape[0]), "held_out": int(n_test), "mape": mape(ps, Y[test])},
        "time": None, "total_mape": mape(ps, Y[test]),
    }
    t_mlp = None
    if xt:
        XT, YT = np.asarray(xt), np.asarray(yt)
        t_mlp = fit_mlp(XT[train], YT[train], TIME_INPUTS, mlp_width, steps=fit_steps, seed=seed + 1)
        pt = t_mlp.predict(XT[test])
        scores["time"] = {"train": int(train.shape[0]), "held_out": int(n_test), "mape": mape(pt, YT[test])}
        scores["total_mape"] = mape(ps + pt, Y[test] + YT[test])
    return s_mlp, t_mlp, scores


def profile(model_name: str, features: Sequence[int], hidden: Sequence[int], samples: int, *,
            g: SuperGraph, max_size: int = 4096, window: int = 3, device: str = "cpu", dtype: str = "float32",
            repeats: int = 3, seed: int = 0, held_out: float = 0.2, mlp_width: int = 64, fit_steps: int = 1500,
            log: Callable[[str], None] | None = None) -> tuple[MLPWorkload, dict[str, Any]]:
    """DGC §6 on this machine: time ``samples`` random chunks' encoders, fit both MLPs, score held-out MAPE.

    Chunks, layer positions (first: width F, no SpMM; later: H, with it), widths and the split
    depend only on ``seed``. Returns the predictor and a report of sample counts and held-out
    MAPE per encoder and for the chunk total.
    """
    from hpcdgnn.nn.models import build_model

    tdtype = torch.float64 if dtype == "float64" else torch.float32
    rng = np.random.default_rng([seed, 6])
    topo = Topology.of(g)
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
        shape = layer_shape(ly, pos)
        labels = np.full(g.num_nodes, -1, np.int64)
        labels[nodes] = 0
        f = chunk_features(g, labels, 1)
        xs.append(structure_inputs(f, shape)[0])
        ys.append(timer.structure(nodes, ly, shape.spmm, tps[pos]))
        rnn = [j for j, lj in enumerate(mdl.layers) if lj.temporal_mixing]
        if rnn:
            j = rnn[int(rng.integers(0, len(rnn)))]
            lj = mdl.layers[j]
            tshape = layer_shape(lj, j)
            xt.append(time_inputs(f, tshape)[0])
            yt.append(timer.temporal(nodes, lj))
        if log and (i + 1) % max(1, len(chunks) // 4) == 0:
            log(f"  timed {i + 1}/{len(chunks)} chunks ({time.perf_counter() - t_start:.1f}s)")
    elapsed = time.perf_counter() - t_start
    s_mlp, t_mlp, scores = _fit_mlps(xs, ys, xt, yt, seed=seed, held_out=held_out, mlp_width=mlp_width,
                                     fit_steps=fit_steps)
    report: dict[str, Any] = {
        **scores, "profile_seconds": elapsed,
        "max_size": int(max_size), "chunk_sizes": [int(min(c.shape[0] for c in chunks)),
                                                   int(max(c.shape[0] for c in chunks))],
    }
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

