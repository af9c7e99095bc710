"""README.md's "Running your own data" commands run as written.

Every ```bash block of that section runs, line for line and unchanged, under ``bash -e`` in a scratch
directory laid out like the checkout: ``.venv`` is this test's virtual environment, ``jobs/`` the
repository's, ``inputs/CollegeMsg.txt.gz`` the bundled input. What the commands write (``data/``,
``runs/``) stays in the scratch directory, the profiler's predictor goes to a temporary
``HPCDGNN_CACHE``. The environment has no ``OMPI_*`` variable and this machine (CI: root, 2 cores) is
what the README promises to work on: the launcher the README shows must supply what Open MPI needs.
No line is skipped; keep the block cheap (small datasets, few epochs): it runs in every full test run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, read_metrics

SECTION = "## Running your own data"


def readme_blocks(text: str, section: str = SECTION) -> list[str]:
    """The ```bash blocks between ``section`` and the next ``## `` heading."""
    start = text.index(section + "\n")
    end = text.find("\n## ", start + len(section))
    body = text[start : end if end >= 0 else len(text)]
    return re.findall(r"^```bash\n(.*?)^```$", body, flags=re.S | re.M)


BLOCKS = readme_blocks((REPO / "README.md").read_text())
INPUT = REPO / "inputs" / "CollegeMsg.txt.gz"


def launches(blocks: list[str]) -> list[str]:
    """The ``hpcdgnn-mpirun`` commands of ``blocks``, each on one line (continuation lines joined)."""
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [ln for ln in lines if ln.startswith("hpcdgnn-mpirun")]


def test_the_section_has_commands_and_no_hand_copied_settings():
    """Commands, launched with hpcdgnn-mpirun, no Open MPI variables or flags typed by hand, no missing files."""
    assert BLOCKS, f"no ```bash block under {SECTION!r}"
    code = [ln for b in BLOCKS for ln in b.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert not any("OMPI_" in ln or "--oversubscribe" in ln for ln in code), "the launcher sets these, not the user"
    assert not any(re.match(r"\s*(mpirun|mpiexec)\b", ln) for ln in code), "launch with hpcdgnn-mpirun"
    for ln in code:  # every file a command names exists (no job.yaml placeholder)
        for name in re.findall(r"\bjobs/[\w.-]+\.ya?ml\b", ln):
            assert (REPO / name).is_file(), name


@pytest.mark.mpi  # the block launches hpcdgnn-mpirun (through bash, where conftest cannot see it)
def test_readme_commands_run_as_written(tmp_path):
    """The block runs to the end and leaves what it promises."""
    if not INPUT.exists():
        pytest.skip(f"no {INPUT}")
    work = tmp_path / "checkout"
    (work / "inputs").mkdir(parents=True)
    (work / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    (work / "jobs").symlink_to(REPO / "jobs", target_is_directory=True)
    (work / "inputs" / INPUT.name).symlink_to(INPUT)
    script = work / "readme.sh"
    script.write_text("set -x\n" + "\n".join(BLOCKS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PRTE_", "PMIX_", "HPCDGNN_"))}
    env.update(HPCDGNN_CACHE=str(tmp_path / "cache"), PYTHONWARNINGS="ignore")
    proc = subprocess.run(["bash", "-e", str(script)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"

    # what the commands promise: the datasets, a completed run per launch on the ranks asked for, the predictor
    assert (work / "data" / "collegemsg" / "manifest.json").is_file()
    assert (work / "data" / "rand16" / "manifest.json").is_file()
    runs = sorted(p.parent for p in (work / "runs").glob("*/summary.json"))
    assert len(runs) == len(launches(BLOCKS)) >= 1, runs
    for launch in launches(BLOCKS):
        out = re.search(r"--output (\S+)", launch)
        (run,) = [work / out[1]] if out else runs
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "completed"
        assert summary["final"]["val_auc"] is not None, "the example's validation split has no examples"
        assert summary["environment"]["num_ranks"] == int(re.search(r"-np (\d+)", launch)[1])
        epochs = re.search(r"train\.epochs=(\d+)", launch)
        if epochs:
            assert len(read_metrics(run)) == int(epochs[1])
    assert list((tmp_path / "cache").glob("workload-*.pt")), proc.stdout[-2000:]
