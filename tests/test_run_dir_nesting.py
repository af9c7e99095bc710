"""A new run directory is never made inside another run's: ``hpcdgnn.train(job, output="runs")`` made ``runs`` a
run directory, and every later run with the default ``output.dir: runs`` was then made inside it."""

from __future__ import annotations

import pytest

from hpcdgnn.errors import ConfigError
from hpcdgnn.metrics import choose_run_dir
from tests.conftest import mpi_env, run_in_process, write_job


@pytest.mark.parametrize("other", ["plan.json", "summary.json"])
def test_choose_run_dir_refuses_a_place_inside_a_run_directory(tmp_path, other):
    """``--output`` anywhere below a run directory, or an ``output.dir`` that is one (or is below one): one line
    naming the run directory and its files; nothing made. A resolved job kept alone (a user's copy as a job file)
    makes no run directory."""
    run = tmp_path / "runs"
    run.mkdir()
    (run / "config.resolved.yaml").write_text("{}\n")
    assert choose_run_dir(str(run / "sub"), "unused", "job") == run / "sub"
    (run / "sub").rmdir()
    (run / other).write_text("{}\n")
    marker = f"config.resolved.yaml and {other}"
    for output in (run / "sub", run / "a" / "b"):
        with pytest.raises(ConfigError) as e:
            choose_run_dir(str(output), "unused", "job")
        assert str(e.value) == (f"--output {output}: {run} is a run directory (it holds {marker}), and a new run's "
                                "directory inside it would mix with that run's files; give --output or output.dir a "
                                "directory outside it"), e.value
    for parent, which in ((run, "it"), (run / "deeper", run)):
        with pytest.raises(ConfigError, match=rf"^output.dir: {parent}: {which} is a run directory \(it holds "
                                              rf"{marker}\)"):
            choose_run_dir(None, str(parent), "job")
    assert sorted(p.name for p in run.iterdir()) == sorted(["config.resolved.yaml", other])
    assert choose_run_dir(None, str(tmp_path / "other"), "job").parent == tmp_path / "other"  # beside it: as ever


def test_a_run_inside_a_run_is_refused_from_the_command_and_the_api(tmp_path, small_dataset, monkeypatch):
    """The command's ``--output`` and the API's ``output=``, and the default output.dir once ``runs`` is a run
    directory: refused in one line, exit 2 from the command, nothing made inside the first run."""
    import hpcdgnn

    monkeypatch.chdir(tmp_path)
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})  # output.dir: tmp_path/runs
    first = hpcdgnn.train(job, output=tmp_path / "runs")
    before = sorted(p.name for p in first.dir.iterdir())
    with pytest.raises(ConfigError, match=rf"^{job}: output.dir: {tmp_path / 'runs'}: it is a run "
                                          r"directory \(it holds [a-z. ]+\), .*; give output= or output.dir a "
                                          "directory outside it$"):
        hpcdgnn.train(job)
    with pytest.raises(ConfigError, match=rf"^output={first.dir / 'inner'}: {first.dir} is a run directory"):
        hpcdgnn.train(job, output=first.dir / "inner")
    proc = run_in_process(["run", str(job), "--output", str(first.dir / "inner")], mpi_env(), tmp_path)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"hpcdgnn: error: --output {first.dir / 'inner'}: {first.dir} is a run directory")
    assert sorted(p.name for p in first.dir.iterdir()) == before
