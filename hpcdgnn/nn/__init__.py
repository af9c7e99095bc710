"""Neural-network layers and DGNN models."""

from hpcdgnn import submodules_on_use

#: ``hpcdgnn.nn.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
