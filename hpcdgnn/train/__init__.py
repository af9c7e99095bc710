"""The training loop; called, ``hpcdgnn.train(job, *, overrides=(), output=None, resume=None, name="job")`` is
:func:`hpcdgnn.api.train`, the Python API's entry point (its description follows below).

``hpcdgnn.train`` names this package, so the package itself is made callable (a module subclass with
``__call__``, and ``__signature__`` for ``inspect`` and notebooks) instead of renaming it or shadowing it:
``import hpcdgnn.train.trainer`` anywhere would put the package back over a function of that name.
"""

import inspect
import sys
import types

from hpcdgnn import api
from hpcdgnn.train.collective import agree, root_then_bcast
from hpcdgnn.train.trainer import TrainResult, run_training

__all__ = ["TrainResult", "agree", "root_then_bcast", "run_training"]


class _CallablePackage(types.ModuleType):
    #: :func:`hpcdgnn.api.train` itself (its own errors name ``train()``), not a method calling it: a traceback
    #: through ``hpcdgnn.train(...)`` shows no frame of this package's
    __call__ = staticmethod(api.train)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(api.train)


sys.modules[__name__].__class__ = _CallablePackage
# help(hpcdgnn.train) shows the call's description after the package's (none under python -OO)
if __doc__ and api.train.__doc__:
    __doc__ = f"{__doc__}\nhpcdgnn.train{inspect.signature(api.train)}\n\n{inspect.cleandoc(api.train.__doc__)}\n"

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.train.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
