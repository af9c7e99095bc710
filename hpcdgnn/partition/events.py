"""M2's plan (DistTGL §3.2): the i×j×k layout of the ranks over an event stream and the k time segments.

Rank r = a + i·(b + j·c): mini-batch slice a, epoch trainer b, memory copy c. Training
batches of ``task.batch_events`` are cut into k consecutive segments; copy c trains
segment (c + epoch − 1) mod k.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcdgnn.errors import ConfigError

__all__ = ["MemoryPlan", "check_batches", "plan_memory"]


@dataclass
class MemoryPlan:
    """The i×j×k layout and the batch schedule (rank 0 computes it; plan.json)."""

    kind: str
    num_ranks: int
    minibatch: int
    epoch: int
    memory: int
    batch_events: int
    split: dict[str, list[int]]
    segments: list[list[int]] = field(default_factory=list)
    """Training batches [first, stop) of each of the k time segments."""

    def batches(self, split: str) -> int:
        """Batches of ``batch_events`` events in ``split`` (the last one may be shorter)."""
        lo, hi = self.split[split]
        return -(-(hi - lo) // self.batch_events)

    def batch_events_range(self, split: str, q: int) -> tuple[int, int]:
        """Events [first, stop) of batch ``q`` of ``split``."""
        lo, hi = self.split[split]
        return lo + q * self.batch_events, min(hi, lo + (q + 1) * self.batch_events)

    def evaluating(self, epoch: int) -> tuple[int, int]:
        """The memory group that evaluates after epoch ``epoch`` (1-based) — the one whose memory just walked the
        last segment (DistTGL §3.2.3, Fig. 7c: group c walks segment (c + e − 1) mod k) — and the training events
        its memory has seen since its reset at segment 0: the last ``epoch`` segments before epoch k, all of them
        from then on."""
        k = self.memory
        events = 0
        for a, b in self.segments[max(0, k - epoch):]:
            if b > a:
                events += self.batch_events_range("train", b - 1)[1] - self.batch_events_range("train", a)[0]
        return (k - epoch % k) % k, events

    def iterations(self) -> int:
        """Iterations of an epoch: the longest segment, plus j − 1 to drain epoch parallelism's pipeline."""
        return max(b - a for a, b in self.segments) + self.epoch - 1

    def waiting(self) -> str | None:
        """What ranks wait for when a batch has fewer events than the ranks splitting it (i for training, i·j for
        evaluation), else None."""
        i, j, B = self.minibatch, self.epoch, self.batch_events
        if i * j <= B:
            return None
        if i > B:
            return (f"strategy.minibatch = {i} ranks split a training batch of task.batch_events: {B} events, so some "
                    "hold none of it and wait (the trajectory is unchanged); raise task.batch_events or lower "
                    "strategy.minibatch")
        return (f"strategy.minibatch·epoch = {i}·{j} ranks split an evaluation batch of task.batch_events: {B} events, "
                "so some hold none of it and wait; raise task.batch_events or lower strategy.minibatch or "
                "strategy.epoch")

    def segment_of(self, group: int, epoch: int) -> int:
        """The time segment group ``group`` trains on in ``epoch``: (group + epoch − 1) mod k."""
        return (group + epoch - 1) % self.memory

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict."""
        return asdict(self)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path`` as JSON."""
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")


def plan_memory(manifest, num_ranks: int, job) -> MemoryPlan:
    """Check i·j·k = P, the batch size and k against the stream (ConfigError naming the key); cut the k segments."""
    o, B = job.strategy, job.task.batch_events
    i, j, k = o.minibatch, o.epoch, o.memory
    if i * j * k != num_ranks:
        raise ConfigError(f"strategy: minibatch·epoch·memory = {i}·{j}·{k} = {i * j * k}, but the job runs on "
                          f"{num_ranks} rank{'s' if num_ranks != 1 else ''}; choose i·j·k = {num_ranks}")
    split = {s: list(manifest.split[s]) for s in ("train", "val", "test")}
    nb = check_batches(manifest, job)
    plan = MemoryPlan("memory", num_ranks, i, j, k, B, split)
    plan.segments = [[s * nb // k, (s + 1) * nb // k] for s in range(k)]
    return plan


def check_batches(manifest, job) -> int:
    """The training batches of ``task.batch_events`` events the stream makes, after refusing a batch larger than
    the training split or fewer batches than ``strategy.memory``'s k segments (ConfigError naming the key).
    Before the footprint's check too, which would price a batch the stream cannot hold."""
    B, k = job.task.batch_events, job.strategy.memory
    lo, hi = manifest.split["train"]
    train = hi - lo
    if B > train:
        raise ConfigError(f"task.batch_events: {B} is more than the {train} training events of {job.data.path}; "
                          f"choose at most {train}")
    nb = -(-train // B)
    if k > nb:
        raise ConfigError(f"strategy.memory: {k} memory copies need at least {k} time segments, but the "
                          f"{train} training events make only {nb} batches of task.batch_events: {B}")
    return nb
