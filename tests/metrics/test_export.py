"""``python -m hpcdgnn export``: the epoch records as CSV and TensorBoard scalars (and ``output.tensorboard`` live),
read back with the standard readers; the model as a plain file that builds again without the trainer."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json

import numpy as np
import pytest
import torch

import hpcdgnn
from hpcdgnn.__main__ import main
from hpcdgnn.data.events import write_events
from hpcdgnn.data.writer import RawSnapshot, write_dataset
from hpcdgnn.metrics.export import load_model
from tests.conftest import REPO, mpi_env, read_metrics, run_in_process, write_job


def _train(tmp_path, data, name="run", **sections):
    job = write_job(tmp_path / f"{name}.yaml", data, **sections)
    proc = run_in_process(["run", str(job), "--output", str(tmp_path / name)], mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / name


def _tensorboard_scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files under ``logdir``, read by TensorBoard's own reader."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = accumulator.EventAccumulator(str(logdir), size_guidance={accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _leaves(record) -> dict[str, object]:
    """Every leaf of a JSON record by its dotted path (list items by index), depth first in the record's order:
    written here, not taken from the exporter, so that a subtree the exporter drops fails the test."""
    out: dict[str, object] = {}
    stack = [("", record)]
    while stack:
        path, node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
        if items is None:
            out[path] = node
            continue
        stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(list(items)))
    return out


def _expected_scalars(records) -> dict[str, list[tuple[int, float]]]:
    want: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        for key, value in _leaves(r).items():
            if key != "epoch" and isinstance(value, int | float):
                # TensorBoard stores a scalar as float32
                want.setdefault(key.replace(".", "/"), []).append((r["epoch"], float(np.float32(value))))
    return want


def test_csv_and_tensorboard_hold_every_number_of_metrics_jsonl(tmp_path, small_dataset, capsys):
    pytest.importorskip("tensorboard")
    live = tmp_path / "live-tb"
    run = _train(tmp_path, small_dataset, output={"tensorboard": str(live)}, strategy={"name": "vertex"})
    records = read_metrics(run)
    assert main(["export", str(run), "--csv", str(tmp_path / "m.csv"), "--tensorboard", str(tmp_path / "tb")]) == 0
    assert "3 epochs" in capsys.readouterr().out

    with open(tmp_path / "m.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records) == 3
    for row, record in zip(rows, records, strict=True):
        flat = _leaves(record)
        assert list(row) == list(flat)  # every nested key, dotted, in the record's order
        assert "time.compute.max" in row and "per_rank.compute.0" in row and "bytes_by_tag.grad_allreduce" in row
        assert any(k.startswith("comm_by_tag.grad_allreduce.") for k in row), list(row)
        for key, value in flat.items():
            if isinstance(value, bool) or value is None:
                assert row[key] == ("" if value is None else str(value)), key
            elif isinstance(value, int | float):
                assert float(row[key]) == value, key  # Python writes floats to round-trip exactly

    want = _expected_scalars(records)
    assert "loss" in want and "time/comm/max" in want
    for logdir in (tmp_path / "tb", live):  # exported after the run, and written live by rank 0
        got = _tensorboard_scalars(logdir)
        assert got.keys() == want.keys(), set(got) ^ set(want)
        for tag in want:
            assert got[tag] == want[tag], tag


def test_live_tensorboard_never_mixes_two_runs_curves(tmp_path, small_dataset):
    """``output.tensorboard`` holding another run's curves is refused in one line before the new run writes
    anything (TensorBoard would draw both at the same steps as one curve), as ``export --tensorboard`` refuses it;
    the run that wrote them resumes into it, adding its new epochs. An event file without a scalar (a run that
    stopped before its first epoch opened its writer) holds no curve: no refusal, by either."""
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    live, other = tmp_path / "live-tb", tmp_path / "other-tb"
    SummaryWriter(str(live)).close()  # a crashed attempt's header-only file
    first = _train(tmp_path, small_dataset, name="first", output={"tensorboard": str(live)}, train={"epochs": 1})
    _train(tmp_path, small_dataset, name="elsewhere", output={"tensorboard": str(other)}, train={"epochs": 1})
    before = sorted(p.name for p in live.iterdir())
    job = write_job(tmp_path / "second.yaml", small_dataset, output={"tensorboard": str(live)})
    for args in (["run", str(job), "--output", str(tmp_path / "second")],
                 ["run", "--resume", str(first), "--set", f"output.tensorboard={other}", "train.epochs=2"]):
        proc = run_in_process(args, mpi_env(), tmp_path)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert "output.tensorboard:" in lines[0] and "holds another run's curves (events.out.tfevents." in lines[0]
    assert not (tmp_path / "second").exists() and sorted(p.name for p in live.iterdir()) == before
    assert main(["export", str(first), "--tensorboard", str(live)]) == 2
    empty = tmp_path / "empty-tb"
    SummaryWriter(str(empty)).close()
    assert main(["export", str(first), "--tensorboard", str(empty)]) == 0 and "loss" in _tensorboard_scalars(empty)
    resumed = run_in_process(["run", "--resume", str(first), "--set", "train.epochs=2"], mpi_env(), tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert [step for step, _ in _tensorboard_scalars(live)["loss"]] == [1, 2]


def _regression_data(root):
    rng = np.random.default_rng(3)
    T, N = 5, 9
    snaps = (RawSnapshot(rng.integers(0, N, 12), rng.integers(0, N, 12), targets=rng.standard_normal(N))
             for _ in range(T))
    write_dataset(root, snaps, num_vertices=N, targets="signal")
    return root


def _event_data(root):
    with gzip.open(REPO / "inputs" / "CollegeMsg.txt.gz", "rt") as f:
        rows = np.loadtxt(f, dtype=np.int64, max_rows=400)
    ids, inv = np.unique(rows[:, :2], return_inverse=True)
    inv = inv.reshape(-1, 2)
    write_events(root, inv[:, 0], inv[:, 1], (rows[:, 2] - rows[0, 2]) / 86400.0, None, num_vertices=ids.shape[0],
                 bipartite=False, num_sources=None, feature_names=None, original_ids=ids)
    return root


@pytest.mark.parametrize("case", ["link_prediction", "node_classification", "regression", "tgn"])
def test_the_exported_model_builds_again_without_the_run(tmp_path, small_dataset, case, capsys, monkeypatch):
    if case == "regression":
        run = _train(tmp_path, _regression_data(tmp_path / "reg"), model={"name": "tgcn"},
                     task={"name": "regression"})
    elif case == "tgn":
        run = _train(tmp_path, _event_data(tmp_path / "events"), train={"epochs": 1},
                     model={"name": "tgn", "hidden": 8, "heads": 2, "memory_dim": 8, "time_dim": 4, "neighbors": 4},
                     task={"name": "temporal_link_prediction", "batch_events": 100, "eval_negatives": 4},
                     strategy={"name": "memory"})
    else:
        run = _train(tmp_path, small_dataset, model={"name": "evolvegcn_o"}, task={"name": case})
    reads = []
    load_shared = hpcdgnn.train.checkpoint.load_shared
    monkeypatch.setattr(hpcdgnn.train.checkpoint, "load_shared", lambda d: reads.append(d) or load_shared(d))
    assert main(["export", str(run), "--model-only", str(tmp_path / "model.pt")]) == 0
    assert len(reads) == 1  # state.pt (the whole model) read once: the model and its sizes from one load
    monkeypatch.undo()
    trained = hpcdgnn.load_run(run)
    assert f"head from checkpoints/{trained.checkpoint.name} " in capsys.readouterr().out  # says which epoch
    (tmp_path / "moved").mkdir()
    (tmp_path / "model.pt").rename(tmp_path / "moved" / "model.pt")  # the file alone: no run, no dataset
    model, task = load_model(tmp_path / "moved" / "model.pt")
    for mine, theirs in ((model, trained.model), (task, trained.task)):
        a, b = mine.state_dict(), theirs.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        assert not mine.training
    assert type(model) is type(trained.model) and type(task) is type(trained.task)
    assert trained.loaded_from == trained.checkpoint  # what the export's line names
    if case == "tgn":  # Δt's unit (the stream's median gap, not in a state_dict) travels with the dataset figures
        assert model.time.scale == trained.model.time.scale != 1.0


def test_bad_exports_are_one_line_and_write_nothing(tmp_path, small_dataset, capsys):
    run = _train(tmp_path, small_dataset)
    existing = tmp_path / "mine.csv"
    existing.write_text("the user's own file\n")
    for args, words in [
        ([str(tmp_path / "nowhere"), "--csv", str(tmp_path / "x.csv")], "not a finished hpcdgnn run directory"),
        ([str(run), "--csv", str(existing)], "exists; an export never overwrites"),
        ([str(run)], "say what to write"),
        ([str(run), "--csv", str(tmp_path / "no" / "dir.csv")], "no directory"),
        *([([str(run), "--tensorboard", str(existing)], "mine.csv: is a file, not a directory")]
          if importlib.util.find_spec("tensorboard") else []),
    ]:
        assert main(["export", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, (args, err)
    assert existing.read_text() == "the user's own file\n"
    assert not (tmp_path / "x.csv").exists()
    (tmp_path / "notamodel.pt").write_bytes(b"junk")
    with pytest.raises(hpcdgnn.errors.DataError, match="notamodel.pt: not a model file"):
        load_model(tmp_path / "notamodel.pt")
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    if importlib.util.find_spec("tensorboard"):  # a run's output.tensorboard on a file: refused before it starts
        job = write_job(tmp_path / "tb.yaml", small_dataset, output={"tensorboard": str(existing)})
        proc = run_in_process(["run", str(job), "--output", str(tmp_path / "tb")], mpi_env(), tmp_path)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and "output.tensorboard" in lines[0], proc.stderr
        assert "is a file, not a directory" in lines[0] and not (tmp_path / "tb").exists()
        assert existing.read_text() == "the user's own file\n"


def test_an_export_that_meets_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, small_dataset, capsys,
                                                                         monkeypatch):
    """A full disk (or quota) part way through writing --model-only or --csv: a traceback (torch.save's zip
    writer's assertion, or the OSError), exit 1, and the half-written file left at the path. Now one line, exit 2,
    neither the file nor a temporary left."""
    import errno
    import os

    run = _train(tmp_path, small_dataset)

    def full(f) -> None:
        f.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def save(obj, f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as fh:
                full(fh)
        full(f)

    def writerows(self, rows):
        self.writer.writerow(["partial"])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(csv.DictWriter, "writerows", writerows)
    out = tmp_path / "out"
    out.mkdir()
    for opt, name in (("--model-only", "m.pt"), ("--csv", "e.csv")):
        assert main(["export", str(run), opt, str(out / name)]) == 2, opt
        err = capsys.readouterr().err
        assert err == f"hpcdgnn: error: {opt} {out / name}: cannot write it (No space left on device); nothing was " \
                      "written\n", err
        assert list(out.iterdir()) == [], opt


def test_an_event_file_writer_that_fails_leaves_no_run_directory(tmp_path, small_dataset, monkeypatch):
    """Past the job's checks (a path on a read-only or pseudo file system): the writer's failure is one line and
    a new run leaves neither its directory nor a metrics.jsonl behind."""
    pytest.importorskip("tensorboard")

    def refuse(logdir, purge_step=None):
        raise hpcdgnn.errors.ConfigError(f"TensorBoard output {logdir}: Read-only file system")

    monkeypatch.setattr("hpcdgnn.metrics.export.TensorBoardLog", refuse)
    job = write_job(tmp_path / "tb.yaml", small_dataset, output={"tensorboard": str(tmp_path / "events")})
    proc = run_in_process(["run", str(job), "--output", str(tmp_path / "run")], mpi_env(), tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Read-only file system" in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()


def test_report_draws_curves_and_the_time_split_of_several_runs(tmp_path, small_dataset, capsys, monkeypatch):
    """Two runs' PNGs; an epoch a resume continued within (its time the rest's) is marked on its bar."""
    pytest.importorskip("matplotlib")
    import matplotlib.axes

    a = _train(tmp_path, small_dataset, name="a")
    b = _train(tmp_path, small_dataset, name="b", model={"name": "tmgcn"})
    records = [json.loads(line) for line in (b / "metrics.jsonl").read_text().splitlines()]
    records[1]["resumed_after_batches"] = 4
    (b / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    marks = []
    real = matplotlib.axes.Axes.annotate
    monkeypatch.setattr(matplotlib.axes.Axes, "annotate",
                        lambda self, text, xy, *args, **kw: marks.append((text, xy[0])) or real(self, text, xy, *args,
                                                                                               **kw))
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "rep")]) == 0
    assert marks == [("from batch 5", records[1]["epoch"])]
    for name in ("curves.png", "time_split.png"):
        png = (tmp_path / "rep" / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, name
    assert main(["report", str(a), "--out", str(tmp_path / "rep")]) == 2  # never overwrites
    assert "curves.png exists" in capsys.readouterr().err
    (tmp_path / "afile").write_text("keep\n")  # was a FileExistsError traceback
    assert main(["report", str(a), "--out", str(tmp_path / "afile")]) == 2
    assert "afile: is a file" in capsys.readouterr().err and (tmp_path / "afile").read_text() == "keep\n"


def test_report_draws_each_run_in_one_colour_in_every_panel(tmp_path, small_dataset, monkeypatch):
    """The legend is the first panel's: a run drawn in another colour in a panel that some run lacks (runs of other
    tasks, val_mrr beside val_auc) would be read as another run's curve."""
    pytest.importorskip("matplotlib")
    import matplotlib.axes

    a = _train(tmp_path, small_dataset, name="a")
    b = _train(tmp_path, small_dataset, name="b")
    records = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    (a / "metrics.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "val_auc"}) + "\n"
                                             for r in records))  # as a run of a task without val_auc
    drawn = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, *args, **kw: [
        drawn.append((kw.get("label"), line.get_color())) or line for line in real(self, *args, **kw)])
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "rep")]) == 0
    colours = {label: {c for name, c in drawn if name == label} for label in ("a", "b")}
    assert all(len(c) == 1 for c in colours.values()) and colours["a"] != colours["b"], colours


# --- --to pygt: PyG Temporal's cells with the trained weights --------------------------------------------------


def _symmetric_data(root, T=6, N=11):
    """Undirected random snapshots (PyG's ChebConv equals hpcdgnn's on symmetric A_t), with degree features."""
    rng = np.random.default_rng(4)
    snaps = (RawSnapshot(rng.integers(0, N, 20), rng.integers(0, N, 20)) for _ in range(T))
    write_dataset(root, snaps, num_vertices=N, directed=False)
    return root


@pytest.mark.parametrize("model", ["gconv_gru", "gconv_lstm", "tgcn_cell"])
def test_pygt_cells_with_the_exported_weights_give_the_embedded_z(tmp_path, model):
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.shard_reader import ShardReader
    from hpcdgnn.data.snapshot import csr_rows
    from hpcdgnn.embed import read_embeddings
    from hpcdgnn.metrics.export import load_pygt
    from tests.nn.test_graph_rnn import _pygt

    _pygt()  # skips without PyG Temporal (never a dependency)
    data = _symmetric_data(tmp_path / "data")
    run = _train(tmp_path, data, model={"name": model, "layers": 2, "hidden": 5,
                                        **({} if model == "tgcn_cell" else {"order": 3})})
    for args in (["export", run, "--model-only", tmp_path / "cells.pt", "--to", "pygt"],
                 ["embed", run, "--split", "all", "--output", tmp_path / "z.npz"]):
        proc = run_in_process([str(a) for a in args], mpi_env(), tmp_path)
        assert proc.returncode == 0, proc.stderr
    cells, z = load_pygt(tmp_path / "cells.pt"), read_embeddings(tmp_path / "z.npz")
    m = load_manifest(data)
    dt = torch.float64
    state = [(torch.zeros(m.num_vertices, 5, dtype=dt),) * 2 for _ in cells]  # PyGT's None state is float32
    zs = []
    with ShardReader(str(data), m) as reader, torch.no_grad():
        for t in range(m.num_snapshots):
            s = reader.read(t)
            rows, cols = csr_rows(s.indptr), s.indices.astype(np.int64)
            keep = rows != cols  # hpcdgnn's A_t: row u sums over its out-edges, PyG into edge_index[1]
            ei = torch.from_numpy(np.stack([cols[keep], rows[keep]]))
            ew = torch.from_numpy(s.weights[keep].astype(np.float64))
            h = torch.from_numpy(s.x).to(dt)
            for li, cell in enumerate(cells):
                hs, cs = state[li]
                state[li] = cell(h, ei, ew, hs, cs) if model == "gconv_lstm" else (cell(h, ei, ew, hs), cs)
                h = state[li][0]
            zs.append(h)
    theirs = torch.stack(zs)[z.steps.tolist()].numpy()
    np.testing.assert_allclose(theirs, z.embeddings, rtol=0, atol=1e-12)


def test_to_pygt_refuses_a_model_without_a_pygt_cell(tmp_path, small_dataset):
    run = _train(tmp_path, small_dataset)
    proc = run_in_process(["export", str(run), "--model-only", str(tmp_path / "x.pt"), "--to", "pygt"], mpi_env(),
                          tmp_path)
    assert proc.returncode == 2 and "model.name: cdgcn has no PyG Temporal cell" in proc.stderr, proc.stderr
    assert not (tmp_path / "x.pt").exists()
    proc = run_in_process(["export", str(run), "--csv", str(tmp_path / "m.csv"), "--to", "pygt"], mpi_env(), tmp_path)
    assert proc.returncode == 2 and "--to pygt: give --model-only FILE" in proc.stderr, proc.stderr
    assert not (tmp_path / "m.csv").exists()


def test_every_output_is_checked_before_any_is_written(tmp_path, small_dataset):
    """A TGN run has no ``layers`` (``--to pygt`` crashed on it), and a refused --model-only (the --csv path again,
    an existing file, a model without PyG cells) came after the CSV was written: now one line and no file."""
    tgn = _train(tmp_path, _event_data(tmp_path / "events"), name="tgn", train={"epochs": 1},
                 model={"name": "tgn", "hidden": 8, "heads": 2, "memory_dim": 8, "time_dim": 4, "neighbors": 4},
                 task={"name": "temporal_link_prediction", "batch_events": 100, "eval_negatives": 4},
                 strategy={"name": "memory"})
    existing = tmp_path / "mine.pt"
    existing.write_text("the user's own file\n")
    out = tmp_path / "out"
    out.mkdir()
    for args, words in [
        (["--model-only", out / "x.pt", "--to", "pygt"], "model.name: tgn has no PyG Temporal cell"),
        (["--csv", out / "m.csv", "--model-only", out / "x.pt", "--to", "pygt"], "model.name: tgn has no PyG"),
        (["--csv", out / "same.x", "--model-only", out / "same.x"], "are the same path"),
        (["--csv", out / "m.csv", "--tensorboard", out / "m.csv"], "are the same path"),
        (["--csv", out / "m.csv", "--model-only", existing], "mine.pt: exists; an export never overwrites"),
    ]:
        proc = run_in_process(["export", str(tgn), *map(str, args)], mpi_env(), tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and words in lines[0], (args, proc.stderr)
        assert not any(out.iterdir()), (args, list(out.iterdir()))
    assert existing.read_text() == "the user's own file\n"


@pytest.mark.mpi
def test_export_and_report_under_mpirun_write_once(tmp_path, small_dataset, launcher):
    """``mpirun -np 2 python -m hpcdgnn export RUNDIR --csv FILE`` (a job script's ``srun``): each rank wrote FILE,
    the second refused ("exists", exit 2) after the first had written it; ``report`` raced on its PNGs. Rank 0
    now writes, the others wait for its word: one line, exit 0; a refusal is still every rank's, exit 2."""
    run = _train(tmp_path, small_dataset, train={"epochs": 1})
    export = ["-m", "hpcdgnn", "export", str(run), "--csv", str(tmp_path / "m.csv")]
    proc = launcher.run(2, export, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("m.csv: 1 epoch x") == 1 and "exists" not in proc.stderr
    again = launcher.run(2, export, timeout=120, cwd=tmp_path)
    assert again.returncode == 2 and "exists; an export never overwrites" in again.stderr
    proc = launcher.run(2, ["-m", "hpcdgnn", "report", str(run), "--out", str(tmp_path / "rep")], timeout=120,
                        cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.count("curves.png") == 1, proc.stdout + proc.stderr[-2000:]


def test_an_export_never_replaces_a_file_that_appeared_while_it_wrote(tmp_path):
    """The export checked that its path was free, wrote a temporary, then renamed it over the path: a file made
    there in between (another export to the same name, the user's own) was replaced. Now the rename refuses it:
    the same one line as a file there before, exit 2, the file kept, no temporary left."""
    from hpcdgnn.errors import ConfigError
    from hpcdgnn.metrics.export import _write_new

    out = tmp_path / "model.pt"

    def write(f) -> None:
        f.write(b"the export")
        out.write_text("the user's own file\n")  # made between the check and the rename

    with pytest.raises(ConfigError) as e:
        _write_new(out, "--model-only", write)
    assert str(e.value) == f"--model-only {out}: exists; an export never overwrites a file (give a new path)"
    assert out.read_text() == "the user's own file\n" and list(tmp_path.iterdir()) == [out]


def test_an_export_reaches_the_disk_before_its_name(tmp_path, monkeypatch):
    """A file renamed into place before its data reached the disk can be empty after a crash: synced first."""
    from hpcdgnn.metrics.export import write_csv
    from tests.synced import SyncLog

    log = SyncLog(monkeypatch)
    write_csv([{"epoch": 1, "loss": 0.5}], tmp_path / "m.csv")
    assert log.durable(tmp_path / "m.csv") == ""
