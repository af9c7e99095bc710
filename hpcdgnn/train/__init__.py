"""The training loop."""

from hpcdgnn.train.collective import agree, root_then_bcast
from hpcdgnn.train.trainer import TrainResult, run_training

__all__ = ["TrainResult", "agree", "root_then_bcast", "run_training"]
