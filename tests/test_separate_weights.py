"""The learned-weights helpers of verify.flows.separate (deviations from the minimal-norm factorisation)."""

import numpy as np
import pytest

from verify.flows.separate import deviations, rotated_pair


def _minnorm(D=3):
    E = np.linalg.qr(np.random.default_rng(0).normal(size=(D, D)))[0]
    vs = np.array([1.5, 1.2, 0.9])[:D]
    return vs.copy(), (vs[:, None] * E.T), (vs[:, None] * E.T), E, vs


def test_min_norm_point_has_zero_deviations():
    v, k, q, E, vs = _minnorm()
    d = deviations(v, k, q, E, vs)
    assert d["distinct"] and d["heads"] == [0, 1, 2]
    for key in ("weights", "norm_excess", "misalignment", "off_head"):
        assert abs(d[key]) < 1e-12


def test_rotated_pair_keeps_M_and_costs_norm():
    v, k, q, E, vs = _minnorm()
    vr, kr, qr = rotated_pair(v, k, q, 0, 1, np.pi / 4)
    M = np.einsum("i,id,ie->de", v, k, q)
    Mr = np.einsum("i,id,ie->de", vr, kr, qr)
    np.testing.assert_allclose(Mr, M, atol=1e-12)
    assert deviations(vr, kr, qr, E, vs)["norm_excess"] > 1e-3


def test_deviations_rejects_bad_shapes():
    v, k, q, E, vs = _minnorm()
    with pytest.raises(ValueError, match="^k"):
        deviations(v, k, q[:, :2], E, vs)
