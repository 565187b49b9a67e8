"""Property tests (hypothesis) of the separate key/query closed forms (Zhang et al. 2025, §4-5,
App. E-F): the staircase of saddle losses, additivity over eigen-directions, the fixed-point
matrices, rotation invariance, large-N limits, the next-token saddles, and numpy against
mpmath (50 digits) for the scalar ODE forms.

Random matrices are built from a drawn integer seed through ``np.random.default_rng(seed)``
so a failing case shrinks and replays. Spectra are log-uniform in [1e-2, 1e2], distinct.
"""

import mpmath
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import theory

get = theory.get
SEP = "linear_attention.separate."

seeds = st.integers(0, 2**32 - 1)
dims = st.integers(1, 6)
contexts = st.integers(1, 1000)


def spd(seed, D, low=1e-2, high=1e2):
    """Random distinct eigenvalues (log-uniform, descending) and eigenvectors: (Lambda, eigs, Q)."""
    rng = np.random.default_rng(seed)
    eigs = np.sort(np.exp(rng.uniform(np.log(low), np.log(high), size=D)))[::-1]
    assume(D == 1 or np.min(eigs[:-1] / eigs[1:]) > 1 + 1e-6)  # distinct: e_d well defined
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    Lam = Q @ np.diag(eigs) @ Q.T
    return 0.5 * (Lam + Lam.T), eigs, Q


def a_eig(eigs, N):
    """a_d, eigenvalues of E[Lambda_hat^2] (eq. 32)."""
    return get("linear_attention.data.lambda_hat_sq_eigenvalue")(lam=eigs, trLambda=eigs.sum(), N=N)


@given(seed=seeds, D=dims, N=contexts)
def test_staircase_levels_and_drops(seed, D, N):
    """L(M_0) > ... > L(M_D); drops lambda_m^3/a_m > 0 sum to L(M_0) - L(M_D);
    L(M_0) = tr Lambda; L(M_D) = the merged global minimum."""
    Lam, eigs, _ = spd(seed, D)
    T = eigs.sum()
    levels = np.array([get(SEP + "saddle_loss")(Lambda=Lam, N=N, m=m) for m in range(D + 1)])
    drops = np.array([get(SEP + "drop_size")(Lambda=Lam, N=N, m=m) for m in range(1, D + 1)])
    assert np.all(np.diff(levels) < 0)
    assert np.all(drops > 0)
    # the projectors come from an eigendecomposition of the rotated Lambda: rounding is
    # relative to the scale of the spectrum (tr Lambda), not to the smallest drop
    np.testing.assert_allclose(drops, eigs**3 / a_eig(eigs, N), rtol=1e-11, atol=1e-12 * T)
    np.testing.assert_allclose(-np.diff(levels), drops, rtol=1e-9, atol=1e-12 * T)
    assert levels[0] == pytest.approx(T, rel=1e-13)
    assert abs(drops.sum() - (levels[0] - levels[-1])) <= 1e-12 * T
    L_star = get("linear_attention.merged.global_min_loss")(Lambda=Lam, N=N)
    assert levels[-1] == pytest.approx(L_star, rel=1e-10)


@given(seed=seeds, D=dims, m=st.integers(0, 6))
def test_large_N_limits(seed, D, m):
    """N -> infinity: L(M_m) -> sum_{d>m} lambda_d and drop_m -> lambda_m (the printed value);
    the finite-N correction is O(tr Lambda / N), so at N = 10^12 the tolerance is 1e-9 tr Lambda."""
    Lam, eigs, _ = spd(seed, D)
    m = min(m, D)
    N = 10**12
    T = eigs.sum()
    assert abs(get(SEP + "saddle_loss")(Lambda=Lam, N=N, m=m) - eigs[m:].sum()) <= 1e-9 * T
    if m >= 1:
        drop = get(SEP + "drop_size")
        assert drop(Lambda=Lam, N=N, m=m) == pytest.approx(eigs[m - 1], rel=1e-9 * T / eigs[m - 1] + 1e-12)
        assert drop(Lambda=Lam, N=N, m=m, printed=True) == pytest.approx(eigs[m - 1], rel=1e-11)


@given(seed=seeds, D=dims, N=contexts, bits=st.integers(0, 2**6 - 1))
def test_subset_loss_is_additive_over_directions(seed, D, N, bits):
    """L(M_S) = tr Lambda - sum_{d in S} drop_d: each learned direction removes its own drop."""
    Lam, eigs, _ = spd(seed, D)
    S = [d for d in range(1, D + 1) if bits >> (d - 1) & 1]
    T = eigs.sum()
    drops = [get(SEP + "drop_size")(Lambda=Lam, N=N, m=d) for d in S]
    assert abs(get(SEP + "subset_loss")(Lambda=Lam, N=N, S=S) - (T - sum(drops))) <= 1e-11 * T


@given(seed=seeds, D=dims, N=contexts, bits=st.integers(0, 2**6 - 1))
def test_fixed_point_matrix_commutes_and_has_rank_of_S(seed, D, N, bits):
    """M_S commutes with Lambda, has eigenvalue lambda_d/a_d on d in S and 0 elsewhere (eq. 59),
    hence rank |S|; G(M_S) e_d = 0 on S (eq. 60)."""
    Lam, eigs, Q = spd(seed, D)
    S = [d for d in range(1, D + 1) if bits >> (d - 1) & 1]
    M = get(SEP + "fixed_point_matrix")(Lambda=Lam, N=N, S=S)
    scale = np.linalg.norm(M) * np.linalg.norm(Lam) + np.finfo(float).tiny
    assert np.linalg.norm(M @ Lam - Lam @ M) <= 1e-11 * scale
    diag = Q.T @ M @ Q  # columns of Q are eigenvectors, eigs sorted descending
    want = np.zeros(D)
    idx = np.array(S, dtype=int) - 1
    want[idx] = eigs[idx] / a_eig(eigs, N)[idx]
    np.testing.assert_allclose(diag, np.diag(want), rtol=0, atol=1e-10 * max(want.max(initial=0), 1e-300))
    sv = np.linalg.svd(M, compute_uv=False)
    assert int(np.sum(sv > 1e-8 * max(sv.max(), 1e-300))) == len(S)
    G = get("linear_attention.merged.gradient")(Lambda=Lam, N=N, M=M)
    for d in idx:
        assert np.linalg.norm(G @ Q[:, d]) <= 1e-10 * eigs[0] ** 2


@given(seed=seeds, D=dims, N=contexts, bits=st.integers(0, 2**6 - 1), rot=seeds)
def test_rotation_invariance(seed, D, N, bits, rot):
    """Subsets are labelled by eigenvalue rank, so L(M_S) is invariant and M_S equivariant under
    Lambda -> R Lambda R^T."""
    Lam, eigs, _ = spd(seed, D)
    S = [d for d in range(1, D + 1) if bits >> (d - 1) & 1]
    R, _ = np.linalg.qr(np.random.default_rng(rot).standard_normal((D, D)))
    Lr = R @ Lam @ R.T
    Lr = 0.5 * (Lr + Lr.T)
    T = eigs.sum()
    f = get(SEP + "subset_loss")
    assert abs(f(Lambda=Lr, N=N, S=S) - f(Lambda=Lam, N=N, S=S)) <= 1e-11 * T
    g = get(SEP + "fixed_point_matrix")
    A, B = g(Lambda=Lr, N=N, S=S), R @ g(Lambda=Lam, N=N, S=S) @ R.T
    assert np.max(np.abs(A - B)) <= 1e-9 * max(np.max(np.abs(B)), 1.0 / eigs[-1] * 1e-3)


@given(seed=seeds, D=dims, N_max=st.integers(1, 10**6), m=st.integers(0, 6))
def test_ntp_saddle_loss_is_eq19_with_inverse_length_mean(seed, D, N_max, m):
    """Eq. 26: tr Lambda - sum_{d<=m} lambda_d / (1 + E(1/N) (1 + tr Lambda / lambda_d)), with
    E(1/N) = H_{N_max}/N_max; at m = D it is ntp.global_min_loss."""
    Lam, eigs, _ = spd(seed, D)
    m = min(m, D)
    T = eigs.sum()
    nu = get("linear_attention.ntp.inv_length_mean")(N_max=N_max)
    want = T - np.sum(eigs[:m] / (1 + nu * (1 + T / eigs[:m])))
    f = get("linear_attention.ntp.saddle_loss")
    assert abs(f(Lambda=Lam, N_max=N_max, m=m) - want) <= 1e-11 * T
    if m == D:
        g = get("linear_attention.ntp.global_min_loss")(Lambda=Lam, N_max=N_max)
        assert abs(f(Lambda=Lam, N_max=N_max, m=m) - g) <= 1e-11 * T
    if N_max == 1:  # E(1/N) = 1: the fixed-length saddle at N = 1
        assert abs(f(Lambda=Lam, N_max=1, m=m) - get(SEP + "saddle_loss")(Lambda=Lam, N=1, m=m)) <= 1e-11 * T


# -- numpy against mpmath (50 digits) ------------------------------------------------------
def _mp(cf_id, **kw):
    with mpmath.workdps(50):
        return float(get(cf_id)("mpmath", **kw))


log_lam = st.floats(-2.0, 2.0)
log_tau = st.floats(-3.0, 3.0)


@given(llam=log_lam, la=st.floats(-4.0, 4.0), lt=log_tau, frac=st.floats(0.0, 1.5))
def test_scalar_ode_rhs_matches_mpmath(llam, la, lt, frac):
    lam, a, tau = 10.0**llam, 10.0**la, 10.0**lt
    v = frac * (lam / a) ** (1 / 3)
    kw = dict(v=v, lam=lam, a=a, tau=tau)
    value, ref = get(SEP + "scalar_ode_rhs")(**kw), _mp(SEP + "scalar_ode_rhs", **kw)
    # two terms of opposite sign, cancelling at v*: relative to the larger term
    scale = (lam**2 * v**2 + lam * a * v**5) / tau
    assert abs(value - ref) <= 1e-13 * scale + 1e-300


@given(llam=log_lam, la=st.floats(-4.0, 4.0), lt=log_tau, l0=st.floats(-8.0, -0.5),
       g=st.floats(0.05, 0.99))
def test_scalar_ode_time_matches_mpmath(llam, la, lt, l0, g):
    lam, a, tau = 10.0**llam, 10.0**la, 10.0**lt
    v_star = (lam / a) ** (1 / 3)
    v0 = 10.0**l0 * v_star
    v = v0 + g * (v_star - v0)
    assume(v0 < v < v_star)
    kw = dict(v=v, v0=v0, lam=lam, a=a, tau=tau)
    value, ref = get(SEP + "scalar_ode_time")(**kw), _mp(SEP + "scalar_ode_time", **kw)
    # t(v) - t(v0) is a difference of antiderivatives each of size up to tau/(lam^2 v0)
    # (the -1/v term): rounding is relative to that, not to the difference
    assert abs(value - ref) <= 1e-12 * tau / (lam**2 * v0) + 1e-12 * abs(ref)
    assert ref > 0


@given(seed=seeds, D=dims, N=contexts, m=st.integers(1, 6), lt=log_tau, lw=st.floats(-150.0, -0.01))
def test_escape_time_matches_mpmath(seed, D, N, m, lt, lw):
    Lam, eigs, _ = spd(seed, D)
    m = min(m, D)
    kw = dict(Lambda=Lam, N=N, m=m, tau=10.0**lt, w_init=10.0**lw)
    value = get(SEP + "escape_time")(**kw)
    assert value == pytest.approx(_mp(SEP + "escape_time", **kw), rel=1e-12)
    # and it is tau/(lambda_m^2 w_init), independent of N (leading order)
    assert value == pytest.approx(10.0**lt / (eigs[m - 1] ** 2 * 10.0**lw), rel=1e-11)
