"""hpcdgnn: distributed training of dynamic graph neural networks on HPC clusters (SPMD, MPI).

From Python: ``hpcdgnn.train(job)`` and ``hpcdgnn.load_run(RUNDIR)`` (:mod:`hpcdgnn.api`), imported on first use
so that ``python -m hpcdgnn prepare`` and friends do not load torch.
"""

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType

__all__ = ["TrainedRun", "load_run", "train"]


def submodules_on_use(package: str) -> Callable[[str], ModuleType]:
    """A package's module ``__getattr__`` that imports its submodule ``name`` when first named: the docs' dotted
    names (``hpcdgnn.errors.ConfigError``, ``hpcdgnn.data.adapters.from_arrays``) work after ``import hpcdgnn``
    alone, not only once a call has imported them, and nothing is imported before it is used."""

    def __getattr__(name: str) -> ModuleType:
        # a dotted or odd name is no submodule of this package (find_spec would import the parent it names)
        if name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


_submodule = submodules_on_use(__name__)


def __getattr__(name: str):
    if name == "train":  # the package hpcdgnn/train, callable (hpcdgnn/train/__init__.py)
        # torch with it, a notebook's interrupt held until it is in (a half-imported torch breaks the process)
        importlib.import_module("hpcdgnn.api").import_training()
        return importlib.import_module("hpcdgnn.train")
    if name in ("load_run", "TrainedRun"):
        return getattr(importlib.import_module("hpcdgnn.api"), name)
    return _submodule(name)


def __dir__() -> list[str]:
    """The lazy names too, for a notebook's tab completion (``dir`` lists only what is loaded)."""
    return sorted(set(globals()) | set(__all__))
