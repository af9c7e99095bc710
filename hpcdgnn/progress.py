"""Progress of long work: a bar on a terminal, plain periodic lines in a batch log.

``prepare`` and ``generate`` (snapshots written), the shard check (shards hashed) and an epoch of many
mini-batches (batches trained, rank 0) report through :class:`Progress`. On a terminal it redraws one line
(carriage returns) once the work has taken half a second (or ``seconds``, when less); anywhere else — a SLURM or
LSF log — it writes a plain line every ``seconds`` (``output.progress_seconds`` for runs,
``$HPCDGNN_PROGRESS_SECONDS`` for the commands; default 30, 0 = off), so short work prints nothing and a log never
fills with redraws. It writes to stderr: stdout keeps the epoch lines that scripts read.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from hpcdgnn import preemption

__all__ = ["Progress", "default_seconds"]

T = TypeVar("T")

#: a terminal's bar appears once work has taken this long, and is redrawn at most this often (both at most the
#: period of plain lines, ``seconds``)
_BAR_DELAY, _BAR_EVERY = 0.5, 0.1
_WIDTH = 30


def default_seconds() -> float:
    """``$HPCDGNN_PROGRESS_SECONDS`` (default 30; 0 = off); a bad value is refused in one line."""
    from hpcdgnn.errors import ConfigError

    text = os.environ.get("HPCDGNN_PROGRESS_SECONDS", "30")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigError(f"HPCDGNN_PROGRESS_SECONDS: {text!r}; give seconds between progress lines (0 = off)")
    return value


class Progress:
    """Counts done units of ``what`` (of ``total`` when known) and shows them as the stream allows.

    Args:
        what: the work, e.g. ``"prepare data/x: snapshots"``.
        total: how many units, or None.
        seconds: between plain lines (and 0 = off, bar included); default :func:`default_seconds`.
        stream: where to write (default stderr); a terminal gets the bar.
    """

    def __init__(self, what: str, total: int | None = None, *, seconds: float | None = None,
                 stream: TextIO | None = None) -> None:
        self.what, self.total = what, total
        self.seconds = default_seconds() if seconds is None else seconds
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.n = 0
        self.start = self.last = time.monotonic()
        self.shown = False

    def _text(self, now: float) -> str:
        took = now - self.start
        if self.total:
            frac = min(1.0, self.n / self.total)
            left = took / frac - took if frac > 0 else float("nan")
            eta = f", {left:.0f} s left" if frac < 1 and left == left else ""
            return f"{self.what}: {self.n:,}/{self.total:,} ({100 * frac:.0f} %) after {took:.0f} s{eta}"
        return f"{self.what}: {self.n:,} after {took:.0f} s"

    def _bar(self, now: float) -> str:
        if not self.total:
            return f"\r{self._text(now)}"
        done = int(_WIDTH * min(1.0, self.n / self.total))
        return f"\r[{'#' * done}{'.' * (_WIDTH - done)}] {self._text(now)}"

    def update(self, n: int = 1) -> None:
        """``n`` more units done (a safe point: a stop signal whose exception was lost is raised here)."""
        preemption.check_stop()
        self.n += n
        if self.seconds <= 0:
            return
        now = time.monotonic()
        if self.tty:
            if now - self.start >= min(_BAR_DELAY, self.seconds) and now - self.last >= min(_BAR_EVERY, self.seconds):
                self.stream.write(self._bar(now))
                self.stream.flush()
                self.last, self.shown = now, True
        elif now - self.last >= self.seconds:
            self.stream.write(self._text(now) + "\n")
            self.stream.flush()
            self.last, self.shown = now, True

    def close(self, done: bool = True) -> None:
        """End the bar's line; a log that got lines gets the final count (``done``: the work completed)."""
        if not self.shown:
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write(self._bar(now) + "\n")
        else:
            self.stream.write(self._text(now) + (" (done)\n" if done else " (stopped)\n"))
        self.stream.flush()
        self.shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(exc_type is None)

    def iterate(self, items: Iterable[T]) -> Iterator[T]:
        """Yield ``items``, counting each once it is done (when the next is asked for), then :meth:`close` (the
        final count only when they all came: work that raised ends the bar's line, no more)."""
        done = False
        try:
            for item in items:
                yield item
                self.update()
            done = True
        finally:
            self.close(done)
