"""hpcdgnn's Adam (:mod:`hpcdgnn.optim`) is torch's, bit for bit, without importing ``torch._dynamo``."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from hpcdgnn.nn.backward import run_backward
from hpcdgnn.optim import Adam
from tests.conftest import assert_runs_fresh, mpi_env, write_job


def _params(dtype, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 3), (3,), (4, 2, 2), (1,)]
    return [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype).to(device)) for s in shapes]


def _grads(params, step, seed=1):
    """Random gradients; parameter 1 has none on step 2 and parameter 3 none before step 3 (torch skips a
    parameter without a gradient, and its step count stays)."""
    g = torch.Generator().manual_seed(seed + step)
    for i, p in enumerate(params):
        skip = (i == 1 and step == 2) or (i == 3 and step < 3)
        p.grad = None if skip else (torch.randn(p.shape, generator=g, dtype=p.dtype) * 10**i).to(p.device)


GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU)])
def test_the_trajectory_and_the_state_are_torch_s_bit_for_bit(dtype, device):
    """Against torch's fused Adam (``fused=True``) on the CPU and on a GPU: parameters, moments, step counts
    (and their device) and the group's settings; and within float rounding of torch's default paths."""
    ours, theirs = _params(dtype, device=device), _params(dtype, device=device)
    a, b = Adam(ours, lr=0.03), torch.optim.Adam(theirs, lr=0.03, fused=True)
    default = _params(dtype, device=device)
    c = torch.optim.Adam(default, lr=0.03)
    for step in range(6):
        for ps, o in ((ours, a), (theirs, b), (default, c)):
            _grads(ps, step)
            o.step()
            o.zero_grad(set_to_none=True)
        for p, q, r in zip(ours, theirs, default, strict=True):
            assert torch.equal(p, q), (step, (p - q).abs().max())
            assert p.grad is None
            torch.testing.assert_close(p, r)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys() == {0, 1, 2, 3}
    for i in sa["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(sa["state"][i][key], sb["state"][i][key]), (i, key)
            assert sa["state"][i][key].dtype == sb["state"][i][key].dtype
            assert sa["state"][i][key].device == sb["state"][i][key].device


def test_state_dicts_load_both_ways_and_continue_alike():
    """A checkpoint written with torch's Adam resumes under ours (and back) on the same trajectory."""
    ref = _params(torch.float64)
    opt = torch.optim.Adam(ref, lr=0.01, fused=True)
    for step in range(4):
        _grads(ref, step)
        opt.step()
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    mine = Adam(ours, lr=0.01)
    mine.load_state_dict(copy.deepcopy(opt.state_dict()))  # a copy, as a checkpoint file is
    back = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    theirs = torch.optim.Adam(back, lr=0.01, fused=True)
    theirs.load_state_dict(copy.deepcopy(mine.state_dict()))
    for step in range(4, 7):
        for ps, o in ((ref, opt), (ours, mine), (back, theirs)):
            _grads(ps, step)
            o.step()
    for p, q, r in zip(ref, ours, back, strict=True):
        assert torch.equal(p, q) and torch.equal(p, r)


def test_a_state_of_other_parameters_is_refused():
    params = _params(torch.float32)
    opt = Adam(params, lr=0.01)
    _grads(params, 4)
    opt.step()
    saved = opt.state_dict()
    with pytest.raises(ValueError, match="groups or count"):
        Adam(params[:3], lr=0.01).load_state_dict(saved)
    other = [torch.nn.Parameter(torch.zeros(2, 2)) if i == 0 else p for i, p in enumerate(params)]
    with pytest.raises(ValueError, match=r"parameter 0 has shape \(5, 3\), the parameter \(2, 2\)"):
        Adam(other, lr=0.01).load_state_dict(saved)
    with pytest.raises(ValueError, match="lr"):
        Adam(params, lr=0.02).load_state_dict(saved)


@pytest.mark.slow  # ~7 s: a fresh interpreter importing torch and then torch._dynamo
def test_building_and_stepping_it_does_not_import_the_compiler():
    """The reason it exists: torch.optim's optimizers import torch._dynamo (about 1.2 s and 70 MiB per rank)."""
    assert_runs_fresh("import sys, torch; from hpcdgnn.optim import Adam\n"
            "p = torch.nn.Parameter(torch.ones(3)); o = Adam([p], lr=0.1); p.grad = torch.ones(3); o.step()\n"
            "o.load_state_dict(o.state_dict()); o.zero_grad()\n"
            "assert 'torch._dynamo' not in sys.modules\n"
            "torch.optim.Adam([p]).zero_grad()\n"
            "assert 'torch._dynamo' in sys.modules  # the check can fail: torch's own does import it\n")


def test_zero_grad_keeping_the_tensors_and_a_parameter_listed_twice():
    ours, theirs = _params(torch.float64), _params(torch.float64)
    a, b = Adam(ours, lr=0.1), torch.optim.Adam(theirs, lr=0.1)
    _grads(ours, 5)
    _grads(theirs, 5)
    kept = ours[0].grad
    a.zero_grad(set_to_none=False)
    b.zero_grad(set_to_none=False)
    assert ours[0].grad is kept and all(torch.equal(p.grad, q.grad) for p, q in zip(ours, theirs, strict=True))
    with pytest.raises(ValueError, match="listed twice"):
        Adam([ours[0], ours[1], ours[0]], lr=0.1)


def test_run_backward_is_torch_s_backward_and_refuses_a_gradient_of_another_shape():
    """The same gradients as torch.autograd.backward for several roots; a gradient that would broadcast onto its
    root (which the engine alone sums) is refused as torch refuses it."""
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    grads = {}
    for how in ("torch", "ours"):
        x.grad = None
        y, z = x.sin(), (x * 2).sum(0)
        seeds = [torch.full_like(y, 0.5), torch.arange(3.0, dtype=torch.float64)]
        (torch.autograd.backward if how == "torch" else run_backward)([y, z], seeds)
        grads[how] = x.grad.clone()
    assert torch.equal(grads["torch"], grads["ours"])
    for bad in (torch.ones(2, 3), torch.ones(1, 3), torch.ones(4)):
        with pytest.raises(RuntimeError, match="shape"):
            run_backward([(x * 2).sum(0)], [bad])


@pytest.mark.mpi  # a training run (python -c, hpcdgnn.__main__)
def test_a_run_imports_neither_torch_s_compiler_nor_sympy(tmp_path, small_dataset):
    """A whole training run in one process (snapshot strategy, checkpoint at the end): torch's optimisers and
    Python-side backward check would import them (about 1.7 s and 70 MiB per rank)."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    code = ("import sys\nfrom hpcdgnn.__main__ import main\n"
            f"assert main(['run', {str(job)!r}, '--output', {str(tmp_path / 'run')!r}]) == 0\n"
            "bad = sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules)\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=mpi_env(),
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "run" / "summary.json").exists()
