"""The Python API: ``hpcdgnn.train(job)`` and ``hpcdgnn.load_run(RUNDIR)``.

``hpcdgnn.train`` runs what ``python -m hpcdgnn run`` runs, in the calling process: at P = 1 in a notebook or a
script, and under ``mpirun -np P python script.py`` as the same call on every rank (SPMD, like the command).
Both return a :class:`TrainedRun`: the run directory, its epoch records and summary, and the trained model.

Errors are exceptions (:class:`hpcdgnn.errors.HpcdgnnError` and its kinds, each one line naming the key, file or
rank), not exit codes. Under MPI an error every rank meets is raised on every rank; one a rank meets alone prints
``[rank R] hpcdgnn: error: ...`` and a crash ``rank R/P: <traceback>``, and either ends the whole job
(``MPI_Abort``) as the command does, since the other ranks would wait for it in a collective.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import yaml

from hpcdgnn.errors import CommFailure, ConfigError, DataError, HpcdgnnError, short_repr

if TYPE_CHECKING:
    from hpcdgnn.config import JobConfig

__all__ = ["TrainedRun", "build_trained", "import_training", "load_run", "train"]


def import_training() -> None:
    """Import hpcdgnn's training modules, torch with them, with an interrupt (SIGINT, a notebook's) held until
    they are in, then raised as the caller's handler would have it (``KeyboardInterrupt``).

    A ``KeyboardInterrupt`` amid torch's import leaves it half-initialised in ``sys.modules``, and every later use
    in the process fails (``module 'torch' has no attribute ...``), so a notebook would have to restart. The first
    call of :func:`train`, :meth:`TrainedRun.embed`, :attr:`TrainedRun.model`, … imports them this way.
    """
    if "hpcdgnn.train.trainer" in sys.modules:
        return
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        importlib.import_module("hpcdgnn.train")  # only the main thread sets handlers; None: one set outside Python
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        importlib.import_module("hpcdgnn.train")
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        signal.raise_signal(signal.SIGINT)  # to the caller's handler: Python's raises KeyboardInterrupt here


@dataclass
class TrainedRun:
    """A run: its directory and what it wrote there, and the trained model.

    Attributes:
        dir: the run directory, absolute (``metrics.jsonl``, ``summary.json``, ``plan.json``, ``checkpoints/``).
        preempted: the run stopped at a signal (SIGINT, a notebook's interrupt, included) after checkpointing;
            ``hpcdgnn.train(..., resume=run.dir)`` continues it.
        loaded_from: the checkpoint directory :attr:`model` was loaded from (None before, or for the caller's own
            model after :func:`train`).
    """

    dir: Path
    preempted: bool = False
    _model: Any = field(default=None, repr=False)
    _task: Any = field(default=None, repr=False)
    loaded_from: Path | None = field(default=None, init=False, repr=False)
    _known_sizes: dict[str, Any] | None = field(default=None, init=False, repr=False)

    @property
    def metrics(self) -> list[dict]:
        """The epoch records (``metrics.jsonl``): loss, metrics, time split, bytes sent per epoch."""
        from hpcdgnn.metrics.results import read_epoch_records

        return read_epoch_records(self._file("metrics.jsonl"))

    @property
    def losses(self) -> list[float | None]:
        """The training loss of every epoch (None for an epoch whose loss was not finite: a diverged run's last)."""
        return [r["loss"] for r in self.metrics]

    @property
    def summary(self) -> dict:
        """``summary.json``: the status, the final epoch's record (its metrics and time split), totals, the steady
        epoch time, memory, the environment (docs/results.md lists the fields; there is no best epoch)."""
        return json.loads(self._file("summary.json").read_text())

    @cached_property
    def job(self):
        """The job as it ran, every default filled in (:class:`hpcdgnn.config.JobConfig`, ``config.resolved.yaml``);
        :func:`train` takes it, as it is or changed (``dataclasses.replace``, or ``overrides``), to train again."""
        from hpcdgnn.config import load_job

        return load_job(self._file("config.resolved.yaml"), check_paths=False, resolved=True)

    @property
    def model(self):
        """The trained model (``torch.nn.Module``): the caller's own after :func:`train`, else built from the job
        and loaded from the newest checkpoint (which needs the job's dataset, for its sizes)."""
        if self._model is None:
            self._load()
        return self._model

    @property
    def task(self):
        """The task's trained head (the link decoder, the classifier), loaded like :attr:`model`."""
        if self._task is None:
            self._load()
        return self._task

    @property
    def checkpoint(self) -> Path | None:
        """The newest complete checkpoint directory of an epoch's end, or None."""
        import_training()
        from hpcdgnn.train.checkpoint import latest_checkpoint

        job = self.job
        return latest_checkpoint(Path(job.checkpoint.dir) if job.checkpoint.dir else self.dir / "checkpoints",
                                 epoch_end=True)

    def embed(self, output: str | os.PathLike | None = None, split: str = "test",
              overrides: Sequence[str] | str | Mapping[str, Any] = ()):
        """``python -m hpcdgnn embed``: Z_t of the split's steps from the newest checkpoint (every rank calls it
        under ``mpirun``, as :func:`train`).

        Args:
            output: a new ``.h5`` / ``.npz`` file to write them to as well, or None: nothing written.
            split: ``"train"``, ``"val"``, ``"test"`` or ``"all"``.
            overrides: as :func:`train`'s (``{"data.path": NEW}`` for a moved dataset).

        Returns:
            :class:`hpcdgnn.embed.EmbeddingFile` (``steps`` (S,), ``embeddings`` (S, N, F), ``computed`` (S, N),
            ``meta``), on every rank.
        """
        try:
            import_training()
            from hpcdgnn.embed import embedded, read_embeddings

            _check_split(split)
            output = _path_argument(output, "output")
            args = argparse.Namespace(rundir=str(self.dir), output=output, split=split, set=_override_items(overrides))
            same = _Same("embed", {"output": output, "split": split, "overrides": args.set})
            kept = _on_every_rank(lambda comm: embedded(args, comm), words=_PASS_ARGUMENTS, same=same)
            return kept if output is None else read_embeddings(output)
        except HpcdgnnError as e:
            raise _at_the_call(e) from None

    def predict(self, output: str | os.PathLike | None = None, *, pairs: Any = None, split: str | None = None,
                overrides: Sequence[str] | str | Mapping[str, Any] = ()):
        """``python -m hpcdgnn predict`` (every rank calls it under ``mpirun``): link prediction's probability
        that (u, v) is an edge of snapshot t+1 given Z_t, for each row of ``pairs``; node tasks' head outputs
        for the split's steps (regression: the H predicted targets; classification: class probabilities).

        Args:
            output: a new file to write them to as well (``.csv`` of ``u,v,t,score`` rows for pairs; ``.h5`` /
                ``.npz`` as :meth:`embed`'s for node tasks), or None: nothing written.
            pairs: link prediction's ``(u, v, t)`` rows: a (K, 3) integer array, tensor or list, or a file (``.npy``,
                or text of three columns); under ``mpirun`` rank 0's, which the other ranks give alike or as None.
            split: node tasks' steps (default ``"test"``).
            overrides: as :func:`train`'s.

        Returns:
            Pairs: the scores, a float64 array (K,) in the rows' order. Node tasks: an
            :class:`hpcdgnn.embed.EmbeddingFile` whose ``embeddings`` (S, N, C) are the head's outputs.
        """
        try:
            import_training()
            from hpcdgnn.embed import predicted, read_embeddings

            _check_split("test" if split is None else split)
            # pairs given first, as a model is called on its data, land in output
            output = _path_argument(output, "output", advice="; the pairs go by keyword: predict(pairs=...)")
            if isinstance(pairs, str | os.PathLike):
                pairs = _path_argument(pairs, "pairs")
            # data is read on rank 0 alone (predicted): the other ranks' pairs are compared, not read
            args = argparse.Namespace(rundir=str(self.dir), output=output, split="test" if split is None else split,
                                      split_given=split is not None, set=_override_items(overrides), pairs=pairs)
            same = _Same("predict", {"output": output, "split": split, "overrides": args.set, "pairs": pairs},
                         rank0_only=("pairs",))
            got = _on_every_rank(lambda comm: predicted(args, comm), words=_PASS_ARGUMENTS, same=same)
            return read_embeddings(output) if got is None else got
        except HpcdgnnError as e:
            raise _at_the_call(e) from None

    def export(self, *, csv: str | os.PathLike | None = None, tensorboard: str | os.PathLike | None = None,
               model: str | os.PathLike | None = None, to: str = "hpcdgnn") -> dict[str, Path]:
        """``python -m hpcdgnn export``: the epoch records as a CSV file and TensorBoard scalars, the trained model
        as a plain file. Under ``mpirun`` rank 0 writes, and needs no other rank: call it on rank 0 alone
        (``if rank == 0``) or on every rank with the same arguments (each returns once rank 0 has written, or
        raises rank 0's error; :mod:`hpcdgnn.rank_zero`). Nothing existing is overwritten: every output is checked
        before any is written.

        Args:
            csv: a new CSV file, one row per epoch record (nested keys dotted).
            tensorboard: a directory without curves in it, for the records as scalars (step = epoch).
            model: a new file for the trained model and task head, loaded by
                :func:`hpcdgnn.metrics.export.load_model` (``to="hpcdgnn"``) or as PyG Temporal's cells with the
                same weights by :func:`hpcdgnn.metrics.export.load_pygt` (``to="pygt"``: gconv_gru, gconv_lstm,
                tgcn_cell).
            to: ``model``'s form, ``"hpcdgnn"`` or ``"pygt"``.

        Returns:
            What was written: ``{"csv": Path, "tensorboard": Path, "model": Path}``, the ones given.
        """
        try:
            import_training()
            from hpcdgnn.metrics.export import run_export
            from hpcdgnn.rank_zero import Words, on_rank_0

            if to not in ("hpcdgnn", "pygt"):
                raise ConfigError(f"to: {to!r}; choose from 'hpcdgnn', 'pygt'")
            paths = {k: _path_argument(v, k) for k, v in (("csv", csv), ("tensorboard", tensorboard), ("model", model))}
            args = argparse.Namespace(rundir=str(self.dir), csv=paths["csv"], tensorboard=paths["tensorboard"],
                                      model_only=paths["model"], to=to)

            def work() -> None:
                caller = _CallerState.save()
                try:
                    run_export(args)
                except HpcdgnnError as e:
                    raise _named(e, None, _EXPORT_ARGUMENTS) from None
                finally:
                    caller.restore()

            # the call as the other ranks compare it: the run and the arguments as given (as _Same compares them)
            key = f"{self.dir} to " + ", ".join([f"{k}={v!r}" for k, v in paths.items() if v is not None]
                                                + ([f"to={to!r}"] if to != "hpcdgnn" else []))
            words = Words("export", "exporting", "exported", "arguments", "rank 0 writes export's files")
            on_rank_0(_EXPORT_TAG, key, work, words, lambda _: None)
            return {k: Path(v) for k, v in paths.items() if v is not None}
        except HpcdgnnError as e:
            raise _at_the_call(e) from None

    def _file(self, name: str) -> Path:
        path = self.dir / name
        if not path.is_file():
            raise DataError(f"{self.dir}: not a finished hpcdgnn run directory (no {name})")
        return path

    @property
    def sizes(self) -> dict[str, Any]:
        """The dataset's scalar figures the model is built for (N, T, F, classes, …): the newest checkpoint's, so
        that the model loads without the dataset; a run without a checkpoint, or one older than them, reads them
        from the dataset."""
        if self._known_sizes is None:  # read once: a checkpoint's state.pt holds the whole model
            self._known_sizes = self._sizes(self._saved(required=False)[1])
        return self._known_sizes

    def _sizes(self, state: dict[str, Any]) -> dict[str, Any]:
        """:attr:`sizes` of a checkpoint's shared ``state``."""
        from hpcdgnn.data.manifest import manifest_sizes
        from hpcdgnn.train.setup import load_dataset_manifest

        sizes = state.get("sizes")
        if sizes is not None:
            return sizes
        try:
            return manifest_sizes(load_dataset_manifest(self.job, str(self.dir)))
        except HpcdgnnError as e:
            raise type(e)(f"{e} (without a checkpoint that keeps them, the model's sizes come from the run's dataset, "
                          f"data.path in {self.dir / 'config.resolved.yaml'}, relative to the working directory)"
                          ) from None

    def _saved(self, required: bool = True) -> tuple[Path | None, dict[str, Any]]:
        """The newest checkpoint and its shared state (model, task head, sizes); ``(None, {})`` without one unless
        ``required``."""
        import_training()
        from hpcdgnn.train.checkpoint import check_owner, latest_checkpoint, load_shared

        ckpt = self.checkpoint
        if ckpt is None and required:
            job = self.job
            within = latest_checkpoint(Path(job.checkpoint.dir) if job.checkpoint.dir else self.dir / "checkpoints")
            raise DataError(f"{self.dir}: the run has no complete checkpoint of an epoch's end to load the model from"
                            + (f" ({within.name}, within an epoch, is for resume only)" if within is not None else
                               " (it stopped before its first)"))
        if ckpt is not None:
            check_owner(None, ckpt, self.dir, str(self.dir))  # a shared checkpoint.dir: another run's weights
        return ckpt, {} if ckpt is None else load_shared(ckpt)

    def _load(self) -> None:
        self.loaded_from, state = self._saved()
        self._known_sizes = self._sizes(state)
        self._model, self._task = build_trained(self.job, SimpleNamespace(**self._known_sizes), state["model"],
                                                state["task"])


def build_trained(job, sizes, model_state: dict, task_state: dict):
    """The job's model and task head built for a dataset's ``sizes`` (its manifest, or the figures an exported
    model file keeps) with trained weights loaded, in evaluation mode, on the CPU.

    Args:
        job: the resolved job (:class:`hpcdgnn.config.JobConfig`).
        sizes: the manifest, or an object with its scalar fields (N, T, F, classes...).
        model_state: the model's ``state_dict``.
        task_state: the task head's ``state_dict``.

    Returns:
        ``(model, task)``.
    """
    import_training()
    import torch

    from hpcdgnn.regimes import regime_of

    regime = regime_of("model", job.model.name)
    dtype = getattr(torch, job.train.dtype)
    caller = _CallerState.save()  # the weights' draws, overwritten below, must not move the caller's RNG
    try:
        model = regime.build_model(job, sizes).to(dtype)
        task = regime.task_of(job, sizes, model).to(dtype)
    finally:
        caller.restore()
    model.load_state_dict(model_state)
    task.load_state_dict(task_state)
    return model.eval(), task.eval()


def load_run(run_dir: str | os.PathLike) -> TrainedRun:
    """A finished (or pre-empted) run, from its directory: what :func:`train` returned for it.

    Args:
        run_dir: the run directory (``config.resolved.yaml``, ``metrics.jsonl``, ``checkpoints/``); ``~`` is
            the home directory, as in every path argument of this API.

    Returns:
        The run; its model and task head are loaded from the newest checkpoint when first asked for.

    Raises:
        DataError: ``run_dir`` is not a run directory (names the missing file).
    """
    run = TrainedRun(Path(_path_argument(run_dir, "run_dir")).absolute())
    run._file("config.resolved.yaml")
    with suppress(OSError, ValueError, AttributeError):  # no summary yet (a run killed early): not pre-empted
        run.preempted = json.loads((run.dir / "summary.json").read_text()).get("status") == "preempted"
    return run


def _path_argument(value: Any, name: str, required: bool = False, advice: str = "") -> str | None:
    """A path argument as a string, ``~`` expanded (None stays None unless ``required``); another type is refused
    in one line naming ``name``, ending in ``advice``.

    ``~/runs/x`` is what a user types from the docs' command lines, where the shell expands it; Python's
    ``open()`` does not, so ``load_run("~/runs/x")`` would look for ``./~/runs/x``. Expanded as ``pathlib``'s
    ``expanduser`` and most tools taking paths from Python do (a directory named ``~`` is ``./~``)."""
    if isinstance(value, str | os.PathLike) or value is None and not required:
        return None if value is None else os.path.expanduser(os.fspath(value))
    raise ConfigError(f"{name}: {type(value).__name__} {short_repr(value)} is not a path (give a str or "
                      f"os.PathLike){advice}")


def _yaml_text(job: str) -> bool:
    """Whether a str job is a YAML mapping's text (a notebook's job in a triple-quoted string), not a file's path:
    read as a path, its lines were the error's lines, ending in ": cannot read job file"."""
    if os.path.exists(job):
        return False
    try:
        return isinstance(yaml.safe_load(job), dict)
    except yaml.YAMLError:
        return False


@contextmanager
def _job_file(job: str | os.PathLike | Mapping, name: str):
    """The job as a YAML path: a path as it is, a mapping written to ``<tmp>/<name>.yaml`` (the run directory
    is named after it) and removed afterwards."""
    if not isinstance(job, Mapping):
        yield str(job), None
        return
    # the run directory's prefix: one path component, printable, with room for "-<timestamp>" and ".yaml"
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or not name.isprintable() \
            or len(name.encode()) > 200:
        raise ConfigError(f"name: {short_repr(name)} is not a run name (a printable string of 1 to 200 bytes "
                          "without '/')")
    text = yaml.safe_dump(_plain(job, ""), sort_keys=False)
    with tempfile.TemporaryDirectory(prefix=_JOB_DIR) as tmp:
        path = Path(tmp) / f"{name}.yaml"
        path.write_text(text)
        yield str(path), str(path)


#: the temporary directory a mapping job is written to (:func:`_job_file`): each rank writes its own
_JOB_DIR = "hpcdgnn-job-"


def job_record(job_path: str | os.PathLike) -> str:
    """What ``summary.json`` records as a run's job: its YAML's path, or for a mapping given to :func:`train`
    (written to a temporary file, gone after the call) what it was."""
    path = Path(job_path)
    if path.parent.name.startswith(_JOB_DIR) and path.parent.parent == Path(tempfile.gettempdir()):
        return f"a mapping given to hpcdgnn.train (name {path.stem!r}; in full: config.resolved.yaml)"
    return str(job_path)


def _plain(value: Any, key: str) -> Any:
    """A mapping job's ``value`` at ``key`` as YAML's plain types: paths as strings, numpy scalars and arrays as
    Python numbers and lists (what a sweep's loop hands over); anything else YAML cannot write is refused,
    named."""
    if isinstance(value, Mapping):
        return {k: _plain(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    named = _torch_or_numpy_name(value)
    if named is not None:
        return named
    # exact types: np.float64 and np.str_ subclass float and str, yet YAML's safe writer refuses them
    if value is None or type(value) in (bool, int, float, str):
        return value
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays, torch tensors
    if callable(tolist) and not isinstance(value, type):  # a class's (np.float64's) is unbound: no value
        plain = tolist()
        if type(plain) is not type(value):  # np.longdouble's is itself: refused below, not recursed on
            return _plain(plain, key)
    raise ConfigError(f"job (mapping): {key}: {type(value).__name__} {short_repr(value)} is not a job value "
                      "(a number, string, bool, path, list or mapping)")


def _torch_or_numpy_name(value: Any) -> str | None:
    """A PyTorch script's ``torch.device("cpu")``, ``torch.float64`` or numpy's ``np.float64`` as the job's word
    (``cpu``, ``float64``: what ``train.device`` and ``train.dtype`` take; anything else they name is refused there,
    in the job's words), else None. Neither library is imported: a value of theirs is in hand already."""
    kind = type(value)
    if kind.__module__ == "torch" and kind.__name__ in ("device", "dtype"):
        return str(value).removeprefix("torch.")
    numpy = sys.modules.get("numpy")
    if numpy is not None and (isinstance(value, numpy.dtype) or isinstance(value, type) and
                              issubclass(value, numpy.generic)):
        return numpy.dtype(value).name
    return None


def train(job: str | os.PathLike | Mapping | JobConfig | None, *,
          overrides: Sequence[str] | str | Mapping[str, Any] = (), output: str | os.PathLike | None = None,
          resume: str | os.PathLike | None = None, name: str = "job") -> TrainedRun:
    """Train a job in this process (every rank calls it under ``mpirun``), as ``python -m hpcdgnn run`` does.

    Args:
        job: a job YAML path, or the job as a mapping of sections (``{"data": {"path": ...}, "model": ...}``,
            the YAML's keys; relative paths are relative to the working directory), or a
            :class:`~hpcdgnn.config.JobConfig` (a run's :attr:`TrainedRun.job`, as it is or changed with
            ``dataclasses.replace``), trained as the mapping of every key it holds. None with ``resume``.
        overrides: ``section.key=value`` items, as ``--set`` takes them (one such string, or a mapping
            ``{"section.key": value}``).
        output: the run directory (new or empty); default ``output.dir/<name>-<timestamp>``.
        resume: continue the run in this directory from its newest checkpoint.
        name: a mapping's or JobConfig's name (the run directory's prefix).

    Returns:
        The run, with its trained model (:class:`TrainedRun`).

    Raises:
        HpcdgnnError: a bad job, dataset or plan (one line), or a diverged run (every rank).
    """
    try:
        import_training()
        from hpcdgnn import preemption
        from hpcdgnn.config import JobConfig, job_to_dict
        from hpcdgnn.train.trainer import RESTART_WORDS, run_training

        if job is None and resume is None:
            raise ConfigError("job: is None: pass a job (a YAML path or a mapping of sections), or resume=RUNDIR")
        given = "job (JobConfig)" if isinstance(job, JobConfig) else "job (mapping)"  # what its errors call it
        if isinstance(job, JobConfig):  # a run's job (run.job), maybe changed: the mapping it was resolved to
            job = job_to_dict(job)
        if job is not None and not isinstance(job, (str, os.PathLike, Mapping)):
            raise ConfigError(f"job: {type(job).__name__} {short_repr(job)}: pass a job YAML path, a mapping of "
                              "sections (a dict) or a JobConfig (a run's job)")
        if isinstance(job, str | os.PathLike):  # a job file's path: ~ expanded, as every path argument's
            job = _path_argument(job, "job")
        if isinstance(job, str) and _yaml_text(job):
            raise ConfigError(f"job: {short_repr(job)} is YAML text, not a job file: pass yaml.safe_load(text) (a "
                              "mapping) or the file's path")
        output, resume = _path_argument(output, "output"), _path_argument(resume, "resume")
        if output is not None and resume is not None:  # as the command's --output and --resume
            raise ConfigError(f"output={output!r} and resume={resume!r} exclude each other: a resumed run goes on in "
                              "its own directory")
        overrides = _override_items(overrides)
        stop = preemption.install()
        # the run's pre-emption lines, and its run.lock wait's, as its errors read (_named): resume=RUNDIR: …
        words = RESTART_WORDS.set(("hpcdgnn.train(None, resume={!r})", "output=", "{}={}"))
        try:
            with _job_file(job, name) if job is not None else _no_job() as (job_path, written):
                result = _on_every_rank(lambda comm: run_training(job_path, overrides, output, comm, resume=resume),
                                        lambda: stop.raised, written, given=given)
        finally:
            RESTART_WORDS.reset(words)
            preemption.reset()  # a notebook's interrupt is its own again
        model, task = result.model, result.task
        for module in (model, task):  # as load_run's: ready to evaluate
            if module is not None:
                module.eval()
        # bool(): a stop in the set-up is agreed in an array, numpy's bool (json.dumps refuses it)
        return TrainedRun(Path(result.run_dir).absolute(), bool(result.preempted), model, task)
    except HpcdgnnError as e:
        raise _at_the_call(e) from None


@dataclass
class _CallerState:
    """What a run sets process-wide (torch's intra-op threads, its global RNGs: the CPU's and, once CUDA is in use,
    every GPU's; numpy's and Python's global RNGs, which a resume, ``embed`` and ``predict`` set to a checkpoint's;
    the default dtype; the warning filters; the ``hpcdgnn`` logger) as the caller had it, put back when the call
    returns: a script's own work is not changed by having trained, embedded or predicted. :meth:`save` also sets the
    default dtype a command has (float32): a notebook's ``torch.set_default_dtype(torch.float64)`` would otherwise
    draw the initial weights in float64 before their cast to ``train.dtype``, and train other numbers than ``run``;
    and the default device a command has (the CPU; ``train.device`` places the run's own tensors): a caller's
    ``torch.set_default_device("cuda")`` or ``with torch.device("meta"):`` would otherwise put every tensor hpcdgnn
    makes without a device there (on "meta" the model could not even be built). Only where the caller set one: a
    default device costs every torch call a dispatch."""

    threads: int
    rng: Any
    dtype: Any
    cuda_rng: Any = None
    numpy_rng: Any = None
    python_rng: Any = None
    #: the CPU as the default device, entered over the caller's (a context on torch's mode stack, which the
    #: innermost decides: both ``set_default_device`` and ``with torch.device(...)`` are below it); None: the
    #: caller's is the CPU
    cpu: Any = None
    #: the caller's warning filters, kept while the call adds hpcdgnn's own
    #: (:func:`hpcdgnn.ops.ignore_csr_notice`)
    warning_filters: Any = None
    #: puts the ``hpcdgnn`` logger back as the caller had it (:func:`hpcdgnn.metrics.log.logging_restorer`)
    logger: Any = None

    @classmethod
    def save(cls) -> _CallerState:
        import random
        import warnings

        import numpy as np
        import torch

        from hpcdgnn.metrics.log import logging_restorer
        from hpcdgnn.ops import ignore_csr_notice

        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        caller = cls(torch.get_num_threads(), torch.random.get_rng_state(), torch.get_default_dtype(), cuda,
                     np.random.get_state(), random.getstate())
        torch.set_default_dtype(torch.float32)
        if torch.get_default_device().type != "cpu":
            caller.cpu = torch.device("cpu")
            caller.cpu.__enter__()
        caller.warning_filters = warnings.catch_warnings()
        caller.warning_filters.__enter__()
        ignore_csr_notice()
        caller.logger = logging_restorer()
        return caller

    def restore(self) -> None:
        import random

        import numpy as np
        import torch

        if self.logger is not None:
            self.logger()
            self.logger = None
        if self.warning_filters is not None:
            self.warning_filters.__exit__(None, None, None)
            self.warning_filters = None
        if self.cpu is not None:
            self.cpu.__exit__(None, None, None)
            self.cpu = None
        torch.set_default_dtype(self.dtype)
        torch.set_num_threads(self.threads)
        torch.random.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        np.random.set_state(self.numpy_rng)
        random.setstate(self.python_rng)


def _check_split(split: str) -> None:
    """``embed``/``predict``'s ``--split`` choices."""
    from hpcdgnn.embed import PASS_SPLITS

    if split not in PASS_SPLITS:
        raise ConfigError(f"split: {split!r}; choose from {', '.join(PASS_SPLITS)}")


@dataclass
class _Same:
    """A collective call's arguments that every rank must give alike (:meth:`check`).

    Rank 0's arguments decide for every rank (it reads the data, writes the files), and a rank that was given
    another ``output`` expects another return (data where rank 0 wrote a file: a collective the others never
    join), so arguments that differ are refused, every rank alike, instead of served silently as rank 0's.
    ``rank0_only``: arguments the other ranks may leave None (data only rank 0 needs)."""

    call: str
    given: dict[str, Any]
    rank0_only: tuple[str, ...] = ()

    @staticmethod
    def digest(value: Any) -> str:
        """A fingerprint of an argument: data (array, tensor, list of numbers) by its rows as rank 0 reads them
        (:func:`~hpcdgnn.embed.pairs_of`; integers as int64, so a list and an int32 tensor of the same numbers
        agree), a path by its text; never raises (what cannot be read is compared by its type, and refused later
        by rank 0)."""
        import hashlib

        import numpy as np

        from hpcdgnn.embed import pairs_of

        try:
            if value is None or isinstance(value, str | os.PathLike | int | float | bool):
                text = repr(os.fspath(value) if isinstance(value, os.PathLike) else value).encode()
            else:
                data = pairs_of(value)
                data = data.astype(np.int64) if data.dtype.kind in "iu" else data
                text = f"{data.dtype}{data.shape}".encode() + np.ascontiguousarray(data).tobytes()
        except Exception:  # ragged lists, strings, objects: their type
            text = f"<{type(value).__qualname__}>".encode()
        return hashlib.sha256(text).hexdigest()[:16]

    def check(self, comm) -> None:
        """Refuse, on every rank alike (one line), arguments that differ from rank 0's (collective)."""
        from hpcdgnn.train.collective import collective_error

        if comm.size == 1:
            return
        mine = {k: self.digest(v) for k, v in self.given.items()}
        everyone = comm.allgather_obj(mine, tag="setup")
        unset = self.digest(None)
        for rank, theirs in enumerate(everyone):
            for name in self.given:
                if theirs[name] == everyone[0][name] or (name in self.rank0_only and theirs[name] == unset):
                    continue
                also = f" (or {name}=None: rank 0's serve every rank)" if name in self.rank0_only else ""
                raise collective_error(ConfigError(
                    f"{self.call}: rank {rank} was given another {name} than rank 0; every rank calls {self.call} "
                    f"with the same arguments{also}"))


def _on_every_rank(body, stopped=lambda: False, written: str | None = None, words=None, same: _Same | None = None,
                   given: str = "job (mapping)"):
    """``body(comm)`` on every rank of the world (SPMD), returned once every rank has finished it: an error every
    rank meets is raised on every rank (a mapping job's file ``written`` named as the caller gave it, ``given``,
    the commands' options as ``words`` says: :func:`_named`); one a rank meets alone prints its line with the rank
    and ends the job, as a crash does with its traceback (the others would wait in a collective). ``same``:
    arguments every rank must give alike, checked first. ``body`` runs with autograd on, whatever the caller's
    grad mode (``torch.no_grad``, ``torch.inference_mode``), which is its own again afterwards."""
    import torch

    from hpcdgnn.comm import Communicator
    from hpcdgnn.comm.world import abort_world, start_timeout, world_rank_size
    from hpcdgnn.errors import StalledError
    from hpcdgnn.train.collective import agree_start

    caller = _CallerState.save()
    try:
        comm = Communicator.start(start_timeout(), stop=stopped,
                                  call=None if same is None else f"TrainedRun.{same.call}")
    except StalledError as e:
        caller.restore()
        rank, size = world_rank_size()
        _fail_alone(rank, size, abort_world, str(e), e.exit_code)
        raise
    except BaseException:  # a bad HPCDGNN_START_TIMEOUT, say: the caller's state back all the same
        caller.restore()
        raise
    try:
        agree_start(comm)
        if same is not None:
            same.check(comm)
        # a caller's torch.no_grad() or inference_mode() (a notebook cell's) would leave the training step, and
        # embed's and predict's backward pass, without a graph to differentiate
        with torch.inference_mode(False), torch.enable_grad():
            result = body(comm)
        comm.barrier(tag="api.done")  # every rank returns once rank 0 has written what the call writes
        return result
    except (HpcdgnnError, CommFailure) as e:
        if comm.size > 1 and not getattr(e, "collective", False):
            _fail_alone(comm.rank, comm.size, comm.abort, str(e), e.exit_code)
        raise _named(e, written, _ARGUMENTS if words is None else words, given) from None
    except BaseException:
        if comm.size > 1:  # a crash on this rank: the others may wait in a collective
            sys.stderr.write(f"rank {comm.rank}/{comm.size}: {traceback.format_exc()}")
            sys.stderr.flush()
            comm.abort(1)
        raise
    finally:
        comm.close()
        caller.restore()


def _at_the_call(e: HpcdgnnError) -> HpcdgnnError:
    """``e`` to be raised, ``from None``, by the API call the user made: its traceback begins there, with no
    frame of hpcdgnn's internals, and no chain (its one line says it all). Only for
    :class:`~hpcdgnn.errors.HpcdgnnError`, a refusal of the user's job, data or arguments: any other exception
    (a bug in hpcdgnn, or one raised by the user's own code it runs, a registered model) keeps every frame, which
    is what locates it."""
    return e.with_traceback(None)


@contextmanager
def _no_job():
    yield None, None


def _fail_alone(rank: int, size: int, abort, message: str, code: int) -> None:
    """An error this rank met alone under MPI: its line with the rank, then end every rank with ``code``."""
    if size > 1:
        print(f"[rank {rank}] hpcdgnn: error: {message}", file=sys.stderr, flush=True)
        abort(code)


def _override_items(overrides: Sequence[str] | str | Mapping[str, Any]) -> list[str]:
    """``--set`` items from a sequence of them, one of them (not its characters), or a mapping of key to value;
    None: none (as ``output`` and ``resume`` take None)."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, Mapping):
        return [f"{k}={_override_value(v)}" for k, v in overrides.items()]
    items = list(overrides) if isinstance(overrides, Iterable) else None
    if items is None or not all(isinstance(item, str) for item in items):
        raise ConfigError(f"overrides: {type(overrides).__name__} {short_repr(overrides)}: give a string "
                          "'KEY=VALUE', a sequence of such strings or a mapping {KEY: VALUE}")
    return items


def _override_value(value: Any) -> str:
    """An override mapping's value as ``--set`` reads it (YAML flow): ``[10, 5]``, ``on``, ``0.01``."""
    return yaml.safe_dump(_plain(value, ""), default_flow_style=True).strip().removesuffix("...").strip()


#: the commands' options as this API's arguments where a message the two share names one as its subject (at
#: its start, or after ``COMMAND RUNDIR: ``), and a ``--set KEY=VALUE`` it advises: (pattern, replacement). Only
#: there: prepare's options and the user's own paths elsewhere in a message stay as they are
_ARGUMENTS = ((re.compile(r"^((?:\w+ \S+: )?)--set (?=\S)"), r"\1overrides: "),
              (re.compile(r"^((?:\w+ \S+: )?)--(output|resume|pairs|split) (?=\S)"), r"\1\2="),
              (re.compile(r"--set ([\w.]+=[^\s);,]+)"), r'overrides=["\1"]'))

#: embed's and predict's messages: theirs name no other command's options, so their own are the arguments
#: anywhere in them, advice included (``give --pairs FILE`` -> ``give pairs=FILE``, ``drop --split`` -> ``drop
#: split``)
_PASS_ARGUMENTS = (*_ARGUMENTS, (re.compile(r"(?<![\w/.-])--(pairs|split|output)(?: ([^\s-]\S*))?"),
                                 lambda m: m[1] if m[2] is None else f"{m[1]}={m[2]}"))


#: the MPI tag of rank 0's word about an export to the other ranks (:mod:`hpcdgnn.rank_zero`; the adapters' is
#: 0x4ADA)
_EXPORT_TAG = 0x4ADB

#: export's messages: its options as the arguments of :meth:`TrainedRun.export`, anywhere in them
_EXPORT_ARGUMENTS = ((re.compile(r"(?<![\w/.-])--(csv|tensorboard)(?: ([^\s-]\S*))?"),
                      lambda m: m[1] if m[2] is None else f"{m[1]}={m[2]}"),
                     (re.compile(r"(?<![\w/.-])--model-only(?: ([^\s-]\S*))?"),
                      lambda m: "model" if m[1] is None else f"model={m[1]}"),
                     (re.compile(r"export --to pygt"), "export(to='pygt')"),
                     (re.compile(r"\brun --resume\b"), "hpcdgnn.train(None, resume=RUNDIR)"),
                     (re.compile(r"for --resume only"), "for resuming only"))


def _named(e: BaseException, written: str | None, words=_ARGUMENTS, given: str = "job (mapping)") -> BaseException:
    """``e`` in this API's words: a mapping job's temporary file called what it is (``given``: ``job (mapping)``,
    ``job (JobConfig)``) — any rank's: an error rank 0 met and broadcast names rank 0's file — and the commands'
    ``--set``, ``--output``, … as the arguments
    ``overrides``, ``output=``, … (``words``: (pattern, replacement) pairs, :data:`_ARGUMENTS` or
    :data:`_PASS_ARGUMENTS`); raised without the internal frames (the message says it all)."""
    text = str(e)
    if written is not None:
        pattern = re.escape(str(Path(written).parent.parent)) + "/" + re.escape(_JOB_DIR) + r"[^/\s]+/" + \
            re.escape(Path(written).name)
        text = re.sub(pattern, given, text)
    for pattern, replacement in words:
        text = pattern.sub(replacement, text)
    if text == str(e):
        return e.with_traceback(None)
    named = type(e)(text)
    for attr in ("collective", "exit_code"):
        if attr in vars(e):
            setattr(named, attr, vars(e)[attr])
    return named
