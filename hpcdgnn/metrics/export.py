"""A run's epoch records as a flat table (CSV) and as TensorBoard scalars; the trained model as a plain file.

``python -m hpcdgnn export RUNDIR --csv FILE --tensorboard DIR --model-only FILE [--to pygt]``. The records of
``metrics.jsonl`` nest (``time.compute.max``, ``per_rank.compute[r]``); both writers flatten them the same
way: dotted keys, list items by index (``per_rank.compute.2``). TensorBoard's tags use ``/`` for the dots and
the epoch as the step. Nothing here is imported by a run that does not ask for it (``output.tensorboard``).
"""

from __future__ import annotations

import csv
import io
import math
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hpcdgnn.atomic import atomic_write
from hpcdgnn.errors import ConfigError, DataError

__all__ = ["flatten", "write_csv", "write_tensorboard", "TensorBoardLog", "export_model", "export_pygt", "load_model",
           "load_pygt"]

#: the exported model file's format tag (``torch.load(FILE)["format"]``)
MODEL_FORMAT = "hpcdgnn.model/1"


def flatten(record: dict, prefix: str = "") -> dict[str, Any]:
    """``{"time": {"compute": {"max": 1.0}}, "per_rank": {"compute": [1, 2]}}`` →
    ``{"time.compute.max": 1.0, "per_rank.compute.0": 1, "per_rank.compute.1": 2}``, in the record's order."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, list | tuple):
            out.update(flatten({str(i): v for i, v in enumerate(value)}, name + "."))
        else:
            out[name] = value
    return out


def _new_file(path: str | Path, what: str) -> Path:
    """``path``, refused when something is there already (an export never overwrites)."""
    p = Path(path)
    if p.exists():
        raise _exists(path, what)
    if not p.parent.is_dir():
        raise ConfigError(f"{what} {path}: no directory {p.parent}")
    return p


def _exists(path: str | Path, what: str) -> ConfigError:
    return ConfigError(f"{what} {path}: exists; an export never overwrites a file (give a new path)")


def _write_new(path: str | Path, what: str, write) -> None:
    """Write the new file ``path`` by ``write(f)`` (``f`` a binary file) through :func:`atomic_write`: a full disk,
    a quota or a stop leaves neither a half-written file nor the temporary, and a file that appeared at ``path``
    meanwhile (another export, the user's) is kept, not replaced.

    Raises:
        ConfigError: ``path`` exists, or its directory does not (:func:`_new_file`).
        DataError: the write failed (one line naming ``what`` and ``path``).
    """
    out = _new_file(path, what)
    try:
        # a file object, not the path: torch.save's own writer turns ENOSPC into an assertion of its zip code
        with atomic_write(out, "wb", replace=False) as f:
            write(f)
    except FileExistsError:
        raise _exists(path, what) from None
    except OSError as e:
        raise DataError(f"{what} {path}: cannot write it ({e.strerror or e}); nothing was written") from None


def _save(blob: dict, path: str | Path) -> None:
    """``torch.save(blob)`` to the new file ``path`` (:func:`_write_new`)."""
    import torch

    _write_new(path, "--model-only", lambda f: torch.save(blob, f))


def write_csv(records: list[dict], path: str | Path) -> list[str]:
    """One row per epoch record, one column per flattened key (the union over the records, in first-seen order);
    a key an epoch lacks is empty. Returns the columns."""
    _new_file(path, "--csv")
    rows = [flatten(r) for r in records]
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def write(f) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8", newline="")
        writer = csv.DictWriter(text, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
        text.flush()  # a full disk's error here, inside _write_new
        text.detach()  # the binary file is _write_new's to close

    _write_new(path, "--csv", write)
    return columns


def scalars(record: dict) -> Iterable[tuple[str, float]]:
    """The record's numbers as (TensorBoard tag, value): booleans as 0/1; None and text left out."""
    for key, value in flatten(record).items():
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, int | float) and math.isfinite(value) and key != "epoch":
            yield key.replace(".", "/"), float(value)


def _summary_writer_class(logdir: str | Path):
    """The ``SummaryWriter`` class, or a one-line ConfigError when the tensorboard package it needs is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:  # torch's writer needs the tensorboard package
        raise ConfigError(f"TensorBoard output {logdir}: needs the tensorboard package ({e}); "
                          "pip install tensorboard (or hpcdgnn[tensorboard])") from None
    return SummaryWriter


def _summary_writer(logdir: str | Path, purge_step: int | None = None):
    SummaryWriter = _summary_writer_class(logdir)
    try:
        return SummaryWriter(log_dir=str(logdir), purge_step=purge_step)
    except OSError as e:  # a file where the directory should be, a read-only or pseudo file system
        why = "is a file, not a directory" if Path(logdir).is_file() else (e.strerror or str(e))
        raise ConfigError(f"TensorBoard output {logdir}: {why}; give a directory for the event files") from None


def write_tensorboard(records: list[dict], logdir: str | Path) -> int:
    """Every record's numbers as TensorBoard scalars at step = its epoch; returns how many were written.

    Raises:
        ConfigError: the tensorboard package is missing, or ``logdir`` holds another run's curves.
    """
    _check_logdir(logdir)
    log = TensorBoardLog(logdir)
    n = sum(log.write(r) for r in records)
    log.close()
    return n


def files_with_curves(logdir: str | Path) -> list[Path]:
    """The event files directly in ``logdir`` that hold a summary (a scalar): another run's curves. A writer
    opened by a run that stopped before its first epoch wrote only the file's header, which draws nothing; a file
    the reader cannot read counts as holding curves (nothing is assumed empty that might not be)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    held = []
    for path in sorted(Path(logdir).glob("events.out.tfevents.*")):
        try:
            if any(event.WhichOneof("what") == "summary" for event in EventFileLoader(str(path)).Load()):
                held.append(path)
        except Exception:  # noqa: BLE001 (any reader failure: keep the file's curves safe)
            held.append(path)
    return held


def _check_logdir(logdir: str | Path) -> None:
    """Refuse ``--tensorboard DIR`` before anything is written: a file there, curves there, no package."""
    logdir = Path(logdir)
    if logdir.is_file():
        raise ConfigError(f"TensorBoard output {logdir}: is a file, not a directory; give a directory for the event "
                          "files")
    _summary_writer_class(logdir)
    held = files_with_curves(logdir) if logdir.is_dir() else []
    if held:
        raise ConfigError(f"--tensorboard {logdir}: holds another run's curves ({held[0].name}"
                          f"{' …' if len(held) > 1 else ''}); an export never adds to them (give a new directory)")


class TensorBoardLog:
    """Rank 0's live TensorBoard writer (``output.tensorboard``): one epoch record at a time."""

    def __init__(self, logdir: str | Path, purge_step: int | None = None) -> None:
        """``purge_step``: a resumed run's first epoch; TensorBoard drops the steps from it on that the stopped run
        wrote (they are trained again)."""
        self.writer = _summary_writer(logdir, purge_step)

    def write(self, record: dict) -> int:
        """Add the record's scalars at its epoch; flushed, so TensorBoard shows a running job's epochs."""
        n = 0
        for tag, value in scalars(record):
            self.writer.add_scalar(tag, value, global_step=int(record["epoch"]))
            n += 1
        self.writer.flush()
        return n

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


def export_model(run, path: str | Path) -> dict:
    """Write the run's trained model and task head as plain ``state_dict``s with what builds them again.

    The file (``torch.save``) holds ``format``, ``config`` (the resolved job's ``model`` and ``task``
    sections and ``train.dtype``), ``dataset`` (the sizes the modules are built for), ``model`` and ``task``
    (``state_dict``s); :func:`load_model` builds the modules from it with no dataset, run directory or trainer.
    """
    _new_file(path, "--model-only")
    blob = _model_blob(run)
    _save(blob, path)
    return blob


def _model_blob(run) -> dict:
    """What :func:`export_model` writes (loads the model: refusals come before any file is written)."""
    from hpcdgnn.config import job_to_dict

    job = run.job
    model = run.model  # loads the checkpoint, its sizes with it
    resolved = job_to_dict(job)
    return {"format": MODEL_FORMAT, "config": {k: resolved[k] for k in ("model", "task")} |
            {"train": {"dtype": job.train.dtype, "seed": job.train.seed}},
            "dataset": run.sizes, "model": model.state_dict(), "task": run.task.state_dict()}


#: the ``--to pygt`` file's format tag
PYGT_FORMAT = "hpcdgnn.pygt/1"


def export_pygt(run, path: str | Path) -> dict:
    """Write the run's graph-RNN layers as PyTorch Geometric Temporal cells: per layer the cell's class name, its
    constructor arguments and a ``state_dict`` it loads strictly (each layer's ``to_pygt``).

    :func:`load_pygt` builds them; step t runs ``h_l = cell_l(h_{l-1}, edge_index, edge_weight, h_l)`` (GConvLSTM
    also carries C) from h_{-1} = X_t and zero states, with hpcdgnn's A_t as PyG edges (``edge_index`` = [col;
    row], so messages flow into the row's vertex, self-loops removed); the last layer's h is Z_t.

    Raises:
        ConfigError: a model with a layer that no PyG Temporal cell computes the same.
    """
    _new_file(path, "--model-only")
    blob = _pygt_blob(run)
    _save(blob, path)
    return blob


def _pygt_blob(run) -> dict:
    """What :func:`export_pygt` writes; a ConfigError for a model without such cells (TGN has no ``layers``)."""
    model, name = run.model, run.job.model.name
    layers = getattr(model, "layers", None)
    if layers is None or not all(hasattr(layer, "to_pygt") for layer in layers):
        raise ConfigError(f"export --to pygt: model.name: {name} has no PyG Temporal cell computing the same "
                          "(those that do: gconv_gru, gconv_lstm (symmetric graphs), tgcn_cell)")
    cells = []
    for layer in layers:
        cls, kwargs, state = layer.to_pygt()
        cells.append({"class": cls, "kwargs": kwargs, "state_dict": state})
    return {"format": PYGT_FORMAT, "model": name, "dtype": run.job.train.dtype, "layers": cells}


def load_pygt(path: str | Path) -> list:
    """The PyG Temporal cells of an ``export --to pygt`` file, weights loaded (strict), in its dtype.

    Raises:
        DataError: not such a file; ImportError: PyG Temporal is not installed.
    """
    import torch

    blob = _exported(path, PYGT_FORMAT, "a file of `hpcdgnn export --model-only FILE --to pygt`")
    from torch_geometric_temporal.nn import recurrent

    cells = []
    for layer in blob["layers"]:
        cell = getattr(recurrent, layer["class"])(**layer["kwargs"]).to(getattr(torch, blob["dtype"]))
        cell.load_state_dict(layer["state_dict"], strict=True)
        cells.append(cell.eval())
    return cells


def _exported(path: str | Path, fmt: str, what: str) -> dict:
    """An exported file's contents, checked to be of format ``fmt``; a DataError naming the file otherwise."""
    import torch

    try:
        blob = torch.load(path, map_location="cpu", weights_only=False)
        if blob.get("format") != fmt:
            raise ValueError(f"format {blob.get('format')!r}")
    except (OSError, ValueError, AttributeError, RuntimeError, pickle.UnpicklingError, EOFError) as e:
        raise DataError(f"{path}: not {what} ({e})") from None
    return blob


def load_model(path: str | Path):
    """``(model, task)`` from an exported file, in evaluation mode, on the CPU.

    Raises:
        DataError: not an exported model file (names it).
    """
    import types

    from hpcdgnn.api import build_trained
    from hpcdgnn.config import load_job_dict

    blob = _exported(path, MODEL_FORMAT, "a model file of `hpcdgnn export --model-only`")
    job = load_job_dict({"data": {"path": "."}, **blob["config"]}, str(path), check_paths=False)
    return build_trained(job, types.SimpleNamespace(**blob["dataset"]), blob["model"], blob["task"])


def run_export(args) -> int:
    """``export``: the CSV, TensorBoard and model files asked for, each refused (one line) if it exists."""
    from hpcdgnn.api import load_run
    from hpcdgnn.comm.world import world_rank_size
    from hpcdgnn.metrics.log import configure_logging

    say = configure_logging(*world_rank_size()).info  # as a run's lines (a library caller's level and handlers)
    run = load_run(args.rundir)
    records = run.metrics
    if not records:
        raise DataError(f"{args.rundir}: metrics.jsonl has no epoch records (no epoch has ended yet: a run stopped "
                        "within its first one continues with run --resume)")
    pygt = getattr(args, "to", "hpcdgnn") == "pygt"
    if pygt and not args.model_only:
        raise ConfigError("export --to pygt: give --model-only FILE, the file to write the cells into")
    if not (args.csv or args.tensorboard or args.model_only):
        raise ConfigError("export: say what to write: --csv FILE, --tensorboard DIR and/or --model-only FILE")
    # every output checked (and the model built) before any is written: a refusal leaves no file behind
    given = [(opt, path) for opt, path in (("--csv", args.csv), ("--tensorboard", args.tensorboard),
                                           ("--model-only", args.model_only)) if path]
    for i, (opt, path) in enumerate(given):
        for other, other_path in given[:i]:
            if Path(path).resolve() == Path(other_path).resolve():
                raise ConfigError(f"export: {other} {other_path} and {opt} {path} are the same path; give each "
                                  "output its own")
    if args.csv:
        _new_file(args.csv, "--csv")
    if args.tensorboard:
        _check_logdir(args.tensorboard)
    if args.model_only:
        _new_file(args.model_only, "--model-only")
        if run.checkpoint is None:
            raise DataError(f"{args.rundir}: the run has no complete checkpoint of an epoch's end to export the model "
                            "from (one within an epoch is for --resume only)")
        blob = _pygt_blob(run) if pygt else _model_blob(run)
    if args.csv:
        cols = write_csv(records, args.csv)
        say(f"{args.csv}: {len(records)} epoch{'s' * (len(records) != 1)} x {len(cols)} columns")
    if args.tensorboard:
        n = write_tensorboard(records, args.tensorboard)
        say(f"{args.tensorboard}: {n} scalars over {len(records)} epochs (tensorboard --logdir {args.tensorboard})")
    if args.model_only:
        _save(blob, args.model_only)
        # the newest epoch end's when loaded: say which (relative to the run directory where it lies in it)
        source = run.loaded_from.relative_to(run.dir) if run.loaded_from.is_relative_to(run.dir) else run.loaded_from
        if pygt:
            say(f"{args.model_only}: {len(blob['layers'])} PyG Temporal {blob['layers'][0]['class']} cell(s) of "
                  f"{blob['model']} from {source} (hpcdgnn.metrics.export.load_pygt)")
        else:
            say(f"{args.model_only}: {blob['config']['model']['name']} and its {blob['config']['task']['name']} "
                  f"head from {source} (hpcdgnn.metrics.export.load_model)")
    return 0
