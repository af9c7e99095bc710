"""A pre-emption between the batches of an epoch (``hpcdgnn.train.loop.BatchStop``), under a real mpirun.

Under a strategy of many mini-batches (sequences, memory, hybrid with synchronous averaging) the ranks agree
between batches: a signal to one rank stops every rank before the same batch, and the run exits 75. Where the
strategy resumes between batches (every built-in one: ``sequences``; ``memory``, its reads in flight under
epoch parallelism included; synchronous ``hybrid``, its reservoir included) a training stop writes a checkpoint
there, and the resume trains on from the next batch, reproducing the uninterrupted run bit for bit: an epoch
longer than the allocation still progresses; TGN's and ``sequences``' evaluation passes checkpoint the trained
epoch alike. Where a strategy cannot resume (the harness's ``abandon``) the epoch is abandoned: the run writes
the checkpoint of its start (serialised in memory at that boundary) unless one was written there, and a resume
trains the epoch again, bit for bit too. An abandoned epoch before any checkpoint leaves none and says to start
over. An epoch after a short one (under ``BatchStop.HOLD_AFTER_S``) whose start was not checkpointed runs to its
end, as does every epoch under asynchronous averaging (a round may be in flight between steps) or a full-batch
strategy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import hpcdgnn
from hpcdgnn.errors import EXIT_PREEMPTED
from hpcdgnn.train.checkpoint import latest_checkpoint, within_epoch
from tests.conftest import REPO, SharedRuns, assert_same_run, read_metrics, write_job
from tests.strategies.test_hybrid import DQN, RANDOM, overridden, sparse  # noqa: F401 (a fixture)
from tests.strategies.test_memory import _job as memory_job
from tests.strategies.test_memory import college  # noqa: F401 (a fixture)

pytestmark = pytest.mark.mpi

#: signals rank RANK during batch BATCH of epoch EPOCH; the ranks agree before every batch
MID = str(REPO / "tests" / "mpi" / "preempted_mid_epoch.py")
SEQ = {"name": "sequences", "window": 3, "batch_vertices": 8, "fanouts": [3, 2], "batch_samples": 1}
#: no checkpoint at an epoch's end but the last: an abandoned epoch's start is only held in memory
AT_END = {"every": 0, "every_minutes": 0}


def _trajectory(run, scores: bool = True) -> list[list[float]]:
    """Each epoch's loss and gradient norm, and (``scores``) every split's loss and metrics (the AUC's bins span
    the whole epoch's logits, those before a resume within it included)."""
    return [[r["loss"], r["grad_norm"], *([r[k] for k in sorted(r) if k.startswith(("train_", "val_", "test_"))
                                           and r[k] is not None] if scores else [])] for r in read_metrics(run)]


def _preempted(launcher, P: int, job, run, rank: int, epoch: int, batch: int, *overrides: str, hold: bool = True,
               interval: float = 0.0, evaluation: bool = False, fits: bool = True, rounds: int = 0,
               abandon: bool | str = False):
    """Run ``job`` with a signal to ``rank`` in ``batch`` of ``epoch`` (``evaluation``: in its evaluation pass,
    after ``rounds`` of its batches); ``hold``: however short the epochs; ``interval``: ``BatchStop.INTERVAL_S``
    (0: the ranks agree before every batch); ``fits``: False, as if no node had room for a hold; ``abandon``: as
    if no strategy resumed within an epoch (the base's default, for one that cannot); ``"training"``: only
    between training batches."""
    options = ",".join(["hold"] * hold + [f"interval={interval}"] + [f"eval={rounds}"] * evaluation
                       + ["nofit"] * (not fits) + ([f"abandon={abandon}" if isinstance(abandon, str) else "abandon"]
                                                   if abandon else []))
    proc = launcher.run(P, [MID, str(rank), str(epoch), str(batch), options, "--", "run", str(job),
                            "--output", str(run), *(["--set", *overrides] if overrides else [])])
    assert proc.returncode == EXIT_PREEMPTED, proc.stdout + proc.stderr
    assert json.loads((run / "summary.json").read_text())["status"] == "preempted"
    return proc.stdout


def _resumed_equals_straight(launcher, P: int, job, run, straight, *overrides: str) -> Path:
    """Resume ``run`` at ``P`` in a launch of its own and compare it with the uninterrupted run of ``job`` at ``P``
    (``straight``: the module's :class:`~tests.conftest.SharedRuns`); returns that run's directory."""
    done = launcher.run(P, ["-m", "hpcdgnn", "run", "--resume", str(run)])
    assert done.returncode == 0, done.stdout + done.stderr
    ref = straight(P, job, *overrides)
    assert len(read_metrics(ref)) == len(read_metrics(run))
    assert_same_run(_trajectory(run), _trajectory(ref))
    return ref


def _hybrid_job(tmp_path, sparse):  # noqa: F811
    """T-GCN node regression over ``sparse``, 3 epochs, checkpointed at the end alone."""
    return write_job(tmp_path / "job.yaml", sparse, model={"name": "tgcn_cell", "hidden": 4},
                     task={"name": "regression", "horizon": 1}, train={"epochs": 3}, checkpoint=AT_END)


def _hybrid_over(mode: str) -> list[str]:
    """The ``--set`` items of a case of :func:`test_hybrid_stops_between_steps_unless_averaging_is_asynchronous`
    (``abandon`` changes the harness, not the job)."""
    mode, *more = mode.split("+")
    return overridden(DQN if more else RANDOM, "strategy.steps_per_epoch=4", f"strategy.averaging.mode={mode}",
                      # small batches: stores with room for every step's (Eq. 4's cap ~ N·T / (N_S·N_V) / N_A)
                      *(["strategy.reservoir.mode=on", "strategy.reservoir.threads=0",
                         "strategy.vertex_fractions=[0.05,0.1]"] if "reservoir" in more else []))


#: the reservoir, as if it could not resume: test_an_epoch_s_start_is_held_only_where_it_fits
HELD = [*DQN, "strategy.steps_per_epoch=4", "strategy.reservoir.mode=on", "strategy.reservoir.threads=0"]
#: no checkpoint but at the end, 3 epochs: the memory strategy's evaluation tests
EVAL_OVER = ("train.epochs=3", "checkpoint.every=0", "checkpoint.every_minutes=0")


def _seq_job(tmp_path, data, epochs: int, **strategy):
    """``sequences`` (:data:`SEQ`, ``strategy`` in place of its items) for ``epochs``, checkpointed at the end."""
    return write_job(tmp_path / "job.yaml", data, strategy={**SEQ, **strategy}, train={"epochs": epochs},
                     checkpoint=AT_END)


#: the uninterrupted runs this module's tests compare with (:class:`~tests.conftest.SharedRuns`' plan): at each P
#: they share one launch
STRAIGHT = [
    *[("test_hybrid_stops_between_steps_unless_averaging_is_asynchronous", 3, "sparse",
       lambda d, tmp, m=m: (_hybrid_job(tmp, d), _hybrid_over(m))) for m in ("allreduce", "allreduce+dqn",
                                                                             "allreduce+dqn+reservoir")],
    ("test_sequences_evaluation_stops_between_rounds", 3, "small_dataset", lambda d, tmp: (_seq_job(tmp, d, 4), [])),
    ("test_sequences_stop_between_batches_and_resume_bit_for_bit", 3, "small_dataset",
     lambda d, tmp: (_seq_job(tmp, d, 4, fanouts=[3, 0], cache_mb=0.001), [])),
    ("test_a_resume_within_an_epoch_on_another_rank_count", 3, "small_dataset",
     lambda d, tmp: (_seq_job(tmp, d, 3), [])),
    ("test_memory_strategy_stops_between_iterations", 3, "college",
     lambda d, tmp: (memory_job(tmp, d, minibatch=1, epoch=3, memory=1), ["checkpoint.every=1"])),
    ("test_a_second_stop_in_the_resumed_epoch_checkpoints_further_on", 2, "small_dataset",
     lambda d, tmp: (_seq_job(tmp, d, 3), [])),
    ("test_an_epoch_s_start_is_held_only_where_it_fits", 2, "sparse", lambda d, tmp: (_hybrid_job(tmp, d), HELD)),
    *[("test_memory_strategy_stops_between_iterations", 2, "college",
       lambda d, tmp, i=i, j=j, k=k: (memory_job(tmp, d, minibatch=i, epoch=j, memory=k), ["checkpoint.every=1"]))
      for i, j, k in ((2, 1, 1), (1, 1, 2), (1, 2, 1))],
    ("test_a_pre_trained_run_stopped_in_its_first_epoch_does_not_pre_train_again", 2, "college",
     lambda d, tmp: (memory_job(tmp, d, minibatch=2), ["model.static_memory=on", "model.static_pretrain_epochs=1"])),
    *[(test, 2, "college", lambda d, tmp, s=s: (memory_job(tmp, d, **s), EVAL_OVER)) for test, s in (
        ("test_the_event_regime_s_evaluation_pass_stops_between_batches", {"minibatch": 1, "epoch": 2}),
        ("test_where_only_training_would_abandon_a_refused_hold_lets_the_evaluation_stop",
         {"minibatch": 1, "epoch": 2}),
        ("test_the_event_regime_s_evaluation_pass_stops_between_batches", {"minibatch": 2, "epoch": 1}),
        ("test_one_memory_group_s_evaluation_stops_for_a_signal_to_any_rank", {"memory": 2}))],
]


@pytest.fixture(scope="module")
def straight(request, launcher, tmp_path_factory) -> SharedRuns:
    """The uninterrupted runs the resumes are compared with: :data:`STRAIGHT`'s at a P in one launch."""
    return SharedRuns(request, launcher, tmp_path_factory.mktemp("straight"), STRAIGHT)


def _within(run, epoch: int, batch: int) -> str:
    """The name of the checkpoint after ``epoch`` and ``batch`` batches of the next."""
    return f"epoch-{epoch:06d}+batch-{batch:09d}"


def test_sequences_stop_between_batches_and_resume_bit_for_bit(launcher, small_dataset, straight, tmp_path):
    """P = 3, a signal to rank 1 in the second batch of epoch 3 of 4: every rank stops after 2 batches and
    checkpoints there (nothing was written at epoch 2's end, nothing held is needed); the resume trains on from
    batch 3 — the reuse cache at its place in the epoch's planned reads, the ranks' metric sums of batches 1–2
    carried — and its four epochs are the straight run's, down to the reuse cache's counters of epoch 4 (a cache
    of two entries a rank: what it admits follows Eq. 3's priorities, which its place in the planned reads sets).
    The checkpoint within goes once the next is written."""
    job = _seq_job(tmp_path, small_dataset, 4, fanouts=[3, 0], cache_mb=0.001)
    run = tmp_path / "run"
    out = _preempted(launcher, 3, job, run, 1, 3, 1)
    assert f"checkpoint: {run / 'checkpoints' / _within(run, 2, 2)} (within epoch 3, after 2 of its batches" in out, out
    assert "stopped during epoch 3, after 2 of its batches (a resume trains on from its batch 3); resume with " \
           f"--resume {run}" in out, out
    assert "kept in memory" not in out, out
    assert [r["epoch"] for r in read_metrics(run)] == [1, 2]
    assert latest_checkpoint(run / "checkpoints").name == _within(run, 2, 2)
    assert latest_checkpoint(run / "checkpoints", epoch_end=True) is None  # a model's users see none yet
    ref = _resumed_equals_straight(launcher, 3, job, run, straight)
    assert [r.get("resumed_after_batches") for r in read_metrics(run)] == [None, None, 2, None]
    resumed, straight = read_metrics(run), read_metrics(ref)
    assert resumed[3]["reuse"] == straight[3]["reuse"] and straight[3]["reuse"]["bypassed"] > 0  # full: Eq. 3 decides
    # every read of the resumed part was the planned one (a cache at another place counts them unplanned)
    assert resumed[2]["reuse"]["unplanned"] == 0 < resumed[2]["reuse"]["hits"] + resumed[2]["reuse"]["misses"]
    assert sorted(d.name for d in (run / "checkpoints").iterdir()) == ["epoch-000004"]


def test_a_second_stop_in_the_resumed_epoch_checkpoints_further_on(launcher, small_dataset, straight, tmp_path):
    """P = 2: stopped after epoch 2's second batch, resumed, stopped again after its fifth: the newer checkpoint
    within replaces the older, the line says where the resume began, and the last resume is the straight run."""
    job = _seq_job(tmp_path, small_dataset, 3)
    run = tmp_path / "run"
    _preempted(launcher, 2, job, run, 0, 2, 1)
    proc = launcher.run(2, [MID, "1", "2", "4", "interval=0", "--", "run", "--resume", str(run)])
    assert proc.returncode == EXIT_PREEMPTED, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"resumed from {run / 'checkpoints' / _within(run, 1, 2)} after epoch 1 and 2 batches of epoch 2" in out
    assert "stopped during epoch 2, after 5 of its batches (a resume trains on from its batch 6)" in out, out
    assert sorted(d.name for d in (run / "checkpoints").iterdir()) == [_within(run, 1, 5)]
    _resumed_equals_straight(launcher, 2, job, run, straight)


def test_a_first_epoch_stopped_within_resumes_from_there(launcher, small_dataset, straight, tmp_path):
    """One rank, a signal in epoch 1's first batch: stopped before the second with a checkpoint there (an epoch
    longer than the allocation still progresses); a model's users find no checkpoint of an epoch's end (one line
    saying so), and the resume is the straight run."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy=SEQ, checkpoint=AT_END)
    run = tmp_path / "run"
    out = _preempted(launcher, 1, job, run, 0, 1, 0)
    assert "stopped during epoch 1, after 1 of its batches (a resume trains on from its batch 2)" in out, out
    assert read_metrics(run) == [] and latest_checkpoint(run / "checkpoints").name == _within(run, 0, 1)
    assert hpcdgnn.load_run(run).preempted  # summary.json's status, as train() returned it
    embed = launcher.run(1, ["-m", "hpcdgnn", "embed", str(run), "--output", str(tmp_path / "z.npz")])
    assert embed.returncode != 0 and "no complete checkpoint of an epoch's end in" in embed.stderr \
        and "one within an epoch is for --resume only" in embed.stderr, embed.stderr
    _resumed_equals_straight(launcher, 1, job, run, straight)
    assert not hpcdgnn.load_run(run).preempted


def test_a_resume_within_epoch_1_is_a_resume(launcher, small_dataset, tmp_path):
    """A review found a checkpoint within epoch 1 (``epoch-000000+batch-…``) read as a new run's: a resume refused
    in its set-up (here a TensorBoard directory that is a file) removed the run's files (and any resume refused
    there kept its ``--set`` in ``config.resolved.yaml``), and a resume that crashed after recording epoch 1 left
    that record to be written twice by the next. Now: one line before any file changes; the crash's resume
    (from the same checkpoint) drops the record it writes again."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy=SEQ, train={"epochs": 2}, checkpoint=AT_END)
    run = tmp_path / "run"
    _preempted(launcher, 1, job, run, 0, 1, 1)
    files, config = sorted(p.name for p in run.iterdir()), (run / "config.resolved.yaml").read_text()
    (tmp_path / "a-file").write_text("")
    refused = launcher.run(1, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set",
                               f"output.tensorboard={tmp_path / 'a-file'}"])
    assert refused.returncode == 2 and "output.tensorboard:" in refused.stderr, refused.stderr
    assert sorted(p.name for p in run.iterdir()) == files and (run / "config.resolved.yaml").read_text() == config
    crashed = launcher.run(1, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", "debug.fail_rank=0",
                               "debug.fail_epoch=2"])
    assert crashed.returncode != 0 and [r["epoch"] for r in read_metrics(run)] == [1], crashed.stderr
    done = launcher.run(1, ["-m", "hpcdgnn", "run", "--resume", str(run), "--set", "debug.fail_rank=-1"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(resumed after epoch 0 and 2 batches of epoch 1)" in done.stdout, done.stdout
    assert [r["epoch"] for r in read_metrics(run)] == [1, 2]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_from_batch"] == 2 and "resumed_checksum" in summary["parameters"], summary


def test_a_resume_within_an_epoch_on_another_rank_count(launcher, small_dataset, straight, tmp_path):
    """Stopped within epoch 2 at P = 3, resumed at P = 2: the old ranks' metric sums before the stop and the scores
    they count come to rank q mod 2, and (the reuse cache being set-up's fills on another count) the run agrees with
    the straight P = 3 run to rounding, every split's AUC included (its bins span the whole epoch's logits; with
    only the sums' total on rank 0 the resumed epoch's AUC took the fixed bins, val_auc 0.9015 for 0.9019)."""
    job = _seq_job(tmp_path, small_dataset, 3)
    run = tmp_path / "run"
    _preempted(launcher, 3, job, run, 2, 2, 2)
    done = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(run)])
    assert done.returncode == 0, done.stdout + done.stderr
    np.testing.assert_allclose(_trajectory(run), _trajectory(straight(3, job)), rtol=1e-9)


def test_an_epoch_after_a_short_one_runs_to_its_end(launcher, sparse, tmp_path):  # noqa: F811
    """P = 2, ``hybrid`` with synchronous averaging and the reservoir, as if it could not resume within an epoch
    (a stop abandons the epoch), epochs of milliseconds, none checkpointed: holding an epoch's start would cost
    a share of it, so a signal in epoch 2 stops the run after it, with its checkpoint, as a full-batch strategy's
    epoch does."""
    job, run = _hybrid_job(tmp_path, sparse), tmp_path / "run"
    out = _preempted(launcher, 2, job, run, 1, 2, 1, *RANDOM, "strategy.steps_per_epoch=4",
                     "strategy.reservoir.mode=on", "strategy.reservoir.threads=0", hold=False, abandon=True)
    assert "stopped after epoch 2" in out and "stopped during" not in out, out
    assert [r["epoch"] for r in read_metrics(run)] == [1, 2]
    assert latest_checkpoint(run / "checkpoints").name == "epoch-000002"


def test_an_epoch_of_one_batch_is_not_held_and_runs_to_its_end(launcher, small_dataset, tmp_path):
    """``sequences`` with one batch an epoch (every training sample in it): nothing to stop between, so nothing is
    held; a signal in epoch 2 stops the run after it."""
    one = {k: v for k, v in SEQ.items() if k not in ("batch_samples", "batch_vertices")}
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy=one, train={"epochs": 3}, checkpoint=AT_END)
    run = tmp_path / "run"
    out = _preempted(launcher, 1, job, run, 0, 2, 0)
    assert "stopped after epoch 2" in out and "kept in memory" not in out and "stopped during" not in out, out


def test_the_agreements_follow_dearer_batches_after_cheap_ones(launcher, small_dataset, tmp_path):
    """A review found the agreements scheduled past the epoch's end: at P = 2 with one sample a batch only one
    rank works in each, the first agreement measured a cheap batch (~6 ms) and put the next 0.3 s of such
    batches later — beyond the epoch — while rank 1's batches sleep 50 ms (``debug.delay_rank``). The gap now at
    most doubles (1, 3, 7, …): a signal in epoch 3's third batch stops the epoch between batches."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy=SEQ, train={"epochs": 4}, checkpoint=AT_END,
                    debug={"delay_rank": 1, "delay_seconds": 0.05})
    out = _preempted(launcher, 2, job, tmp_path / "run", 0, 3, 2, interval=0.3)
    assert "stopped during epoch 3" in out, out


@pytest.mark.parametrize("layout", [(2, 1, 1), (1, 1, 2), (1, 2, 1), (1, 3, 1)])
def test_memory_strategy_stops_between_iterations(launcher, college, straight, tmp_path, layout):  # noqa: F811
    """TGN at P = i·j·k (2, or 3 for j = 3), checkpointed every epoch, a signal in epoch 2's third iteration
    stops every rank there and the run checkpoints there — the groups' node memories mid-segment and, under
    epoch parallelism, the b reads trainer b holds for the iterations it trains next (read before iteration 3's
    writes: they cannot be read again) — and the resume trains on from iteration 4, reproducing the straight run
    exactly."""
    i, j, k = layout
    P = i * j * k
    job = memory_job(tmp_path, college, minibatch=i, epoch=j, memory=k)
    run = tmp_path / "run"
    out = _preempted(launcher, P, job, run, 0, 2, 2, "checkpoint.every=1")
    assert "kept in memory" not in out, out
    assert "stopped during epoch 2, after 3 of its batches (a resume trains on from its batch 4)" in out, out
    ckpt = latest_checkpoint(run / "checkpoints")
    assert ckpt.name == _within(run, 1, 3)
    if j > 1:  # trainer b (rank b) holds the reads of batches 3 − b .. 2, trainer 0 none
        reads = [torch.load(ckpt / f"rank-{r:05d}.pt", weights_only=False)["strategy"].get("reads") for r in range(P)]
        assert reads[0] is None and [[q for q, *_ in reads[b]] for b in range(1, P)] == \
            [list(range(3 - b, 3)) for b in range(1, P)], reads
    _resumed_equals_straight(launcher, P, job, run, straight, "checkpoint.every=1")


def test_a_pre_trained_run_stopped_in_its_first_epoch_does_not_pre_train_again(launcher, college, straight,  # noqa: F811
                                                                                 tmp_path):
    """TGN with the static node memory pre-trained before epoch 1 (DistTGL §3.1), at i = 2, stopped in epoch 1's
    third iteration: the checkpoint within epoch 1 holds the pre-trained table, so the resume skips the phase
    (saying so) and trains on exactly as the straight run."""
    job = memory_job(tmp_path, college, minibatch=2)
    run = tmp_path / "run"
    over = ("model.static_memory=on", "model.static_pretrain_epochs=1")
    out = _preempted(launcher, 2, job, run, 1, 1, 2, *over)
    assert "pre-trained: 1 epoch(s)" in out and latest_checkpoint(run / "checkpoints").name == _within(run, 0, 3), out
    done = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(run)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "static node memory: as trained up to epoch 0 and 3 batches of epoch 1 (restored; pre-training " \
           "skipped)" in done.stdout and "pre-trained:" not in done.stdout, done.stdout
    assert "done: epochs 1-2 (resumed after epoch 0 and 3 batches of epoch 1)" in done.stdout, done.stdout
    assert_same_run(_trajectory(run), _trajectory(straight(2, job, *over)))


def test_an_epoch_s_start_is_held_only_where_it_fits(launcher, sparse, straight, tmp_path):  # noqa: F811
    """Synchronous ``hybrid`` with the reservoir, as if it could not resume within an epoch (a stop abandons the
    epoch), no checkpoint but at the end: where no node has room to hold epoch 2's start (here: none is allowed)
    rank 0 says so once, and a signal in its second step lets the epoch end and checkpoints its end, which the
    resume continues from as the straight run (held where it fits:
    ``test_hybrid_stops_between_steps_unless_averaging_is_asynchronous``)."""
    job, run = _hybrid_job(tmp_path, sparse), tmp_path / "run"
    out = _preempted(launcher, 2, job, run, 1, 2, 1, *HELD, fits=False, abandon=True)
    fit_line = "pre-emption: this run's epochs end before a signal stops them (holding an epoch's start in memory"
    assert out.count(fit_line) == 1 and "checkpoint.every: 1 lets them stop between batches" in out, out
    assert "stopped after epoch 2" in out and "stopped during" not in out, out
    assert latest_checkpoint(run / "checkpoints").name == "epoch-000002"
    _resumed_equals_straight(launcher, 2, job, run, straight, *HELD)


def test_where_only_training_would_abandon_a_refused_hold_lets_the_evaluation_stop(launcher, college, straight,  # noqa: F811
                                                                                     tmp_path):
    """TGN at j = 2 as if it could not resume between training batches (its evaluation pass still can), no
    checkpoint but at the end, no node with room to hold epoch 2's start: rank 0 says the training passes end
    before a signal stops them; a signal in epoch 2's third iteration lets its training end, the evaluation pass
    stops at once with the checkpoint of the trained epoch (no copy needed), and the resume evaluates it again as
    the straight run."""
    job = memory_job(tmp_path, college, minibatch=1, epoch=2)
    run = tmp_path / "run"
    out = _preempted(launcher, 2, job, run, 1, 2, 2, *EVAL_OVER, fits=False, abandon="training")
    fit_line = ("pre-emption: this run's training passes end before a signal stops them (holding an epoch's start in "
                "memory")
    assert out.count(fit_line) == 1, out
    assert "stopped during epoch 2, in its evaluation pass, after all 11 of its batches" in out, out
    assert latest_checkpoint(run / "checkpoints").name == "epoch-000001+batch-000000011"
    _resumed_equals_straight(launcher, 2, job, run, straight, *EVAL_OVER)


@pytest.mark.parametrize("split", [(1, 2), (2, 1)])
def test_the_event_regime_s_evaluation_pass_stops_between_batches(launcher, college, straight, tmp_path,  # noqa: F811
                                                                   split):
    """TGN's evaluation pass (49 negatives an event: on large streams as long as the training) stops between its
    batches too, where every rank evaluates (``memory: 1``), at i = 2 and at j = 2 (epoch parallelism), with no
    checkpoint at epoch 1's end and nothing held: the abandoned pass restores the node memory training left,
    the run checkpoints the trained epoch, and the resume evaluates it again, reproducing the straight run
    (k = 2: ``test_one_memory_group_s_evaluation_stops_for_a_signal_to_any_rank``)."""
    i, j = split
    job = memory_job(tmp_path, college, minibatch=i, epoch=j)
    run = tmp_path / "run"
    out = _preempted(launcher, 2, job, run, 1, 2, 0, *EVAL_OVER, evaluation=True)
    assert "stopped during epoch 2, in its evaluation pass, after all" in out, out
    assert "of its batches (a resume evaluates it again)" in out and "kept in memory" not in out, out
    ckpt = latest_checkpoint(run / "checkpoints")
    assert within_epoch(ckpt), out
    assert [r["epoch"] for r in read_metrics(run)] == [1]
    if i == 2:  # stopped again as the resumed evaluation starts: the checkpoint it resumed from stays as it is
        written = (ckpt / "state.pt").stat().st_mtime_ns
        again = launcher.run(2, [MID, "0", "2", "0", "eval,interval=0", "--", "run", "--resume", str(run)])
        assert again.returncode == EXIT_PREEMPTED, again.stdout + again.stderr
        assert f"checkpoint: {ckpt} (kept: this attempt trained nothing since)" in again.stdout, again.stdout
        assert (ckpt / "state.pt").stat().st_mtime_ns == written
    _resumed_equals_straight(launcher, 2, job, run, straight, *EVAL_OVER)


def test_sequences_evaluation_stops_between_rounds(launcher, small_dataset, straight, tmp_path):
    """P = 3, the signal to the last rank as epoch 3's evaluation starts: the ranks agree between rounds of one
    sample of each rank's own (ranks own different splits' sequences: agreeing on a global sample index made the
    pass run rank after rank), stop there, after two rounds, and checkpoint the trained epoch (nothing held);
    the resume evaluates it again, reproducing the straight run (the abandoned pass leaves the reuse cache as
    training left it: tests/strategies/test_reuse_decoder.py)."""
    job = _seq_job(tmp_path, small_dataset, 4)
    run = tmp_path / "run"
    out = _preempted(launcher, 3, job, run, 2, 3, 0, evaluation=True, rounds=2)
    assert "stopped during epoch 3, in its evaluation pass, after all" in out, out
    assert "of its batches (a resume evaluates it again)" in out and "kept in memory" not in out, out
    assert within_epoch(latest_checkpoint(run / "checkpoints")), out
    _resumed_equals_straight(launcher, 3, job, run, straight)


@pytest.mark.parametrize("rank, rounds", [(1, 0), (0, 2)])
def test_one_memory_group_s_evaluation_stops_for_a_signal_to_any_rank(launcher, college, straight, tmp_path,  # noqa: F811
                                                                      rank, rounds):
    """``memory: 2`` at P = 2: group 0 (rank 0) evaluates epoch 2 while group 1 has nothing to; a signal to the
    idle rank as the pass starts, or to the evaluating one before its third batch, stops the pass there (the
    idle rank takes part in the agreements), the run checkpoints the trained epoch and the resume evaluates it
    again as the straight run."""
    job = memory_job(tmp_path, college, memory=2)
    run = tmp_path / "run"
    out = _preempted(launcher, 2, job, run, rank, 2, 0, *EVAL_OVER, evaluation=True, rounds=rounds)
    assert "stopped during epoch 2, in its evaluation pass, after all" in out, out
    assert "of its batches (a resume evaluates it again)" in out and "kept in memory" not in out, out
    assert within_epoch(latest_checkpoint(run / "checkpoints")), out
    _resumed_equals_straight(launcher, 2, job, run, straight, *EVAL_OVER)


@pytest.mark.parametrize("mode", ["allreduce", "allreduce+dqn", "allreduce+dqn+reservoir",
                                  "allreduce+dqn+reservoir+abandon", "async"])
def test_hybrid_stops_between_steps_unless_averaging_is_asynchronous(launcher, sparse, straight, tmp_path,  # noqa: F811
                                                                      mode):
    """Synchronous averaging stops between steps like sequences and checkpoints there (the adjuster has observed
    the last step; here a DQN on all-reduced work, the same on every rank; with the reservoir on, its stores
    without the batch the selection of the next step stored); as if it could not resume (``abandon``), it
    abandons the epoch to its start held in memory; each resumes the straight run. Asynchronous averaging ends the
    epoch first (its rounds may be in flight between steps) and checkpoints its end."""
    job, run, over = _hybrid_job(tmp_path, sparse), tmp_path / "run", _hybrid_over(mode.replace("+abandon", ""))
    mode, *more = mode.split("+")
    out = _preempted(launcher, 3, job, run, 2, 2, 1, *over, abandon="abandon" in more)
    if mode == "async":
        assert "stopped after epoch 2" in out and "stopped during" not in out, out
        assert [r["epoch"] for r in read_metrics(run)] == [1, 2]
        return
    if "abandon" in more:
        assert "stopped during epoch 2, after 2 of its batches" in out and "epoch 1's end, kept in memory" in out, out
    else:
        assert "stopped during epoch 2, after 2 of its batches (a resume trains on from its batch 3)" in out, out
        assert latest_checkpoint(run / "checkpoints").name == _within(run, 1, 2)
    assert [r["epoch"] for r in read_metrics(run)] == [1]
    ref = _resumed_equals_straight(launcher, 3, job, run, straight, *over)
    if "reservoir" in more:  # the stores hold the same batches at the end (none stored twice by the resume)
        ends = [torch.load(latest_checkpoint(r / "checkpoints") / "rank-00000.pt", weights_only=False)["strategy"]
                for r in (run, ref)]
        assert ends[0]["reservoir"] == ends[1]["reservoir"] and sum(map(len, ends[0]["reservoir"])) > 4, ends
