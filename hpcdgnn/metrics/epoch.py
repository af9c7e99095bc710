"""One epoch's record: the time split, bytes by tag, memory peaks — from every rank, reported once.

After the last batch every rank joins one all-reduce of metric sums, one all-gather of its time split and
peaks (the stop flags ride in it, so all ranks decide alike) and one of its bytes by tag; rank 0 appends the
record to ``metrics.jsonl`` and prints one line. Times, each as the slowest rank's and min / mean / max:

* ``epoch``: wall time of all batches; ``load``: reading or moving input data;
* ``comm``: the union of training communication intervals (post to completion), never above ``epoch``;
* ``comm_exposed``: the part of ``comm`` spent blocked in MPI calls (not hidden behind computation);
* ``comm_late``: the part of ``comm_exposed`` before the last rank arrived (:mod:`hpcdgnn.metrics.waits`),
  only for tags of all-rank collectives;
* ``compute``: ``epoch - load - comm_exposed``.

An epoch ends when its last rank has finished its batches and its evaluation: a barrier and the all-reduce of
the metric sums close it. A rank's wait in the barrier (for a rank that evaluates alone, or whose batches ran
longer after the last training collective) and the sums' transfer are that rank's ``epoch_end`` communication —
exposed; late only the wait (link prediction's sums carry 2 AUC histograms a split) — though their bytes,
the metrics', are not training traffic.

``debug.trace_exchanges`` appends each epoch's collectives to ``trace/exchanges.rank<r>.jsonl``.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from hpcdgnn.comm.exchange_log import ExchangeLog
from hpcdgnn.metrics.timers import TIME_SPLIT, is_train_tag, is_wait_tag, summarize_over_ranks, union_seconds
from hpcdgnn.metrics.waits import last_arrivals

__all__ = ["EPOCH_END", "EpochRecorder", "fmt_metric", "run_gpu_peak"]

#: ``comm_by_tag``'s entry for the wait in the epoch's closing all-reduce (module docstring)
EPOCH_END = "epoch_end"

_MiB = 1024.0 * 1024.0

#: per device, the highest CUDA peak of this run's epochs before the last reset (:func:`_reset_gpu_peak`)
_gpu_peaks: dict[str, float] = {}


def _reset_gpu_peak(device: torch.device) -> None:
    """Restart the CUDA peak for the next epoch's record, keeping the run's peak so far: each epoch's
    ``gpu_peak_bytes`` is its own, while ``summary.json`` reports the whole run's (:func:`run_gpu_peak`), not the
    last epoch's.

    Args:
        device: the rank's CUDA device.
    """
    _gpu_peaks[str(device)] = max(_gpu_peaks.get(str(device), 0.0), float(torch.cuda.max_memory_allocated(device)))
    torch.cuda.reset_peak_memory_stats(device)


def run_gpu_peak(device: torch.device) -> float:
    """The most GPU memory allocated on ``device`` in this attempt: the set-up's and every epoch's peak (folded in at
    each reset) and the one since the last reset (the last epoch and after).

    Args:
        device: the rank's CUDA device.
    """
    return max(_gpu_peaks.get(str(device), 0.0), float(torch.cuda.max_memory_allocated(device)))


def fmt_metric(v: float | None) -> str:
    """A loss or metric for a log line: '-' where its split has no examples (None or NaN)."""
    return "-" if v is None or not np.isfinite(v) else f"{v:.4f}"


class EpochRecorder:
    """Measures epochs of one run and turns them into records.

    ``resumed_at``: the epoch a resumed run starts after (0 within the first; None: fresh); the first epoch
    after it is flagged ``warmup`` too (cold caches). ``trace``: this rank's exchange trace file, or None.
    """

    def __init__(self, comm, strategy, task, device: torch.device, warmup_epochs: int, resumed_at: int | None,
                 trace: Path | None = None) -> None:
        self.comm, self.strategy, self.task, self.device = comm, strategy, task, device
        self.warmup_epochs, self.resumed_at = warmup_epochs, resumed_at
        self.trace = trace
        _gpu_peaks.pop(str(device), None)  # a new run (tests run several in one process): its own peak
        if trace is not None:
            trace.parent.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def trace_file(run_dir: Path, rank: int) -> Path:
        """Rank ``rank``'s exchange trace in ``run_dir`` (``debug.trace_exchanges``)."""
        return run_dir / "trace" / f"exchanges.rank{rank:05d}.jsonl"

    def _trace(self, epoch: int, exchanges: ExchangeLog, blocked: np.ndarray, late: np.ndarray | None,
               closing: tuple[float, float, float] | None) -> None:
        """Append this epoch's exchanges to the trace: [tag index, arrival, blocked, late] seconds each; the
        epoch's close (arrival, seconds, of them the wait for the last rank), at P > 1, last, as ``epoch_end``."""
        arrival = exchanges.arrivals - self._t0
        late_or_none = [None] * len(blocked) if late is None else [round(float(w), 6) for w in late]
        rows = [[int(k), round(float(a), 6), round(float(b), 6), w]
                for k, a, b, w in zip(exchanges.codes, arrival, blocked, late_or_none, strict=True)]
        names = list(exchanges.names)
        if closing is not None:
            names.append(EPOCH_END)
            rows.append([len(names) - 1, round(closing[0] - self._t0, 6), round(closing[1], 6),
                         None if late is None else round(closing[2], 6)])
        line = {"epoch": epoch, "rank": self.comm.rank, "tags": names, "exchanges": rows}
        with self.trace.open("a") as f:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")

    def begin(self, kept_scores=None) -> None:
        """Start an epoch: counters, the strategy's load clock, the GPU peak, the wall clock; the task keeps its
        scores from here on, after ``kept_scores`` (those of the batches before a resume within the epoch)."""
        self._bytes_before = self.comm.stats.snapshot()
        self._usage_before = self.strategy.usage()
        self.comm.stats.keep_exchanges = True  # for comm_late (and the trace) at the end
        self.comm.stats.take_exchanges()
        self.task.hold_scores(True, kept_scores)  # the AUC's bins over the epoch's own logits (Task.rebin)
        if self.device.type == "cuda":
            _reset_gpu_peak(self.device)
        self._t0 = time.perf_counter()

    def end(self, epoch: int, stats: np.ndarray, grad_norm: float, activation_peak: float,
            stop_raised: bool, checkpoint_due: bool = False) -> tuple[dict, bool, bool]:
        """Finish the epoch (collective): the record, whether any rank must stop, whether a checkpoint is due."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # epoch time includes the kernels, not just their launch
        self.comm.exchange.complete_deferred()  # nothing in flight across epochs
        wall = time.perf_counter() - self._t0
        spans = self.comm.stats.take_spans()  # before the collectives below
        exchanges, unmatched = self.comm.stats.take_exchanges()
        usage = self.strategy.usage()
        transfer = usage.transfer_bytes - self._usage_before.transfer_bytes
        delta = self.comm.stats.delta(self._bytes_before)
        # training traffic, and the agreements whose seconds (waits for slower ranks) count but not their bytes
        train_tags = {k: v for k, v in delta.items() if is_train_tag(k)}
        wait_tags = {k: v for k, v in delta.items() if is_wait_tag(k)}
        # tags under way at once count once (a tag's own concurrent exchanges already do in its seconds)
        comm_s = union_seconds([(a, b) for tag, a, b in spans if is_train_tag(tag) or is_wait_tag(tag)])
        exposed = sum(v.exposed for v in (*train_tags.values(), *wait_tags.values()))
        if self.comm.size == 1:  # one rank's collectives move nothing: their bookkeeping is compute, not comm
            comm_s = exposed = 0.0
            train_tags = {k: replace(v, seconds=0.0, exposed=0.0) for k, v in train_tags.items()}
            wait_tags = {}
        load = usage.load_seconds - self._usage_before.load_seconds
        arrived = time.perf_counter()
        held = self.task.held_bytes()  # before rebin, which lets them go
        stats, finishing = self.task.rebin(self.comm, stats)  # finishing the sums (AUC bins): the epoch's compute
        waited = 0.0
        if self.comm.size > 1:
            # the wait for the last rank apart from the sums' own transfer, which is no imbalance (link prediction's
            # sums carry 2 · AUC_BINS values a split)
            self.comm.barrier(tag="metrics")
            waited = max(0.0, time.perf_counter() - arrived - finishing)
        total = self.comm.allreduce_array(stats)
        # the epoch's closing wait (module docstring): without it a rank that finished first would report an
        # epoch shorter than the last rank's work
        closing = max(0.0, time.perf_counter() - arrived - finishing) if self.comm.size > 1 else 0.0
        wall += finishing
        compute = max(0.0, wall - load - exposed)
        exposed += closing
        split = [wall + closing, load, compute, comm_s + closing]
        metrics = self.task.metrics(total)
        #: the epoch's metric sums were all finite: a NaN mean then means no examples (a sampled epoch whose
        #: batches held none), not a diverged run, whose sums are not finite
        self.sums_finite = bool(np.all(np.isfinite(total)))
        blocked, each_late = exchanges.each(last_arrivals(self.comm, exchanges))
        late = None if each_late is None else exchanges.per_tag(each_late)
        if self.trace is not None:
            self._trace(epoch, exchanges, blocked, each_late,
                        (arrived, closing, waited) if self.comm.size > 1 else None)
        gpu_peak = float(torch.cuda.max_memory_allocated(self.device)) if self.device.type == "cuda" else 0.0
        per_rank_all = self.comm.gather_array([*split, float(activation_peak), float(transfer), gpu_peak,
                                               float(stop_raised), float(checkpoint_due), exposed, closing,
                                               float(held), waited])
        by_tag: dict[str, int] = {}
        time_by_tag: dict[str, np.ndarray] = {}  # per tag: [seconds, exposed, late (NaN: unknown)]
        # a tag's late time is known where this rank's calls of it were all exchanges of every rank
        gathered = self.comm.allgather_obj(
            {k: (v.bytes_sent if k in train_tags else None, v.seconds, v.exposed,
                 late.get(k, 0.0) if late is not None and k not in unmatched else None)
             for k, v in (*train_tags.items(), *wait_tags.items())}, tag="metrics")
        for rank, rank_tags in enumerate(gathered):
            for k, (b, sec, exp, lat) in rank_tags.items():
                if b is not None:  # a wait tag's bytes are no traffic
                    by_tag[k] = by_tag.get(k, 0) + b
                time_by_tag.setdefault(k, np.zeros((len(gathered), 3)))[rank] = (sec, exp, np.nan if lat is None
                                                                                   else lat)
        if self.comm.size > 1:  # the closing wait and the sums' transfer: seconds and exposed; late the wait's
            time_by_tag[EPOCH_END] = per_rank_all[:, [10, 10, 12]]
        # known on every rank (a rank without the tag waited 0 in it), else no figure for the tag
        known = {k for k, v in time_by_tag.items() if not np.isnan(v[:, 2]).any()}
        late_per_rank = (None if late is None else
                         np.sum([time_by_tag[k][:, 2] for k in known], axis=0) if known else np.zeros(len(gathered)))
        record = self._record(epoch, metrics, grad_norm, per_rank_all, by_tag, late_per_rank)
        # per tag: mean seconds and exposed over ranks, the most any rank blocked, and late where known
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
            "warmup": epoch <= self.warmup_epochs or (self.resumed_at is not None and epoch == self.resumed_at + 1),
            "loss": metrics["train_loss"],
            **metrics,
            "grad_norm": grad_norm,
            "activation_peak_bytes": int(per_rank_all[:, 4].max()),
            # the scores a task keeps to the epoch's end (link prediction's logits for its AUC bins)
            "held_score_bytes": int(per_rank_all[:, 11].max()),
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
            # exposed in every line (comm where nothing overlaps): a line of one shape is what awk and grep read
            f"time {s['epoch']:.3f}s (load {s['load']:.3f} comp {s['compute']:.3f} comm {s['comm']:.3f} "
            f"exposed {s['comm_exposed']:.3f})  "
            f"sent {record['bytes_sent'] / _MiB:.2f} MiB"
            + (f"  transfer {record['transfer_bytes'] / _MiB:.2f} MiB" if record["transfer_bytes"] else "")
        )
