"""README.md's "From Python" example runs as written, in this process and as the same call on 2 ranks, and
``hpcdgnn.train`` / ``hpcdgnn.load_run`` keep their promises (hpcdgnn/api.py)."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import hpcdgnn
from hpcdgnn.errors import ConfigError, DataError
from tests.conftest import REPO, read_metrics, write_job

SECTION = "## From Python"


def python_example() -> str:
    """The ```python block of the README's "From Python" section."""
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION + "\n")
    body = text[start: text.find("\n## ", start + len(SECTION))]
    (block,) = re.findall(r"^```python\n(.*?)^```$", body, flags=re.S | re.M)
    return block


@pytest.fixture
def checkout(tmp_path, small_dataset, monkeypatch):
    """A scratch directory where the example's ``inputs/collegemsg`` is a small snapshot dataset."""
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "collegemsg").symlink_to(small_dataset, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_example_runs_in_this_process(checkout, capsys):
    namespace: dict = {}
    exec(compile(python_example(), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    run = namespace["run"]
    assert run.dir.parent == checkout / "runs" and run.dir.name.startswith("notebook-")
    assert len(run.losses) == 3 and run.summary["status"] == "completed"
    assert run.losses == [r["loss"] for r in read_metrics(run.dir)]
    # the model load_run rebuilt from the checkpoint is the one train returned
    again = namespace["again"]
    for mine, theirs in ((run.model, again.model), (run.task, again.task)):
        a, b = mine.state_dict(), theirs.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert str(run.dir) in capsys.readouterr().out
    # what the example's comment says embed and predict return
    z, p = namespace["z"], namespace["p"]
    assert z.embeddings.ndim == 3 and z.embeddings.shape[0] == z.steps.shape[0] and p.shape == (2,)


@pytest.mark.mpi
def test_the_same_call_on_two_ranks_gives_the_one_process_run(checkout, launcher):
    """Every rank of ``mpirun -np 2 python script.py`` calls the example; the losses are one process's (float32)."""
    (checkout / "example.py").write_text(python_example())
    alone = launcher.run(None, [str(checkout / "example.py")], cwd=checkout)
    assert alone.returncode == 0, alone.stderr[-3000:]
    both = launcher.run(2, [str(checkout / "example.py")], cwd=checkout)
    assert both.returncode == 0, both.stderr[-3000:]
    one, two = (hpcdgnn.load_run(d) for d in sorted((checkout / "runs").iterdir(), key=os.path.getmtime))
    assert one.summary["environment"]["num_ranks"] == 1 and two.summary["environment"]["num_ranks"] == 2
    np.testing.assert_allclose(two.losses, one.losses, rtol=1e-4)
    assert both.stdout.count("done: 3 epochs") == 1  # rank 0 logs


def test_a_path_job_with_overrides_and_the_mapping_job_give_one_run(tmp_path, small_dataset, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 5})
    by_path = hpcdgnn.train(path, overrides=["train.epochs=2"], output=tmp_path / "a")
    import yaml

    job = yaml.safe_load(path.read_text())
    job["train"]["epochs"] = 2
    by_dict = hpcdgnn.train(job, output=tmp_path / "b")
    assert by_path.dir == tmp_path / "a" and len(by_path.losses) == 2
    assert by_dict.job.train.epochs == 2
    np.testing.assert_array_equal(by_path.losses, by_dict.losses)
    resumed = hpcdgnn.train(None, resume=by_path.dir, overrides=["train.epochs=3"])
    assert resumed.dir == by_path.dir and len(resumed.losses) == 3


def test_a_trained_run_embeds_and_predicts_from_python(tmp_path, small_dataset, monkeypatch):
    """``run.embed`` and ``run.predict`` write what the commands write (the same file, byte for byte in its
    arrays) and hand it back; a split the commands do not know is one line."""
    from hpcdgnn.__main__ import main
    from hpcdgnn.embed import read_embeddings

    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2}), output=tmp_path / "r")
    z = run.embed(tmp_path / "z.npz", split="all")
    assert main(["embed", str(run.dir), "--output", str(tmp_path / "cli.npz"), "--split", "all"]) == 0
    cli = read_embeddings(tmp_path / "cli.npz")
    np.testing.assert_array_equal(z.steps, cli.steps)
    np.testing.assert_array_equal(z.embeddings, cli.embeddings)
    assert z.meta["metrics"] == cli.meta["metrics"]
    again = run.embed(tmp_path / "z2.npz", split="all", overrides="train.device=cpu")  # one string: one item
    np.testing.assert_array_equal(again.embeddings, z.embeddings)
    (tmp_path / "pairs.txt").write_text("0 1 0\n2 3 1\n")
    scores = run.predict(tmp_path / "s.csv", pairs=tmp_path / "pairs.txt")
    rows = [line.split(",") for line in (tmp_path / "s.csv").read_text().splitlines() if not line.startswith("u")]
    assert [r[:3] for r in rows] == [["0", "1", "0"], ["2", "3", "1"]] and all(0 < float(r[3]) < 1 for r in rows)
    assert [float(r[3]) for r in rows] == scores.tolist()  # what predict returns is what it wrote
    with pytest.raises(ConfigError, match=r"^split: 'tset'; choose from train, val, test, all$"):
        run.embed(tmp_path / "x.npz", split="tset")
    with pytest.raises(ConfigError, match=r"split=test: only node tasks take it"):  # the command's, in its words
        run.predict(tmp_path / "x.csv", pairs=tmp_path / "pairs.txt", split="test")
    assert not (tmp_path / "x.csv").exists()


def test_predict_takes_pairs_as_data_and_both_return_the_numbers_without_a_file(tmp_path, small_dataset,
                                                                                 monkeypatch):
    """``predict(pairs=rows)`` scores an array, list or tensor of (u, v, t) rows and returns the scores (K,) —
    the CSV's column, bit for bit — and ``embed()`` / ``predict()`` without ``output`` write nothing and return
    what the file would hold; bad rows are one line naming ``pairs``."""
    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1}), output=tmp_path / "r")
    rows = np.array([[0, 1, 0], [2, 3, 1], [4, 0, 1]])
    before = sorted(tmp_path.iterdir())
    scores = run.predict(pairs=rows)
    assert scores.shape == (3,) and scores.dtype == np.float64 and ((scores > 0) & (scores < 1)).all()
    np.testing.assert_array_equal(run.predict(pairs=rows.tolist()), scores)
    np.testing.assert_array_equal(run.predict(pairs=torch.from_numpy(rows).double()), scores)
    z = run.embed(split="all")
    assert sorted(tmp_path.iterdir()) == before  # nothing written without output
    np.save(tmp_path / "p.npy", rows)
    np.testing.assert_array_equal(run.predict(tmp_path / "s.csv", pairs=tmp_path / "p.npy"), scores)
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "s.csv", delimiter=",", skiprows=1)[:, 3], scores)
    written = run.embed(tmp_path / "z.npz", split="all")
    for name in ("embeddings", "steps", "computed"):
        np.testing.assert_array_equal(getattr(z, name), getattr(written, name))
    assert z.meta == written.meta and z.embeddings.shape[:2] == (len(z.steps), 23)
    for bad, message in [
        (rows + [[0, 0, 0], [0, 0, 0], [0, 99, 0]], r"^pairs: row 2: v = 99 is outside 0 \.\. 22$"),
        ([[0, 1, 0.5]], r"^pairs: row 0: u, v, t must be integers$"),
        ([0, 1, 0], r"^pairs: want rows of three columns u, v, t; found shape \(3,\)$"),
        ([["a", "b", "c"]], r"^pairs: want \(K, 3\) integer rows u, v, t \(its values are <U1\)$"),
        ([[0, 1], [2]], r"^pairs: want \(K, 3\) integer rows u, v, t \(.*inhomogeneous"),
    ]:
        with pytest.raises(DataError, match=message):
            run.predict(pairs=bad)


def test_a_node_task_predicts_into_memory_as_into_its_file(tmp_path, small_dataset, monkeypatch):
    """Node classification's ``predict()`` without ``output`` returns the class probabilities the file holds."""
    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, task={"name": "node_classification"},
                                  train={"epochs": 1}), output=tmp_path / "r")
    got = run.predict(split="all")
    kept = run.predict(tmp_path / "p.h5", split="all")
    np.testing.assert_array_equal(got.embeddings, kept.embeddings)
    np.testing.assert_array_equal(got.steps, kept.steps)
    assert got.embeddings.shape[1:] == (23, 2)
    np.testing.assert_allclose(got.embeddings[got.computed].sum(-1), 1.0)


def test_predict_of_every_step_under_sequences_is_refused_not_its_evaluation_steps(tmp_path, small_dataset,
                                                                                  monkeypatch):
    """``predict(split="all")`` (every step) under ``sequences``, whose evaluation pass computes the validation and
    test steps only, returned those alone as if they were all; it is refused in one line saying which it
    computes, and those still come one split at a time."""
    from hpcdgnn.data.manifest import load_manifest

    monkeypatch.chdir(tmp_path)
    job = write_job(tmp_path / "job.yaml", small_dataset, task={"name": "node_classification"},
                    strategy={"name": "sequences", "window": 2}, train={"epochs": 1})
    run = hpcdgnn.train(job, output=tmp_path / "r")
    for call in (run.predict, run.embed):
        with pytest.raises(ConfigError, match=r"^split=all \(every step\): strategy sequences computes Z_t of the "
                                              r"val and test steps only \(its evaluation pass; its train steps"):
            call(split="all")
    steps = run.task.steps(run.job.task, load_manifest(small_dataset))
    for name, want in (("val", steps[1]), ("test", steps[2])):
        assert list(run.predict(split=name).steps) == list(want)


def test_export_from_python_writes_what_the_command_writes(tmp_path, small_dataset, monkeypatch, capsys):
    """``run.export(csv=, tensorboard=, model=, to=)``: the command's files, refusals in the API's words, nothing
    written when one output is refused."""
    from hpcdgnn.__main__ import main
    from hpcdgnn.metrics.export import load_model

    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2}), output=tmp_path / "r")
    assert run.export(csv="m.csv", model="m.pt") == {"csv": Path("m.csv"), "model": Path("m.pt")}
    assert main(["export", str(run.dir), "--csv", "cli.csv"]) == 0
    assert Path("m.csv").read_text() == Path("cli.csv").read_text()
    model, _task = load_model("m.pt")
    for name, value in run.model.state_dict().items():
        assert torch.equal(model.state_dict()[name], value)
    with pytest.raises(ConfigError, match=r"^csv=m.csv: exists; an export never overwrites a file"):
        run.export(csv="m.csv")
    with pytest.raises(ConfigError, match=r"^export\(to='pygt'\): give model=FILE, the file to write"):
        run.export(csv="n.csv", to="pygt")
    with pytest.raises(ConfigError, match=r"^export\(to='pygt'\): model.name: cdgcn has no PyG Temporal cell"):
        run.export(csv="n.csv", model="n.pt", to="pygt")
    with pytest.raises(ConfigError, match=r"^export: say what to write: csv=FILE, tensorboard=DIR and/or model=FILE$"):
        run.export()
    with pytest.raises(ConfigError, match=r"^to: 'onnx'; choose from 'hpcdgnn', 'pygt'$"):
        run.export(model="n.pt", to="onnx")
    assert not Path("n.csv").exists() and not Path("n.pt").exists()


def test_export_as_a_process_s_first_call_survives_an_interrupt_in_torch_s_import(tmp_path, small_dataset):
    """``export`` may be a fresh process's first call (``load_run(dir).export(...)`` reads no torch before it): a
    Ctrl-C amid torch's import there left a half-imported torch, and the next call failed in torch's ``__init__``.
    As :meth:`embed`'s, the import completes first; the interrupt follows it and the next call works."""
    import subprocess

    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1}), output=tmp_path / "r")
    script = tmp_path / "script.py"
    script.write_text(
        "import importlib.abc, os, signal, sys\nimport hpcdgnn\n\n\n"
        "class Interrupt(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):  # Ctrl-C while torch's __init__ is halfway\n"
        "        if name == 'torch.autograd' and not getattr(self, 'sent', False):\n"
        "            self.sent = True\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n\n\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "run = hpcdgnn.load_run(sys.argv[1])\n"
        "try:\n    run.export(csv='a.csv')\n    print('NOT INTERRUPTED')\n"
        "except KeyboardInterrupt:\n    print('INTERRUPTED')\n"
        "print('AGAIN', run.export(csv='b.csv'))\n")
    proc = subprocess.run([sys.executable, str(script), str(run.dir)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0] == "INTERRUPTED" and "AGAIN {'csv': PosixPath('b.csv')}" in proc.stdout, \
        proc.stdout
    assert (tmp_path / "b.csv").is_file()


@pytest.mark.mpi
def test_predict_and_embed_without_a_file_return_the_same_numbers_on_every_rank(tmp_path, small_dataset, launcher):
    """Under ``mpirun -np 3`` every rank gets rank 0's gathered embeddings and scores (pairs given as data) —
    those of one process."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    script = tmp_path / "use.py"
    script.write_text(
        "import json, os, sys\nimport numpy as np\nimport hpcdgnn\n"
        f"run = hpcdgnn.train({str(job)!r}, output=sys.argv[1])\n"
        "z = run.embed(split='all')\n"
        "s = run.predict(pairs=np.array([[0, 1, 0], [2, 3, 1], [4, 0, 5]]))\n"
        # a file a process: long lines of several ranks on one stdout may be joined (MPICH's Hydra)
        "with open(f'{sys.argv[1]}.{os.getpid()}.json', 'w') as f:\n"
        "    json.dump({'z': np.nan_to_num(z.embeddings, nan=-7).tolist(), 's': s.tolist(), "
        "'c': z.computed.tolist()}, f)\n")
    outs = {}
    for ranks in (None, 3):
        proc = launcher.run(ranks, [str(script), str(tmp_path / f"r{ranks}")], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs[ranks] = [json.loads(p.read_text()) for p in tmp_path.glob(f"r{ranks}.*.json")]
    assert len(outs[None]) == 1 and len(outs[3]) == 3
    alone = outs[None][0]
    for got in outs[3]:
        assert got["c"] == alone["c"]
        np.testing.assert_allclose(got["z"], alone["z"], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got["s"], alone["s"], rtol=1e-9)
    assert outs[3][0] == outs[3][1] == outs[3][2]


def _caught_on_two_ranks(launcher, tmp_path, body: str) -> tuple[list[str], str]:
    """Run a script on 2 ranks that sets ``rank``, runs ``body`` (which calls the API) and prints the ConfigError
    it catches as ``CAUGHT <message>``: (those lines, the output); the script must end 0 (no abort)."""
    script = tmp_path / "caught.py"
    script.write_text(
        "import os\nimport hpcdgnn\nfrom hpcdgnn.errors import ConfigError\n"
        "rank = int(os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK', '0')))\n"
        # one write a line: MPICH's Hydra forwards each write as it comes and may join two ranks' partial lines
        f"try:\n{textwrap.indent(body, '    ')}\nexcept ConfigError as e:\n"
        "    os.write(1, f'CAUGHT {e}\\n'.encode())\n")
    proc = launcher.run(2, [str(script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if line.startswith("CAUGHT")], proc.stdout + proc.stderr[-2000:]


def test_the_same_pairs_in_another_container_are_the_same_argument():
    """Ranks compare their arguments by digest: the same numbers as a list, an int32 tensor or an int64 array must
    agree (a rank holding its pairs as a tensor is not refused), other numbers, None or another path not."""
    from hpcdgnn.api import _Same

    same = _Same.digest([[0, 1, 0], [2, 3, 1]])
    assert same == _Same.digest(np.array([[0, 1, 0], [2, 3, 1]])) == _Same.digest(
        torch.tensor([[0, 1, 0], [2, 3, 1]], dtype=torch.int32))
    assert len({same, _Same.digest([[0, 1, 0], [2, 3, 2]]), _Same.digest([[0, 1, 0]]), _Same.digest(None),
                _Same.digest("p.txt"), _Same.digest("q.txt")}) == 6
    assert _Same.digest([[0.5, 1, 0]]) == _Same.digest(torch.tensor([[0.5, 1, 0]], dtype=torch.float64))


@pytest.mark.mpi
def test_arguments_that_differ_between_ranks_are_refused_on_every_rank(tmp_path, small_dataset, launcher):
    """Rank 0's arguments decide for every rank: another rank's own pairs were silently scored as rank 0's, and an
    output given on rank 0 alone hung the others (they waited for the data rank 0, writing a file, never sent).
    Now each is one line on every rank; pairs None on the other ranks is rank 0's for all, as documented."""
    script = tmp_path / "differ.py"
    script.write_text(
        "import os\nimport numpy as np\nimport hpcdgnn\nfrom hpcdgnn.errors import ConfigError\n"
        "rank = int(os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK', '0')))\n"
        f"run = hpcdgnn.train({{'data': {{'path': {str(small_dataset)!r}}}, 'train': {{'epochs': 1}}}}, "
        "output='r')\n"
        "s = run.predict(pairs=None if rank else np.array([[0, 1, 0], [2, 3, 1]]))\n"
        "os.write(1, f'SCORES {s.tolist()}\\n'.encode())\n"
        "for call in (lambda: run.predict(pairs=np.array([[0, 1 + rank, 0]])),\n"
        "             lambda: run.embed(output=None if rank else 'z.h5')):\n"
        "    try:\n        call()\n    except ConfigError as e:\n"
        "        os.write(1, f'CAUGHT {e}\\n'.encode())\n")
    proc = launcher.run(2, [str(script)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    scores = [line for line in proc.stdout.splitlines() if line.startswith("SCORES")]
    assert len(scores) == 2 and scores[0] == scores[1], proc.stdout
    caught = sorted(line for line in proc.stdout.splitlines() if line.startswith("CAUGHT"))
    assert caught == sorted(2 * [
        "CAUGHT predict: rank 1 was given another pairs than rank 0; every rank calls predict with the same "
        "arguments (or pairs=None: rank 0's serve every rank)",
        "CAUGHT embed: rank 1 was given another output than rank 0; every rank calls embed with the same "
        "arguments"]), proc.stdout
    assert not (tmp_path / "z.h5").exists()


@pytest.mark.mpi
def test_a_later_call_on_rank_0_alone_names_that_call_when_it_gives_up(tmp_path, small_dataset, launcher):
    """``if rank == 0: run.embed(...)`` (mpi4py's idiom for writing a file; embed is a collective) waits for the
    other ranks, which never come: the line it ends the job with said they "did not start hpcdgnn" and must "run
    python -m hpcdgnn run, or call hpcdgnn.train", which they did. It now names the call every rank must make."""
    script = tmp_path / "alone.py"
    script.write_text(
        "import os\nimport hpcdgnn\n"
        "rank = int(os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK', '0')))\n"
        f"run = hpcdgnn.train({{'data': {{'path': {str(small_dataset)!r}}}, 'train': {{'epochs': 1}}}}, "
        "output='r')\n"
        "os.environ['HPCDGNN_START_TIMEOUT'] = '2'\n"
        "if rank == 0:\n    run.embed('z.h5')\n")
    proc = launcher.run(2, [str(script)], cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert ("[rank 0] hpcdgnn: error: stalled at the start: rank 1 of 2 did not call TrainedRun.embed within 2 s "
            "(HPCDGNN_START_TIMEOUT): under mpirun every rank makes the same call, as with hpcdgnn.train (not rank 0 "
            "alone, under 'if rank == 0')\n") in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "z.h5").exists()


@pytest.mark.mpi
def test_a_mapping_job_s_error_reads_the_same_on_every_rank(tmp_path, small_dataset, launcher):
    """Rank 0 finds the bad key and every rank raises it: each names the job as the caller gave it, not rank
    0's temporary file (which the other ranks never had)."""
    caught, out = _caught_on_two_ranks(
        launcher, tmp_path, f"hpcdgnn.train({{'data': {{'path': {str(small_dataset)!r}}}, 'train': {{'epochz': 1}}}})")
    assert len(caught) == 2 and all(line.startswith("CAUGHT job (mapping): train.epochz: unknown key")
                                    for line in caught), out


def test_a_sweep_s_values_and_overrides_as_a_script_hands_them_over(tmp_path, small_dataset, monkeypatch):
    """numpy scalars and paths in a mapping job, one override string, an override mapping: the run they say."""
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "model": {"name": "cdgcn", "hidden": np.int64(5)},
           "task": {"name": "link_prediction"}, "train": {"epochs": np.int64(3), "lr": np.float32(0.5).item(),
                                                         "threads": 1}}
    torch.set_num_threads(2)
    torch.manual_seed(123)
    rng = torch.random.get_rng_state()
    run = hpcdgnn.train(job, overrides="train.epochs=2", output=tmp_path / "a")
    assert len(run.losses) == 2 and run.job.model.hidden == 5 and run.job.data.path == str(small_dataset)
    # the caller's torch as it was (the job ran one thread and its own seed), the model ready to evaluate
    assert torch.get_num_threads() == 2 and torch.equal(torch.random.get_rng_state(), rng)
    assert not run.model.training and not hpcdgnn.load_run(run.dir).model.training
    run = hpcdgnn.train(job, overrides={"train.epochs": 1, "train.seed": np.int64(9)}, output=tmp_path / "b")
    assert len(run.losses) == 1 and run.job.train.seed == 9
    with pytest.raises(ConfigError, match=r"^job \(mapping\): model\.hidden: object .* is not a job value"):
        hpcdgnn.train({**job, "model": {"name": "cdgcn", "hidden": object()}})
    with pytest.raises(ConfigError, match=r"^job: is None: pass a job .* or resume=RUNDIR$"):
        hpcdgnn.train(None)
    for bad in ("a/b", "a\nb", "x" * 201, ""):  # no path, no line break in a directory's name, room for the rest
        with pytest.raises(ConfigError, match=r"^name: .* is not a run name"):
            hpcdgnn.train(job, name=bad)


def test_numpy_scalars_of_plain_subtypes_are_written_as_python_values(tmp_path, small_dataset, monkeypatch):
    """np.float64 and np.str_ subclass float and str, which YAML's safe writer refused (RepresenterError): in a
    mapping job and in an override mapping they are the Python value, or the job's own one-line error."""
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "model": {"name": np.str_("cdgcn"), "hidden": np.int64(4)},
           "task": {"name": np.str_("link_prediction")},
           "train": {"epochs": np.int64(1), "lr": np.float64(0.25), "threads": 1, "reuse_memory": np.bool_(False)}}
    run = hpcdgnn.train(job, overrides={"train.lr": np.float64(0.5), "model.name": np.str_("cdgcn")},
                        output=tmp_path / "a")
    assert run.job.train.lr == 0.5 and run.job.model.name == "cdgcn" and run.job.train.reuse_memory is False
    with pytest.raises(ConfigError, match=r"^overrides: train\.epochs: expected an integer, got float 1\.0$"):
        hpcdgnn.train(job, overrides={"train.epochs": np.float64(1)}, output=tmp_path / "b")
    with pytest.raises(ConfigError, match=r"^job \(mapping\): train\.lr: longdouble .* is not a job value"):
        hpcdgnn.train({**job, "train": {"lr": np.longdouble(0.5)}})  # its tolist() is itself: refused, no recursion


def test_torch_s_and_numpy_s_devices_and_dtypes_are_the_job_s_words(tmp_path, small_dataset, monkeypatch):
    """A PyTorch script's ``device = torch.device("cpu")`` and ``torch.float64`` (or ``np.float64``) were refused as
    not job values (np.float64, a class, raised TypeError from its unbound tolist()): they are ``cpu`` and
    ``float64``, in a mapping job and in overrides; what the keys do not take is refused in the job's words."""
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "train": {"epochs": 1, "device": torch.device("cpu"),
                                                      "dtype": torch.float64}}
    run = hpcdgnn.train(job, output="a")
    assert (run.job.train.device, run.job.train.dtype) == ("cpu", "float64")
    run = hpcdgnn.train(job, overrides={"train.dtype": np.float32}, output="b")
    assert run.job.train.dtype == "float32"
    assert hpcdgnn.train({**job, "train": {"epochs": 1, "dtype": np.dtype("float64")}}, output="c").job.train.dtype \
        == "float64"
    with pytest.raises(ConfigError, match=r"^job \(mapping\): train\.dtype: 'float16' is not allowed; choose from "):
        hpcdgnn.train({**job, "train": {"dtype": torch.float16}})


def test_a_job_or_overrides_of_another_type_is_a_one_line_error(small_dataset):
    job = {"data": {"path": str(small_dataset)}}
    for bad in ([1, 2], 5):
        with pytest.raises(ConfigError, match=rf"^job: {type(bad).__name__} .*: pass a job YAML path, a mapping"):
            hpcdgnn.train(bad)
    for bad in (5, [5], b"train.epochs=1"):
        with pytest.raises(ConfigError, match=r"^overrides: .*: give a string 'KEY=VALUE', a sequence of such "
                                              r"strings or a mapping"):
            hpcdgnn.train(job, overrides=bad)
    # a long tensor or set, a class (np.ndarray): one short line each, not their whole repr, nor a TypeError from
    # the class's unbound tolist() (a resolved job, TrainedRun.job, trains: test_python_api_trial.py)
    with pytest.raises(ConfigError, match=r"^overrides: Tensor tensor\(.{0,60}: give a string") as e:
        hpcdgnn.train(job, overrides=torch.arange(10_000))
    assert len(str(e.value)) < 200
    for value, shown in ((np.ndarray, "type <class 'numpy.ndarray'>"), (set(range(10_000)), "set {0, 1")):
        with pytest.raises(ConfigError, match=rf"^job \(mapping\): train\.dtype: {re.escape(shown)}.{{0,60}} is not "
                                              r"a job value \(a number") as e:
            hpcdgnn.train({**job, "train": {"dtype": value}})
        assert len(str(e.value)) < 200


def test_a_job_s_yaml_text_is_named_as_such_in_one_line(tmp_path, small_dataset, monkeypatch):
    """A notebook's job in a triple-quoted string was read as a file's path: the error was its lines followed by
    'cannot read job file'. It is refused in one line saying what to pass; a file of that name is still read."""
    monkeypatch.chdir(tmp_path)
    text = f"data: {{path: {small_dataset}}}\ntrain: {{epochs: 1}}\n"
    with pytest.raises(ConfigError, match=r"^job: 'data: .* is YAML text, not a job file: pass yaml\.safe_load") as e:
        hpcdgnn.train(text)
    assert "\n" not in str(e.value)
    (tmp_path / "a: b").write_text(text)  # an odd name, yet a file: read
    assert hpcdgnn.train("a: b", output=tmp_path / "r").losses


def test_bad_jobs_and_run_directories_are_one_line_errors(tmp_path, small_dataset, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^job \(mapping\): model\.nam: unknown option.*did you mean 'name'") as e:
        hpcdgnn.train({"data": {"path": str(small_dataset)}, "model": {"nam": "cdgcn"}})
    assert "\n" not in str(e.value) and "hpcdgnn-job-" not in str(e.value)
    with pytest.raises(ConfigError, match="data.path"):
        hpcdgnn.train({"data": {"path": "no/such/dataset"}})
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing left behind
    with pytest.raises(DataError, match=f"{tmp_path}: not a finished hpcdgnn run directory"):
        hpcdgnn.load_run(tmp_path)


def test_importing_hpcdgnn_loads_no_torch():
    """The API is imported on first use: ``prepare`` and the other commands start without torch."""
    import subprocess

    code = "import hpcdgnn, sys; assert 'torch' not in sys.modules and 'hpcdgnn.api' not in sys.modules; " \
           "assert {'train', 'load_run', 'TrainedRun'} <= set(dir(hpcdgnn)), dir(hpcdgnn); " \
           "hpcdgnn.load_run; assert 'hpcdgnn.api' in sys.modules and 'torch' not in sys.modules"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize(("given", "says"), [
    ("{'train': {'epochs': 1 + rank}}", "not the same job file content"),
    ("{}, overrides={'train.seed': rank}", "not the same overrides")])
def test_a_job_given_differently_to_one_rank_is_refused_on_every_rank(tmp_path, small_dataset, launcher, given,
                                                                       says):
    """Rank 0 reads the job for all: a caller handing each rank its own job (or overrides) trained rank 0's without
    a word. Now every rank raises one line naming the rank and what differs, and no run directory is made."""
    job, _, rest = given.partition(", ")
    caught, out = _caught_on_two_ranks(
        launcher, tmp_path, f"hpcdgnn.train({{'data': {{'path': {str(small_dataset)!r}}}, **{job}}}"
                            f"{', ' + rest if rest else ''})")
    assert len(caught) == 2 and all(f"rank 1 was given another job than rank 0 ({says})" in line
                                    for line in caught), out
    assert not list(tmp_path.glob("run*")) and not (tmp_path / "runs").exists()


@pytest.mark.mpi
def test_a_bad_variable_on_one_rank_is_raised_on_every_rank(tmp_path, small_dataset, launcher):
    """A bad HPCDGNN_BUCKET_BYTES on rank 1 alone was met there alone, mid-set-up: its line and MPI_Abort ended the
    caller's script. The ranks check their environment first and agree: every rank raises the one line."""
    caught, out = _caught_on_two_ranks(
        launcher, tmp_path, "if rank == 1:\n    os.environ['HPCDGNN_BUCKET_BYTES'] = 'half'\n"
                            f"hpcdgnn.train({{'data': {{'path': {str(small_dataset)!r}}}}})")
    said = "CAUGHT rank 1: environment HPCDGNN_BUCKET_BYTES='half': a byte count >= 0 (0: no buckets)"
    assert caught == [said] * 2, out
    assert not (tmp_path / "runs").exists()


def test_train_shows_its_signature_and_names_itself_in_type_errors():
    """``hpcdgnn.train`` is a callable package: ``inspect`` and ``help`` show :func:`hpcdgnn.api.train`'s
    signature and description, and a wrong call's TypeError names ``train()``, not the package's class."""
    import inspect
    import pydoc

    from hpcdgnn import api

    assert inspect.signature(hpcdgnn.train) == inspect.signature(api.train)
    assert "resume: continue the run in this directory" in pydoc.render_doc(hpcdgnn.train)
    with pytest.raises(TypeError, match=r"^train\(\) missing 1 required positional argument: 'job'$"):
        hpcdgnn.train()
    with pytest.raises(TypeError, match=r"^train\(\) takes 1 positional argument but 2 were given$"):
        hpcdgnn.train({}, "out")


def test_path_arguments_of_another_type_and_output_with_resume_are_one_line_errors(tmp_path, small_dataset,
                                                                                     monkeypatch):
    """``output=5`` trained into ./5; ``load_run(5)`` raised pathlib's TypeError; ``output`` with ``resume``
    trained on in the resumed run's directory without a word (the command refuses the pair)."""
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": str(small_dataset)}}
    with pytest.raises(ConfigError, match=r"^output: int 5 is not a path \(give a str or os\.PathLike\)$"):
        hpcdgnn.train(job, output=5)
    with pytest.raises(ConfigError, match=r"^resume: list \['r'\] is not a path"):
        hpcdgnn.train(None, resume=["r"])
    with pytest.raises(ConfigError, match=r"^run_dir: int 5 is not a path"):
        hpcdgnn.load_run(5)
    with pytest.raises(ConfigError, match=r"^output='b' and resume='a' exclude each other: a resumed run goes on "
                                          r"in its own directory$"):
        hpcdgnn.train(None, resume="a", output="b")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_caller_s_default_dtype_and_rng_change_no_number(tmp_path, small_dataset, monkeypatch):
    """A notebook that set float64 as torch's default dtype trains the command's numbers (its initial weights were
    drawn in float64, then cast) and gets its default back; building a run's model from its checkpoint
    (``load_run(...).model``) leaves the caller's RNG where it was."""
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "train": {"epochs": 2}}
    plain = hpcdgnn.train(job, output="plain")
    torch.set_default_dtype(torch.float64)
    try:
        wide = hpcdgnn.train(job, output="wide")
        assert torch.get_default_dtype() == torch.float64
        monkeypatch.setenv("HPCDGNN_START_TIMEOUT", "abc")  # a call that fails before it starts MPI
        with pytest.raises(ConfigError, match="HPCDGNN_START_TIMEOUT"):
            hpcdgnn.train(job, output="never")
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert wide.losses == plain.losses
    # a mapping's temporary file is gone after the call: the summary says what the job was instead
    assert plain.summary["job"].startswith("a mapping given to hpcdgnn.train (name 'job';")
    assert wide.summary["parameters"]["initial_checksum"] == plain.summary["parameters"]["initial_checksum"]
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    _ = hpcdgnn.load_run(plain.dir).model
    assert torch.equal(torch.rand(3), expected)


def test_a_caller_s_logging_configuration_of_the_package_logger_stays(tmp_path, small_dataset, monkeypatch, capsys):
    """``logging.getLogger("hpcdgnn")``: a level the caller set silences the epoch lines, a handler it added gets
    them instead of stdout; both are still there after the run (a run replaced them)."""
    import logging

    log = logging.getLogger("hpcdgnn")
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(log, "filters", [])
    monkeypatch.setattr(log, "propagate", log.propagate)
    monkeypatch.setattr(log, "level", log.level)
    log.setLevel(logging.WARNING)  # setLevel: the logger caches which levels are enabled
    monkeypatch.chdir(tmp_path)
    job = {"data": {"path": small_dataset}, "train": {"epochs": 2}}
    hpcdgnn.train(job, output="quiet")
    assert "epoch    1" not in capsys.readouterr().out and log.level == logging.WARNING
    lines = []
    mine = logging.Handler()
    mine.emit = lambda record: lines.append(record.getMessage())
    log.addHandler(mine)
    log.setLevel(logging.INFO)
    hpcdgnn.train(job, output="mine")
    assert "epoch    1" not in capsys.readouterr().out and any(ln.startswith("epoch    2") for ln in lines), lines
    assert log.handlers == [mine]
    log.setLevel(logging.NOTSET)  # as the next tests find it (monkeypatch puts the attribute back, not the cache)


def test_the_model_loads_without_the_dataset_and_damaged_records_are_named(tmp_path, small_dataset, monkeypatch):
    """A run's checkpoint keeps the dataset's sizes: ``load_run(...).model`` builds the model from another working
    directory, with the (relative) dataset gone. A ``metrics.jsonl`` line that is not a record is one line naming
    the file and the line (a last line cut short by a kill is left out); a run directory without the file says
    so."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(small_dataset, data)
    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train({"data": {"path": "data"}, "train": {"epochs": 2}}, output="r")
    shutil.rmtree(data)
    monkeypatch.chdir(tmp_path / "r")
    loaded = hpcdgnn.load_run(tmp_path / "r")
    for a, b in zip(loaded.model.parameters(), run.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert loaded.sizes["num_vertices"] == run.sizes["num_vertices"] > 0
    records = tmp_path / "r" / "metrics.jsonl"
    lines = records.read_text().splitlines(keepends=True)
    records.write_text(lines[0] + '{"epoch": 2, "lo')  # a kill while writing the last
    assert len(loaded.losses) == 1
    records.write_text('{"epoch": 1, "lo\n' + lines[1])
    with pytest.raises(DataError, match=rf"^{records}: line 1: not an epoch record \(Invalid control character"):
        _ = loaded.losses
    records.unlink()
    with pytest.raises(DataError, match=r"not a finished hpcdgnn run directory \(no metrics.jsonl\)"):
        _ = loaded.metrics


def test_a_new_run_stopped_in_its_set_up_returns_no_model(tmp_path, small_dataset, monkeypatch, capsys):
    """A signal during the set-up stops a new run before its first epoch: its weights are the initial ones and in
    no checkpoint, so ``model`` says there is none (as after an epoch abandoned between batches), not the
    untrained module."""
    import os
    import signal

    from hpcdgnn.train import trainer

    built = trainer.build_run

    def signalled(*args, **kwargs):
        run = built(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # the handler hpcdgnn.train installed takes it
        return run

    monkeypatch.setattr(trainer, "build_run", signalled)
    run = hpcdgnn.train({"data": {"path": str(small_dataset)}, "train": {"epochs": 2}}, output=tmp_path / "r")
    # a bool, not numpy's (the set-up's stop is agreed in an array): json.dumps and `is True` take it
    assert run.preempted is True and run.losses == [] and run.checkpoint is None
    # the interrupt is acknowledged when it comes (a full-batch epoch may run long before the stop)
    out, err = capsys.readouterr()
    assert "hpcdgnn: interrupted: stopping at the next epoch boundary" in err
    assert "no checkpoint yet: run the job again with another output=, or after removing" in out  # not --output
    with pytest.raises(DataError, match=r"the run has no complete checkpoint of an epoch.s end to load the model "
                                        r"from \(it stopped before its first\)"):
        _ = run.model


def test_a_run_stopped_after_an_epoch_says_how_to_resume_it_from_python(tmp_path, small_dataset, monkeypatch,
                                                                          capsys):
    """The pre-emption line of a run started from Python names the call that continues it, not ``--resume``."""
    import os
    import signal

    from hpcdgnn.train import trainer

    batches = trainer.train_batches

    def signalled(*args, **kwargs):
        out = batches(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # during epoch 1: it ends, checkpoints and stops
        return out

    monkeypatch.setattr(trainer, "train_batches", signalled)
    run = hpcdgnn.train({"data": {"path": str(small_dataset)}, "train": {"epochs": 2}}, output=tmp_path / "r")
    first = run.losses
    assert run.preempted and len(first) == 1
    out = capsys.readouterr().out
    assert f"stopped after epoch 1; resume with hpcdgnn.train(None, resume={str(run.dir)!r})" in out, out
    monkeypatch.setattr(trainer, "train_batches", batches)
    assert hpcdgnn.train(None, resume=run.dir).losses[:1] == first  # the advice works as written


def _hpcdgnn_frames(e: BaseException) -> list[tuple[str, str]]:
    """The (file, function) of each frame of hpcdgnn's in ``e``'s traceback, outermost first."""
    import traceback

    frames = [(os.path.relpath(f.filename, REPO), f.name) for f in traceback.extract_tb(e.__traceback__)]
    return [f for f in frames if f[0].startswith("hpcdgnn")]


def test_errors_name_the_api_s_arguments_without_internal_frames(tmp_path, small_dataset, monkeypatch):
    """The commands' messages, in this API's words (``overrides``, ``output=``, ``resume=``) and without the
    frames of hpcdgnn's internals, for a YAML job as for a mapping one: the traceback of ``hpcdgnn.train``'s
    refusal showed ``train/__init__.py __call__``, ``api.train`` and ``_on_every_rank`` where docs/jobs.md says
    there are none; it now holds the call itself alone, for train as for a trained run's calls."""
    monkeypatch.chdir(tmp_path)
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    with pytest.raises(ConfigError, match=r"^overrides: train\.epochz: unknown key; did you mean .epochs.\?$") as e:
        hpcdgnn.train(job, overrides=["train.epochz=2"])
    assert _hpcdgnn_frames(e.value) == [("hpcdgnn/api.py", "train")]
    assert e.value.__cause__ is None and e.value.__suppress_context__
    run = hpcdgnn.train(job, output="r")
    run.export(csv="m.csv")
    for call, name in ((lambda: run.embed(split="some"), "embed"), (lambda: run.predict("s.csv"), "predict"),
                       (lambda: run.export(csv="m.csv"), "export")):
        with pytest.raises(ConfigError) as e:
            call()
        assert _hpcdgnn_frames(e.value) == [("hpcdgnn/api.py", name)], e.value
    with pytest.raises(ConfigError, match=r"^output=r: directory exists and is not empty; a run never overwrites") as e:
        hpcdgnn.train(job, output="r")
    assert "--" not in str(e.value), e.value
    with pytest.raises(ConfigError, match=r"^resume=r: the run has already trained"):
        hpcdgnn.train(None, resume="r")


def test_a_crash_inside_train_keeps_every_frame_and_shows_no_package_wrapper(tmp_path, small_dataset, monkeypatch):
    """An exception that is no refusal (a bug in hpcdgnn, or the user's own code hpcdgnn runs) keeps the frames
    that locate it, down to the raising function; the callable package adds no frame of its own."""
    import traceback

    from hpcdgnn.train import trainer

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(trainer, "train_batches", broken)
    with pytest.raises(RuntimeError, match="^a bug$") as e:
        hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1}), output=tmp_path / "r")
    frames = _hpcdgnn_frames(e.value)
    assert frames[0] == ("hpcdgnn/api.py", "train") and ("hpcdgnn/api.py", "_on_every_rank") in frames, frames
    assert ("hpcdgnn/train/__init__.py", "__call__") not in frames
    assert traceback.extract_tb(e.value.__traceback__)[-1].name == "broken"


def test_the_package_imports_and_trains_under_python_oo(tmp_path, small_dataset):
    """``python -OO`` strips docstrings: the callable package must not need them (it crashed on import)."""
    import subprocess

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    code = f"import hpcdgnn; r = hpcdgnn.train({str(job)!r}, output={str(tmp_path / 'r')!r}); print(len(r.losses))"
    proc = subprocess.run([sys.executable, "-OO", "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("1"), proc.stderr[-2000:]


def test_only_a_message_s_subject_and_its_advice_take_the_api_s_words():
    """The commands' options become arguments where a message names one as its subject or advises a --set;
    prepare's options and user paths elsewhere stay as written."""
    from hpcdgnn.api import _named

    for message, want in [
        ("--set train.epochs: expected an integer", "overrides: train.epochs: expected an integer"),
        ("predict /r: --split test: only node tasks take it", "predict /r: split=test: only node tasks take it"),
        ("--resume r: train longer with --set train.epochs=N (N > 1)",
         'resume=r: train longer with overrides=["train.epochs=N"] (N > 1)'),
        ("data.path: /a--output/x: does not exist (if it moved: --set data.path=NEW)",
         'data.path: /a--output/x: does not exist (if it moved: overrides=["data.path=NEW"])'),
        ("j.yaml: task.split: the dataset's (prepare --kind events --split); remove task.split", None),
    ]:
        assert str(_named(ConfigError(message), None)) == (want or message)


def _held(tmp_path: Path, small_dataset, monkeypatch, capsys, wait: str) -> int:
    """A run ``r`` of one epoch in ``tmp_path`` (the working directory), held by another job (its rank 0's ``flock``
    on ``r/run.lock``: a descriptor to close), with ``HPCDGNN_RUN_LOCK_WAIT=wait``."""
    import fcntl

    monkeypatch.chdir(tmp_path)
    hpcdgnn.train({"data": {"path": str(small_dataset)}, "train": {"epochs": 1}}, output="r")
    capsys.readouterr()
    monkeypatch.setenv("HPCDGNN_RUN_LOCK_WAIT", wait)
    fd = os.open(tmp_path / "r" / "run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_resume_waiting_for_another_job_s_run_lock_says_so_in_the_api_s_words(tmp_path, small_dataset,
                                                                                 monkeypatch, capsys):
    """The wait's line named the command's ``--resume RUNDIR`` to a caller of ``hpcdgnn.train(None, resume=...)``;
    it names ``resume=RUNDIR``, as the refusal that ends the wait does."""
    fd = _held(tmp_path, small_dataset, monkeypatch, capsys, "0.5")
    try:
        with pytest.raises(ConfigError, match=r"^resume=r: another job is training this run now"):
            hpcdgnn.train(None, resume="r", overrides=["train.epochs=2"])
    finally:
        os.close(fd)
    out, err = capsys.readouterr()
    assert "resume=r: another job holds " in out + err, (out, err)
    assert "--" not in out + err, (out, err)


def test_an_interrupt_while_a_resume_waits_for_run_lock_is_acknowledged_as_a_stop_now(tmp_path, small_dataset,
                                                                                       monkeypatch, capsys):
    """A first interrupt is acknowledged as a stop at the next epoch boundary with a checkpoint; during the wait
    for another job's ``run.lock`` it ends the wait at once (``StoppedError``) and writes nothing, so that is what
    its line says."""
    import logging
    import signal

    from hpcdgnn.errors import StoppedError

    class Interrupt(logging.Handler):  # the caller's Ctrl-C once the wait has begun
        def emit(self, record):
            if "another job holds" in record.getMessage():
                os.kill(os.getpid(), signal.SIGINT)  # the handler hpcdgnn.train installed takes it

    log = logging.getLogger("hpcdgnn")
    interrupt = Interrupt()
    fd = _held(tmp_path, small_dataset, monkeypatch, capsys, "60")
    log.addHandler(interrupt)
    try:
        with pytest.raises(StoppedError, match=r"^resume=r: stopped by a signal while waiting for another job"):
            hpcdgnn.train(None, resume="r", overrides=["train.epochs=2"])
    finally:
        os.close(fd)
        log.removeHandler(interrupt)
    err = capsys.readouterr().err
    assert "hpcdgnn: interrupted: stopping now, while waiting for another job to let go of r/run.lock; nothing " \
        "was changed" in err, err
    assert "checkpoint" not in err, err
    assert len(read_metrics(tmp_path / "r")) == 1
