"""Refusals found by trying the new regimes (issue 61 §4): the key at fault is named, and a refused new run
leaves no run directory it made behind (one the user made stays)."""

from __future__ import annotations

import numpy as np
import pytest

from hpcdgnn.data.writer import RawSnapshot, write_dataset
from tests.conftest import mpi_env, run_in_process, write_job


def _regression_data(root, T=5, N=9):
    rng = np.random.default_rng(3)
    snaps = (RawSnapshot(rng.integers(0, N, 12), rng.integers(0, N, 12), targets=rng.standard_normal(N))
             for _ in range(T))
    write_dataset(root, snaps, num_vertices=N, targets="signal")
    return root


def _refused(tmp_path, job, output):
    proc = run_in_process(["run", str(job), "--output", str(output)], mpi_env(), tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("hpcdgnn: error: "), proc.stderr
    return proc.stderr


def test_a_horizon_beyond_t_is_named_under_sequences(tmp_path):
    data = _regression_data(tmp_path / "reg")
    job = write_job(tmp_path / "job.yaml", data, model={"name": "tgcn"}, task={"name": "regression", "horizon": 9},
                    strategy={"name": "sequences", "window": 3})
    err = _refused(tmp_path, job, tmp_path / "out")
    assert "task.horizon: 9 exceeds the dataset's T = 5 snapshots" in err and "strategy.window" not in err
    assert not (tmp_path / "out").exists()


def test_refused_runs_leave_no_directory_they_made(tmp_path, small_dataset):
    jobs = {
        "no-targets": write_job(tmp_path / "a.yaml", small_dataset, model={"name": "tgcn"},
                                task={"name": "regression"}),
        "cache": write_job(tmp_path / "b.yaml", small_dataset, model={"name": "tgcn"},
                           strategy={"name": "sequences", "window": 3, "cache_mb": 0}),
    }
    for name, job in jobs.items():
        _refused(tmp_path, job, tmp_path / "runs" / name)
        assert not (tmp_path / "runs" / name).exists(), name
    mine = tmp_path / "mine"
    mine.mkdir()  # the user's own empty directory: kept
    _refused(tmp_path, jobs["cache"], mine)
    assert mine.is_dir() and not any(mine.iterdir())
    # the default run directory (output.dir/<job>-<time>) goes too
    proc = run_in_process(["run", str(jobs["no-targets"])], mpi_env(), tmp_path)
    assert proc.returncode == 2 and not any((tmp_path / "runs").glob("a-*"))


def _events(root, n=400):
    import gzip

    from hpcdgnn.data.events import write_events
    from tests.conftest import REPO

    with gzip.open(REPO / "inputs" / "CollegeMsg.txt.gz", "rt") as f:
        rows = np.loadtxt(f, dtype=np.int64, max_rows=n)
    ids, inv = np.unique(rows[:, :2], return_inverse=True)
    inv = inv.reshape(-1, 2)
    write_events(root, inv[:, 0], inv[:, 1], (rows[:, 2] - rows[0, 2]) / 86400.0, None, num_vertices=ids.shape[0],
                 bipartite=False, num_sources=None, feature_names=None, original_ids=ids)
    return root, int(ids.shape[0])


TGN = {"name": "tgn", "hidden": 8, "heads": 2, "memory_dim": 8, "time_dim": 4, "neighbors": 4}


def test_more_negatives_than_candidate_destinations_are_refused(tmp_path):
    data, n = _events(tmp_path / "ev")
    job = write_job(tmp_path / "job.yaml", data, model=TGN, strategy={"name": "memory"},
                    task={"name": "temporal_link_prediction", "batch_events": 100, "eval_negatives": 100_000})
    err = _refused(tmp_path, job, tmp_path / "out")
    assert f"task.eval_negatives: 100000 exceeds the stream's {n} candidate destinations" in err
    assert not (tmp_path / "out").exists()


def _middle_of_largest_record(path) -> int:
    """The offset of the middle byte of the largest record (a tensor's storage) in a torch.save zip file."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    raw = path.read_bytes()
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26: info.header_offset + 30])
    return info.header_offset + 30 + name_len + extra_len + info.file_size // 2


def test_a_corrupt_checkpoint_names_its_file_and_the_older_one(tmp_path, small_dataset):
    job = write_job(tmp_path / "job.yaml", small_dataset, checkpoint={"every": 1, "keep": 2})
    proc = run_in_process(["run", str(job), "--output", str(tmp_path / "run")], mpi_env(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    newest = tmp_path / "run" / "checkpoints" / "epoch-000003"
    for name, damage in (("state.pt", "truncated"), ("rank-00000.pt", "truncated"), ("state.pt", "flipped"),
                         ("rank-00000.pt", "flipped")):
        intact = (newest / name).read_bytes()
        if damage == "truncated":  # as by a full disk
            (newest / name).write_bytes(intact[: len(intact) // 3])
            why = f"truncated ({len(intact) // 3} of its {len(intact)} bytes)"
        else:  # a byte flipped in the largest stored tensor's data: torch.load read such a file without a word
            at = _middle_of_largest_record(newest / name)
            (newest / name).write_bytes(intact[:at] + bytes([intact[at] ^ 0x55]) + intact[at + 1:])
            why = "corrupt (its CRC-32 is not the one written)"
        proc = run_in_process(["run", "--resume", str(tmp_path / "run"), "--set", "train.epochs=4"], mpi_env(),
                              tmp_path)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"{newest / name}: checkpoint file {why}; move {newest} aside and run the command " \
               "again (a resume, embed, predict, export): the next older complete checkpoint, epoch-000002, is used" \
               in proc.stderr, proc.stderr
        if name == "state.pt":  # embed reads the same file: the same advice
            proc = run_in_process(["embed", str(tmp_path / "run"), "--output", str(tmp_path / "z.npz")], mpi_env(),
                                  tmp_path)
            assert proc.returncode == 2 and f"move {newest} aside and run the command again" in proc.stderr, \
                proc.stderr
        (newest / name).write_bytes(intact)


def test_a_jodie_header_that_disagrees_with_its_rows_is_refused(tmp_path, capsys):
    from hpcdgnn.__main__ import main

    for header, rows, words in (("u,i,ts,label,f1", "1,2,10,0,0.5,0.7", "6 fields, but the header names 5"),
                                ("u,i,ts,label,f1,f2", "1,2,10,0,0.5", "5 fields, but the header names 6")):
        raw = tmp_path / "x.csv"
        raw.write_text(f"{header}\n{rows}\n{rows}\n")
        assert main(["prepare", str(raw), "--format", "jodie", "--kind", "events", "--output",
                     str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert f"{raw}:2: {words}" in err and err.count("\n") == 1, err
        assert not (tmp_path / "out").exists()


@pytest.mark.mpi  # a run at P = 2
def test_resuming_a_memory_run_on_another_rank_count_says_to_use_its_own(tmp_path, launcher):
    data, _ = _events(tmp_path / "ev")
    job = write_job(tmp_path / "job.yaml", data, model=TGN, train={"epochs": 1},
                    strategy={"name": "memory", "minibatch": 2},
                    task={"name": "temporal_link_prediction", "batch_events": 100, "eval_negatives": 4})
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    assert proc.returncode == 0, proc.stderr
    proc = run_in_process(["run", "--resume", str(tmp_path / "run"), "--set", "train.epochs=2"], mpi_env(), tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the run was made on 2 ranks and strategy memory cannot plan it for 1" in proc.stderr
    assert proc.stderr.rstrip().endswith("resume it on 2 ranks")


@pytest.mark.mpi  # a run at P = 3
def test_resuming_a_grid_run_on_a_rank_count_its_sides_do_not_fit_says_to_use_its_own(tmp_path, launcher,
                                                                                        small_dataset):
    """A grid of 3 vertex ranks resumed at P = 2 said "strategy.vertex_ranks: 3 does not divide P = 2; choose one
    of 1, 2", a change the resume then refuses: it now says to resume on the run's own 3 ranks."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1},
                    strategy={"name": "grid", "vertex_ranks": 3})
    proc = launcher.run(3, ["-m", "hpcdgnn", "run", str(job), "--output", str(tmp_path / "run")])
    assert proc.returncode == 0, proc.stderr
    proc = launcher.run(2, ["-m", "hpcdgnn", "run", "--resume", str(tmp_path / "run"), "--set", "train.epochs=2"])
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "hpcdgnn: error:" in ln]
    assert f"{tmp_path / 'run'}: the run was made on 3 ranks and its job cannot run on 2 (" in line, line
    assert "strategy.vertex_ranks" in line and line.endswith("resume it on 3 ranks"), line


@pytest.mark.parametrize(("strategy", "hidden"), [("hybrid", 10**9), ("sequences", 10**9), ("snapshot", 2**62)])
def test_widths_that_overflow_under_any_strategy_are_one_line(tmp_path, small_dataset, strategy, hidden):
    """The check for a pooling model under a sampled strategy built the model on the meta device outside
    meta_build: T-GCN's cell at hidden 1e9 under hybrid or sequences was torch's "Storage size calculation
    overflowed" traceback; a width past int64 itself (2^62 · 3) torch's TypeError "Overflow when unpacking"."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn_cell", "hidden": hidden, "layers": 1},
                    strategy={"name": strategy})
    proc = run_in_process(["check", str(job)], mpi_env(), tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"model.hidden: {hidden} makes a weight of more than 2^63 bytes; lower it" in proc.stderr, proc.stderr


def test_a_time_encoding_too_wide_for_memory_is_refused_without_building_it(tmp_path):
    """model.time_dim: 1e9 made ``check`` allocate TimeEncoding's numpy frequencies (16 GB resident, killed after
    minutes) while the footprint counted the model's weights on the meta device; 1e12 was "check: out of memory"
    naming no key. The meta build makes no host array, so the footprint's one line names the key."""
    data, _ = _events(tmp_path / "ev")
    job = write_job(tmp_path / "tgn.yaml", data, model={**TGN, "time_dim": 10**12},
                    task={"name": "temporal_link_prediction", "batch_events": 50}, strategy={"name": "memory"})
    proc = run_in_process(["check", str(job)], mpi_env(), tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "this job needs at least" in proc.stderr and "model.time_dim" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", ["run", "check", "plan"])
def test_widths_whose_weights_overflow_a_byte_count_are_one_line(tmp_path, small_dataset, command):
    """model.hidden: 1e9 makes a (4e9, 1e9) LSTM weight whose byte count overflows even on the meta device: the
    one line naming the key (it was torch's RuntimeError, 29 frames), as a TGN's memory_dim of 1e10 is."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn", "hidden": 10**9})
    tail = {"run": ["--output", str(tmp_path / "out")], "check": ["--ranks", "2"], "plan": ["--ranks", "2"]}
    proc = run_in_process([command, str(job), *tail[command]], mpi_env(), tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "model.hidden: 1000000000 makes a weight of more than 2^63 bytes; lower it" in proc.stderr
    assert not (tmp_path / "out").exists()
    # the task head's width too (a decoder of 1e18 blamed model.hidden: 6)
    job = write_job(tmp_path / "dec.yaml", small_dataset, model={"name": "cdgcn", "hidden": 6},
                    task={"name": "link_prediction", "decoder_hidden": 10**18})
    proc = run_in_process([command, str(job), *tail[command]], mpi_env(), tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "task.decoder_hidden" in proc.stderr, \
        proc.stderr
    assert "model.hidden: 6 makes" not in proc.stderr
    if command == "run":
        data, _ = _events(tmp_path / "ev")
        job = write_job(tmp_path / "tgn.yaml", data, model={**TGN, "memory_dim": 10**10},
                        task={"name": "temporal_link_prediction", "batch_events": 50}, strategy={"name": "memory"})
        err = _refused(tmp_path, job, tmp_path / "out")
        assert "model.memory_dim: 10000000000 makes a weight of more than 2^63 bytes" in err
