"""Property tests of the closed forms (hypothesis): identities between records, optimality,
rotation equivariance, monotonicity of the sigmoid, and numerical accuracy against mpmath
and against the *derived* sympy expression at 60 digits, out to extreme parameters.

Random matrices are built from a drawn integer seed through ``np.random.default_rng(seed)``
so a failing case shrinks and replays. Spectra are log-uniform in [1e-2, 1e2].
"""

from math import sqrt

import mpmath
import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from theory.symbols import dim

get = theory.get

seeds = st.integers(0, 2**32 - 1)
dims = st.integers(1, 6)
contexts = st.integers(1, 1000)


def spd(seed, D, low=1e-2, high=1e2):
    """Random eigenvalues (log-uniform in [low, high]) and eigenvectors: (Lambda, eigs, Q)."""
    rng = np.random.default_rng(seed)
    eigs = np.exp(rng.uniform(np.log(low), np.log(high), size=D))
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    Lam = Q @ np.diag(eigs) @ Q.T
    return 0.5 * (Lam + Lam.T), eigs, Q


def orthogonal(rng, D):
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    return Q


def close(a, b, rtol):
    """Norm-wise relative closeness: max|a - b| <= rtol * max|b|."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape
    scale = max(float(np.max(np.abs(b))), np.finfo(float).tiny)
    err = float(np.max(np.abs(a - b))) / scale
    assert err <= rtol, f"relative error {err:.3g} > {rtol:g}"


# -- moments -----------------------------------------------------------------------------
@given(seed=seeds, D=dims, N=contexts)
def test_lambda_hat_sq_shares_eigenvectors_with_eigenvalues_a_d(seed, D, N):
    """Eqs. 32-33: E[Lambda_hat^2] e_d = a_d e_d; it commutes with Lambda."""
    Lam, eigs, Q = spd(seed, D)
    E = get("linear_attention.data.lambda_hat_sq")(Lambda=Lam, N=N)
    scale = np.linalg.norm(E) * np.linalg.norm(Lam)
    assert np.linalg.norm(E @ Lam - Lam @ E) <= 1e-12 * scale
    a = np.array([get("linear_attention.data.lambda_hat_sq_eigenvalue")(lam=l, trLambda=eigs.sum(), N=N)
                  for l in eigs])
    assert np.linalg.norm(E @ Q - Q * a) <= 1e-12 * np.linalg.norm(E)
    close(a, eigs**2 * (1 + (1 + eigs.sum() / eigs) / N), 1e-13)  # eq. 32, second form


@given(seed=seeds, D=st.integers(1, 4), N=contexts)
def test_feature_moments_are_built_from_lambda_hat_sq(seed, D, N):
    """E[z z^T] = Lambda (x) E[Lambda_hat^2] (eq. 44); E[beta beta^T] = E[Lambda_hat^2];
    E[y_q z] = vec(Lambda^2), column-major (eq. 43); E[y_q^2] = tr Lambda."""
    Lam, _, _ = spd(seed, D)
    E = get("linear_attention.data.lambda_hat_sq")(Lambda=Lam, N=N)
    close(get("linear_attention.data.zz")(Lambda=Lam, N=N), np.kron(Lam, E), 1e-13)
    close(get("linear_attention.data.beta_beta")(Lambda=Lam, N=N), E, 1e-13)
    close(get("linear_attention.data.yq_z")(Lambda=Lam), (Lam @ Lam).reshape(-1, order="F"), 1e-13)
    assert get("linear_attention.data.yq_sq")(Lambda=Lam) == pytest.approx(np.trace(Lam), rel=1e-13)


# -- the merged model's loss landscape ----------------------------------------------------
@given(seed=seeds, D=dims, N=contexts)
def test_converged_matrix_is_the_global_minimum(seed, D, N):
    """L(M*) = global_min_loss; L(M* + Delta) - L(M*) = tr(Delta Lambda Delta^T E[Lambda_hat^2])
    >= 0 (a convex quadratic with Hessian Lambda (x) E[Lambda_hat^2]); G(M*) = 0."""
    rng = np.random.default_rng(seed + 1)
    Lam, _, _ = spd(seed, D)
    loss = get("linear_attention.merged.loss")
    Ms = get("linear_attention.merged.converged_matrix")(Lambda=Lam, N=N)
    E = get("linear_attention.data.lambda_hat_sq")(Lambda=Lam, N=N)
    L_star = loss(Lambda=Lam, N=N, M=Ms)
    T = np.trace(Lam)
    # L(M) adds terms of size up to tr(Lambda), so rounding is relative to that scale
    assert abs(L_star - get("linear_attention.merged.global_min_loss")(Lambda=Lam, N=N)) <= 1e-10 * T
    for M in (rng.standard_normal((D, D)) / np.sqrt(T), Ms + 1e-3 * rng.standard_normal((D, D)) * np.linalg.norm(Ms)):
        excess = loss(Lambda=Lam, N=N, M=M) - L_star
        D_ = M - Ms
        quad = np.trace(D_ @ Lam @ D_.T @ E)
        assert quad >= 0
        assert abs(excess - quad) <= 1e-10 * (T + quad)
    G = get("linear_attention.merged.gradient")(Lambda=Lam, N=N, M=Ms)
    bound = np.linalg.norm(E) * np.linalg.norm(Ms) * np.linalg.norm(Lam)
    assert np.linalg.norm(G) <= 1e-10 * bound
    # gradient = -1/2 dL/dM: a directional derivative of the quadratic is exact by central differences
    M = rng.standard_normal((D, D))
    V = rng.standard_normal((D, D))
    h = 1e-3 / max(1.0, np.linalg.norm(Lam))
    fd = (loss(Lambda=Lam, N=N, M=M + h * V) - loss(Lambda=Lam, N=N, M=M - h * V)) / (2 * h)
    G = get("linear_attention.merged.gradient")(Lambda=Lam, N=N, M=M)
    assert fd == pytest.approx(-2 * np.sum(G * V), rel=1e-6, abs=1e-9 * bound)


@given(seed=seeds, D=dims, N=contexts, N_max=contexts)
def test_rotation_equivariance(seed, D, N, N_max):
    """Functions of Lambda commute with rotations: f(Q Lambda Q^T) = Q f(Lambda) Q^T, scalars
    are invariant, and E[z z^T] transforms with Q (x) Q."""
    rng = np.random.default_rng(seed + 2)
    Lam, _, _ = spd(seed, D)
    Q = orthogonal(rng, D)
    R = Q @ Lam @ Q.T
    R = 0.5 * (R + R.T)
    M, A = rng.standard_normal((D, D)), rng.standard_normal((D, D))
    for cf_id in ("data.lambda_hat_sq", "data.beta_beta", "merged.converged_matrix", "data.lambda_hat_mean"):
        f = get("linear_attention." + cf_id)
        close(f(Lambda=R, N=N), Q @ f(Lambda=Lam, N=N) @ Q.T, 1e-11)
    f = get("linear_attention.merged.converged_matrix_limit")
    close(f(Lambda=R), Q @ f(Lambda=Lam) @ Q.T, 1e-10)
    f = get("linear_attention.ntp.converged_matrix")
    close(f(Lambda=R, N_max=N_max), Q @ f(Lambda=Lam, N_max=N_max) @ Q.T, 1e-11)
    f = get("linear_attention.data.fourth_moment")
    close(f(Lambda=R, A=Q @ A @ Q.T), Q @ f(Lambda=Lam, A=A) @ Q.T, 1e-11)
    f = get("linear_attention.merged.gradient")
    close(f(Lambda=R, N=N, M=Q @ M @ Q.T), Q @ f(Lambda=Lam, N=N, M=M) @ Q.T, 1e-10)
    QQ = np.kron(Q, Q)
    if D <= 4:
        close(get("linear_attention.data.zz")(Lambda=R, N=N),
              QQ @ get("linear_attention.data.zz")(Lambda=Lam, N=N) @ QQ.T, 1e-11)
    T = np.trace(Lam)
    for cf_id, kw, scale in (("merged.global_min_loss", {"N": N}, T), ("ntp.global_min_loss", {"N_max": N_max}, T),
                             ("merged.gamma", {}, None), ("merged.zero_loss", {}, None)):
        f = get("linear_attention." + cf_id)
        a, b = f(Lambda=R, **kw), f(Lambda=Lam, **kw)
        assert abs(a - b) <= 1e-11 * (scale if scale else abs(b))
    f = get("linear_attention.merged.loss")
    a, b = f(Lambda=R, N=N, M=Q @ M @ Q.T), f(Lambda=Lam, N=N, M=M)
    assert abs(a - b) <= 1e-10 * (T + abs(b))


# -- numpy against mpmath (50 digits), scalar forms over wide ranges ------------------------
def _mp(cf_id, **kw):
    with mpmath.workdps(50):
        return get(cf_id)("mpmath", **kw)


log_w = st.floats(-300.0, -1.0)  # log10 w_init, down to where w_init^2 underflows (below ~1e-162)
log_tau = st.floats(-3.0, 3.0)
t_over_tau = st.floats(0.0, 1e3)
big_N = st.integers(1, 10**6)
D_white = st.integers(1, 50)


@given(t=t_over_tau, lt=log_tau, D=D_white, N=big_N, lw=log_w)
def test_sigma_and_white_loss_match_mpmath(t, lt, D, N, lw):
    tau, w = 10.0**lt, 10.0**lw
    kw = dict(t=t * tau, tau=tau, D=D, N=N, w_init=w)
    for name in ("sigma", "white_loss"):
        cf_id = "linear_attention.merged." + name
        assert get(cf_id)(**kw) == pytest.approx(float(_mp(cf_id, **kw)), rel=1e-12)


@given(lt=log_tau, D=D_white, N=big_N, lw=st.floats(-150.0, -1.0))
def test_half_rise_time_matches_mpmath(lt, D, N, lw):
    kw = dict(tau=10.0**lt, D=D, N=N, w_init=10.0**lw)
    cf_id = "linear_attention.merged.half_rise_time"
    assert get(cf_id)(**kw) == pytest.approx(float(_mp(cf_id, **kw)), rel=1e-12)


@given(seed=seeds, D=dims, N=big_N, N_max=big_N, lt=log_tau, lw=st.floats(-150.0, -0.01))
def test_matrix_scalars_match_mpmath(seed, D, N, N_max, lt, lw):
    Lam, _, _ = spd(seed, D)
    pairs = [("merged.global_min_loss", {"Lambda": Lam, "N": N}),
             ("ntp.global_min_loss", {"Lambda": Lam, "N_max": N_max}),
             ("ntp.inv_length_mean", {"N_max": N_max}),
             ("merged.plateau_time", {"Lambda": Lam, "tau": 10.0**lt, "w_init": 10.0**lw})]
    for cf_id, kw in pairs:
        cf_id = "linear_attention." + cf_id
        assert get(cf_id)(**kw) == pytest.approx(float(_mp(cf_id, **kw)), rel=1e-12), cf_id


# -- the sigmoid --------------------------------------------------------------------------
@given(D=st.integers(1, 6), N=contexts, lw=st.floats(-12.0, -0.6), lt=log_tau)
def test_sigmoid_rises_and_loss_falls(D, N, lw, lt):
    """sigma(0) = w_init^2/sqrt(D), sigma increases to sigma_inf = N/(N + 1 + D); the loss of
    eq. 51 decreases from about D to D(1 + D)/(N + 1 + D) (sigma(0) < sigma_inf here)."""
    tau, w = 10.0**lt, 10.0**lw
    alpha = 1 + (1 + D) / N
    t = tau * np.concatenate([[0.0], np.geomspace(1e-3, 1e3, 300)])
    s = get("linear_attention.merged.sigma")(t=t, tau=tau, D=D, N=N, w_init=w)
    L = get("linear_attention.merged.white_loss")(t=t, tau=tau, D=D, N=N, w_init=w)
    s_inf = get("linear_attention.merged.sigma_infinity")(D=D, N=N)
    assert s_inf == pytest.approx(N / (N + 1 + D), rel=1e-15)
    assert s[0] == pytest.approx(w**2 / sqrt(D), rel=1e-14)
    assert np.all(np.diff(s) >= -1e-15 * s_inf) and s[-1] == pytest.approx(s_inf, rel=1e-14)
    assert np.all(s <= s_inf * (1 + 1e-15))
    assert np.all(np.diff(L) <= 1e-14 * D)
    assert L[0] == pytest.approx(D * (1 - 2 * s[0] + alpha * s[0] ** 2), rel=1e-14)
    assert L[-1] == pytest.approx(D * (1 + D) / (N + 1 + D), rel=1e-13)


@given(D=st.integers(1, 6), N=contexts, lw=st.floats(-12.0, -0.6), u=st.floats(0.0, 40.0))
def test_sigma_solves_the_logistic_ode(D, N, lw, u):
    """Autograd of the torch backend: tau dsigma/dt = 2 sqrt(D) sigma (1 - alpha sigma) (eqs. 48-50)."""
    import torch

    tau = 1.3
    t = torch.tensor(u * tau, dtype=torch.float64, requires_grad=True)
    s = get("linear_attention.merged.sigma")("torch", t=t, tau=tau, D=D, N=N, w_init=10.0**lw)
    (ds,) = torch.autograd.grad(s, t)
    alpha = 1 + (1 + D) / N
    sv = float(s.detach())
    rhs = 2 * sqrt(D) * sv * (1 - alpha * sv) / tau
    assert float(ds) == pytest.approx(rhs, rel=1e-9, abs=1e-15 * sqrt(D) / tau)


@settings(max_examples=10)
@given(lt=log_tau, D=st.integers(1, 6), N=contexts, lw=st.floats(-12.0, -0.6))
def test_numpy_vectorises_over_time(lt, D, N, lw):
    tau, w = 10.0**lt, 10.0**lw
    t = tau * np.array([0.0, 0.1, 1.0, 3.0, 10.0, 1e3])
    for name in ("sigma", "white_loss"):
        cf = get("linear_attention.merged." + name)
        vec = cf(t=t, tau=tau, D=D, N=N, w_init=w)
        assert vec.shape == t.shape
        np.testing.assert_allclose(vec, [cf(t=float(x), tau=tau, D=D, N=N, w_init=w) for x in t],
                                   rtol=1e-15, atol=0)
    t2 = t.reshape(2, 3)
    assert get("linear_attention.merged.sigma")(t=t2, tau=tau, D=D, N=N, w_init=w).shape == (2, 3)


# -- extremes: finite and accurate against mpmath and the derived sympy form -----------------
def derived_reference(cf_id, **kw):
    """The *derived* expression (not the stable rewrite) evaluated by sympy at 60 digits, with
    the exact binary values of the float inputs; the harmonic number through mpmath.harmonic."""
    cf = get(cf_id)
    e = cf.expr
    if e.has(sp.harmonic):
        with mpmath.workdps(70):
            H = sp.Float(mpmath.harmonic(int(kw["N_max"])), 70)
        e = e.replace(lambda x: isinstance(x, sp.harmonic), lambda x: H)
    D = kw.get("D")
    subs = {}
    for name, value in kw.items():
        if name == "Lambda":
            Lam = np.asarray(value, dtype=float)
            D = Lam.shape[0]
            subs[sp.MatrixSymbol("Lambda", D, D)] = sp.ImmutableMatrix(
                [[sp.Rational(float(x)) for x in row] for row in Lam])
        elif name == "D":
            continue
        else:
            subs[cf.symbols(name)] = sp.Integer(int(value)) if name in ("N", "N_max") else sp.Rational(float(value))
    e = (e.subs(dim(), D) if D is not None else e).subs(subs)
    e = e.replace(lambda x: isinstance(x, sp.Identity), lambda x: sp.ImmutableMatrix(sp.eye(int(x.rows))))
    for _ in range(5):  # nested MatMul / Inverse / Trace of explicit matrices
        new = e.doit()
        if new == e:
            break
        e = new
    out = e.evalf(60)
    if getattr(out, "is_Matrix", False):
        return np.array(out.tolist(), dtype=float)
    return float(out)


def check_extreme(cf_id, **kw):
    value = get(cf_id)(**kw)
    assert np.all(np.isfinite(value)), f"{cf_id} not finite at {kw}: {value}"
    with mpmath.workdps(50):
        mp = get(cf_id)("mpmath", **kw)
    mp = np.array(mp.tolist(), dtype=float) if isinstance(mp, mpmath.matrix) else float(mp)
    close(value, mp, 1e-10)
    close(value, derived_reference(cf_id, **kw), 1e-10)


T_EXTREME = [0.0, 1.0, 37.0, 345.0, 1e3, 1e6]  # 345: mid-rise at w_init = 1e-300 (D = 4)
W_EXTREME = [0.3, 1e-3, 1e-40, 1e-100, 1e-150, 1e-200, 1e-300]
N_EXTREME = [1, 31, 10**9]

@pytest.mark.parametrize("t", T_EXTREME)
@pytest.mark.parametrize("w", W_EXTREME)
@pytest.mark.parametrize("N", N_EXTREME)
def test_sigma_extremes(t, w, N):
    check_extreme("linear_attention.merged.sigma", t=t * 2.5, tau=2.5, D=4, N=N, w_init=w)


def _white_loss_cases():
    for t in T_EXTREME:
        for w in W_EXTREME:
            for N in N_EXTREME:
                yield pytest.param(t, w, N, id=f"t{t:g}-w{w:g}-N{N}")


@pytest.mark.parametrize("t, w, N", list(_white_loss_cases()))
def test_white_loss_extremes(t, w, N):
    check_extreme("linear_attention.merged.white_loss", t=t * 2.5, tau=2.5, D=4, N=N, w_init=w)


@pytest.mark.parametrize("w", W_EXTREME[1:])
@pytest.mark.parametrize("N", N_EXTREME)
@pytest.mark.parametrize("D", [1, 4, 100])
def test_half_rise_time_extremes(w, N, D):
    check_extreme("linear_attention.merged.half_rise_time", tau=0.5, D=D, N=N, w_init=w)


@pytest.mark.parametrize("w", W_EXTREME[1:])
def test_plateau_time_extremes(w):
    Lam, _, _ = spd(11, 3)
    check_extreme("linear_attention.merged.plateau_time", Lambda=Lam, tau=3.0, w_init=w)


@pytest.mark.parametrize("N", N_EXTREME + [10**6 + 1])
@pytest.mark.parametrize("name", ["global_min_loss", "converged_matrix"])
def test_min_loss_and_converged_matrix_extremes(name, N):
    Lam, _, _ = spd(13, 3)
    check_extreme("linear_attention.merged." + name, Lambda=Lam, N=N)


@pytest.mark.parametrize("N_max", [1, 2, 31, 10**6, 10**9])
def test_inv_length_mean_extremes(N_max):
    check_extreme("linear_attention.ntp.inv_length_mean", N_max=N_max)
