"""The baselines of Figs. 6-7 of Ahn, Cheng, Daneshmand, Sra 2023 (App. D): least squares in context,
L-step preconditioned GD with one constant step, and their Monte Carlo companions in verify (plain GD,
Theorem 3's optimum past the registry, the three-layer GD++ optimum), and the side-by-side GD++ sweep.

Reference values are independent of the code under test: chi-square moments at d = 1, the hand
formula of one step, Theorem 3's multi-layer loss at equal steps, numpy root finding, sampled spectra,
and the transformer of :mod:`verify.models.linear_transformer`.
"""

from fractions import Fraction
from math import comb, prod

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory.preconditioned_gd import constant_step as cs
from theory.preconditioned_gd import sym
from theory.preconditioned_gd.multi_layer import derive_loss as multi_layer_loss

LOSS = "preconditioned_gd.constant_step.loss"
STEP = "preconditioned_gd.constant_step.optimal_step"
OLS = "preconditioned_gd.least_squares.loss"


def _cf(id, *args, **kw):
    return theory.get(id)(*args, **kw)


# -- least squares ------------------------------------------------------------------------------
@pytest.mark.parametrize("n, d, want", [(1, 5, 4), (4, 5, 1), (5, 5, 0), (20, 5, 0), (3, 3, 0), (2, 9, 7)])
def test_least_squares_loss_is_d_minus_the_rank(n, d, want):
    assert _cf(OLS, n=n, d=d) == want
    with mpmath.workdps(30):
        assert _cf(OLS, "mpmath", n=n, d=d) == want


# -- constant step: the loss ----------------------------------------------------------------------
@pytest.mark.parametrize("L", [1, 2, 3])
def test_loss_is_theorem3_loss_at_equal_steps(L):
    a = sym("a")
    want = multi_layer_loss().subs({sym(f"a_{l}"): (a if l < L else 0) for l in range(3)})
    assert sp.expand(cs.loss_of(L) - want) == 0


@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_loss_at_d1_is_a_chi_square_polynomial(L):
    """d = 1: S_u = chi^2_n / n, E (chi^2_n)^k = n (n + 2) ... (n + 2k - 2)."""
    n, a = 7, Fraction(3, 5)
    m = [Fraction(prod(n + 2 * i for i in range(k)), n**k) for k in range(2 * L + 1)]
    want = sum(comb(2 * L, k) * (-a) ** k * m[k] for k in range(2 * L + 1))
    assert _cf(LOSS, n=n, d=1, L=L, a=float(a)) == pytest.approx(float(want), rel=1e-13)


def test_one_step_by_hand():
    """L = 1: f(a) = d - 2 a d + a^2 d (n + d + 1)/n (m_1 = d, m_2 = d (n + d + 1)/n)."""
    for n, d, a in [(20, 5, 0.7), (3, 8, 0.2), (50, 2, 1.3)]:
        assert _cf(LOSS, n=n, d=d, L=1, a=a) == pytest.approx(d - 2 * a * d + a**2 * d * (n + d + 1) / n, rel=1e-13)


@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_stable_form_equals_the_derived_one(L):
    L_ = sym("L")
    rec = theory.get(LOSS)
    diff = rec.numeric_expr.subs(L_, L) - rec.expr.subs(L_, L)
    assert sp.simplify(sp.expand(diff)) == 0


def test_loss_matches_sampled_spectra():
    """E tr (I - a S_u)^{2L} by 1e5 sampled white Wishart spectra (n = 12, d = 4, L = 2)."""
    rng = np.random.default_rng(5)
    G = rng.standard_normal((100_000, 4, 12))
    s = np.linalg.eigvalsh(G @ G.transpose(0, 2, 1) / 12)
    e = np.sum((1 - 0.6 * s) ** 4, axis=1)
    assert abs(e.mean() - _cf(LOSS, n=12, d=4, L=2, a=0.6)) < 5 * e.std() / np.sqrt(len(e))


# -- constant step: the optimum -------------------------------------------------------------------
@pytest.mark.parametrize("L", [1, 2, 3])
def test_optimal_step_relation_is_the_derivative(L):
    a, n, d = sym("a"), sym("n"), sym("d")
    rel = theory.get(STEP).expr
    star = [f for f in rel.atoms(sp.Function) if f.func.__name__ == "a_star"][0]
    slope = rel.lhs.subs(star, a).subs(sym("L"), L)
    assert sp.expand(sp.diff(cs.loss_of(L), a) + 2 * L * slope) == 0
    assert set(rel.free_symbols) == {n, d, sym("L")}


@pytest.mark.parametrize("n, d", [(20, 5), (3, 7), (1, 1), (100, 10)])
def test_one_layer_optimal_step_is_n_over_n_plus_d_plus_1(n, d):
    assert _cf(STEP, n=n, d=d, L=1) == pytest.approx(n / (n + d + 1), rel=1e-14)


@pytest.mark.parametrize("n, d, L", [(20, 5, 2), (20, 5, 3), (20, 5, 4), (2, 5, 3), (6, 3, 2), (40, 2, 4)])
def test_optimal_step_is_the_real_root_and_a_minimum(n, d, L):
    a = _cf(STEP, n=n, d=d, L=L)
    coef = [float(x) for x in cs.slope_coefficients(n, d, L)]
    real = [r.real for r in np.roots(coef[::-1]) if abs(r.imag) < 1e-9 * abs(r)]
    assert len(real) == 1 and a == pytest.approx(real[0], rel=1e-9)
    f = _cf(LOSS, n=n, d=d, L=L, a=a)
    for h in (1e-3, -1e-3):
        assert _cf(LOSS, n=n, d=d, L=L, a=a * (1 + h)) > f


@pytest.mark.parametrize("L", [2, 3, 4])
def test_one_step_is_worse_than_theorem3_optimum(L):
    f_one = _cf(LOSS, n=20, d=5, L=L, a=_cf(STEP, n=20, d=5, L=L))
    if L <= 3:
        assert f_one > _cf("preconditioned_gd.multi_layer.optimal_loss", n=20, d=5, L=L) * 1.3
    assert f_one == pytest.approx({2: 0.49900738800725614, 3: 0.26834221784644985, 4: 0.16325338153156654}[L],
                                  rel=1e-12)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 60), d=st.integers(1, 12), L=st.integers(1, 3))
def test_numpy_and_mpmath_agree(n, d, L):
    with mpmath.workdps(40):
        exact = _cf(STEP, "mpmath", n=n, d=d, L=L)
    assert _cf(STEP, n=n, d=d, L=L) == pytest.approx(float(exact), rel=1e-12)
    assert float(_cf(STEP, "torch", n=n, d=d, L=L)) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize("kw, name", [(dict(n=0, d=5, L=1), "n"), (dict(n=5, d=5, L=5), "L"),
                                      (dict(n=5, d=0, L=1), "d")])
def test_bad_input_names_the_parameter(kw, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        _cf(STEP, **kw)


# -- verify: Monte Carlo companions ----------------------------------------------------------------
def test_algorithm_runs_match_the_closed_forms():
    from verify.models.preconditioned_gd_baselines import mc_algorithm_loss

    rng = np.random.default_rng(0)
    Sigma = [1.0, 1.0, 0.25, 0.0625, 1.0]
    est = mc_algorithm_loss(rng, Sigma, 20, 40_000, "pgd", a=0.5, L=2)
    assert abs(est.mean - _cf(LOSS, n=20, d=5, L=2, a=0.5)) < 5 * est.se
    assert abs(mc_algorithm_loss(rng, Sigma, 3, 20_000, "ols").mean - 2) < 0.1
    with pytest.raises(ValueError, match="^algorithm"):
        mc_algorithm_loss(rng, Sigma, 3, 10, "newton")


def test_plain_gd_at_identity_is_preconditioned_gd():
    """At Sigma = I plain GD is Sigma^{-1}-preconditioned GD: the best step and loss are the one-step
    closed form's."""
    from verify.models.preconditioned_gd_baselines import plain_gd_loss

    eta, est = plain_gd_loss(np.random.default_rng(1), np.eye(5), 20, 2, 60_000)
    assert eta == pytest.approx(_cf(STEP, n=20, d=5, L=2), rel=0.02)
    assert abs(est.mean - _cf(LOSS, n=20, d=5, L=2, a=_cf(STEP, n=20, d=5, L=2))) < 5 * est.se


def test_pgd_optimal_loss_monte_carlo_path_agrees_with_the_exact_value(monkeypatch):
    """The Monte Carlo path (used past the registry's depth) at L = 3, where the exact value exists."""
    import theory.preconditioned_gd.multi_layer as ml
    from verify.models.preconditioned_gd_baselines import pgd_optimal_loss

    exact = pgd_optimal_loss(20, 5, 3)
    assert exact.exact
    monkeypatch.setattr(ml, "MAX_LAYERS", 2)
    est = pgd_optimal_loss(20, 5, 3, np.random.default_rng(2), samples=100_000)
    assert not est.exact and est.mean - exact.mean > -5 * est.se and est.mean - exact.mean < 5 * est.se + 1e-3


def test_gdpp_three_layer_optimum_is_a_local_minimum():
    """Every coordinate of the stored numerical optimum, moved by 3 % either way, raises the GD++ loss
    on common Wishart spectra (paired differences, far beyond their noise)."""
    from verify.models.preconditioned_gd_baselines import GDPP3_OPTIMUM, gdpp_spectral_loss, wishart_spectra

    rng = np.random.default_rng(3)
    for (n, d), (a, b, f_ref) in GDPP3_OPTIMUM.items():
        s = wishart_spectra(rng, n, d, 30_000)
        x = np.r_[a, b[:2]]
        f0 = gdpp_spectral_loss(None, n, d, a, b, spectra=s).mean
        assert f0 == pytest.approx(f_ref, rel=0.1)
        for i in range(5):
            for h in (0.97, 1.03):
                y = x.copy()
                y[i] *= h
                assert gdpp_spectral_loss(None, n, d, y[:3], np.r_[y[3:], 0.0], spectra=s).mean > f0


@pytest.mark.slow
def test_gdpp_three_layer_optimum_is_found_again():
    """Nelder-Mead from 20 % off the stored optimum comes back to it (within 3 % per coordinate)."""
    from verify.models.preconditioned_gd_baselines import GDPP3_OPTIMUM, gdpp_local_optimum

    for (n, d), (a, b, _) in GDPP3_OPTIMUM.items():
        a1, b1, _ = gdpp_local_optimum(np.random.default_rng(4), n, d, (np.asarray(a) * 1.2, np.asarray(b) * 0.8))
        assert np.allclose(a1, a, rtol=0.03) and np.allclose(b1[:2], b[:2], rtol=0.03)


# -- the side-by-side sweep ------------------------------------------------------------------------
def test_stacked_prediction_is_the_transformer():
    """Values and gradients of gdpp_predict_stacked equal LinearTransformer("gdpp").predict per model."""
    import torch

    from verify.models.linear_transformer import LinearTransformer, sample_tokens_torch
    from verify.models.preconditioned_gd_sweep import gdpp_predict_stacked

    gen = torch.Generator().manual_seed(0)
    d, n, L_max = 4, 6, 3
    models = [LinearTransformer(d, L, "gdpp").init_(gen, 0.3) for L in (1, 2, 3)]
    tok = sample_tokens_torch(np.eye(d), n, 40, generator=gen)
    Zc = tok.Z[:, :, :n]
    G = (Zc @ Zc.transpose(1, 2) / n).expand(3, -1, -1, -1)
    zq = tok.Z[:, :, n].expand(3, -1, -1)
    A = torch.zeros(3, L_max, d, d, dtype=torch.float64)
    B = torch.zeros_like(A)
    for k, m in enumerate(models):
        A[k, :m.L], B[k, :m.L] = m.A.detach(), m.B.detach()
    A.requires_grad_(True)
    B.requires_grad_(True)
    out = gdpp_predict_stacked(A, B, G, zq)
    out.sum().backward()
    for k, m in enumerate(models):
        want = m.predict(tok.Z)
        want.sum().backward()
        assert torch.allclose(out[k], want, rtol=1e-12, atol=1e-12)
        assert torch.allclose(A.grad[k, :m.L], m.A.grad, rtol=1e-10, atol=1e-12)
        assert torch.allclose(B.grad[k, :m.L], m.B.grad, rtol=1e-10, atol=1e-12)


def test_a_model_of_a_sweep_trains_as_it_would_alone():
    """Models of one n share each batch; from the same start and the same data stream, the (2, 8)
    model of a sweep with a (1, 8) model follows its lone run (to round-off), and the layer past the
    second model's depth stays zero."""
    import torch

    from verify.models.preconditioned_gd_sweep import train_gdpp_sweep

    rng = np.random.default_rng(0)
    A0, B0 = (0.05 * rng.standard_normal((2, 2, 3, 3)) for _ in range(2))
    kw = dict(steps=30, batch=50, lr=0.01, clip=0.01, halve_every=10, log_every=5)
    both = train_gdpp_sweep([(2, 8), (1, 8)], [1.0, 0.5, 0.25], generator=torch.Generator().manual_seed(7),
                            init=(A0, B0), **kw)
    alone = train_gdpp_sweep([(2, 8)], [1.0, 0.5, 0.25], generator=torch.Generator().manual_seed(7),
                             init=(A0[:1], B0[:1]), **kw)
    assert np.allclose(both.A_log[:, 0], alone.A_log[:, 0], rtol=0, atol=1e-12)
    assert np.allclose(both.B_log[:, 0], alone.B_log[:, 0], rtol=0, atol=1e-12)
    assert np.allclose(both.batch_loss[1:, 0], alone.batch_loss[1:, 0], rtol=1e-12)
    assert np.all(both.A_log[:, 1, 1] == 0) and np.all(both.B_log[:, 1, 1] == 0)
    assert not np.allclose(both.A_log[-1, 0], A0[0])


@pytest.mark.parametrize("specs", [[], [(0, 5)], [(2,)], "ab"])
def test_sweep_refuses_bad_specs(specs):
    import torch

    from verify.models.preconditioned_gd_sweep import train_gdpp_sweep

    with pytest.raises(ValueError, match="^specs"):
        train_gdpp_sweep(specs, [1.0, 1.0], steps=1, batch=2, lr=0.1, generator=torch.Generator())
