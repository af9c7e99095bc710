"""The hot loops: each one function here, with the plain-torch (or plain-numpy) reference it must equal.

========================================  ======================================================  ===========
op                                        reference                                               agreement
========================================  ======================================================  ===========
:func:`sparse.csr_mm` (Ã·X)               ``torch.sparse.mm``                                      bit for bit
:func:`sparse.spmm` (Ã·X, dX = Ãᵀ·dY)     dense ``Ã @ X`` under autograd                           rounding
:func:`sparse.csr_transpose`              the dense transpose                                      exact
:func:`sparse.gcn_norm` (IBM Eq. 1)       dense D^-1/2 (A + I) D^-1/2                              rounding
:func:`sparse.stacked_gcn_norm`           :func:`sparse.block_diagonal` of :func:`sparse.gcn_norm`  bit for bit
:func:`decoder.edge_logits`               dense ``relu(pu[u] + pv[v] + b1) · w2 + b2`` (autograd)  rounding
:func:`decoder.edge_bce` (compiled)       :func:`decoder.edge_bce_reference`                       rounding
:func:`scan.run_torch_rnn` (BPTT scan)    the ``nn.LSTM`` / ``nn.GRU`` module itself               rounding
:func:`scan.self_fed_lstm`                the ``nn.LSTMCell`` loop                                 rounding
:func:`negatives.draw_negatives_joined`   :func:`negatives.draw_negatives` step by step            exact
========================================  ======================================================  ===========

``tests/ops/test_references.py`` checks every row (forward and, where differentiable, gradients). The compiled
CPU loops (:mod:`hpcdgnn.ops.kernels`, numba; ``pip install hpcdgnn[cpu-kernels]``) are optional: without numba,
or with ``HPCDGNN_KERNELS=torch``, every op takes its torch path. This layer imports nothing of hpcdgnn above it
(models, tasks and strategies call it).
"""

import warnings

__all__ = ["ignore_csr_notice"]


def ignore_csr_notice() -> None:
    """Ignore torch's notice, once a process, that sparse CSR tensors are beta: hpcdgnn's adjacency is CSR
    throughout, so in a job's log it is noise. Called where hpcdgnn's own code runs (the command's process; each
    Python API call, inside ``warnings.catch_warnings``), not at import: a caller's own CSR tensors keep the notice,
    and a caller's ``warnings.simplefilter("error")`` set after importing hpcdgnn does not make it an error inside
    a run."""
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta", category=UserWarning)


def __getattr__(name: str):
    """``hpcdgnn.ops.<submodule>`` after ``import hpcdgnn`` alone, as :func:`hpcdgnn.submodules_on_use` makes it for
    the other packages (written out here: this layer imports nothing of hpcdgnn above it)."""
    import importlib
    import importlib.util

    if name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
