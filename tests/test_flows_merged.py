"""Unit tests of the exact gradient flow of the merged model (verify.flows.merged)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from verify.flows import merged as fm
from verify.stats import batch_mean, z_threshold

SPECTRUM = [0.4, 0.3, 0.2, 0.1]


def _rotated(rng, eigs):
    Q, _ = np.linalg.qr(rng.normal(size=(len(eigs), len(eigs))))
    return Q @ np.diag(eigs) @ Q.T


def _loss_of_params(mo, v, U):
    return float(fm.loss(mo, None, fm.effective_matrix(v, U)))


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), H=st.integers(1, 4), N=st.integers(1, 40))
def test_rhs_is_minus_half_gradient_of_the_loss(seed, H, N):
    """tau dtheta/dt = -1/2 dL/dtheta (eq. 5), by central differences of L(M(v, U))."""
    rng = np.random.default_rng(seed)
    Lam = _rotated(rng, SPECTRUM[:3])
    mo = fm.moments(Lam, N)
    v, U = rng.normal(size=H), rng.normal(size=(H, 3, 3)) / 3
    tau = 0.7
    f = fm.rhs(mo, None, tau)
    y = np.concatenate([v, U.ravel()])
    g = f(0.0, y)
    h = 1e-5
    fd = np.empty_like(y)
    for k in range(y.size):
        e = np.zeros_like(y)
        e[k] = h
        vp, Up = fm._unpack(y + e, H, 3)
        vm, Um = fm._unpack(y - e, H, 3)
        fd[k] = (_loss_of_params(mo, vp, Up) - _loss_of_params(mo, vm, Um)) / (2 * h)
    # L is quartic in theta: truncation ~ h^2 |L'''|, rounding ~ eps |L| / h; both < 1e-8 here
    np.testing.assert_allclose(g, -0.5 * fd / tau, rtol=1e-7, atol=1e-7 * (1 + np.abs(fd).max()))


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), H=st.integers(1, 4), D=st.integers(2, 4))
def test_jacobian_is_the_derivative_of_rhs(seed, H, D):
    """jacobian(...)(t, y) against central differences of rhs(...), and symmetric (f is -1/2 a gradient)."""
    rng = np.random.default_rng(seed)
    mo = fm.moments(_rotated(rng, SPECTRUM[:D]), 7)
    y = np.concatenate([rng.normal(size=H), rng.normal(size=H * D * D) / 2])
    tau = 0.7
    f = fm.rhs(mo, None, tau)
    J = fm.jacobian(mo, None, H, tau)(0.0, y)
    h = 1e-5
    fd = np.array([(f(0.0, y + h * e) - f(0.0, y - h * e)) / (2 * h) for e in np.eye(y.size)]).T
    assert J.shape == (y.size, y.size)
    np.testing.assert_allclose(J, fd, rtol=0, atol=1e-8 * (1 + np.abs(fd).max()))
    np.testing.assert_allclose(J, J.T, rtol=0, atol=1e-14 * np.abs(J).max())
    assert np.abs(J).max() > 1e-3
    # LSODA with it agrees with DOP853 along a flow
    v0, U0 = fm.init_merged(rng, H, D, 0.1)
    t = np.linspace(0.0, 200.0, 21)
    a = fm.integrate(mo, None, v0, U0, t_eval=t, method="LSODA", rtol=1e-10)
    b = fm.integrate(mo, None, v0, U0, t_eval=t, rtol=1e-10)
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-6)


def test_loss_and_gradient_equal_theory_records():
    rng = np.random.default_rng(1)
    Lam = _rotated(rng, SPECTRUM)
    mo = fm.moments(Lam, 31)
    L_cf = theory.get("linear_attention.merged.loss")
    G_cf = theory.get("linear_attention.merged.gradient")
    Ms = rng.normal(size=(5, 4, 4))
    ours = fm.loss(mo, None, Ms)
    assert ours.shape == (5,)
    for M, Lv in zip(Ms, ours):
        assert Lv == pytest.approx(L_cf(Lambda=Lam, N=31, M=M), rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(fm.gradient(mo, None, M), G_cf(Lambda=Lam, N=31, M=M),
                                   rtol=1e-12, atol=1e-12)


def test_moments_come_from_theory():
    mo = fm.moments(SPECTRUM, 31)
    np.testing.assert_allclose(mo.L2, np.diag(np.square(SPECTRUM)), atol=1e-15)
    np.testing.assert_allclose(mo.A, theory.get("linear_attention.data.lambda_hat_sq")(Lambda=SPECTRUM, N=31))
    assert mo.tr == pytest.approx(1.0)


def test_init_merged_statistics():
    """eq. 34/35: E||w2||^2 = E||W1||_F^2 = w_init^2, entries zero-mean with the stated variances."""
    rng = np.random.default_rng(2)
    H, D, w = 8, 4, 1e-3
    norms, ent = batch_mean(), batch_mean()
    for _ in range(4000):
        v, U = fm.init_merged(rng, H, D, w)
        norms.add(np.array([[v @ v, np.sum(U * U)]]) / w**2)
        ent.add(np.concatenate([v * np.sqrt(H) / w, U.ravel() * np.sqrt(H) * D / w])[None] ** 2)
    z = z_threshold(2 + 1)
    assert np.all(np.abs(norms.result().z([1.0, 1.0])) < z)
    assert abs(ent.result().mean.mean() - 1.0) < 0.02  # 4000*136 unit-variance entries
    v, U = fm.init_merged(np.random.default_rng(0), H, D, w)
    assert v.shape == (H,) and U.shape == (H, D, D)


def test_init_aligned_is_balanced_and_aligned():
    mo = fm.moments(SPECTRUM, 31)
    v, U = fm.init_aligned(8, 4, 1e-2, direction=mo.L2)
    assert np.linalg.norm(v) == pytest.approx(1e-2)
    assert np.sqrt(np.sum(U**2)) == pytest.approx(1e-2)
    np.testing.assert_allclose(fm.conserved(v, U), 0, atol=1e-18)
    M = fm.effective_matrix(v, U)
    np.testing.assert_allclose(M / np.linalg.norm(M), mo.L2 / np.linalg.norm(mo.L2), atol=1e-15)


@pytest.mark.parametrize("w_init", [1e-1, 1e-4])
def test_s_eff_of_aligned_start_is_w_init_squared(w_init):
    v, U = fm.init_aligned(8, 4, w_init)
    assert fm.s_eff(v, U, np.eye(4)) == pytest.approx(w_init**2, rel=1e-14)
    Lam = _rotated(np.random.default_rng(3), SPECTRUM)
    v, U = fm.init_aligned(8, 4, w_init, direction=Lam @ Lam, heads=np.arange(1.0, 9.0))
    assert fm.s_eff(v, U, Lam) == pytest.approx(w_init**2, rel=1e-12)


def test_s_eff_formula_random_start():
    rng = np.random.default_rng(4)
    v, U = fm.init_merged(rng, 8, 4, 1e-3)
    W1 = np.stack([u.reshape(-1, order="F") for u in U])
    b = np.eye(4).reshape(-1, order="F")
    m = b / np.linalg.norm(b)
    assert fm.s_eff(v, U, np.eye(4)) == pytest.approx(np.sum(((v + W1 @ m) / 2) ** 2), rel=1e-13)


def test_conserved_formula_and_invariance():
    rng = np.random.default_rng(5)
    v, U = rng.normal(size=6), rng.normal(size=(6, 3, 3))
    W1 = np.stack([u.reshape(-1, order="F") for u in U])
    np.testing.assert_allclose(fm.conserved(v, U), np.outer(v, v) - W1 @ W1.T, atol=1e-13)
    # batched over a leading axis
    assert fm.conserved(np.stack([v, v]), np.stack([U, U])).shape == (2, 6, 6)
    res = fm.integrate([1.0, 0.5, 0.2], 5, 0.3 * v, 0.3 * U, t_eval=np.linspace(0, 5, 6))
    C = fm.conserved(res.v, res.U)
    assert np.max(np.abs(C - C[0])) < 1e-8 * np.max(np.abs(C[0]))
    np.testing.assert_allclose(res.W1[0], 0.3 * W1, atol=1e-15)


def test_gd_step_is_euler_step_with_dt_two_eta():
    rng = np.random.default_rng(6)
    mo = fm.moments(SPECTRUM, 31)
    v, U = rng.normal(size=3), rng.normal(size=(3, 4, 4))
    eta = 0.01
    out = fm.gd(mo, None, v, U, eta, 1)
    y = np.concatenate([v, U.ravel()])
    y1 = y + 2 * eta * fm.rhs(mo, None)(0.0, y)
    np.testing.assert_allclose(np.concatenate([out.v[-1], out.U[-1].ravel()]), y1, atol=1e-14)
    assert out.t[-1] == pytest.approx(2 * eta)
    assert list(out.steps) == [0, 1]


def test_half_time_interpolates():
    t = np.linspace(0, 10, 11)
    assert fm.half_time(t, 10 - t) == pytest.approx(5.0)
    assert fm.half_time(t, 10 - t, final=2.0) == pytest.approx(4.0)
    assert fm.half_time(t, t**2) == pytest.approx(np.sqrt(50), abs=0.5)
    with pytest.raises(ValueError, match="^curve"):
        fm.half_time(t, np.ones(11))


def test_white_aligned_flow_matches_eq10_quickly():
    """A short smoke test of integrate against theory's eq. 10 (the full check is in verify)."""
    v, U = fm.init_aligned(8, 4, 1e-2)
    t = np.linspace(0, 6, 301)
    res = fm.integrate(np.eye(4), 31, v, U, t_eval=t)
    sig = theory.get("linear_attention.merged.sigma")(t=t, tau=1.0, D=4, N=31, w_init=1e-2)
    assert np.max(np.abs(res.M[:, 0, 0] - sig)) < 1e-7


@pytest.mark.parametrize("call, name", [
    (lambda: fm.init_merged(np.random.default_rng(0), 0, 4, 1e-3), "H"),
    (lambda: fm.init_merged(np.random.default_rng(0), 8, 4, -1.0), "w_init"),
    (lambda: fm.init_merged(0, 8, 4, 1.0), "rng"),
    (lambda: fm.init_aligned(8, 4, 1.0, direction=np.eye(3)), "direction"),
    (lambda: fm.integrate(np.eye(4), 31, np.ones(2), np.ones((3, 4, 4)), t_eval=[0, 1]), "U"),
    (lambda: fm.integrate(np.eye(4), 31, np.ones(2), np.ones((2, 4, 4)), t_eval=[1, 0]), "t_eval"),
    (lambda: fm.integrate(np.eye(4), 0, np.ones(2), np.ones((2, 4, 4)), t_eval=[0, 1]), "N"),
    (lambda: fm.integrate([[1, 2], [0, 1]], 3, np.ones(2), np.ones((2, 2, 2)), t_eval=[0, 1]), "Lambda"),
    (lambda: fm.integrate(np.eye(2), 3, np.ones(2), np.ones((2, 2, 2)), tau=0, t_eval=[0, 1]), "tau"),
    (lambda: fm.gd(np.eye(2), 3, np.ones(2), np.ones((2, 2, 2)), eta=0.0, steps=3), "eta"),
    (lambda: fm.gd(np.eye(2), 3, np.ones(2), np.ones((2, 2, 2)), eta=0.1, steps=-1), "steps"),
    (lambda: fm.conserved(np.ones(2), np.ones((3, 2, 2))), "U"),
], ids=["init-H", "init-w_init", "init-rng", "aligned-direction", "integrate-U", "integrate-t_eval",
        "integrate-N", "integrate-Lambda", "integrate-tau", "gd-eta", "gd-steps", "conserved-U"])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        call()
