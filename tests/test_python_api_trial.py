"""What a user coming from PyG / PyG Temporal does with the Python API next (hpcdgnn/api.py): its messages name
the API's arguments, not the commands' flags."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hpcdgnn
from hpcdgnn.errors import ConfigError, HpcdgnnError
from tests.conftest import write_job


def test_embed_and_predict_messages_advise_the_api_s_arguments(tmp_path, small_dataset, monkeypatch):
    """predict's advice ("give --pairs FILE", "drop --split") named the command's flags, which a Python caller
    has no way to pass; in ``TrainedRun.embed`` / ``predict`` they are the keyword arguments."""
    from hpcdgnn.api import _PASS_ARGUMENTS, _named

    for message, want in [
        ("predict /r: task.name: link_prediction scores pairs: give --pairs FILE",
         "predict /r: task.name: link_prediction scores pairs: give pairs=FILE"),
        ("predict /r: task.name: regression predicts node targets: give --split, not --pairs",
         "predict /r: task.name: regression predicts node targets: give split, not pairs"),
        ("predict /r: --split test: only node tasks take it; the rows of --pairs /a/p.txt name their own step t "
         "(drop --split)",
         "predict /r: split=test: only node tasks take it; the rows of pairs=/a/p.txt name their own step t "
         "(drop split)"),
        ("--pairs /a--split/p.txt: row 0: t = 9 is outside 0 .. 6", "pairs=/a--split/p.txt: row 0: t = 9 is outside "
         "0 .. 6"),
    ]:
        assert str(_named(ConfigError(message), None, _PASS_ARGUMENTS)) == want
    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1}), output="r")
    with pytest.raises(ConfigError, match=r"link_prediction scores pairs \(rows u, v, t\): give pairs=FILE$") as e:
        run.predict(tmp_path / "s.csv")
    assert "--" not in str(e.value)
    # a node task's split given to a pair task: said (it was only "give pairs=FILE")
    with pytest.raises(ConfigError, match=r"give pairs=FILE; only node tasks take split$"):
        run.predict(tmp_path / "s.csv", split="test")


_INTERRUPTED_IMPORT = """
import importlib.abc
import os
import signal
import sys

import hpcdgnn
import hpcdgnn.api


class Interrupt(importlib.abc.MetaPathFinder):
    # Ctrl-C while torch's __init__ is halfway: at its import of torch.autograd
    def find_spec(self, name, path=None, target=None):
        if name == "torch.autograd" and not getattr(self, "sent", False):
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, Interrupt())
run = hpcdgnn.load_run(sys.argv[1])
try:
    {call}
    print("NOT INTERRUPTED")
except KeyboardInterrupt:
    print("INTERRUPTED")
{call}
print("AGAIN", type(run.model).__name__)
"""


@pytest.mark.parametrize("call", [
    "hpcdgnn.api.train({job!r}, output={output!r})",
    "run.model",
    "hpcdgnn.train({job!r}, output={output!r})",
])
def test_an_interrupt_while_torch_imports_leaves_the_process_usable(tmp_path, small_dataset, call):
    """A notebook's Ctrl-C during the first call (torch importing: seconds) raised KeyboardInterrupt inside torch's
    ``__init__``: the half-imported torch stayed in ``sys.modules`` and every later call failed (``module 'torch'
    has no attribute ...``), until a restart. The import completes; the interrupt follows it."""
    import subprocess
    import sys

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    run = hpcdgnn.train(job, output=tmp_path / "r")
    script = tmp_path / "script.py"
    output = str(tmp_path / "r2")
    script.write_text(_INTERRUPTED_IMPORT.replace("{call}", call.format(job=str(job), output=output)))
    proc = subprocess.run([sys.executable, str(script), str(run.dir)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the line, not a substring: "NOT INTERRUPTED" (an interrupt lost, or never sent) holds "INTERRUPTED" too
    assert "INTERRUPTED" in proc.stdout.splitlines() and "AGAIN DGNN" in proc.stdout, proc.stdout


def test_a_resume_with_nothing_to_resume_advises_the_api_s_arguments(tmp_path, small_dataset):
    """A run killed before its first checkpoint: the resume's advice said "train the job again with another
    --output", a flag a Python caller cannot pass; from ``hpcdgnn.train(resume=...)`` the line names no flag."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    run = hpcdgnn.train(job, output=tmp_path / "r")
    (run.dir / "checkpoints" / "epoch-000001").rename(run.dir / "checkpoints" / "epoch-000001.tmp")
    with pytest.raises(ConfigError, match=r"^resume=.*: no complete checkpoint in .*nothing to resume") as e:
        hpcdgnn.train(None, resume=run.dir)
    assert "--" not in str(e.value), e.value


def test_pairs_past_int64_or_not_finite_are_named_as_given(tmp_path, small_dataset, monkeypatch):
    """``predict(pairs=...)`` cast the rows to float64, then to int64: ``inf`` passed the integer check and was
    reported as ``t = -9223372036854775808`` (with numpy's cast warning), ``2**63 - 1`` and ``1e30`` wrapped to
    that negative id, and an id past 2**53 was named rounded. The rows' own values are named."""
    import warnings

    import numpy as np

    from hpcdgnn.errors import DataError

    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1}), output="r")
    for bad, message in [
        ([[0, 1, np.inf]], r"^pairs: row 0: u, v, t must be integers$"),
        ([[0, 1, 0], [-np.inf, 1, 0]], r"^pairs: row 1: u, v, t must be integers$"),
        ([[2**63 - 1, 0, 0]], r"^pairs: row 0: u = 9223372036854775807 is outside 0 \.\. 22$"),
        ([[2**53 + 1, 0, 0]], r"^pairs: row 0: u = 9007199254740993 is outside 0 \.\. 22$"),
        ([[0, 1e30, 0]], r"^pairs: row 0: v = 1000000000000000019884624838656 is outside 0 \.\. 22$"),
        (np.array([[0, 1, 2**64 - 1]], dtype=np.uint64), r"^pairs: row 0: t = 18446744073709551615 is outside "),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "invalid value encountered in cast"
            with pytest.raises(DataError, match=message):
                run.predict(pairs=bad)


@pytest.mark.mpi
def test_only_rank_0_s_pairs_are_read_under_mpi(tmp_path, small_dataset, launcher):
    """Rank 0's ``pairs`` are the ones scored, yet every rank checked its own: pairs another rank passed that
    were not numbers raised on that rank alone, which then left the call while rank 0 waited for it in the
    collective (a hang until HPCDGNN_START_TIMEOUT, or the job killed). The others' are not read: given as None
    they are rank 0's, given otherwise one line on every rank; rank 0's bad rows are refused on every rank."""
    import json

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    script = tmp_path / "use.py"
    script.write_text(
        "import json, os, sys\nimport hpcdgnn\nfrom hpcdgnn.errors import ConfigError, DataError\n"
        "rank = int(os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK', '0')))\n"
        f"run = hpcdgnn.train({str(job)!r}, output=sys.argv[1])\n"
        "mine = [[0, 1, 0], [2, 3, 1]] if rank == 0 else None\n"
        # one write a line: MPICH's Hydra forwards each write as it comes and may join two ranks' partial lines
        "os.write(1, f'GOT {json.dumps(run.predict(pairs=mine).tolist())}\\n'.encode())\n"
        "for pairs in ([[0, 1, 0.5]] if rank == 0 else None, [[0, 1, 0]] if rank == 0 else [['a', 'b', 'c']]):\n"
        "    try:\n        run.predict(pairs=pairs)\n"
        "    except (DataError, ConfigError) as e:\n        os.write(1, f'CAUGHT {e}\\n'.encode())\n")
    proc = launcher.run(2, [str(script), str(tmp_path / "r")], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = [json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("GOT ")]
    assert len(got) == 2 and got[0] == got[1] and len(got[0]) == 2, proc.stdout
    caught = sorted(line for line in proc.stdout.splitlines() if line.startswith("CAUGHT"))
    assert caught == ["CAUGHT pairs: row 0: u, v, t must be integers"] * 2 + [
        "CAUGHT predict: rank 1 was given another pairs than rank 0; every rank calls predict with the same "
        "arguments (or pairs=None: rank 0's serve every rank)"] * 2, proc.stdout


@pytest.mark.mpi
def test_a_refusal_of_rank_0_s_pairs_names_them_alike_on_every_rank(tmp_path, small_dataset, launcher):
    """Only rank 0's ``pairs`` are read: a refusal every rank raises after the pass (a step the strategy does not
    compute) names them as rank 0 was given them on every rank, not as each rank's own argument."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy={"name": "sequences"}, train={"epochs": 1})
    (tmp_path / "p.txt").write_text("0 1 0\n")
    script = tmp_path / "use.py"
    script.write_text(
        "import os, sys\nimport hpcdgnn\nfrom hpcdgnn.errors import ConfigError\n"
        "rank = int(os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK', '0')))\n"
        f"run = hpcdgnn.train({str(job)!r}, output=sys.argv[1])\n"
        "try:\n"
        f"    run.predict(pairs={str(tmp_path / 'p.txt')!r} if rank == 0 else None)\n"
        "except ConfigError as e:\n    os.write(1, f'CAUGHT {e}\\n'.encode())\n")
    proc = launcher.run(2, [str(script), str(tmp_path / "r")], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    caught = [line for line in proc.stdout.splitlines() if line.startswith("CAUGHT")]
    assert len(caught) == 2 and caught[0] == caught[1], proc.stdout
    assert caught[0].startswith(f"CAUGHT pairs={tmp_path / 'p.txt'}: t = 0: strategy sequences computes Z_t of "
                                "steps "), caught


@pytest.mark.mpi
def test_export_on_rank_0_alone_writes_at_once_and_on_every_rank_writes_once(tmp_path, small_dataset, launcher):
    """``if rank == 0: run.export(...)`` (mpi4py's idiom for writing a file) waited HPCDGNN_START_TIMEOUT for the
    other ranks, which never came, then ended the job: export needs no collective. Rank 0 writes without waiting
    for anyone; a call on every rank still writes once (a second writer would find the file and refuse), every
    rank returns once it is written, and rank 0's refusal is every rank's. A rank given other arguments than rank
    0 cannot be told at once (rank 0 cannot tell it from a call of its own alone): it waits for its own, then
    names rank 0's."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    script = tmp_path / "use.py"
    script.write_text(
        "import os, sys, time\nimport hpcdgnn\nfrom hpcdgnn.errors import HpcdgnnError\n"
        "rank = int(os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK', '0')))\n"
        f"run = hpcdgnn.train({str(job)!r}, output=sys.argv[1])\n"
        "os.environ['HPCDGNN_START_TIMEOUT'] = '60'\n"
        "if rank == 0:\n"
        "    t0 = time.monotonic()\n"
        "    got = run.export(csv='alone.csv')\n"
        "    os.write(1, f'ALONE {sorted(got)} {time.monotonic() - t0 < 30}\\n'.encode())\n"
        # every rank: rank 0 writes, each returns once the files are there
        "got = run.export(csv='all.csv', model='all.pt')\n"
        "os.write(1, f'ALL {sorted(got)} {os.path.getsize(\"all.csv\") > 0} {os.path.isfile(\"all.pt\")}\\n'"
        ".encode())\n"
        "try:\n    run.export(csv='all.csv')\n"
        "except HpcdgnnError as e:\n    os.write(1, f'CAUGHT {type(e).__name__} {e}\\n'.encode())\n"
        "os.environ['HPCDGNN_START_TIMEOUT'] = '2'\n"
        "try:\n    run.export(csv=f'mine{rank}.csv')\n    os.write(1, f'MINE {rank}\\n'.encode())\n"
        "except HpcdgnnError as e:\n    os.write(1, f'CAUGHT {type(e).__name__} {e}\\n'.encode())\n")
    proc = launcher.run(2, [str(script), str(tmp_path / "r")], cwd=tmp_path, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.startswith("ALONE")] == ["ALONE ['csv'] True"], proc.stdout
    assert [line for line in lines if line.startswith("ALL")] == ["ALL ['csv', 'model'] True True"] * 2, proc.stdout
    run_dir = tmp_path / "r"
    caught = sorted(line for line in lines if line.startswith("CAUGHT"))
    assert caught == [
        "CAUGHT ConfigError csv=all.csv: exists; an export never overwrites a file (give a new path)"
    ] * 2 + [
        f"CAUGHT DataError export: rank 0 did not start exporting {run_dir} to csv='mine1.csv' within 2 s "
        f"(HPCDGNN_START_TIMEOUT) (it exported {run_dir} to csv='mine0.csv': if in this call, every rank must give "
        "the same arguments): under mpirun rank 0 writes export's files, so it must make the call too"], proc.stdout
    assert [line for line in lines if line.startswith("MINE")] == ["MINE 0"], proc.stdout
    assert (tmp_path / "alone.csv").read_text() == (tmp_path / "all.csv").read_text()
    assert (tmp_path / "mine0.csv").is_file() and not (tmp_path / "mine1.csv").exists()


def test_a_run_s_job_trains_again_as_it_is_with_overrides_or_changed(tmp_path, small_dataset, monkeypatch):
    """``hpcdgnn.train(run.job, ...)`` was refused ("pass a job YAML path or a mapping of sections"), so a user
    who trained, wanted one key changed and trained again had to rebuild the job by hand. A ``JobConfig`` now
    trains as the mapping it resolves to: the same run again, with overrides, or changed with
    ``dataclasses.replace``; its refusals name it as a JobConfig (they read ``job (mapping)``)."""
    import dataclasses

    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2}), output="r")
    again = hpcdgnn.train(run.job, output="again")
    assert again.losses == run.losses and again.job == run.job
    more = hpcdgnn.train(run.job, overrides={"train.epochs": 3}, output="more")
    assert len(more.losses) == 3 and more.losses[0] == run.losses[0]
    assert more.job == dataclasses.replace(run.job, train=dataclasses.replace(run.job.train, epochs=3))
    one = hpcdgnn.train(dataclasses.replace(run.job, train=dataclasses.replace(run.job.train, epochs=1)), name="one")
    assert one.losses == run.losses[:1] and one.dir.name.startswith("one-")
    with pytest.raises(ConfigError, match=r"^overrides: train\.epochz: unknown key"):
        hpcdgnn.train(run.job, overrides=["train.epochz=2"])
    nowhere = dataclasses.replace(run.job, data=dataclasses.replace(run.job.data, path=str(tmp_path / "nowhere")))
    with pytest.raises(HpcdgnnError, match=r"^job \(JobConfig\): data\.path"):
        hpcdgnn.train(nowhere)
    with pytest.raises(ConfigError, match=r"^job: int 3: pass a job YAML path, a mapping of sections \(a dict\) or a "
                                          r"JobConfig \(a run's job\)$"):
        hpcdgnn.train(3)


def test_train_embed_and_predict_called_under_no_grad_or_inference_mode_run_as_outside(tmp_path, small_dataset,
                                                                                        monkeypatch):
    """A notebook cell under ``torch.no_grad()`` or ``torch.inference_mode()`` (left from an evaluation) made
    ``train``, ``embed`` and ``predict`` fail with torch's "element 0 of tensors does not require grad" (and the
    compiled kernels' start-up check, failing so, left the process on the torch paths). The calls train and run
    their backward passes as outside, and the caller's grad mode is its own again after them."""
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "train": {"epochs": 2}}
    plain = hpcdgnn.train(job, output="plain")
    pairs = [[0, 1, 4], [2, 3, 5]]
    z, p = plain.embed(), plain.predict(pairs=pairs)
    for mode, label in ((torch.no_grad, "nograd"), (torch.inference_mode, "inference")):
        with mode():
            run = hpcdgnn.train(job, output=label)
            assert not torch.is_grad_enabled()
            assert run.losses == plain.losses
            assert np.array_equal(run.embed().embeddings, z.embeddings)
            assert np.array_equal(run.predict(pairs=pairs), p)
            assert not torch.is_grad_enabled() and torch.is_inference_mode_enabled() == (label == "inference")
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def test_ctrl_c_twice_while_a_checkpoint_is_written_is_a_keyboard_interrupt(tmp_path, small_dataset, monkeypatch):
    """A notebook's interrupt pressed twice stops ``train`` at once with ``KeyboardInterrupt`` (docs/jobs.md). When
    the second came while torch wrote a checkpoint file, torch's writer turned it into a ``RuntimeError`` and the
    call raised ``DataError: cannot write checkpoint file …: the write fell short, … MiB free there (a full disk or
    quota?)``, on a disk that was not full. The interrupt is raised as one, and the process trains again."""
    import signal

    from hpcdgnn import atomic

    monkeypatch.chdir(tmp_path)
    real_open = open
    writes = [0]

    class Interrupted:
        """A checkpoint file whose second write (torch's writer's, after its first record) gets the user's two
        interrupts."""

        def __init__(self, path, mode):
            self.f = real_open(path, mode)

        def write(self, data):
            writes[0] += 1
            if writes[0] == 2:
                signal.raise_signal(signal.SIGINT)  # the first: a stop at the epoch's end
                signal.raise_signal(signal.SIGINT)  # the second, amid the write: at once
            return self.f.write(data)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(atomic, "open", lambda path, mode="r", *a, **k: Interrupted(path, mode) if
                        ".pt.tmp-" in str(path) else real_open(path, mode, *a, **k), raising=False)
    job = {"data": {"path": small_dataset}, "train": {"epochs": 2}}
    with pytest.raises(KeyboardInterrupt):
        hpcdgnn.train(job, output="stopped")
    assert writes[0] == 2
    assert not list((tmp_path / "stopped").rglob(".*.tmp-*"))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert len(hpcdgnn.train(job, output="again").losses) == 2


def test_embed_predict_and_export_lines_go_through_the_package_logger_as_train_s(tmp_path, small_dataset,
                                                                                 monkeypatch, capsys):
    """``logging.getLogger("hpcdgnn").setLevel(logging.WARNING)`` silenced ``train``'s lines, but ``embed``,
    ``predict`` and ``export`` printed theirs all the same, and a handler added to the logger never got them: a
    notebook that quietened hpcdgnn, or sent its lines to a file, still had them in its cells."""
    import logging

    log = logging.getLogger("hpcdgnn")
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "filters", [])
    monkeypatch.setattr(log, "propagate", log.propagate)
    monkeypatch.setattr(log, "level", log.level)
    monkeypatch.chdir(tmp_path)
    log.setLevel(logging.WARNING)
    run = hpcdgnn.train({"data": {"path": small_dataset}, "train": {"epochs": 1}}, output="r")
    run.embed()
    run.predict(pairs=[[0, 1, 4]])
    run.export(csv="m.csv")
    assert capsys.readouterr().out == ""
    lines: list[str] = []
    mine = logging.Handler()
    mine.emit = lambda record: lines.append(record.getMessage())
    log.addHandler(mine)
    log.setLevel(logging.INFO)
    run.embed()
    run.predict(pairs=[[0, 1, 4]])
    run.export(csv="again.csv")
    assert capsys.readouterr().out == ""
    assert [line.split(":")[0] for line in lines] == ["embed", "predict", "again.csv"], lines
    log.setLevel(logging.NOTSET)  # as the next tests find it (monkeypatch puts the attribute back, not the cache)


def test_pairs_given_as_predict_s_first_argument_are_pointed_to_pairs_keyword(tmp_path, small_dataset, monkeypatch):
    """``run.predict(pairs_array)`` (PyG's ``model(x)`` habit) took the pairs for ``output`` and said only
    "output: list [[0, 1, 4]] is not a path (give a str or os.PathLike)": the call names where the pairs go."""
    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train({"data": {"path": small_dataset}, "train": {"epochs": 1}}, output="r")
    for given in ([[0, 1, 4]], np.array([[0, 1, 4]]), torch.tensor([[0, 1, 4]])):
        with pytest.raises(ConfigError, match=r"^output: \w+ .* is not a path \(give a str or os\.PathLike\); the "
                                              r"pairs go by keyword: predict\(pairs=\.\.\.\)$"):
            run.predict(given)
    assert run.predict(pairs=[[0, 1, 4]]).shape == (1,)


def test_a_resume_embed_and_predict_leave_the_caller_s_numpy_and_python_rngs_where_they_were(tmp_path, small_dataset,
                                                                                           monkeypatch):
    """A resume, ``embed`` and ``predict`` restore the checkpoint's RNG states, numpy's and Python's global ones
    included, and left them so: a notebook's ``np.random.seed(0)`` before the call no longer decided its next
    draws after it (torch's was put back already)."""
    import random

    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train({"data": {"path": small_dataset}, "train": {"epochs": 1}}, output="r")
    for call in (lambda: hpcdgnn.train(None, resume=run.dir, overrides={"train.epochs": 2}), run.embed,
                 lambda: run.predict(pairs=[[0, 1, 4]])):
        np.random.seed(7)
        random.seed(7)
        want = (np.random.random(), random.random())
        np.random.seed(7)
        random.seed(7)
        call()
        assert (np.random.random(), random.random()) == want


def test_what_an_adapter_returns_is_a_job_s_data_path(tmp_path, monkeypatch):
    """A notebook passes on what ``from_arrays`` returned, ``{"data": {"path": m}}``: it was refused ("data.path:
    Manifest ... is not a job value"), only the string given as ``output`` was taken. The manifest the adapters
    return is also its directory's path (``os.PathLike``), and equal to the one read back, as before."""
    import dataclasses
    import os
    import pickle

    from hpcdgnn.data.adapters import from_arrays, from_temporal_data
    from hpcdgnn.data.events import EventManifest, load_event_manifest
    from hpcdgnn.data.manifest import Manifest, load_manifest

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    src, dst, t = rng.integers(0, 30, 600), rng.integers(0, 30, 600), rng.random(600)
    m = from_arrays(src, dst, t, "data/mine", snapshots=6)
    assert isinstance(m, Manifest) and os.fspath(m) == str(tmp_path / "data" / "mine") and m.num_snapshots == 6
    assert m == load_manifest("data/mine") and load_manifest("data/mine") == m
    assert pickle.loads(pickle.dumps(m)) == m and os.fspath(pickle.loads(pickle.dumps(m))) == os.fspath(m)
    # str() as a Path's (f"data.path={m}" was the dataclass's repr); repr() the manifest's fields
    assert str(m) == f"{m}" == os.fspath(m) and repr(m).startswith("WrittenManifest(") and "num_snapshots=6" in repr(m)
    events = from_temporal_data({"src": src, "dst": dst, "t": np.sort(t)}, tmp_path / "events")
    assert isinstance(events, EventManifest) and events == load_event_manifest(tmp_path / "events")
    assert os.fspath(events) == str(tmp_path / "events")

    job = {"data": {"path": m}, "model": {"name": "cdgcn", "hidden": 8}, "task": {"name": "link_prediction"},
           "train": {"epochs": 1}}
    by_manifest = hpcdgnn.train(job, output="a")
    by_string = hpcdgnn.train({**job, "data": {"path": "data/mine"}}, output="b")
    by_override = hpcdgnn.train({**job, "data": {"path": "elsewhere"}}, overrides={"data.path": m}, output="c")
    assert by_manifest.losses == by_string.losses == by_override.losses
    assert by_manifest.job.data.path == by_override.job.data.path == os.fspath(m)
    # a run's job with the manifest put in (docs/jobs.md: "a dataclasses.replace of it trains the run again"):
    # dataclasses.asdict had turned the manifest, a dataclass too, into a dict ("data.path: expected a string")
    config = dataclasses.replace(by_string.job, data=dataclasses.replace(by_string.job.data, path=m))
    by_config = hpcdgnn.train(config, output="d")
    assert by_config.losses == by_manifest.losses and by_config.job.data.path == os.fspath(m)


def test_a_path_argument_s_tilde_is_the_home_directory(tmp_path, small_dataset, monkeypatch):
    """``load_run("~/runs/x")``, as a user types a path from the docs' command lines, looked for ``./~/runs/x``
    ("not a finished hpcdgnn run directory"); ``train(output="~/...")`` wrote a directory named ``~`` in the
    working directory. ``~`` is the home directory in every path argument, as pathlib's ``expanduser`` has it."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    write_job(home / "job.yaml", small_dataset, train={"epochs": 1})
    run = hpcdgnn.train("~/job.yaml", output="~/runs/x")
    assert run.dir == home / "runs" / "x" and not (work / "~").exists()
    again = hpcdgnn.load_run("~/runs/x")
    assert again.dir == run.dir and again.losses == run.losses
    assert again.export(csv="~/x.csv") == {"csv": home / "x.csv"} and (home / "x.csv").is_file()
    assert hpcdgnn.train(None, resume="~/runs/x", overrides=["train.epochs=2"]).dir == run.dir
    assert not (work / "~").exists()
