"""Errata of Scan and Snap (Tian et al. 2023) decided by the checks in verify/checks/scan_snap/
(attention_eq88, h_remarks, speed_scan_end), with the dynamics of :mod:`verify.flows.scan_snap`.

Small, independent numbers: each test recomputes a fact the check relies on by a route of its
own (closed arithmetic, mpmath, a hand-written recursion), and the checks themselves are run in
the quick profile to confirm they pass with their printed controls rejected.
"""

import math

import mpmath
import numpy as np
import pytest

import theory
from theory.scan_snap.h import trajectory
from verify.flows import scan_snap as decoder
from verify.registry import get_check, run_check


# ---------------------------------------------------------------------------------------------
# eq. 88
# ---------------------------------------------------------------------------------------------
def test_eq88_sign_by_hand_expansion():
    """beta_nn' = -(coefficient of f_n' in (I - E')(I + Theta) q), q = q_0 1 + (q_1 - q_0) e_n."""
    rng = np.random.default_rng(1)
    M, K, n = 25, 4, 2
    F = decoder.weak_attention(rng, M, K)
    theta = rng.uniform(-0.3, 0.3, K)
    Ep = np.eye(K) - np.linalg.inv(F.T @ F)
    q1, q0 = decoder.q_values(M)
    q = np.full(K, q0)
    q[n] = q1
    coef = (np.eye(K) - Ep) @ (np.diag(1 + theta) @ q)
    assert coef[n] == pytest.approx(decoder.iota_eq86(Ep, theta, M, n), abs=1e-14)
    for m in range(K):
        if m != n:
            assert -coef[m] == pytest.approx(decoder.beta_eq88(Ep, theta, M, n, m), abs=1e-14)
            # the printed sign differs by exactly 2 q_0 (1 + theta_m)
            diff = decoder.beta_eq88(Ep, theta, M, n, m, printed=True) - decoder.beta_eq88(Ep, theta, M, n, m)
            assert diff == pytest.approx(2 * q0 * (1 + theta[m]), rel=1e-12)


def test_zeta_inner_products():
    Z = decoder.zeta(7)
    q1, q0 = decoder.q_values(7)
    G = Z @ Z.T
    assert np.allclose(np.diag(G), q1) and np.allclose(G[~np.eye(7, dtype=bool)], q0)


def test_theorem1_coefficients_in_span():
    rng = np.random.default_rng(2)
    F = decoder.weak_attention(rng, 40, 3)
    a, Ep, resid = decoder.theorem1_coefficients(F, np.array([0.1, -0.1, 0.05]), 0.2, 1)
    assert resid < 1e-13
    assert a[1] == pytest.approx(decoder.iota_eq86(Ep, np.array([0.1, -0.1, 0.05]), 40, 1), abs=1e-13)


# ---------------------------------------------------------------------------------------------
# Remark 1
# ---------------------------------------------------------------------------------------------
def test_equal_overlap_attention():
    F = decoder.equal_overlap_attention(12, 12, 0.3)
    assert np.all(F >= 0)
    assert np.allclose(F.T @ F, 0.7 * np.eye(12) + 0.3, atol=1e-14)


def test_remark1_hand_recursion():
    """K = M, rho: the epoch dynamics of w_n is h += (1 - rho) eta/((M-1) + e^{M h})."""
    M, rho, eta, N = 8, 0.25, 0.7, 40
    W = decoder.decoder_rows(decoder.equal_overlap_attention(M, M, rho), eta, N, "epoch")
    h = 0.0
    for _ in range(N):
        h += (1 - rho) * eta / ((M - 1) + math.exp(M * h))
    assert np.allclose(W, (M - 1) * h * decoder.zeta(M), rtol=0, atol=1e-13)
    h_eta = float(theory.get("scan_snap.h.discrete")(s=N, M=M, eta_Y=eta))
    printed = (1 - rho) * (M - 1) * h_eta * decoder.zeta(M)
    assert np.abs(W - printed).max() / np.abs(W).max() > 0.05


# ---------------------------------------------------------------------------------------------
# Remark 2
# ---------------------------------------------------------------------------------------------
def test_time_shift_definition():
    """h(s + c(s)) = h*(s), with h(t) from the continuous record."""
    M, eta = 50, 0.5
    hs = trajectory(2000, M, eta)
    s = np.array([10, 100, 2000])
    c = decoder.time_shift(s, hs, M, eta)
    h = theory.get("scan_snap.h.continuous")(t=(s + c).astype(float), M=M, eta_Y=eta)
    assert np.allclose(h, hs[s], rtol=1e-12)
    assert np.all(c > 0) and np.all(np.diff(c) > 0)


def test_time_shift_spec_values():
    """Measured c(s) at M = 1000, eta_Y = 0.5: 1.88 at s = 1e2."""
    hs = trajectory(100, 1000, 0.5)
    assert float(decoder.time_shift(np.array([100]), hs, 1000, 0.5)[0]) == pytest.approx(1.88, abs=0.01)


# ---------------------------------------------------------------------------------------------
# eq. 52
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("M, holds", [(2, False), (3, False), (4, False), (5, True), (6, True), (10_000, True)])
def test_eq52_claim_mpmath(M, holds):
    with mpmath.workdps(40):
        tA = (M - 2 + (M - 1) * mpmath.log(M - 1)) / mpmath.mpf(M)
        assert (tA > mpmath.log(M)) is holds
    rec = theory.get("scan_snap.speed.scan_end")(M=M, K=1, eta_Y=1.0)
    assert rec == pytest.approx(float(tA), rel=1e-14)


def test_eq52_spec_numbers():
    assert theory.get("scan_snap.speed.scan_end")(M=4, K=1, eta_Y=1.0) == pytest.approx(1.324, abs=5e-4)
    assert math.log(4) == pytest.approx(1.386, abs=5e-4)


# ---------------------------------------------------------------------------------------------
# the checks
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cid", ["scan_snap.attention.eq88_beta_sign", "scan_snap.h.remark1_effective_rate",
                                 "scan_snap.h.remark2_time_shift", "scan_snap.speed.eq52_scan_end"])
def test_check_passes_with_printed_control(cid):
    chk = get_check(cid)
    assert chk.refutes and all(where.startswith("Tian et al. 2023") for where, _ in chk.refutes)
    res = run_check(chk)
    assert res.error is None, res.error
    assert res.passed
    assert any("printed" in c["name"] and c["rejected"] for c in res.controls)
