"""Symbolic facts behind the merged-model derivations (Zhang et al. 2025, App. D)."""

import sympy as sp

from theory.linear_attention import merged, ntp
from theory.linear_attention import sym


def test_converged_matrix_is_stationary_for_the_full_problem():
    # the per-direction root also zeroes the full D x D gradient (eq. 9b / 46)
    assert merged.stationarity_residual() == 0


def test_converged_eigenvalue_is_lambda_over_a():
    lam, N, T = sym("lam"), sym("N"), sym("trLambda")
    a = (1 + 1 / N) * lam**2 + T * lam / N  # eq. 32
    m = merged.converged_eigenvalue().subs(sp.Symbol("t_1", positive=True), T)
    assert sp.simplify(m - lam / a) == 0


def test_conservation_law_eq55():
    assert isinstance(merged.conservation_rate(), sp.ZeroMatrix)


def test_zero_output_critical_set_is_larger_than_eq9a():
    dW1, dw2 = merged.zero_output_critical_set()
    assert isinstance(dW1, sp.ZeroMatrix)  # W1 does not move when w2 = 0
    assert str(dw2) == "W_1*b"  # w2 moves unless W1 b = 0: any W1 with W1 vec(Lambda^2) = 0 is critical


def test_white_constants_eq50():
    gamma, alpha = merged.white_constants()
    D, N = sym("D"), sym("N")
    assert sp.simplify(gamma - sp.sqrt(D)) == 0
    assert sp.simplify(alpha - (1 + (1 + D) / N)) == 0


def test_logistic_solution_solves_eq48():
    s, (g, a, s0) = merged.logistic_solution()
    t, tau = sym("t"), sym("tau")
    assert sp.simplify(tau * s.diff(t) - 2 * s * (g - a * s)) == 0
    assert sp.simplify(s.subs(t, 0) - s0) == 0


def test_next_token_loss_is_affine_in_inverse_length():
    assert ntp.loss_is_linear_in_inverse_length()
