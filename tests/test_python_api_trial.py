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
