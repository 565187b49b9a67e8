"""App. B.2's factors, the proof steps of Lemmas 1 and 2.3, and the samplers and helpers behind their
checks (Bao, Hataya, Karakida 2024)."""

import numpy as np
import pytest
import sympy as sp

import theory
from theory.localization import sym
from verify.checks.localization.orders import fit_power
from verify.checks.localization.rho import continuum_gap_bound, finite_T_moments
from verify.models.localization import qk_gradient, qk_gradient_expansion, qk_gradient_terms
from verify.tasks.random_walk import query_products, sample_walks


# -- App. B.2 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("T", [1, 2, 3, 5])
def test_factor_records_are_the_sums_of_the_walk_moments(T):
    """(B), (C), (D) at small T equal the index sums of eq. 17 / eq. 22 (derived) and of E[x_a^2 x_T^2]."""
    trP, trP2, trW, trW2 = 1.5, 1.1, 0.7, 1.3
    cross = theory.get("localization.random_walk.cross_moment")
    prod = theory.get("localization.random_walk.query_product")
    pairs = [(i, j) for i in range(1, T + 1) for j in range(1, T + 1)]
    B = T**2 * sum(cross(i=min(i, j), k=max(i, j), trW=trP, trW2=trP2) for i, j in pairs)
    C = T**3 * sum(prod(i=b, k=b, T=T, trW=trW, trW2=trW2) for b in range(1, T + 1))
    D_same = T**3 * sum(3 * a * a + a * (T - a) for a in range(1, T + 1))   # E[g^2 (g + h)^2], g ~ N(0, a)
    D_diff = T**3 * sum(a * T for a in range(1, T + 1))
    assert theory.get("localization.orders.factor_b")(T=T, trP=trP, trP2=trP2) == pytest.approx(B, rel=1e-12)
    assert theory.get("localization.orders.factor_c")(T=T, trW=trW, trW2=trW2) == pytest.approx(C, rel=1e-12)
    assert theory.get("localization.orders.factor_d_diagonal")(T=T) == pytest.approx(D_same, rel=1e-12)
    assert theory.get("localization.orders.factor_d_offdiagonal")(T=T) == pytest.approx(D_diff, rel=1e-12)


def test_factors_have_degree_six_with_the_stated_leading_terms():
    T = sym("T")
    lead = {name: sp.expand(sp.limit(theory.get(f"localization.orders.{name}").expr / T**6, T, sp.oo))
            for name in ("factor_b", "factor_c", "factor_d_diagonal", "factor_d_offdiagonal")}
    assert lead["factor_b"] == sp.Rational(5, 12) * sym("trP2") + sym("trP") ** 2 / 6
    assert lead["factor_c"] == sp.Rational(5, 6) * sym("trW2") + sym("trW") ** 2 / 3
    assert lead["factor_d_diagonal"] == sp.Rational(7, 6) and lead["factor_d_offdiagonal"] == sp.Rational(1, 2)


def test_fast_gradient_terms_equal_the_matrix_forms_and_the_index_sums():
    rng = np.random.default_rng(3)
    d, T, B = 3, 7, 6
    walk = rng.standard_normal((B, d, T + 1)).cumsum(axis=2)
    X, y = walk[:, :, :T], walk[:, :, T]
    W, WV = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    WF = np.eye(d) + 0.1 * rng.standard_normal((d, d))
    fast = qk_gradient_terms(X, y, W, WV, WF, 2.0)
    for a, b in zip(fast[:3], qk_gradient(X, y, W, WV, WF, 2.0, terms=True)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())
    for a, b in zip(fast[:3], qk_gradient_expansion(X, y, W, WV, WF, 2.0)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())
    assert not np.allclose(fast[3], fast[0])  # the alpha = i, beta = j summands are not the whole of (19)


def test_fit_power_recovers_the_exponent_and_rejects_a_wrong_one():
    T = np.array([32.0, 64, 128, 256])
    y = T**3 * (0.5 + 3 / T)
    se = 0.01 * y
    z, c0, _, _ = fit_power(T, y, se, 3.0)
    assert z < 1e-8 and c0 == pytest.approx(0.5)
    assert fit_power(T, y, se, 2.0)[0] > 20


# -- the exact sampler of x_t^T x_T -------------------------------------------------------------------
def test_query_products_have_the_moments_of_the_walk():
    """E[x_t^T x_T] = m t and Cov(x_s^T x_T, x_t^T x_T) = m (T min(s, t) + s t) (eq. 22 with W = I)."""
    rng = np.random.default_rng(0)
    T, m, n = 5, 3, 200_000
    A = query_products(rng, T, n, m)
    t = np.arange(1, T + 1)
    mean_se = A.std(axis=0) / np.sqrt(n)
    assert np.max(np.abs(A.mean(axis=0) - m * t) / mean_se) < 5
    cov = np.cov(A, rowvar=False)
    exact = m * (T * np.minimum.outer(t, t) + np.outer(t, t))
    assert np.max(np.abs(cov / exact - 1)) < 0.03
    X = sample_walks(rng, np.eye(m), T, 50_000)
    direct = np.einsum("bdt,bd->bt", X, X[:, :, -1])
    assert np.max(np.abs(np.cov(direct, rowvar=False) / exact - 1)) < 0.06


@pytest.mark.parametrize("kw, name", [({"T": 0}, "T"), ({"batch": 0}, "batch"), ({"m": 1.5}, "m")])
def test_query_products_bad_input_names_the_parameter(kw, name):
    args = {"T": 3, "batch": 2, "m": 2, **kw}
    with pytest.raises(ValueError, match=f"^{name}: "):
        query_products(np.random.default_rng(0), **args)


# -- the continuum's finite-T bound -------------------------------------------------------------------
@pytest.mark.parametrize("T, xi, eta", [(20, 5.5, 0.5), (40, 11.0, 0.5), (40, 0.0, 0.5), (200, -3.0, 1.2),
                                        (64, 8.0, 0.3)])
def test_continuum_gap_bound_bounds_the_gap(T, xi, eta):
    lam = 3.0
    trW, trW2 = xi * eta * lam, (eta * lam) ** 2
    mu, v, mu_c, v_c = finite_T_moments(T, trW, trW2, lam)
    gauss = np.array([theory.get("localization.rho.gaussian")(i=i, T=T, trW=trW, trW2=trW2, temperature=lam)
                      for i in range(1, T + 1)])
    cont = theory.get("localization.rho.continuum")(theta=np.arange(1, T + 1) / T, xi=xi, eta=eta)
    bound = continuum_gap_bound(mu, v, mu_c, v_c)
    assert np.all(np.abs(gauss - cont) <= bound)


# -- Lemma 1's proof -------------------------------------------------------------------------------
def test_second_moment_is_lambda2_times_variance_plus_centred_mean():
    m, v = theory.get("localization.u.mean").expr, theory.get("localization.u.variance").expr
    lam, T = sym("temperature"), sym("T")
    assert sp.simplify(theory.get("localization.u.second_moment").expr - lam**2 * (v + (m - 1 / T) ** 2)) == 0


def test_the_b2_slip_is_the_variance_slip():
    """Putting back the printed (B2)'s missing 2 T^2 i tr(W^2) turns the printed second moment into the derived one."""
    i, T = sym("i"), sym("T")
    r_b2, r_sm = theory.get("localization.u.proof_b2_limit"), theory.get("localization.u.second_moment_limit")
    assert sp.expand(r_b2.expr - r_b2.printed_expr) == 2 * T**2 * i * sym("trW2")
    assert sp.expand(r_sm.printed_expr - r_sm.expr) == sp.expand(2 * T**2 * i * sym("trW2") / T**3)


# -- Lemma 2.3's proof -----------------------------------------------------------------------------
def test_quotient_derivative_agrees_with_the_printed_one_only_at_a_quarter_and_a_half():
    r = theory.get("localization.rho.proof_quotient_derivative")
    th = sym("theta")
    roots = sp.solve(sp.Eq(sp.numer(sp.together(r.expr - r.printed_expr)), 0), th)
    assert sorted(float(x) for x in roots if x.is_real and 0 < x <= 1) == [0.25, 0.5]


def test_proof_derivative_vanishes_at_zero_xi_while_rho_prime_does_not():
    r = theory.get("localization.rho.derivative")
    assert r(printed=True, theta=0.5, xi=0.0, eta=1.0) == 0.0
    assert r(theta=0.5, xi=0.0, eta=1.0) == pytest.approx(
        theory.get("localization.rho.derivative_at_zero_xi")(theta=0.5, eta=1.0), rel=1e-12)
