"""Operations under a real mpirun: fault injection, checkpoint/resume, pre-emption by signal (issue 4)."""

from __future__ import annotations

import csv
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hpcdgnn.errors import EXIT_PREEMPTED, EXIT_STALLED
from hpcdgnn.train.checkpoint import latest_checkpoint
from tests.conftest import REPO, assert_same_run, mpi_env, read_metrics, write_job


def _final_state(run_dir: Path) -> dict:
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    assert ckpt is not None, f"no checkpoint in {run_dir}"
    return torch.load(ckpt / "state.pt", weights_only=False)


def _assert_same_state(a: dict, b: dict) -> None:
    """Bitwise-equal model, task head and optimizer moments (to rounding on a GPU: ``assert_same_run``)."""
    for part in ("model", "task"):
        assert a[part].keys() == b[part].keys()
        for k in a[part]:
            assert_same_run(a[part][k].cpu(), b[part][k].cpu())
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert_same_run(torch.as_tensor(sa[k]).cpu(), torch.as_tensor(sb[k]).cpu())


@pytest.mark.parametrize("comm", [{}, {"grad_buckets": 3}, {"backend": "gloo"}])
def test_fault_on_rank_1_of_3_aborts_job(launcher, tmp_path, small_dataset, comm):
    """debug.fail_rank raises mid-epoch (after the forward exchanges, before backward): the job ends fast —
    also with gradient all-reduces posted during the backward (``comm.grad_buckets``), and over gloo, whose
    process group wrapped the exception hook in one that held the traceback back until the hook returned (ours
    ends in MPI_Abort: the traceback was lost)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"}, comm=comm,
                    debug={"fail_rank": 1, "fail_epoch": 2})
    t0 = time.monotonic()
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")], timeout=60)
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert elapsed < 20, f"mpirun took {elapsed:.1f}s to end the job"
    assert "rank 1/3:" in proc.stderr and "fault injected on rank 1 in epoch 2" in proc.stderr, proc.stderr
    assert "rank 0/3:" not in proc.stderr and "rank 2/3:" not in proc.stderr
    assert proc.stderr.count("Traceback") == 1, proc.stderr  # gloo: the others lost a peer, in one line each
    assert len(read_metrics(tmp_path / "run")) == 1  # epoch 1 finished and was logged


def test_a_gloo_collective_past_comm_timeout_s_is_one_line_and_exit_3(launcher, tmp_path, small_dataset):
    """A gloo collective that waits longer than ``comm.timeout_s`` (here for a straggler) ends the job with the
    watchdog's exit status and one line naming the call and the setting — it was gloo's RuntimeError traceback."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"},
                    comm={"backend": "gloo", "timeout_s": 0.2}, debug={"delay_rank": 1, "delay_seconds": 2.0})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")], timeout=60)
    assert proc.returncode == EXIT_STALLED, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    # mpirun's forwarding of two ranks' stderr can leave a NUL byte before the line: what it says is checked
    line = next(ln.lstrip("\x00") for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln)
    # rank 0 waits for the straggler (or, on a loaded machine, a rank's set-up outwaits the 0.2 s first)
    assert re.match(r"\[rank [01]\] hpcdgnn: error: stalled: the gloo ", line), line
    assert "comm.timeout_s = 0.2 s" in line, line


@pytest.mark.parametrize("model", ["tmgcn", "evolvegcn_o"])
def test_resume_reproduces_straight_run(launcher, tmp_path, small_dataset, model):
    """6 epochs straight == 3 epochs, then --resume for 3 more: same losses, bitwise-equal parameters."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": model}, train={"epochs": 6})
    straight, part = tmp_path / "straight", tmp_path / "part"
    # one launch for the straight and the 3-epoch run; the resume in a launch of its own (after the check below)
    for proc in launcher.run_many(2, [["run", str(job), "--output", str(straight)],
                                      ["run", str(job), "--output", str(part), "--set", "train.epochs=3"]]):
        assert proc.returncode == 0, proc.stderr
    assert latest_checkpoint(part / "checkpoints").name == "epoch-000003"
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(part), "--set", "train.epochs=6"])
    assert proc.returncode == 0, proc.stderr
    assert "resumed from" in proc.stdout + proc.stderr
    a, b = read_metrics(straight), read_metrics(part)
    assert [r["epoch"] for r in b] == [1, 2, 3, 4, 5, 6]
    # exactly (on a GPU, to rounding): same arithmetic, same order
    assert_same_run([[r["loss"], r["grad_norm"]] for r in a], [[r["loss"], r["grad_norm"]] for r in b])
    _assert_same_state(_final_state(straight), _final_state(part))
    # summary.json is the whole run's, not the last attempt's (it covered epochs 4-6 only, with the restored
    # parameters' checksum as the initial one)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (straight, part))
    assert sa["epochs"] == sb["epochs"] == 6 and sb["resumed_from_epoch"] == 3
    assert sa["totals"]["bytes_sent"] == sb["totals"]["bytes_sent"] == sum(r["bytes_sent"] for r in b)
    assert sb["totals"]["seconds"]["epoch"] == pytest.approx(sum(r["slowest"]["epoch"] for r in b), rel=1e-12)
    assert sa["parameters"]["initial_checksum"] == sb["parameters"]["initial_checksum"]
    assert "resumed_checksum" not in sa["parameters"]
    assert sa["environment"]["mpi_library"] and "\0" not in sa["environment"]["mpi_library"]  # Open MPI's ends in one
    assert sb["parameters"]["resumed_checksum"] != sb["parameters"]["initial_checksum"]
    for s in (sa, sb):  # the totals add up: load + compute + exposed communication = epoch
        t = s["totals"]["seconds"]
        assert t["load"] + t["compute"] + t["comm_exposed"] == pytest.approx(t["epoch"], rel=1e-6)


def test_resume_re_runs_the_epochs_after_its_checkpoint_once_in_every_record(launcher, tmp_path, small_dataset):
    """A run whose metrics and exchange traces (``debug.trace_exchanges``) went past its newest checkpoint
    (killed between the two, in the middle of a trace line): resuming re-runs those epochs, and
    metrics.jsonl and every rank's trace hold each epoch once, the re-run's — also resumed on fewer ranks
    (P = 3, then 2: the third rank's trace keeps only the epochs before the checkpoint)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn"}, train={"epochs": 3},
                    debug={"trace_exchanges": True}, checkpoint={"every": 2})
    run = tmp_path / "run"
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)])
    assert proc.returncode == 0, proc.stderr
    shutil.rmtree(latest_checkpoint(run / "checkpoints"))  # epoch 3's: as if killed before it was written
    assert latest_checkpoint(run / "checkpoints").name == "epoch-000002"
    with (run / "trace" / "exchanges.rank00001.jsonl").open("a") as f:
        f.write('{"epoch":4,"rank":1,"tags":["redis')  # the kill's half-written line
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(run)])
    assert proc.returncode == 0, proc.stderr
    assert [r["epoch"] for r in read_metrics(run)] == [1, 2, 3]
    for rank, epochs in ((0, [1, 2, 3]), (1, [1, 2, 3]), (2, [1, 2])):
        lines = [json.loads(x) for x in (run / "trace" / f"exchanges.rank{rank:05d}.jsonl").open()]
        assert [x["epoch"] for x in lines] == epochs and all(x["exchanges"] for x in lines), rank
    # reported under P = 2: the totals hold every epoch, the steady time and perf/scaling.py's row only P = 2's
    # (they mixed P = 3's epochs in, a scaling study's row of the wrong P)
    summary, recs = json.loads((run / "summary.json").read_text()), read_metrics(run)
    assert summary["epochs"] == 3 and summary["epochs_on_other_rank_counts"] == 2, summary
    assert summary["steady_epoch_seconds"]["median"] == recs[2]["slowest"]["epoch"]
    proc = subprocess.run([sys.executable, str(REPO / "perf" / "scaling.py"), "plot", "--out", str(tmp_path / "pl"),
                           str(run)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "2 of its epochs ran on another rank count" in proc.stderr, proc.stderr
    with (tmp_path / "pl" / "scaling.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert int(row["P"]) == 2 and float(row["epoch_s"]) == pytest.approx(recs[2]["slowest"]["epoch"])
    assert float(row["bytes_per_epoch"]) == recs[2]["bytes_sent"]


def test_resume_refuses_a_different_computation(launcher, tmp_path, small_dataset):
    """A job file that changes what is computed cannot resume a run; nor can a run with no checkpoint."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    run = tmp_path / "run"
    assert launcher.run(None, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)]).returncode == 0
    other = write_job(tmp_path / "other.yaml", small_dataset, train={"epochs": 4, "lr": 0.5})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(other), "--resume", str(run)], timeout=60)
    assert proc.returncode == 2
    assert "train.lr" in proc.stderr and proc.stderr.count("hpcdgnn: error:") == 1, proc.stderr
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(run)], timeout=60)
    assert proc.returncode == 2 and "has already trained 2 epochs" in proc.stderr, proc.stderr
    proc = launcher.run(None, ["-m", "hpcdgnn", "run", "--resume", str(tmp_path)], timeout=60)
    assert proc.returncode == 2 and "not a run directory" in proc.stderr, proc.stderr


def test_sigusr1_checkpoints_and_resume_matches(launcher, tmp_path, small_dataset):
    """SIGUSR1 to mpirun: all ranks stop at one epoch boundary, checkpoint, exit 75; resuming finishes
    with the losses of an uninterrupted run.
    """
    epochs = 400
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tmgcn"}, train={"epochs": epochs})
    run = tmp_path / "run"
    proc = subprocess.Popen(
        launcher.command(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(run)]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env(),
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until training is under way
            m = run / "metrics.jsonl"
            if m.is_file() and len(m.read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, err
    ckpt = latest_checkpoint(run / "checkpoints")
    assert ckpt is not None
    stopped = int(ckpt.name.split("-")[1])
    assert 3 <= stopped < epochs
    assert "pre-empted (SIGUSR1)" in out + err
    assert [r["epoch"] for r in read_metrics(run)] == list(range(1, stopped + 1))

    straight = tmp_path / "straight"
    # one launch: the resume, then the uninterrupted run
    for proc in launcher.run_many(2, [["run", "--resume", str(run), "--set", f"train.epochs={stopped + 3}"],
                                      ["run", str(job), "--output", str(straight),
                                       "--set", f"train.epochs={stopped + 3}"]]):
        assert proc.returncode == 0, proc.stderr
    assert_same_run([r["loss"] for r in read_metrics(run)], [r["loss"] for r in read_metrics(straight)])
    _assert_same_state(_final_state(run), _final_state(straight))
