"""Training regimes, each registered once as a :class:`RegimeSpec` (see :mod:`hpcdgnn.regimes.base`)."""

from hpcdgnn.regimes.base import RegimeSpec, job_regime, names, options_class, regime_of, regimes, register_regime
from hpcdgnn.regimes.events import EVENTS
from hpcdgnn.regimes.timeline import TIMELINE

__all__ = ["EVENTS", "TIMELINE", "RegimeSpec", "job_regime", "names", "options_class", "regime_of", "regimes",
           "register_regime"]

from hpcdgnn import submodules_on_use  # noqa: E402

#: ``hpcdgnn.regimes.<submodule>`` after ``import hpcdgnn`` alone (:func:`hpcdgnn.submodules_on_use`)
__getattr__ = submodules_on_use(__name__)
