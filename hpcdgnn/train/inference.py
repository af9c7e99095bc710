"""Forward passes of a trained run on P ranks: what ``embed`` and ``predict`` compute (issue 60).

:func:`open_trained` builds a finished run's model, task head and strategy from its directory (its
``config.resolved.yaml`` and newest checkpoint) on this job's P ranks — any P the strategy can plan; on the
run's own P the checkpoint's plan, so the rounding is the run's. :func:`recorded_pass` then runs the pass
in which the trainer itself computes the checkpoint's metrics, with the task wrapped by a recorder that keeps
every Z_t the strategy hands it:

* a full-batch strategy computes its metrics in the forward of the next epoch (the loss and the evaluation
  splits share one forward, before the update): the pass is epoch E + 1's forward and backward, without the
  optimizer step, so its metrics are those a resumed run prints for epoch E + 1;
* a strategy with an evaluation pass after its updates (``sequences``, ``hybrid``, ``memory``) computes them in
  epoch E's :meth:`~hpcdgnn.strategies.Strategy.evaluate`: the pass is that, and its metrics are
  ``summary.json``'s final ones. It yields Z_t of the splits of ``Strategy.embeds``; ``memory`` hands every
  vertex's z at the end of each split to the recorder's ``record_nodes``.

Z_t reaches the recorder in the form the strategy scores it (:class:`~hpcdgnn.tasks.base.Embeddings` of whole
snapshots, rows in place, samples); :func:`gather_step` brings step t's rows from every rank to rank 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.comm.device import memory_share
from hpcdgnn.config import load_job
from hpcdgnn.config.load import load_job_dict, override_of
from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.validate import check_dataset
from hpcdgnn.errors import ConfigError, DataError
from hpcdgnn.strategies import Strategy, get_strategy
from hpcdgnn.tasks.base import SPLITS, SampleEmbeddings, ShardedEmbeddings
from hpcdgnn.train.checkpoint import check_owner, latest_checkpoint, load_shared
from hpcdgnn.train.collective import agree, root_then_bcast
from hpcdgnn.train.loop import train_batches
from hpcdgnn.train.setup import (
    _build_model,
    _check_kernels,
    _device,
    _dtype,
    _restore,
    _setup_strategy,
    check_job,
    check_trained_job,
    dataset_fingerprint,
    threads_per_rank,
)

__all__ = ["Trained", "gather_step", "open_trained", "recorded_pass"]


@dataclass
class Trained:
    """A trained run set up on this job's ranks: its job, dataset, newest checkpoint (epoch E), model, task
    head and strategy (this rank's data read)."""

    job: JobConfig
    manifest: object
    run_dir: Path
    checkpoint: Path
    epoch: int
    model: torch.nn.Module
    task: torch.nn.Module
    params: list[torch.nn.Parameter]
    strategy: Strategy
    comm: Communicator


def open_trained(run_dir: str, comm: Communicator, command: str, overrides: Sequence[str] = (),
                 before=None) -> Trained:
    """Set up the trained model of ``run_dir`` on every rank of ``comm`` (collective).

    Args:
        run_dir: a run directory with ``config.resolved.yaml`` and a complete checkpoint.
        comm: every rank of this job.
        command: the subcommand, for messages (``embed``, ``predict``).
        overrides: ``--set`` items: ``data.path`` of a moved dataset, ``train.threads``, ``train.device``, or
            another ``strategy.name`` of the same model (the run's strategy options are dropped, ``strategy.KEY=``
            sets the new one's): the full-timeline strategies compute the same Z_t; ``sequences`` and ``hybrid``
            compute Z_t over windows (ReInc §3.4), which differ.
        before: a check run on rank 0 with the job once it is loaded, before the set-up (e.g. an output file
            that must not exist); raise a :class:`~hpcdgnn.errors.HpcdgnnError` to refuse.

    Raises:
        ConfigError, DataError: not a run directory, no checkpoint, another dataset than the run's, a stateful
            strategy on another P (one line, on every rank).
    """
    where = f"{command} {run_dir}"
    host_share = min(comm.allgather_obj(memory_share(comm, torch.device("cpu")), tag="setup"))
    kept: dict = {}

    def on_root():
        saved = Path(run_dir) / "config.resolved.yaml"
        if not saved.is_file():
            raise DataError(f"{where}: no {saved.name} there; not a run directory")
        raw = yaml.safe_load(saved.read_text(encoding="utf-8"))
        if override_of("strategy.name", list(overrides)) and isinstance(raw, dict):
            raw["strategy"] = {}  # another strategy of the same model computes the same Z_t, with its own options
        job = load_job_dict(raw, str(saved), list(overrides), check_paths=False, resolved=True)
        run_job = load_job(saved, check_paths=False, resolved=True)
        check_trained_job(run_job, job, run_dir, list(overrides), command)
        run_strategy = run_job.strategy
        kept["same_strategy"] = job.strategy == run_strategy
        root = Path(job.checkpoint.dir) if job.checkpoint.dir else Path(run_dir) / "checkpoints"
        ckpt = latest_checkpoint(root, epoch_end=True)
        if ckpt is None:
            raise DataError(f"{where}: no complete checkpoint of an epoch's end in {root} (a run writes one when it "
                            "finishes, and every checkpoint.every epochs; one within an epoch is for --resume only)")
        check_owner(None, ckpt, Path(run_dir), where)  # a shared checkpoint.dir: another run's weights
        if not (Path(job.data.path) / "manifest.json").is_file():
            raise DataError(f"{where}: data.path: {job.data.path}: no dataset there (if it moved: --set data.path=NEW)")
        if before is not None:
            before(job)
        job, manifest, _ = check_job(job, str(saved), comm.size, host_share)
        check_dataset(job.data.path, checksums=False)
        shared = kept["shared"] = load_shared(ckpt)
        recorded = shared.get("dataset_sha256")
        if recorded is not None and recorded != dataset_fingerprint(job.data.path):
            raise DataError(f"{where}: data.path: {job.data.path} is not the dataset the run trained on (its "
                            f"manifest.json differs from the one {ckpt.name} recorded)")
        saved_plan = shared.get("plan")
        made_on = getattr(saved_plan, "num_ranks", comm.size)
        if get_strategy(job.strategy.name).keeps_rank_state(job.strategy):
            if made_on != comm.size:
                raise ConfigError(f"{where}: strategy {job.strategy.name} keeps state per rank; launch {command} on "
                                  f"the run's {made_on} rank{'s' if made_on != 1 else ''}")
            if not kept["same_strategy"]:
                changed = [f"strategy.{k}" for k, v in vars(job.strategy).items() if getattr(run_strategy, k, v) != v]
                raise ConfigError(f"{where}: --set {', '.join(changed) or 'strategy'}: strategy {job.strategy.name} "
                                  f"keeps state per rank for the run's own strategy options; {command} without "
                                  "changing them")
        plan = saved_plan if kept["same_strategy"] else None
        if plan is None or plan.num_ranks != comm.size:  # the run's own plan on its P: another cut rounds otherwise
            plan = get_strategy(job.strategy.name).make_plan(manifest, comm.size, job)
        # the run's own strategy, options and P: each rank restores its own state (a collective for some)
        return job, manifest, plan, str(ckpt), kept["same_strategy"] and made_on == comm.size

    job, manifest, plan, ckpt_s, own_state = root_then_bcast(comm, on_root)
    ckpt = Path(ckpt_s)
    torch.set_num_threads(threads_per_rank(comm, job.train.threads))
    dtype = _dtype(job)
    device = agree(comm, lambda: _device(job, str(ckpt), comm))
    comm.world.init_tensor_backend(job.comm.backend, device, job.comm.timeout_s)
    model, task, params, opt = _build_model(job, str(ckpt), manifest, comm, device, dtype)
    state, mine = agree(comm, lambda: _restore(ckpt, comm, model, task, opt, kept.get("shared")))
    epoch = int(state["epoch"])
    _check_kernels(job, manifest, dtype, device, comm)
    strategy, _ = _setup_strategy(job, manifest, comm, dtype, device, plan, model, task, epoch)
    strategy.attach_optimizer(opt)
    if own_state and mine.get("strategy") is not None:  # a stateful strategy goes on
        agree(comm, lambda: strategy.load_state_dict(mine["strategy"]))
    return Trained(job, manifest, Path(run_dir), ckpt, epoch, model, task, params, strategy, comm)


#: the MPI tag of a step's rows sent to rank 0
_EMBED_TAG = 61
#: the most bytes of rows one message carries (pickled messages are limited to 2 GiB)
_PIECE_BYTES = 256 << 20


def _rows_of(vertices: np.ndarray | None, a: int, b: int, n: int) -> np.ndarray | None:
    """The vertices of rows [a, b) of a piece whose rows are ``vertices`` (None: all n, in order)."""
    if vertices is None:
        return None if (a, b) == (0, n) else np.arange(a, b)
    return vertices[a:b]


def _chunks(z: torch.Tensor) -> list[tuple[int, int]]:
    """Row ranges of ``z`` of at most :data:`_PIECE_BYTES` each."""
    per = max(1, _PIECE_BYTES // max(1, z.shape[1] * z.element_size()))
    return [(a, min(a + per, z.shape[0])) for a in range(0, z.shape[0], per)]


class _Recorder:
    """The task, keeping a detached CPU copy of each Z_t of ``steps`` it is handed: ``{t: [(vertices | None,
    rows)]}`` (None: all N rows)."""

    def __init__(self, task, steps: set[int], num_vertices: int) -> None:
        self.task, self.steps, self.n = task, steps, num_vertices
        self.rows: dict[int, list[tuple[np.ndarray | None, torch.Tensor]]] = {}
        self.width = 0

    def __getattr__(self, name: str):
        return getattr(self.task, name)

    def _keep(self, t: int, vertices: np.ndarray | None, rows: torch.Tensor) -> None:
        if t in self.steps and rows.shape[0]:
            self.rows.setdefault(t, []).append((vertices, rows.detach().to("cpu", copy=True)))

    def record_nodes(self, step: int, vertices: np.ndarray, z: torch.Tensor) -> None:
        """Rows ``z`` of ``vertices`` at ``step``, from a strategy that embeds vertices outside the task's batches
        (the event regime's memory strategy: every vertex at the end of each split)."""
        self._keep(step, vertices, z)

    def __call__(self, emb, epoch: int):
        if isinstance(emb, ShardedEmbeddings):
            shard = emb.shard
            for t, (a, b) in shard.step_rows().items():
                if t in self.steps:
                    self._keep(t, shard.vertices(t, (a, b)), emb.rows[a:b])
        elif isinstance(emb, SampleEmbeddings):
            self._keep(emb.t, np.asarray(emb.vertices), emb.rows)
        else:  # {t: Z_t} of whole snapshots
            for t, z in emb.items():
                if z.shape[0] != self.n:
                    raise RuntimeError(f"Z_{t} has {z.shape[0]} rows, not N = {self.n}")
                self._keep(t, None, z)
        return self.task(emb, epoch)


class _Frozen:
    """An optimizer that clears gradients and never steps: the training pass without its update."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = params

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        pass


def pass_steps(trained: Trained, split: str | None) -> list[int]:
    """The steps whose Z_t ``split`` scores, ascending: a name of :data:`SPLITS`, ``all`` (every split's), or None
    (every step the strategy's pass computes: ``predict --pairs`` names its own steps).

    Raises:
        ConfigError: a split, or ``all``, that needs a split's Z_t the strategy's evaluation pass does not compute
            (``sequences``' and ``hybrid``'s training steps).
    """
    ranges = trained.task.steps(trained.job.task, trained.manifest)
    has = trained.strategy.embeds
    if split is None:
        wanted = list(has)
    else:
        wanted = list(SPLITS) if split == "all" else [split]
        lacking = [s for s in wanted if s not in has and len(ranges[SPLITS.index(s)])]
        if lacking:  # "all" of a pass without the training steps was its other steps alone, silently
            every = " (every step)" if split == "all" else ""
            raise ConfigError(f"--split {split}{every}: strategy {trained.job.strategy.name} computes Z_t of the "
                              f"{' and '.join(has)} steps only (its evaluation pass; its "
                              f"{' and '.join(lacking)} steps ran with changing weights); ask for "
                              f"{' or '.join(has)} (or --set strategy.name=snapshot: Z_t over the whole timeline, "
                              "not over windows)")
        wanted = [s for s in wanted if s in has]
    steps = sorted(t for s in wanted for t in ranges[SPLITS.index(s)])
    if not steps:
        raise ConfigError(f"--split {split}: task.split {list(trained.job.task.split)} gives it no steps")
    return steps


def recorded_pass(trained: Trained, steps: list[int]) -> tuple[dict[str, float], int, _Recorder]:
    """The pass that computes the checkpoint's metrics (module docstring), recording Z_t of ``steps``.

    Returns:
        (the pass's metrics, all ranks', as the epoch line prints them; the epoch whose negatives it drew; the
        recorder, whose ``rows`` :func:`gather_step` gathers).
    """
    tr = trained
    recorder = _Recorder(tr.task, set(steps), tr.manifest.num_vertices)
    tr.task.hold_scores(True)  # the AUC's bins as the run's epochs bin them (Task.rebin)
    if tr.strategy.full_batch:
        epoch = tr.epoch + 1
        stats, _ = train_batches(tr.strategy, tr.model, recorder, tr.params, _Frozen(tr.params),
                                 tr.strategy.batches(epoch), tr.task.global_train_count())
    else:
        epoch = tr.epoch
        stats = tr.strategy.evaluate(tr.model, recorder, epoch)
    for p in tr.params:
        p.grad = None
    # the width of Z_t, from any rank that computed one (a rank may score nothing)
    recorder.width = int(tr.comm.allreduce_array(
        [max((z.shape[1] for rows in recorder.rows.values() for _, z in rows), default=0)], op="max", tag="embed")[0])
    metrics = tr.task.metrics(tr.comm.allreduce_array(tr.task.rebin(tr.comm, stats)[0], tag="metrics"))
    return metrics, epoch, recorder


def gather_step(recorder: _Recorder, comm: Communicator, t: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Z_t from every rank on rank 0 (collective): ``(Z (N, F), computed (N,) bool)``, rows no rank computed
    NaN and False; None on other ranks."""
    mine = [(_rows_of(v, a, b, z.shape[0]), z[a:b].numpy()) for v, z in recorder.rows.pop(t, [])
            for a, b in _chunks(z)]
    if comm.rank != 0:  # point to point: only rank 0 holds the step; pieces below MPI's 2 GiB message size
        comm.wait_all([comm.isend_obj(len(mine), 0, _EMBED_TAG, "embed")], "embed")
        for piece in mine:
            comm.wait_all([comm.isend_obj(piece, 0, _EMBED_TAG, "embed")], "embed")
        return None
    pieces = list(mine)
    for r in range(1, comm.size):
        pieces += [comm.recv_obj(r, _EMBED_TAG, "embed") for _ in range(comm.recv_obj(r, _EMBED_TAG, "embed"))]
    dtype = next((z.dtype for _, z in pieces), np.float64)
    z_t = np.full((recorder.n, recorder.width), np.nan, dtype=dtype)
    computed = np.zeros(recorder.n, dtype=bool)
    for vertices, rows in pieces:
        where = slice(None) if vertices is None else vertices
        z_t[where] = rows
        computed[where] = True
    return z_t, computed
