"""Extreme but valid inputs of three closed forms whose float64 evaluation used to fail silently.

* ``preconditioned_gd.multi_layer.optimal_steps``: L = 3 gave NaN from n ~ 1e12 (the depressed
  cubic's p, q cancelled) and L = 2, 3 lost digits from n ~ 1e8; the polynomials of degree up to
  24 overflow at n, d ~ 2**53 unless scaled.
* ``localization.rho.gaussian`` (and the continuum forms): the sum of two nearly opposite erf
  values at low temperature (large eta) gave 0 or a negative number.
* ``linear_attention.separate.ansatz_value_weight``: lambda^2 overflowed (0 at lambda = 1e200)
  or underflowed (inf at lambda = 1e-300).

Each numpy value is compared with a reference that does not share the float formula: the roots
of the kernel polynomial by ``mpmath.polyroots`` (exact rational coefficients), and the derived erf
/ power forms evaluated in mpmath at enough digits that their cancellation does not matter.
"""

from __future__ import annotations

import warnings

import mpmath
import numpy as np
import pytest
import sympy as sp

import theory
from theory.emit import emit
from theory.preconditioned_gd import multi_layer as ml

TOL = 1e-10


def _rel(value, reference):
    value, reference = np.asarray(value, dtype=float), np.asarray(reference, dtype=float)
    assert np.all(np.isfinite(value)), value
    # relative error; a reference below 1e-290 (near float64's subnormal range) is judged absolutely
    return float(np.max(np.abs(value - reference) / np.maximum(np.abs(reference), 1e-290)))


def _derived_mpmath(cf):
    """The record's *derived* expression (not its stable rewrite) emitted for mpmath."""
    return emit(cf.expr, cf._args(), "mpmath")


# -- optimal steps ---------------------------------------------------------------------------------
STEPS = "preconditioned_gd.multi_layer.optimal_steps"
N_GRID = [1, 2, 20, 10**4, 10**8, 10**12, 2**53]
D_GRID = [1, 5, 10**3, 10**6, 2**53]


def _kernel_roots(n, d, L, dps=100):
    """The optimal steps as the roots of a^L + c_1 a^{L-1} + ... + c_L, coefficients exact."""
    at = {ml._sym("n"): sp.Integer(n), ml._sym("d"): sp.Integer(d)}
    c = [x.xreplace(at) for x in ml.optimal_kernel(L)]
    with mpmath.workdps(dps):
        coeffs = [mpmath.mpf(1)] + [mpmath.mpf(x.p) / x.q for x in c]
        roots = mpmath.polyroots(coeffs, maxsteps=500, extraprec=4 * dps)
        return sorted(float(mpmath.re(r)) for r in roots)


@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("n", N_GRID)
def test_optimal_steps_at_extreme_n_and_d(n, L):
    cf = theory.get(STEPS)
    for d in D_GRID:
        steps = cf(n=n, d=d, L=L)
        assert np.all(steps > 0) and np.all(np.diff(steps) > 0), (n, d, steps)
        assert _rel(steps, _kernel_roots(n, d, L)) <= TOL, (n, d, steps)


@pytest.mark.parametrize("n, d", [(1, 1), (10**12, 5), (2**53, 2**53), (1, 2**53)])
def test_optimal_steps_mpmath_backend_at_extremes(n, d):
    cf = theory.get(STEPS)
    with mpmath.workdps(60):
        steps = [float(x) for x in cf("mpmath", n=n, d=d, L=3)]
    assert _rel(steps, _kernel_roots(n, d, 3)) <= 1e-14


# -- rho: the difference of two erf values ---------------------------------------------------------
GAUSS, CONT, PRINTED = "localization.rho.gaussian", "localization.rho.continuum", "localization.rho.continuum_printed"
TEMPS = [1e-300, 1e-100, 1e-40, 1e-20, 1e-10, 1e-3, 1.0, 1e3, 1e100, 1e300]


def _erf_reference(cf, kw, dps=800):
    """The derived erf form at ``dps`` digits: its cancellation (~ -log10 of the value) is covered."""
    fn = _derived_mpmath(cf)
    with mpmath.workdps(dps):
        return fn(*[mpmath.mpf(kw[p]) for p in cf.param_names], None)


def test_gaussian_rho_at_low_temperature_known_values():
    cf = theory.get(GAUSS)
    kw = dict(i=3, T=10, trW=1.0, trW2=2.0)
    assert cf(**kw, temperature=1e-20) == pytest.approx(5.7435858874621e-21, rel=1e-12)
    assert cf(**kw, temperature=1e-40) == pytest.approx(5.7435858874621e-41, rel=1e-12)


@pytest.mark.parametrize("T", [2, 3, 10, 1001, 2**40])
def test_gaussian_rho_at_extreme_temperatures(T):
    cf = theory.get(GAUSS)
    with warnings.catch_warnings():
        # T * temperature overflows at T = 2**40, temperature = 1e300: the width 1/sqrt(2v) is then
        # inf, which gives the right limit erf(inf) = 1 (numpy warns)
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in sorted({1, max(1, T // 3), (T + 1) // 2, T}):
            for trW, trW2 in ((-3.0, 2.0), (0.0, 1.0), (1.0, 2.0), (10.0, 0.5), (0.7, 1e4)):
                for lam in TEMPS:
                    kw = dict(i=i, T=T, trW=trW, trW2=trW2, temperature=lam)
                    ref = _erf_reference(cf, kw)
                    assert _rel(cf(**kw), ref) <= TOL, kw
                    with mpmath.workdps(60):
                        assert _rel(float(cf("mpmath", **kw)), ref) <= 1e-14, kw


@pytest.mark.parametrize("id", [CONT, PRINTED])
@pytest.mark.parametrize("eta", [1e-300, 1e-3, 1.0, 1e10, 1e20, 1e40, 1e100, 1e300])
def test_continuum_rho_at_extreme_eta(id, eta):
    cf = theory.get(id)
    for theta in (1e-300, 1e-3, 0.25, 0.5, 0.7, 1.0):
        for xi in (-30.0, -3.0, 0.0, 1.0, 5.0):
            kw = dict(theta=theta, xi=xi, eta=eta)
            ref = _erf_reference(cf, kw)
            assert _rel(cf(**kw), ref) <= TOL, kw
            assert _rel(float(cf("torch", **kw)), ref) <= TOL, kw


def test_rho_vectorised_and_torch_gradient_at_low_temperature():
    import torch

    cf = theory.get(GAUSS)
    lam = np.array([1e-40, 1e-20, 1.0, 1e20])
    vec = cf(i=3, T=10, trW=1.0, trW2=2.0, temperature=lam)
    assert vec.shape == (4,)
    assert np.array_equal(vec, [cf(i=3, T=10, trW=1.0, trW2=2.0, temperature=x) for x in lam])
    t = torch.tensor(1e-20, dtype=torch.float64, requires_grad=True)
    value = cf("torch", i=3, T=10, trW=1.0, trW2=2.0, temperature=t)
    value.backward()
    # rho is linear in the temperature as it tends to 0: d rho / d lambda = rho / lambda
    assert float(t.grad) == pytest.approx(float(value.detach()) / 1e-20, rel=1e-8)


# -- the value weight v* ---------------------------------------------------------------------------
VALUE_WEIGHT = "linear_attention.separate.ansatz_value_weight"
LAM = [1e-300, 1e-200, 1e-10, 1.0, 1e10, 1e200, 1e300, 1.7e308]


@pytest.mark.parametrize("lam", LAM)
def test_value_weight_at_extreme_eigenvalues(lam):
    cf = theory.get(VALUE_WEIGHT)
    fn = _derived_mpmath(cf)
    for trL in LAM:
        for N in (1, 7, 10**9, 2**53):
            with mpmath.workdps(100):  # lambda^2 is no problem for mpmath
                ref = fn(mpmath.mpf(lam), mpmath.mpf(trL), mpmath.mpf(N), None)
            assert _rel(cf(lam=lam, trLambda=trL, N=N), ref) <= TOL, (lam, trL, N)


def test_value_weight_known_values():
    cf = theory.get(VALUE_WEIGHT)
    # v* = (N/(lambda (N + 1) + tr Lambda))^{1/3}
    assert cf(lam=1e200, trLambda=1.0, N=1) == pytest.approx(2 ** (-1 / 3) * 1e-200 ** (1 / 3), rel=1e-13)
    assert cf(lam=1e300, trLambda=3e300, N=5) == pytest.approx((5 / 9e300) ** (1 / 3), rel=1e-13)
    assert cf(lam=1e-300, trLambda=1e-300, N=1) == pytest.approx((1 / 3e-300) ** (1 / 3), rel=1e-13)
