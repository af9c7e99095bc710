"""A run directory's plan.json is never absent, even while a re-cut plan replaces it."""

from __future__ import annotations

import errno
import json
import os
from types import SimpleNamespace

import pytest

from hpcdgnn.config.schema import JobConfig
from hpcdgnn.train.setup import _save_run_files


def _plan(owner):
    data = {"kind": "snapshot", "owner": owner}
    return SimpleNamespace(to_json=lambda: data)


def _watch_plan(monkeypatch, run_dir):
    """Whether plan.json exists after each rename or link: a crash at any of those moments finds what they find."""
    seen = []
    for name in ("replace", "rename", "link"):
        real = getattr(os, name)

        def call(*args, _real=real, **kwargs):
            out = _real(*args, **kwargs)
            seen.append((run_dir / "plan.json").is_file())
            return out

        monkeypatch.setattr(os, name, call)
    return seen


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "no-hard-links"])
def test_a_recut_plan_keeps_plan_json_in_place_while_the_old_one_is_kept(tmp_path, monkeypatch, links):
    """The old plan was renamed to plan.before-epoch-N.json before the new one was renamed in: a crash between the
    two left no plan.json, and the resume could not read its run."""
    _save_run_files(tmp_path, JobConfig(), _plan([0, 1]), 0)
    if not links:
        def unsupported(*args, **kwargs):
            raise OSError(errno.EPERM, os.strerror(errno.EPERM))

        monkeypatch.setattr(os, "link", unsupported)
    seen = _watch_plan(monkeypatch, tmp_path)
    _save_run_files(tmp_path, JobConfig(), _plan([1, 0]), 3)
    monkeypatch.undo()
    assert seen and all(seen)
    assert json.loads((tmp_path / "plan.json").read_text())["owner"] == [1, 0]
    assert json.loads((tmp_path / "plan.before-epoch-3.json").read_text())["owner"] == [0, 1]
    # a second re-cut at the same epoch (a resume that re-cut again) replaces that record
    _save_run_files(tmp_path, JobConfig(), _plan([0, 0]), 3)
    assert json.loads((tmp_path / "plan.json").read_text())["owner"] == [0, 0]
    assert json.loads((tmp_path / "plan.before-epoch-3.json").read_text())["owner"] == [1, 0]
    assert sorted(p.name for p in tmp_path.glob("*plan*")) == ["plan.before-epoch-3.json", "plan.json"]
