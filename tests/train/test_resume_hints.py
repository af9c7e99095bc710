"""The lines that tell a user how to go on: a taken ``--output`` says to resume it or pick another, and a
pre-emption spells out the whole resume command with the launcher this rank was started by."""

from types import SimpleNamespace

import pytest

from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics import choose_run_dir
from hpcdgnn.train import trainer


def test_a_taken_output_says_what_to_do(tmp_path):
    """It said only that a run never overwrites another; now: resume the run there, or give another --output."""
    run = tmp_path / "x"
    run.mkdir()
    (run / "config.resolved.yaml").write_text("{}\n")
    with pytest.raises(ConfigError) as e:
        choose_run_dir(str(run), "runs", "job")
    assert str(e.value) == (f"--output {run}: directory exists and is not empty; a run never overwrites another: "
                            f"resume it with --resume {run}, or give another --output")
    other = tmp_path / "notes"
    other.mkdir()
    (other / "a.txt").write_text("mine\n")
    with pytest.raises(ConfigError, match=r"never overwrites another: give another --output$"):  # not a run
        choose_run_dir(str(other), "runs", "job")


@pytest.mark.parametrize(("environ", "prefix"), [
    ({}, ""),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "mpirun -np 2 "),
    ({"OMPI_COMM_WORLD_SIZE": "3", "HPCDGNN_MPIRUN_ACTIVE": "123"}, "hpcdgnn-mpirun -np 3 "),
    ({"SLURM_STEP_ID": "0", "SLURM_NTASKS": "4"}, "srun -n 4 "),
    ({"SLURM_STEP_ID": "batch", "SLURM_NTASKS": "4"}, ""),  # the batch script: no srun step started this one
])
def test_the_launcher_a_resume_repeats(environ, prefix):
    """The launcher and rank count as this rank's environment names them."""
    assert trainer._launch_prefix(environ) == prefix


def test_the_preemption_line_spells_out_the_resume_command(monkeypatch):
    """It said "resume with --resume runs/x"; now the command too, launcher included (the Python API's call as
    before)."""
    for var in ("OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMI_SIZE", "JSM_NAMESPACE_SIZE", "SLURM_STEP_ID",
                "SLURM_STEPID", "HPCDGNN_MPIRUN_ACTIVE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    run = SimpleNamespace(run_dir="runs/x")
    assert trainer._resume_words(run) == "--resume runs/x: mpirun -np 2 python -m hpcdgnn run --resume runs/x"
    token = trainer.RESTART_WORDS.set(("hpcdgnn.train(None, resume={!r})", "output=", "{}={}"))
    try:
        assert trainer._resume_words(run) == "hpcdgnn.train(None, resume='runs/x')"
    finally:
        trainer.RESTART_WORDS.reset(token)
