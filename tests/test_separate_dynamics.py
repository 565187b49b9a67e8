"""Helpers of the ATTN_S dynamics checks (verify/checks/linear_attention_separate_dynamics.py)."""

import numpy as np
import pytest

from verify.checks.linear_attention_separate_dynamics import (
    escape_correction,
    long_plateaus,
    midpoint_value_fraction,
)


def test_midpoint_fraction_halves_the_ansatz_drop():
    u = midpoint_value_fraction() ** 3
    assert 2 * u - u * u == pytest.approx(0.5, abs=1e-14)


def test_escape_correction_tends_to_one_with_slope_K():
    lam, a = 0.3, 0.3**2 * (1 + (1 + 1 / 0.3) / 31)
    v_star = (lam / a) ** (1 / 3)
    Ks = [(1 - escape_correction(lam, a, v0)) / (v0 / v_star) for v0 in (1e-3, 1e-4, 1e-5)]
    np.testing.assert_allclose(Ks, 1.2534, atol=2e-3)
    assert escape_correction(lam, a, 1e-6) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("kw, name", [({"lam": -1.0}, "lam"), ({"a": 0.0}, "a"), ({"v0": 10.0}, "v0"),
                                      ({"v0": 0.0}, "v0")])
def test_escape_correction_rejects_bad_input(kw, name):
    args = {"lam": 0.3, "a": 0.1, "v0": 1e-3} | kw
    with pytest.raises(ValueError, match=f"^{name}"):
        escape_correction(**args)


def test_long_plateaus_uses_the_escape_scale():
    lam = np.array([0.5, 0.25])
    w = 1e-2
    scale = 1 / (lam**2 * w)                      # 400, 1600
    long = long_plateaus([0.2 * scale[0], 0.05 * scale[1], 1e9], lam, w)
    assert long.tolist() == [True, False]


@pytest.mark.parametrize("args, name", [(([1, 2], [0.5, 0.2], 1e-2), "time_near"),
                                        (([1, 2, 3], [0.5, -0.2], 1e-2), "lam"),
                                        (([1, 2, 3], [0.5, 0.2], 0.0), "w_init")])
def test_long_plateaus_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        long_plateaus(*args)
