"""Typed, strict job configuration (YAML sections -> frozen dataclasses)."""

from hpcdgnn.config.load import apply_overrides, job_to_dict, load_job, load_job_dict, validate_job
from hpcdgnn.config.schema import (
    CommConfig,
    DataConfig,
    JobConfig,
    ModelConfig,
    OutputConfig,
    StrategyConfig,
    TaskConfig,
    TrainConfig,
)

__all__ = [
    "CommConfig",
    "DataConfig",
    "JobConfig",
    "ModelConfig",
    "OutputConfig",
    "StrategyConfig",
    "TaskConfig",
    "TrainConfig",
    "apply_overrides",
    "job_to_dict",
    "load_job",
    "load_job_dict",
    "validate_job",
]

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.config.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
