"""hpcdgnn: distributed training of dynamic graph neural networks on HPC clusters (SPMD, MPI).

From Python: ``hpcdgnn.train(job)`` and ``hpcdgnn.load_run(RUNDIR)`` (:mod:`hpcdgnn.api`), imported on first use
so that ``python -m hpcdgnn prepare`` and friends do not load torch.
"""

import importlib

__all__ = ["TrainedRun", "load_run", "train"]


def __getattr__(name: str):
    if name == "train":  # the package hpcdgnn/train, callable (hpcdgnn/train/__init__.py)
        # torch with it, a notebook's interrupt held until it is in (a half-imported torch breaks the process)
        importlib.import_module("hpcdgnn.api").import_training()
        return importlib.import_module("hpcdgnn.train")
    if name in ("load_run", "TrainedRun"):
        return getattr(importlib.import_module("hpcdgnn.api"), name)
    raise AttributeError(f"module 'hpcdgnn' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, for a notebook's tab completion (``dir`` lists only what is loaded)."""
    return sorted(set(globals()) | set(__all__))
