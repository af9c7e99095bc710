"""Partitioning strategies, registered by YAML name (``strategy.name``)."""

from hpcdgnn.strategies.auto import AutoStrategy
from hpcdgnn.strategies.base import Strategy, StrategyContext
from hpcdgnn.strategies.chunk import ChunkStrategy
from hpcdgnn.strategies.grid import GridStrategy
from hpcdgnn.strategies.hybrid import HybridStrategy
from hpcdgnn.strategies.memory import MemoryStrategy
from hpcdgnn.strategies.pss import PSSStrategy
from hpcdgnn.strategies.registry import available_strategies, get_strategy, register_strategy
from hpcdgnn.strategies.sequences import SequencesStrategy
from hpcdgnn.strategies.snapshot import SnapshotStrategy
from hpcdgnn.strategies.vertex import VertexStrategy

__all__ = [
    "AutoStrategy",
    "ChunkStrategy",
    "GridStrategy",
    "HybridStrategy",
    "MemoryStrategy",
    "PSSStrategy",
    "SequencesStrategy",
    "SnapshotStrategy",
    "Strategy",
    "StrategyContext",
    "VertexStrategy",
    "available_strategies",
    "get_strategy",
    "register_strategy",
]

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.strategies.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
