"""The training loop: small, strategy-agnostic, exact (STYLE G5, G10, G11).

It reads like the figure of the method::

    run = build_run(...)                      setup: job, plan, run directory, model, strategy (train/setup.py)
    for epoch:
        for batch in strategy.batches(epoch): one full batch (IBM, DGC) or many mini-batches (ReInc, DynaHB)
            step: forward -> loss / global examples -> backward   (strategy.step; train/loop.py)
                  gradient synchronisation (strategy.sync_gradients) -> Adam
        evaluation pass when the strategy has one (strategy.evaluate)
        record: one all-reduce of metric sums, one all-gather of the time split (metrics/epoch.py)
        with strategy.balance: measured, after the warm-up, a plan re-cut from the compute split (replan)
        checkpoint at checkpoint.every epochs / every_minutes, at the end, and on pre-emption
    summary.json (metrics/summary.py)

Dividing by the global example count makes the P-rank gradient the single-process one up to summation order.
A pre-emption signal rides in the epoch's all-gather, so every rank stops at the same boundary and checkpoints;
under a strategy of many mini-batches the ranks also agree between batches (loop.BatchStop) and checkpoint there,
where the strategy resumes between batches, or abandon the epoch, writing the checkpoint of its start instead.
"""

from __future__ import annotations

import json
import os
import time
from array import array
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hpcdgnn import preemption
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.comm.device import node_available, node_memory
from hpcdgnn.comm.watchdog import Watchdog
from hpcdgnn.config import job_to_dict
from hpcdgnn.data.manifest import manifest_sizes
from hpcdgnn.errors import ConfigError, HpcdgnnError, out_of_memory
from hpcdgnn.metrics import RunDirectory, configure_logging, read_epoch_records
from hpcdgnn.metrics.epoch import EpochRecorder, fmt_metric
from hpcdgnn.metrics.log import HeldLines, batches_into
from hpcdgnn.metrics.memory import SavedTensorMeter
from hpcdgnn.metrics.op_profile import PROFILE_DIR, profiled, write_profile
from hpcdgnn.metrics.summary import RunTotals, write_summary
from hpcdgnn.ops import kernels
from hpcdgnn.progress import Progress
from hpcdgnn.regimes import job_regime
from hpcdgnn.run_lock import release_runs
from hpcdgnn.train.checkpoint import (
    CheckpointManager,
    HeldCheckpoint,
    array_bytes,
    latest_checkpoint,
    read_run_id,
)
from hpcdgnn.train.collective import collective_error
from hpcdgnn.train.footprint import out_of_memory_error
from hpcdgnn.train.loop import BatchStop, train_batches
from hpcdgnn.train.setup import (
    Partial,
    Run,
    _discard_new_run,
    build_run,
    calibration_epochs,
    measured_plan,
    replan,
    truncate_metrics,
    warmup_epochs,
)

__all__ = ["run_training", "TrainResult", "train_epoch"]


@dataclass
class TrainResult:
    """What a finished run returns: its run directory, this attempt's losses and the trained model and task head
    (every rank; None after an epoch stopped between its batches at a pre-emption, or a pre-emption before the
    first epoch: those weights are in no checkpoint of an epoch's end)."""

    run_dir: Path
    losses: list[float]
    preempted: bool = False
    model: torch.nn.Module | None = None
    task: torch.nn.Module | None = None

    @property
    def metrics(self) -> list[dict]:
        """The run's epoch records, read from ``metrics.jsonl`` (not kept in memory)."""
        return read_epoch_records(self.run_dir / "metrics.jsonl")


class _FaultInjector:
    """The task, but raising after the forward on ``debug.fail_rank`` (or sleeping on ``debug.delay_rank``)."""

    def __init__(self, task, rank: int, debug) -> None:
        self.task, self.rank, self.debug = task, rank, debug

    @classmethod
    def wrap(cls, task, rank: int, debug):
        """The task itself, or wrapped when a debug fault or delay is asked for."""
        return cls(task, rank, debug) if debug.fail_rank >= 0 or debug.delay_rank >= 0 else task

    def __getattr__(self, name: str):
        return getattr(self.task, name)

    def __call__(self, emb, epoch: int):
        if self.rank == self.debug.fail_rank and epoch == self.debug.fail_epoch:
            raise RuntimeError(f"debug.fail_rank: fault injected on rank {self.rank} in epoch {epoch}")
        if self.rank == self.debug.delay_rank:
            time.sleep(self.debug.delay_seconds)
        return self.task(emb, epoch)


def train_epoch(run: Run, task, epoch: int, meter: SavedTensorMeter, stop: BatchStop | None = None,
                start: int = 0, partial: Partial | None = None) -> tuple[np.ndarray, float]:
    """Every batch of one epoch, then the evaluation pass; (this rank's metric sums, last gradient norm).

    ``stop`` (begun): may stop the epoch between its training batches, or between those of its evaluation pass
    (its ``stopped_at`` is then set, and the sums are the training batches' only); ``start``: the batch a resume
    within the epoch continues with, ``partial`` this rank's part of the batches before it."""
    meter.reset_peak()
    drawn = batches = run.strategy.batches(epoch, start=start) if start else run.strategy.batches(epoch)
    seconds = run.job.output.progress_seconds
    if run.strategy.comm.rank == 0 and seconds > 0:  # an epoch of many mini-batches says how far it is
        resumed = f" from batch {start + 1}" if start else ""
        batches = Progress(f"epoch {epoch}: batches trained{resumed}", seconds=seconds).iterate(batches)
    stats, grad_norm = train_batches(run.strategy, run.model, task, run.params, run.optimizer,
                                     batches, run.train_count, meter, stop, start,
                                     *((partial.stats, partial.grad_norm) if partial is not None else ()))
    if stop is not None and stop.stopped_at is not None:
        for gen in (batches, drawn):  # the strategy's code after its yield does not run (no collective)
            getattr(gen, "close", lambda: None)()
        return stats, grad_norm
    if stop is not None:  # what a checkpoint of the trained epoch keeps, should its evaluation stop
        stop.scores = run.task.held_scores()
    # a strategy without a pass of several batches to stop in need not take ``stop``
    asked = stop is not None and stop.evaluation
    evaluated = run.strategy.evaluate(run.model, task, epoch, **({"stop": stop.in_evaluation} if asked else {}))
    if stop is not None and stop.stopped_at is not None:  # the pass's sums so far go: a resume evaluates again
        return stats, grad_norm
    if evaluated is not None:
        stats = evaluated if stats is None else stats + evaluated
    return stats, grad_norm


def _checkpoint(run: Run, checkpoints: CheckpointManager, epoch: int) -> Path:
    """Every rank writes its part: rank 0 the shared state, each rank its RNG and strategy state."""
    return checkpoints.save(epoch, _shared_state(run, checkpoints, epoch), run.strategy.state_dict())


def _held(run: Run, checkpoints: CheckpointManager, epoch: int) -> HeldCheckpoint:
    """The checkpoint of ``epoch`` :func:`_checkpoint` would write now, kept in memory (no collective)."""
    return checkpoints.hold(epoch, _shared_state(run, checkpoints, epoch), run.strategy.state_dict())


#: the most a node's ranks may hold of an epoch's start (:func:`_held`), as shares of the node's memory and of what
#: it has free when first asked: beyond, the copy could take the run out of memory, which a stop between batches
#: is not worth (a checkpoint at every boundary, ``checkpoint.every: 1``, stops between them without a copy)
HOLD_OF_NODE, HOLD_OF_FREE = 0.25, 0.5


def _hold_fits(run: Run, comm: Communicator, log, what: str) -> bool:
    """Whether every node can hold its ranks' copies of the checkpoint an abandoned epoch resumes from (each
    rank's strategy state; the model and Adam's moments on rank 0) within
    :data:`HOLD_OF_NODE` and :data:`HOLD_OF_FREE` (collective; rank 0 says when not, of ``what``: the passes a
    stop would abandon)."""
    mine = array_bytes(run.strategy.state_dict())
    if comm.rank == 0:
        mine += array_bytes([run.model.state_dict(), run.task.state_dict(), run.optimizer.state_dict(), run.plan])
    held = sum(comm.world.node().allgather_obj(mine, tag="control.stop"))
    free = node_available()
    fits = held <= HOLD_OF_NODE * node_memory() and (free is None or held <= HOLD_OF_FREE * free)
    # every rank the same answer; the line names the largest node's copies (another node's may be the one refused)
    refused, most = comm.allreduce_array([float(not fits), float(held)], op="max", tag="control.stop")
    if refused and comm.rank == 0:
        log.info(f"pre-emption: this run's {what} end before a signal stops them (holding an epoch's start in memory "
                 f"would take up to {most / 2**30:.2f} GiB on a node: more than {HOLD_OF_NODE:.0%} of its memory or "
                 f"{HOLD_OF_FREE:.0%} of what it has free); checkpoint.every: 1 lets them stop between batches")
    return not refused


def _shared_state(run: Run, checkpoints: CheckpointManager, epoch: int) -> dict:
    """``state.pt``'s content (rank 0; the other ranks write none of it)."""
    if checkpoints.comm.rank:
        return {}
    return {
        "epoch": epoch,
        "model": run.model.state_dict(),
        "task": run.task.state_dict(),
        "optimizer": run.optimizer.state_dict(),
        "plan": run.plan,
        "config": job_to_dict(run.job),
        "initial_checksum": run.initial_checksum,
        "balance_calibrated": run.calibrated,
        "dataset_sha256": run.dataset_sha256,
        "sizes": manifest_sizes(run.manifest),  # a trained model is built again without the dataset (api)
    }


def _banner(run: Run, comm: Communicator) -> list[str]:
    """The start lines: what the run is, where its results go, what it resumed."""
    job, m = run.job, run.manifest
    shape = (f"N={m.num_vertices} E={m.num_events} D={m.edge_feature_dim}" if hasattr(m, "num_events") else
             f"N={m.num_vertices} T={m.num_snapshots} F={m.num_features}")
    lines = [
        f"hpcdgnn: {job.model.name} x {job.task.name}, strategy {job.strategy.name}{run.strategy.shape()}, "
        f"P={comm.size}, {shape}, "
        f"{sum(p.numel() for p in run.params)} parameters (checksum {run.checksum}"
        f"{' as restored' if run.resumed else ''}), {job.train.dtype}, "
        f"{run.threads} thread(s)/rank, device {run.device}, backend {job.comm.backend}"
        + (f", transfer {job.strategy.transfer}" if hasattr(job.strategy, "transfer") else ""),
    ]
    from hpcdgnn.allocator import describe

    pretrained = f", pre-training {run.pretrain_seconds:.2f}s" if run.pretrain_seconds else ""
    lines.append(f"run directory: {run.run_dir}   setup {run.setup_seconds:.2f}s ({run.strategy.setup_work})"
                 f"{pretrained}"
                 f"   host allocator: {describe()}")
    if run.resumed:
        lines.append(f"resumed from {run.checkpoint} after epoch {run.start_epoch}"
                     f"{batches_into(run.start_epoch, run.start_batch)}")
    return lines


class _Health:
    """Warnings a user must not miss (rank 0, once each): an empty validation or test split, an epoch without
    training examples, a growing loss. ``empty_split``: the regime's hint, with ``{split}`` for the split."""

    def __init__(self, log, metric: str, empty_split: str) -> None:
        self.log, self.metric, self.first, self.said = log, metric, None, set()
        self.empty_split = empty_split

    def check(self, record: dict, sums_finite: bool = False) -> None:
        """``sums_finite``: the epoch's metric sums were finite, so a NaN loss means no examples (else the run
        diverged, which ends it with its own line)."""
        loss = record["train_loss"]
        if self.first is None or not np.isfinite(self.first):  # an epoch without examples is no baseline
            self.first = loss
            # a metric is NaN for no examples, or for a diverged model's scores (then the sums are not finite)
            for split, name in (("val", "validation"), ("test", "test")) if sums_finite else ():
                value = record.get(f"{split}_{self.metric}", 0.0 if split == "test" else None)
                if value is None or not np.isfinite(value):  # NaN in the record (null in metrics.jsonl): no examples
                    self._warn(f"empty-{split}", f"warning: the {name} split is empty ({split}_{self.metric} is "
                               f"'-'): {self.empty_split.format(split=name)}")
        if loss is None or not np.isfinite(loss) and sums_finite:
            self._warn("nan", f"warning: epoch {record['epoch']}'s batches held no training examples (its loss is "
                       "'-'); sampled batches may, on a small graph: raise the batch's fractions or sizes")
        elif np.isfinite(loss) and self.first is not None and np.isfinite(self.first) \
                and loss > 100 * max(abs(self.first), 1e-12):
            self._warn("grow", f"warning: the training loss grew from {self.first:.4g} to {loss:.4g} by epoch "
                       f"{record['epoch']}: training is diverging; lower train.lr")

    def _warn(self, key: str, text: str) -> None:
        if key not in self.said:
            self.said.add(key)
            self.log.warning(text)


def _diverged(run: Run, checkpoints: CheckpointManager, epoch: int, loss: float) -> ConfigError:
    """The one line ending a run whose loss is not finite, naming the newest (finite) checkpoint (every rank)."""
    newest = latest_checkpoint(checkpoints.root)
    # float64 is advice only to a float32 run
    fix = "lower train.lr" + (" or use train.dtype: float64" if run.job.train.dtype == "float32" else "")
    return collective_error(ConfigError(
        f"epoch {epoch}: the training loss is {loss}: training diverged; {fix} (results in {run.run_dir}; "
        + (f"newest checkpoint, before it: {newest.name})" if newest else "no checkpoint was written)")))


class _CheckpointPolicy:
    """When to checkpoint: every ``every`` epochs or ``every_minutes``, on pre-emption and at the end."""

    def __init__(self, cfg) -> None:
        self.every, self.seconds = cfg.every, cfg.every_minutes * 60.0
        self.last = time.monotonic()
        self.first = True

    def due_by_time(self) -> bool:
        return self.seconds > 0 and time.monotonic() - self.last >= self.seconds

    def wanted(self, epoch: int, final: bool, preempted: bool, time_due: bool) -> bool:
        return preempted or final or time_due or bool(self.every and epoch % self.every == 0)

    def written(self, path: Path, seconds: float, describe: bool) -> str:
        """Restart the wall-time clock; the checkpoint's log line (``describe``: rank 0)."""
        self.last, first, self.first = time.monotonic(), self.first, False
        if not describe or not first:
            return f"checkpoint: {path}"
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        when = [f"every {self.every} epochs (checkpoint.every)"] if self.every else []
        when += [f"every {self.seconds / 60:g} min (checkpoint.every_minutes)"] if self.seconds > 0 else []
        return (f"checkpoint: {path} ({size / 2**20:.2f} MiB on disk, {seconds:.2f} s); checkpoints "
                f"{', '.join(when + ['at the end'])} and on pre-emption")


def run_training(job_path: str | None, overrides: list[str], output: str | None, comm: Communicator,
                 resume: str | None = None) -> TrainResult:
    """Run a job, or continue one from ``resume``'s newest checkpoint (every rank)."""
    log = configure_logging(comm.rank, comm.size)
    stop = preemption.install()  # for library callers
    kernels.reset_calls()  # summary.json counts this run's calls, not an earlier run's in this process
    try:
        with HeldLines(log) as held:  # set-up's detail lines follow the start line, which needs the built run
            run = build_run(job_path, overrides, output, comm, resume)
            held.release(*_banner(run, comm))
        try:
            return _train(run, comm, log, stop)
        except (MemoryError, RuntimeError) as e:  # one allocation larger than the rank: name this job's size keys
            run.strategy.close(collective=False)
            detail = out_of_memory(e)
            if detail is None:
                raise
            raise out_of_memory_error(run.job, run.manifest, comm.size, detail) from None
        except BaseException:  # a library caller's process goes on: no generator thread or hook left behind
            run.strategy.close(collective=False)
            raise
    finally:
        release_runs()  # the run directory build_run held (rank 0): a library caller may resume it next


def _of_missing_ranks(files, size: int) -> list[Path]:
    """The per-rank files (``…rank<r>.<ext>``) of ranks a run on ``size`` ranks lacks (a resume on fewer)."""
    return [f for f in files if int(f.stem.rpartition("rank")[2]) >= size]


def _profile_before_resume(run_dir: Path, epoch: int, start: int) -> str | None:
    """The line saying a resume past ``debug.profile_epoch`` makes no profile (unless one exists)."""
    with suppress(OSError, ValueError):
        made = json.loads((run_dir / PROFILE_DIR / "rank0.json").read_text())
        if isinstance(made, dict) and made.get("epoch") == epoch:
            return None
    return (f"debug.profile_epoch: epoch {epoch} ran before the checkpoint this run resumes from "
            f"(epoch {start}): no profile is made (set an epoch after {start})")


def _signal_name(stop: preemption.PreemptionFlag) -> str:
    """The signal a pre-empted run names: this rank's (what hpcdgnn-mpirun received, where it relayed it), or the
    other ranks'."""
    return stop.describe() or "a signal to another rank"


def _resumed_trace_file(run: Run, comm: Communicator, log) -> Path:
    """This rank's exchange trace file, once a resumed run has dropped what its re-run epochs rewrite."""
    job = run.job
    mine = EpochRecorder.trace_file(run.run_dir, comm.rank)
    if run.resumed:  # re-run epochs' trace lines go, before the first collective appends any
        stale = [] if comm.rank else _of_missing_ranks(mine.parent.glob("exchanges.rank*.jsonl"), comm.size)
        for f in [mine, *stale]:
            truncate_metrics(f, run.start_epoch)
        if comm.rank == 0 and run.start_epoch < job.debug.profile_epoch:  # no stale file of a missing rank
            for f in _of_missing_ranks((run.run_dir / PROFILE_DIR).glob("rank*.*"), comm.size):
                f.unlink()
        elif comm.rank == 0 and job.debug.profile_epoch and (
                note := _profile_before_resume(run.run_dir, job.debug.profile_epoch, run.start_epoch)):
            log.info(note)
    return mine


def _preempted_in_setup(run: Run, comm: Communicator, log, stop: preemption.PreemptionFlag) -> bool:
    """The line saying some rank got a signal during set-up, or None (collective)."""
    preempted = comm.allreduce_array([float(stop.raised)], tag="setup")[0] > 0
    if preempted:
        before = "before training on from its checkpoint" if run.resumed else "before any epoch"
        log.info(f"pre-empted ({_signal_name(stop)}) during the set-up, {before}; {_restart_hint(run, run.resumed)}")
    return preempted


#: how a run's lines name the way on and the arguments they are about, in the words of whoever started it: the
#: command's ``--resume RUNDIR``, ``--output`` and ``--OPTION VALUE`` (the default), or the Python API's
#: (:func:`hpcdgnn.train` sets them; its errors are reworded on the way out, its log lines are not)
RESTART_WORDS: ContextVar[tuple[str, str, str]] = ContextVar("RESTART_WORDS",
                                                             default=("--resume {}", "--output", "--{} {}"))


def _resume_words(run: Run) -> str:
    """``--resume RUNDIR`` and the whole command that resumes, as launched here, or the Python API's call.

    A user pre-empted mid-study should not have to work out how ``--resume`` fits their launch line: where this
    rank's environment names its launcher (:func:`~hpcdgnn.comm.world.expected_world_size`), the command is
    spelled out with it and its rank count (a resume may change P, but the same P is what continues bit for bit).
    """
    words = RESTART_WORDS.get()[0].format(str(run.run_dir))
    if not words.startswith("--"):  # the Python API's call: complete as it is
        return words
    return f"{words}: {_launch_prefix(os.environ)}python -m hpcdgnn run {words}"


def _launch_prefix(environ) -> str:
    """``LAUNCHER -np P `` as this rank's environment names the launcher, '' for a process none started.

    Args:
        environ: the environment to read (``os.environ``).
    """
    from hpcdgnn.comm.world import expected_world_size
    from hpcdgnn.launch import _ACTIVE as MARKER_VAR  # the variable hpcdgnn-mpirun sets in what it starts

    launched = expected_world_size(environ)
    if launched is None:
        return ""
    ranks, launcher = launched
    if launcher == "mpirun" and environ.get(MARKER_VAR):  # hpcdgnn-mpirun marks what it starts
        launcher = "hpcdgnn-mpirun"
    return f"{launcher} {'-n' if launcher == 'srun' else '-np'} {ranks} "


def _restart_hint(run: Run, checkpointed: bool) -> str:
    """How a pre-empted run goes on: from its newest checkpoint, or (none yet) from the start."""
    return (f"resume with {_resume_words(run)}" if checkpointed else
            f"no checkpoint yet: run the job again with another {RESTART_WORDS.get()[1]}, or after removing "
            f"{run.run_dir} (the job scripts move it aside and start over)")


def _abandoned(run: Run, checkpoints: CheckpointManager, log, stop: preemption.PreemptionFlag, epoch: int,
               batch_stop: BatchStop, held: HeldCheckpoint | None, written: int, start: int) -> None:
    """A pre-emption between epoch ``epoch``'s batches (``batch_stop`` says where): write the checkpoint of its
    start if only ``held`` in memory (``written``: the newest checkpoint's epoch, 0 for none; ``start``: the
    batch of the epoch this attempt resumed at, where the newest checkpoint is within it), and say so (every
    rank)."""
    if held is not None:
        t0 = time.perf_counter()
        path = checkpoints.save(held=held)
        written = held.epoch
        log.info(f"checkpoint: {path} (epoch {held.epoch}'s end, kept in memory; {time.perf_counter() - t0:.2f} s)")
    where = (f"in its evaluation pass, after all {batch_stop.trained} of its batches" if batch_stop.evaluating else
             f"after {batch_stop.stopped_at} of its batches")
    again = (f"from its batch {start + 1}, the checkpoint within it" if start else
             "from its start" + (f", the checkpoint of epoch {written}" if written else ""))
    log.info(f"pre-empted ({_signal_name(stop)}): stopped during epoch {epoch}, {where} (a resume trains it again "
             f"{again}); {_restart_hint(run, written > 0 or start > 0)}")


def _stopped_within(run: Run, checkpoints: CheckpointManager, log, stop: preemption.PreemptionFlag, epoch: int,
                    batch_stop: BatchStop, stats: np.ndarray, grad_norm: float) -> None:
    """A pre-emption within epoch ``epoch`` the strategy resumes from (``batch_stop`` says where): between its
    training batches (:meth:`~hpcdgnn.strategies.base.Strategy.resumes_between_batches`), or in its evaluation
    pass (:meth:`~hpcdgnn.strategies.base.Strategy.resumes_evaluation`: after all its training batches, with the
    last one's ``grad_norm``). Write the checkpoint there, with this rank's metric sums ``stats`` of the training
    batches so far (and their sum over ranks, for a resume on another rank count) and the scores its task kept
    in them, and say so (every rank)."""
    t0 = time.perf_counter()
    batches = batch_stop.trained if batch_stop.evaluating else batch_stop.stopped_at
    where, then = ((f"in its evaluation pass, after all {batches} of its batches", "evaluates it again")
                   if batch_stop.evaluating else
                   (f"after {batches} of its batches", f"trains on from its batch {batches + 1}"))
    stopped = (f"pre-empted ({_signal_name(stop)}): stopped during epoch {epoch}, {where} (a resume {then}); "
               f"{_restart_hint(run, True)}")
    if run.checkpoint is not None and (run.start_epoch, run.start_batch) == (epoch - 1, batches):
        # resumed from this very checkpoint, and stopped again in the evaluation before any batch: its state
        log.info(f"checkpoint: {run.checkpoint} (kept: this attempt trained nothing since)")
        log.info(stopped)
        return
    total = checkpoints.comm.allreduce_array(stats, tag="control.stop")
    shared = _shared_state(run, checkpoints, epoch - 1)
    if shared:
        shared.update(batch=batches, partial_sum=total, **({"grad_norm": grad_norm} if batch_stop.evaluating else {}))
    scores = batch_stop.scores if batch_stop.evaluating else run.task.held_scores()
    path = checkpoints.save(epoch - 1, shared, run.strategy.state_dict(), batch=batches,
                            partial={"stats": stats, "scores": scores})
    log.info(f"checkpoint: {path} (within epoch {epoch}, after {'all ' * batch_stop.evaluating}{batches} of its "
             f"batches; {time.perf_counter() - t0:.2f} s)")
    log.info(stopped)


def _write_epoch_profile(prof, record: dict, run: Run, comm: Communicator, log, epoch: int) -> None:
    """Write a profiled epoch's tables and mark its record; rank 0 says where they are."""
    record["profiled"] = True
    table = write_profile(prof, run.run_dir, comm.rank, epoch)
    if comm.rank == 0:
        log.info(f"epoch {epoch} profiled (its time includes the profiler's): "
                 f"{table.parent}/rank<r>.txt, .json")


def _done_line(run: Run, totals: RunTotals, epochs_run: int) -> str:
    """Rank 0's closing line: the epochs this attempt ran, the final val/test scores and where the results are."""
    final = totals.final or {}
    m = run.task.metric
    scores = "".join(f", {k} {fmt_metric(final.get(k))}" for k in (f"val_{m}", f"test_{m}") if k in final)
    span = (f"epoch {final['epoch']}" if final["epoch"] == run.start_epoch + 1 else
            f"epochs {run.start_epoch + 1}-{final['epoch']}") if run.resumed and epochs_run else ""
    within = batches_into(run.start_epoch, run.start_batch)
    plural = "s" * (epochs_run != 1)
    done = (f"{span} (resumed after epoch {run.start_epoch}{within})" if span else f"{epochs_run} epoch{plural}"
            if epochs_run or not run.resumed else f"no epoch left after epoch {run.start_epoch}, summary.json written")
    return f"done: {done}{scores}; results in {run.run_dir}"


def _train(run: Run, comm: Communicator, log, stop: preemption.PreemptionFlag) -> TrainResult:
    """:func:`run_training` after the set-up: the epochs, checkpoints and summary."""
    job = run.job
    totals = RunTotals(comm.size)  # summary.json's sums over the whole run (rank 0)
    if comm.rank == 0 and run.resumed:
        truncate_metrics(run.run_dir / "metrics.jsonl", run.start_epoch)
        totals.add_file(run.run_dir / "metrics.jsonl")
    try:
        rd = RunDirectory(run.run_dir, job.output.tensorboard, run.start_epoch) if comm.rank == 0 else None
    except HpcdgnnError:  # e.g. an event-file directory that cannot be made: a new run leaves nothing behind
        if not run.resumed:
            _discard_new_run(run.run_dir, job)
        raise
    checkpoints = CheckpointManager(Path(job.checkpoint.dir) if job.checkpoint.dir else run.run_dir / "checkpoints",
                                    job.checkpoint.keep, comm, read_run_id(run.run_dir) if comm.rank == 0 else None)
    task = _FaultInjector.wrap(run.task, comm.rank, job.debug)
    mine = _resumed_trace_file(run, comm, log)
    trace = mine if job.debug.trace_exchanges else None
    recorder = EpochRecorder(comm, run.strategy, run.task, run.device,
                             warmup_epochs(job, run.start_epoch, run.calibrated),
                             run.start_epoch if run.resumed else None, trace)
    meter, activation_peak = SavedTensorMeter(), 0
    policy = _CheckpointPolicy(job.checkpoint)
    health = _Health(log, run.task.metric, job_regime(job, run.job_path).empty_split)
    # this attempt's losses (every rank) as C doubles, NaN for None
    losses = array("d")
    diverged: ConfigError | None = None
    # balance: per-rank compute of the calibration epochs
    calibrating = calibration_epochs(job, run.start_epoch, run.calibrated)
    measured: list[list[float]] = []
    # a signal during set-up stops before the first epoch: the grace period may not hold a whole one
    preempted = _preempted_in_setup(run, comm, log, stop)
    watchdog = Watchdog.start(comm, job.comm.stall_timeout_s, log)
    last = run.start_epoch if preempted else job.train.epochs
    batch_stop = BatchStop(comm, stop)
    written = run.start_epoch  # the newest checkpoint's epoch (0: none)
    seconds = 0.0  # the last epoch's, slowest rank (the same on every rank)
    abandoned = False
    hold_fits: bool | None = None  # asked once, at the first epoch that would hold its start
    for epoch in range(run.start_epoch + 1, last + 1):
        # the first epoch of a resume within it starts at the checkpoint's batch
        first = epoch == run.start_epoch + 1
        start, partial = (run.start_batch, run.partial) if first else (0, None)
        between = run.strategy.stops_between_batches(epoch)
        # where a stop checkpoints within the epoch: between its training batches; in its evaluation pass
        within = between and run.strategy.resumes_between_batches(epoch)
        after = between and run.strategy.resumes_evaluation(epoch)
        held = None  # the last epoch's copy goes before the next is made
        recorder.begin(None if partial is None else partial.scores)
        # the state an abandoned epoch resumes from, serialised now (the epoch changes it in place), where some
        # stop would abandon it; in the epoch's time, which it costs
        hold = between and not (within and after) and written < epoch - 1 and seconds >= BatchStop.HOLD_AFTER_S
        if hold and hold_fits is None:  # the same condition on every rank: all reach the collective
            what = "evaluation passes" if within else "training passes" if after else "epochs"
            hold_fits = _hold_fits(run, comm, log, what)
        held = _held(run, checkpoints, epoch - 1) if hold and hold_fits else None
        kept = written == epoch - 1 or held is not None  # a resume can redo the epoch (from ``start``)
        batch_stop.begin(start, training=within or kept, evaluation=after or kept)
        between = between and (within or after or kept)
        with profiled(epoch == job.debug.profile_epoch, run.device) as prof:
            stats, grad_norm = train_epoch(run, task, epoch, meter, batch_stop if between else None, start, partial)
        if between and batch_stop.stopped_at is not None:
            preempted = abandoned = True
            resumable = after if batch_stop.evaluating else within
            if resumable:
                _stopped_within(run, checkpoints, log, stop, epoch, batch_stop, stats, grad_norm)
            else:
                _abandoned(run, checkpoints, log, stop, epoch, batch_stop, held, written, start)
            break
        activation_peak = max(activation_peak, meter.peak)
        record, preempted, time_due = recorder.end(epoch, stats, grad_norm, meter.peak, stop.raised,
                                                   policy.due_by_time())
        if start:  # its time, traffic and counters are those of the batches from ``start`` on
            record["resumed_after_batches"] = start
        # the slowest rank's; a resumed epoch's part says nothing of a whole one's length: count it as long
        seconds = max(record["per_rank"]["epoch"]) if not start else max(BatchStop.HOLD_AFTER_S, seconds)
        if prof is not None:
            _write_epoch_profile(prof, record, run, comm, log, epoch)
        losses.append(np.nan if record["train_loss"] is None else record["train_loss"])
        if rd is not None:
            totals.add(record)
            rd.append_epoch(record)
            if epoch % job.output.log_every == 0 or epoch == job.train.epochs:
                log.info(recorder.line(record) + (f"  (resumed after {start} batches: time of the rest)" if start
                                                  else ""))
            health.check(record, recorder.sums_finite)
        loss = record["train_loss"]
        # the same global sums on every rank: all stop here (a NaN mean of finite sums: the epoch had no examples)
        if loss is not None and not np.isfinite(loss) and not recorder.sums_finite:
            diverged = _diverged(run, checkpoints, epoch, loss)
            break
        if epoch in calibrating and (prof is None or not measured and epoch == calibrating[-1]):
            measured.append(record["per_rank"]["compute"])
        if calibrating and epoch == calibrating[-1] and comm.size > 1 and not preempted:
            # before the checkpoint of this epoch, which must hold the new plan
            plan = measured_plan(run, np.median(measured, axis=0).tolist(), comm, log)
            run.calibrated = True  # the checkpoint records it: a resume does not calibrate this plan again
            if plan is not None:
                task = recorder.strategy = recorder.task = None  # the old strategy's arrays go first
                replan(run, plan, epoch, comm, log)
                task = _FaultInjector.wrap(run.task, comm.rank, job.debug)
                recorder.strategy, recorder.task = run.strategy, run.task
        if policy.wanted(epoch, epoch == job.train.epochs, preempted, time_due):
            t0 = time.perf_counter()
            path = _checkpoint(run, checkpoints, epoch)
            written = epoch
            log.info(policy.written(path, time.perf_counter() - t0, describe=comm.rank == 0))
        if preempted and epoch == job.train.epochs:  # nothing left to resume: the run is complete
            log.info(f"a stop signal ({_signal_name(stop)}) came during the last epoch, which ended first")
            preempted = False
        if preempted:
            log.info(f"pre-empted ({_signal_name(stop)}): stopped after epoch {epoch}; "
                     f"resume with {_resume_words(run)}")
            break
    write_summary(comm, rd, run, totals, activation_peak, preempted,
                  status="diverged" if diverged else None)
    # checkpointed and said so: a second signal from now on abandons nothing (exit 75 all the same). Not a run that
    # diverged in the epoch the stop came (no checkpoint of it; it ends with the divergence's 2, not resumed)
    if preempted and not diverged:
        if comm.size > 1:  # the others left write_summary's gather before rank 0 wrote the file: wait for it
            comm.barrier(tag="metrics")
        stop.settle()
    # every rank is here: the strategy's threads (hybrid's batch generators) end and its gradient hooks leave
    # the parameters, which a library caller keeps using (a later backward must not all-reduce)
    run.strategy.close()
    if watchdog is not None:
        watchdog.stop()
    if rd is not None:
        rd.close()
    if diverged:
        raise diverged
    if rd is not None and not preempted:
        log.info(_done_line(run, totals, len(losses)))
    # an abandoned epoch's weights are no checkpoint's, nor are a new run's stopped in its set-up (initial ones):
    # the caller loads the newest checkpoint, if any (api.TrainedRun.model)
    trained = (None, None) if abandoned or preempted and not losses else (run.model, run.task)
    return TrainResult(run.run_dir, [None if np.isnan(v) else v for v in losses], preempted, *trained)
