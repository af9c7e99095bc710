"""Before a job is queued: predicted memory, traffic, balance and epoch time of every strategy (issue 59)."""

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.planner.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
