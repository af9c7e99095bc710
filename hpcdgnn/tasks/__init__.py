"""Task heads: link prediction, node classification and regression."""

from hpcdgnn.tasks.base import SPLITS, Task, TaskBatch, split_steps
from hpcdgnn.tasks.link_prediction import LinkPrediction
from hpcdgnn.tasks.node_classification import NodeClassification
from hpcdgnn.tasks.regression import Regression
from hpcdgnn.tasks.temporal_link_prediction import TemporalLinkPrediction

__all__ = [
    "LinkPrediction",
    "NodeClassification",
    "Regression",
    "SPLITS",
    "Task",
    "TaskBatch",
    "TemporalLinkPrediction",
    "build_task",
    "split_steps",
    "task_class",
]

_TASKS = {"link_prediction": LinkPrediction, "node_classification": NodeClassification, "regression": Regression,
          "temporal_link_prediction": TemporalLinkPrediction}


def build_task(cfg, manifest, emb_features: int, seed: int) -> Task:
    """Build the task head named by ``task.name``."""
    return _TASKS[cfg.name](cfg, manifest, emb_features, seed)


def task_class(name: str) -> type[Task]:
    """The task class registered as ``name`` (for its static cost model)."""
    return _TASKS[name]

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.tasks.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
