"""Everything before the first epoch: the job, the plan, the run directory, the host, the model and the strategy.

:func:`build_run` (every rank): rank 0 validates the job, checks the dataset, makes the plan and only then the
run directory, broadcasting the result or the user error; host tuning; the model from ``train.seed`` with rank
0's parameters broadcast, and on resume the checkpoint; the strategy reads this rank's data. Returns a :class:`Run`.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from hpcdgnn import preemption
from hpcdgnn.atomic import atomic_write, keep_as, remove_temporaries
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.comm.device import cpu_affinity, cuda_seen, memory_share, node_cpu_sets, select_device
from hpcdgnn.comm.world import name_ranks
from hpcdgnn.config import job_to_dict, load_job
from hpcdgnn.config.load import blame_override, check_tensorboard, override_of
from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.data.validate import check_dataset
from hpcdgnn.errors import ConfigError, DataError, HpcdgnnError, PlanError, SetUpStopped, StoppedError, cannot_create
from hpcdgnn.metrics import choose_run_dir
from hpcdgnn.metrics.results import MADE_PARENT_DIRS, MADE_RUN_DIRS, writing
from hpcdgnn.nn.models import DGNN
from hpcdgnn.ops import kernels
from hpcdgnn.optim import Adam
from hpcdgnn.regimes import job_regime, regime_of, regimes
from hpcdgnn.run_lock import LOCK_FILE, release_runs, run_alive
from hpcdgnn.strategies import Strategy, StrategyContext, get_strategy
from hpcdgnn.tasks import task_class
from hpcdgnn.train.checkpoint import (
    RUN_ID_FILE,
    check_owner,
    claim_run_dir,
    complete_record,
    ensure_run_id,
    hold_run,
    latest_checkpoint,
    load_partial,
    load_shared,
    load_state,
    read_run_id,
    restore_rng,
    strategy_state,
    within_epoch,
)
from hpcdgnn.train.collective import agree, collective_error, root_then_bcast
from hpcdgnn.train.footprint import check_footprint, check_predicted_peak
from hpcdgnn.train.loop import pretrain

__all__ = ["MIN_CALIBRATION_EPOCH", "Partial", "Run", "build_run", "calibration_epoch", "calibration_epochs",
           "check_model_strategy", "check_resume_job", "check_trained_job", "measured_plan", "replan",
           "truncate_metrics", "warmup_epochs"]


@dataclass(frozen=True)
class Partial:
    """This rank's part of an epoch's batches before a resume within it (a checkpoint within the epoch)."""

    stats: np.ndarray
    """Its metric sums of them."""
    grad_norm: float
    """The gradient norm of the last of them (recorded where they are all the epoch's: a stop in its evaluation)."""
    scores: Any = None
    """The scores the task kept in them (``Task.held_scores``: link prediction's logits for its AUC bins)."""


@dataclass
class Run:
    """A job ready to train: what the loop, the epoch record and the summary read."""

    job: JobConfig
    job_path: str
    manifest: Manifest
    plan: Any
    run_dir: Path
    checkpoint: Path | None
    threads: int
    device: torch.device
    model: DGNN
    task: Any
    params: list[torch.nn.Parameter]
    optimizer: Adam
    strategy: Strategy
    start_epoch: int
    setup_seconds: float
    setup_transfer: int
    checksum: str
    train_count: float
    dataset_sha256: str = ""
    """:func:`dataset_fingerprint` of the data as loaded (rank 0)."""
    initial_checksum: str | None = None
    """The parameters' checksum before epoch 1 (rank 0; a resumed run's from its checkpoint, or None)."""
    pretrain_seconds: float = 0.0
    """The strategy's pre-training phase (TGN's static memory), apart from ``setup_seconds``."""
    calibrated: bool | None = False
    """Whether ``balance: measured`` has had its calibration on this plan (the checkpoint's record; None: a
    checkpoint from before it was recorded)."""
    start_batch: int = 0
    """The batch of epoch ``start_epoch + 1`` a resume within it continues with (0: from the epoch's start)."""
    partial: Partial | None = None
    """This rank's part of that epoch's batches before ``start_batch`` (None: from the epoch's start)."""
    pretrain_bytes_sent: int = 0
    """The bytes this rank sent in the pre-training phase's training exchanges (this attempt's; in no epoch's
    record)."""

    @property
    def resumed(self) -> bool:
        """Whether the run continues from a checkpoint (an epoch's end, or within the first epoch: ``start_epoch``
        0 then)."""
        return self.checkpoint is not None


def threads_per_rank(comm: Communicator, requested: int, environ: Mapping[str, str] = os.environ) -> int:
    """Torch threads per rank (collective over the node): the request (``train.threads``), else
    ``OMP_NUM_THREADS`` (as torch and every OpenMP code take it; its first level), else this rank's share of its
    CPUs, at most ``SLURM_CPUS_PER_TASK`` (what the job asked for a rank where Slurm does not bind its tasks)."""
    if requested > 0:  # the job's, the same on every rank
        return requested
    # every rank joins the node's exchange, whatever its environment says (it may differ between ranks)
    share = share_cpus(cpu_affinity(), node_cpu_sets(comm))
    omp = _whole(environ.get("OMP_NUM_THREADS", "").split(",")[0])
    if omp:
        return omp
    return min(share, _whole(environ.get("SLURM_CPUS_PER_TASK", "")) or share)


def _whole(text: str) -> int:
    """A whole number >= 1 written in ``text``, else 0 (an unset or malformed variable is not used, as OpenMP
    ignores one)."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdecimal() and int(text) >= 1 else 0  # "²" is a digit


def share_cpus(mine: Sequence[int], node: Sequence[Sequence[int]]) -> int:
    """This rank's threads: its CPUs ``mine`` divided among the node's ranks whose CPU sets overlap it."""
    cpus = set(mine)
    sharing = sum(1 for other in node if cpus & set(other))
    return max(1, len(cpus) // max(1, sharing))


def reuse_host_memory() -> bool:
    """Raise glibc's mmap and trim thresholds so freed tensors stay in the heap; whether it took effect.

    By default every allocation above 32 MiB is a fresh mmap, so each epoch would fault in new zeroed pages.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        # mallopt takes a C int: 1 << 40 would truncate to 0, i.e. trim the heap on every large free
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, (1 << 31) - 1))
    except (OSError, AttributeError):
        return False


def _device(job: JobConfig, job_path: str, comm: Communicator) -> torch.device:
    """This rank's device (``train.device``), checked against the backend: nccl needs GPUs."""
    device = select_device(job.train.device, comm)
    if job.comm.backend == "nccl" and device.type != "cuda":
        raise ConfigError(f"{job_path}: comm.backend: nccl needs a GPU per rank, rank {comm.rank} runs on {device}; "
                          "use mpi or gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # the peak summary.json reports is this attempt's: not an earlier run's in this process (a notebook, tests)
        torch.cuda.reset_peak_memory_stats(device)
    return device


#: seconds a rank looks again for rank 0's run directory (network file system metadata may lag)
SHARED_PATH_WAIT_S = 5.0


def _check_shared_paths(comm: Communicator, run_dir: Path | None, ckpt_root: Path | None,
                        debug: Sequence[str] = ()) -> None:
    """Refuse (one line, every rank) a run whose shared directories some rank cannot see.

    Otherwise the first checkpoint, hours in, would fail. ``run_dir`` / ``ckpt_root``: None where only rank 0
    writes; ``debug``: the options that make every rank write into the run directory, named in the line.
    """
    import socket

    def missing() -> Path | None:
        for path, exists in ((run_dir, lambda p: (p / "config.resolved.yaml").is_file()),
                             (ckpt_root, lambda p: p.is_dir())):
            if path is None:
                continue
            try:
                if not exists(path):
                    with suppress(OSError):  # listing the parent drops an NFS client's cached "no such name"
                        os.listdir(path.parent)
                    return path
            except OSError:  # no permission to look (root squash): not usable either
                return path
        return None

    def check() -> None:
        deadline = time.monotonic() + SHARED_PATH_WAIT_S
        while (path := missing()) is not None:
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"{path}: made by rank 0 but not there on rank {comm.rank} (host {socket.gethostname()}): "
                    "the run directory (--output, output.dir) and checkpoint.dir must be on a file system every "
                    "node shares, at the same path (a relative path is taken from each rank's working directory)"
                    + (f"; every rank writes into the run directory for {' and '.join(debug)}"
                       if path == run_dir and ckpt_root is not None and debug else ""))
            time.sleep(0.2)

    agree(comm, check)


def _check_device_agreement(comm: Communicator, device: torch.device, job: JobConfig, job_path: str) -> None:
    """Refuse, on every rank, ranks on different kinds of device or decoder bucket sizes (collective).

    Mixed devices would run different set-up collectives (a hang); ``HPCDGNN_BUCKET_BYTES`` sets the decoder's
    summation order and reaches other nodes only with ``mpirun -x``.
    """
    from hpcdgnn.tasks.link_prediction import bucket_bytes, decoder_bucket_bytes

    decoder = task_class(job.task.name).buckets_pairs
    # through agree: a value one rank cannot parse is an error on every rank
    size = decoder_bucket_bytes(device, agree(comm, bucket_bytes)) if decoder else None
    placed = comm.allgather_obj((device.type, size), tag="setup")
    kinds = [k for k, _ in placed]
    if len(set(kinds)) > 1:
        cpu = [r for r, k in enumerate(kinds) if k != "cuda"]
        raise collective_error(ConfigError(
            f"{job_path}: train.device: {job.train.device} put {name_ranks(cpu)} of {comm.size} "
            "on the CPU (no GPU visible there) and the others on GPUs: every rank must train on the same kind of "
            "device; give every rank a GPU (nodes without one in the allocation?) or set train.device: cpu"))
    sizes = [b for _, b in placed]
    other = [r for r, b in enumerate(sizes) if b != sizes[0]]
    if other:
        raise collective_error(ConfigError(
            f"environment HPCDGNN_BUCKET_BYTES: rank 0 orders the decoder's pairs in buckets of {sizes[0]} bytes, "
            f"{name_ranks(other, 3)} of {comm.size} in {sizes[other[0]]} (0: none): every rank must order them "
            "alike (set it for every rank, e.g. mpirun -x HPCDGNN_BUCKET_BYTES, or for none)"))


_RESUMABLE = ("train.epochs", "train.threads", "train.device", "data.path", "data.validate", "comm.", "output.",
              "checkpoint.", "debug.")
"""Keys (prefixes) a resumed run may change: none changes what an epoch computes."""


def dataset_fingerprint(path: str | Path) -> str:
    """The sha256 of ``manifest.json`` without ``source`` (it records every shard's sha256 and size)."""
    d = json.loads((Path(path) / "manifest.json").read_bytes())
    if isinstance(d, dict):
        d.pop("source", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def check_resume_dataset(saved: JobConfig, job: JobConfig, shared: dict[str, Any], ckpt: Path, resume: str,
                         fingerprint: str) -> None:
    """Refuse (one line) to resume on other data than the run trained on; a moved dataset may be named anew."""
    theirs = shared.get("dataset_sha256")
    if theirs is None:
        if Path(job.data.path).resolve() != Path(saved.data.path).resolve():
            raise ConfigError(f"--resume {resume}: data.path: {ckpt.name} does not record its dataset, so a new "
                              f"data.path ({job.data.path}) cannot be checked; resume with {saved.data.path}")
        return
    if fingerprint != theirs:
        raise ConfigError(f"--resume {resume}: data.path: {job.data.path} is not the dataset the run trained on "
                          f"(its manifest.json differs from the one {ckpt.name} recorded); resume on that dataset, "
                          "or start a new run")


def check_checkpoint_dir(job: JobConfig, where: str | None) -> Path | None:
    """A new run's ``checkpoint.dir`` (None: the run directory's), refused if non-empty or not makeable."""
    if not job.checkpoint.dir:
        return None
    root = Path(job.checkpoint.dir)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{where}: checkpoint.dir: {root} is a file, not a directory; name a new or empty "
                          "directory")
    if root.exists() and any(e.name != RUN_ID_FILE for e in root.iterdir()):
        raise ConfigError(f"{where}: checkpoint.dir: {root} exists and is not empty; a run writes its checkpoints "
                          "into a new or empty directory (another run's there would be overwritten)")
    alive = _claim_alive(root) if (root / RUN_ID_FILE).exists() else False
    if alive is not False:
        raise ConfigError(f"{where}: checkpoint.dir: {root} is claimed by "
                          + (f"the run in {_claim_owner(root)}, which trains now" if alive
                             else f"a run that may still train ({root / RUN_ID_FILE}): if none does, remove that "
                             "file"))
    why = cannot_create(root)
    if why:
        raise ConfigError(f"{where}: checkpoint.dir: cannot create {root}: {why}")
    return root


def _claim_owner(root: Path) -> Path | None:
    """The run directory named by ``checkpoint.dir``'s claim (:func:`make_checkpoint_dir`), or None (no claim, or
    one that names none)."""
    try:
        lines = (root / RUN_ID_FILE).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return Path(lines[1]) if len(lines) > 1 and lines[1].strip() else None


def _claim_alive(root: Path) -> bool | None:
    """Whether the run that claimed ``root`` (its ``run_id`` file) trains now; None where it cannot be told (a
    claim naming no run directory, a file system without locks)."""
    owner = _claim_owner(root)
    return None if owner is None else run_alive(owner)


def make_checkpoint_dir(root: Path | None, where: str | None, run_dir: Path) -> None:
    """Make the ``checkpoint.dir`` :func:`check_checkpoint_dir` accepted (after the run directory) and claim it for
    the run in ``run_dir``: its ``run_id`` file there (``O_EXCL``) names the run's id and directory, so that of
    two new runs given one empty directory at the same moment (both passed the check) one is refused, not left
    to overwrite and prune the other's checkpoints. The claim of a run that ended before its first checkpoint
    (its directory's lock free, :func:`check_checkpoint_dir`) is set aside first — by a rename, which one of
    two runs doing so at once wins."""
    if root is None:
        return
    claim = root / RUN_ID_FILE
    try:
        root.mkdir(parents=True, exist_ok=True)
        if claim.exists() and _claim_alive(root) is False:  # an ended run's: gone by a rename one racer makes
            with suppress(FileNotFoundError):
                os.rename(claim, root / f".{RUN_ID_FILE}.ended-{os.getpid()}")
                (root / f".{RUN_ID_FILE}.ended-{os.getpid()}").unlink()
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise ConfigError(f"{where}: checkpoint.dir: {root}: another run started with it at the same moment; a run "
                          "writes its checkpoints into a directory of its own") from None
    except OSError as e:
        raise ConfigError(f"{where}: checkpoint.dir: cannot create {root}: {e.strerror or e}") from None
    with writing(claim), os.fdopen(fd, "w") as f:
        f.write(f"{read_run_id(run_dir)}\n{Path(run_dir).resolve()}\n")


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _changed_by(key: str, overrides: list[str], job_path: str | None) -> str:
    """Who asked for the change of ``key``: the ``--set`` naming it (or its section), else the job file."""
    name = override_of(key, overrides)
    if name:
        return f"--set {name}"
    return f"{job_path}: {key}" if job_path else key


def check_resume_job(saved: JobConfig, job: JobConfig, resume: str, overrides: list[str],
                     job_path: str | None) -> None:
    """Refuse (one line: key, old and new value) any change outside :data:`_RESUMABLE`."""
    _refuse_changes(_flatten(job_to_dict(saved)), _flatten(job_to_dict(job)), resume, overrides, job_path,
                    ignore=_RESUMABLE)


def finished_differs(run_dir: str | Path, job_path: str, overrides: list[str]) -> str | None:
    """For a job script given the directory of a completed run: the first setting of ``job_path`` with
    ``overrides`` the run did not train with, as one line, or None (the same job: nothing to do; or a run whose
    saved job cannot be read, which the script's own message covers).

    A job script reports a completed run as its own only for the same settings (a sweep's reused name must not
    stand for another job). Compared as a resume compares (:data:`_RESUMABLE` keys but ``train.epochs`` may
    differ; ``strategy: auto`` by its request), and ``data.path`` by the dataset (:func:`dataset_fingerprint`),
    not its spelling.

    Args:
        run_dir: the completed run's directory (its ``config.resolved.yaml``).
        job_path: the job file the script was given.
        overrides: its ``--set`` items (the script's arguments, ``HPCDGNN_ARGS`` and ``DATA``)."""
    run_dir = Path(run_dir)
    try:
        saved = load_job(run_dir / "config.resolved.yaml", check_paths=False, resolved=True)
    except (HpcdgnnError, OSError):
        return None
    try:
        job = load_job(job_path, overrides, check_paths=False)
        if get_strategy(job.strategy.name).picks_another:
            job = _resumed_pick(job, saved, run_dir, str(run_dir), overrides, job_path)
        before, after = _flatten(job_to_dict(saved)), _flatten(job_to_dict(job))
        if before.get("data.path") != after.get("data.path"):
            try:
                same = dataset_fingerprint(str(before["data.path"])) == dataset_fingerprint(str(after["data.path"]))
            except (OSError, ValueError, KeyError):
                same = False
            if same:
                before.pop("data.path"), after.pop("data.path")
        ignore = tuple(k for k in _RESUMABLE if k not in ("train.epochs", "data.path"))
        _refuse_changes(before, after, str(run_dir), overrides, job_path, ignore=ignore, refusal=_other_run)
    except HpcdgnnError as e:
        return str(e)
    return None


def _other_run(who: str, new: object, old: object, run_dir: str) -> ConfigError:
    return ConfigError(f"{who}: is {new!r} but the completed run in {run_dir} used {old!r}")


#: keys (prefixes) that shape a checkpoint's parameters: ``embed`` and ``predict`` keep the run's
_TRAINED = ("model.", "task.name", "task.decoder_hidden", "train.lr")


def check_trained_job(saved: JobConfig, job: JobConfig, run_dir: str, overrides: list[str], command: str) -> None:
    """Refuse (one line: key, old and new value) a ``--set`` of ``embed``/``predict`` that changes the trained model
    or task head (:data:`_TRAINED`): ``model.hidden`` ended in a checkpoint that does not fit."""
    def refusal(who: str, new: object, old: object, resume: str) -> ConfigError:
        return ConfigError(f"{who}: is {new!r} but the run in {resume} used {old!r}; {command} uses the run's trained "
                           "model and task head: model.*, task.name, task.decoder_hidden and train.lr (the optimizer "
                           "state it restores) stay the run's")

    before, after = _flatten(job_to_dict(saved)), _flatten(job_to_dict(job))
    _refuse_changes({k: v for k, v in before.items() if k.startswith(_TRAINED)},
                    {k: v for k, v in after.items() if k.startswith(_TRAINED)}, run_dir, overrides, None,
                    refusal=refusal)


def _refuse_changes(before: dict, after: dict, resume: str, overrides: list[str], job_path: str | None,
                    ignore: tuple[str, ...] = (), refusal=None) -> None:
    """Refuse (one line) the first key whose flattened value differs between ``before`` and ``after`` (keys
    starting with ``ignore`` apart): a key a --set names first (the change the user asked for, not one it
    brought along), then a section's name (another model brings other keys: name the model, not a key it lacks)."""
    changed = [k for k in sorted(set(before) | set(after))
               if before.get(k) != after.get(k) and not (ignore and k.startswith(ignore))]
    if changed:
        key = next((k for k in changed if override_of(k, overrides)),
                   next((k for k in changed if k.endswith(".name")), changed[0]))
        raise (refusal or _not_resumable)(_changed_by(key, overrides, job_path), after.get(key), before.get(key),
                                          resume)


def _not_resumable(who: str, new: object, old: object, resume: str) -> ConfigError:
    return ConfigError(f"{who}: is {new!r} but the run in {resume} used {old!r}; a resumed run may change only "
                       "train.epochs, train.threads, train.device, data.validate, comm, output, checkpoint and debug, "
                       "and data.path to the same dataset moved (start a new run for anything else)")


def _blamed(e: HpcdgnnError, where: str | None, overrides: list[str], prefix: bool = False) -> HpcdgnnError:
    """``e``'s ``FILE: key: problem`` as ``--set key: problem`` when a ``--set`` gave the key; ``prefix``: its
    message is ``key: problem``, without the file."""
    if not where:
        return e
    return type(e)(blame_override(f"{where}: {e}" if prefix else str(e), where, overrides))


#: the keys that choose a section's options class
_NAMES = ("model.name", "task.name", "strategy.name")


def _option(name: str, value: object) -> str:
    """``--NAME VALUE`` in the words of whoever started the run (:data:`~hpcdgnn.train.trainer.RESTART_WORDS`), for
    :func:`hold_run`: its waiting and no-lock warnings reach a Python caller as they are, where an error is
    reworded on its way out of :func:`hpcdgnn.train`."""
    from hpcdgnn.train.trainer import RESTART_WORDS  # not at the top: trainer imports this module

    return RESTART_WORDS.get()[2].format(name, value)


def _resume_job(resume: str, job_path: str | None, overrides: list[str]) -> tuple[JobConfig, JobConfig, Path, Path]:
    """Job, saved job (before ``--set``), run directory and newest checkpoint of ``run --resume RUNDIR``."""
    run_dir = Path(resume)
    saved_path = run_dir / "config.resolved.yaml"
    if not saved_path.is_file():
        raise ConfigError(f"--resume {resume}: no {saved_path.name} there; not a run directory")
    saved = load_job(saved_path, check_paths=False, resolved=True)  # the dataset may have moved
    hold_run(run_dir, _option("resume", resume))  # before anything here changes
    try:
        job = load_job(job_path or saved_path, overrides, check_paths=False, resolved=job_path is None)
    except ConfigError:
        # another model, task or strategy name, whose options the saved section's other keys do not fit
        # (strategy.name: vertex over a snapshot run's): the change itself is what a resume refuses; any other
        # error (a misspelt key, a wrong type) is the loader's own
        old = _flatten(job_to_dict(saved))
        for key, _, value in (o.partition("=") for o in overrides):
            if job_path is None and key in _NAMES and yaml.safe_load(value) != old.get(key):
                raise _not_resumable(f"--set {key}", value, old.get(key), resume) from None
        raise
    if get_strategy(job.strategy.name).picks_another:
        job = _resumed_pick(job, saved, run_dir, resume, overrides, job_path)
    check_resume_job(saved, job, resume, overrides, job_path)
    # before the resume rewrites config.resolved.yaml with it; the run's own event files it continues
    check_tensorboard(job, f"--resume {resume}", own=saved.output.tensorboard)
    if not (Path(job.data.path) / "manifest.json").is_file():
        raise ConfigError(f"--resume {resume}: data.path: {job.data.path}: no dataset there (if it moved, "
                          "resume with --set data.path=NEW; the run checks it is the same dataset)")
    root = Path(job.checkpoint.dir) if job.checkpoint.dir else run_dir / "checkpoints"
    ckpt = latest_checkpoint(root)
    if ckpt is None:
        raise ConfigError(f"--resume {resume}: no complete checkpoint in {root} (the run stopped before its first "
                          "was written: nothing to resume; train the job again into another run directory, or "
                          f"after removing {resume})")
    try:
        meta = json.loads((ckpt / "COMPLETE").read_text())
        done = int(meta["epoch"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"--resume {resume}: {ckpt / 'COMPLETE'}: unreadable ({e}); remove that checkpoint "
                          "to resume from the one before") from None
    check_owner(meta, ckpt, run_dir, f"--resume {resume}")
    # a job stopped after its last checkpoint, before its summary.json was written: the resume trains no epoch
    # and writes it (the job scripts resume a run with a complete checkpoint until its summary says completed)
    unsummarised = done == job.train.epochs and not within_epoch(ckpt) and not _summarised(run_dir, done)
    if done >= job.train.epochs and not unsummarised:
        raise ConfigError(
            f"--resume {resume}: the run has already trained {done} epochs (checkpoint {ckpt.name}) and "
            f"train.epochs is {job.train.epochs}; train longer with --set train.epochs=N (N > {done})"
        )
    return job, saved, run_dir, ckpt


def _summarised(run_dir: Path, epoch: int) -> bool:
    """Whether ``summary.json`` in ``run_dir`` reports the run ended (completed, diverged) after epoch ``epoch``."""
    with suppress(OSError, ValueError, AttributeError, TypeError):
        summary = json.loads((run_dir / "summary.json").read_text())
        return summary.get("status") != "preempted" and (summary.get("final") or {}).get("epoch") == epoch
    return False


def _planner_record(run_dir: Path) -> dict | None:
    """What ``strategy: auto`` recorded under ``plan.json``'s ``planner`` key, or None (no auto run); runs
    resumed or re-cut before the record was kept across plan rewrites hold it in a ``plan.before-epoch-N.json``."""
    older = sorted(run_dir.glob("plan.before-epoch-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in [run_dir / "plan.json", *older]:
        with suppress(OSError, ValueError, AttributeError):
            record = json.loads(path.read_text()).get("planner")
            if isinstance(record, dict):
                return record
    return None


def _resumed_pick(job: JobConfig, saved: JobConfig, run_dir: Path, resume: str, overrides: list[str],
                  job_path: str | None) -> JobConfig:
    """``job`` (``strategy: auto``) resuming the run in ``run_dir``: with the strategy the run picked, when that
    run was started by the same ``auto`` request (a requeued job script resumes with its own job file; a new pick
    would change the plan). Raises ConfigError (one line) for a run not started by ``auto`` or another request."""
    record = _planner_record(run_dir)
    if record is None:
        raise _not_resumable(_changed_by("strategy.name", overrides, job_path), job.strategy.name,
                             saved.strategy.name, resume)
    asked = json.loads(json.dumps(job_to_dict(job)["strategy"]))  # as plan.json holds it (lists, not tuples)
    if "request" in record:  # runs made before the request was recorded: any auto request
        _refuse_changes(_flatten(record["request"], "strategy."), _flatten(asked, "strategy."), resume, overrides,
                        job_path)
    return replace(job, strategy=saved.strategy)


#: the files a run writes whole into its directory (:func:`~hpcdgnn.atomic.atomic_write`), whose temporaries a run
#: killed meanwhile leaves; a resume removes those. Its checkpoints' temporaries are inside ``epoch-*.tmp/``, which
#: the next checkpoint removes whole
_RUN_FILES = ("config.resolved.yaml", "plan.json", "metrics.jsonl", "summary.json")


def _save_run_files(run_dir: Path, job: JobConfig, plan, epoch: int, planner: dict | None = None) -> None:
    """Rank 0: write ``config.resolved.yaml`` and ``plan.json`` atomically (the old plan kept when it changed);
    ``planner``: what ``strategy: auto`` predicted, under ``plan.json``'s ``planner`` key (kept when a new plan
    replaces the old: a resume with the job file compares its request with it)."""
    ensure_run_id(run_dir)
    config = run_dir / "config.resolved.yaml"
    with writing(config), atomic_write(config) as f:
        f.write(yaml.safe_dump(job_to_dict(job), sort_keys=False))
    path = run_dir / "plan.json"
    planner = planner if planner is not None else _planner_record(run_dir)
    text = json.dumps({**plan.to_json(), **({"planner": planner} if planner is not None else {})}, indent=1) + "\n"
    with writing(path), atomic_write(path) as f:
        f.write(text)
        if epoch and path.is_file() and path.read_bytes() != text.encode():
            f.flush()
            os.fsync(f.fileno())  # a full disk fails here, before the old plan is kept under a name of its own
            keep_as(path, run_dir / f"plan.before-epoch-{epoch}.json")


def _discard_new_run(run_dir: Path, job: JobConfig) -> None:
    """Rank 0: undo :func:`_save_run_files` for a new run refused after it; the run directory goes too when this
    process made it (``--output`` naming an empty directory the user made keeps it), and its claim on a
    ``checkpoint.dir`` (:func:`make_checkpoint_dir`)."""
    claim = Path(job.checkpoint.dir) / RUN_ID_FILE if job.checkpoint.dir else None
    if claim is not None and _claim_owner(claim.parent) == Path(run_dir).resolve():
        with suppress(OSError):
            claim.unlink()
    release_runs(run_dir)  # its lock's file goes too (an open file would keep the directory on NFS)
    for name in ("config.resolved.yaml", "plan.json", RUN_ID_FILE, LOCK_FILE):
        with suppress(OSError):  # a cleanup: the run's own error is the one to report
            (run_dir / name).unlink(missing_ok=True)
    made = run_dir.resolve() in MADE_RUN_DIRS
    # the parents its creation made (--output a/new/run) go too when it leaves them empty: nothing of the run stays
    parents = MADE_PARENT_DIRS.get(run_dir.resolve(), []) if made else []
    for d in ([] if job.checkpoint.dir else [run_dir / "checkpoints"]) + ([run_dir] if made else []) + parents:
        try:
            d.rmdir()
        except OSError:  # not there, or not empty (another run's, made since): then it and its parents stay
            if d != run_dir / "checkpoints":
                break


def truncate_metrics(path: Path, last_epoch: int) -> None:
    """Keep the records of epochs up to the checkpoint (atomically), dropping a half-written last line."""
    if not path.is_file():
        return

    def kept(line: str) -> bool:
        try:
            return json.loads(line)["epoch"] <= last_epoch
        except (json.JSONDecodeError, KeyError, TypeError):
            return False

    keep = [line for line in path.read_text().splitlines() if line.strip() and kept(line)]
    with writing(path), atomic_write(path) as f:  # a resume on a full disk: one line naming the file
        f.write("".join(line + "\n" for line in keep))


def _checksum(params: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for p in params:
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _same_job_everywhere(comm: Communicator, job_path: str | None, overrides: Sequence[str]) -> None:
    """Refuse (every rank, one line) a job given differently to some rank: rank 0 reads the job for all, so a job
    file that differs between nodes, or a Python caller handing each rank its own job or overrides, would train
    rank 0's job without a word. A rank that cannot read the file has no say (only rank 0 needs it), and the run
    directory is rank 0's choice, so neither is compared."""
    if comm.size == 1:
        return

    def digest(value: object) -> str:
        return hashlib.sha256(value if isinstance(value, bytes) else repr(value).encode()).hexdigest()

    try:
        text = digest(Path(job_path).read_bytes()) if job_path else None
    except OSError:
        text = None
    everyone = comm.allgather_obj((text, digest(list(overrides))), tag="setup")
    for rank, (theirs, their_overrides) in enumerate(everyone):
        differ = ["job file content"] * (None not in (theirs, everyone[0][0]) and theirs != everyone[0][0])
        differ += ["overrides"] * (their_overrides != everyone[0][1])
        if differ:
            raise collective_error(ConfigError(
                f"{job_path}: rank {rank} was given another job than rank 0 (not the same {' nor '.join(differ)}): "
                "every rank must run the same job (the same file and overrides on every node)"))


def _prepare(job_path: str | None, overrides: list[str], output: str | None, resume: str | None, comm: Communicator):
    """Rank 0: job, manifest, dataset check, plan, run directory, broadcast (or the error); plus rank 0's
    checkpoint shared state (not broadcast)."""
    _same_job_everywhere(comm, job_path, overrides)
    # the smallest over the ranks: rank 0 checks the job for all, and nodes may differ
    host_share = min(comm.allgather_obj(memory_share(comm, torch.device("cpu")), tag="setup"))
    kept: dict[str, Any] = {}  # rank 0's read of state.pt, so its restore does not read it again

    def on_root() -> tuple[JobConfig, Manifest, object, str, str | None, str]:
        if resume:
            job, saved_job, run_dir, ckpt = _resume_job(resume, job_path, overrides)
        else:
            job, saved_job, run_dir, ckpt = load_job(job_path, overrides), None, None, None
        try:
            job, manifest, kept["planner"] = check_job(job, job_path or resume, comm.size, host_share)
        except (ConfigError, DataError) as e:
            made_on = _checkpoint_ranks(ckpt)
            if made_on not in (None, comm.size) and _passes(lambda: check_job(job, resume, made_on, host_share)):
                # a resume may not change the strategy's options that depend on P: say to come back on the run's
                # own rank count, not to change them (which the resume would then refuse)
                raise ConfigError(f"{resume}: the run was made on {made_on} ranks and its job cannot run on "
                                  f"{comm.size} ({e}); resume it on {made_on} ranks") from None
            raise _blamed(e, job_path or resume, overrides) from None
        fingerprint = dataset_fingerprint(job.data.path)
        plan = None
        if ckpt is not None:
            shared = kept["shared"] = load_shared(ckpt)
            check_resume_dataset(saved_job, job, shared, ckpt, resume, fingerprint)
            # on the same P keep the checkpoint's plan: another cut would change the rounding
            saved = shared.get("plan")
            if saved is not None and saved.num_ranks == comm.size:
                plan = saved
        check_dataset(job.data.path, checksums=job.data.validate == "checksum")
        if plan is None:
            try:
                plan = get_strategy(job.strategy.name).make_plan(manifest, comm.size, job)
            except PlanError as e:
                raise _blamed(e, job_path or resume, overrides, prefix=True) from None
            except ConfigError as e:
                made_on = getattr(kept.get("shared", {}).get("plan"), "num_ranks", None)
                if made_on is None or made_on == comm.size:
                    raise _blamed(e, job_path or resume, overrides, prefix=True) from None
                # a resume keeps its strategy's options: say to come back on the run's own rank count
                raise ConfigError(f"{resume}: the run was made on {made_on} ranks and strategy "
                                  f"{job.strategy.name} cannot plan it for {comm.size} ({e}); resume it on {made_on} "
                                  "ranks") from None
        if run_dir is None:  # created only once the inputs are known good: no empty run directories
            try:
                ckpt_dir = check_checkpoint_dir(job, job_path)
            except ConfigError as e:
                raise ConfigError(blame_override(str(e), job_path, overrides)) from None
            try:
                run_dir = choose_run_dir(output, job.output.dir, Path(job_path).stem)
            except ConfigError as e:  # output.dir's fault: the file's, or --set's
                why = str(e)
                raise ConfigError(blame_override(f"{job_path}: {why}", job_path, overrides)
                                  if why.startswith("output.dir:") else why) from None
            try:
                claimed = claim_run_dir(run_dir)
            except DataError:  # cannot write there: a directory this run made goes again
                _discard_new_run(run_dir, job)
                raise
            if not claimed:  # another run took it since choose_run_dir
                raise ConfigError(f"--output {output}: another run started in this directory at the same moment; a "
                                  "run never overwrites another (give each run its own directory)")
            try:  # a place the check could not foresee (/proc, a race): the claimed run directory goes again
                hold_run(run_dir, _option("output", run_dir))
                # the job's files before the checkpoint.dir's claim: a job script finds the claim through them
                _save_run_files(run_dir, job, plan, 0, kept.get("planner"))
                make_checkpoint_dir(ckpt_dir, job_path, run_dir)
            except (ConfigError, DataError) as e:
                _discard_new_run(run_dir, job)
                if isinstance(e, DataError):
                    raise
                raise ConfigError(blame_override(str(e), job_path, overrides)) from None
            except StoppedError:  # a stop while it waited for its lock: a pre-emption in the set-up, nothing kept
                _discard_new_run(run_dir, job)
                raise SetUpStopped(f"pre-empted ({preemption.signal_name() or 'a signal'}) during the set-up, before "
                                   f"any epoch, while it waited for another job to let go of {run_dir / LOCK_FILE}; "
                                   "nothing of the run is left: run the job again") from None
        return job, manifest, plan, str(run_dir), None if ckpt is None else str(ckpt), fingerprint

    return (*root_then_bcast(comm, on_root), kept.get("shared"))


def check_job(job: JobConfig, where: str | None, num_ranks: int, host_share: float,
              device_memory: float | None = None) -> tuple[JobConfig, Manifest, dict | None]:
    """What a new or resumed run checks of its job before the plan (rank 0; ``python -m hpcdgnn check`` too):
    ``strategy: auto`` resolved, model × strategy × P, the dataset's kind, the host memory's lower bound.

    Args:
        job: the loaded job.
        where: the job file (or resumed run), for messages.
        num_ranks: P.
        host_share: bytes of host memory one rank may use.
        device_memory: a GPU's bytes (default: this machine's first GPU, when the job runs on one).

    Returns:
        The job (the planner's pick for ``auto``), its dataset's manifest, the planner's record (or None).

    Raises:
        ConfigError, DataError: one line naming the key or file.
    """
    cuda = job.train.device == "cuda" or job.train.device == "auto" and torch.cuda.is_available()
    if cuda and device_memory is None:
        if not torch.cuda.is_available():
            raise ConfigError(f"{where}: train.device: cuda, and this machine has no CUDA device ({cuda_seen()}); "
                              "use auto or cpu")
        device_memory = torch.cuda.get_device_properties(0).total_memory
    if job.comm.backend == "nccl" and not cuda:  # check says it too, not only a run's device selection
        raise ConfigError(f"{where}: comm.backend: nccl needs a GPU per rank, and this job runs on the CPU "
                          f"(train.device: {job.train.device}" + ("" if job.train.device == "cpu" else
                                                                  f"; {cuda_seen()}") + "); use mpi or gloo")
    budget = device_memory if cuda else host_share
    job, planner = get_strategy(job.strategy.name).resolve(job, where, num_ranks, budget, "cuda" if cuda else "cpu")
    check_model_strategy(job, where, num_ranks)
    if job.debug.fail_rank >= num_ranks:  # a fault meant to be injected must not silently never come
        raise ConfigError(f"{where}: debug.fail_rank: {job.debug.fail_rank} but the job has "
                          f"{num_ranks} rank{'s' if num_ranks != 1 else ''} (0 .. {num_ranks - 1})")
    manifest = load_dataset_manifest(job, where)
    try:  # what this dataset cannot serve, before any plan
        task_class(job.task.name).check(job.task, manifest)
    except (ConfigError, DataError) as e:
        raise type(e)(f"{where}: {e}" if where else str(e)) from None
    get_strategy(job.strategy.name).check_data(job, manifest, where)
    # before the plan, whose cost model walks every layer (a GPU job's device terms are checked on its device)
    check_footprint(job, manifest, num_ranks, host_share, where, "host" if cuda else "all")
    if not cuda:  # the planner's peak is a host's (a GPU job's device terms are checked on its device)
        check_predicted_peak(job, manifest, num_ranks, host_share, where)
    return job, manifest, planner


def load_dataset_manifest(job: JobConfig, where: str | None):
    """The dataset's manifest as the job's regime reads it; a one-line refusal for another regime's data."""
    from hpcdgnn.data.events import dataset_kind

    kind, regime = dataset_kind(job.data.path), regime_of("model", job.model.name)
    if kind != regime.data_kind:
        found = next(r.data_title for r in regimes() if r.data_kind == kind)
        raise ConfigError(f"{where}: data.path: {job.data.path} is {found}, but model.name: {job.model.name} reads "
                          f"{regime.data_title} ({regime.data_made_by})")
    return regime.load_manifest(job.data.path)


def check_model_strategy(job: JobConfig, where: str | None, num_ranks: int) -> None:
    """Refuse (one line) a model, task and strategy of different regimes, or what the regime refuses at P."""
    job_regime(job, where).check(job, where, num_ranks)


def _restore(ckpt: Path, comm: Communicator, model, task, opt, shared: dict | None) -> tuple[dict, dict]:
    """Load checkpoint ``ckpt`` into the model, task head and optimizer; a mismatch is one line, not 77."""
    state, mine = load_state(ckpt, comm.rank, comm.size, shared)
    try:
        model.load_state_dict(state["model"])
        task.load_state_dict(state["task"])
        opt.load_state_dict(state["optimizer"])
    except (RuntimeError, KeyError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{ckpt}: checkpoint does not fit this job's model ({first})") from None
    restore_rng(mine["rng"])
    return state, mine


def _checkpoint_ranks(ckpt: Path | None) -> int | None:
    """The rank count checkpoint ``ckpt`` was written on (its ``COMPLETE``), or None."""
    made_on = None if ckpt is None else complete_record(Path(ckpt)).get("num_ranks")
    return made_on if isinstance(made_on, int) else None


def _passes(check: Callable[[], object]) -> bool:
    """Whether ``check`` returns without a user error."""
    try:
        check()
    except (ConfigError, DataError):
        return False
    return True


def _resumed_within(state: dict, mine: dict, comm: Communicator, ckpt: Path) -> tuple[int, Partial | None]:
    """(the batch, this rank's :class:`Partial` of the batches before it) of a checkpoint within an epoch, else
    (0, None): on the checkpoint's rank count each rank's own; on another, rank r takes the parts of the old ranks
    q ≡ r (mod P) — each part once, its sums with the scores they count, so the epoch's sums agree to rounding and
    link prediction's AUC bins span the whole epoch's logits, as in an uninterrupted run."""
    batch = int(state.get("batch", 0))
    if not batch:
        return 0, None
    norm = float(state.get("grad_norm", 0.0))
    old_p = mine.get("num_ranks")
    if old_p == comm.size:
        return batch, Partial(mine["partial"]["stats"], norm, mine["partial"]["scores"])
    parts = [mine["partial"] if q == comm.rank % old_p else load_partial(ckpt, q)
             for q in range(comm.rank, old_p, comm.size)]
    stats = sum((np.asarray(p["stats"]) for p in parts), np.zeros_like(np.asarray(state["partial_sum"])))
    scores = [p.get("scores") for p in parts]
    # a task that keeps scores keeps a list of them (Task.held_scores); one that keeps none, None
    merged = [s for part in scores for s in part] if scores and all(isinstance(s, list) for s in scores) else None
    return batch, Partial(stats, norm, merged)


def _build_model(job: JobConfig, job_path: str, manifest: Manifest, comm: Communicator, device, dtype):
    """Model, task head and Adam on every rank, seeded, with rank 0's parameters broadcast."""
    regime = regime_of("model", job.model.name)
    torch.manual_seed(job.train.seed)
    model = regime.build_model(job, manifest).to(device, dtype)
    task = agree(comm, lambda: regime.task_of(job, manifest, model)).to(device, dtype)
    params = [p for mod in (model, task) for p in mod.parameters()]
    for p in params:
        comm.bcast_(p.data, root=0)
    return model, task, params, Adam(params, lr=job.train.lr)


def _setup_strategy(job: JobConfig, manifest, comm: Communicator, dtype, device, plan, model, task,
                    start_epoch: int = 0, start_batch: int = 0) -> tuple[Strategy, tuple[float, int]]:
    """The strategy of ``plan`` with this rank's data read, then its pre-training phase, if any, and that
    phase's seconds and the bytes this rank sent in it ((0, 0) without one)."""
    strategy = get_strategy(job.strategy.name)(StrategyContext(job, manifest, comm, dtype, job.data.path, device,
                                                               start_epoch, start_batch))

    # each stage agreed on its own: a user error one rank meets in the strategy's set-up (its closure over
    # strategy.max_cache_mb, say) reaches every rank before the task's set-up collectives, where the others
    # would otherwise wait for it (one agreement around both hung the job until the stall watchdog)
    opened: list[ShardReader] = []

    def open_reader() -> ShardReader | None:
        if not isinstance(manifest, Manifest):
            return None
        opened.append(ShardReader(job.data.path, manifest))
        return opened[-1]

    try:  # closed also where another rank failed to open its reader
        reader = agree(comm, open_reader)
        scored = agree(comm, lambda: strategy.setup(plan, model, task, reader))
        agree(comm, lambda: task.setup(reader, scored, comm))
    finally:
        for r in opened:
            r.close()
    return strategy, agree(comm, lambda: pretrain(strategy, comm, job.train.lr))


#: ``balance: measured`` re-cuts after this epoch at the earliest, so one slow early epoch cannot decide the cut
MIN_CALIBRATION_EPOCH = 4


def calibration_epochs(job: JobConfig, start_epoch: int = 0, calibrated: bool | None = False) -> range:
    """The epochs whose per-rank compute ``balance: measured`` re-cuts the plan from (empty when none).

    The process's first epoch is left out (compilation, first-touch memory). A resumed process calibrates when
    its plan has not been (``calibrated``; None, a checkpoint that does not say: when it starts before the
    fresh run's window ends), over its own epochs: a run that reached ``train.epochs`` before its calibration
    and is then extended still re-cuts.
    """
    if getattr(job.strategy, "balance", None) != "measured" or calibrated:
        return range(0)
    fresh = max(MIN_CALIBRATION_EPOCH, job.train.warmup_epochs)
    last = max(fresh, start_epoch + MIN_CALIBRATION_EPOCH)
    if (calibrated is None and start_epoch >= fresh) or job.train.epochs <= last:
        return range(0)
    return range(start_epoch + 2, last + 1)


def calibration_epoch(job: JobConfig, start_epoch: int = 0, calibrated: bool | None = False) -> int:
    """The epoch after which ``strategy.balance: measured`` re-cuts the plan (:func:`calibration_epochs`), or 0."""
    window = calibration_epochs(job, start_epoch, calibrated)
    return window[-1] if window else 0


def warmup_epochs(job: JobConfig, start_epoch: int = 0, calibrated: bool | None = False) -> int:
    """The epochs flagged ``warmup``: ``train.warmup_epochs``, every epoch up to a balance re-cut, and the first on
    the new plan (its set-up's one-time exchanges, e.g. the constant Ã·X moved to new owners, and its cold caches
    fall in that epoch, as a run's first epoch carries the first plan's)."""
    cut = calibration_epoch(job, start_epoch, calibrated)
    return max(job.train.warmup_epochs, cut + 1 if cut else 0)


def measured_plan(run: Run, compute: list[float], comm: Communicator, log):
    """The plan re-cut from per-rank ``compute`` seconds on every rank, or None when it stays (collective)."""
    forced = run.job.debug.measured_compute
    if forced:
        compute = list(forced)
    new = root_then_bcast(comm, lambda: run.strategy.rebalanced_plan(run.plan, compute))
    if new is None:
        log.info(f"balance: measured — compute per rank {_seconds(compute)} s; the plan stays")
    else:
        log.info(f"balance: measured — compute per rank {_seconds(compute)} s; evaluation work "
                 f"x{new.eval_scale:.3g} of the static estimate; snapshot blocks {run.plan.snapshot_bounds} -> "
                 f"{new.snapshot_bounds}")
    return new


def replan(run: Run, plan, epoch: int, comm: Communicator, log) -> None:
    """Rebuild the strategy on ``plan`` with the same model, optimizer and task parameters (collective).

    The caller drops its references to the old strategy and task first, so their arrays are freed first.
    """
    t0 = time.perf_counter()
    run.strategy.close()
    task = _fresh_task(run)
    run.strategy = run.task = None  # type: ignore[assignment]
    gc.collect()  # strategies hold reference cycles: free the old arrays now
    run.strategy, (pretrained, pretrain_sent) = _setup_strategy(run.job, run.manifest, comm, _dtype(run.job),
                                                                run.device, plan, run.model, task, epoch)
    run.plan, run.task = plan, task
    # no epoch record counts the second setup, so summary.json's setup figures do
    run.setup_seconds += time.perf_counter() - t0 - pretrained
    run.pretrain_seconds += pretrained
    run.pretrain_bytes_sent += pretrain_sent
    run.setup_transfer += run.strategy.usage().transfer_bytes
    if comm.rank == 0:
        _save_run_files(run.run_dir, run.job, plan, epoch)
    log.info(f"balance: measured — the new plan from epoch {epoch + 1} (set up in {time.perf_counter() - t0:.2f} s; "
             f"plan.before-epoch-{epoch}.json kept)")


def _dtype(job: JobConfig) -> torch.dtype:
    return torch.float64 if job.train.dtype == "float64" else torch.float32


def _seconds(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def _fresh_task(run: Run):
    """A task like ``run.task`` without per-rank data, sharing its parameters (Adam holds them); RNG forked."""
    with torch.random.fork_rng(devices=[]):
        fresh = regime_of("model", run.job.model.name).build_task(run.job.task, run.manifest, run.model.out_features,
                                                                   run.job.train.seed)
    old = run.task
    fresh._parameters, fresh._buffers, fresh._modules = old._parameters, old._buffers, old._modules
    return fresh


def _check_kernels(job: JobConfig, manifest: Manifest, dtype: torch.dtype, device: torch.device,
                   comm: Communicator) -> None:
    """The compiled CPU loops compiled (a first run after an install) and checked against torch now, before the
    strategy's set-up, where the job may take them (:func:`hpcdgnn.ops.kernels.used_by`: a small job never loads
    numba); a kernel that fails its check on any rank sends every rank to the torch paths (one warning line), never
    a crash mid-epoch."""
    # snapshots (their edges), or events: bounds of any one call's steps and pairs (a pair decoder's tasks only)
    edges = sum(getattr(manifest, "snapshot_edges", None) or []) + getattr(manifest, "num_events", 0)
    pairs = edges * (1 + getattr(job.task, "negatives", 1)) if task_class(job.task.name).buckets_pairs else 0
    which = kernels.wanted(dtype, device, getattr(manifest, "num_snapshots", 0), pairs)
    if which:  # the same on every rank
        failed = not kernels.self_check(dtype, which)
        if comm.allreduce_array([float(failed)], tag="setup")[0] > 0:  # one rank's failure: all take torch's paths
            kernels.disable()


def build_run(job_path: str | None, overrides: list[str], output: str | None, comm: Communicator,
              resume: str | None = None) -> Run:
    """Prepare a job (or a resumed one) up to its first epoch."""
    job, manifest, plan, run_dir_s, ckpt_s, fingerprint, shared = _prepare(job_path, overrides, output, resume, comm)
    run_dir, ckpt = Path(run_dir_s), None if ckpt_s is None else Path(ckpt_s)
    try:
        job_path = job_path or str(run_dir / "config.resolved.yaml")
        # checkpoints, trace and profile files
        debug = [k for k, on in (("debug.trace_exchanges", job.debug.trace_exchanges),
                                 ("debug.profile_epoch", job.debug.profile_epoch > 0)) if on]
        _check_shared_paths(comm, run_dir if not job.checkpoint.dir or debug else None,
                            Path(job.checkpoint.dir) if job.checkpoint.dir else None, debug)
        if job.train.reuse_memory:
            reuse_host_memory()
        threads = threads_per_rank(comm, job.train.threads)
        torch.set_num_threads(threads)
        dtype = _dtype(job)
        device = agree(comm, lambda: _device(job, job_path, comm))
        _check_device_agreement(comm, device, job, job_path)
        comm.world.init_tensor_backend(job.comm.backend, device, job.comm.timeout_s)

        if job.debug.measured_compute and len(job.debug.measured_compute) != comm.size:
            raise collective_error(ConfigError(f"{job_path}: debug.measured_compute: {len(job.debug.measured_compute)} "
                                               f"values for {comm.size} ranks"))
        if device.type == "cuda":  # a CPU job is checked before its plan
            share = memory_share(comm, device)
            agree(comm, lambda: check_footprint(job, manifest, comm.size, share, job_path, "device"))
        model, task, params, opt = _build_model(job, job_path, manifest, comm, device, dtype)
        start, mine, initial, calibrated, within = 0, None, None, False, (0, None)
        if ckpt is not None:
            state, mine = agree(comm, lambda: _restore(ckpt, comm, model, task, opt, shared))
            start = int(state["epoch"])
            within = agree(comm, lambda: _resumed_within(state, mine, comm, Path(ckpt)))
            initial = state.get("initial_checksum")
            # a re-cut belongs to the checkpoint's plan: on another P the new plan is calibrated again
            if getattr(state.get("plan"), "num_ranks", None) == comm.size:
                calibrated = state.get("balance_calibrated")
        checksum = _checksum(params) if comm.rank == 0 else ""
        if ckpt is None:
            initial = checksum

        _check_kernels(job, manifest, dtype, device, comm)
        t_setup = time.perf_counter()
        strategy, (pretrained, pretrain_sent) = _setup_strategy(job, manifest, comm, dtype, device, plan, model, task,
                                                                start, within[0])
        strategy.attach_optimizer(opt)
        setup_seconds = time.perf_counter() - t_setup - pretrained
        if mine is not None:
            agree(comm, lambda: strategy.load_state_dict(strategy_state(mine, strategy, comm.size)))
            if comm.rank == 0:  # only an accepted resume changes the run directory
                remove_temporaries(run_dir, _RUN_FILES)  # this run's lock held: no write of them is under way
                _save_run_files(run_dir, job, plan, start)
        train_count = task.global_train_count()
        if train_count <= 0:  # the same count on every rank: all raise
            cut = f"task.split {list(job.task.split)}" if job.task.split is not None else "the stream's split"
            raise collective_error(
                DataError(f"{job_path}: {cut} leaves no training examples in data.path "
                          f"{job.data.path} (T = {getattr(manifest, 'num_snapshots', '?')}: too few snapshots, or no "
                          "labels)")
            )
        return Run(job, job_path, manifest, plan, run_dir, ckpt, threads, device, model, task, params, opt, strategy,
                   start, setup_seconds, strategy.usage().transfer_bytes, checksum, train_count, fingerprint, initial,
                   pretrained, calibrated, *within, pretrain_bytes_sent=pretrain_sent)
    except HpcdgnnError:
        if ckpt is None and comm.rank == 0:  # a refused new run leaves no directory behind
            _discard_new_run(run_dir, job)
        raise
