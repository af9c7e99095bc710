"""The compiled decoder loops (hpcdgnn/ops/kernels.py) against the chunked torch paths they replace on the CPU."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from hpcdgnn.ops import decoder, kernels
from hpcdgnn.ops.decoder import _EDGE_CHUNK, _edge_chunk, _EdgeMLP
from hpcdgnn.tasks.link_prediction import EdgeDecoder

pytest.importorskip("numba")


@pytest.fixture
def use(monkeypatch):
    """Choose the path _EdgeMLP takes from now on: "numba" or "torch"."""

    def choose(mode: str) -> None:
        monkeypatch.setenv("HPCDGNN_KERNELS", mode)
        monkeypatch.setattr(kernels, "_kernels", None)
        monkeypatch.setattr(kernels, "MIN_PAIRS", 0)  # these pair counts are small

    yield choose
    monkeypatch.setattr(kernels, "_kernels", None)


def _run(dtype, rows: int, hidden: int, pairs: int, seed: int = 0, device: str = "cpu"):
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(rows, hidden, generator=g, dtype=dtype), torch.randn(rows, hidden, generator=g, dtype=dtype),
              torch.randn(hidden, generator=g, dtype=dtype), torch.randn(hidden, generator=g, dtype=dtype),
              torch.randn(1, generator=g, dtype=dtype)]
    params = [p.to(device).requires_grad_() for p in params]
    # repeated rows on both ends, and more pairs than a torch chunk, so scatter-adds collide across chunks
    src = torch.randint(0, rows, (pairs,), generator=g).to(device)
    dst = torch.randint(0, rows, (pairs,), generator=g).to(device)
    grad = torch.randn(pairs, generator=g, dtype=dtype).to(device)
    out = _EdgeMLP.apply(*params, src, dst)
    out.backward(grad)
    return [out.detach().cpu()] + [p.grad.cpu() for p in params]


def test_decoder_chunks_are_l2_sized_on_the_cpu_and_memory_sized_elsewhere():
    """The torch decoder's chunk (:func:`_edge_chunk`): on the CPU its (chunk, hidden) temporaries fit a core's
    L2; on another device (a ``meta`` tensor stands for a GPU's) a chunk costs the same launches whatever its
    size, so its temporaries fill ``_EDGE_CHUNK_DEVICE_BYTES`` — never fewer pairs than the CPU's chunk."""
    cap = decoder._EDGE_CHUNK_DEVICE_BYTES
    assert _edge_chunk(torch.zeros(5, 16)) == _EDGE_CHUNK
    assert _edge_chunk(torch.empty(5, 16, device="meta")) == cap // (16 * 4) > _EDGE_CHUNK
    assert _edge_chunk(torch.empty(5, 16, dtype=torch.float64, device="meta")) == cap // (16 * 8)
    assert _edge_chunk(torch.empty(5, cap, device="meta")) == _EDGE_CHUNK  # a wide hidden layer: the floor


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("device_bytes", [None, 1])
def test_gpu_decoder_equals_the_cpu_in_one_chunk_or_several(use, monkeypatch, device_bytes):
    """On a GPU the decoder's pairs run as one chunk (the default memory bound), or as several of the CPU's
    size (a bound of 1 byte): logits and every gradient equal the CPU's torch path to float64 rounding
    (CUDA's atomic adds sum in another order)."""
    use("torch")
    pairs = 3 * _EDGE_CHUNK + 17
    ref = _run(torch.float64, 37, 16, pairs)
    if device_bytes is not None:
        monkeypatch.setattr(decoder, "_EDGE_CHUNK_DEVICE_BYTES", device_bytes)
    assert (_edge_chunk(torch.empty(1, 16, dtype=torch.float64, device="cuda")) < pairs) == (device_bytes is not None)
    got = _run(torch.float64, 37, 16, pairs, device="cuda")
    for name, a, b in zip(["logits", "dpu", "dpv", "db1", "dw2", "db2"], got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=name)


def _train(dtype, rows: int, features: int, hidden: int, pairs: int, seed: int = 0, spread: float = 1.0):
    """Loss, logits, projections and every gradient (z and the decoder's parameters) of EdgeDecoder.train_loss,
    the loss scaled by an upstream factor as a strategy scales it."""
    torch.manual_seed(seed)
    dec = EdgeDecoder(features, hidden).to(dtype)
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(rows, features, generator=g, dtype=dtype) * spread).requires_grad_()
    src = torch.randint(0, rows, (pairs,), generator=g)
    dst = torch.randint(0, rows, (pairs,), generator=g)
    label = (torch.rand(pairs, generator=g) < 0.5).to(dtype)
    loss, logits, (pu, pv) = dec.train_loss(z, src, dst, label)
    assert not logits.requires_grad and not pu.requires_grad and not pv.requires_grad
    (loss * 0.37).backward()
    return [loss.detach(), logits, pu, pv, z.grad] + [p.grad for p in dec.parameters()]


@pytest.mark.parametrize("pairs", [1, 3 * _EDGE_CHUNK + 17])
def test_fused_training_loss_equals_torch_float64(use, pairs):
    """The one-pass loss (forward and backward in one compiled loop) gives the torch path's loss, logits,
    projections and gradients."""
    use("numba")
    fast = _train(torch.float64, 37, 5, 16, pairs)
    assert kernels.calls().get("edge_bce_train", 0) > 0
    use("torch")
    ref = _train(torch.float64, 37, 5, 16, pairs)
    names = ["loss", "logits", "pu", "pv", "dz", "dw1", "db1", "dw2", "db2"]
    for name, a, b in zip(names, fast, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)


def test_fused_training_loss_float32_vector_exp(use):
    """float32 takes the vectorised exp: large logits of both signs (|x| past 87, the clamp at
    exp(-87)) and an odd width agree with torch's sigmoid-based gradients to float32 rounding."""
    use("numba")
    fast = _train(torch.float32, 60, 3, 7, 5000, seed=4, spread=100.0)
    assert fast[1].abs().max() > 87  # the clamp is exercised
    use("torch")
    ref = _train(torch.float32, 60, 3, 7, 5000, seed=4, spread=100.0)
    for a, b in zip(fast, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-4)


def test_fused_training_loss_propagates_nan(use):
    """fastmath stops short of nnan: a NaN embedding gives a NaN logit, loss and output-layer gradient."""
    use("numba")
    dec = EdgeDecoder(2, 4)
    z = torch.zeros(3, 2, requires_grad=True)
    bad = torch.tensor([[0.0, 0.0], [float("nan"), 0.0], [0.0, 0.0]])
    loss, logits, _ = dec.train_loss(z + bad, torch.tensor([0, 1]), torch.tensor([2, 2]), torch.tensor([1.0, 0.0]))
    assert not torch.isnan(logits[0]) and torch.isnan(logits[1]) and torch.isnan(loss)
    loss.backward()
    assert torch.isnan(dec.lin2.weight.grad).any() and torch.isnan(dec.lin2.bias.grad).all()


@pytest.mark.parametrize("dtype,width", [(torch.float64, 8), (torch.float32, 16)])
def test_line_wide_rows_take_the_whole_row_operations(use, dtype, width):
    """Rows of one cache line (hidden = F = 8 float64 or 16 float32) take the whole-row operations
    (hpcdgnn/ops/_simd.py) in the decoder's pair loop — loss, logits, projections and every gradient as torch's
    path gives them, to rounding."""
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-4)
    use("numba")
    before = kernels.calls()
    fast = _train(dtype, 53, width, width, 3 * _EDGE_CHUNK + 17, seed=5)
    ran = {k: v - before.get(k, 0) for k, v in kernels.calls().items()}
    assert ran == {"edge_bce_train": 1}
    use("torch")
    ref = _train(dtype, 53, width, width, 3 * _EDGE_CHUNK + 17, seed=5)
    names = ["loss", "logits", "pu", "pv", "dz", "dw1", "db1", "dw2", "db2"]
    for name, a, b in zip(names, fast, ref, strict=True):
        torch.testing.assert_close(a, b, **tol, msg=name)


def test_line_wide_rows_propagate_nan(use):
    """The whole-row ReLU passes a NaN as numba's max does: a NaN embedding gives a NaN logit and loss."""
    use("numba")
    dec = EdgeDecoder(8, 8).double()
    z = torch.zeros(3, 8, dtype=torch.float64, requires_grad=True)
    bad = torch.zeros(3, 8, dtype=torch.float64)
    bad[1, 3] = float("nan")
    loss, logits, _ = dec.train_loss(z + bad, torch.tensor([0, 1]), torch.tensor([2, 2]),
                                     torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert kernels.calls().get("edge_bce_train", 0) > 0
    assert not torch.isnan(logits[0]) and torch.isnan(logits[1]) and torch.isnan(loss)


def test_always_drops_the_size_thresholds_and_a_bad_value_is_refused(monkeypatch):
    """HPCDGNN_KERNELS=always: the compiled loops for calls of any size (tests run them under MPI on small
    graphs); a value that is none of numba / torch / always is a one-line configuration error naming it."""
    from hpcdgnn.errors import ConfigError

    monkeypatch.setattr(kernels, "_kernels", None)
    monkeypatch.setenv("HPCDGNN_KERNELS", "always")
    assert kernels.available(torch.zeros(2), pairs=1)
    assert kernels.lstm_available(torch.zeros(2, 8, 3))  # 2 steps, far below LSTM_MIN_STEPS
    monkeypatch.setenv("HPCDGNN_KERNELS", "numba")
    assert not kernels.available(torch.zeros(2), pairs=1) and not kernels.lstm_available(torch.zeros(2, 8, 3))
    monkeypatch.setenv("HPCDGNN_KERNELS", "fast")
    with pytest.raises(ConfigError, match="HPCDGNN_KERNELS='fast'"):
        kernels.available(torch.zeros(2), pairs=1)
    monkeypatch.setattr(kernels, "_kernels", None)


def test_not_available_for_other_dtypes_or_mixed(use):
    use("numba")
    assert not kernels.available(torch.zeros(2, dtype=torch.float16))
    assert not kernels.available(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert not kernels.available()


def test_small_calls_take_the_torch_path(monkeypatch):
    """Below MIN_PAIRS the torch path runs and numba is not loaded (no ~1 s load for a tiny graph) — also
    after a large call loaded it: the path depends on the call alone, so a resumed run repeats it."""
    monkeypatch.setenv("HPCDGNN_KERNELS", "numba")
    monkeypatch.setattr(kernels, "_kernels", None)
    x = torch.zeros(2)
    assert not kernels.available(x, pairs=kernels.MIN_PAIRS - 1) and kernels._kernels is None
    assert kernels.available(x, pairs=kernels.MIN_PAIRS)
    assert not kernels.available(x, pairs=1)
    monkeypatch.setattr(kernels, "_kernels", None)


def _lstm(dtype, T: int, B: int, H: int, inputs: int | None, masked: bool, seed: int = 1):
    """Outputs and every gradient of one _LSTMLayer call (inputs None: EvolveGCN-O's self-fed form)."""
    from hpcdgnn.ops.scan import _LSTMLayer

    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g, dtype=dtype) * 0.5).requires_grad_()

    x, w_ih = (rnd(T, B, inputs), rnd(4 * H, inputs)) if inputs else (None, None)
    b, h0, c0, w_hh = rnd(4 * H), rnd(H, B), rnd(H, B), rnd(4 * H, H)
    mask = (torch.rand(T, 1, B, generator=g) > 0.2).to(dtype) if masked else None
    y, hT, cT = _LSTMLayer.apply(x, w_ih, b, h0, c0, w_hh, mask, T)
    dy, dh, dc = torch.randn(T, H, B, generator=g, dtype=dtype), torch.randn(H, B, generator=g, dtype=dtype), \
        torch.randn(H, B, generator=g, dtype=dtype)
    torch.autograd.backward([y, hT, cT], [dy, dh, dc])
    leaves = [t for t in (x, w_ih, b, h0, c0, w_hh) if t is not None]
    return [y.detach(), hT.detach(), cT.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize(("inputs", "masked"), [(None, False), (3, False), (3, True)])
def test_compiled_lstm_equals_torch_steps_float64(use, monkeypatch, inputs, masked):
    """The compiled recurrence (small B, long T) against the torch step loop: values and all gradients."""
    use("numba")
    T, B, H = kernels.LSTM_MIN_STEPS + 3, 5, 4
    got = _lstm(torch.float64, T, B, H, inputs, masked)
    monkeypatch.setattr(kernels, "lstm_available", lambda gates: False)
    ref = _lstm(torch.float64, T, B, H, inputs, masked)
    for a, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(a.numpy(), r.numpy(), rtol=1e-12, atol=1e-13)


def test_vector_activations_float32_to_rounding():
    """The float32 LSTM's sigmoid and tanh passes (Cody–Waite exp, no libm call) against float64 numpy: tanh to
    ~1 ulp relative everywhere, tiny arguments included (expm1 form: (1 - e^-2x) / (1 + e^-2x) would lose all
    digits there); sigmoid to ~1 ulp above float32's exp(-87) clamp."""
    from hpcdgnn.ops import _numba_kernels as nk

    x = np.concatenate([np.linspace(-100, 100, 40001), np.logspace(-30, 1, 3001), -np.logspace(-30, 1, 3001),
                        [0.0]]).astype(np.float32)
    p, bits = np.empty_like(x), np.empty(x.shape, dtype=np.int32)
    ref = np.tanh(x.astype(np.float64))
    out = np.empty_like(x)
    nk._tanh_vec(x, out, p, bits)
    nonzero = ref != 0
    assert np.all(out[~nonzero] == 0)
    assert np.max(np.abs(out[nonzero] - ref[nonzero]) / np.abs(ref[nonzero])) < 3e-7
    sig = x.copy()
    nk._sigmoid_vec(sig, sig, p, bits)
    ref = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    live = x > -80
    assert np.max(np.abs(sig[live] - ref[live]) / ref[live]) < 3e-7
    assert np.all((sig >= 0) & (sig <= 1))


def test_vector_bce_float32_to_rounding():
    """The decoder's float32 loss terms (vectorised exp and log1p, no libm call) against float64 numpy: each
    term to ~1 ulp relative — log1p keeps its digits down to tiny t, where log(1 + t) would lose them — and
    the chunk's float64 sum with them; g = σ(x) − y as before."""
    from hpcdgnn.ops import _numba_kernels as nk

    x = np.concatenate([np.linspace(-100, 100, 40001), np.logspace(-30, 1.9, 3001), -np.logspace(-30, 1.9, 3001),
                        [0.0]]).astype(np.float32)
    xd = x.astype(np.float64)
    t = np.exp(-np.abs(xd))
    for y in (np.zeros_like(x), np.ones_like(x)):
        ref = np.maximum(xd, 0) - xd * y + np.log1p(t)
        terms = np.empty_like(x)
        g, bits = np.empty(1, dtype=np.float32), np.empty(1, dtype=np.int32)
        for i in range(x.shape[0]):  # one element a call: each term alone, not only their sum
            terms[i] = nk._bce_parts(x[i : i + 1], y[i : i + 1], g, bits, True)
        live = np.abs(xd) < 87  # float32's normals: exp(-87) and below are clamped there
        assert np.max(np.abs(terms[live] - ref[live]) / ref[live]) < 4e-7
        assert np.max(np.abs(terms[~live] - ref[~live])) < 2e-38
        g, bits = np.empty_like(x), np.empty(x.shape, dtype=np.int32)
        total = nk._bce_parts(x, y, g, bits, True)
        assert abs(total - ref.sum()) <= 1e-7 * ref.sum()
        sig = 1.0 / (1.0 + np.exp(-xd))
        np.testing.assert_allclose(g, sig - y, rtol=3e-7, atol=1e-7)


def test_compiled_lstm_float32_masked_with_inputs(use, monkeypatch):
    """The float32 recurrence's vectorised activations with a reset mask and an input projection, against
    the torch step loop (values and every gradient) to float32 rounding."""
    use("numba")
    T = kernels.LSTM_MIN_STEPS + 1
    got = _lstm(torch.float32, T, 7, 5, 3, True)
    monkeypatch.setattr(kernels, "lstm_available", lambda gates: False)
    ref = _lstm(torch.float32, T, 7, 5, 3, True)
    for a, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(a.numpy(), r.numpy(), rtol=2e-4, atol=2e-5)


def test_compiled_lstm_float32_and_the_size_rule(use, monkeypatch):
    use("numba")
    T = kernels.LSTM_MIN_STEPS
    got = _lstm(torch.float32, T, 16, 16, None, False)
    monkeypatch.setattr(kernels, "lstm_available", lambda gates: False)
    ref = _lstm(torch.float32, T, 16, 16, None, False)
    for a, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(a.numpy(), r.numpy(), rtol=2e-4, atol=2e-5)
    monkeypatch.undo()
    use("numba")
    H = 4
    assert kernels.lstm_available(torch.zeros(T, 4 * H, kernels.LSTM_MAX_BATCH))
    assert not kernels.lstm_available(torch.zeros(T, 4 * H, kernels.LSTM_MAX_BATCH + 1))  # BLAS wins there
    assert not kernels.lstm_available(torch.zeros(T - 1, 4 * H, 2))  # short sequences: no numba load
    assert not kernels.lstm_available(torch.zeros(T, 4 * H, 2, dtype=torch.float16))


def test_a_first_compile_is_announced(tmp_path):
    """The first run after an install compiles the loops (10-20 s of epoch 1 on 2 cores, silently: it looked like a
    hang). One line says so where numba's cache directory (numba's own choice, read from a compiled function) has
    no index of them for this Python."""
    import sys
    from types import SimpleNamespace

    from hpcdgnn.ops.kernels import compile_notice

    module = SimpleNamespace(edge_bce_train=SimpleNamespace(_cache=SimpleNamespace(_cache_path=str(tmp_path))))
    assert f"cached in {tmp_path} for later runs" in compile_notice(module)
    (tmp_path / "_numba_kernels.edge_bce_train-19.py27.nbi").write_bytes(b"")  # another Python's
    assert compile_notice(module)
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}"
    (tmp_path / f"_numba_kernels.edge_bce_train-19.{tag}.nbi").write_bytes(b"")
    assert compile_notice(module) is None
    assert compile_notice(SimpleNamespace()) is None  # numba internals it cannot read: silent


@pytest.mark.slow  # ~15 s: numba compiles every loop in three fresh interpreters
def test_each_cpu_kind_compiles_into_a_cache_of_its_own(tmp_path):
    """Two CPU kinds (here numba's host CPU and ``NUMBA_CPU_NAME=generic``, as two nodes of a cluster sharing
    one install) cache their compiled loops in separate directories under ``NUMBA_CACHE_DIR``: in one directory
    two first compiles at once could leave one kind's index entry naming the other kind's code. numba's own
    setting is back after the import."""
    import os
    import subprocess
    import sys

    probe = ("import torch; from numba.core import config; from hpcdgnn.ops import kernels; "
             "m = kernels._compile(); z = torch.zeros(2, 1, 1, dtype=torch.float64); h = z[0]; "
             "kernels.lstm_backward(torch.zeros(2, 4, 1, dtype=torch.float64), z, z, h.expand(4, 1), None, z, h, h); "
             "print(m.lstm_backward._cache._cache_path, config.CACHE_DIR)")
    paths = []
    for cpu in (None, "generic"):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "HPCDGNN_KERNELS"))}
        env.update({"NUMBA_CACHE_DIR": str(tmp_path)} | ({"NUMBA_CPU_NAME": cpu} if cpu else {}))
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        path, restored = out.stdout.split()
        assert restored == str(tmp_path)
        paths.append(path)
        assert any(Path(path).glob("_numba_kernels.lstm_backward-*.nbi")), os.listdir(path)  # compiled there
    assert paths[0] != paths[1] and all(Path(p).parent.parent == tmp_path for p in paths), paths
    assert Path(paths[1]).parent.name.startswith("numba-generic-")
    # a NUMBA_CACHE_DIR nobody can write (here a file): the next place numba would try, still one per kind
    (tmp_path / "file").write_text("")
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "file" / "cache")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.split()[0])
    assert path.parent.name == Path(paths[1]).parent.name and not path.is_relative_to(tmp_path), path


def _on_a_terminal(args: list[str], env: dict) -> bytes:
    """What ``args`` writes to its stdout when that is a (pseudo-)terminal, as for every rank under mpirun."""
    import os
    import pty
    import select
    import subprocess
    import time

    main, child = pty.openpty()
    proc = subprocess.Popen(args, stdout=child, stderr=subprocess.PIPE, env=env)
    os.close(child)
    out, deadline = b"", time.monotonic() + 120
    while time.monotonic() < deadline:
        if not select.select([main], [], [], 1.0)[0]:
            continue
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    return out


@pytest.mark.slow  # ~8 s: numba compiles the loops in two fresh interpreters
def test_numba_leaves_no_colour_reset_on_a_terminal(tmp_path):
    """numba's import builds error messages through colorama (where installed), whose exit hook wrote an ANSI reset
    (ESC [0m) to stdout when it is a terminal — as it is for every rank under Open MPI's mpirun: each rank's
    output, and so the job's log file, ended in escape codes. Unless the user asks numba for colours (an empty
    NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING, the case that shows the hook is there to be avoided)."""
    import os
    import sys

    pytest.importorskip("colorama")
    probe = ("from hpcdgnn.ops import kernels; kernels._compile(); "
             "import numba.cpython.listobj; print('end')")  # listobj builds a TypingError at import
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "HPCDGNN_KERNELS"))} | \
        {"NUMBA_CACHE_DIR": str(tmp_path)}
    assert _on_a_terminal([sys.executable, "-c", probe], env).strip() == b"end"
    coloured = _on_a_terminal([sys.executable, "-c", probe], env | {"NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING": ""})
    assert coloured.strip().startswith(b"end") and b"\x1b[0m" in coloured, coloured


def test_no_writable_cache_is_one_line(tmp_path):
    """Where numba can write its cache nowhere (a read-only install, an unwritable home and NUMBA_CACHE_DIR; as
    root here, simulated by making every directory test fail), numba raised RuntimeError at the compiled
    module's import, a traceback on that node's ranks. Now one line naming the variable to set."""
    import os
    import subprocess
    import sys

    probe = ("from numba.core import caching\n"
             "def refuse(self): raise OSError('read-only')\n"
             "caching._CacheLocator.ensure_cache_path = refuse\n"
             "from hpcdgnn.ops import kernels\n"
             "kernels._writable_dir = lambda path: False\n"
             "from hpcdgnn.errors import ConfigError\n"
             "try:\n    kernels._compile()\nexcept ConfigError as e:\n    print('ERROR', e)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "HPCDGNN_KERNELS"))}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "ro")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        f"ERROR numba cannot cache the compiled CPU loops: no writable directory (NUMBA_CACHE_DIR={tmp_path / 'ro'}, "
        "the install's hpcdgnn/ops/__pycache__, the user's cache): set NUMBA_CACHE_DIR to a writable directory, or "
        "HPCDGNN_KERNELS=torch"), out.stdout + out.stderr


def test_without_numba_every_caller_takes_its_torch_path():
    """numba is an optional extra (pyproject's ``cpu-kernels``): where it does not import (a fresh interpreter that
    cannot import it), nothing is compiled, nothing is checked and the decoder's loss and the LSTM are torch's."""
    import os
    import subprocess
    import sys

    probe = ("import sys; sys.modules['numba'] = None\n"
             "import torch\n"
             "from hpcdgnn.ops import kernels\n"
             "from hpcdgnn.ops.scan import lstm_scan\n"
             "from hpcdgnn.tasks.link_prediction import EdgeDecoder\n"
             "assert not kernels.expected() and not kernels.available(torch.zeros(2), pairs=1)\n"
             "assert not kernels.lstm_available(torch.zeros(40, 8, 3)) and not kernels.self_check(torch.float64)\n"
             "assert not kernels.used_by(torch.float64, torch.device('cpu'), 100, 1 << 20)\n"
             "z = torch.randn(10, 3, requires_grad=True)\n"
             "loss = EdgeDecoder(3, 4).train_loss(z, torch.arange(10), torch.arange(10).flip(0), torch.ones(10))[0]\n"
             "loss.backward()\n"
             "w = [torch.randn(*s, requires_grad=True) for s in ((8, 3), (8, 2), (8,), (8,))]\n"
             "y, h, c = lstm_scan(torch.randn(40, 3, 3), torch.zeros(3, 2), torch.zeros(3, 2), *w)\n"
             "y.sum().backward()\n"
             "assert kernels.calls() == {} and kernels._kernels is False and 'numba' not in str(sys.modules.get("
             "'hpcdgnn.ops._numba_kernels'))\n"
             "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "HPCDGNN_KERNELS"))}
    env["HPCDGNN_KERNELS"] = "always"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_self_check_compiles_and_compares_and_a_failure_is_one_warning_and_the_torch_paths(use, monkeypatch,
                                                                                          caplog, dtype):
    """kernels.self_check (before a run's first epoch): each kernel against torch's autograd on a tiny case, its
    calls not counted; a kernel that disagrees gives one warning line naming it and the torch paths for the rest
    of the process."""
    from hpcdgnn.ops import _numba_kernels

    # an earlier test's configure_logging may have left the package logger not propagating, with a handler on a
    # stream pytest has closed since: caplog sees the records only through propagation
    log = logging.getLogger("hpcdgnn")
    monkeypatch.setattr(log, "propagate", True)
    monkeypatch.setattr(log, "handlers", [])
    use("always")
    before = kernels.calls()
    assert kernels.self_check(dtype) and kernels.calls() == before
    assert dict(kernels._checks(dtype)) and all(ok for _, ok in kernels._checks(dtype))
    kernels._calls.clear()
    kernels._calls.update(before)
    real = _numba_kernels.edge_bce_train

    def off_by_one(*args):
        loss, gsum = real(*args)
        return loss + 1.0, gsum

    monkeypatch.setattr(_numba_kernels, "edge_bce_train", off_by_one)
    with caplog.at_level("WARNING", logger="hpcdgnn"):
        assert not kernels.self_check(dtype)
    lines = [r.getMessage() for r in caplog.records if r.name == "hpcdgnn"]
    assert len(lines) == 1 and "edge_bce_train (width 3)" in lines[0] and "lstm" not in lines[0], lines
    assert "takes the torch paths" in lines[0]
    assert not kernels.available(torch.zeros(2, dtype=dtype), pairs=1) and not kernels.lstm_available(
        torch.zeros(40, 8, 3, dtype=dtype))
    _train(dtype, 10, 3, 4, 20)  # the torch path: no crash
    monkeypatch.setattr(_numba_kernels, "edge_bce_train", lambda *a: 1 / 0)  # a kernel that raises
    monkeypatch.setattr(kernels, "_kernels", None)
    caplog.clear()
    with caplog.at_level("WARNING", logger="hpcdgnn"):
        assert not kernels.self_check(dtype)
    assert [r.getMessage() for r in caplog.records if "ZeroDivisionError" in r.getMessage()], caplog.records


def test_only_a_job_that_may_take_the_loops_checks_them(monkeypatch):
    """used_by: CPU float jobs with a sequence of LSTM_MIN_STEPS or MIN_PAIRS pairs in all (any size with
    HPCDGNN_KERNELS=always); never with HPCDGNN_KERNELS=torch, another device or dtype — a small job never loads
    numba."""
    cpu = torch.device("cpu")
    monkeypatch.setenv("HPCDGNN_KERNELS", "numba")
    assert not kernels.used_by(torch.float64, cpu, kernels.LSTM_MIN_STEPS - 1, kernels.MIN_PAIRS - 1)
    assert kernels.used_by(torch.float32, cpu, kernels.LSTM_MIN_STEPS, 0)
    assert kernels.used_by(torch.float64, cpu, 2, kernels.MIN_PAIRS)
    assert not kernels.used_by(torch.float16, cpu, 100, 1 << 20)
    assert not kernels.used_by(torch.float64, torch.device("meta"), 100, 1 << 20)
    monkeypatch.setenv("HPCDGNN_KERNELS", "always")
    assert kernels.used_by(torch.float64, cpu, 1, 1)
    monkeypatch.setenv("HPCDGNN_KERNELS", "torch")
    assert not kernels.used_by(torch.float64, cpu, 100, 1 << 20)


def test_disable_sends_the_process_to_the_torch_paths(use, monkeypatch):
    """kernels.disable (another rank's kernels failed their start-up check): no compiled path from then on."""
    use("always")
    x = torch.zeros(2, dtype=torch.float64)
    assert kernels.available(x, pairs=1)
    monkeypatch.setattr(kernels, "_kernels", kernels._kernels)  # restored after the test
    kernels.disable()
    assert not kernels.available(x, pairs=1) and not kernels.lstm_available(torch.zeros(40, 8, 3, dtype=x.dtype))


def test_a_job_checks_only_the_kernels_it_may_take(monkeypatch):
    """wanted: the LSTM pair for sequences of LSTM_MIN_STEPS, the pair decoder's loss for MIN_PAIRS pairs; the
    start-up check compiles and compares only those (a regression job never compiles the pair decoder's)."""
    cpu = torch.device("cpu")
    monkeypatch.setenv("HPCDGNN_KERNELS", "numba")
    assert kernels.wanted(torch.float64, cpu, kernels.LSTM_MIN_STEPS, 0) == {"lstm_forward", "lstm_backward"}
    assert kernels.wanted(torch.float64, cpu, 2, kernels.MIN_PAIRS) == {"edge_bce_train"}
    lstm_only = [name for name, _ in kernels._checks(torch.float64, frozenset({"lstm_forward", "lstm_backward"}))]
    assert lstm_only and all(name.startswith("lstm") for name in lstm_only)
    assert [n for n, _ in kernels._checks(torch.float64, frozenset())] == []
