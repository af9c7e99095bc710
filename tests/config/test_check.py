"""``python -m hpcdgnn check`` (a dry run: what a run would start with, or its error) and ``check --schema``."""

from __future__ import annotations

import json

import pytest
import yaml

from hpcdgnn.__main__ import main
from tests.conftest import REPO, mpi_env, run_in_process, write_job


def _check(capsys, *args) -> tuple[int, str, str]:
    code = main(["check", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_prints_what_the_run_then_starts_with(tmp_path, small_dataset, capsys):
    """The resolved configuration and the plan are those the run writes (config.resolved.yaml, plan.json)."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy={"name": "vertex"})
    code, out, err = _check(capsys, job, "--ranks", 1, "--json")
    assert code == 0, err
    checked = json.loads(out)
    run = run_in_process(["run", str(job), "--output", str(tmp_path / "run")], mpi_env(), tmp_path)
    assert run.returncode == 0, run.stderr
    assert checked["config"] == yaml.safe_load((tmp_path / "run" / "config.resolved.yaml").read_text())
    assert checked["plan"] == json.loads((tmp_path / "run" / "plan.json").read_text())
    assert checked["memory"]["lower_bound_bytes"] > 0 and checked["memory"]["predicted"]["bytes"] > 0

    code, out, _ = _check(capsys, job, "--ranks", 3, "--memory-per-rank", "1GiB")
    assert code == 0
    assert "# resolved configuration" in out and "name: vertex" in out
    table = out.split("# plan: strategy vertex, 3 ranks\n")[1].split("\n\n")[0].splitlines()
    assert table[0].split()[0] == "rank" and [r.split()[0] for r in table[1:]] == ["0", "1", "2"]
    assert "host share 1,024.00 MiB: --memory-per-rank" in out and "predicted peak" in out
    assert not (tmp_path / "runs").exists(), "a check makes no run directory"


@pytest.mark.parametrize(("args", "message"), [
    (["--ranks", "2", "--set", "strategy.name=grid", "strategy.snapshot_ranks=2", "strategy.vertex_ranks=2"],
     "strategy.snapshot_ranks: 2 × strategy.vertex_ranks 2 = 4, but the job has P = 2 ranks"),
    (["--ranks", "2", "--memory-per-rank", "1KiB"], "this job needs at least"),
    (["--set", "model.hiden=3"], "model.hiden: unknown option of model 'cdgcn'; did you mean 'hidden'?"),
    (["--ranks", "0"], "check --ranks: 0"),
    # a plan holds every rank's part: 10^8 ranks never finished
    (["--ranks", "100000000"], "check --ranks: 100000000 is more than 1,048,576 ranks"),
    (["--ranks-per-node", "0"], "check --ranks-per-node: 0; a node runs at least 1 rank"),
])
def test_a_job_a_run_would_refuse_gets_its_one_line_error(tmp_path, small_dataset, capsys, args, message):
    job = write_job(tmp_path / "job.yaml", small_dataset)
    code, out, err = _check(capsys, job, *args)
    assert code == 2 and out == "", out
    assert err.count("\n") == 1 and err.startswith("hpcdgnn: error: ") and message in err, err


def test_check_without_a_job_says_so(capsys):
    code, _, err = _check(capsys)
    assert code == 2 and "check: give a job YAML (or --schema)" in err


def test_the_schema_accepts_every_shipped_job_and_rejects_what_the_loader_rejects(capsys):
    jsonschema = pytest.importorskip("jsonschema")
    code, out, _ = _check(capsys, "--schema")
    assert code == 0
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    jobs = sorted(REPO.glob("jobs/*.yaml")) + sorted(REPO.glob("jobs/examples/*.yaml"))
    assert len(jobs) > 20
    for path in jobs:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert not errors, (path.name, errors[:3])
    good = {"data": {"path": "d"}, "model": {"name": "tgcn", "hidden": 8}, "strategy": {"blocks": 2}}
    assert validator.is_valid(good)
    for bad in ({"data": {"path": "d"}, "model": {"name": "cdgcn", "hiden": 8}},   # a misspelt key
                {"data": {"path": "d"}, "train": {"epochs": "3"}},                 # "3" is not an integer
                {"data": {"path": "d"}, "strategy": {"name": "pss", "blocks": 2}},  # another strategy's option
                {"model": {"name": "cdgcn"}}):                                     # no data
        assert not validator.is_valid(bad), bad


def test_the_host_share_says_how_it_was_divided(tmp_path, small_dataset, capsys):
    """By default the host is divided by min(P, CPUs) ranks a node, and the line says how to give the count that
    a run oversubscribing this machine would divide by (--ranks-per-node); given, it is used."""
    import os

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"device": "cpu"})
    P = (os.cpu_count() or 1) + 1
    code, out, err = _check(capsys, job, "--ranks", P)
    assert code == 0, err
    assert f"/ {P - 1} ranks a node: min(P, its {P - 1} CPUs); --ranks-per-node R for R" in out, out
    code, out, err = _check(capsys, job, "--ranks", P, "--ranks-per-node", P, "--json")
    assert code == 0, err
    from hpcdgnn.comm.device import node_memory

    memory = json.loads(out)["memory"]
    assert memory["host_share_bytes"] == node_memory() / P and memory["host_share_from"].endswith(
        f"/ {P} ranks (train.device: cpu runs on the CPU here)")


def test_check_names_the_set_that_gave_a_key_as_a_run_does(tmp_path, small_dataset, capsys):
    """Errors of checks over several keys or the dataset said ``job.yaml: KEY`` for a key only a ``--set``
    gave (a run said ``--set KEY``); ε above 1 blamed ``epsilon_min``, which the user never set."""
    job = write_job(tmp_path / "job.yaml", small_dataset)
    for args, message in [
        (["--ranks", "3", "--set", "strategy.name=grid", "strategy.snapshot_ranks=2"],
         "hpcdgnn: error: --set strategy.snapshot_ranks: 2 does not divide P = 3; choose one of 1, 3"),
        (["--set", "strategy.name=grid", "strategy.vertex_ranks=-1"],  # a rule naming two keys of a section
         "hpcdgnn: error: --set strategy.snapshot_ranks, vertex_ranks: must be >= 0"),
        (["--set", "strategy.name=hybrid", "strategy.adjuster.kind=dqn", "strategy.adjuster.epsilon=1.5"],
         "hpcdgnn: error: --set strategy.adjuster.epsilon: 1.5 must be in [0, 1]"),
        (["--set", "task.name=link_prediction", "strategy.name=sequences", "strategy.window=99"],
         "hpcdgnn: error: --set strategy.window: 99"),
    ]:
        code, out, err = _check(capsys, job, *args)
        assert code == 2 and err.startswith(message), (args, err)
    # a key neither the file nor a --set gave is the default's: said so
    code, _, err = _check(capsys, job, "--set", "strategy.name=sequences", "task.split=[0.1,0.45,0.45]")
    assert code == 2 and "job.yaml: strategy.window (not in the file: its default): 4 with stride 1" in err, err
    code, _, err = _check(capsys, job, "--set", "strategy.name=hybrid", "strategy.adjuster.kind=dqn",
                          "strategy.adjuster.epsilon=0.2", "strategy.adjuster.epsilon_min=0.3")
    assert code == 2 and "--set strategy.adjuster.epsilon_min: 0.3 must be in [0, epsilon = 0.2]" in err, err


def test_a_rule_over_two_keys_names_the_set_that_gave_the_other():
    """TGN's width rule blames ``model.hidden`` from the file; the ``--set model.heads`` that broke it is said too
    (a key of another section, or one the problem does not name, is not)."""
    from hpcdgnn.config.load import blame_override

    message = "job.yaml: model.hidden: 16 is not a multiple of heads: 3"
    assert blame_override(message, "job.yaml", ["model.heads=3"]) == f"{message} (with --set model.heads=3)"
    assert blame_override(message, "job.yaml", ["task.heads=3", "model.layers=2"]) == message
    assert blame_override(message, "job.yaml", ["model.hidden=16", "model.heads=3"]) == \
        "--set model.hidden: 16 is not a multiple of heads: 3"


def test_check_refuses_nccl_on_the_cpu_as_a_run_does(tmp_path, small_dataset, capsys):
    """``comm.backend: nccl`` on a CPU-only job passed ``check`` ("a run would start"); the run then refused it at
    device selection. check now says the run's line, exit 2."""
    job = write_job(tmp_path / "job.yaml", small_dataset, comm={"backend": "nccl"}, train={"device": "cpu"})
    assert main(["check", str(job), "--ranks", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "comm.backend: nccl needs a GPU per rank, and this job runs on the CPU (train.device: " \
        "cpu); use mpi or gloo" in err[0], err


def test_an_allocation_that_fails_in_check_names_the_job_s_size_keys(tmp_path, small_dataset, capsys):
    """``model.layers: 2^62`` under hybrid failed in check's model sizing with 'out of memory (MemoryError); ask for
    less (sizes, --snapshots)', a line for prepare's inputs; a job command's line names the job's size keys."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy={"name": "hybrid"})
    assert main(["check", str(job), "--ranks", "2", "--set", f"model.layers={2**62}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hpcdgnn: error: check: out of memory (") and \
        "); lower model.hidden, model.layers, task.decoder_hidden" in err[0], err


def test_the_memory_of_many_ranks_is_summarised(tmp_path, small_dataset, capsys):
    """``check --ranks 200`` printed 200 ranks' memory on one line: beyond 8 ranks min, median and max (with the
    ranks of the extremes); the JSON keeps every rank's."""
    job = write_job(tmp_path / "job.yaml", small_dataset, strategy={"name": "vertex"})
    code, out, err = _check(capsys, job, "--ranks", 12, "--memory-per-rank", "1GiB")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("  by rank: "))
    code, out, err = _check(capsys, job, "--ranks", 12, "--memory-per-rank", "1GiB", "--json")
    ranks = [b / 2**20 for b in json.loads(out)["memory"]["predicted"]["by_rank"]]
    assert len(ranks) == 12
    low, high = ranks.index(min(ranks)), ranks.index(max(ranks))
    median = sum(sorted(ranks)[5:7]) / 2
    assert line == (f"  by rank: min {ranks[low]:,.1f} (rank {low}), median {median:,.1f}, max {ranks[high]:,.1f} "
                    f"(rank {high}) MiB over 12 ranks; --json lists each rank's")
    code, out, err = _check(capsys, job, "--ranks", 3, "--memory-per-rank", "1GiB")
    assert "  by rank: 0:" in out and " 2:" in out


def test_check_names_a_sampled_strategys_inputs_as_held_on_the_host(tmp_path, small_dataset, capsys):
    """hybrid keeps its closure's rows on the host: the line said "inputs 0.00 MiB" (the resident part) beside
    "host ...", read as "the run reads nothing"; now a part of 0 is left out and the host part is named inputs."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "tgcn_cell", "layers": 1},
                    strategy={"name": "hybrid"})
    code, out, err = _check(capsys, job, "--ranks", 2)
    assert code == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("predicted peak")]
    assert "inputs 0.00 MiB" not in line and "host-held inputs " in line, line
    code, out, err = _check(capsys, job, "--ranks", 2, "--json")
    assert json.loads(out)["memory"]["predicted"]["parts"]["inputs"] == 0  # the JSON keeps every part
