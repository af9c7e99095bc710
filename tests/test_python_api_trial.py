"""What a user coming from PyG / PyG Temporal does with the Python API next (hpcdgnn/api.py): its messages name
the API's arguments, not the commands' flags."""

from __future__ import annotations

import pytest

import hpcdgnn
from hpcdgnn.errors import ConfigError
from tests.conftest import write_job


def test_embed_and_predict_messages_advise_the_api_s_arguments(tmp_path, small_dataset, monkeypatch):
    """predict's advice ("give --pairs FILE", "drop --split") named the command's flags, which a Python caller
    has no way to pass; in ``TrainedRun.embed`` / ``predict`` they are the keyword arguments."""
    from hpcdgnn.api import _PASS_ARGUMENTS, _named

    for message, want in [
        ("predict /r: task.name: link_prediction scores pairs: give --pairs FILE",
         "predict /r: task.name: link_prediction scores pairs: give pairs=FILE"),
        ("predict /r: task.name: regression predicts node targets: give --split, not --pairs",
         "predict /r: task.name: regression predicts node targets: give split, not pairs"),
        ("predict /r: --split test: only node tasks take it; the rows of --pairs /a/p.txt name their own step t "
         "(drop --split)",
         "predict /r: split=test: only node tasks take it; the rows of pairs=/a/p.txt name their own step t "
         "(drop split)"),
        ("--pairs /a--split/p.txt: row 0: t = 9 is outside 0 .. 6", "pairs=/a--split/p.txt: row 0: t = 9 is outside "
         "0 .. 6"),
    ]:
        assert str(_named(ConfigError(message), None, _PASS_ARGUMENTS)) == want
    monkeypatch.chdir(tmp_path)
    run = hpcdgnn.train(write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1}), output="r")
    with pytest.raises(ConfigError, match=r"link_prediction scores pairs: give pairs=FILE$") as e:
        run.predict(tmp_path / "s.csv")
    assert "--" not in str(e.value)


_INTERRUPTED_IMPORT = """
import importlib.abc
import os
import signal
import sys

import hpcdgnn
import hpcdgnn.api


class Interrupt(importlib.abc.MetaPathFinder):
    # Ctrl-C while torch's __init__ is halfway: at its import of torch.autograd
    def find_spec(self, name, path=None, target=None):
        if name == "torch.autograd" and not getattr(self, "sent", False):
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, Interrupt())
run = hpcdgnn.load_run(sys.argv[1])
try:
    {call}
    print("NOT INTERRUPTED")
except KeyboardInterrupt:
    print("INTERRUPTED")
{call}
print("AGAIN", type(run.model).__name__)
"""


@pytest.mark.parametrize("call", [
    "hpcdgnn.api.train({job!r}, output={output!r})",
    "run.model",
    "hpcdgnn.train({job!r}, output={output!r})",
])
def test_an_interrupt_while_torch_imports_leaves_the_process_usable(tmp_path, small_dataset, call):
    """A notebook's Ctrl-C during the first call (torch importing: seconds) raised KeyboardInterrupt inside torch's
    ``__init__``: the half-imported torch stayed in ``sys.modules`` and every later call failed (``module 'torch'
    has no attribute ...``), until a restart. The import completes; the interrupt follows it."""
    import subprocess
    import sys

    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    run = hpcdgnn.train(job, output=tmp_path / "r")
    script = tmp_path / "script.py"
    output = str(tmp_path / "r2")
    script.write_text(_INTERRUPTED_IMPORT.replace("{call}", call.format(job=str(job), output=output)))
    proc = subprocess.run([sys.executable, str(script), str(run.dir)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the line, not a substring: "NOT INTERRUPTED" (an interrupt lost, or never sent) holds "INTERRUPTED" too
    assert "INTERRUPTED" in proc.stdout.splitlines() and "AGAIN DGNN" in proc.stdout, proc.stdout


def test_a_resume_with_nothing_to_resume_advises_the_api_s_arguments(tmp_path, small_dataset):
    """A run killed before its first checkpoint: the resume's advice said "train the job again with another
    --output", a flag a Python caller cannot pass; from ``hpcdgnn.train(resume=...)`` the line names no flag."""
    job = write_job(tmp_path / "job.yaml", small_dataset, train={"epochs": 1})
    run = hpcdgnn.train(job, output=tmp_path / "r")
    (run.dir / "checkpoints" / "epoch-000001").rename(run.dir / "checkpoints" / "epoch-000001.tmp")
    with pytest.raises(ConfigError, match=r"^resume=.*: no complete checkpoint in .*nothing to resume") as e:
        hpcdgnn.train(None, resume=run.dir)
    assert "--" not in str(e.value), e.value
