"""``HPCDGNN_KERNELS_SKIP`` (hpcdgnn/ops/kernels.py): the kernels it names go to their callers' torch paths, the
others stay compiled; a name that is no kernel is a configuration error (perf/bench_kernels.py --rule)."""

from __future__ import annotations

import pytest
import torch

from hpcdgnn.errors import ConfigError
from hpcdgnn.ops import kernels
from hpcdgnn.tasks.link_prediction import EdgeDecoder

pytest.importorskip("numba")


@pytest.fixture
def always(monkeypatch):
    """The compiled paths at any size (HPCDGNN_KERNELS=always), the skip list set by the test."""
    monkeypatch.setenv("HPCDGNN_KERNELS", "always")
    monkeypatch.delenv("HPCDGNN_KERNELS_SKIP", raising=False)
    monkeypatch.setattr(kernels, "_kernels", None)
    yield lambda names: monkeypatch.setenv("HPCDGNN_KERNELS_SKIP", names)
    monkeypatch.setattr(kernels, "_kernels", None)


def _train_loss(decoder: EdgeDecoder) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The decoder's summed training loss on fixed pairs, and the gradients of its embeddings and parameters."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(30, 16, generator=g).requires_grad_()
    src, dst = torch.randint(0, 30, (200,), generator=g), torch.randint(0, 30, (200,), generator=g)
    label = (torch.rand(200, generator=g) < 0.5).float()
    decoder.zero_grad()
    loss = decoder.train_loss(z, src, dst, label)[0]
    loss.backward()
    return loss.detach(), [z.grad, *(p.grad for p in decoder.parameters())]


def test_a_skipped_kernels_caller_takes_the_torch_path(always):
    torch.manual_seed(0)
    decoder = EdgeDecoder(16, 16)
    before = kernels.calls().get("edge_bce_train", 0)
    compiled, compiled_grads = _train_loss(decoder)
    assert kernels.calls()["edge_bce_train"] == before + 1  # the compiled pass ran
    always("edge_bce_train")
    plain, plain_grads = _train_loss(decoder)
    assert kernels.calls()["edge_bce_train"] == before + 1  # not counted: the torch path ran
    torch.testing.assert_close(plain, compiled, rtol=1e-5, atol=1e-5)  # the same function, to rounding
    for a, b in zip(plain_grads, compiled_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert kernels.lstm_available(torch.zeros(2, 8, 3))  # the others stay compiled
    always(" EDGE_BCE_TRAIN ,")  # blanks, case and an empty item do not matter
    assert kernels.skipped() == {"edge_bce_train"}
    always("")
    assert kernels.skipped() == frozenset()


def test_siblings_one_caller_chooses_together_are_skipped_together(always):
    gates, x = torch.zeros(2, 8, 3), torch.zeros(4)
    assert kernels.lstm_available(gates)
    always("lstm_backward")  # _LSTMLayer.backward follows the forward's choice: both go
    assert kernels.skipped() == {"lstm_forward", "lstm_backward"}
    assert not kernels.lstm_available(gates)
    assert kernels.available(x, pairs=1, kernel="edge_bce_train")
    with pytest.raises(ValueError, match="no kernel 'decoder'"):
        kernels.available(x, kernel="decoder")


def test_a_name_that_is_no_kernel_is_a_config_error(always):
    always("lstm_forward,edge_bce")
    with pytest.raises(ConfigError, match="HPCDGNN_KERNELS_SKIP='lstm_forward,edge_bce': no kernel 'edge_bce'"):
        kernels.mode()  # what run calls before MPI starts
    with pytest.raises(ConfigError, match="no kernel 'edge_bce'"):
        kernels.lstm_available(torch.zeros(2, 8, 3))
    always("lstm_forward")
    assert kernels.mode() == "always"
