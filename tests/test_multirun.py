"""The harness's ``Launcher.run_many`` (tests/multirun.py): one launch, one finished process per command — a
refused command's status and line, the next command still run, each command's output its own."""

from __future__ import annotations

from tests.conftest import read_metrics, write_job


def test_commands_of_one_launch_keep_their_own_status_and_output(launcher, small_dataset, tmp_path):
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 2})
    bad, good = launcher.run_many(2, [["run", str(job), "--output", str(tmp_path / "bad"), "--set", "model.hiden=3"],
                                      ["run", str(job), "--output", str(tmp_path / "good")]])
    assert bad.returncode == 2 and "model.hiden: unknown option" in bad.stderr and "epoch" not in bad.stdout
    assert good.returncode == 0, good.stderr
    assert good.stdout.count("done: 2 epochs") == 1 and "hiden" not in good.stderr  # rank 0 logs; its own lines
    assert len(read_metrics(tmp_path / "good")) == 2 and not (tmp_path / "bad").exists()
