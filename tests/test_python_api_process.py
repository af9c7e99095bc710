"""The Python API in a caller's process (hpcdgnn/api.py): what the caller set process-wide (torch's default
device and dtype, ...) does not reach a run, and is the caller's again after each call, one that raises too."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

import hpcdgnn
from hpcdgnn.errors import ConfigError
from tests.conftest import assert_runs_fresh, write_job


@pytest.fixture
def meta_default():
    """``torch.set_default_device("meta")``, as a notebook's ``set_default_device("cuda")`` on a machine without
    a GPU: a tensor made there is no number at all, so a run that used it fails."""
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def test_the_caller_s_default_device_trains_the_command_s_numbers_and_stays(tmp_path, small_dataset, monkeypatch,
                                                                            meta_default):
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "train": {"epochs": 2}}
    with torch.device("cpu"):
        plain = hpcdgnn.train(job, output="plain")
    run = hpcdgnn.train(job, output="meta")  # raised NotImplementedError: Cannot copy out of meta tensor
    assert run.losses == plain.losses and torch.get_default_device().type == "meta"
    monkeypatch.setenv("HPCDGNN_START_TIMEOUT", "abc")  # a call that raises
    with pytest.raises(ConfigError, match="HPCDGNN_START_TIMEOUT"):
        hpcdgnn.train(job, output="never")
    assert torch.get_default_device().type == "meta"
    monkeypatch.delenv("HPCDGNN_START_TIMEOUT")
    again = hpcdgnn.load_run(run.dir)
    assert {p.device.type for p in again.model.parameters()} == {"cpu"}
    assert again.predict(pairs=[[0, 1, 5]]).shape == (1,) and torch.get_default_device().type == "meta"
    torch.set_default_device(None)
    with torch.device("meta"):  # the context manager's form
        inside = hpcdgnn.train(job, output="inside")
        assert torch.empty(1).device.type == "meta"
    assert inside.losses == plain.losses


def _builder(hidden_scale: int):
    """A user's builder: hpcdgnn's CD-GCN layers, ``hidden_scale`` times as wide."""
    from hpcdgnn.nn.models import build_model

    def build(in_features: int, hidden: int, layers: int):
        return build_model("cdgcn", in_features, hidden * hidden_scale, layers)

    return build


def test_a_model_registered_after_a_first_run_trains_loads_and_registers_again(tmp_path, small_dataset,
                                                                               monkeypatch):
    """``register_model`` in a notebook: after a first ``train`` (which imported the regimes) the name is known
    (it was 'model.name: unknown'), the cell run again replaces the builder, and hpcdgnn's names are refused."""
    from hpcdgnn.nn.models import base, register_model

    monkeypatch.setattr(base, "_MODELS", dict(base._MODELS))  # the registry as the next test finds it
    monkeypatch.setattr(base, "_OPTIONS", dict(base._OPTIONS))
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "model": {"name": "cdgcn", "hidden": 4}, "train": {"epochs": 1}}
    hpcdgnn.train(job, output="first")
    register_model("mine")(_builder(1))
    run = hpcdgnn.train({**job, "model": {"name": "mine", "hidden": 4}}, output="mine")
    assert run.summary["status"] == "completed" and run.job.model.name == "mine"
    assert hpcdgnn.load_run(run.dir).model.out_features == 4
    register_model("mine")(_builder(2))  # the cell again, changed
    wider = hpcdgnn.train({**job, "model": {"name": "mine", "hidden": 4}}, output="wider")
    assert wider.model.out_features == 8
    for taken in ("cdgcn", "tgn"):
        with pytest.raises(ValueError, match=rf"^register_model: '{taken}' is one of hpcdgnn's models"):
            register_model(taken)(_builder(1))
    assert base._MODELS["cdgcn"].__module__ == "hpcdgnn.nn.models.cdgcn" and "tgn" not in base._MODELS


_SIDE_EFFECTS = """
import os, sys, warnings
import numpy, torch  # their own filters: a PyTorch user's script has them already
import hpcdgnn
filters, env = list(warnings.filters), dict(os.environ)
hpcdgnn.train  # the training modules, torch with them
assert warnings.filters == filters, [f for f in warnings.filters if f not in filters]
warnings.simplefilter("error")  # a notebook's, after the import
filters = list(warnings.filters)
run = hpcdgnn.train({job!r}, output={output!r})  # raised UserWarning: Sparse CSR tensor support is in beta
assert run.summary["status"] == "completed"
assert warnings.filters == filters, [f for f in warnings.filters if f not in filters]
assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())
print("CLEAN")
"""


def test_importing_and_training_leave_the_caller_s_warning_filters(tmp_path, small_dataset):
    """In a fresh interpreter (torch warns of CSR tensors once a process): importing hpcdgnn's training modules
    added a global filter for torch's CSR notice, and a caller's later ``simplefilter("error")``, in front of it,
    made that notice an exception inside the run. Now the filter is the call's alone."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    code = _SIDE_EFFECTS.format(job=str(job), output=str(tmp_path / "r"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "HPCDGNN_KERNELS": "torch"})
    assert proc.returncode == 0 and "CLEAN" in proc.stdout, proc.stderr[-3000:]


def test_the_compiled_loops_leave_the_caller_s_environment(tmp_path):
    """Importing numba for the CPU loops set NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING in ``os.environ`` for good
    (a notebook's later subprocesses inherited it); now only while numba's import reads it."""
    pytest.importorskip("numba")
    code = ("import os; from hpcdgnn.ops import kernels; env = dict(os.environ); assert kernels._compile(); "
            "assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items()); "
            "import numba.core.errors as e; assert type(e.termcolor()).__name__ == 'NOPColorScheme'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
                          | {"HPCDGNN_KERNELS": "always"})
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_call_leaves_the_package_logger_as_the_caller_had_it(tmp_path, small_dataset, monkeypatch, caplog):
    """A call's lines go to its stdout; afterwards the ``hpcdgnn`` logger is the caller's again: it kept a handler
    on the call's ``sys.stdout`` (here pytest's capture, closed after the test: a later warning was a logging
    error), ``propagate = False`` (the caller's root handlers never saw a warning) and INFO."""
    import contextlib
    import io
    import logging

    log = logging.getLogger("hpcdgnn")
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "filters", [])
    monkeypatch.setattr(log, "propagate", True)
    log.setLevel(logging.NOTSET)
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "train": {"epochs": 1}}
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        run = hpcdgnn.train(job, output="r")
        assert "epoch    1" in buffer.getvalue()
        run.predict(pairs=[[0, 1, 5]])
        assert "predict: 1 pair(s)" in buffer.getvalue()
    buffer.close()
    assert (log.level, log.propagate, log.handlers, log.filters) == (logging.NOTSET, True, [], [])
    log.warning("hpcdgnn: a warning outside a call")  # was: ValueError: I/O operation on closed file
    assert "a warning outside a call" in caplog.text  # through the root logger's handlers


@pytest.mark.parametrize(("given", "advice"), [
    ("EvolveGCNH", "did you mean 'evolvegcn_h'?"),
    ("GConvGRU", "did you mean 'gconv_gru'?"),
    ("TM-GCN", "did you mean 'tmgcn'?"),
    ("TGCN", "did you mean 'tgcn_cell' (PyG Temporal's TGCN, Zhao et al.'s cell; 'tgcn' runs the GCN before the GRU)?"),
    ("GCRN", "did you mean 'gcrn_m1' (Seo et al.'s GCRN-M1;"),
    ("gcn", "choose from cdgcn, ")])
def test_a_pyg_temporal_class_name_as_model_name_points_to_hpcdgnn_s(small_dataset, given, advice):
    """A PyG Temporal user's first guess, its class name, was 'unknown' with a list of choices to read through."""
    with pytest.raises(ConfigError, match=rf"^job \(mapping\): model.name: unknown '{given}'; " + re.escape(advice)):
        hpcdgnn.train({"data": {"path": small_dataset}, "model": {"name": given}})


@pytest.mark.mpi  # python -c naming hpcdgnn.__main__ (tests/conftest.py's MPI_CODE)
def test_a_command_run_in_a_caller_s_process_keeps_its_filters_and_hides_torch_s_csr_notice(tmp_path, small_dataset):
    """``hpcdgnn.__main__.main(argv)`` in a script that turned warnings into errors: the command's filter for
    torch's CSR notice is in front of the caller's while it runs, and gone after."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    code = ("import warnings; from hpcdgnn.__main__ import main; warnings.simplefilter('error'); "
            "filters = list(warnings.filters); "
            f"assert main(['check', {str(job)!r}, '--ranks', '2']) == 0; assert warnings.filters == filters")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "HPCDGNN_KERNELS": "torch"})
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_docs_dotted_names_work_after_import_hpcdgnn_alone():
    """README's ``hpcdgnn.errors.ConfigError`` and ``hpcdgnn.data.adapters.from_arrays`` (and docs/jobs.md's
    ``hpcdgnn.nn.models.register_model``) were AttributeErrors until a call had imported those modules: a
    notebook's ``pytest.raises(hpcdgnn.errors.ConfigError)`` or first adapter cell failed. Still without torch
    until it is needed."""
    assert_runs_fresh(
        "import sys, hpcdgnn; hpcdgnn.errors.ConfigError; hpcdgnn.data.adapters.from_arrays; "
        "assert 'torch' not in sys.modules; hpcdgnn.nn.models.register_model; "
        "import pytest\n"
        "with pytest.raises(AttributeError, match=\"module 'hpcdgnn.data' has no attribute 'adapterz'\"): "
        "hpcdgnn.data.adapterz")


def test_every_subpackage_s_submodules_are_named_after_import_hpcdgnn_alone():
    """docs/results.md's ``hpcdgnn.metrics.export.load_model(FILE)`` was an AttributeError after ``import hpcdgnn``
    (only hpcdgnn.data and hpcdgnn.nn imported a submodule when first named; hpcdgnn.metrics, hpcdgnn.ops, ... did
    not): every subpackage does now. An optional dependency's ImportError is the submodule's own."""
    assert_runs_fresh(
        "import hpcdgnn, pkgutil\n"
        "hpcdgnn.metrics.export.load_model; hpcdgnn.metrics.export.load_pygt\n"
        "for pkg in pkgutil.iter_modules(hpcdgnn.__path__):\n"
        "    if not pkg.ispkg: continue\n"
        "    package = getattr(hpcdgnn, pkg.name)\n"
        "    for sub in pkgutil.iter_modules(package.__path__):\n"
        "        if sub.name.startswith('_'): continue\n"
        "        try: getattr(package, sub.name)\n"
        "        except AttributeError as e: raise SystemExit(f'{package.__name__}.{sub.name}: {e}')\n"
        "        except ImportError: pass\n"
        # hasattr of a dotted name is False, not a ModuleNotFoundError from find_spec's import of its parent
        "assert not hasattr(hpcdgnn, 'errors.x') and not hasattr(hpcdgnn, 'nope.b')\n"
        "assert not hasattr(hpcdgnn.ops, 'a.b')\n")
