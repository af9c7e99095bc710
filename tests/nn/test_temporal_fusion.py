"""Temporal fusion (DGC §5.1.2, Eq. 4–5): packed, masked sequences give the outputs of unfused runs."""

from __future__ import annotations

import numpy as np
import torch

from hpcdgnn.nn.temporal_fusion import fused_gru, pack_sequences, pad_sequences, unpack


def test_packing_fills_lanes_without_overlap():
    p = pack_sequences(np.array([4, 2, 2, 3, 1]))
    assert p.steps == 4 and p.lanes == 3  # (4) (3 1) (2 2): 12 slots against 20 padded
    step, lane = p.index()
    assert len(set(zip(step.tolist(), lane.tolist(), strict=True))) == 12 and int(step.max()) < 4
    assert p.reset_mask().sum() == 12 - 5  # one reset per sequence
    assert pad_sequences([2, 3]).reset_mask() is None  # padded lanes: nothing to reset past step 0


def test_fused_gru_equals_each_sequence_alone():
    torch.manual_seed(0)
    gru = torch.nn.GRU(3, 5).double()
    lengths = np.array([6, 2, 3, 1, 4, 2, 5])
    seqs = [torch.randn(n, 3, dtype=torch.float64) for n in lengths]
    p = pack_sequences(lengths)
    x = torch.zeros(p.steps, p.lanes, 3, dtype=torch.float64)
    step, lane = p.index()
    x[step, lane] = torch.cat(seqs)
    got = unpack(p, fused_gru(gru, x, p.reset_mask()))
    for s, g in zip(seqs, got, strict=True):
        ref, _ = gru(s.unsqueeze(1))
        torch.testing.assert_close(g, ref.squeeze(1))
    # without the mask the concatenated sequences would leak state: the mask is what makes it exact
    leaky = unpack(p, fused_gru(gru, x, torch.ones(p.steps, p.lanes)))
    assert any(not torch.allclose(a, b) for a, b in zip(leaky, got, strict=True))


def test_fused_rnn_handles_stacked_lstms_and_padding_alike():
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(3, 4, num_layers=2).double()
    lengths = np.array([5, 1, 3, 2, 4])
    seqs = [torch.randn(n, 3, dtype=torch.float64) for n in lengths]
    from hpcdgnn.nn.temporal_fusion import fused_rnn

    for p in (pack_sequences(lengths), pad_sequences(lengths)):
        x = torch.zeros(p.steps, p.lanes, 3, dtype=torch.float64)
        step, lane = p.index()
        x[step, lane] = torch.cat(seqs)
        for s, g in zip(seqs, unpack(p, fused_rnn(lstm, x, p.reset_mask())), strict=True):
            torch.testing.assert_close(g, lstm(s.unsqueeze(1))[0].squeeze(1))
