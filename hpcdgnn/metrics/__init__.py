"""Logging, timers, memory accounting and the run directory."""

from hpcdgnn.metrics.log import configure_logging, get_logger
from hpcdgnn.metrics.memory import SavedTensorMeter
from hpcdgnn.metrics.results import RunDirectory, choose_run_dir, read_epoch_records
from hpcdgnn.metrics.timers import NON_TRAIN_TAGS, is_train_tag, summarize_over_ranks

__all__ = [
    "RunDirectory",
    "SavedTensorMeter",
    "NON_TRAIN_TAGS",
    "is_train_tag",
    "choose_run_dir",
    "configure_logging",
    "get_logger",
    "read_epoch_records",
    "summarize_over_ranks",
]
