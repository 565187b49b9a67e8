"""Properties of the single-layer closed forms of Ahn, Cheng, Daneshmand, Sra 2023
(Theorem 1, eqs. 6-7; the inverse-task optimum; Theorem 5, ReLU attention).

Reference values are independent of the code: hand-computed numbers and hand
formulas evaluated in exact rational arithmetic.
"""

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory.preconditioned_gd import relu
from theory.preconditioned_gd import single_layer as sl
from verify.models.linear_transformer import predict, sparse_layers
from verify.tasks.preconditioned_gd import sample_prompts

LOSS = "preconditioned_gd.single_layer.loss"
OPT = "preconditioned_gd.single_layer.optimal_preconditioner"
ISO = "preconditioned_gd.single_layer.optimal_preconditioner_isotropic"
FSTAR = "preconditioned_gd.single_layer.optimal_loss"
OPT_INV = "preconditioned_gd.single_layer.optimal_preconditioner_inverse_task"
FSTAR_INV = "preconditioned_gd.single_layer.optimal_loss_inverse_task"
RELU_LOSS = "preconditioned_gd.relu.loss"
RELU_A = "preconditioned_gd.relu.optimal_scale"
RELU_F = "preconditioned_gd.relu.optimal_loss"


def _cf(id, **kw):
    return theory.get(id)(**kw)


def _random_sigma(rng, d, low=0.05, high=5.0):
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    S = (Q * np.exp(rng.uniform(np.log(low), np.log(high), d))) @ Q.T
    return 0.5 * (S + S.T)


def _second_moment_S(Sigma, n):
    """E[S^2] = (n+1)/n Sigma^2 + tr(Sigma)/n Sigma, typed independently."""
    return (n + 1) / n * Sigma @ Sigma + np.trace(Sigma) / n * Sigma


seeds = st.integers(0, 2**32 - 1)
dims = st.integers(1, 6)
lengths = st.integers(1, 200)


# -- Theorem 1 -------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(seed=seeds, d=dims, n=lengths)
def test_optimum_commutes_with_sigma_and_matches_eq6(seed, d, n):
    rng = np.random.default_rng(seed)
    Sigma = _random_sigma(rng, d)
    G = _cf(OPT, Sigma=Sigma, n=n)
    assert np.allclose(G @ Sigma, Sigma @ G, rtol=0, atol=1e-10 * np.linalg.norm(G) * np.linalg.norm(Sigma))
    lam, U = np.linalg.eigh(Sigma)
    eq6 = U @ np.diag(1 / ((n + 1) / n * lam + lam.sum() / n)) @ U.T  # eq. 6, per eigen-direction
    assert np.allclose(G, eq6, rtol=1e-10, atol=1e-12 * np.abs(eq6).max())


@settings(max_examples=25, deadline=None)
@given(seed=seeds, d=dims, n=lengths)
def test_optimal_loss_is_the_loss_at_the_optimum_and_a_minimum(seed, d, n):
    rng = np.random.default_rng(seed)
    Sigma = _random_sigma(rng, d)
    G = _cf(OPT, Sigma=Sigma, n=n)
    f_star = _cf(FSTAR, Sigma=Sigma, n=n)
    assert _cf(LOSS, Sigma=Sigma, n=n, A=G) == pytest.approx(f_star, rel=1e-10, abs=1e-12)
    lam = np.linalg.eigvalsh(Sigma)
    T = lam.sum()
    assert f_star == pytest.approx(np.sum(lam * (lam + T) / ((n + 1) * lam + T)), rel=1e-12)
    assert f_star == pytest.approx(np.trace(Sigma) - np.trace(Sigma @ Sigma @ G), rel=1e-8, abs=1e-12)
    # excess over the optimum: tr(Sigma Delta^T E[S^2] Delta) >= 0, exactly
    Delta = rng.standard_normal((d, d))
    excess = np.trace(Sigma @ Delta.T @ _second_moment_S(Sigma, n) @ Delta)
    value = _cf(LOSS, Sigma=Sigma, n=n, A=G + Delta)
    assert value >= f_star
    assert value - f_star == pytest.approx(excess, rel=1e-8, abs=1e-10)


def test_excess_loss_has_the_transpose_of_the_derivation():
    """For non-symmetric Delta the excess is tr(Sigma D^T E[S^2] D), not tr(Sigma D E[S^2] D^T)."""
    Sigma, n = np.diag([2.0, 0.5, 0.1]), 4
    D = np.zeros((3, 3))
    D[0, 2] = 0.5
    G = _cf(OPT, Sigma=Sigma, n=n)
    excess = _cf(LOSS, Sigma=Sigma, n=n, A=G + D) - _cf(FSTAR, Sigma=Sigma, n=n)
    M2 = _second_moment_S(Sigma, n)
    assert excess == pytest.approx(np.trace(Sigma @ D.T @ M2 @ D), rel=1e-12)
    assert abs(excess - np.trace(Sigma @ D @ M2 @ D.T)) > 0.1


@settings(max_examples=20, deadline=None)
@given(seed=seeds, d=st.integers(2, 5), n=lengths)
def test_rotation_equivariance(seed, d, n):
    rng = np.random.default_rng(seed)
    Sigma = _random_sigma(rng, d)
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    rotated = U @ Sigma @ U.T
    G, G_rot = _cf(OPT, Sigma=Sigma, n=n), _cf(OPT, Sigma=0.5 * (rotated + rotated.T), n=n)
    assert np.allclose(G_rot, U @ G @ U.T, rtol=0, atol=1e-10 * np.abs(G).max())
    assert _cf(FSTAR, Sigma=rotated, n=n) == pytest.approx(_cf(FSTAR, Sigma=Sigma, n=n), rel=1e-12)


def test_large_n_limit_is_the_inverse_covariance():
    Sigma = _random_sigma(np.random.default_rng(3), 4)
    G = _cf(OPT, Sigma=Sigma, n=10**9)
    assert np.allclose(G, np.linalg.inv(Sigma), rtol=1e-7, atol=0)
    lam = np.linalg.eigvalsh(Sigma)
    # f* ~ (d + 1) tr(Sigma) ... / n: it vanishes like 1/n
    assert _cf(FSTAR, Sigma=Sigma, n=10**9) == pytest.approx(np.sum(lam + lam.sum()) / 10**9, rel=1e-6)


@pytest.mark.parametrize("d, n", [(1, 1), (3, 4), (5, 20), (10, 7)])
def test_isotropic_case_eq7(d, n):
    gamma = _cf(ISO, d=d, n=n)
    assert gamma == pytest.approx(float(Fraction(n, n + d + 1)), rel=1e-15)
    assert np.allclose(_cf(OPT, Sigma=np.eye(d), n=n), gamma * np.eye(d), rtol=1e-14)
    assert _cf(FSTAR, Sigma=np.eye(d), n=n) == pytest.approx(float(Fraction(d * (d + 1), n + d + 1)), rel=1e-14)


@pytest.mark.parametrize("eigs, n, expected", [
    ((1, 1, 0.25, 0.0625, 1), 20, 0.68176),   # the experiments' spectrum
    ((4, 1, 0.5, 0.1), 6, 2.09231),
    ((1, 1, 1, 1, 1), 20, 1.15385),
    ((1, 1, 1), 4, 1.5),
])
def test_hand_computed_values_of_the_optimal_loss(eigs, n, expected):
    Sigma = _random_sigma(np.random.default_rng(0), len(eigs))
    lam, U = np.linalg.eigh(Sigma)
    Sigma = U @ np.diag(eigs) @ U.T
    assert round(_cf(FSTAR, Sigma=0.5 * (Sigma + Sigma.T), n=n), 5) == expected


def test_forward_pass_at_the_optimum_is_h_gamma_xq():
    """One sparse layer (eq. 8, minus sign) predicts h^T Gamma x_q (eq. 15) to round-off."""
    rng = np.random.default_rng(1)
    Sigma = _random_sigma(rng, 3)
    G = _cf(OPT, Sigma=Sigma, n=5) + 0.3 * rng.standard_normal((3, 3))  # non-symmetric
    pr = sample_prompts(rng, Sigma, 5, 64)
    P, Q = sparse_layers([G])
    yhat = predict(pr.tokens(), P, Q)
    assert np.allclose(yhat, np.einsum("bi,ij,bj->b", pr.h, G, pr.query), rtol=0, atol=1e-12)


# -- the inverse-task model ---------------------------------------------------------------------
@pytest.mark.parametrize("d, n", [(5, 20), (3, 4), (1, 1)])
def test_inverse_task_optimum(d, n):
    Sigma = _random_sigma(np.random.default_rng(d + n), d)
    G = _cf(OPT_INV, Sigma=Sigma, n=n)
    assert np.allclose(G, n / (n + d + 1) * np.linalg.inv(Sigma), rtol=1e-12, atol=1e-14)
    assert _cf(FSTAR_INV, d=d, n=n) == pytest.approx(float(Fraction(d * (d + 1), n + d + 1)), rel=1e-15)
    # no tr(Sigma) ridge: it differs from Theorem 1's optimum, except for d = 1, where tr Sigma = lambda
    # makes both n / ((n + 2) lambda)
    assert np.allclose(G, _cf(OPT, Sigma=Sigma, n=n), rtol=1e-12) is (d == 1)


def test_inverse_task_hand_computed_value():
    assert _cf(FSTAR_INV, d=5, n=20) == pytest.approx(15 / 13, rel=1e-15)  # L = 1


# -- symbolic: one theory, two papers ----------------------------------------------------------
def test_theorem1_is_the_merged_model_minimum():
    ident = sl.one_theory_identities()
    assert ident["optimal_preconditioner"] is True
    assert ident["optimal_loss"] is True
    assert ident["loss"] is True
    assert ident["control_inverse_task_optimum"] is False  # negative control


def test_stationarity_and_convexity():
    import sympy as sp

    assert sl.stationarity_residual() == 0
    assert sl.stationarity_residual("inverse") == 0
    lam, c = sl.hessian_factors()
    t1 = sp.Symbol("t_1", positive=True)
    assert c.subs({lam: sp.Rational(1, 3), t1: 2}).is_positive  # E[S^2] > 0 along every direction
    assert relu.stationarity_residual() == 0


# -- Theorem 5 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("d, n", [(5, 20), (3, 4), (1, 1), (8, 100)])
def test_relu_optimum(d, n):
    a = _cf(RELU_A, n=n, d=d)
    assert a == pytest.approx(-1 / (0.5 * (n - 1) / n + (d + 2) / n), rel=1e-14)  # Theorem 5 as printed
    f_star = _cf(RELU_F, n=n, d=d)
    assert f_star == pytest.approx(float(Fraction(d * (2 * d + 3), n + 2 * d + 3)), rel=1e-14)
    assert _cf(RELU_LOSS, n=n, A=a * np.eye(d)) == pytest.approx(f_star, rel=1e-13)


def test_relu_hand_computed_value():
    assert _cf(RELU_F, n=20, d=5) == pytest.approx(65 / 33, rel=1e-15)  # 1.96970


@settings(max_examples=20, deadline=None)
@given(seed=seeds, d=st.integers(1, 6), n=lengths)
def test_relu_loss_is_convex_quadratic_with_zero_gradient_at_the_optimum(seed, d, n):
    rng = np.random.default_rng(seed)
    f = theory.get(RELU_LOSS)
    c = (n + 2 * d + 3) / (4 * n)
    A = rng.standard_normal((d, d))
    assert f(n=n, A=A) == pytest.approx(c * np.sum(A**2) + np.trace(A) + d, rel=1e-12)
    A_star = _cf(RELU_A, n=n, d=d) * np.eye(d)
    # central differences are exact for a quadratic up to round-off
    h = 1e-3
    grad = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            E = np.zeros((d, d))
            E[i, j] = h
            grad[i, j] = (f(n=n, A=A_star + E) - f(n=n, A=A_star - E)) / (2 * h)
    assert np.max(np.abs(grad)) < 1e-8 * (1 + d)
    assert f(n=n, A=A_star + 0.1 * A) > f(n=n, A=A_star)


def test_relu_torch_gradient_vanishes_at_the_optimum():
    torch = pytest.importorskip("torch")
    d, n = 4, 9
    A = torch.tensor(_cf(RELU_A, n=n, d=d) * np.eye(d), requires_grad=True)
    # the emitted torch function directly (the record's validation detaches matrix inputs)
    fn = theory.get(RELU_LOSS).function("torch")
    fn(torch.tensor(float(n), dtype=torch.float64), A, d).backward()
    assert float(A.grad.abs().max()) < 1e-12


def test_relu_monte_carlo_small():
    """A small Monte Carlo of the ReLU forward at A* (the full check is in verify)."""
    from verify.models.linear_transformer import forward

    rng = np.random.default_rng(5)
    d, n = 3, 4
    a = _cf(RELU_A, n=n, d=d)
    P = np.zeros((1, d + 1, d + 1))
    P[0, d, d] = 1.0
    Q = np.zeros((1, d + 1, d + 1))
    Q[0, :d, :d] = a * np.eye(d)
    pr = sample_prompts(rng, np.eye(d), n, 100_000)
    e = (-forward(pr.tokens(), P, Q, activation="relu")[:, -1, -1] - pr.target) ** 2
    se = e.std(ddof=1) / np.sqrt(e.size)
    assert abs(e.mean() - _cf(RELU_F, n=n, d=d)) < 5.5 * se


# -- backends and bad input -------------------------------------------------------------------------
CASES = {
    LOSS: {"Sigma": np.diag([2.0, 0.5, 0.1]), "n": 4, "A": np.arange(9.0).reshape(3, 3) / 10},
    OPT: {"Sigma": [[2.0, 0.3], [0.3, 0.5]], "n": 7},
    ISO: {"d": 5, "n": 20},
    FSTAR: {"Sigma": [1, 1, 0.25, 0.0625, 1], "n": 20},
    OPT_INV: {"Sigma": [[2.0, 0.3], [0.3, 0.5]], "n": 7},
    FSTAR_INV: {"d": 5, "n": 20},
    RELU_LOSS: {"n": 20, "A": np.arange(9.0).reshape(3, 3) / 10 - 0.4},
    RELU_A: {"n": 20, "d": 5},
    RELU_F: {"n": 20, "d": 5},
}


@pytest.mark.parametrize("cf_id", list(CASES))
def test_numpy_matches_mpmath(cf_id):
    cf = theory.get(cf_id)
    value = np.asarray(cf(**CASES[cf_id]), dtype=float)
    with mpmath.workdps(50):
        ref = cf("mpmath", **CASES[cf_id])
    ref = np.array(ref.tolist(), dtype=float) if isinstance(ref, mpmath.matrix) else float(ref)
    assert np.max(np.abs(value - ref)) <= 1e-13 * max(np.max(np.abs(ref)), 1.0)


BAD = [
    (OPT, {"Sigma": [[1.0, 0.5], [0.0, 1.0]], "n": 3}, "Sigma"),
    (OPT, {"Sigma": [1.0, -0.5], "n": 3}, "Sigma"),
    (OPT, {"Sigma": [1.0, 2.0], "n": 0}, "n"),
    (FSTAR, {"Sigma": [1.0, 2.0], "n": 2.5}, "n"),
    (LOSS, {"Sigma": [1.0, 2.0], "n": 3, "A": np.eye(3)}, "A"),
    (LOSS, {"Sigma": [1.0, 2.0], "n": 3}, "A"),
    (ISO, {"d": 0, "n": 3}, "d"),
    (FSTAR_INV, {"d": 3, "n": -1}, "n"),
    (RELU_LOSS, {"n": 3, "A": np.ones((2, 3))}, "A"),
    (RELU_LOSS, {"n": 3, "A": [[np.nan]]}, "A"),
    (RELU_A, {"n": 3, "d": True}, "d"),
    (RELU_F, {"n": 0, "d": 2}, "n"),
]


@pytest.mark.parametrize("cf_id, kw, name", BAD)
def test_bad_input_names_the_parameter(cf_id, kw, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        theory.get(cf_id)(**kw)


def test_printed_forms_equal_the_derivation_symbolically():
    """Eq. 6 (matrix form), eq. 7 and Theorem 5's scale equal the derived expressions (sympy); for the
    Sigma-valued eq. 6 the comparison runs on spectral images (Sigma renamed to Lambda)."""
    from theory.compare import equal
    from theory.preconditioned_gd import sym

    r = theory.get(OPT)
    Lam = sym("Lambda")
    assert equal(sl.to_merged_symbols(r.expr), sl.to_merged_symbols(r.printed_expr), covariance=Lam)
    assert not equal(sl.to_merged_symbols(r.expr), sl.to_merged_symbols(2 * r.printed_expr), covariance=Lam)
    for cf_id in (ISO, RELU_A):
        r = theory.get(cf_id)
        assert r.equal(r.expr, r.printed_expr)
