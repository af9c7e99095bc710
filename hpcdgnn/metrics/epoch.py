"""One epoch's record: the time split, bytes by tag, memory peaks — measured on every rank, reported once.

Per epoch, after the last batch, every rank joins one all-reduce of the task's
metric sums, one all-gather of its time split and peaks (the pre-emption flag
rides as a column of it, so every rank decides alike whether to stop) and one
all-gather of its training bytes by communicator tag. Rank 0 appends the record
to ``metrics.jsonl`` and prints one line (loss, headline metric, time split into
load / compute / communication, bytes sent).

Times: ``epoch`` is the wall time of all batches (kernels included on a GPU);
``comm`` the seconds training communication was under way (every tag but setup,
metrics, barrier, checkpoint): the time inside blocking collectives, and for
non-blocking ones (``strategy.overlap_chunks``) the time from their post to their
completion, exchanges under way at once counted once (the union of their intervals:
gradient buckets in flight during the backward redistribution's chunks), so that it
never exceeds ``epoch``; ``comm_by_tag``'s ``seconds`` are each tag's own; ``comm_exposed``
the part of ``comm`` this rank spent blocked inside MPI calls — waiting, not hidden behind
computation (equal to ``comm`` without overlap); ``comm_late`` the part of ``comm_exposed`` spent before the last rank
had reached the exchange — waiting for a slower rank, which no overlap can hide
(:mod:`hpcdgnn.metrics.waits`): summed over the tags whose exchanges are all
collectives of every rank (``comm_by_tag`` gives those a ``late``; a tag with
point-to-point or group exchanges — pss's pipeline, DistTGL's groups, the sequences
strategy's fetches — has none), absent from an epoch whose exchanges the ranks did
not record alike; ``load`` the seconds the strategy spent reading or moving input data;
``compute`` the rest, ``epoch - load - comm_exposed`` (communication hidden behind
computation counts in both ``compute`` and ``comm``). Each is reported as the
slowest rank's and min / mean / max over ranks.

With ``debug.trace_exchanges`` each rank also appends, per epoch, one line to
``trace/exchanges.rank<r>.jsonl`` in the run directory: every collective of all
ranks it made, in order, with its tag, its arrival (seconds after the epoch began),
the seconds it was blocked in it and, of them, the late ones (null where the ranks'
records did not match): where an epoch's exposed time went, exchange by exchange.
Every such collective is there, of training tags or not; ``comm_late`` sums the
training tags whose calls were all collectives of every rank.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from hpcdgnn.comm.exchange_log import ExchangeLog
from hpcdgnn.metrics.timers import TIME_SPLIT, is_train_tag, summarize_over_ranks, union_seconds
from hpcdgnn.metrics.waits import last_arrivals

__all__ = ["EpochRecorder", "fmt_metric"]

_MiB = 1024.0 * 1024.0


def fmt_metric(v: float | None) -> str:
    """A loss or metric for a log line: '-' where its split has no examples (None or NaN)."""
    return "-" if v is None or not np.isfinite(v) else f"{v:.4f}"


class EpochRecorder:
    """Measures epochs of one run and turns them into records (see the module docstring).

    Args:
        comm: the communicator.
        strategy: the run's strategy (its :meth:`~hpcdgnn.strategies.Strategy.usage` counters and epoch report).
        task: the task head (turns metric sums into metrics).
        device: this rank's device (GPU peak memory when CUDA).
        warmup_epochs: epochs flagged ``warmup``.
        resumed_at: the checkpoint epoch a resumed run starts after (0 = a fresh run); the first
            epoch after it runs on cold caches and buffers, like epoch 1, and is flagged too.
        trace: this rank's exchange trace file (``debug.trace_exchanges``; see the module docstring), or None.
    """

    def __init__(self, comm, strategy, task, device: torch.device, warmup_epochs: int, resumed_at: int,
                 trace: Path | None = None) -> None:
        self.comm, self.strategy, self.task, self.device = comm, strategy, task, device
        self.warmup_epochs, self.resumed_at = warmup_epochs, resumed_at
        self.trace = trace
        if trace is not None:
            trace.parent.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def trace_file(run_dir: Path, rank: int) -> Path:
        """Rank ``rank``'s exchange trace in ``run_dir`` (``debug.trace_exchanges``)."""
        return run_dir / "trace" / f"exchanges.rank{rank:05d}.jsonl"

    def _trace(self, epoch: int, exchanges: ExchangeLog, blocked: np.ndarray, late: np.ndarray | None) -> None:
        """Append this epoch's exchanges to the trace: per exchange [tag index, arrival after the epoch's
        start, seconds blocked, of them late (null: unknown)], in seconds rounded to the microsecond."""
        arrival = exchanges.arrivals - self._t0
        late_or_none = [None] * len(blocked) if late is None else [round(float(w), 6) for w in late]
        rows = [[int(k), round(float(a), 6), round(float(b), 6), w]
                for k, a, b, w in zip(exchanges.codes, arrival, blocked, late_or_none, strict=True)]
        line = {"epoch": epoch, "rank": self.comm.rank, "tags": exchanges.names, "exchanges": rows}
        with self.trace.open("a") as f:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")

    def begin(self) -> None:
        """Start an epoch: counters, the strategy's load clock, the GPU peak, the wall clock."""
        self._bytes_before = self.comm.stats.snapshot()
        self._usage_before = self.strategy.usage()
        self.comm.stats.keep_exchanges = True  # for comm_late (and the trace) at the end
        self.comm.stats.take_exchanges()  # this epoch's exchanges only
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self._t0 = time.perf_counter()

    def end(self, epoch: int, stats: np.ndarray, grad_norm: float, activation_peak: float,
            stop_raised: bool, checkpoint_due: bool = False) -> tuple[dict, bool, bool]:
        """Finish the epoch (collective): the record, whether any rank was asked to stop, and whether
        any rank finds a wall-time checkpoint due (the flags ride on the gather every epoch makes anyway,
        so all ranks take the same decision).
        """
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # epoch time includes the kernels, not just their launch
        self.comm.exchange.complete_deferred()  # e.g. an evaluation pass's halo: nothing in flight across epochs
        wall = time.perf_counter() - self._t0
        spans = self.comm.stats.take_spans()  # before the collectives below
        exchanges, unmatched = self.comm.stats.take_exchanges()
        usage = self.strategy.usage()
        transfer = usage.transfer_bytes - self._usage_before.transfer_bytes
        train_tags = {k: v for k, v in self.comm.stats.delta(self._bytes_before).items() if is_train_tag(k)}
        # tags under way at once count once (a tag's own concurrent exchanges already do in its seconds)
        comm_s = union_seconds([(a, b) for tag, a, b in spans if is_train_tag(tag)])
        exposed = sum(v.exposed for v in train_tags.values())
        load = usage.load_seconds - self._usage_before.load_seconds
        split = [wall, load, max(0.0, wall - load - exposed), comm_s]

        metrics = self.task.metrics(self.comm.allreduce_array(stats))
        blocked, each_late = exchanges.each(last_arrivals(self.comm, exchanges))  # late None on every rank alike
        late = None if each_late is None else exchanges.per_tag(each_late)
        if self.trace is not None:
            self._trace(epoch, exchanges, blocked, each_late)
        gpu_peak = float(torch.cuda.max_memory_allocated(self.device)) if self.device.type == "cuda" else 0.0
        per_rank_all = self.comm.gather_array([*split, float(activation_peak), float(transfer), gpu_peak,
                                               float(stop_raised), float(checkpoint_due), exposed])
        by_tag: dict[str, int] = {}
        time_by_tag: dict[str, np.ndarray] = {}  # per tag: per-rank [seconds, exposed, late (NaN: unknown)]
        # a tag's late time is known where this rank's calls of it were all exchanges of every rank
        gathered = self.comm.allgather_obj(
            {k: (v.bytes_sent, v.seconds, v.exposed, late.get(k, 0.0) if late is not None and k not in unmatched
                 else None) for k, v in train_tags.items()}, tag="metrics")
        for rank, rank_tags in enumerate(gathered):
            for k, (b, sec, exp, lat) in rank_tags.items():
                by_tag[k] = by_tag.get(k, 0) + b
                time_by_tag.setdefault(k, np.zeros((len(gathered), 3)))[rank] = (sec, exp, np.nan if lat is None
                                                                                   else lat)
        # known on every rank (a rank without the tag waited 0 in it), else no figure for the tag
        known = {k for k, v in time_by_tag.items() if not np.isnan(v[:, 2]).any()}
        late_per_rank = (None if late is None else
                         np.sum([time_by_tag[k][:, 2] for k in known], axis=0) if known else np.zeros(len(gathered)))
        record = self._record(epoch, metrics, grad_norm, per_rank_all, by_tag, late_per_rank)
        # where the communication time goes, tag by tag: under way (seconds) and blocked (exposed),
        # mean over ranks, and the most any rank was blocked; of that, the part before the last rank
        # arrived (late: waiting on a slower rank), where it is known
        record["comm_by_tag"] = {k: {"seconds": float(v[:, 0].mean()), "exposed": float(v[:, 1].mean()),
                                     "exposed_max": float(v[:, 1].max()),
                                     **({"late": float(v[:, 2].mean()), "late_max": float(v[:, 2].max())}
                                        if late is not None and k in known else {})}
                                 for k, v in sorted(time_by_tag.items())}
        record.update(self.strategy.report(epoch, metrics["train_loss"]))
        return record, bool(per_rank_all[:, 7].max() > 0), bool(per_rank_all[:, 8].max() > 0)

    def _record(self, epoch: int, metrics: dict, grad_norm: float, per_rank_all: np.ndarray,
                by_tag: dict[str, int], late_per_rank: np.ndarray | None) -> dict:
        per_rank = per_rank_all[:, :4]
        times = summarize_over_ranks(per_rank)
        waits = {"comm_exposed": per_rank_all[:, 9], **({} if late_per_rank is None else {"comm_late": late_per_rank})}
        for key, v in waits.items():
            times[key] = {"min": float(v.min()), "mean": float(v.mean()), "max": float(v.max())}
            times["slowest"][key] = float(v[times["slowest_rank"]])
        record = {
            "epoch": epoch,
            "warmup": epoch <= self.warmup_epochs or (self.resumed_at > 0 and epoch == self.resumed_at + 1),
            "loss": metrics["train_loss"],
            **metrics,
            "grad_norm": grad_norm,
            "activation_peak_bytes": int(per_rank_all[:, 4].max()),
            "time": {k: times[k] for k in (*TIME_SPLIT, *waits)},
            "slowest_rank": times["slowest_rank"],
            "slowest": times["slowest"],
            "per_rank": {**{k: per_rank[:, i].tolist() for i, k in enumerate(TIME_SPLIT)},
                         **{k: v.tolist() for k, v in waits.items()}},
            "bytes_sent": sum(by_tag.values()),
            "bytes_by_tag": dict(sorted(by_tag.items())),
            # host -> device snapshot bytes summed over ranks (S3); 0 when the inputs stay resident
            "transfer_bytes": int(per_rank_all[:, 5].sum()),
        }
        if self.device.type == "cuda":
            record["gpu_peak_bytes"] = int(per_rank_all[:, 6].max())
        return record

    def line(self, record: dict) -> str:
        """The epoch's log line (rank 0 prints it)."""
        s, metric = record["slowest"], self.task.metric
        return (
            f"epoch {record['epoch']:4d}  loss {fmt_metric(record['train_loss'])}  "
            f"val_{metric} {fmt_metric(record['val_' + metric])}  "
            f"time {s['epoch']:.3f}s (load {s['load']:.3f} comp {s['compute']:.3f} comm {s['comm']:.3f}"
            + (f" exposed {s['comm_exposed']:.3f}" if abs(s["comm_exposed"] - s["comm"]) > 5e-4 else "") + ")  "
            f"sent {record['bytes_sent'] / _MiB:.2f} MiB"
            + (f"  transfer {record['transfer_bytes'] / _MiB:.2f} MiB" if record["transfer_bytes"] else "")
        )
