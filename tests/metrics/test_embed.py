"""``python -m hpcdgnn embed`` and ``predict``: Z_t of a trained run, the same file at P = 1 and P = 3, metrics that
are the trainer's own and that the saved head recomputes from the file; pairs and node targets scored; bad input
one line, nothing written."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil

import numpy as np
import pytest
import torch

import hpcdgnn
from hpcdgnn.comm import Communicator
from hpcdgnn.embed import read_embeddings, score_embeddings
from tests.conftest import mpi_env, read_metrics, run_in_process, write_job
from tests.metrics.test_export import _event_data, _regression_data


def _cli(tmp_path, *args):
    return run_in_process([str(a) for a in args], mpi_env(), tmp_path)


def _train(tmp_path, data, name, **sections):
    job = write_job(tmp_path / f"{name}.yaml", data, train={"epochs": 2}, **sections)
    proc = _cli(tmp_path, "run", job, "--output", tmp_path / name)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / name


_TGN = {"model": {"name": "tgn", "hidden": 8, "heads": 2, "memory_dim": 8, "time_dim": 4, "neighbors": 4},
        "task": {"name": "temporal_link_prediction", "batch_events": 100, "eval_negatives": 4},
        "strategy": {"name": "memory"}}


def _close(a: dict, b: dict, keys) -> None:
    for k in keys:
        assert a[k] == pytest.approx(b[k], rel=1e-12, abs=1e-12), k


@pytest.mark.mpi
def test_embed_and_predict_write_the_same_at_p1_and_p3_and_the_trainers_metrics(tmp_path, small_dataset,
                                                                                 launcher):
    full = _train(tmp_path, small_dataset, "full")
    vertex = _train(tmp_path, small_dataset, "vertex", strategy={"name": "vertex"})
    seq = _train(tmp_path, small_dataset, "seq", strategy={"name": "sequences", "window": 2})
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("# u, v, t\n0,1,5\n3 9 2\n22,0,5\n")
    tgn = write_job(tmp_path / "tgn.yaml", _event_data(tmp_path / "events"), train={"epochs": 2}, **_TGN)

    def commands(p: int) -> list[list[str]]:
        return [[str(a) for a in args] for args in (
            ["embed", full, "--split", "all", "--output", tmp_path / f"full{p}.h5"],
            ["embed", vertex, "--output", tmp_path / f"vertex{p}.npz"],
            ["embed", seq, "--output", tmp_path / f"seq{p}.npz"],
            ["predict", full, "--pairs", pairs, "--output", tmp_path / f"scores{p}.csv"],
            # the event regime: trained on p ranks (i = p), every vertex's z at the end of each split
            ["run", tgn, "--set", f"strategy.minibatch={p}", "--output", tmp_path / f"tgn{p}"],
            ["embed", tmp_path / f"tgn{p}", "--split", "all", "--output", tmp_path / f"tgn{p}.h5"])]

    # another full-timeline strategy of the same model computes the same Z_t
    switched = ["embed", vertex, "--set", "strategy.name=snapshot", "--output", tmp_path / "switched.npz"]
    for args in [*commands(1), switched]:
        proc = _cli(tmp_path, *args)
        assert proc.returncode == 0, (args, proc.stderr)
    for proc in launcher.run_many(3, commands(3), cwd=tmp_path):
        assert proc.returncode == 0, proc.stderr

    for name, ext in (("full", "h5"), ("vertex", "npz"), ("seq", "npz"), ("tgn", "h5")):
        a, b = read_embeddings(tmp_path / f"{name}1.{ext}"), read_embeddings(tmp_path / f"{name}3.{ext}")
        assert a.embeddings.dtype == np.float64 and a.computed.all() and b.computed.all()
        np.testing.assert_array_equal(a.steps, b.steps)
        np.testing.assert_allclose(b.embeddings, a.embeddings, rtol=0, atol=1e-12)
        assert (a.meta["ranks"], b.meta["ranks"]) == (1, 3)
    np.testing.assert_allclose(read_embeddings(tmp_path / "switched.npz").embeddings,
                               read_embeddings(tmp_path / "vertex1.npz").embeddings, rtol=0, atol=1e-12)
    z = read_embeddings(tmp_path / "full1.h5")
    assert z.steps.tolist() == list(range(6)) and z.embeddings.shape == (6, 23, 6)  # T = 7: Z_6 scores nothing

    # a full-batch strategy's metrics come in the next epoch's forward: a resumed epoch 3 prints them
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    proc = _cli(tmp_path, "run", "--resume", resumed, "--set", "train.epochs=3")
    assert proc.returncode == 0, proc.stderr
    assert z.meta["draw_epoch"] == 3 and z.meta["checkpoint_epoch"] == 2
    _close(z.meta["metrics"], read_metrics(resumed)[-1], ["val_auc", "val_loss", "test_auc", "test_loss"])
    # and the saved decoder recomputes them from the written Z_t
    comm = Communicator.start(60)
    _close(score_embeddings(full, tmp_path / "full1.h5", comm), z.meta["metrics"], ["test_auc", "test_loss"])
    # sequences: the evaluation pass after the last update, summary.json's final figures
    s = read_embeddings(tmp_path / "seq1.npz")
    final = json.loads((seq / "summary.json").read_text())["final"]
    _close(s.meta["metrics"], final, ["test_auc", "test_loss"])
    assert s.steps.tolist() == [5]

    # TGN: steps are the ends of train, val, test; the evaluation pass after the last update, so summary's metrics
    e = read_embeddings(tmp_path / "tgn3.h5")
    assert e.steps.tolist() == [0, 1, 2] and e.embeddings.shape[::2] == (3, 8) and e.computed.all()
    _close(e.meta["metrics"], json.loads((tmp_path / "tgn3" / "summary.json").read_text())["final"],
           ["val_mrr", "test_mrr", "test_ap"])
    # its node memory lives on the run's ranks
    proc = _cli(tmp_path, "embed", tmp_path / "tgn3", "--output", tmp_path / "tgn-p1.h5")
    assert proc.returncode == 2 and "keeps state per rank; launch embed on the run's 3 ranks" in proc.stderr

    # predict: σ(decoder(z_u, z_v)) of Z_t, the same at P = 1 and 3
    rows = [list(csv.DictReader(open(tmp_path / f"scores{p}.csv"))) for p in (1, 3)]
    assert rows[0] == rows[1] and [(r["u"], r["v"], r["t"]) for r in rows[0]] == [("0", "1", "5"), ("3", "9", "2"),
                                                                                  ("22", "0", "5")]
    decoder = hpcdgnn.load_run(full).task.decoder
    step = {int(t): k for k, t in enumerate(z.steps)}
    for r in rows[0]:
        zt = torch.from_numpy(z.embeddings[step[int(r["t"])]])
        with torch.no_grad():
            want = torch.sigmoid(decoder(zt, torch.tensor([int(r["u"])]), torch.tensor([int(r["v"])])))
        assert float(r["score"]) == pytest.approx(float(want), rel=1e-12)


@pytest.mark.parametrize("task", ["node_classification", "regression"])
def test_predict_applies_the_trained_head_to_the_embedded_rows(tmp_path, small_dataset, task):
    if task == "regression":
        run = _train(tmp_path, _regression_data(tmp_path / "reg"), "run", model={"name": "tgcn"},
                     task={"name": task})
    else:
        run = _train(tmp_path, small_dataset, "run", task={"name": task})
    for args in (["embed", run, "--output", tmp_path / "z.npz"],
                 ["predict", run, "--split", "test", "--output", tmp_path / "p.h5"]):
        proc = _cli(tmp_path, *args)
        assert proc.returncode == 0, proc.stderr
    z, p = read_embeddings(tmp_path / "z.npz"), read_embeddings(tmp_path / "p.h5")
    with torch.no_grad():
        out = hpcdgnn.load_run(run).task.head(torch.from_numpy(z.embeddings))
    want = (torch.softmax(out, -1) if task == "node_classification" else out).numpy()
    np.testing.assert_allclose(p.embeddings, want, rtol=1e-12)
    if task == "node_classification":  # probabilities
        np.testing.assert_allclose(p.embeddings.sum(-1), 1.0, rtol=1e-12)
    assert p.meta["metrics"] == z.meta["metrics"]


def test_embed_and_predict_refuse_in_one_line_and_write_nothing(tmp_path, small_dataset):
    run = _train(tmp_path, small_dataset, "full")
    events = _train(tmp_path, _event_data(tmp_path / "events"), "tgn", **_TGN)
    (tmp_path / "empty").mkdir()
    no_ckpt = tmp_path / "no-ckpt"
    shutil.copytree(run, no_ckpt, ignore=shutil.ignore_patterns("checkpoints"))
    exists = tmp_path / "exists.h5"
    exists.write_text("mine")
    pairs = tmp_path / "pairs.csv"
    cases = [
        (["embed", tmp_path / "empty", "--output", tmp_path / "a.h5"], "not a run directory"),
        (["embed", no_ckpt, "--output", tmp_path / "a.h5"], "no complete checkpoint"),
        (["embed", run, "--output", exists], "exists; nothing is overwritten"),
        (["embed", run, "--output", tmp_path / "a.txt"], "give a file ending in"),
        (["predict", events, "--split", "test", "--output", tmp_path / "a.h5"], "predict does not serve it"),
        (["embed", run, "--set", "strategy.name=sequences", "--split", "train", "--output", tmp_path / "a.h5"],
         "--split train: strategy sequences computes Z_t of the val and test steps only"),
        (["predict", run, "--split", "test", "--output", tmp_path / "a.csv"],
         "scores pairs (rows u, v, t): give --pairs FILE; only node tasks take --split"),
        (["predict", run, "--pairs", pairs, "--output", tmp_path / "a.csv"], "unreadable"),
        (["embed", run, "--output", tmp_path / "a.npz"], "a.npz.tmp exists"),
        # the node memory and its partition are the run's own: another i x j x k cannot restore them
        (["embed", events, "--set", "strategy.minibatch=2", "--split", "test", "--output", tmp_path / "a.h5"],
         "--set strategy.minibatch: strategy memory keeps state per rank for the run's own strategy options"),
        # the checkpoint's parameters are the run's model's: said so, not "checkpoint does not fit"
        (["embed", run, "--set", "model.hidden=8", "--output", tmp_path / "a.h5"],
         "--set model.hidden: is 8 but the run in"),
        (["predict", events, "--set", "model.memory_dim=3", "--split", "test", "--output", tmp_path / "a.csv"],
         "predict uses the run's trained model and task head: model.*, task.name, task.decoder_hidden and train.lr"),
        # the restored optimizer state holds the run's lr: said so, not "checkpoint does not fit this model"
        (["embed", run, "--set", "train.lr=5", "--output", tmp_path / "a.h5"], "--set train.lr: is 5.0 but the run in"),
    ]
    (tmp_path / "a.npz.tmp").write_text("another writer's")
    for text, want in (("0,1\n", "three columns"), ("0,1,7\n", "t = 7 is outside 0 .. 6"),
                       ("0,23,1\n", "v = 23 is outside 0 .. 22"), ("0,1.5,1\n", "must be integers"),
                       ("", "no (u, v, t) rows"), ("# u, v, t\n", "no (u, v, t) rows")):  # numpy warned on these
        cases.append((["predict", run, "--pairs", pairs, "--output", tmp_path / "a.csv"], want, text))
    # --split is the node tasks' (a pair's row names its t): with --pairs refused, not ignored
    cases.append((["predict", run, "--pairs", pairs, "--split", "all", "--output", tmp_path / "a.csv"],
                  "--split all: only node tasks take it", "0,1,5\n"))
    for case in cases:
        args, want = case[:2]
        if len(case) == 3:
            pairs.write_text(case[2])
        proc = _cli(tmp_path, *args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and want in lines[0], (args, proc.stderr)
    assert exists.read_text() == "mine"
    assert (tmp_path / "a.npz.tmp").read_text() == "another writer's"
    assert sorted(p.name for p in tmp_path.glob("a.*")) == ["a.npz.tmp"]


def test_the_metric_line_writes_an_empty_split_as_run_does():
    """``embed``/``predict`` print a split without examples as '-' (as ``run``'s epoch line), not ``nan``."""
    from hpcdgnn.embed import _metric_line

    metrics = {"val_loss": 0.5, "val_auc": 0.75, "test_loss": float("nan"), "test_auc": None}
    assert _metric_line(metrics, "all") == "val_loss 0.5000, val_auc 0.7500, test_loss -, test_auc -"
    assert _metric_line(metrics, "test") == "test_loss -, test_auc -"


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_the_metadata_is_strict_json(tmp_path, fmt):
    """An empty split's metric (NaN) is written as null, as in metrics.jsonl: bare NaN is no JSON."""
    import json

    from hpcdgnn.embed import _Writer

    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the metadata"))

    w = _Writer(str(tmp_path / f"z.{fmt}"), fmt, 1)
    w.add(np.zeros((2, 3), np.float32), np.ones(2, bool))
    w.close([0], {"metrics": {"val_loss": float("nan"), "test_auc": 0.5}})
    if fmt == "npz":
        text = str(np.load(tmp_path / "z.npz")["meta"])
    else:
        import h5py

        with h5py.File(tmp_path / "z.h5") as f:
            text = f.attrs["meta"]
    assert strict(text)["metrics"] == {"val_loss": None, "test_auc": 0.5}


@pytest.mark.parametrize("suffix", ["h5", "npz"])
def test_an_embedding_file_larger_than_the_free_space_is_refused_before_it_is_written(tmp_path, small_dataset,
                                                                                      monkeypatch, suffix):
    """HDF5 meeting a full disk part way through printed a dozen 'Exception ignored' tracebacks and could crash
    the process at its exit (139): a file larger than the free space is now one line before anything is written."""
    run = _train(tmp_path, small_dataset, "full")
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    proc = _cli(tmp_path, "embed", run, "--output", tmp_path / f"z.{suffix}")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"z.{suffix}: the file needs about" in lines[0] and "has 1000 B free; nothing was written" in lines[0]
    assert not list(tmp_path.glob("z.*"))


def test_the_predict_command_keeps_the_scores_on_rank_0(tmp_path, small_dataset, monkeypatch):
    """The command broadcast the pairs' scores to every rank once rank 0 had written them, though only the Python
    API hands them out: the command sends them nowhere now, the API on every rank still returns them."""
    run = _train(tmp_path, small_dataset, "full")
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("0,1,5\n3,9,2\n22,0,5\n")
    sent = []
    bcast = Communicator.bcast_

    def recorded(self, tensor, *args, **kwargs):
        sent.append((tuple(tensor.shape), tensor.dtype))
        return bcast(self, tensor, *args, **kwargs)

    monkeypatch.setattr(Communicator, "bcast_", recorded)
    proc = _cli(tmp_path, "predict", run, "--pairs", pairs, "--output", tmp_path / "scores.csv")
    assert proc.returncode == 0, proc.stderr
    assert ((3,), torch.float64) not in sent, sent
    with open(tmp_path / "scores.csv") as f:
        written = [float(r["score"]) for r in csv.DictReader(f)]
    scores = hpcdgnn.load_run(run).predict(pairs=pairs)
    assert ((3,), torch.float64) in sent, sent  # what the API returns on every rank
    np.testing.assert_array_equal(scores, written)


def test_a_stop_s_speaker_removes_or_names_rank_0_s_temporary(tmp_path):
    """Where rank 0 never answered a stop (its main thread held the GIL), its temporary file stayed and the next
    embed to the same --output refused; the rank that speaks for the stop removes it where it sees it, keeps a file
    rank 0 renamed complete, and else names where the temporary may remain. The next embed's refusal names it."""
    from hpcdgnn.embed import _new_file, _new_pass, _temporary, left_by_rank_0
    from hpcdgnn.errors import ConfigError

    out = tmp_path / "z.h5"
    tmp = _temporary(out)
    _new_pass(None)
    assert left_by_rank_0(None) == (None, None)  # no pass here: nothing to look for
    _new_pass(str(out))
    tmp.write_text("rank 0's")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp} exists: an embed or predict is writing it, or one "
                                                    "that was stopped left it; remove it")):
        _new_file(str(out), {".h5": "hdf5"})
    # rank 0 never said it made it (another embed's, which rank 0 was about to refuse): named, kept
    assert left_by_rank_0("node7") == (None, f"{tmp} may remain on node7, rank 0's node: remove it before writing "
                                             f"{out} again") and tmp.exists()
    assert left_by_rank_0("node7", os.stat(tmp).st_ino + 1) == (None, f"{tmp} may remain on node7, rank 0's node: "
                                                                      f"remove it before writing {out} again")
    assert left_by_rank_0("node7", os.stat(tmp).st_ino) == (None, None) and not tmp.exists()  # shared file system
    assert left_by_rank_0(None) == (None, None)  # rank 0's node: none there
    assert left_by_rank_0("node7") == (None, f"{tmp} may remain on node7, rank 0's node: remove it before writing "
                                             f"{out} again")
    out.write_text("complete")
    assert left_by_rank_0(None) == (out, None)  # renamed into place while the stop waited


@pytest.mark.parametrize("command", ["embed", "predict"])
def test_a_stop_in_a_second_call_s_start_up_names_no_earlier_file(tmp_path, small_dataset, monkeypatch, command):
    """``main`` called twice in one process: SIGTERM during the second call's start-up was answered "came after
    <the first call's file> was written; the file is complete", exit 0, as if the second had written it. It is
    the second's own stop now: nothing written, exit 130."""
    import os
    import signal
    import time

    from hpcdgnn.train import collective

    run = _train(tmp_path, small_dataset, "full")
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("0,1,5\n3,9,2\n")
    extra = ["--pairs", pairs] if command == "predict" else []
    ext = "csv" if command == "predict" else "npz"
    first = _cli(tmp_path, command, run, *extra, "--output", tmp_path / f"first.{ext}")
    assert first.returncode == 0 and (tmp_path / f"first.{ext}").is_file(), first.stderr
    agree_start = collective.agree_start

    def stopped(comm):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # the handler runs in here, whichever thread took the signal
        agree_start(comm)

    monkeypatch.setattr(collective, "agree_start", stopped)
    second = _cli(tmp_path, command, run, *extra, "--output", tmp_path / f"second.{ext}")
    assert (second.returncode, second.stderr.strip()) == (
        130, f"hpcdgnn: {command}: stopped by SIGTERM; nothing it was writing is left")
    assert not list(tmp_path.glob("second*")) and (tmp_path / f"first.{ext}").is_file()
