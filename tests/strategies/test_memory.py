"""strategy: memory (DistTGL M2) under mpirun: mini-batch parallelism is exact at i = 2, 3 (static memory
pre-training included); epoch and memory parallelism run and count their work; the node memory survives a
checkpoint bit for bit; bad layouts end every rank with one line."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import yaml

from hpcdgnn.config import load_job
from hpcdgnn.data.events import load_event_manifest, write_events
from hpcdgnn.planner.predict import plan_job
from hpcdgnn.planner.rates import MachineRates
from tests.conftest import REPO, assert_same_run, json_records, read_metrics, write_job
from tests.train.test_exactness import _losses, _losses_many

EVENTS = 1300  # train 910: batches of 100 -> 10 (the last one short), of 101 -> 9 and one of a single event


def _college(root, seconds_per_unit: float):
    """The first 1300 events of CollegeMsg (bundled in inputs/), times in ``seconds_per_unit``, 2 random edge
    features."""
    with gzip.open(REPO / "inputs" / "CollegeMsg.txt.gz", "rt") as f:
        rows = np.loadtxt(f, dtype=np.int64, max_rows=EVENTS)
    ids, inv = np.unique(rows[:, :2], return_inverse=True)
    inv = inv.reshape(-1, 2)
    t = (rows[:, 2] - rows[0, 2]) / seconds_per_unit
    feat = np.random.default_rng(0).standard_normal((EVENTS, 2)).astype(np.float32)
    write_events(root, inv[:, 0], inv[:, 1], t, feat, num_vertices=ids.shape[0], bipartite=False, num_sources=None,
                 feature_names=["f0", "f1"], original_ids=ids, shard_events=500)
    return root


@pytest.fixture(scope="module")
def college(tmp_path_factory):
    """CollegeMsg's first events, times in days."""
    return _college(tmp_path_factory.mktemp("events") / "college", 86400.0)


@pytest.fixture(scope="module")
def college_seconds(tmp_path_factory):
    """The same events in the file's raw seconds (gaps up to ~10^6 s, as every SNAP, JODIE and TGB stream)."""
    return _college(tmp_path_factory.mktemp("events") / "college-s", 1.0)


def _job(tmp_path, data, **strategy):
    return write_job(
        tmp_path / "job.yaml", data,
        model={"name": "tgn", "hidden": 8, "heads": 2, "memory_dim": 8, "time_dim": 4, "neighbors": 4},
        task={"name": "temporal_link_prediction", "batch_events": 100, "eval_negatives": 9},
        strategy={"name": "memory", **strategy}, train={"epochs": 2})


@pytest.mark.quick(strategy="memory")  # the memory strategy's case in the quick subset
def test_minibatch_parallelism_reproduces_one_rank(launcher, college, college_seconds, tmp_path):
    """i ranks splitting each batch of 100 events give one rank's losses, gradient norms, MRR and AP
    (float64, to 1e-9 over 2 epochs), with the static node memory pre-trained first; only gradients and the
    memory-order barriers cross ranks. On raw-second timestamps with the default fixed time encoding, and in
    days with TGAT's learnable one (on raw seconds its trained frequencies amplify the slices' rounding); and
    under PyG's per-batch evaluation and training protocols, whose roots do not depend on how a batch is sliced."""
    job = _job(tmp_path, college_seconds)
    # batches of 101: the last training batch holds 1 event, so at i = 2, 3 some ranks get an empty slice
    over = ("model.static_memory=on", "model.static_pretrain_epochs=1", "task.batch_events=101")
    learnable = (f"data.path={college}", "model.time_encoding=learnable", "model.time_scale=1")

    per_batch = ("task.eval_protocol=per_batch",)
    train_batch = ("task.train_protocol=per_batch",)
    event = ("model.memory_time=event", "task.eval_protocol=per_batch")  # TGN's own time term, applied eagerly

    def runs(tag, *more):
        return [(job, tmp_path / f"{tag}", (*over, *more)),
                (job, tmp_path / f"{tag}-learnable", (*over, *learnable, *more)),
                (job, tmp_path / f"{tag}-per-batch", (*over, *per_batch, *more)),
                (job, tmp_path / f"{tag}-train-per-batch", (*over, *train_batch, *more)),
                (job, tmp_path / f"{tag}-event", (*over, *event, *more))]

    refs = _losses_many(launcher, None, runs("p1"))
    # PyG's evaluation protocol ranks other views of the same negatives; training is the same
    np.testing.assert_array_equal(refs[2][0], refs[0][0])
    assert refs[2][1][-1]["test_mrr"] != refs[0][1][-1]["test_mrr"]
    # PyG's training protocol embeds other roots: other losses, exact across i all the same (below)
    assert not np.allclose(refs[3][0], refs[0][0], rtol=1e-3)
    # the event-time memory update is another model: other losses from the second batch on
    assert not np.allclose(refs[4][0], refs[2][0], rtol=1e-3)
    # the planner's inputs are what the run reports holding: the node memory (with its gaps), stream, index and
    # features
    for tag, more in (("p1", ()), ("p1-event", event)):
        one = json.loads((tmp_path / tag / "summary.json").read_text())["memory"]
        pred = plan_job(load_job(job, [*over, *more]), load_event_manifest(college_seconds), str(college_seconds),
                        [1], MachineRates())[0]
        assert pred.memory_parts["inputs"] == one["engine_bytes"][0] + one["host_payload_bytes"][0], tag
    for ref, recs1 in refs:
        assert np.all(np.isfinite(ref)) and ref[0, 0] != ref[-1, 0]
        assert 0 < recs1[-1]["val_mrr"] <= 1 and 0 < recs1[-1]["test_ap"] <= 1
        assert recs1[-1]["memory"]["train_events"] == 910
    for i in (2, 3):
        for (ref, recs1), (got, recs), name in zip(
                refs, _losses_many(launcher, i, runs(f"p{i}", f"strategy.minibatch={i}")),
                ("fixed", "learnable", "per_batch", "train_per_batch", "event"), strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-9, err_msg=f"i={i} {name}")
            for key in ("val_mrr", "test_mrr", "val_ap", "test_ap"):
                assert recs[-1][key] == pytest.approx(recs1[-1][key], rel=1e-9), (i, name, key)
            assert set(recs[-1]["bytes_by_tag"]) <= {"grad_allreduce", "memory.order", "memory.eval"}
            # the planner's prediction of the same job (hpcdgnn plan): the gradient bytes exactly, the scores to 1 %
            data = college_seconds if name == "fixed" else college
            extra = {"learnable": learnable, "per_batch": per_batch, "train_per_batch": train_batch,
                     "event": event}.get(name, ())
            more = [*over, *extra, f"strategy.minibatch={i}"]
            pred = plan_job(load_job(job, more), load_event_manifest(data), str(data), [i], MachineRates())[0]
            measured = recs[-1]["bytes_by_tag"]
            assert pred.bytes_by_tag["grad_allreduce"] == measured["grad_allreduce"], (i, name, measured)
            assert pred.bytes_by_tag["memory.eval"] == pytest.approx(measured["memory.eval"], rel=0.01)
        # the group's one node memory is counted once over ranks (every rank reported it); the float64 features
        # are each rank's own copy (float32 ones would be the node's mapped copy, counted once too)
        engine = [json.loads((d / "summary.json").read_text())["memory"]["engine_bytes"]
                  for d in (tmp_path / "p1", tmp_path / f"p{i}")]
        assert sum(engine[1]) == engine[0][0] + (i - 1) * EVENTS * 2 * 8, (i, engine)


def test_the_planner_counts_ranks_beyond_a_batch_as_waiting(college, tmp_path):
    """Ranks splitting a batch of B events: the busiest takes ⌈B / i⌉ of them, so beyond i = B the predicted
    compute stops falling (it fell as B / i, and the planner picked 64 ranks for a batch of 7 events)."""
    from hpcdgnn.partition.events import MemoryPlan
    from hpcdgnn.planner.events import _slowest_share

    plan = MemoryPlan("memory", 1, 1, 1, 1, 7, {"train": [0, 30], "val": [30, 40], "test": [40, 44]}, [[0, 5]])
    assert [_slowest_share(plan, "train", 0, 5, w) for w in (1, 2, 7, 64)] == [30, 4 * 4 + 1, 5, 5]
    assert _slowest_share(plan, "test", 0, 1, 3) == 2 and _slowest_share(plan, "val", 1, 1, 3) == 0
    job = _job(tmp_path, college)
    manifest = load_event_manifest(college)
    compute = {i: plan_job(load_job(job, ["task.batch_events=4", f"strategy.minibatch={i}"]), manifest, str(college),
                           [i], MachineRates())[0].compute_s for i in (1, 2, 4, 8)}
    assert compute[1] > compute[2] > compute[4] and compute[8] >= compute[4], compute
    notes = plan_job(load_job(job, ["task.batch_events=4", "strategy.minibatch=8"]), load_event_manifest(college),
                     str(college), [8], MachineRates())[0].notes
    assert any("minibatch = 8 ranks split a training batch of task.batch_events: 4 events, so some hold" in n
               for n in notes)
    plan.minibatch, plan.epoch = 4, 2  # what rank 0 warns at the start of such a run
    assert "4·2 ranks split an evaluation batch" in plan.waiting() and MemoryPlan(
        "memory", 1, 1, 1, 1, 1, plan.split, plan.segments).waiting() is None


def test_time_encoding_reads_the_same_in_any_unit(launcher, college, college_seconds, tmp_path):
    """``model.time_scale: auto`` counts Δt in the stream's median gap between events (the manifest's time_gap),
    so the same stream in seconds and in days trains to the same losses; with ``time_scale: 1`` it does not."""
    job = _job(tmp_path, college_seconds)
    runs = [(job, tmp_path / f"{unit}{scale}", (f"data.path={path}", f"model.time_scale={scale}"))
            for unit, path in (("s", college_seconds), ("d", college)) for scale in ("auto", 1)]
    (s_auto, _), (s_one, _), (d_auto, _), (d_one, _) = _losses_many(launcher, None, runs)
    np.testing.assert_allclose(d_auto, s_auto, rtol=1e-9)
    assert not np.allclose(d_one, s_one, rtol=1e-3)


@pytest.mark.parametrize("protocol", ["per_event", "per_batch"])
def test_event_time_evaluation_applies_each_mail_once_to_the_same_scores(college_seconds, tmp_path, monkeypatch,
                                                                        protocol):
    """Under ``model.memory_time: event`` a node's updated memory depends on its stored row alone, so evaluation
    applies each mail when it is written instead of at every read: the same MRR and AP (float64), bit for bit
    here, as updating at each read (``MemoryStrategy.eager`` off), and the training it follows is untouched."""
    import hpcdgnn
    from hpcdgnn.strategies.memory import MemoryStrategy

    job = _job(tmp_path, college_seconds)
    over = ["model.memory_time=event", f"task.eval_protocol={protocol}"]
    recs = {}
    for eager in (True, False):
        monkeypatch.setattr(MemoryStrategy, "eager", eager)
        hpcdgnn.train(job, overrides=over, output=tmp_path / f"eager-{eager}")
        recs[eager] = read_metrics(tmp_path / f"eager-{eager}")
    for a, b in zip(recs[True], recs[False], strict=True):
        assert a["loss"] == b["loss"] and a["grad_norm"] == b["grad_norm"]
        for key in ("val_mrr", "test_mrr", "val_ap", "test_ap"):
            assert a[key] == pytest.approx(b[key], rel=1e-12, abs=1e-15), key
    assert 0 < recs[True][-1]["test_mrr"] < 1


def test_slot_counts_split_roots_into_dense_and_per_slot():
    """The planner's evaluated roots: those with at least ⌈k/2⌉ real slots attend densely (``tgn.dense_min``);
    the rest are priced per slot at their own s̄."""
    from hpcdgnn.planner.events import mean_slots, slot_stats

    mean, share, part = slot_stats(np.array([0, 2, 5, 10, 10]), 10)
    assert (mean, share, part) == (pytest.approx(5.4), pytest.approx(0.6), pytest.approx(1.0))
    assert slot_stats(np.array([3, 3]), 5) == (3.0, 1.0, 0.0) and slot_stats(np.zeros(0), 5) == (0.0, 0.0, 0.0)
    # node 0 meets 1, 2, 3 in turn: at the 4th event its endpoints had 3 and 0 events before, k = 2
    src, dst, t = np.array([0, 0, 0, 0]), np.array([1, 2, 3, 4]), np.arange(4.0)
    pos, _ = mean_slots(src, dst, t, 2, 0, 5, (3, 4))
    assert pos == (1.0, 0.5, 0.0)


def test_batch_nodes_count_distinct_roots_and_their_recent_neighbours():
    """The planner's count of a batch's distinct roots and memory rows, on the stream (not as if uniform): events
    0–1 → 1, 1 → 2, then a batch of 0 → 3, 2 → 3: roots {0, 2, 3}, their latest neighbours before the batch
    add node 1 (for 0 and for 2), node 3 has none."""
    from hpcdgnn.data.temporal_neighbors import TemporalNeighbors
    from hpcdgnn.planner.events import batch_nodes

    src, dst = np.array([0, 1, 0, 2]), np.array([1, 2, 3, 3])
    index = TemporalNeighbors(src, dst, 5)
    assert batch_nodes(index, src, dst, (2, 4), 2, 0, 0, 5, 1) == (3.0, 4.0)
    assert batch_nodes(index, src, dst, (2, 4), 2, 0, 0, 5, 0) == (3.0, 3.0)  # k = 0: the roots alone
    assert batch_nodes(index, src, dst, (4, 4), 2, 0, 0, 5, 1) == (0.0, 0.0)
    # uniform negatives join the roots: 2 events × 3 draws from 5 nodes reach at most all 5
    roots, rows = batch_nodes(index, src, dst, (2, 4), 2, 3, 0, 5, 1)
    assert 3 <= roots <= 5 and roots <= rows <= 5


def test_plan_prices_the_memory_strategy(college, tmp_path, capsys):
    """``hpcdgnn plan`` on a TGN job: one priced row per P (i = P when the job's i·j·k does not multiply to it),
    the node memory, stream and index as inputs (what a run reports as engine + host bytes), no traceback."""
    from hpcdgnn.__main__ import main

    job = _job(tmp_path, college, epoch=2)
    assert main(["plan", str(job), "--ranks", "1", "2", "3"]) == 0
    out = capsys.readouterr().out
    for row in ("memory 1x1x1", "memory 1x2x1", "memory 3x1x1"):
        assert row in out, out
    # the table says what the JSON notes say (it showed none of the event regime's), the machine rates once
    row = next(ln for ln in out.splitlines() if "memory 1x2x1" in ln)
    assert "epoch and memory parallelism are approximate" in row and "default machine rates" not in row, row
    assert "rates: defaults (python -m hpcdgnn calibrate measures this machine's)" in out.splitlines()[0]
    pred = plan_job(load_job(job, []), load_event_manifest(college), str(college), [1], MachineRates())[0]
    m = load_event_manifest(college)
    node_memory = m.num_vertices * (8 + 2 * 8 + 2) * 8 + m.num_vertices * 8
    stream = m.num_events * (24 + 2 * 8)
    assert pred.memory_parts["inputs"] > node_memory + stream and pred.fits and pred.epoch_s > 0
    # memory updates: 1 + s̄ per root where each root has its own time; else the slice's distinct nodes, fewer
    assert "1 + s̄" in pred.notes[0]
    for over in ("model.memory_time=event", "task.train_protocol=per_batch"):
        other = plan_job(load_job(job, [over]), m, str(college), [1], MachineRates())[0]
        assert "distinct nodes" in other.notes[0] and other.compute_s < pred.compute_s, over
    # a budget that nothing fits names TGN's widths, not a GCN's layers
    assert main(["plan", str(job), "--ranks", "1", "--memory-per-rank", "1KiB"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "lower model.memory_dim, model.hidden, model.time_dim" in err[0], err
    assert "model.layers" not in err[0]


@pytest.mark.parametrize("protocol", ["per_event", "per_batch"])
def test_planned_peak_counts_evaluation_and_is_above_the_refusal_bound(college, tmp_path, protocol):
    """Evaluation holds no autograd state but a whole slice of (2 + eval_negatives) roots an event: the planner's
    activations grow with ``task.eval_negatives`` once they outweigh training's, say so in a note, and stay at
    or above the lower bound ``check`` refuses a job by (``tgn batch``), which once exceeded the planned peak."""
    from hpcdgnn.regimes.events import footprint

    job, m = _job(tmp_path, college), load_event_manifest(college)
    peaks = []
    for negs in (1, 99, 250):
        over = [f"task.eval_negatives={negs}", f"task.train_protocol={protocol}", f"task.eval_protocol={protocol}"]
        loaded = load_job(job, over)
        pred = plan_job(loaded, m, str(college), [1], MachineRates())[0]
        assert pred.memory_parts["activations"] >= footprint(loaded, m, 1)["tgn batch"][0], (negs, pred.memory_parts)
        peaks.append(pred.memory_parts["activations"])
        assert negs < 250 or any("task.eval_negatives" in note for note in pred.notes), pred.notes
    assert peaks[0] < peaks[1] < peaks[2]


@pytest.mark.parametrize(("over", "words"), [
    ("model.time_scale=-1", "model.time_scale: must be auto or a positive number"),
    ("model.time_scale=0", "model.time_scale: must be auto or a positive number"),
    ("model.time_encoding=trained", "model.time_encoding: 'trained' is not allowed; choose from fixed, learnable"),
])
def test_bad_time_encoding_keys_are_one_line(college, tmp_path, capsys, over, words):
    """The time encoding's keys are checked before anything runs: one line naming the key, exit 2."""
    from hpcdgnn.__main__ import main

    assert main(["check", str(_job(tmp_path, college)), "--ranks", "1", "--set", over]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and words in err[0], err


def test_resolved_job_shows_no_task_split_the_event_stream_does_not_use(college, tmp_path, capsys):
    """An event stream's split is the one ``prepare --kind events --split`` cut (the manifest's): the resolved job
    (``config.resolved.yaml``, ``check``, ``summary.json``) leaves ``task.split`` out instead of showing the default
    0.7/0.15/0.15 as if the run had used it, and reads back to the same job; a split that was given stays, and
    the run refuses it in one line. Snapshot tasks keep theirs."""
    from hpcdgnn.__main__ import main
    from hpcdgnn.config import job_to_dict

    path = _job(tmp_path, college)
    job = load_job(path)
    resolved = job_to_dict(job)
    assert "split" not in resolved["task"], resolved["task"]
    again = tmp_path / "resolved.yaml"
    again.write_text(json.dumps(resolved))
    assert load_job(again) == job
    given = load_job(path, ["task.split=[0.5, 0.25, 0.25]"])
    assert job_to_dict(given)["task"]["split"] == [0.5, 0.25, 0.25]
    assert main(["check", str(path), "--ranks", "1", "--set", "task.split=[0.5, 0.25, 0.25]"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "task.split: an event stream's split is the dataset's" in err[0], err
    snapshots = load_job(write_job(tmp_path / "snapshots.yaml", college), check_paths=False)
    assert job_to_dict(snapshots)["task"]["split"] == [0.7, 0.15, 0.15]


@pytest.mark.parametrize("given_by", ["file", "--set"])
def test_a_task_split_given_at_the_default_is_refused_as_any_other(college, tmp_path, capsys, given_by):
    """A TGN job giving ``task.split: [0.7, 0.15, 0.15]`` — the snapshot tasks' default — passed silently while any
    other value is refused (the stream's own split is what counts): the task's default is now None, "not given",
    so a split the job gives, in the file or by ``--set``, is refused alike, in one line naming the key and where
    it came from. An older ``config.resolved.yaml`` that wrote that default still resumes."""
    from hpcdgnn.__main__ import main
    from hpcdgnn.regimes.events import check

    path = _job(tmp_path, college)
    sets = ["--set", "task.split=[0.7, 0.15, 0.15]"] if given_by == "--set" else []
    if given_by == "file":
        raw = yaml.safe_load(path.read_text())
        raw["task"]["split"] = [0.7, 0.15, 0.15]
        path.write_text(yaml.safe_dump(raw))
    assert main(["check", str(path), "--ranks", "1", *sets]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    key = "--set task.split" if given_by == "--set" else f"{path}: task.split"
    assert err == [f"hpcdgnn: error: {key}: an event stream's split is the dataset's (prepare --kind events "
                   "--split; from Python the adapters' split=, from_temporal_data(data, output, split=(0.7, 0.15, "
                   "0.15))); remove task.split"], err
    # what a run before the resolved job left the split out wrote: read back (a resume) without it
    old = tmp_path / "old.resolved.yaml"
    old.write_text(yaml.safe_dump({**yaml.safe_load(_job(tmp_path, college).read_text()),
                                   "task": {"name": "temporal_link_prediction", "split": [0.7, 0.15, 0.15]}}))
    assert load_job(old, resolved=True).task.split is None
    check(load_job(old, resolved=True), str(old), 1)
    assert load_job(old, ["task.split=[0.7, 0.15, 0.15]"], resolved=True).task.split == (0.7, 0.15, 0.15)


def test_epoch_and_memory_parallelism_and_resume(launcher, college, tmp_path):
    """1×2×1 trains every positive batch twice (two negative sets); 1×1×2 walks two time segments with two
    memories; a 1×1×2 run with a pre-trained static memory resumed from its epoch-2 checkpoint (each group's
    memory in it, the static table in the model) ends as the straight run does, bit for bit: the resumed
    process does not pre-train the table again over the restored one."""
    job = _job(tmp_path, college)
    static = ("model.static_memory=on", "model.static_pretrain_epochs=1")
    part = tmp_path / "part"
    # one launch for the three runs; the resume in a launch of its own: a fresh process, as after a pre-emption
    procs = launcher.run_many(2, [
        ["run", str(job), "--output", str(tmp_path / "ep"), "--set", "strategy.epoch=2"],
        ["run", str(job), "--output", str(tmp_path / "mem"), "--set", "strategy.memory=2", "train.epochs=3", *static],
        ["run", str(job), "--output", str(part), "--set", "strategy.memory=2", "train.epochs=2", "checkpoint.every=1",
         *static]])
    procs.append(launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(part), "--set", "train.epochs=3"]))
    for proc in procs:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    recs = read_metrics(tmp_path / "ep")
    assert [r["memory"]["train_events"] for r in recs] == [1820, 1820] and recs[-1]["memory"]["config"] == "1x2x1"
    assert np.isfinite(recs[-1]["val_mrr"])
    recs = read_metrics(tmp_path / "mem")
    # the pre-training's seconds apart from the set-up's, in the start line and in summary.json
    totals = json.loads((tmp_path / "mem" / "summary.json").read_text())["totals"]
    assert totals["pretrain_seconds"] > 0 and ", pre-training " in procs[1].stdout
    assert json.loads((tmp_path / "ep" / "summary.json").read_text())["totals"]["pretrain_seconds"] == 0
    straight = [r["loss"] for r in recs]
    assert [r["memory"]["train_events"] for r in recs] == [910] * 3 and np.isfinite(recs[-1]["test_mrr"])
    # group 1 walked the last segment in epoch 1 (its memory: that segment alone), then group 0, then 1 again,
    # each from a memory that has seen every segment since its reset
    assert [r["memory"]["eval_group"] for r in recs] == [1, 0, 1]
    seen = [r["memory"]["eval_memory_events"] for r in recs]
    assert 0 < seen[0] < 910 and seen[1:] == [910, 910], seen
    # the group with nothing to evaluate waits in the evaluating group's agreements: communication, no bytes
    assert all("control.stop" in r["comm_by_tag"] and "control.stop" not in r["bytes_by_tag"] for r in recs)
    assert "pre-training skipped" in procs[-1].stdout + procs[-1].stderr  # the resume
    assert "done: epoch 3 (resumed after epoch 2)" in procs[-1].stdout
    resumed = read_metrics(part)
    assert [r["loss"] for r in resumed] == straight
    assert resumed[-1]["val_mrr"] == recs[-1]["val_mrr"] and resumed[-1]["test_ap"] == recs[-1]["test_ap"]


def test_a_signal_stops_the_static_pretraining_at_an_epoch_boundary(launcher, college, tmp_path):
    """SIGUSR1 on rank 1 of 2 before its set-up: the static memory's pre-training stops after its first of 5
    epochs (a scheduler's grace period may not hold them all), and the job stops before any epoch, exit 75."""
    from hpcdgnn.errors import EXIT_PREEMPTED

    job = _job(tmp_path, college)
    run = tmp_path / "run"
    proc = launcher.run(2, [str(REPO / "tests" / "mpi" / "preempted_in_setup.py"), "1", "--", "run", str(job),
                            "--output", str(run), "--set", "model.static_memory=on",
                            "model.static_pretrain_epochs=5", "strategy.minibatch=2"])
    assert proc.returncode == EXIT_PREEMPTED, proc.stdout + proc.stderr
    assert "static node memory pre-training stopped by a signal after epoch 1 of 5" in proc.stdout, proc.stdout
    assert "pre-trained" not in proc.stdout and "during the set-up, before any epoch" in proc.stdout
    assert read_metrics(run) == []


@pytest.mark.parametrize("over, words", [
    (["strategy.minibatch=2"], "minibatch·epoch·memory = 2·1·1 = 2, but the job runs on 3 ranks"),
    (["strategy.minibatch=3", "task.batch_events=5000"], "task.batch_events: 5000 is more than the 910 training"),
    # a batch whose footprint no node holds: the same line (the footprint's priced a batch the stream cannot fill)
    (["strategy.minibatch=3", "task.batch_events=400000000"], "task.batch_events: 400000000 is more than the 910"),
    (["strategy.minibatch=3"], "shared-memory window does not fit the 0.0 MiB available on the node"),
])
def test_bad_layout_p3_exits_2_with_one_line(launcher, college, tmp_path, monkeypatch, over, words):
    """i·j·k ≠ P, a batch larger than the training stream, a node memory whose shared window cannot be had
    (here: over an administrator's cap): one line, exit 2, on 3 ranks, no hang."""
    if "window" in words:
        monkeypatch.setenv("HPCDGNN_SHM_LIMIT_MB", "0.001")
    job = _job(tmp_path, college)
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run"), "--set", *over],
                        timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hpcdgnn: error:")]
    assert len(errors) == 1 and words in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    # the plan's refusals name where the key came from (here: a --set), as the loader's do
    assert "window" in words or errors[0].startswith("hpcdgnn: error: --set "), errors[0]


def test_fault_on_one_rank_of_a_memory_group_ends_the_job(launcher, college, tmp_path):
    """A crash on rank 1 mid-iteration, while rank 0 of its memory group waits at the shared-memory order
    barrier: the whole job ends with rank 1's traceback, no hang."""
    job = _job(tmp_path, college)
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run"), "--set",
                            "strategy.minibatch=2", "debug.fail_rank=1"], timeout=120)
    assert proc.returncode not in (0, 2), proc.stderr
    assert "rank 1/2:" in proc.stderr and "fault injected on rank 1" in proc.stderr


def test_event_stream_is_read_once_per_node(launcher, college):
    """tests/mpi/events_node_check.py at P = 3: every rank has the stream read_events gives, one rank of the
    node read the shards, the others map its shared copy; the temporal CSR shared alike answers queries
    as a private one."""
    proc = launcher.run(3, [str(REPO / "tests" / "mpi" / "events_node_check.py"), str(college)], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json_records(proc.stdout)
    assert sorted(r["rank"] for r in out) == [0, 1, 2]
    assert sum(r["reads"] for r in out) == 1  # one node here: one reader
    assert all(r["shared"] and r["windows"] == 4 and r["csr_windows"] == 4 for r in out)


def test_corrupt_event_shard_p3_exits_2_naming_it(launcher, college, tmp_path):
    """The node's reading rank finds a time that decreases in a shard: every rank of the node raises its
    error (none waits for shared arrays), one line naming the file, exit 2."""
    import shutil

    import h5py

    from hpcdgnn.data.events import load_event_manifest, save_event_manifest
    from tests.data._corrupt import reseal

    data = tmp_path / "college"
    shutil.copytree(college, data)
    shard = sorted(p.name for p in (data / "shards").iterdir())[1]
    with h5py.File(data / "shards" / shard, "r+") as f:
        f["t"][5] = f["t"][4] - 1.0
    reseal(data, shard, load_event_manifest, save_event_manifest)
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(_job(tmp_path, data)), "--output", str(tmp_path / "run"),
                            "--set", "strategy.minibatch=3"], timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("hpcdgnn: error:")]
    assert len(errors) == 1 and shard in errors[0] and "decreases" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_grad_buckets_after_static_pretraining(launcher, college, tmp_path):
    """comm.grad_buckets with the static-memory pre-training, which synchronises the gradients of copies of
    the model before training the model itself: the buckets follow the parameters they are given (else the
    model's gradients would never be reduced and the replicas would drift): P = 2 equals the flat all-reduce."""
    job = _job(tmp_path, college)
    over = ("model.static_memory=on", "model.static_pretrain_epochs=1", "strategy.minibatch=2")
    (flat, _), (got, _) = _losses_many(launcher, 2, [(job, tmp_path / "flat", over),
                                                     (job, tmp_path / "b", (*over, "comm.grad_buckets=3"))])
    assert_same_run(got, flat)


def test_float32_features_are_the_node_s_copy_counted_once(launcher, college, tmp_path):
    """In float32 (the stored dtype) every rank maps the node's copy of the edge features instead of its own: the
    per-rank engine_bytes add up to one node memory and one copy of the features, as at P = 1."""
    job = _job(tmp_path, college)
    engine = []
    for P in (None, 2):
        run = tmp_path / f"p{P or 1}"
        _losses(launcher, P, job, run, "train.dtype=float32", *(["strategy.minibatch=2"] if P else []))
        engine.append(json.loads((run / "summary.json").read_text())["memory"]["engine_bytes"])
    assert sum(engine[1]) == engine[0][0] and len(engine[1]) == 2, engine


def test_a_negative_that_is_the_positive_ties_with_it_on_any_number_of_ranks(launcher, tmp_path):
    """A drawn negative that is the event's own destination is the positive pair itself: the same score in
    exact arithmetic, which the ranking counts as a tie (half a rank). Its row and the positive's are products
    over other row blocks, so in float32 they came out an ulp apart at P = 3 where one rank read them bitwise
    equal: the tie broken, MRR off in the 4th digit (0.4106 against 0.4114 on CollegeMsg's first 3,000
    events). Such a negative takes the positive's score: MRR and AP equal at P = 1 and 3, float32."""
    from hpcdgnn.__main__ import main

    with gzip.open(REPO / "inputs" / "CollegeMsg.txt.gz", "rt") as f:  # as a user prepares it: no edge features
        (tmp_path / "college3k.txt").write_text("".join(next(f) for _ in range(3000)))
    assert main(["prepare", str(tmp_path / "college3k.txt"), "--format", "snap", "--kind", "events", "--output",
                 str(tmp_path / "college3k")]) == 0
    job = write_job(tmp_path / "job.yaml", tmp_path / "college3k",
                    model={"name": "tgn", "hidden": 16, "heads": 2, "memory_dim": 16, "time_dim": 16, "neighbors": 5},
                    task={"name": "temporal_link_prediction", "batch_events": 200, "eval_negatives": 19},
                    strategy={"name": "memory"}, train={"epochs": 1, "lr": 0.001})
    over = ["train.dtype=float32"]
    recs = {P: _losses(launcher, P, job, tmp_path / f"p{P or 1}", *over,
                       *(["strategy.minibatch=3"] if P else []))[1][-1] for P in (None, 3)}
    for key in ("val_mrr", "test_mrr", "val_ap", "test_ap"):
        assert recs[3][key] == pytest.approx(recs[None][key], rel=1e-12, abs=0), (key, recs)


def test_check_refuses_a_memory_group_its_ranks_per_node_would_split(college, tmp_path, capsys):
    """A memory group's i·j ranks map one node's shared window: `check --ranks-per-node R` refuses a group R
    would split (as the run's window does, on the cluster), in one line; groups that fit pass."""
    from hpcdgnn.__main__ import main

    job = _job(tmp_path, college)
    assert main(["check", str(job), "--ranks", "4", "--ranks-per-node", "2", "--set", "strategy.minibatch=4"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "= 4 ranks share a node memory, which must be on one node; at 2 ranks a node group 0 " \
        "(ranks 0–3) spans nodes" in err[0], err
    for over in (["strategy.minibatch=2", "strategy.memory=2"], ["strategy.memory=4"]):
        assert main(["check", str(job), "--ranks", "4", "--ranks-per-node", "2", "--set", *over]) == 0, over


def _fresh_destinations(path):
    """A stream whose later events go to nodes never seen before: in evaluation the positive destination and
    most drawn negatives are blank (no memory, no neighbours) at the same time."""
    rng = np.random.default_rng(0)
    lines, t, fresh = [], 0, 50
    for k in range(2000):
        t += int(rng.integers(1, 50))
        if k >= 1400 and k % 2 == 0:
            dst, fresh = fresh, fresh + 1
        else:
            dst = int(rng.integers(0, 50))
        lines.append(f"{rng.integers(0, 50)} {dst} {t}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_negatives_with_the_positive_s_input_tie_with_it_on_any_number_of_ranks(launcher, tmp_path):
    """Two nodes never written and without neighbours, queried at the same time, have one embedding in exact
    arithmetic; in float32 their rows came out ulps apart at P = 3 (other row blocks) where one rank read them
    equal, and split ties of fresh destinations against fresh negatives: test MRR 0.09664 against 0.09686. Such
    negatives take the positive's score: MRR and AP equal at P = 1 and 3, float32."""
    from hpcdgnn.__main__ import main

    assert main(["prepare", str(_fresh_destinations(tmp_path / "fresh.txt")), "--format", "snap", "--kind", "events",
                 "--output", str(tmp_path / "fresh")]) == 0
    job = write_job(tmp_path / "job.yaml", tmp_path / "fresh",
                    model={"name": "tgn", "hidden": 16, "heads": 2, "memory_dim": 16, "time_dim": 16, "neighbors": 5},
                    task={"name": "temporal_link_prediction", "batch_events": 200, "eval_negatives": 19},
                    strategy={"name": "memory"}, train={"epochs": 1, "lr": 0.001})
    recs = {P: _losses(launcher, P, job, tmp_path / f"p{P or 1}", "train.dtype=float32",
                       *(["strategy.minibatch=3"] if P else []))[1][-1] for P in (None, 3)}
    for key in ("val_mrr", "test_mrr", "val_ap", "test_ap"):
        assert recs[3][key] == pytest.approx(recs[None][key], rel=1e-12, abs=0), (key, recs)


def test_only_blank_lonely_negatives_at_the_same_time_are_the_positive_s_twins():
    """:func:`_twins` against its definition on a hand-made slice: 2 events, 3 negatives each."""
    from types import SimpleNamespace

    import torch

    from hpcdgnn.strategies.memory import _twins

    # roots: src 0, 1; dst 2, 3; negatives 4..9 (event 0: 4, 5, 6; event 1: 7, 8, 9); nodes = roots' ids
    roots = np.arange(10)
    mask = np.zeros((10, 2), dtype=bool)
    mask[5, 0] = True  # root 5 has a neighbour
    mask[3, 1] = True  # event 1's destination has one: no twin for event 1
    root_t = np.full(10, 7.0)
    root_t[6] = 8.0  # another time
    mem = torch.zeros(10, 4)
    mem[4, 2] = 0.5  # root 4 was written
    nb = SimpleNamespace(mask=mask)
    inp = SimpleNamespace(roots=roots, unique=roots, root_t=root_t, neighbors=nb,
                          memory=SimpleNamespace(mem=mem, mail=torch.zeros(10, 3), mem_ts=np.zeros(10), gap=None))
    work = SimpleNamespace(inp=inp, events=np.arange(2), negatives=3, scored=None)
    expected = np.zeros((2, 3), dtype=bool)
    expected[0] = [False, False, False]  # 4 written, 5 with a neighbour, 6 at another time
    np.testing.assert_array_equal(_twins(work, SimpleNamespace(static=None)), expected)
    mem[4, 2] = 0.0
    expected[0, 0] = True
    np.testing.assert_array_equal(_twins(work, SimpleNamespace(static=None)), expected)
    assert _twins(work, SimpleNamespace(static=torch.zeros(10, 4))) is None  # the static table tells nodes apart
