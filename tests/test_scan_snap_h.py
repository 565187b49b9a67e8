"""Properties of the h recursion, its continuous solution and the speed coefficient (Tian et al. 2023).

Hypothesis draws M in 2..1e4, eta_Y in (0, 10] and t up to 1e9 (log-uniform where the range
spans decades). Reference values are independent of the code under test: mpmath at 50 digits,
the implicit equation (45) itself, or the recursion iterated by hand.
"""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory.scan_snap.h import S_MAX, trajectory

M_ST = st.integers(2, 10_000)
ETA_ST = st.floats(1e-6, 10.0)
T_ST = st.floats(0.0, 1e9)
LOG_T_ST = st.floats(-8.0, 9.0).map(lambda x: 10.0**x)


def cf(id):
    return theory.get(id)


H, HS, TOF = cf("scan_snap.h.continuous"), cf("scan_snap.h.discrete"), cf("scan_snap.h.time_of")
GAMMA = cf("scan_snap.speed.gamma")


@given(M=M_ST, eta=ETA_ST, t=LOG_T_ST)
def test_h_solves_eq45_and_inverts(M, eta, t):
    h = H(t=t, M=M, eta_Y=eta)
    u = M * h
    assert math.isfinite(h) and h > 0
    # eq. 45 in the cancellation-free form expm1(u) + (M-1) u = M eta t
    assert math.expm1(u) + (M - 1) * u == pytest.approx(M * eta * t, rel=1e-13)
    assert TOF(h=h, M=M, eta_Y=eta) == pytest.approx(t, rel=1e-12)


@given(M=M_ST, eta=ETA_ST, t=T_ST)
def test_h_monotone_and_finite_up_to_1e9(M, eta, t):
    ts = np.array([t, t * (1 + 1e-6) + 1e-9, 2 * t + 1, 1e9])
    h = H(t=ts, M=M, eta_Y=eta)
    assert np.all(np.isfinite(h))
    assert np.all(np.diff(h[:3]) > 0) and h[-1] >= h[0]


@settings(max_examples=15)
@given(M=M_ST, eta=ETA_ST, t=LOG_T_ST)
def test_numpy_mpmath_torch(M, eta, t):
    pytest.importorskip("torch")

    with mpmath.workdps(50):
        ref = float(H("mpmath", t=t, M=M, eta_Y=eta))
        gref = float(GAMMA("mpmath", t=t, M=M, K=3, eta_Y=eta))
    assert H(t=t, M=M, eta_Y=eta) == pytest.approx(ref, rel=1e-13)
    assert float(H("torch", t=t, M=M, eta_Y=eta)) == pytest.approx(ref, rel=1e-13)
    assert GAMMA(t=t, M=M, K=3, eta_Y=eta) == pytest.approx(gref, rel=1e-12, abs=1e-300)


@settings(max_examples=20)
@given(M=M_ST, eta=st.floats(1e-3, 10.0), s=st.integers(0, 3000))
def test_discrete_above_continuous_within_lemma7(M, eta, s):
    hs = trajectory(s, M, eta)
    h = H(t=np.arange(s + 1, dtype=float), M=M, eta_Y=eta)
    gap = hs - h
    assert np.all(gap >= -1e-15 * (1 + s) * max(hs[-1], 1e-300))     # h <= h* (round-off)
    assert np.all(gap <= 2 * eta / M)                                   # Lemma 7(a)
    assert np.all(np.diff(hs) > 0) if s else True
    assert HS(s=s, M=M, eta_Y=eta) == hs[-1]


@settings(max_examples=10)
@given(M=M_ST, eta=ETA_ST, s=st.integers(0, 200))
def test_discrete_backends(M, eta, s):
    pytest.importorskip("torch")

    with mpmath.workdps(50):
        ref = float(HS("mpmath", s=s, M=M, eta_Y=eta))
    assert HS(s=s, M=M, eta_Y=eta) == pytest.approx(ref, rel=1e-12, abs=0)
    arr = HS(s=s, M=M, eta_Y=np.array([eta, eta / 2]))
    assert arr[0] == pytest.approx(ref, rel=1e-12, abs=0)
    assert float(HS("torch", s=s, M=M, eta_Y=eta)) == pytest.approx(ref, rel=1e-12, abs=0)


def test_discrete_autograd_matches_finite_difference():
    import torch

    eta = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    h = HS("torch", s=50, M=30, eta_Y=eta)
    h.backward()
    d = 1e-6
    fd = (HS(s=50, M=30, eta_Y=0.7 + d) - HS(s=50, M=30, eta_Y=0.7 - d)) / (2 * d)
    assert eta.grad.item() == pytest.approx(fd, rel=1e-7)


def test_continuous_autograd_is_the_ode():
    import torch

    t = torch.tensor([0.5, 30.0, 1e7], dtype=torch.float64, requires_grad=True)
    h = H("torch", t=t, M=100, eta_Y=0.4)
    h.sum().backward()
    ode = 0.4 / (99 + torch.exp(100 * h.detach()))                      # eq. 44
    assert torch.allclose(t.grad, ode, rtol=1e-12, atol=0)


@given(M=M_ST, K=st.integers(1, 100), eta=ETA_ST, t=T_ST)
def test_gamma_nonnegative_and_finite(M, K, eta, t):
    g = GAMMA(t=t, M=M, K=K, eta_Y=eta)
    assert math.isfinite(g) and g >= 0
    assert g <= cf("scan_snap.speed.gamma_peak")(M=M, K=K, eta_Y=eta) * (1 + 1e-12)


@settings(max_examples=20)
@given(M=st.integers(4, 10_000), K=st.integers(1, 100), eta=ETA_ST)
def test_time_scales_ordered(M, K, eta):
    kw = dict(M=M, K=K, eta_Y=eta)
    tp, tA = cf("scan_snap.speed.scan_time")(**kw), cf("scan_snap.speed.scan_end")(**kw)
    tB, t0 = cf("scan_snap.speed.crossing_time")(**kw), cf("scan_snap.speed.snap_time")(**kw)
    assert tA < tB < t0
    assert (tp < tA) is (M >= 5)          # eq. 52's "t_A > ln M/eta_Y" fails for M <= 4


def test_eq52_claim_fails_for_small_M():
    """Eq. 52 states t_A > ln(M)/eta_Y; it holds exactly for M >= 5."""
    ok = [cf("scan_snap.speed.scan_end")(M=M, K=1, eta_Y=1.0) > math.log(M) for M in range(2, 50)]
    assert ok == [M >= 5 for M in range(2, 50)]


def test_extreme_parameters_do_not_overflow():
    for M, eta, t in ((10_000, 10.0, 1e9), (2, 1e-6, 1e9), (10_000, 1e-6, 1e-8), (2, 10.0, 0.0)):
        h = H(t=t, M=M, eta_Y=eta)
        assert math.isfinite(h)
        assert math.isfinite(GAMMA(t=t, M=M, K=1, eta_Y=eta))
        assert math.isfinite(cf("scan_snap.speed.gamma_integral")(t=t, M=M, K=1, eta_Y=eta, eta_Z=1.0))
    # at 1e9 the solution is logarithmic: u = ln(M eta t + 1 - (M-1) u)
    u = 10_000 * H(t=1e9, M=10_000, eta_Y=10.0)
    assert u == pytest.approx(math.log(1e14 + 1 - 9999 * u), rel=1e-14)


def test_hand_computed_values():
    """Gamma peak 4.42 at ~0.82 t_0' (M = 1000); omega_1 = 0.3198; t_B/t_0 = 0.9989;
    Corollary 1's sharp count 221 (M = 1000, eta_Y = 0.5, eps = 0.01)."""
    kw = dict(M=1000, K=10, eta_Y=1.0)
    assert round(cf("scan_snap.speed.gamma_peak")(**kw), 2) == 4.42
    ratio = cf("scan_snap.speed.gamma_peak_time")(**kw) / cf("scan_snap.speed.scan_time")(**kw)
    assert round(ratio, 2) == 0.82
    assert round(cf("scan_snap.h.omega_1")(M=1000), 4) == 0.3198
    assert round(cf("scan_snap.speed.crossing_time")(**kw) / cf("scan_snap.speed.snap_time")(**kw), 4) == 0.9989
    assert round(cf("scan_snap.speed.convergence_steps")(M=1000, K=1, eta_Y=0.5, epsilon=0.01)) == 221


def test_h_star_by_hand():
    """h*(1) = eta/M and h*(2) = eta/M + eta/((M-1) + e^eta) (eq. 33)."""
    assert HS(s=1, M=7, eta_Y=0.3) == 0.3 / 7
    assert HS(s=2, M=7, eta_Y=0.3) == pytest.approx(0.3 / 7 + 0.3 / (6 + math.exp(0.3)), rel=1e-15)
    assert HS(s=0, M=7, eta_Y=0.3) == 0.0


BAD = [
    ("scan_snap.h.discrete", {"s": S_MAX + 1, "M": 10, "eta_Y": 0.5}, "s"),
    ("scan_snap.h.discrete", {"s": -1, "M": 10, "eta_Y": 0.5}, "s"),
    ("scan_snap.h.discrete", {"s": 5, "M": 1, "eta_Y": 0.5}, "M"),
    ("scan_snap.h.continuous", {"t": -1.0, "M": 10, "eta_Y": 0.5}, "t"),
    ("scan_snap.h.continuous", {"t": 1.0, "M": 10, "eta_Y": 0.0}, "eta_Y"),
    ("scan_snap.h.continuous", {"t": float("inf"), "M": 10, "eta_Y": 0.5}, "t"),
    ("scan_snap.h.time_of", {"h": -0.1, "M": 10, "eta_Y": 0.5}, "h"),
    ("scan_snap.h.root_high", {"M": 3}, "M"),
    ("scan_snap.speed.gamma", {"t": 1.0, "M": 10, "K": 0, "eta_Y": 0.5}, "K"),
    ("scan_snap.speed.gamma_integral", {"t": 1.0, "M": 10, "K": 2, "eta_Y": 0.5, "eta_Z": -1.0}, "eta_Z"),
    ("scan_snap.speed.convergence_steps", {"M": 10, "K": 2, "eta_Y": 0.5, "epsilon": 2.0}, "epsilon"),
]


@pytest.mark.parametrize("cf_id, kw, name", BAD, ids=[f"{i}-{b[0]}-{b[2]}" for i, b in enumerate(BAD)])
def test_bad_input_names_the_parameter(cf_id, kw, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        cf(cf_id)(**kw)
