"""The quick subset (`bash tests/run.sh --quick`): defined by markers, not a list — the tests that start no MPI
job (not marked `mpi`) plus the ones marked `quick`, one exactness case per strategy (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from tests.conftest import REPO, launches_mpi_job


@pytest.mark.parametrize(
    ("argv", "job"),
    [
        (["/v/bin/mpirun", "--oversubscribe", "-np", "3", "/v/bin/python", "-m", "hpcdgnn", "run", "j.yaml"], True),
        (["mpiexec", "-n", "2", "python", "x.py"], True),
        (["/v/bin/hpcdgnn-mpirun", "-np", "2", "python", "-c", "pass"], True),
        (["/v/bin/python", "-m", "hpcdgnn.launch", "-np", "2", "prog"], True),
        (["/v/bin/python", "-m", "hpcdgnn", "run", "j.yaml", "--output", "r"], True),  # a singleton MPI job
        (["/v/bin/python", "-m", "hpcdgnn", "prepare", "email", "data/x"], False),
        (["/v/bin/python", "-c", "from hpcdgnn.launch import main"], False),
        (["/v/bin/python", "-c", "from mpi4py import MPI; print(MPI.COMM_WORLD.size)"], True),
        (["/v/bin/python", "-c", "from hpcdgnn.__main__ import main; main(['run', 'j.yaml'])"], True),
        (["/v/bin/python", "-c", "import hpcdgnn.config"], False),
        (["/v/bin/mpirun", "--version"], False),
        (["/v/bin/python", "-m", "hpcdgnn.launch"], False),  # nothing to start: a usage error
        (["/v/bin/hpcdgnn-mpirun", "--print", "-np", "2"], False),
        (["bash", "jobs/local.sh"], False),
        ("mpirun -np 2 python x.py", False),  # a shell line: no test launches so
    ],
)
def test_what_starts_an_mpi_job(argv, job):
    """An MPI launcher given a program, or a training run (a singleton MPI job); not a launcher's --version or
    --print, nor other hpcdgnn commands and Python code."""
    assert launches_mpi_job(argv, env={}) is job


def test_a_stand_in_launcher_starts_no_job(tmp_path):
    """A stand-in mpirun written under the temporary directory, or hpcdgnn-mpirun pointed at one, is no MPI."""
    fake = tmp_path / "mpirun"
    assert not launches_mpi_job([str(fake), "-np", "2", "prog"], env={}, stand_ins=tmp_path)
    assert not launches_mpi_job(["hpcdgnn-mpirun", "-np", "2", "prog"], env={"HPCDGNN_MPIRUN": str(fake)},
                                stand_ins=tmp_path)
    assert launches_mpi_job(["hpcdgnn-mpirun", "-np", "2", "prog"], env={"HPCDGNN_MPIRUN": "/usr/bin/mpirun"},
                            stand_ins=tmp_path)


SUITE = '''
import subprocess

import pytest

from tests.conftest import run_launched


def _start(*argv):
    try:  # a program that is not there: Popen raises after the guard has looked at the command
        subprocess.run(["/nonexistent/" + argv[0], *argv[1:]])
    except FileNotFoundError:
        pass


def test_unit():
    pass


def test_unmarked_job():
    _start("mpirun", "-np", "3", "python", "x.py")


def test_unmarked_training_run():
    _start("python", "-m", "hpcdgnn", "run", "job.yaml")


@pytest.mark.mpi
def test_marked_job():
    _start("mpirun", "-np", "3", "python", "x.py")


@pytest.mark.parametrize("case", [pytest.param("a", marks=pytest.mark.quick(strategy="snapshot")), "b"])
@pytest.mark.mpi
def test_marked_quick_case(case):
    _start("mpirun", "-np", "3", "python", "x.py")


def test_fixture(launcher):
    pass


@pytest.mark.parametrize("launcher", ["srun"])
def test_a_parameter_named_launcher(launcher):
    pass


def test_helper():
    assert run_launched  # named: the test launches


@pytest.mark.slow
def test_slow():
    pass
'''


#: both runs of SUITE in one interpreter (the guard puts subprocess.Popen back at the end of each)
RUN_TWICE = """
import sys, pytest
args = ["-rA", "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", sys.argv[1], "test_suite.py"]
pytest.main([*args, "--basetemp", sys.argv[1] + "/full"])
print("=== QUICK ===")
pytest.main([*args, "--basetemp", sys.argv[1] + "/quick", "--quick"])
"""


def _outcomes(text: str) -> dict[str, str]:
    """{test name: PASSED/FAILED/ERROR} from pytest's -rA summary lines."""
    out = {}
    for ln in text.splitlines():
        word, _, rest = ln.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            out[rest.split("::", 1)[1].split(" ")[0]] = word
    return out


def test_quick_selects_by_marker_and_an_unmarked_job_fails(tmp_path):
    """An MPI launch or a training run in a test not marked `mpi` fails it, saying so; the `launcher` fixture and
    `run_launched` mark a test (a parameter named launcher does not). --quick keeps the unmarked tests and the
    `quick` case and leaves out the other `mpi` tests and the `slow` one."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_suite.py").write_text(SUITE)
    proc = subprocess.run([sys.executable, "-c", RUN_TWICE, str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    full_text, _, quick_text = proc.stdout.partition("=== QUICK ===")
    full, quick = _outcomes(full_text), _outcomes(quick_text)
    assert full and quick, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert full.pop("test_unmarked_job") == full.pop("test_unmarked_training_run") == "FAILED", full
    assert "is not marked `mpi`" in full_text
    assert set(full.values()) == {"PASSED"} and len(full) == 8, full
    assert "deselected" in quick_text
    assert set(quick) == {"test_unit", "test_unmarked_job", "test_unmarked_training_run",
                          "test_marked_quick_case[a]", "test_a_parameter_named_launcher[srun]"}, quick


def _row(item) -> dict:
    """A collected test's marks: ``mpi``, the strategy of its ``quick`` mark (None: none), in the quick subset."""
    from tests.conftest import in_quick

    mark = item.get_closest_marker("quick")
    return {"id": item.nodeid, "mpi": item.get_closest_marker("mpi") is not None, "in_quick": in_quick(item),
            "quick": None if mark is None else mark.kwargs.get("strategy", "")}


RECORD = """
import json, sys, pytest
from tests.conftest import COLLECTED
from tests.quick.test_quick import _row

class Record:
    def pytest_collection_finish(self, session):
        rows = [_row(i) | {"kept": i in session.items} for i in session.config.stash[COLLECTED]]
        json.dump(rows, open(sys.argv[1], "w"))

sys.exit(pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider", "--quick", "tests"], plugins=[Record()]))
"""


def _suite(request, tmp_path) -> list[dict]:
    """Every test of the suite, :func:`_row`: this session's own when it collected all of tests/ (what
    `bash tests/run.sh` and `--quick` do), else from a --quick collection in a subprocess, where the tests it
    kept are checked to be the ones :func:`in_quick` names."""
    from tests.conftest import COLLECTED

    config = request.config
    if {(config.invocation_params.dir / a.split("::")[0]).resolve() for a in config.args} <= {REPO, REPO / "tests"}:
        return [_row(item) for item in config.stash[COLLECTED]]
    proc = subprocess.run([sys.executable, "-c", RECORD, str(tmp_path / "rows.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert all(r["kept"] == r["in_quick"] for r in rows), [r["id"] for r in rows if r["kept"] != r["in_quick"]]
    return rows


def test_the_suite_s_quick_subset(request, tmp_path):
    """On the real suite: of the `mpi` tests the quick subset holds exactly the `quick` ones, one per strategy
    and every strategy one; it holds every test marked neither `mpi` nor `slow`. The `mpi` tests are the ones
    that launch (a fixture, a helper, a hand mark); tests of pure functions are not."""
    from hpcdgnn.strategies import available_strategies

    rows = {r["id"]: r for r in _suite(request, tmp_path)}
    kept = {i for i, r in rows.items() if r["in_quick"]}
    mpi = {i for i, r in rows.items() if r["mpi"]}
    quick_jobs = Counter(r["quick"] for r in rows.values() if r["mpi"] and r["quick"] is not None)
    assert quick_jobs == Counter(available_strategies()), quick_jobs  # one MPI case per strategy, no other
    assert kept & mpi == {i for i in mpi if rows[i]["quick"] is not None}
    assert len(kept) < len(rows) and any(i.startswith("tests/config/") for i in kept)
    for i in ("tests/train/test_exactness.py::test_losses_match_single_process[evolvegcn_o-float64]",  # fixture
              "tests/readme/test_launch.py::test_real_mpirun_three_ranks_without_any_variable_set",  # run_launched
              "tests/strategies/test_one_rank.py::test_every_strategy_matches_snapshot_at_one_rank"):  # by hand
        assert i in mpi and i not in kept, i
    for i in ("tests/readme/test_launch.py::test_open_mpi_as_root_on_fewer_cores",
              "tests/jobs/test_job_scripts.py::test_cpus_per_task_reaches_srun_but_not_mpirun_s_daemons[srun]"):
        assert i in kept and i not in mpi, i
    assert "$@" in (REPO / "tests" / "run.sh").read_text()  # run.sh hands its arguments (--quick) to pytest
