"""Symbolic facts behind the merged-model derivations (Zhang et al. 2025, App. D)."""

import sympy as sp

from theory.linear_attention import icl_iwl, merged, ntp
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


def test_task_loss_second_moment_and_mean_over_tasks():
    # A(M) = E[(I - Lhat M) x_q x_q^T (I - M^T Lhat)]: E[Lhat B Lhat] = (1 + 1/N) Lam B Lam + tr(B Lam) Lam / N
    import numpy as np

    import theory

    Lam, M, N = sym("Lambda"), sym("M"), sym("N")
    by_hand = (Lam - Lam * M * Lam - Lam * M.T * Lam + (1 + 1 / N) * Lam * M * Lam * M.T * Lam
               + sp.Trace(M * Lam * M.T * Lam) / N * Lam)
    diff = (icl_iwl.derive_error_second_moment() - by_hand).doit()
    assert isinstance(sp.simplify(sp.expand(diff)), sp.ZeroMatrix)
    task, loss = theory.get("linear_attention.icl_iwl.task_loss"), theory.get("linear_attention.merged.loss")
    rng = np.random.default_rng(4)
    A = rng.standard_normal((3, 3))
    lam, Mn = A @ A.T + np.eye(3), rng.standard_normal((3, 3))
    # the mean over w ~ N(0, I) of w^T A w is tr A: the task losses of the basis vectors sum to L(M)
    total = sum(float(task(Lambda=lam, N=6, M=Mn, w_star=e)) for e in np.eye(3))
    assert np.isclose(total, float(loss(Lambda=lam, N=6, M=Mn)), rtol=1e-12)


def test_mixture_gradient_is_affine_and_its_zero_is_the_minimiser():
    import numpy as np

    import theory

    G0, K, W = icl_iwl.affine_parts()
    Lam, N = sym("Lambda"), sym("N")
    assert G0 == Lam * W * Lam
    assert sp.simplify((K - ((N + 1) / N) * Lam * W * Lam - sp.Trace(W * Lam) / N * Lam).doit()) == \
        sp.ZeroMatrix(*K.shape)
    task, loss = theory.get("linear_attention.icl_iwl.task_loss"), theory.get("linear_attention.merged.loss")
    mix = theory.get("linear_attention.icl_iwl.mixture_matrix")
    rng = np.random.default_rng(5)
    A = rng.standard_normal((3, 3))
    lam, w, p, n = A @ A.T + 0.5 * np.eye(3), rng.standard_normal(3), 0.4, 7

    def train(M):
        return (1 - p) * float(loss(Lambda=lam, N=n, M=M)) + p * float(task(Lambda=lam, N=n, M=M, w_star=w))

    Mp = np.asarray(mix(Lambda=lam, N=n, w_star=w, p=p), float)
    best = train(Mp)
    for _ in range(20):   # a convex quadratic: every step away raises it
        assert train(Mp + 1e-3 * rng.standard_normal((3, 3))) > best
    np.testing.assert_allclose(mix(Lambda=lam, N=n, w_star=w, p=0.0),
                               theory.get("linear_attention.merged.converged_matrix")(Lambda=lam, N=n), rtol=1e-12)
