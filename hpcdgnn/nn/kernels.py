"""Fused CPU kernels compiled with numba, for the per-pair loops torch can only run as many passes.

Why: the link-prediction decoder scores millions of pairs per epoch, each a gather of two rows, an
add, a ReLU and a dot product (and in the backward pass the same plus two scatter-adds). In torch
that is ~10 passes over (pairs, hidden) temporaries and index kernels. One loop over the pairs keeps
the hidden layer in registers.

The same module holds the checkpoint blocks' operator build (:func:`gcn_norm_stacked`: Ã and Ãᵀ of a
block's snapshots in two passes each, where torch needs ~20 and a sort), and, for rows of one cache line
(:mod:`hpcdgnn.nn._simd`'s whole-row vector operations), the decoder's projections with their backward
(:func:`project`, :func:`project_backward`) and the CPU's CSR products (:func:`csr_mm`, MKL's sums bit for bit).

The kernels are used on CPU tensors of float32/float64 when numba imports, for calls with at least
:data:`MIN_PAIRS` pairs (loading them costs ~1 s per process) — or, for the loops whose other path gives
the same bits (the negatives, the metric histograms, the operator build), any call once this process has
loaded them;
otherwise — or with ``HPCDGNN_KERNELS=torch`` (benchmarks and tests compare both) — callers take their
torch path.
``HPCDGNN_KERNELS=always`` drops the size thresholds (tests run the compiled paths on small graphs). The
numba cache (``cache=True``) keeps the compiled code beside this file (a directory per CPU kind:
:func:`_cache_of_this_cpu`), so only the first process of each CPU kind after an install compiles (about a
second per dtype).

Floating-point contract: ``fastmath`` is limited to reassociation and contraction (no ``nnan`` /
``ninf``: a NaN loss must still surface), so the per-pair dot product may be summed in a different
order than torch's — results agree to rounding, and are deterministic for a given machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys

import numpy as np
import torch

from hpcdgnn.indices import torch_index_dtype

__all__ = ["add_rows", "available", "calls", "compile_notice", "csr_mm", "csr_mm_t", "csr_transpose", "draw_negatives",
           "edge_bce_train", "edge_mlp_forward", "expected", "gcn_norm_stacked", "graph_diff_merge", "lstm_available",
           "lstm_backward", "lstm_forward", "mode", "pairs_by_bucket", "project", "project_backward",
           "projection_available", "put_rows", "score_stats"]

_kernels = None  # the compiled module once imported; False when numba is missing or disabled


def mode() -> str:
    """``HPCDGNN_KERNELS``: ``numba`` (default), ``torch`` or ``always`` (the one place that reads it; ``run``
    calls it first, so a bad value stops every rank before MPI starts)."""
    value = os.environ.get("HPCDGNN_KERNELS", "numba").lower()
    if value not in ("numba", "torch", "always"):
        from hpcdgnn.errors import ConfigError

        raise ConfigError(f"environment HPCDGNN_KERNELS={value!r}: use numba, torch or always")
    return value


def _enabled() -> bool:
    return mode() != "torch"


def _sized(n: int, least: int) -> bool:
    """A call of size n takes the compiled path: n >= least, or any n with ``HPCDGNN_KERNELS=always``."""
    return n >= least or mode() == "always"


#: calls of each compiled kernel in this process (:func:`calls`)
_calls: dict[str, int] = {}


def calls() -> dict[str, int]:
    """How often this process ran each compiled kernel (``summary.json`` ``compiled_kernels``, rank 0's):
    which loops a run really took, where the size thresholds and the environment decide."""
    return dict(sorted(_calls.items()))


def _kernel(name: str):
    """The compiled kernel ``name`` (loading the module on first use), its call counted."""
    _calls[name] = _calls.get(name, 0) + 1
    return getattr(_compile(), name)


def _compile():
    global _kernels
    if _kernels is None:
        _kernels = False
        if _enabled():
            try:
                with _cache_of_this_cpu():
                    from hpcdgnn.nn import _numba_kernels as _kernels
            except ImportError:  # numba missing, or built for another numpy: the torch paths remain
                pass
            except RuntimeError as e:  # numba found no directory it can write its cache to (it raised at import)
                if "no locator available" not in str(e):
                    raise
                from hpcdgnn.errors import ConfigError

                where = os.environ.get("NUMBA_CACHE_DIR")
                raise ConfigError(
                    "numba cannot cache the compiled CPU loops: no writable directory ("
                    f"{f'NUMBA_CACHE_DIR={where}, ' if where else ''}the install's hpcdgnn/nn/__pycache__, the user's "
                    "cache): set NUMBA_CACHE_DIR to a writable directory, or HPCDGNN_KERNELS=torch") from None
            else:
                notice = compile_notice(_kernels)
                if notice:  # the package logger by name: metrics/ configures it, and nn/ sits below metrics/
                    logging.getLogger("hpcdgnn").info(notice)
    return _kernels


def _writable_dir(path: str) -> bool:
    """Whether ``path`` is (or can be made) a directory this process can create files in — numba's own test
    of a cache directory (a file made and removed), since ``os.access`` says nothing of a read-only mount."""
    import tempfile

    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _cache_of_this_cpu():
    """The numba cache directory while the compiled module is imported (its functions fix their cache then): one
    directory per CPU kind (numba's target triple, CPU name and features; and :mod:`._simd`'s source, below) under
    the first writable one of the places numba tries in turn — the user's ``NUMBA_CACHE_DIR``, beside this module,
    numba's directory in the user's cache. Where none can be written, numba's own choice stands (one directory for
    every kind).

    Why: numba keeps the code of every CPU kind in one index per function and numbers a new data file by the
    entries it saw. Two nodes of different CPUs compiling into one shared install at the same moment (a cluster's
    first job after an install) can both see an empty index, both write data file 1, and leave the index naming
    one kind's key beside the other kind's code — which a node of the first kind then runs: an illegal
    instruction, or worse. Ranks of one kind compiling the same loop for the same dtype write the same code;
    two jobs of different dtypes starting at the same moment on a fresh install can still collide that way
    within a kind (numba's own race; not guarded here). numba's own setting is put back after the import."""
    # numba's import builds error messages, colourised through colorama where installed, whose init registers an
    # exit hook that writes an ANSI reset to stdout: under mpirun (a terminal to each rank) every rank's output
    # ended in ESC [0m, in the job's log file too. No colours for numba's messages, unless the user asked; and
    # where numba is imported already (a library user's), its settings are left alone: numba re-reads the
    # environment at every compile, which would drop what that user set in code.
    if "numba" not in sys.modules:
        os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
    from numba.core import config
    from numba.core.registry import cpu_target
    from numba.misc.appdirs import AppDirs

    magic = cpu_target.target_context.codegen().magic_tuple()
    # numba's cache checks the stamp of the file a function is in, not of the ones whose code it inlines: the
    # whole-row intrinsics' source is in the key, so that a changed _simd.py is never run from stale code
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "_simd.py"), "rb") as f:
        key = repr(magic).encode() + hashlib.sha1(f.read()).digest()
    kind = f"numba-{magic[1]}-{hashlib.sha1(key).hexdigest()[:12]}"
    user = config.CACHE_DIR
    bases = [*([user] if user else []), os.path.join(here, "__pycache__"),
             AppDirs(appname="numba", appauthor=False).user_cache_dir]
    chosen = next((os.path.join(b, kind) for b in bases if _writable_dir(os.path.join(b, kind))), None)
    if chosen is not None:
        config.CACHE_DIR = chosen
    try:
        yield
    finally:
        config.CACHE_DIR = user


def compile_notice(module) -> str | None:
    """The line the log shows (rank 0) where numba has no cache of the loops yet for this Python, else None: the
    first run after an install compiles them, 10-20 s of its first epoch on 2 busy cores, which looked like a hang
    or a slow machine. The cache directory (:func:`_cache_of_this_cpu`'s, or numba's own where that one cannot be
    written) is read from a compiled function of ``module``."""
    from pathlib import Path

    try:
        cache = Path(module.edge_mlp_forward._cache._cache_path)
    except AttributeError:  # another numba's internals: no notice rather than a wrong one
        return None
    if any(cache.glob(f"_numba_kernels.*.py{sys.version_info[0]}{sys.version_info[1]}.nbi")):
        return None
    return (f"compiling the CPU kernels with numba: the first run after an install takes 10-20 s longer (cached in "
            f"{cache} for later runs)")


def expected() -> bool:
    """Whether CPU runs will take the compiled loops (numba installed and not disabled), without
    importing numba: what a cost model on rank 0 assumes (:meth:`LinkPrediction.snapshot_work`)."""
    import importlib.util

    return _enabled() and importlib.util.find_spec("numba") is not None


#: calls with fewer pairs take the torch path: loading the kernels (numba's import and its cache) costs
#: ~1 s once per process, more than small graphs' whole decoder time — a test suite of hundreds of tiny
#: MPI runs would pay it in every rank. The rule depends on the call alone, never on what the process
#: did before, so a resumed run takes the same path as the uninterrupted one, bit for bit. 2^14: a rank
#: scores its own snapshots' pairs, so a split's pairs are divided by P, and a mid-sized graph's evaluation
#: splits should still take the compiled loop at P = 2; the test suite's graphs (a few hundred vertices) stay below it.
MIN_PAIRS = 1 << 14


def _loaded() -> bool:
    """Whether this process has loaded the compiled module already (it never unloads)."""
    return bool(_kernels)


def _takes(n: int, same_bits: bool) -> bool:
    """Whether a call of ``n`` pairs takes the compiled loop by size: :func:`_sized`, or any size for a loop
    whose other path gives the same bits once the module is loaded (:func:`available`'s ``same_bits``)."""
    return _sized(n, MIN_PAIRS) or (same_bits and _loaded())


def available(*tensors: torch.Tensor, pairs: int | None = None, same_bits: bool = False) -> bool:
    """Whether the numba kernels apply to these tensors: numba present and enabled, all on the CPU,
    of one floating dtype (float32 or float64), and at least :data:`MIN_PAIRS` pairs to score.

    ``same_bits``: the caller's other path gives the same bits (:func:`score_stats`), so below
    :data:`MIN_PAIRS` the compiled loop runs too once this process has loaded it — nothing a resumed
    run computes depends on the choice, and the other path costs several times more per pair.
    """
    if not tensors or tensors[0].dtype not in (torch.float32, torch.float64):
        return False
    if any(t.device.type != "cpu" for t in tensors) or any(t.dtype != tensors[0].dtype for t in tensors):
        return False
    if pairs is not None and not _takes(pairs, same_bits):
        return False
    return bool(_compile())


def draw_negatives(keys: list[int], counts: list[int], num_vertices: int,
                   offsets: list[int] | None = None) -> np.ndarray | None:
    """The negative pairs of several steps in one compiled call, or None where the compiled path does not
    apply (fewer than :data:`MIN_PAIRS` pairs in all, no numba): one (2, Σ counts) int64 array, step j's
    pairs after step j-1's, bit for bit :func:`~hpcdgnn.tasks.link_prediction.draw_negatives` of stream
    ``keys[j]`` plus ``offsets[j]`` (default 0)."""
    m = np.asarray(counts, dtype=np.int64)
    if not _takes(int(m.sum()), same_bits=True) or not _compile():  # numpy draws the same bits
        return None
    off = np.zeros(m.shape[0], dtype=np.int64) if offsets is None else np.asarray(offsets, dtype=np.int64)
    buf = np.empty((2, int(m.sum())), dtype=np.int64)
    _kernel("draw_negatives")(np.asarray(keys, dtype=np.uint64), m, off, int(num_vertices), buf[0], buf[1],
                              np.empty(int(num_vertices), dtype=np.int64))
    return buf


def pairs_by_bucket(pos: tuple[np.ndarray, np.ndarray, np.ndarray], neg: tuple[np.ndarray, np.ndarray, np.ndarray],
                    firsts: np.ndarray, shift: int, buckets: int,
                    index_dtype: np.dtype = np.int64) -> tuple[np.ndarray, ...] | None:
    """:func:`~hpcdgnn.tasks.link_prediction.pairs_by_step` in one compiled pass (the same order: the
    positives' bucket runs copied, the negatives' stable counting sort): (src, dst, label float32) from the
    steps' positives (in bucket order) and negatives, each given as (src, dst, bounds) int64, in ``buckets``
    buckets of 2^shift vertices, src and dst written as ``index_dtype``; None where the compiled path does not
    apply (fewer than :data:`MIN_PAIRS` pairs before the module is loaded, no numba)."""
    total = int(pos[0].shape[0] + neg[0].shape[0])
    if not _takes(total, same_bits=True) or not _compile():
        return None
    out = np.empty(total, dtype=index_dtype), np.empty(total, dtype=index_dtype), np.empty(total, dtype=np.float32)
    _kernel("pairs_by_bucket")(pos[0], pos[1], pos[2], neg[0], neg[1], neg[2], firsts, int(shift), *out,
                               np.empty(buckets, dtype=np.int64), np.empty(buckets, dtype=np.int64))
    return out


def gcn_norm_stacked(snaps: list, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The CSR arrays (crow, col, val) of diag(Ã_1, …, Ã_S) for canonical CPU snapshots
    (:func:`hpcdgnn.nn.conv.gcn.stacked_gcn_norm`, bit for bit), two compiled passes per snapshot; None where
    the compiled path does not apply (fewer than :data:`MIN_PAIRS` entries before the module is loaded,
    another device, no numba). Checkpoint blocks normalise every block twice an epoch (its forward and its
    re-run), where torch takes ~20 passes."""
    if not snaps or dtype not in (torch.float32, torch.float64) or any(c.indptr.device.type != "cpu" for c in snaps):
        return None
    if not _takes(sum(int(c.indices.shape[0]) for c in snaps), same_bits=True) or not _compile():
        return None
    arrays = [(_np(c.indptr), _np(c.indices), _np(c.values)) for c in snaps]
    degrees = _kernel("gcn_norm_degrees")
    dinv, kept = [], []
    for ip, ix, w in arrays:
        deg = np.empty(ip.shape[0] - 1)
        kept.append(int(degrees(ip, ix, w, deg)))
        dinv.append((1.0 / torch.sqrt(torch.from_numpy(deg))).numpy())  # gcn_norm's expression, its bits
    width = sum(ip.shape[0] - 1 for ip, _, _ in arrays)
    total = width + sum(kept)
    # int32 indices where they fit: MKL's sparse product takes int32 (torch would convert int64 ones on every
    # call), and a third less memory
    index = torch_index_dtype(total)
    crow, col = torch.zeros(width + 1, dtype=index), torch.empty(total, dtype=index)
    val = torch.empty(total, dtype=dtype)
    off = r0 = 0
    fill = _kernel("gcn_norm_fill")
    for (ip, ix, w), d, m in zip(arrays, dinv, kept, strict=True):
        n = ip.shape[0] - 1
        fill(ip, ix, w, d, r0, off, crow.numpy(), col.numpy(), val.numpy())
        off, r0 = off + n + m, r0 + n
    return crow, col, val


def graph_diff_merge(indptr: np.ndarray, indices: np.ndarray, removed: np.ndarray, added: np.ndarray,
                     nnz: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(indptr int64, indices of ``indices``' dtype) of the snapshot a graph difference rebuilds from the previous
    one's CSR (``removed``: ascending positions of its entries to drop; ``added``: ascending keys row * N + column
    to merge in; ``nnz`` entries in all), in one compiled pass (:func:`hpcdgnn.data.transfer.decode_block_host`:
    the same arrays as its numpy merge); None where the compiled path does not apply. Raises ValueError where
    the diff does not fit the snapshot."""
    if not _takes(indices.shape[0] + added.shape[0], same_bits=True) or not _compile():
        return None
    n = indptr.shape[0] - 1
    out_indptr, out_indices = np.empty(n + 1, dtype=np.int64), np.empty(nnz, dtype=indices.dtype)
    if _kernel("graph_diff_merge")(indptr, indices, removed, added, n, out_indptr, out_indices) != nnz:
        raise ValueError(f"decode_diff: the diff's {removed.shape[0]} removed positions and {added.shape[0]} added "
                         f"keys do not fit the previous snapshot (N = {n}, {indices.shape[0]} nonzeros)")
    return out_indptr, out_indices


def csr_transpose(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The CSR arrays (crow, col, val) of Aᵀ for a CPU CSR ``a`` by a compiled counting sort (exact: the entries
    in (column, row) order, as a key sort puts them); None where the compiled path does not apply."""
    if a.layout != torch.sparse_csr or not available(a.values(), pairs=a.values().shape[0], same_bits=True):
        return None
    crow, col = a.crow_indices(), a.col_indices()
    crow_t = torch.zeros(a.shape[1] + 1, dtype=crow.dtype)
    col_t, val_t = torch.empty_like(col), torch.empty_like(a.values())
    _kernel("csr_transpose")(crow.numpy(), col.numpy(), _np(a.values()), crow_t.numpy(), col_t.numpy(), val_t.numpy())
    return crow_t, col_t, val_t


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def edge_mlp_forward(pu, pv, b1, w2, b2, src, dst) -> torch.Tensor:
    """Logits ``w2 · relu(pu[src] + pv[dst] + b1) + b2`` per pair (E,), in one pass."""
    out = torch.empty(src.shape[0], dtype=pu.dtype)
    _kernel("edge_mlp_forward")(_np(pu), _np(pv), _np(b1), _np(w2), _np(b2)[0], _np(src), _np(dst), out.numpy())
    return out


def edge_bce_train(pu, pv, b1, w2, b2, src, dst, label, column_sum: bool = True) -> tuple[torch.Tensor, ...]:
    """(loss, logits, dpu, dpv, db1, dw2, db2): the summed binary cross-entropy of :func:`edge_mlp_forward`'s
    logits against ``label`` (E,), its forward and backward in one pass: the gradients of the sum (an
    upstream gradient of 1). The loss and dw2 are summed in float64 (a float32 sum over millions of pairs
    drifts by up to 2e-4 relative); db1 is the column sum of dpu, None without
    ``column_sum`` (:func:`project_backward` sums it in its pass over dpu)."""
    out = torch.empty(src.shape[0], dtype=pu.dtype)
    dpu, dpv = torch.zeros_like(pu), torch.zeros_like(pv)
    dw2 = np.zeros(w2.shape[0])
    loss, db2 = _kernel("edge_bce_train")(_np(pu), _np(pv), _np(b1), _np(w2), _np(b2)[0], _np(src), _np(dst),
                                          _np(label), out.numpy(), dpu.numpy(), dpv.numpy(), dw2,
                                          pu.dtype == torch.float32)
    return (torch.tensor(loss, dtype=pu.dtype), out, dpu, dpv, dpu.sum(0) if column_sum else None,
            torch.from_numpy(dw2).to(pu.dtype), torch.tensor([db2], dtype=pu.dtype))


def _line_values(t: torch.Tensor) -> int:
    """Values of ``t``'s dtype in one cache line, the row of the whole-row kernels (``_simd.LINE``, 64 bytes; not
    imported from there, which would import numba)."""
    return 64 // t.element_size()


def csr_mm(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """``a @ x`` for a CPU CSR ``a`` and a contiguous (n, F) ``x`` of its dtype in one compiled pass, F a multiple of
    a cache line's values (16 float32, 8 float64), for at least :data:`MIN_PAIRS` rows; else None.

    Each row's entries are multiplied and added in order, from zero: what MKL's product (torch's on the CPU)
    computes, bit for bit on every operator tried (the generator graph's and random power-law ones, rows of
    up to a thousand entries, float32 and float64, int32 and int64 indices; ``tests/nn/test_kernels.py``),
    in less time: MKL's loop for so few columns is mostly overhead per entry. The size rule
    is still kept (not ``same_bits``): another machine's MKL may sum in another order."""
    return _csr_product(a, x, transposed=False)


def csr_mm_t(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """``aᵀ @ x`` without ``aᵀ``, for a CPU CSR ``a`` and a contiguous (a's rows, F) ``x`` of its dtype, in one
    compiled pass that adds each row of x, times each of its row's entries, to the row of the output the entry's
    column names (:func:`csr_mm`'s conditions); else None. The same sums as :func:`csr_mm` over the transpose,
    bit for bit: each output row gets its terms in the transpose's row order, from zero. Why: the backward of
    Ã·X needs Ãᵀ, and building it costs more than the product — checkpoint blocks build each block's Ã twice an
    epoch."""
    return _csr_product(a, x, transposed=True)


def _csr_product(a: torch.Tensor, x: torch.Tensor, transposed: bool) -> torch.Tensor | None:
    """:func:`csr_mm` (a x) or, ``transposed``, :func:`csr_mm_t` (aᵀ x): their shared conditions, then the kernel
    (the scatter adds into zeros; the row sums overwrite an uninitialised output)."""
    inner, rows = (a.shape[0], a.shape[1]) if transposed else (a.shape[1], a.shape[0])
    if (a.layout != torch.sparse_csr or x.dim() != 2 or x.shape[0] != inner or x.shape[1] % _line_values(x)
            or not available(x, a.values(), pairs=a.shape[0])):
        return None  # torch's product (and its error where the shapes do not match)
    out = x.new_zeros(rows, x.shape[1]) if transposed else x.new_empty(rows, x.shape[1])
    _kernel("csr_mm_t" if transposed else "csr_mm")(a.crow_indices().numpy(), a.col_indices().numpy(),
                                                    _np(a.values()), _np(x), out.numpy())
    return out


def projection_available(z: torch.Tensor, w1: torch.Tensor) -> bool:
    """Whether :func:`project` and :func:`project_backward` take embeddings ``z`` (n, F) and the decoder's first
    layer ``w1`` (h, 2F): F = h = one cache line of z's dtype (:mod:`hpcdgnn.nn._simd`: 16 float32 or 8
    float64 — the width of every benchmark here), and :func:`available` for n rows; else torch's GEMMs."""
    width = _line_values(z)
    return (z.dim() == 2 and z.shape[1] == width and tuple(w1.shape) == (width, 2 * width)
            and available(z, w1, pairs=z.shape[0]))


def project(z: torch.Tensor, w1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pu, pv) = (z W1[:, :F]^T, z W1[:, F:]^T) in one compiled pass (:func:`projection_available`)."""
    f = z.shape[1]
    pu, pv = z.new_empty(z.shape[0], w1.shape[0]), z.new_empty(z.shape[0], w1.shape[0])
    _kernel("project")(_np(z), _np(w1[:, :f].t()), _np(w1[:, f:].t()), pu.numpy(), pv.numpy())
    return pu, pv


def project_backward(z: torch.Tensor, w1: torch.Tensor, dpu: torch.Tensor, dpv: torch.Tensor, scale: torch.Tensor,
                     input_grad: bool = True) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(dz, dw1, db1) of :func:`project` for the gradients ``dpu``, ``dpv`` of (pu, pv) times the upstream
    factor ``scale`` (a 0-d tensor), and the column sums of dpu times it (the first layer's bias gradient:
    pu + pv + b1 is what the decoder adds), in one compiled pass; dz None without ``input_grad``."""
    f = z.shape[1]
    dz = z.new_empty(z.shape)  # contiguous, whatever z's strides
    dw, db1 = np.zeros((w1.shape[0], 2 * f)), np.zeros(w1.shape[0])
    _kernel("project_backward")(_np(z), _np(dpu), _np(dpv), _np(w1[:, :f] * scale), _np(w1[:, f:] * scale),
                                dz.numpy(), dw, db1)
    return (dz if input_grad else None, torch.from_numpy(dw).to(z.dtype) * scale,
            torch.from_numpy(db1).to(z.dtype) * scale)


def _rows_compiled(dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> bool:
    return (dst.dim() == 2 and dst.is_contiguous() and src.is_contiguous() and src.dtype == dst.dtype
            and index.device.type == "cpu" and available(dst, src, pairs=index.shape[0], same_bits=True))


def add_rows(dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.index_add_(0, index, src)`` for contiguous 2-D CPU tensors, bit for bit (each element gets its
    rows' adds in row order): compiled where :func:`available` says so (the same bits, so any size once
    loaded), else torch's. Why: torch's CPU ``index_add_`` runs as a scatter-add, slow per row, and the
    chunk strategy's fused groups' backward adds millions of rows a layer."""
    if _rows_compiled(dst, index, src):
        _kernel("add_rows")(_np(dst), index.numpy(), _np(src))
        return dst
    return dst.index_add_(0, index, src)


def put_rows(dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.index_copy_(0, index, src)``, compiled as :func:`add_rows` (the fused groups' forward writes
    each group's rows where they go: no concatenation of the groups and no permutation after it)."""
    if _rows_compiled(dst, index, src):
        _kernel("put_rows")(_np(dst), index.numpy(), _np(src))
        return dst
    return dst.index_copy_(0, index, src)


def score_stats(logits: torch.Tensor, positive: np.ndarray, bins: int, half_range: float,
                into: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[int, np.ndarray, np.ndarray]:
    """(correct, positive histogram, negative histogram) of link-prediction logits (E,), ``positive`` (E,)
    marking the positive pairs by a value > 0 (a bool mask, or the pairs' float labels themselves: no mask
    made per call), in one pass, bin for bin as numpy's five passes over a float64 copy gave them
    (0.3–0.6 s per epoch at 12.6 M pairs; elsewhere :func:`hpcdgnn.tasks.link_prediction.score_stats_torch`
    computes the same on the logits' device). ``into``: two
    contiguous float64 (bins,) arrays the counts are added to (and returned), instead of fresh ones."""
    pos, neg = into if into is not None else (np.zeros(bins, dtype=np.float64), np.zeros(bins, dtype=np.float64))
    correct = _kernel("score_stats")(_np(logits), np.ascontiguousarray(positive), bins,
                                     float(half_range), pos, neg)
    return int(correct), pos, neg


#: the compiled LSTM recurrence runs for batches of at most this many rows (EvolveGCN-O's weight LSTM:
#: B = the layer's input width) — there torch's per-step kernels are mostly call overhead (about 7 small
#: kernels a step) — and for sequences of at least :data:`LSTM_MIN_STEPS` steps, so the tiny graphs of a
#: test suite never load numba for it (a stateless rule, as :data:`MIN_PAIRS`)
LSTM_MAX_BATCH = 64
LSTM_MIN_STEPS = 32


def lstm_available(gates: torch.Tensor) -> bool:
    """Whether :func:`lstm_forward` / :func:`lstm_backward` take feature-major ``gates`` (T, 4H, B)."""
    T, _, B = gates.shape
    return B <= LSTM_MAX_BATCH and _sized(T, LSTM_MIN_STEPS) and available(gates)


def _mask_arg(mask: torch.Tensor | None, like: torch.Tensor) -> np.ndarray:
    return np.empty((0, 1, 1), dtype=_np(like).dtype) if mask is None else _np(mask.to(like.dtype))


def lstm_forward(gates, w_hh, h0, c0, mask):
    """The recurrence of :class:`~hpcdgnn.nn.recurrent._LSTMLayer` in one compiled pass: ``gates`` (T, 4H, B)
    holds the input's pre-activations and is activated in place. Returns (hs, cs) (T+1, H, B) with the
    initial state at 0, the states entering each step (hin, cin) (T, H, B) and tanh(c_t) (T, H, B)."""
    T, G, B = gates.shape
    H = G // 4
    hs, cs = gates.new_empty(T + 1, H, B), gates.new_empty(T + 1, H, B)
    hs[0].copy_(h0)
    cs[0].copy_(c0)
    hin, cin, tc = gates.new_empty(T, H, B), gates.new_empty(T, H, B), gates.new_empty(T, H, B)
    _kernel("lstm_forward")(gates.numpy(), _np(w_hh), hs.numpy(), cs.numpy(), hin.numpy(), cin.numpy(),
                            tc.numpy(), _mask_arg(mask, gates), gates.dtype == torch.float32)
    return hs, cs, hin, cin, tc


def lstm_backward(gates, cin, tc, w_hh, mask, dy, dhT, dcT):
    """Pre-activation gradients (T, 4H, B) of :func:`lstm_forward` and the initial state's (dh0, dc0)."""
    dh, dc = dhT.detach().clone().contiguous(), dcT.detach().clone().contiguous()
    dgates = torch.empty_like(gates)
    _kernel("lstm_backward")(_np(gates), _np(cin), _np(tc), _np(w_hh), _mask_arg(mask, gates), _np(dy),
                             dh.numpy(), dc.numpy(), dgates.numpy())
    return dgates, dh, dc
