"""Two ``prepare --force`` (here ``generate --force``) to one output at once: exactly one wins, the other says so in
one line, no dataset is lost and nothing hidden is left."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from hpcdgnn.data.manifest import load_manifest
from hpcdgnn.data.writer import RawSnapshot, write_dataset

REPO = Path(__file__).resolve().parents[2]

#: ``generate --force`` to ``sys.argv[1]`` that, the earlier dataset set aside and its own about to be renamed into
#: place, says ``aside`` and waits for a line on stdin: the test runs the other prepare meanwhile
_PAUSED = """
import os, sys
from pathlib import Path
root, rename = Path(sys.argv[1]), os.rename

def paused(src, dst):
    if Path(dst) == root and Path(src).name.startswith(f".{root.name}.tmp-"):
        print("aside", flush=True)
        sys.stdin.readline()
    return rename(src, dst)

os.rename = paused
import runpy  # `python -m hpcdgnn generate ...`, which starts no MPI job
sys.argv = ["hpcdgnn", "generate", "--output", str(root), "--vertices", "50", "--density", "2", "--seed", "1",
            "--snapshots", "3", "--force"]
runpy.run_module("hpcdgnn", run_name="__main__", alter_sys=True)
"""


def _snapshots(t: int) -> list[RawSnapshot]:
    return [RawSnapshot(src=np.array([0, 2]), dst=np.array([1, 3])) for _ in range(t)]


def test_of_two_prepares_force_to_one_output_one_wins_and_the_other_says_so(tmp_path):
    """The loser, between setting the earlier dataset aside and renaming its own in, found the winner's dataset in
    place and said 'the earlier dataset is at .d.old-XXXXXXXX', a directory the winner had already removed. Now it
    says in one line that another prepare replaced the output meanwhile (exit 2); the winner's dataset is in place
    and nothing hidden is left beside it."""
    root = tmp_path / "d"
    write_dataset(root, _snapshots(2), num_vertices=5)
    loser = subprocess.Popen([sys.executable, "-c", _PAUSED, str(root)], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in loser.stdout:
            if line.strip() == "aside":
                break
        write_dataset(root, _snapshots(4), num_vertices=5, force=True)  # the winner: this process
        out, err = loser.communicate("\n", timeout=120)
    finally:
        if loser.poll() is None:
            loser.kill()
            loser.wait()
    assert loser.returncode == 2, err
    assert err.splitlines() == [f"hpcdgnn: error: {root}: another prepare replaced the output meanwhile (two prepares "
                                "into one --output?); its dataset is kept, and this one discarded"]
    assert load_manifest(root).num_snapshots == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
