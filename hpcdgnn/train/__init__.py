"""The training loop; called, ``hpcdgnn.train(job)`` (:func:`hpcdgnn.api.train`): the Python API's entry point.

``hpcdgnn.train`` names this package, so the package itself is made callable (a module subclass with
``__call__``) instead of renaming it or shadowing it: ``import hpcdgnn.train.trainer`` anywhere would put the
package back over a function of that name.
"""

import sys
import types

from hpcdgnn.train.collective import agree, root_then_bcast
from hpcdgnn.train.trainer import TrainResult, run_training

__all__ = ["TrainResult", "agree", "root_then_bcast", "run_training"]


class _CallablePackage(types.ModuleType):
    def __call__(self, job, **kwargs):
        """:func:`hpcdgnn.api.train`."""
        from hpcdgnn.api import train

        return train(job, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
