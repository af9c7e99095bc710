"""The ``hpcdgnn`` logger: INFO from rank 0 only, WARNING and above from any rank with ``[rank r]``.

No colours and one line per record: batch logs are files (STYLE G10).
"""

from __future__ import annotations

import logging
import sys

__all__ = ["get_logger", "configure_logging"]

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
    """Set up the ``hpcdgnn`` logger for this rank (idempotent)."""
    log = logging.getLogger(_LOGGER)
    for h in list(log.handlers):
        log.removeHandler(h)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(_RankFilter(rank, size))
    log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False
    return log


def get_logger() -> logging.Logger:
    """The package logger."""
    return logging.getLogger(_LOGGER)
