"""Moments of the linearised softmax under random-walk tokens (Bao, Hataya, Karakida 2024).

References used here are independent of the sympy derivation: hand formulas, and an
exact numerical computation of the moments of quadratic forms in the Gaussian vector vec(X)
(E[x^T M x] = tr(M C), Var = 2 tr(M C M C) for symmetric M), built from Cov(x_s, x_t) =
min(s, t) Sigma and the given W_QK.
"""

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory.localization import sym
from verify.tasks.random_walk import (anisotropic_covariance, iter_walks, linearised_signal, sample_walks,
                                      spectrum, symmetric_qk, traces)

MEAN, VAR = "localization.u.mean", "localization.u.variance"


def _walk_covariance(Sigma, T):
    """Cov(vec X) for X = [x_1 .. x_T] (token-major): kron(min(s, t), Sigma)."""
    t = np.arange(1, T + 1)
    return np.kron(np.minimum.outer(t, t), Sigma)


def _selector(T, d, t):
    """(d, d T) matrix picking x_t from the token-major vec(X)."""
    E = np.zeros((d, d * T))
    E[:, (t - 1) * d:t * d] = np.eye(d)
    return E


def exact_u_moments(W_QK, Sigma, T, lam):
    """Exact E[u_i], Var[u_i] for every i, by Gaussian quadratic forms (no sympy, no sampling)."""
    d = Sigma.shape[0]
    C = _walk_covariance(Sigma, T)
    xT = _selector(T, d, T)
    means, variances = [], []
    for i in range(1, T + 1):
        # u_i - 1/T = v^T M v, v = vec X, with coefficients gamma^i_j = delta_ij/T - 1/T^2
        G = sum((float(j == i) / T - 1 / T**2) * _selector(T, d, j) for j in range(1, T + 1))
        M = G.T @ W_QK @ xT / lam
        M = 0.5 * (M + M.T)
        means.append(np.trace(M @ C) + 1 / T)
        variances.append(2 * np.trace(M @ C @ M @ C))
    return np.array(means), np.array(variances)


# -- derivations against hand formulas ------------------------------------------------
def test_exact_moments_equal_the_spec_formulas():
    i, T, trW, trW2, lam = (sym(n) for n in ("i", "T", "trW", "trW2", "temperature"))
    mu = (i - (T + 1) / 2) * trW / (lam * T) + 1 / T
    v = trW2 / lam**2 * (24 * i**2 - 24 * T * i - 24 * i + 7 * T**2 + 12 * T + 5) / (12 * T**2)
    assert theory.get(MEAN).equal(theory.get(MEAN).expr, mu)
    assert theory.get(VAR).equal(theory.get(VAR).expr, v)


def test_limits_are_the_limits_of_the_exact_forms():
    i, T, trW2, lam = (sym(n) for n in ("i", "T", "trW2", "temperature"))
    th = sp.Symbol("theta_test", positive=True)
    for exact, lim in ((MEAN, "localization.u.mean_limit"), (VAR, "localization.u.variance_limit")):
        e = theory.get(exact).expr.xreplace({i: th * T})
        l = theory.get(lim).expr.xreplace({i: th * T})
        assert sp.simplify(sp.limit(e - l, T, sp.oo)) == 0
    corrected = (2 * th**2 - 2 * th + sp.Rational(7, 12)) * trW2 / lam**2
    assert sp.simplify(theory.get("localization.u.variance_limit").expr.xreplace({i: th * T}) - corrected) == 0
    assert theory.get("localization.u.variance_limit").status == "asymptotic"
    assert theory.get("localization.u.variance_limit").erratum


def test_printed_variance_is_right_only_at_theta_zero():
    """Printed/corrected = 13 at theta = 1/2, 31/7 at theta = 1, 1 as theta -> 0."""
    cf = theory.get("localization.u.variance_limit")
    kw = dict(T=1000, trW2=1.0, temperature=1.0)
    assert cf(printed=True, i=500, **kw) / cf(i=500, **kw) == pytest.approx(13, rel=1e-12)
    assert cf(printed=True, i=1000, **kw) / cf(i=1000, **kw) == pytest.approx(31 / 7, rel=1e-12)
    assert cf(printed=True, i=1, **kw) / cf(i=1, **kw) == pytest.approx(1, rel=1e-2)


def test_softmax_taylor_coefficients():
    for T in (1, 2, 7, 100):
        p = np.full(T, 1 / T)
        J = np.diag(p) - np.outer(p, p)
        assert theory.get("localization.softmax.value_at_origin")(T=T) == pytest.approx(1 / T, rel=1e-15)
        assert theory.get("localization.softmax.jacobian_diagonal")(T=T) == pytest.approx(J[0, 0], abs=1e-16)
        if T > 1:
            assert theory.get("localization.softmax.jacobian_offdiagonal")(T=T) == pytest.approx(J[0, 1], rel=1e-14)


# -- exact Gaussian moments: traces only, eigenvector invariance ------------------------------
@pytest.mark.parametrize("aniso", [False, True])
def test_moments_match_exact_quadratic_forms(aniso):
    rng = np.random.default_rng(5)
    d, T, lam = 3, 6, 1.7
    Sigma = anisotropic_covariance(rng, d) if aniso else np.eye(d)
    W = symmetric_qk(rng, [0.8, -0.3, 0.5])
    trW, trW2 = traces(W, Sigma)
    means, variances = exact_u_moments(W, Sigma, T, lam)
    for i in range(1, T + 1):
        assert theory.get(MEAN)(i=i, T=T, trW=trW, temperature=lam) == pytest.approx(means[i - 1], rel=1e-12, abs=1e-14)
        assert theory.get(VAR)(i=i, T=T, trW2=trW2, temperature=lam) == pytest.approx(variances[i - 1], rel=1e-12)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_moments_invariant_to_eigenvectors_of_W_QK(seed):
    """Same spectrum, different eigenvectors: identical exact moments (they depend on traces only)."""
    rng = np.random.default_rng(seed)
    d, T = 3, 5
    w = rng.uniform(-1, 1, d)
    Sigma = np.eye(d)
    m1, v1 = exact_u_moments(symmetric_qk(rng, w), Sigma, T, 1.3)
    m2, v2 = exact_u_moments(symmetric_qk(rng, w), Sigma, T, 1.3)
    np.testing.assert_allclose(m1, m2, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(v1, v2, rtol=1e-11, atol=1e-13)


def test_lemma4_and_eq22_match_exact_quadratic_forms():
    rng = np.random.default_rng(9)
    d, T, i, k = 3, 7, 2, 5
    Sigma = anisotropic_covariance(rng, d)
    W = symmetric_qk(rng, [0.9, -0.4, 0.3])
    trW, trW2 = traces(W, Sigma)
    C = _walk_covariance(Sigma, T)
    Ei, Ek, ET = (_selector(T, d, t) for t in (i, k, T))

    def sym_(M):
        return 0.5 * (M + M.T)

    def e_prod(M1, M2):  # E[v^T M1 v v^T M2 v] for symmetric M1, M2
        return 2 * np.trace(M1 @ C @ M2 @ C) + np.trace(M1 @ C) * np.trace(M2 @ C)

    Qii, Qik, Qkk = sym_(Ei.T @ W @ Ei), sym_(Ei.T @ W @ Ek), sym_(Ek.T @ W @ Ek)
    SiT, SkT = sym_(Ei.T @ W @ ET), sym_(Ek.T @ W @ ET)
    ref = {
        "quadratic_mean": (np.trace(Qii @ C), dict(i=i, trW=trW)),
        "quadratic_second_moment": (e_prod(Qii, Qii), dict(i=i, trW=trW, trW2=trW2)),
        "cross_moment": (e_prod(Qik, Qik), dict(i=i, k=k, trW=trW, trW2=trW2)),
        "mixed_moment": (e_prod(Qik, Qkk), dict(i=i, k=k, trW=trW, trW2=trW2)),
        "query_product": (e_prod(SiT, SkT), dict(i=i, k=k, T=T, trW=trW, trW2=trW2)),
    }
    for name, (value, kw) in ref.items():
        cf = theory.get(f"localization.random_walk.{name}")
        assert cf(**kw) == pytest.approx(value, rel=1e-12), name
        assert abs(cf(printed=True, **kw) - value) > 1e-3 * abs(value), name  # printed constants are off


# -- properties ----------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 500), data=st.data())
def test_exact_variance_symmetric_under_reflection(T, data):
    """v^i = v^{T+1-i}: the corrected variance is symmetric about the middle (theta = 1/2)."""
    i = data.draw(st.integers(1, T))
    cf = theory.get(VAR)
    assert cf(i=i, T=T, trW2=1.0, temperature=1.0) == pytest.approx(cf(i=T + 1 - i, T=T, trW2=1.0, temperature=1.0),
                                                                     rel=1e-12)
    lim = theory.get("localization.u.variance_limit")
    mirror = T - i if i < T else T
    assert lim(i=i, T=T, trW2=1.0, temperature=1.0) == pytest.approx(lim(i=mirror, T=T, trW2=1.0, temperature=1.0),
                                                                     rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(T=st.integers(1, 10**6), u=st.floats(0, 1), trW=st.floats(-50, 50), trW2=st.floats(1e-3, 1e3),
       lam=st.floats(0.1, 30))
def test_numpy_matches_mpmath(T, u, trW, trW2, lam):
    i = max(1, int(round(u * T)))
    for id, kw in ((MEAN, dict(i=i, T=T, trW=trW, temperature=lam)), (VAR, dict(i=i, T=T, trW2=trW2, temperature=lam))):
        cf = theory.get(id)
        with mpmath.workdps(50):
            ref = float(cf("mpmath", **kw))
        assert cf(**kw) == pytest.approx(ref, rel=1e-11, abs=1e-13 * (abs(trW) / lam + 1))


@pytest.mark.parametrize("id, kw, name", [
    (MEAN, dict(i=5, T=4, trW=1.0, temperature=1.0), "i"),
    (VAR, dict(i=0, T=4, trW2=1.0, temperature=1.0), "i"),
    (VAR, dict(i=1, T=4, trW2=-1.0, temperature=1.0), "trW2"),
    (MEAN, dict(i=1, T=4, trW=1.0, temperature=0.0), "temperature"),
    ("localization.random_walk.cross_moment", dict(i=3, k=2, trW=1.0, trW2=1.0), "i"),
    ("localization.random_walk.query_product", dict(i=1, k=5, T=4, trW=1.0, trW2=1.0), "k"),
])
def test_bad_input_names_the_parameter(id, kw, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        theory.get(id)(**kw)


# -- the sampler --------------------------------------------------------------------------------
def test_sampler_shapes_and_covariance():
    rng = np.random.default_rng(3)
    d, T, B = 2, 4, 60_000
    Sigma = np.array([[1.0, 0.3], [0.3, 0.5]])
    X = sample_walks(rng, Sigma, T, B)
    assert X.shape == (B, d, T)
    # Cov(x_s, x_t)[0, 1] = min(s, t) Sigma[0, 1], tested by z-scores (family of 16, false alarm 1e-6)
    from verify.stats import z_threshold

    prod = X[:, 0, :, None] * X[:, 1, None, :]  # (B, T, T): x_s[0] x_t[1]
    mean, se = prod.mean(0), prod.std(0) / np.sqrt(B)
    t = np.arange(1, T + 1)
    z = np.abs(mean - np.minimum.outer(t, t) * Sigma[0, 1]) / se
    assert z.max() < z_threshold(T * T)
    assert sum(x.shape[0] for x in iter_walks(rng, Sigma, T, 10_001, chunk=4096)) == 10_001


def test_linearised_signal_formula():
    rng = np.random.default_rng(4)
    X = sample_walks(rng, np.eye(3), 5, 7)
    W = symmetric_qk(rng, [1.0, 0.5, -0.2])
    u = linearised_signal(X, W, 2.0)
    omega = np.einsum("bdt,de,be->bt", X, W, X[:, :, -1]) / 2.0
    T = 5
    gamma = np.eye(T) / T - 1 / T**2
    np.testing.assert_allclose(u, omega @ gamma.T + 1 / T, rtol=1e-13, atol=1e-15)
    assert np.all(np.diff(spectrum(9, 0.5, 0.1)) <= 0) and spectrum(9, 0.5, 0.1)[4] == pytest.approx(0.5)


@pytest.mark.parametrize("call, name", [
    (lambda r: sample_walks(r, np.ones((2, 3)), 4, 2), "Sigma"),
    (lambda r: sample_walks(r, np.eye(2), 0, 2), "T"),
    (lambda r: linearised_signal(np.zeros((2, 3, 4)), np.eye(2), 1.0), "W_QK"),
    (lambda r: linearised_signal(np.zeros((2, 3, 4)), np.eye(3), 0.0), "temperature"),
])
def test_sampler_bad_input(call, name):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        call(np.random.default_rng(0))
