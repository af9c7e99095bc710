"""The planner's counting on fake tensors equals its counting on real ones, the reference: every timeline model's
counted work, and whole plans whose sampled strategies count their task heads and optimizer steps."""

from __future__ import annotations

import json

import pytest
import torch

from hpcdgnn.nn.models import available_models, build_from_options, model_options
from hpcdgnn.planner import work
from hpcdgnn.planner.work import _count, reference_counting
from tests.conftest import write_job


@pytest.mark.parametrize("name", [m for m in available_models() if m != "tgn"])
def test_a_model_s_backward_counts_on_fake_tensors_as_on_real_ones(name):
    """Every kind of count, per bucket, and the saved bytes, nnz and state of one forward + backward: equal
    with the backward on fake tensors and on real ones (float32: oneDNN's fused RNN where a model has one),
    twice in a row (the gradients a first count leaves decide the second's accumulation calls)."""
    model = build_from_options(model_options(name)(name=name, hidden=4), 3).to(torch.float32)
    runs = {}
    for fake in (True, False):
        model.zero_grad(set_to_none=True)
        with reference_counting() if not fake else _nothing():
            runs[fake] = [_count(model, S, 8, 3, torch.float32, 2) for S in (2, 3)]
    assert runs[True] == runs[False]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_a_plan_is_the_same_counted_on_fake_tensors(launcher, small_dataset, tmp_path):
    """The predicted figures of a full-batch strategy and both sampled ones (which count a task head per sample,
    training and evaluation, and Adam's step) are the same with the backward on fake tensors and on real ones."""
    job = write_job(tmp_path / "job.yaml", small_dataset, model={"name": "cdgcn", "hidden": 5})
    out = {}
    for fake in (True, False):
        work._model_work_cached.cache_clear()  # the model's counts are cached per process
        with reference_counting() if not fake else _nothing():
            proc = launcher.run(None, ["-m", "hpcdgnn", "plan", str(job), "--json", "--ranks", "3",
                                           "--strategies", "snapshot", "sequences", "hybrid"])
        assert proc.returncode == 0, proc.stderr
        out[fake] = json.loads(proc.stdout)["predictions"]
    work._model_work_cached.cache_clear()
    assert {p["strategy"] for p in out[True]} == {"snapshot", "sequences", "hybrid"}
    assert out[True] == out[False]
