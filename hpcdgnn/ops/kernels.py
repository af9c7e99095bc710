"""Fused CPU kernels compiled with numba, for loops torch can only run as many small passes.

:func:`edge_bce_train` is the link-prediction decoder's loss, forward and backward, in one pass over the
pairs; :func:`lstm_forward` / :func:`lstm_backward` are the LSTM recurrence of small batches over many steps
(EvolveGCN-O's weight LSTM). They run on float32/float64 CPU tensors when numba imports and a call is at
least :data:`MIN_PAIRS` / :data:`LSTM_MIN_STEPS` large. ``HPCDGNN_KERNELS`` (``numba``/``torch``/``always``) and
``HPCDGNN_KERNELS_SKIP`` override that; :func:`self_check` compares each kernel with torch before the first
epoch. ``fastmath`` is limited to reassociation and contraction (no ``nnan``/``ninf``: a NaN loss must still
surface), so sums agree with torch to rounding and are deterministic per machine."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys

import numpy as np
import torch

__all__ = ["KERNELS", "SIBLINGS", "available", "calls", "compile_notice", "disable", "edge_bce_train", "expected",
           "lstm_available", "lstm_backward", "lstm_forward", "mode", "self_check", "skipped", "used_by", "wanted"]

_kernels = None


#: the compiled kernels by the names :func:`calls` counts and ``HPCDGNN_KERNELS_SKIP`` takes
KERNELS = ("edge_bce_train", "lstm_backward", "lstm_forward")

#: kernels one decision takes together: skipping one name skips its group
SIBLINGS = (("lstm_forward", "lstm_backward"),)

_skip_parsed: tuple[str, frozenset[str]] = ("", frozenset())


def mode() -> str:
    """``HPCDGNN_KERNELS``: ``numba`` (default), ``torch`` or ``always`` (``run`` checks it first)."""
    value = os.environ.get("HPCDGNN_KERNELS", "numba").lower()
    if value not in ("numba", "torch", "always"):
        from hpcdgnn.errors import ConfigError

        raise ConfigError(f"environment HPCDGNN_KERNELS={value!r}: use numba, torch or always")
    skipped()
    return value


def skipped() -> frozenset[str]:
    """The kernels ``HPCDGNN_KERNELS_SKIP`` sends to their torch paths, :data:`SIBLINGS` added."""
    global _skip_parsed
    raw = os.environ.get("HPCDGNN_KERNELS_SKIP", "")
    if raw == _skip_parsed[0]:
        return _skip_parsed[1]
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    unknown = sorted(names.difference(KERNELS))
    if unknown:
        from hpcdgnn.errors import ConfigError

        raise ConfigError(f"environment HPCDGNN_KERNELS_SKIP={raw!r}: no kernel {', '.join(map(repr, unknown))}; "
                          f"names: {', '.join(KERNELS)}")
    for group in SIBLINGS:
        if names.intersection(group):
            names.update(group)
    _skip_parsed = (raw, frozenset(names))
    return _skip_parsed[1]


def _on(name: str) -> bool:
    """Whether kernel ``name`` is not skipped (:func:`skipped`)."""
    return name not in skipped()


def _enabled() -> bool:
    return mode() != "torch"


def _sized(n: int, least: int) -> bool:
    """A call of size n takes the compiled path: n >= least, or any n with ``HPCDGNN_KERNELS=always``."""
    return n >= least or mode() == "always"


#: calls of each compiled kernel in this process since :func:`reset_calls` (:func:`calls`)
_calls: dict[str, int] = {}


def calls() -> dict[str, int]:
    """How often this process ran each compiled kernel in this run (``summary.json`` ``compiled_kernels``)."""
    return dict(sorted(_calls.items()))


def reset_calls() -> None:
    """Start counting a new run's calls (a process may train several runs: a library caller, the tests)."""
    _calls.clear()


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
                    from hpcdgnn.ops import _numba_kernels as _kernels
            except ImportError:  # numba missing, or built for another numpy: the torch paths remain
                pass
            except RuntimeError as e:  # numba found no directory it can write its cache to (it raised at import)
                if "no locator available" not in str(e):
                    raise
                from hpcdgnn.errors import ConfigError

                where = os.environ.get("NUMBA_CACHE_DIR")
                raise ConfigError(
                    "numba cannot cache the compiled CPU loops: no writable directory ("
                    f"{f'NUMBA_CACHE_DIR={where}, ' if where else ''}the install's hpcdgnn/ops/__pycache__, the user's "
                    "cache): set NUMBA_CACHE_DIR to a writable directory, or HPCDGNN_KERNELS=torch") from None
            else:
                notice = compile_notice(_kernels)
                if notice:  # the package logger by name: nn/ sits below metrics/
                    logging.getLogger("hpcdgnn").info(notice)
    return _kernels


def _writable_dir(path: str) -> bool:
    """Whether ``path`` is (or can become) a directory this process can create files in (numba's own test)."""
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
    """The numba cache directory while the compiled module is imported: one directory per CPU kind.

    Why: numba's one index per function, shared by CPU kinds, can pair one kind's key with another's code."""
    # no colours in numba's messages: colorama's exit hook wrote ESC [0m to every rank's output under mpirun.
    # numba reads the variable once, at its import (numba.core.errors): set for that alone, then the caller's
    # environment as it was (a notebook's later subprocesses inherit it)
    quiet = "numba" not in sys.modules and "NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING" not in os.environ
    if quiet:
        os.environ["NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"] = "1"
    try:
        import numba.core.errors  # noqa: F401 - the import that reads it
    finally:
        if quiet:
            del os.environ["NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"]
    from numba.core import config
    from numba.core.registry import cpu_target
    from numba.misc.appdirs import AppDirs

    magic = cpu_target.target_context.codegen().magic_tuple()
    # numba's cache ignores inlined files' stamps: _simd.py's source is in the key so it never runs stale
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
    """The log line (rank 0) where numba has no cache of ``module``'s loops yet, else None."""
    from pathlib import Path

    try:
        cache = Path(module.edge_bce_train._cache._cache_path)
    except AttributeError:  # another numba's internals: no notice rather than a wrong one
        return None
    if any(cache.glob(f"_numba_kernels.*.py{sys.version_info[0]}{sys.version_info[1]}.nbi")):
        return None
    return (f"compiling the CPU kernels (first run after an install): 10-20 s longer, with numba (cached in "
            f"{cache} for later runs)")


def expected() -> bool:
    """Whether CPU runs will take the compiled loops (numba installed and not disabled), without importing numba."""
    import importlib.util

    return _enabled() and importlib.util.find_spec("numba") is not None


#: calls with fewer pairs take the torch path (numba's load costs ~1 s); a stateless rule, so a resume matches
MIN_PAIRS = 1 << 14


def available(*tensors: torch.Tensor, pairs: int | None = None, kernel: str | None = None) -> bool:
    """Whether the numba kernels apply: enabled, CPU tensors of one float dtype, at least :data:`MIN_PAIRS` pairs.

    ``kernel``: the kernel the caller runs when this says True, False where it is skipped (:func:`skipped`)."""
    if kernel is not None:
        if kernel not in KERNELS:
            raise ValueError(f"available: no kernel {kernel!r}")
        if not _on(kernel):
            return False
    return _applies(*tensors, pairs=pairs)


def _applies(*tensors: torch.Tensor, pairs: int | None = None) -> bool:
    """:func:`available` without the skip list."""
    if not tensors or tensors[0].dtype not in (torch.float32, torch.float64):
        return False
    if any(t.device.type != "cpu" for t in tensors) or any(t.dtype != tensors[0].dtype for t in tensors):
        return False
    if pairs is not None and not _sized(pairs, MIN_PAIRS):
        return False
    return bool(_compile())


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def edge_bce_train(pu, pv, b1, w2, b2, src, dst, label) -> tuple[torch.Tensor, ...]:
    """(loss, logits, dpu, dpv, db1, dw2, db2) of the summed BCE of ``w2 · relu(pu[src] + pv[dst] + b1) + b2``.

    Forward and backward in one pass; the loss and dw2 are summed in float64 (float32 drifts over millions of pairs)."""
    out = torch.empty(src.shape[0], dtype=pu.dtype)
    dpu, dpv = torch.zeros_like(pu), torch.zeros_like(pv)
    dw2 = np.zeros(w2.shape[0])
    loss, db2 = _kernel("edge_bce_train")(_np(pu), _np(pv), _np(b1), _np(w2), _np(b2)[0], _np(src), _np(dst),
                                          _np(label), out.numpy(), dpu.numpy(), dpv.numpy(), dw2,
                                          pu.dtype == torch.float32)
    return (torch.tensor(loss, dtype=pu.dtype), out, dpu, dpv, dpu.sum(0),
            torch.from_numpy(dw2).to(pu.dtype), torch.tensor([db2], dtype=pu.dtype))


#: the compiled LSTM runs for batches of at most this many rows and at least LSTM_MIN_STEPS steps
LSTM_MAX_BATCH = 64
LSTM_MIN_STEPS = 32


def lstm_available(gates: torch.Tensor) -> bool:
    """Whether :func:`lstm_forward` / :func:`lstm_backward` take feature-major ``gates`` (T, 4H, B)."""
    T, _, B = gates.shape
    return B <= LSTM_MAX_BATCH and _sized(T, LSTM_MIN_STEPS) and _on("lstm_forward") and _applies(gates)


def _mask_arg(mask: torch.Tensor | None, like: torch.Tensor) -> np.ndarray:
    return np.empty((0, 1, 1), dtype=_np(like).dtype) if mask is None else _np(mask.to(like.dtype))


def lstm_forward(gates, w_hh, h0, c0, mask):
    """The recurrence of :class:`~hpcdgnn.ops.scan._LSTMLayer` in one compiled pass (``gates`` activated in place).

    Returns (hs, cs) (T+1, H, B), the states entering each step (hin, cin) (T, H, B) and tanh(c_t) (T, H, B)."""
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


def wanted(dtype: torch.dtype, device: torch.device, steps: int, pairs: int) -> frozenset[str]:
    """The kernels a job may take (and so :func:`self_check`): those its sequence length ``steps`` or its pair
    count ``pairs`` reaches; none for a small job, which never loads numba."""
    if not (device.type == "cpu" and dtype in (torch.float32, torch.float64) and expected()):
        return frozenset()
    names = set(SIBLINGS[0]) if _sized(steps, LSTM_MIN_STEPS) else set()
    if _sized(pairs, MIN_PAIRS):
        names.add("edge_bce_train")
    return frozenset(names)


def used_by(dtype: torch.dtype, device: torch.device, steps: int, pairs: int) -> bool:
    """Whether a job may take any compiled loop (:func:`wanted`)."""
    return bool(wanted(dtype, device, steps, pairs))


def self_check(dtype: torch.dtype, which: frozenset[str] | None = None) -> bool:
    """Compile the kernels ``which`` (None: all) for ``dtype`` and compare each with its torch reference on a tiny
    case. True where all agree; else one warning line and the torch paths from then on. False where numba is off."""
    global _kernels
    if dtype not in (torch.float32, torch.float64) or not _compile():
        return False
    counted = dict(_calls)
    try:
        failed = [name for name, ok in _checks(dtype, which) if not ok]
    except Exception as e:  # a compile error, another numba: the torch paths, not a crash
        failed = [f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"]
    finally:
        _calls.clear()
        _calls.update(counted)
    if failed:
        _kernels = False
        logging.getLogger("hpcdgnn").warning(
            f"the compiled CPU kernels failed their start-up check ({'; '.join(failed)}, {dtype}): this process "
            "takes the torch paths (HPCDGNN_KERNELS=torch does so without the check)")
        return False
    return True


def disable() -> None:
    """The torch paths in this process from now on (where another rank's kernels failed their check: every rank
    takes the same paths, so the run stays P-invariant bit for bit)."""
    global _kernels
    _kernels = False


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """``got`` equals ``want`` to the kernels' rounding (fastmath sums, float32's vector exp), NaN nowhere."""
    tol = 1e-9 if want.dtype == torch.float64 else 1e-4
    return got.shape == want.shape and bool(torch.allclose(got.to(want.dtype), want, rtol=tol, atol=tol))


def _checks(dtype: torch.dtype, which: frozenset[str] | None = None):
    """(name, agrees) of each kernel of ``which`` (None: all) against torch's autograd, with the argument types
    a run passes."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(7)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)

    with torch.enable_grad():
        # int32 and int64 pair indices (hpcdgnn.tasks.link_prediction.pair_index_dtype): numba compiles each
        pair_cases = ((64 // torch.empty(0, dtype=dtype).element_size(), torch.int32), (3, torch.int64))
        for h, index in pair_cases if which is None or "edge_bce_train" in which else ():
            leaves = [randn(6, h), randn(6, h), randn(h), randn(h), randn(1)]
            src = torch.tensor([0, 5, 2, 2, 4, 0, 1], dtype=index)
            dst = torch.tensor([3, 3, 1, 0, 5, 2, 2], dtype=index)
            label = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0], dtype=dtype)
            got = edge_bce_train(*leaves, src, dst, label)
            ref = [t.clone().requires_grad_() for t in leaves]
            logits = torch.relu(ref[0][src] + ref[1][dst] + ref[2]) @ ref[3] + ref[4]
            loss = F.binary_cross_entropy_with_logits(logits, label, reduction="sum")
            want = [loss.detach(), logits.detach(), *torch.autograd.grad(loss, ref)]
            yield f"edge_bce_train (width {h})", all(_close(a, b) for a, b in zip(got, want, strict=True))
        T, H, B = 3, 2, 3
        masks = (None, torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]], dtype=dtype))
        for mask in masks if which is None or "lstm_forward" in which else ():
            mask = None if mask is None else mask.reshape(T, 1, B)
            pre, w_hh, h0, c0 = randn(T, 4 * H, B), randn(4 * H, H), randn(H, B), randn(H, B)
            dy, dh_t, dc_t = randn(T, H, B), randn(H, B), randn(H, B)
            gates = pre.clone()
            hs, cs, _, cin, tc = lstm_forward(gates, w_hh, h0, c0, mask)
            dgates, dh0, dc0 = lstm_backward(gates, cin, tc, w_hh, mask, dy, dh_t, dc_t)
            ref = [t.clone().requires_grad_() for t in (pre, h0, c0)]
            h, c, out = ref[1], ref[2], []
            for t in range(T):
                if mask is not None:
                    h, c = h * mask[t], c * mask[t]
                z = ref[0][t] + w_hh @ h
                c = z[H : 2 * H].sigmoid() * c + z[:H].sigmoid() * z[2 * H : 3 * H].tanh()
                h = z[3 * H :].sigmoid() * torch.tanh(c)
                out.append(h)
            out = torch.stack(out)
            grads = torch.autograd.grad((out * dy).sum() + (h * dh_t).sum() + (c * dc_t).sum(), ref)
            which = "masked" if mask is not None else "plain"
            yield f"lstm_forward ({which})", _close(hs[1:], out.detach()) and _close(cs[T], c.detach())
            yield f"lstm_backward ({which})", all(_close(a, b) for a, b in zip((dgates, dh0, dc0), grads, strict=True))
