"""The ``hpcdgnn`` logger: INFO from rank 0 only, WARNING+ from any rank with ``[rank r]``; one line a record."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

__all__ = ["HeldLines", "batches_into", "get_logger", "configure_logging", "logging_restorer"]

_LOGGER = "hpcdgnn"


class _RankFilter(logging.Filter):
    def __init__(self, rank: int, size: int) -> None:
        super().__init__()
        self.rank, self.size = rank, size

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            if self.size > 1:
                record.msg = f"[rank {self.rank}] {record.msg}"
            return True
        return self.rank == 0


def configure_logging(rank: int, size: int, level: int = logging.INFO) -> logging.Logger:
    """Set up the ``hpcdgnn`` logger for this rank (idempotent): INFO from rank 0, warnings from every rank with
    its number, one line a record on stdout. A library caller's own configuration of the logger stays: a level it
    set (``logging.getLogger("hpcdgnn").setLevel(logging.WARNING)`` silences the epoch lines), and handlers it
    added, which then take the lines instead of stdout."""
    log = logging.getLogger(_LOGGER)
    for h in [h for h in log.handlers if getattr(h, "hpcdgnn", False)]:  # an earlier run's own
        log.removeHandler(h)
        log.propagate = h.propagated  # as it was before that run added it
    for f in [f for f in log.filters if isinstance(f, _RankFilter)]:
        log.removeFilter(f)
    log.addFilter(_RankFilter(rank, size))
    if not [h for h in log.handlers if not _a_test_runner_s(h)]:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.hpcdgnn = True  # type: ignore[attr-defined]
        handler.propagated = log.propagate  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.propagate = False  # one line a record, not a second through the root logger's handlers
    if log.level == logging.NOTSET:
        log.setLevel(level)
    return log


def logging_restorer() -> Callable[[], None]:
    """The package logger as the caller has it now, put back by the returned function at a library call's end:
    the handler and rank filter :func:`configure_logging` added are removed, and the level and propagation are the
    caller's again (handlers and filters the caller added meanwhile stay). Between calls the logger is the
    caller's: a handler left on ``sys.stdout`` as it was during the call (a ``redirect_stdout``'s buffer, closed
    since) took the lines hpcdgnn logs outside a run, and ``propagate = False`` hid them from the caller's root
    handlers."""
    log = get_logger()
    level, propagate = log.level, log.propagate
    handlers, filters = list(log.handlers), list(log.filters)

    def restore() -> None:
        for h in [h for h in log.handlers if getattr(h, "hpcdgnn", False) and h not in handlers]:
            log.removeHandler(h)
        for f in [f for f in log.filters if isinstance(f, _RankFilter) and f not in filters]:
            log.removeFilter(f)
        log.propagate = propagate
        log.setLevel(level)  # setLevel, not the attribute: it clears the logger's cache of enabled levels

    return restore


def _a_test_runner_s(handler: logging.Handler) -> bool:
    """Whether ``handler`` is pytest's log capture, not a caller's: pytest (from 9.2) attaches it at each test
    phase to every logger that does not propagate — as ours does after a first run — and taking it for the
    caller's would send a second run's lines to the capture alone (and, propagating again, twice)."""
    return type(handler).__module__.startswith("_pytest.")


def get_logger() -> logging.Logger:
    """The package logger."""
    return logging.getLogger(_LOGGER)


def batches_into(epoch: int, batches: int) -> str:
    """A resume point's batches past epoch ``epoch``, as the lines that name it read: " and 1 batch of epoch 4"
    (``epoch`` 3), "" when it resumes at an epoch's end."""
    return f" and {batches} batch{'es' * (batches != 1)} of epoch {epoch + 1}" if batches else ""


class HeldLines:
    """Hold the INFO lines logged inside ``with`` until :meth:`release` (or the end of the block), so set-up
    details follow the start line that says what the run is; warnings and errors are never held."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._held: list[logging.LogRecord] = []
        self._filter = logging.Filter()
        self._filter.filter = self._hold  # type: ignore[method-assign]

    def _hold(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        self._held.append(record)
        return False

    def __enter__(self) -> HeldLines:
        self.log.addFilter(self._filter)
        return self

    def release(self, *first: str) -> None:
        """Stop holding: log the INFO lines ``first`` (the start line), then the held ones."""
        self.log.removeFilter(self._filter)
        for line in first:
            self.log.info(line)
        held, self._held = self._held, []
        for record in held:
            self.log.handle(record)

    def __exit__(self, *exc: object) -> None:
        self.release()
