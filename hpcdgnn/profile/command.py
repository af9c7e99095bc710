"""``python -m hpcdgnn profile``: make this machine's workload predictor file (DGC §4.2, §6).

Saved atomically at :func:`~hpcdgnn.partition.workload.default_predictor_path` unless ``--out``,
where ``strategy.workload: mlp`` looks. Options are declared in :mod:`hpcdgnn.__main__`
so other subcommands do not import torch.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

import torch

from hpcdgnn.errors import ConfigError, DataError, not_a_directory
from hpcdgnn.partition.workload import default_predictor_path, machine_info, resolve_device
from hpcdgnn.profile.chunks import profile_graph
from hpcdgnn.profile.profiler import profile

__all__ = ["run_profile"]


def _saved_by_torch(path: Path) -> bool:
    """Whether ``path`` is a ``torch.save`` archive (a zip holding a ``data.pkl``), as predictors are."""
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("/data.pkl") or n == "data.pkl" for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def run_profile(args: argparse.Namespace) -> int:
    """``python -m hpcdgnn profile`` (options in :mod:`hpcdgnn.__main__`): profile, fit, print, save atomically."""
    from hpcdgnn.nn.models import available_models

    if args.model not in available_models():
        raise ConfigError(f"profile: --model {args.model!r} is unknown; choose from {', '.join(available_models())}")
    from hpcdgnn.nn.models import needs_step_graphs

    if needs_step_graphs(args.model):  # the chunk workload model is for strategy: chunk, which cannot run these
        raise ConfigError(f"profile: --model {args.model} convolves its state over each snapshot's graph, so it "
                          "cannot run under strategy: chunk, whose workload this profiles; profile another model")
    for name in ("samples", "max_size", "vertices", "snapshots", "threads", "repeats", "fit_steps", "window"):
        if getattr(args, name) < 1:
            raise ConfigError(f"profile: --{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    if args.threads > 1024:  # as train.threads: torch segfaults on huge thread counts
        raise ConfigError(f"profile: --threads must be in [1, 1024] (got {args.threads})")
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
        raise DataError(f"{args.data}: dataset directory {not_a_directory(args.data)}")
    torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else default_predictor_path(args.model, device, args.dtype)
    if out.exists() and not out.is_file():
        raise ConfigError(f"profile: --out {out} exists and is not a file")
    if args.out and out.is_file() and not _saved_by_torch(out):  # replace a predictor (any format), never another file
        raise ConfigError(f"profile: --out {out} exists and is not a predictor file (it would be replaced); "
                          "choose another --out")
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
