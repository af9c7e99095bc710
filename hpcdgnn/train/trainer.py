"""The training loop: small, strategy-agnostic, exact (STYLE G5, G10, G11).

``run_training`` does, in order:

1. rank 0 loads and validates the job YAML, reads the manifest, computes the
   plan and creates the run directory; the result (or the user error) is
   broadcast, so a bad input ends every rank with the same one-line message;
2. every rank builds the model and task head from ``train.seed``, and rank 0's
   parameters are broadcast (identical start whatever the node);
3. the strategy reads this rank's shards and precomputes (S4);
4. per epoch: forward (strategy) -> loss sum / global count (task) ->
   backward (strategy) -> gradient all-reduce (strategy) -> Adam; then one
   all-reduce of metric sums and one all-gather of the time split, and rank 0
   prints one line and appends one JSON object;
5. at the epochs ``checkpoint.every`` names, at the end, and when a pre-emption
   signal reached any rank (a column of that same all-gather, so every rank
   decides alike), every rank writes its part of a checkpoint; after a
   pre-emption the run stops with ``EXIT_PREEMPTED``. ``resume`` continues a
   run from its newest checkpoint, bit for bit.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import resource
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hpcdgnn import preemption
from hpcdgnn.comm.communicator import Communicator
from hpcdgnn.comm.device import select_device
from hpcdgnn.config import job_to_dict, load_job
from hpcdgnn.config.schema import JobConfig
from hpcdgnn.data.manifest import Manifest, load_manifest
from hpcdgnn.data.shard_reader import ShardReader
from hpcdgnn.data.validate import check_dataset
from hpcdgnn.errors import ConfigError, DataError
from hpcdgnn.metrics import RunDirectory, choose_run_dir, configure_logging, is_train_tag, summarize_over_ranks
from hpcdgnn.metrics.memory import SavedTensorMeter
from hpcdgnn.nn.models import build_model
from hpcdgnn.strategies import StrategyContext, get_strategy
from hpcdgnn.tasks import build_task
from hpcdgnn.train.checkpoint import CheckpointManager, latest_checkpoint, load_state, restore_rng
from hpcdgnn.train.collective import agree, collective_error, root_then_bcast

__all__ = ["run_training", "TrainResult"]

_MiB = 1024.0 * 1024.0


@dataclass
class TrainResult:
    """What a finished run returns (rank 0 has the run directory; all ranks the losses)."""

    run_dir: Path
    losses: list[float]
    metrics: list[dict]
    preempted: bool = False


def _threads(comm: Communicator, requested: int) -> int:
    """Torch threads per rank: the request, else the cores this rank may use divided by the ranks on its node."""
    if requested > 0:
        return requested
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = os.cpu_count() or 1
    if affinity < cores:  # the launcher bound this rank to a core set: use exactly that
        return max(1, affinity)
    return max(1, cores // comm.local_rank_size()[1])


def _reuse_host_memory() -> bool:
    """Raise glibc's mmap and trim thresholds so freed tensors stay in the heap for reuse.

    By default glibc serves every allocation above 32 MiB with a fresh mmap and
    returns it on free, so each epoch's (T, N, F) activations fault in new
    zeroed pages: measured on this project's 2-core CI machine, allocating and
    zeroing 138 MB took 50 ms that way and 6 ms with reuse. Returns whether it
    took effect (only on glibc).
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, 1 << 40))
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
    return device


class _FaultInjector:
    """The task, except that on ``debug.fail_rank`` in ``debug.fail_epoch`` it raises mid-epoch:
    after the forward pass (whose exchanges every rank joined), before the backward pass, where the
    other ranks are about to wait in a collective. Tests use it to check the whole job aborts.
    """

    def __init__(self, task, rank: int, debug) -> None:
        self.task, self.rank, self.debug = task, rank, debug

    def __call__(self, emb, epoch: int):
        if self.rank == self.debug.fail_rank and epoch == self.debug.fail_epoch:
            raise RuntimeError(f"debug.fail_rank: fault injected on rank {self.rank} in epoch {epoch}")
        return self.task(emb, epoch)


_RESUMABLE = ("train.epochs", "train.threads", "train.device", "data.validate", "comm.", "output.", "checkpoint.", "debug.")


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _resume_job(resume: str, job_path: str | None, overrides: list[str]) -> tuple[JobConfig, Path, Path]:
    """Job, run directory and newest checkpoint of ``run --resume RUNDIR``.

    The job is the run's saved ``config.resolved.yaml`` with ``--set`` applied, or
    the given job file, which may differ from the saved one only in keys that do
    not change the computation (``train.epochs`` to train longer, threads, device,
    backend, output, checkpoint, debug).
    """
    run_dir = Path(resume)
    saved = run_dir / "config.resolved.yaml"
    if not saved.is_file():
        raise ConfigError(f"--resume {resume}: no {saved.name} there; not a run directory")
    job = load_job(job_path or saved, overrides)
    if job_path:
        before, after = _flatten(job_to_dict(load_job(saved))), _flatten(job_to_dict(job))
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key) and not key.startswith(_RESUMABLE):
                raise ConfigError(
                    f"{job_path}: {key}: is {after.get(key)!r} but the run in {resume} used {before.get(key)!r}; "
                    "a resumed run must compute the same thing"
                )
    root = Path(job.checkpoint.dir) if job.checkpoint.dir else run_dir / "checkpoints"
    ckpt = latest_checkpoint(root)
    if ckpt is None:
        raise ConfigError(f"--resume {resume}: no complete checkpoint in {root}")
    done = int(json.loads((ckpt / "COMPLETE").read_text())["epoch"])
    if done >= job.train.epochs:
        raise ConfigError(
            f"--resume {resume}: the run already finished its {job.train.epochs} epochs "
            f"(checkpoint {ckpt.name}); train longer with --set train.epochs=N"
        )
    return job, run_dir, ckpt


def _truncate_metrics(path: Path, last_epoch: int) -> None:
    """Keep the metrics of epochs up to the checkpoint (atomically); later ones are re-run."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["epoch"] <= last_epoch]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in keep))
    os.replace(tmp, path)


def _checksum(params: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for p in params:
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _fmt(v: float) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:.4f}"


def run_training(
    job_path: str | None,
    overrides: list[str],
    output: str | None,
    comm: Communicator,
    resume: str | None = None,
) -> TrainResult:
    """Run a job (see module docstring), or continue one from ``resume``'s newest checkpoint; every rank calls this."""
    log = configure_logging(comm.rank, comm.size)
    stop = preemption.install()  # already installed by __main__; here for library callers

    def _prepare() -> tuple[JobConfig, Manifest, object, str, str | None]:
        if resume:
            job, run_dir, ckpt = _resume_job(resume, job_path, overrides)
        else:
            job, run_dir, ckpt = load_job(job_path, overrides), None, None
        manifest = load_manifest(job.data.path)
        check_dataset(job.data.path, checksums=job.data.validate == "checksum")
        plan = get_strategy(job.strategy.name).make_plan(manifest, comm.size, job)
        if run_dir is None:  # created only once the inputs are known good: no empty run directories
            run_dir = choose_run_dir(output, job.output.dir, Path(job_path).stem)
        rd = RunDirectory(run_dir)
        rd.save_config(job_to_dict(job))
        plan.save(run_dir / "plan.json")
        rd.close()
        return job, manifest, plan, str(run_dir), None if ckpt is None else str(ckpt)

    job, manifest, plan, run_dir_s, ckpt_s = root_then_bcast(comm, _prepare)
    run_dir = Path(run_dir_s)
    job_path = job_path or str(run_dir / "config.resolved.yaml")
    if job.train.reuse_memory:
        _reuse_host_memory()
    threads = _threads(comm, job.train.threads)
    torch.set_num_threads(threads)
    dtype = torch.float64 if job.train.dtype == "float64" else torch.float32
    device = agree(comm, lambda: _device(job, job_path, comm))
    comm.init_tensor_backend(job.comm.backend, device, job.comm.timeout_s)

    # identical start on every rank: seeded init, then rank 0's values broadcast
    torch.manual_seed(job.train.seed)
    m = job.model
    model = build_model(m.name, manifest.num_features, m.hidden, m.layers, m.window).to(device, dtype)
    task = agree(comm, lambda: build_task(job.task, manifest, model.out_features, job.train.seed)).to(device, dtype)
    params = [p for mod in (model, task) for p in mod.parameters()]
    for p in params:
        comm.bcast_(p.data, root=0)
    opt = torch.optim.Adam(params, lr=job.train.lr)
    start = 0
    if ckpt_s is not None:  # every rank reads the shared state and its own RNG state
        state, mine = agree(comm, lambda: load_state(Path(ckpt_s), comm.rank, comm.size))
        model.load_state_dict(state["model"])
        task.load_state_dict(state["task"])
        opt.load_state_dict(state["optimizer"])
        restore_rng(mine["rng"])
        start = int(state["epoch"])
    checksum = _checksum(params) if comm.rank == 0 else ""  # logged and saved by rank 0 only

    strategy = get_strategy(job.strategy.name)(StrategyContext(job, manifest, comm, dtype, job.data.path, device))
    reader = ShardReader(job.data.path, manifest)
    t_setup = time.perf_counter()

    def _setup() -> None:
        scored = strategy.setup(plan, model, reader)
        task.setup(reader, scored, comm)

    agree(comm, _setup)
    reader.close()
    setup_seconds = time.perf_counter() - t_setup
    setup_transfer = strategy.transfer_stats()[0]
    if ckpt_s is not None:
        strategy.load_state_dict(mine["strategy"])
    train_count = task.global_train_count()
    if train_count <= 0:  # every rank computed the same count, so every rank raises here
        raise collective_error(
            DataError(f"{job_path}: task.split leaves no training examples (too few snapshots or no labels)")
        )

    nparams = sum(p.numel() for p in params)
    log.info(
        f"hpcdgnn: {m.name} x {job.task.name}, strategy {job.strategy.name}, P={comm.size}, "
        f"N={manifest.num_vertices} T={manifest.num_snapshots} F={manifest.num_features}, "
        f"{nparams} parameters (checksum {checksum}), {job.train.dtype}, {threads} thread(s)/rank, "
        f"device {device}, backend {job.comm.backend}, transfer {job.train.transfer}"
    )
    log.info(f"run directory: {run_dir}   setup {setup_seconds:.2f}s (read + normalise + precompute Ã·X)")

    if start:
        log.info(f"resumed from {ckpt_s} after epoch {start}")
    if comm.rank == 0 and start:
        _truncate_metrics(run_dir / "metrics.jsonl", start)  # epochs after the checkpoint are re-run
    rd = RunDirectory(run_dir) if comm.rank == 0 else None
    ckpt_root = Path(job.checkpoint.dir) if job.checkpoint.dir else run_dir / "checkpoints"
    checkpoints = CheckpointManager(ckpt_root, job.checkpoint.keep, comm)
    task_fn = _FaultInjector(task, comm.rank, job.debug) if job.debug.fail_rank >= 0 else task
    preempted = False
    losses: list[float] = []
    records: list[dict] = []
    totals = np.zeros(4)
    meter = SavedTensorMeter()  # activation bytes held for backward, independent of the allocator
    activation_peak = 0
    for epoch in range(start + 1, job.train.epochs + 1):
        before = comm.stats.snapshot()
        transfer_before = strategy.transfer_stats()[0]
        strategy.load_seconds = 0.0
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        meter.reset_peak()
        with meter:
            stats = strategy.step(model, task_fn, epoch, 1.0 / train_count)
        activation_peak = max(activation_peak, meter.peak)
        strategy.sync_gradients(params)
        # the summed gradient is the same on every rank: its norm checks exactness beyond the loss,
        # which Adam's scale-free update would not reveal
        grad_norm = float(torch.sqrt(sum(p.grad.detach().double().pow(2).sum() for p in params)))
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # epoch time includes the kernels, not just their launch
        wall = time.perf_counter() - t0
        transfer = strategy.transfer_stats()[0] - transfer_before
        train_tags = {k: v for k, v in comm.stats.delta(before).items() if is_train_tag(k)}
        comm_s = sum(v.seconds for v in train_tags.values())
        load = strategy.load_seconds
        split = [wall, load, max(0.0, wall - load - comm_s), comm_s]

        # metrics: one all-reduce of sums, one all-gather of times, one of bytes per tag
        metrics = task.metrics(comm.allreduce_array(stats))
        gpu_peak = float(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0.0
        # the pre-emption flag rides on this all-gather: every rank sees the same column, so all
        # stop at this same epoch boundary
        per_rank_all = comm.gather_array([*split, float(meter.peak), float(transfer), gpu_peak, float(stop.raised)])
        per_rank = per_rank_all[:, :4]
        by_tag: dict[str, int] = {}
        for rank_tags in comm.allgather_obj({k: v.bytes_sent for k, v in train_tags.items()}, tag="metrics"):
            for k, b in rank_tags.items():
                by_tag[k] = by_tag.get(k, 0) + b
        times = summarize_over_ranks(per_rank)
        bytes_sent = sum(by_tag.values())
        losses.append(metrics["train_loss"])
        record = {
            "epoch": epoch,
            # the first epoch after a resume runs on cold caches and buffers, like epoch 1
            "warmup": epoch <= job.train.warmup_epochs or (start > 0 and epoch == start + 1),
            "loss": metrics["train_loss"],
            **metrics,
            "grad_norm": grad_norm,
            "activation_peak_bytes": int(per_rank_all[:, 4].max()),
            "time": {k: times[k] for k in ("epoch", "load", "compute", "comm")},
            "slowest_rank": times["slowest_rank"],
            "slowest": times["slowest"],
            "per_rank": {k: per_rank[:, i].tolist() for i, k in enumerate(("epoch", "load", "compute", "comm"))},
            "bytes_sent": bytes_sent,
            "bytes_by_tag": dict(sorted(by_tag.items())),
            # host -> device snapshot bytes summed over ranks (S3); 0 when the inputs stay resident
            "transfer_bytes": int(per_rank_all[:, 5].sum()),
        }
        if device.type == "cuda":
            record["gpu_peak_bytes"] = int(per_rank_all[:, 6].max())
        record.update(strategy.end_epoch(epoch, metrics["train_loss"]))
        records.append(record)
        totals += np.asarray([times["slowest"][k] for k in ("epoch", "load", "compute", "comm")])
        if rd is not None:
            rd.append_epoch(record)
            if epoch % job.output.log_every == 0 or epoch == job.train.epochs:
                s = times["slowest"]
                log.info(
                    f"epoch {epoch:4d}  loss {_fmt(metrics['train_loss'])}  "
                    f"val_{task.metric} {_fmt(metrics['val_' + task.metric])}  "
                    f"time {s['epoch']:.3f}s (load {s['load']:.3f} comp {s['compute']:.3f} comm {s['comm']:.3f})  "
                    f"sent {bytes_sent / _MiB:.2f} MiB"
                    + (f"  transfer {record['transfer_bytes'] / _MiB:.2f} MiB" if record["transfer_bytes"] else "")
                )
        preempted = bool(per_rank_all[:, 7].max() > 0)
        every = job.checkpoint.every
        if preempted or epoch == job.train.epochs or (every and epoch % every == 0):
            shared = {
                "epoch": epoch,
                "model": model.state_dict(),
                "task": task.state_dict(),
                "optimizer": opt.state_dict(),
                "plan": plan,
                "config": job_to_dict(job),
            }
            where = checkpoints.save(epoch, shared if comm.rank == 0 else {}, strategy.state_dict())
            log.info(f"checkpoint: {where}")
        if preempted:
            log.info(f"pre-empted ({stop.name}): stopped after epoch {epoch}; resume with --resume {run_dir}")
            break

    # summary: final metrics, totals, per-rank memory, environment
    gpu_max = float(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0.0
    mem = comm.gather_array(
        [
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0,
            strategy.engine_bytes(),
            activation_peak,
            strategy.host_bytes(),
            gpu_max,
            float(setup_transfer),
        ]
    )
    steady = [r for r in records if not r["warmup"]] or records
    if rd is not None:
        import mpi4py

        rd.save_summary(
            {
                "job": str(job_path),
                "status": "preempted" if preempted else "completed",
                "resumed_from_epoch": start,
                "final": records[-1] if records else None,
                "epochs": len(records),
                "totals": {
                    "seconds": dict(zip(("epoch", "load", "compute", "comm"), totals.tolist())),
                    "bytes_sent": int(sum(r["bytes_sent"] for r in records)),
                    "setup_seconds": setup_seconds,
                },
                "transfer": {
                    "mode": job.train.transfer,
                    "setup_bytes": int(mem[:, 5].sum()),
                    "epoch_bytes": int(sum(r["transfer_bytes"] for r in records)),
                },
                "transfer_bytes": int(mem[:, 5].sum()) + int(sum(r["transfer_bytes"] for r in records)),
                "steady_epoch_seconds": {
                    "median": float(np.median([r["time"]["epoch"]["max"] for r in steady])),
                    "mean": float(np.mean([r["time"]["epoch"]["max"] for r in steady])),
                },
                "memory": {
                    "peak_rss_bytes": [int(v) for v in mem[:, 0]],
                    "engine_bytes": [int(v) for v in mem[:, 1]],
                    "activation_peak_bytes": [int(v) for v in mem[:, 2]],
                    "engine_peak_bytes": [int(v) for v in mem[:, 1] + mem[:, 2]],
                    "host_payload_bytes": [int(v) for v in mem[:, 3]],
                    **({"gpu_max_allocated_bytes": [int(v) for v in mem[:, 4]]} if device.type == "cuda" else {}),
                },
                "parameters": {"count": nparams, "initial_checksum": checksum},
                "environment": {
                    "num_ranks": comm.size,
                    "threads_per_rank": threads,
                    "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
                    "comm_backend": job.comm.backend,
                    "dtype": job.train.dtype,
                    "mpi_library": comm.library_version(),
                    "mpi4py": mpi4py.__version__,
                    "torch": torch.__version__,
                    "python": platform.python_version(),
                    "host": socket.gethostname(),
                },
            }
        )
        rd.close()
        if not preempted:
            log.info(f"done: {len(records)} epochs, results in {run_dir}")
    return TrainResult(run_dir, losses, records, preempted)
