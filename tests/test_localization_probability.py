"""The signal-propagation probability rho (Bao, Hataya, Karakida 2024, eq. 6, Lemma 2).

Reference values are hand-computed numbers and scipy's normal distribution.
"""

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

import theory
from theory.localization import sym

GAUSS, CONT, PRINTED = "localization.rho.gaussian", "localization.rho.continuum", "localization.rho.continuum_printed"
LATE, EARLY = "localization.rho.late_site_limit", "localization.rho.early_site_limit"

thetas = st.floats(1e-6, 1.0)
xis = st.floats(-50, 50)
etas = st.floats(1e-3, 1e3)


def test_gaussian_is_the_normal_interval_probability():
    i, T, trW, trW2, lam = 7, 20, 3.0, 1.5, 2.0
    mu = theory.get("localization.u.mean")(i=i, T=T, trW=trW, temperature=lam)
    v = theory.get("localization.u.variance")(i=i, T=T, trW2=trW2, temperature=lam)
    ref = norm.cdf(1, mu, np.sqrt(v)) - norm.cdf(0, mu, np.sqrt(v))
    assert theory.get(GAUSS)(i=i, T=T, trW=trW, trW2=trW2, temperature=lam) == pytest.approx(ref, rel=1e-12)


def test_continuum_is_eq6_with_corrected_variance():
    th, xi, eta = sym("theta"), sym("xi"), sym("eta")
    Dc = 2 * th**2 - 2 * th + sp.Rational(7, 12)
    z = (th - sp.Rational(1, 2)) * xi
    ref = sp.erf(z / sp.sqrt(2 * Dc)) / 2 + sp.erf((1 / eta - z) / sp.sqrt(2 * Dc)) / 2
    assert theory.get(CONT).equal(theory.get(CONT).expr, ref)
    assert not theory.get(CONT).equal(theory.get(CONT).expr, theory.get(PRINTED).expr)
    assert theory.get(CONT).erratum and theory.get(PRINTED).status == "heuristic"


@pytest.mark.parametrize("theta", [0.1, 0.5, 0.9])
def test_gaussian_tends_to_continuum(theta):
    """rho_i at i = theta T, tr W = xi eta lambda, tr W^2 = (eta lambda)^2 -> rho_c(theta) at rate 1/T."""
    xi, eta, lam = 4.0, 0.7, 3.0
    c = theory.get(CONT)(theta=theta, xi=xi, eta=eta)
    errs = []
    for T in (100, 10_000, 1_000_000):
        g = theory.get(GAUSS)(i=int(theta * T), T=T, trW=xi * eta * lam, trW2=(eta * lam) ** 2, temperature=lam)
        errs.append(abs(g - c))
    assert errs[-1] < 1e-5 and errs[-1] < errs[0]


def test_spec_values_at_zero_xi():
    """xi = 0, eta = 1: corrected 0.405 (theta -> 0) vs 0.499 (theta = 1/2); printed 0.405 at
    theta -> 0 and 0.233 at theta = 1; printed rho'(1/2) = -0.223."""
    c, p = theory.get(CONT), theory.get(PRINTED)
    assert round(c(theta=1e-9, xi=0.0, eta=1.0), 3) == 0.405
    assert round(c(theta=0.5, xi=0.0, eta=1.0), 3) == 0.5  # 0.4997
    assert round(p(theta=1e-9, xi=0.0, eta=1.0), 3) == 0.405
    assert round(p(theta=1.0, xi=0.0, eta=1.0), 3) == 0.233
    assert round(theory.get("localization.rho.derivative_at_zero_xi")(theta=0.5, eta=1.0), 3) == -0.223
    assert theory.get("localization.rho.derivative_at_zero_xi_corrected")(theta=0.5, eta=1.0) == 0.0


def test_derivative_at_zero_xi_matches_the_spec_formula():
    th, eta = sym("theta"), sym("eta")
    ref = -24 * sp.sqrt(6) * th * sp.exp(-6 / (eta**2 * (24 * th**2 + 7))) / (
        sp.sqrt(sp.pi) * eta * (24 * th**2 + 7) ** sp.Rational(3, 2))
    cf = theory.get("localization.rho.derivative_at_zero_xi")
    assert cf.equal(cf.expr, ref)


# -- properties ------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(theta=thetas, xi=xis, eta=etas)
def test_rho_in_unit_interval(theta, xi, eta):
    for id in (CONT, PRINTED):
        r = theory.get(id)(theta=theta, xi=xi, eta=eta)
        assert -1e-15 <= r <= 1 + 1e-15


@settings(max_examples=40, deadline=None)
@given(T=st.integers(2, 10**5), u=st.floats(0, 1), trW=st.floats(-100, 100), trW2=st.floats(1e-4, 1e4),
       lam=st.floats(0.1, 30))
def test_gaussian_rho_in_unit_interval(T, u, trW, trW2, lam):
    i = max(1, int(round(u * T)))
    r = theory.get(GAUSS)(i=i, T=T, trW=trW, trW2=trW2, temperature=lam)
    assert 0 <= r <= 1


@settings(max_examples=40, deadline=None)
@given(theta=st.floats(0.0, 0.999), xi=xis, eta=etas)
def test_corrected_continuum_mirror_symmetry(theta, xi, eta):
    """rho_c(1 - theta; -xi, eta) = rho_c(theta; xi, eta) (D_c is symmetric about 1/2); eq. 6 is not."""
    c = theory.get(CONT)
    t = max(theta, 1e-12)                  # theta = 0 is outside the domain; mirror the same t
    a = c(theta=1 - t, xi=-xi, eta=eta)
    b = c(theta=t, xi=xi, eta=eta)
    assert a == pytest.approx(b, abs=1e-12)


def test_printed_continuum_is_not_mirror_symmetric():
    p = theory.get(PRINTED)
    assert abs(p(theta=0.2, xi=3.0, eta=0.5) - p(theta=0.8, xi=-3.0, eta=0.5)) > 1e-2


@settings(max_examples=30, deadline=None)
@given(theta=thetas, xi=xis, eta=etas)
def test_numpy_matches_mpmath(theta, xi, eta):
    for id in (CONT, PRINTED):
        cf = theory.get(id)
        with mpmath.workdps(50):
            ref = float(cf("mpmath", theta=theta, xi=xi, eta=eta))
        assert cf(theta=theta, xi=xi, eta=eta) == pytest.approx(ref, rel=1e-10, abs=1e-15)


# -- Lemma 2 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("r", [0.5, 1.0, 2.0, 4.0])
def test_late_and_early_site_limits(r):
    th = np.array([0.1, 0.3, 0.5, 0.6, 0.5 + 1 / r if r > 2 else 0.9, 0.95, 1.0])
    late = theory.get(LATE)(theta=th, r=r)
    expected = np.where((th > 0.5) & (th < 0.5 + 1 / r), 1.0, 0.0)
    expected[(th == 0.5) | (th == 0.5 + 1 / r)] = 0.5
    np.testing.assert_array_equal(late, expected)
    early = theory.get(EARLY)(theta=1 - th[th < 1], r=r)
    np.testing.assert_array_equal(early, expected[th < 1])
    # the continuum rho approaches the limit along xi -> oo, eta = r/xi
    np.testing.assert_allclose(theory.get(CONT)(theta=th, xi=1e6, eta=r / 1e6), late, atol=1e-9)
    np.testing.assert_allclose(theory.get(PRINTED)(theta=th, xi=1e6, eta=r / 1e6), late, atol=1e-9)


def test_printed_limits_differ_only_at_boundaries():
    cf = theory.get(LATE)
    th = np.array([0.2, 0.5, 0.6, 0.75, 0.9])
    np.testing.assert_array_equal(cf(theta=th, r=4.0), [0, 0.5, 1, 0.5, 0])
    np.testing.assert_array_equal(cf(printed=True, theta=th, r=4.0), [0, 1, 1, 1, 0])


@pytest.mark.parametrize("xi", [-3.0, 0.0, 3.0])
def test_vanishing_signal(xi):
    """Lemma 2.4: rho -> 0 as eta -> oo (like 1/eta)."""
    th = np.linspace(0.01, 1, 50)
    r = theory.get(CONT)(theta=th, xi=xi, eta=1e8)
    assert np.max(r) < 1e-7


@pytest.mark.parametrize("id, kw, name", [
    (CONT, dict(theta=1.5, xi=0.0, eta=1.0), "theta"),
    (CONT, dict(theta=0.0, xi=0.0, eta=1.0), "theta"),
    (PRINTED, dict(theta=0.5, xi=0.0, eta=-1.0), "eta"),
    (GAUSS, dict(i=9, T=8, trW=1.0, trW2=1.0, temperature=1.0), "i"),
    (LATE, dict(theta=0.5, r=0.0), "r"),
    (GAUSS, dict(i=1, T=1, trW=1.0, trW2=1.0, temperature=1.0), "T"),
])
def test_bad_input_names_the_parameter(id, kw, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        theory.get(id)(**kw)
