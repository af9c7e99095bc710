"""Fitting DGC §6's workload MLPs (``hpcdgnn.profile.fit``): accuracy on a known function, determinism."""

from __future__ import annotations

import numpy as np

from hpcdgnn.profile.fit import fit_mlp, mape


def test_mape_is_the_mean_relative_error():
    """DGC Eq. 8 on numbers worked by hand: |110 − 100|/100 and |45 − 50|/50 average to 0.1."""
    assert mape(np.array([110.0, 45.0]), np.array([100.0, 50.0])) == 0.1
    assert np.isnan(mape(np.array([]), np.array([])))


def test_mlp_fits_a_known_function():
    """A §6 MLP learns a kinked power law to under 5% held-out MAPE, deterministically."""
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.uniform(0, 8, 400), rng.uniform(0, 6, 400), np.full(400, np.log(16))])
    # a power law with a kink: what chunk times look like (overhead floor, then linear in size)
    sec = 1e-5 * (1 + np.exp(0.9 * x[:, 0]) + 0.3 * np.exp(x[:, 1]) * np.sqrt(1 + x[:, 0]))
    mlp = fit_mlp(x[:300], sec[:300], ("a", "b", "width"), width=32, steps=600, seed=0)
    held = mlp.predict(x[300:])
    assert float(np.mean(np.abs(held - sec[300:]) / sec[300:])) < 0.05  # DGC Eq. 8, computed here
    assert mape(held, sec[300:]) == float(np.mean(np.abs(held - sec[300:]) / sec[300:]))
    a = fit_mlp(x[:100], sec[:100], ("a", "b", "width"), width=8, steps=30, seed=1)
    b = fit_mlp(x[:100], sec[:100], ("a", "b", "width"), width=8, steps=30, seed=1)
    assert np.array_equal(a.predict(x[300:]), b.predict(x[300:]))  # deterministic for a seed
