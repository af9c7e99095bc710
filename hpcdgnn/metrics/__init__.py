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

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.metrics.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
