"""strategy: sequences (ReInc R1 + R4): P-invariant mini-batches of sampled sequences, both placements,
every task, the sampled aggregation, and the bad-input errors."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch

from hpcdgnn.ops.sparse import gcn_norm
from hpcdgnn.strategies.sample_layout import own_columns
from tests.conftest import make_dataset, write_job
from tests.tasks.test_regression import chickenpox  # noqa: F401 (a fixture: a cut of chickenpox with targets)
from tests.train.test_exactness import _losses, _losses_many

SEQ = {"name": "sequences", "window": 3, "batch_vertices": 8, "fanouts": [3, 2]}


@pytest.mark.quick(strategy="sequences")  # the sequences strategy's case in the quick subset
def test_link_prediction_p3_reproduces_one_rank(launcher, small_dataset, tmp_path):
    """T = 7, N = 23 (neither divisible by 3), node batches of 8 (the last one short), sampled
    neighbours: one rank and 3 ranks give the same losses and gradient norms (float64); and
    with ``overlap`` placement nothing but the gradient and the batch counts moves."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn"}, strategy=SEQ)
    ref, recs1 = _losses(launcher, None, job, tmp_path / "p1")
    assert np.all(np.isfinite(ref)) and ref[0, 0] != ref[-1, 0]
    assert recs1[-1]["val_auc"] == recs1[-1]["val_auc"]  # the evaluation pass ran (not NaN)
    for P in (3,):  # an odd count (2 is covered by the P = 2 runs of the other strategies' machinery)
        got, recs = _losses(launcher, P, job, tmp_path / f"p{P}")
        np.testing.assert_allclose(got, ref, rtol=1e-9, err_msg=f"P={P}")
        assert recs[-1]["val_auc"] == pytest.approx(recs1[-1]["val_auc"], rel=1e-9)
        assert set(recs[-1]["bytes_by_tag"]) <= {"grad_allreduce", "batch"}, recs[-1]["bytes_by_tag"]


def test_attention_over_sampled_blocks_p3_reproduces_one_rank(launcher, small_dataset, tmp_path):
    """DySAT's structural attention reads each output row's own vertex among a sampled block's columns (not the
    first rows, as in a whole snapshot): node batches of 8 with sampled neighbours train, and 3 ranks give one
    rank's losses (float64)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "dysat"}, strategy=SEQ)
    ref, _ = _losses(launcher, None, job, tmp_path / "p1")
    assert np.all(np.isfinite(ref)) and ref[0, 0] != ref[-1, 0]
    got, _ = _losses(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-9)


def test_fetch_placement_moves_snapshots_and_changes_nothing(launcher, small_dataset, tmp_path):
    """``fetch`` reads only a rank's block and pulls the window's other snapshots each epoch (bytes
    counted); the losses are those of ``overlap``. The fetch's seconds are communication, counted once in the
    time split (not as *load* too, which took them off *compute*). node_first orders samples differently, still
    P-invariant."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn"}, strategy=SEQ)
    node_first = ("strategy.order=node_first", "strategy.batch_samples=3")
    (ref, _), (got, recs), (three, _) = _losses_many(launcher, 3, [
        (job, tmp_path / "overlap", ()), (job, tmp_path / "fetch", ("strategy.placement=fetch",)),
        (job, tmp_path / "nf3", node_first)])
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    assert all(r["bytes_by_tag"].get("placement.fetch", 0) > 0 for r in recs)
    assert all(r["comm_by_tag"]["placement.fetch"]["seconds"] > 0 for r in recs)
    assert all(load == 0.0 for r in recs for load in r["per_rank"]["load"]), [r["per_rank"]["load"] for r in recs]
    one, _ = _losses(launcher, None, job, tmp_path / "nf1", *node_first)
    np.testing.assert_allclose(three, one, rtol=1e-9)
    assert not np.allclose(one, ref, rtol=1e-6)  # a different order of optimizer steps


def test_incremental_input_aggregation_changes_nothing(launcher, small_dataset, tmp_path):
    """R2: with full neighbourhoods the first layer reads Ã_t·X_t precomputed incrementally (ReInc Eq. 2)
    or from scratch: the same losses (float64), and the work is reported."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn"},
                    strategy={**SEQ, "fanouts": [3, 0]})
    on, recs = _losses(launcher, None, job, tmp_path / "on")
    off, recs_off = _losses(launcher, None, job, tmp_path / "off", "strategy.incremental=off")
    np.testing.assert_allclose(on, off, rtol=1e-10)
    inc = recs[-1]["incremental"]
    assert inc["mode"] == "on" and inc["rows_recomputed"] + inc["rows_updated"] + inc["rows_untouched"] > 0
    assert recs_off[-1]["incremental"]["mode"] == "off"
    sampled, _ = _losses(launcher, None, job, tmp_path / "sampled", "strategy.fanouts=[3,2]")
    assert not np.allclose(sampled, on, rtol=1e-6)  # the precomputed path is not the sampled one


@pytest.mark.parametrize("task", ["node_classification", "regression"])
def test_node_tasks_p3_reproduce_one_rank(launcher, small_dataset, chickenpox, tmp_path, task):  # noqa: F811
    data = small_dataset if task == "node_classification" else chickenpox
    # EvolveGCN-O's weight recurrence restarts from W_0 in every window (initial_time_state)
    model = "evolvegcn_o" if task == "node_classification" else "tmgcn"
    job = write_job(tmp_path / "job.yaml", data, model={"name": model}, task={"name": task},
                    strategy={**SEQ, "fanouts": [], "stride": 2})
    ref, _ = _losses(launcher, None, job, tmp_path / "p1")
    assert ref[0, 0] != ref[-1, 0]
    got, _ = _losses(launcher, 3, job, tmp_path / "p3")
    np.testing.assert_allclose(got, ref, rtol=1e-9)


def test_full_neighbourhood_block_is_the_rows_of_a_tilde(tmp_path):
    """The sampled aggregation with every neighbour is Ã_t's rows, step by step; with k neighbours each
    row keeps its self-loop and min(k, degree) others, weighted degree / k."""
    from hpcdgnn.data.manifest import load_manifest
    from hpcdgnn.data.shard_reader import ShardReader
    from hpcdgnn.strategies.sequences import SequencesStrategy

    data = make_dataset(tmp_path / "d", T=4, N=30, m=60)
    s = SequencesStrategy.__new__(SequencesStrategy)
    s.ctx = type("C", (), {"dtype": torch.float64, "device": torch.device("cpu")})()
    man = load_manifest(data)
    with ShardReader(data, man) as reader:
        s.host = {t: s_ for t, s_ in ((t, SequencesStrategy._read(s, reader, t)[0]) for t in range(4))}
        dense = [gcn_norm(t, *(lambda x: (x.indptr, x.indices, x.weights))(reader.read(t)), torch.float64).a.to_dense()
                 for t in range(4)]
    s._fetched = {}
    rows = np.array([0, 3, 4, 17, 29])
    adj, cols = s.sampled_block(1, 4, rows, 0, np.random.default_rng(0))
    a = adj.a.to_dense()
    own = own_columns(rows, cols, 3)  # where each output row's own vertex is (what GAT's destination term reads)
    for i, t in enumerate(range(1, 4)):
        blk = a[i * 5 : (i + 1) * 5, i * len(cols) : (i + 1) * len(cols)]
        torch.testing.assert_close(blk, dense[t][rows][:, cols], rtol=0, atol=0)
        assert np.all(np.isin(np.flatnonzero(dense[t][rows].sum(0).numpy()), cols))
        for j, v in enumerate(rows):
            assert a[i * 5 + j, own[i * 5 + j]] == dense[t][v, v] != 0 and cols[own[i * 5 + j] - i * len(cols)] == v
    adj, cols = s.sampled_block(1, 4, rows, 2, np.random.default_rng(0))
    a = adj.a.to_dense()
    for i, t in enumerate(range(1, 4)):
        full = dense[t][rows]
        blk = a[i * 5 : (i + 1) * 5, i * len(cols) : (i + 1) * len(cols)]
        for j, v in enumerate(rows):
            deg = int((full[j] != 0).sum()) - 1
            kept = blk[j].nonzero().view(-1)
            assert len(kept) == min(2, deg) + 1
            assert blk[j, np.searchsorted(cols, v)] == full[j, v]  # the self-loop, unscaled
            others = [c for c in kept.tolist() if cols[c] != v]
            for c in others:
                assert blk[j, c] == pytest.approx(float(full[j, cols[c]]) * deg / min(2, deg))


@pytest.mark.parametrize(("override", "needle"), [
    ("strategy.window=9", "strategy.window: 9 snapshots, but the dataset has only T = 7"),
    # which steps train is the task's: the line says so (a forecast's horizon too), not the window alone
    ("strategy.window=6", "strategy.window: 6 with stride 1 leaves no sequence whose last step is a training step "
                          "(the training steps, set by task.split: steps 0..3 of T = 7)"),
    ("strategy.fanouts=[3]", "strategy.fanouts: 1 values for model.layers: 2"),
    ("strategy.fanouts=[3,0] strategy.cache_mb=0.0001", "strategy.cache_mb: 0.0001 MiB cannot hold one snapshot's"),
    ("strategy.batch_vertices=24", "strategy.batch_vertices: 24, but the dataset "),
])
def test_bad_options_exit_2_at_p3(launcher, small_dataset, tmp_path, override, needle):
    exits_2_with_one_line(launcher, write_job(tmp_path / "job.yaml", small_dataset, strategy=SEQ), override, needle)


@pytest.mark.parametrize(("model", "cache_mb", "needle"), [
    ({"name": "cdgcn"}, 0.0001, "input aggregation Ã_t·X_t ("),
    ({"name": "gcrn_m1", "order": 2}, 0.0001, "input basis (the first cell's convolution of X_t, "),
    ({"name": "cdgcn"}, 1.0, None),
])
def test_check_refuses_the_reuse_cache_the_run_would(small_dataset, tmp_path, capsys, model, cache_mb, needle):
    """``python -m hpcdgnn check`` refuses, with the run's own line, a reuse cache smaller than the one entry
    every sample reads (it was refused only at the run's set-up); one that holds it passes."""
    from hpcdgnn.__main__ import main

    job = write_job(tmp_path / "job.yaml", small_dataset, model=model,
                    strategy={"name": "sequences", "window": 3, "reuse": "on", "cache_mb": cache_mb})
    code = main(["check", str(job), "--ranks", "3"])
    err = capsys.readouterr().err
    if needle is None:
        assert code == 0, err
        return
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert code == 2 and len(lines) == 1, err
    assert f"{job}: strategy.cache_mb: {cache_mb:g} MiB cannot hold one snapshot's {needle}" in lines[0], lines


@pytest.mark.parametrize(("sets", "needle"), [
    (["strategy.batch_vertices=24"], "strategy.batch_vertices: 24, but the dataset {data} has N = 23 vertices; "
                                     "choose at most 23 (0 = all of them)"),
    (["strategy.batch_samples=7"], "strategy.batch_samples: 7, but an epoch has only 6 training samples (2 training "
                                   "sequences × 3 node batches of strategy.batch_vertices: 8); choose at most 6"),
    (["strategy.batch_vertices=23", "strategy.batch_samples=2"], None),
    (["strategy.batch_samples=6"], None),
])
def test_batch_sizes_beyond_the_data_are_refused(small_dataset, tmp_path, capsys, sets, needle):
    """``batch_vertices`` above N (one batch of every vertex, as 0) and ``batch_samples`` above the epoch's
    training samples (one step of them all) trained silently as the whole epoch; ``check`` (and the run's
    set-up, :func:`test_bad_options_exit_2_at_p3`) refuse them naming the key, the value and the data's size."""
    from hpcdgnn.__main__ import main

    job = write_job(tmp_path / "job.yaml", small_dataset, strategy=SEQ)
    code = main(["check", str(job), "--ranks", "3", "--set", *sets])
    err = capsys.readouterr().err
    if needle is None:
        assert code == 0, err
        return
    assert code == 2 and err.count("\n") == 1 and needle.format(data=small_dataset) in err, err


def exits_2_with_one_line(launcher, job, override: str, needle: str) -> None:
    """``job`` with ``override`` (space-separated ``--set`` items) at P = 3: exit 2, one error line with
    ``needle``, no traceback, no hang."""
    try:
        proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--set", *override.split()], timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{override}: the P = 3 run hung")
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def _sequence_job(task: str, window: int, stride: int, split=(0.7, 0.15, 0.15)):
    """What ``sequences_of`` reads of a job: the strategy's window and stride, the task's name and split."""
    from types import SimpleNamespace

    return SimpleNamespace(strategy=SimpleNamespace(window=window, stride=stride),
                           task=SimpleNamespace(name=task, split=split))


@pytest.mark.parametrize(("task", "T", "window", "stride", "expected"), [
    # node classification, T = 9: steps 0..8 split [0, 6) / [6, 8) / [8, 9); windows start 0, 2, 4, 6 and the
    # last, [6, 9), ends at the last prediction step 8 (a test step)
    ("node_classification", 9, 3, 2, [(0, 3, 0), (2, 5, 0), (4, 7, 1), (6, 9, 2)]),
    # stride 1, window 4, T = 9: windows [0, 4) .. [5, 9), scored steps 3..8
    ("node_classification", 9, 4, 1, [(0, 4, 0), (1, 5, 0), (2, 6, 0), (3, 7, 1), (4, 8, 1), (5, 9, 2)]),
    # the whole series as one window
    ("node_classification", 9, 9, 3, [(0, 9, 2)]),
    # link prediction, T = 10: steps 0..8 split [0, 6) / [6, 8) / [8, 9); the window [7, 10) scores t = 9, no
    # prediction step, so the last sequence is [6, 9)
    ("link_prediction", 10, 3, 1, [(0, 3, 0), (1, 4, 0), (2, 5, 0), (3, 6, 0), (4, 7, 1), (5, 8, 1), (6, 9, 2)]),
])
def test_sequences_of_are_every_window_up_to_the_last_step(task, T, window, stride, expected):
    """R1's sliding windows (ReInc §3.4.1), by hand: (start, stop, split) of each window whose last step is a
    prediction step, numbered in time order — the last window reaching the last prediction step included."""
    from types import SimpleNamespace

    from hpcdgnn.partition.sequences import Sequence, sequences_of

    got = sequences_of(SimpleNamespace(num_snapshots=T), _sequence_job(task, window, stride))
    assert got == [Sequence(i, a, b, s) for i, (a, b, s) in enumerate(expected)]
    assert [s.t for s in got] == [b - 1 for _, b, _ in expected]


@pytest.mark.parametrize(("order", "expected"), [
    # seq_first (ReInc §3.4.3): every training sequence for node batch 0, then for node batch 1
    ("seq_first", [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]),
    # node_first: every node batch of sequence 0, then of sequence 1, ...
    ("node_first", [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]),
])
def test_sample_order_of_each_option(order, expected):
    """R4's sample order by hand: 3 training sequences (and one validation one) × 2 node batches (N = 4, batches
    of 2); each sample is (sequence index, node batch)."""
    from types import SimpleNamespace

    from hpcdgnn.partition.sequences import Sequence
    from hpcdgnn.strategies.sequences import SequenceSamples

    s = SequenceSamples()
    s.N = 4
    s.opts = SimpleNamespace(order=order, batch_vertices=2)
    s.ctx = SimpleNamespace(job=SimpleNamespace(train=SimpleNamespace(seed=0)))
    s.seqs = [Sequence(0, 0, 3, 0), Sequence(1, 1, 4, 0), Sequence(2, 2, 5, 0), Sequence(3, 3, 6, 1)]
    assert [(q.index, b) for q, b in s._samples(0, 0)] == expected
    assert [(q.index, b) for q, b in s._samples(0, 1)] == [(3, 0), (3, 1)]  # one sequence: either order
    assert s._samples(0, 2) == []
