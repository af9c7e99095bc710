"""Logging, timers, memory accounting and the run directory."""

from hpcdgnn.metrics.log import configure_logging, get_logger
from hpcdgnn.metrics.memory import SavedTensorMeter
from hpcdgnn.metrics.results import RunDirectory, choose_run_dir
from hpcdgnn.metrics.timers import TRAIN_TAGS, summarize_over_ranks

__all__ = [
    "RunDirectory",
    "SavedTensorMeter",
    "TRAIN_TAGS",
    "choose_run_dir",
    "configure_logging",
    "get_logger",
    "summarize_over_ranks",
]
