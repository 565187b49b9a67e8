"""Unit tests of the exact gradient flow of the separate key/query model (verify.flows.separate)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory
from verify.flows import separate as fs
from verify.stats import batch_mean, z_threshold

SPECTRUM = [0.4, 0.3, 0.2, 0.1]


def _rotated(rng, eigs):
    Q, _ = np.linalg.qr(rng.normal(size=(len(eigs), len(eigs))))
    return Q @ np.diag(eigs) @ Q.T


def _loss_of_flat(mo, y, H, R, D):
    v, k, q = fs._unpack(y, H, R, D)
    return float(fs.loss(mo, None, fs.effective_matrix(v, k, q)))


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), H=st.integers(1, 3), R=st.integers(1, 3), N=st.integers(1, 40))
def test_rhs_is_minus_half_gradient_of_the_loss(seed, H, R, N):
    """tau dtheta/dt = -1/2 dL/dtheta (eqs. 5, 14, 83), by central differences of L(M(v, k, q))."""
    rng = np.random.default_rng(seed)
    D = 3
    mo = fs.moments(_rotated(rng, SPECTRUM[:D]), N)
    v, k, q = rng.normal(size=H), rng.normal(size=(H, R, D)) / 2, rng.normal(size=(H, R, D)) / 2
    tau = 0.7
    y = fs._pack(v, k, q)
    g = fs.rhs(mo, None, H, R, tau)(0.0, y)
    h = 1e-5
    fd = np.empty_like(y)
    for j in range(y.size):
        e = np.zeros_like(y)
        e[j] = h
        fd[j] = (_loss_of_flat(mo, y + e, H, R, D) - _loss_of_flat(mo, y - e, H, R, D)) / (2 * h)
    # L is a polynomial of degree 6 in theta: truncation ~ h^2 |L'''|, rounding ~ eps |L| / h
    np.testing.assert_allclose(g, -0.5 * fd / tau, rtol=1e-6, atol=1e-7 * (1 + np.abs(fd).max()))
    dv, dk, dq = fs.gradients(mo, None, v, k, q, tau)
    np.testing.assert_allclose(fs._pack(dv, dk, dq), g, rtol=1e-13, atol=1e-14)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), H=st.integers(1, 3), R=st.integers(1, 3), D=st.integers(2, 4))
def test_jacobian_is_the_derivative_of_rhs(seed, H, R, D):
    """jacobian(...)(t, y) against central differences of rhs(...) (f is cubic in y: truncation ~ h^2 |f'''|),
    and symmetric (f is -1/2 the gradient of the loss)."""
    rng = np.random.default_rng(seed)
    mo = fs.moments(_rotated(rng, SPECTRUM[:D]), 7)
    y = fs._pack(rng.normal(size=H), rng.normal(size=(H, R, D)) / 2, rng.normal(size=(H, R, D)) / 2)
    tau = 0.7
    f = fs.rhs(mo, None, H, R, tau)
    J = fs.jacobian(mo, None, H, R, tau)(0.0, y)
    h = 1e-5
    fd = np.array([(f(0.0, y + h * e) - f(0.0, y - h * e)) / (2 * h) for e in np.eye(y.size)]).T
    assert J.shape == (y.size, y.size)
    np.testing.assert_allclose(J, fd, rtol=0, atol=1e-8 * (1 + np.abs(fd).max()))
    np.testing.assert_allclose(J, J.T, rtol=0, atol=1e-14 * np.abs(J).max())
    assert np.abs(J).max() > 1e-3       # not trivially zero


def test_loss_is_the_merged_loss_of_the_effective_matrix():
    rng = np.random.default_rng(1)
    Lam = _rotated(rng, SPECTRUM)
    v, k, q = rng.normal(size=3), rng.normal(size=(3, 2, 4)), rng.normal(size=(3, 2, 4))
    M = fs.effective_matrix(v, k, q)
    np.testing.assert_allclose(M, sum(v[i] * k[i, r][:, None] * q[i, r][None] for i in range(3)
                                      for r in range(2)), atol=1e-13)
    L_cf = theory.get("linear_attention.merged.loss")(Lambda=Lam, N=31, M=M)
    assert float(fs.loss(Lam, 31, M)) == pytest.approx(float(L_cf), rel=1e-12)


def test_conservation_laws_under_integrate():
    """Eqs. 82 and 88: ||k_ir||^2 - ||q_ir||^2 and sum_r ||k_ir||^2 - v_i^2 are constant."""
    rng = np.random.default_rng(2)
    Lam = _rotated(rng, SPECTRUM)
    v, k, q = fs.init_separate(rng, 3, 2, 4, 0.5)
    res = fs.integrate(Lam, 31, v, k, q, t_eval=np.linspace(0.0, 200.0, 21))
    kq, kv = fs.conserved(res.v, res.k, res.q)
    assert kq.shape == (21, 3, 2) and kv.shape == (21, 3)
    assert np.max(np.abs(kq - kq[0])) < 1e-8 and np.max(np.abs(kv - kv[0])) < 1e-8
    assert res.loss[-1] < res.loss[0] - 0.1  # it did learn something: a non-trivial test
    # discrete Euler steps do drift, so the test can fail
    y = fs._pack(v, k, q)
    y1 = y + 5.0 * fs.rhs(Lam, 31, 3, 2)(0.0, y)
    _, kv1 = fs.conserved(*fs._unpack(y1, 3, 2, 4))
    assert np.max(np.abs(kv1 - kv[0])) > 1e-6


def test_integrate_stop_loss_keeps_the_steps_of_the_whole_solve():
    """stop_loss ends the solve at a loss level; the part kept is the whole solve's, to the last bit; LSODA
    with the analytic Jacobian agrees with DOP853 to its tolerance."""
    rng = np.random.default_rng(4)
    mo = fs.moments(_rotated(rng, SPECTRUM), 31)
    v, k, q = fs.init_separate(rng, 4, 1, 4, 1e-2)
    t = np.linspace(0.0, 3000.0, 3001)
    full = fs.integrate(mo, None, v, k, q, t_eval=t, dense=True)
    level = 0.5 * (full.loss[0] + full.loss[-1])
    part = fs.integrate(mo, None, v, k, q, t_eval=t, dense=True, stop_loss=level)
    m = part.t.size
    assert 1 < m < t.size and part.loss[-1] > level and full.loss[m] <= level
    np.testing.assert_array_equal(part.t, t[:m])
    np.testing.assert_array_equal(part.v, full.v[:m])
    np.testing.assert_array_equal(part.k, full.k[:m])
    assert part.loss_at(0.5 * part.t[-1]) == full.loss_at(0.5 * part.t[-1])
    stiff = fs.integrate(mo, None, v, k, q, t_eval=t, method="LSODA", rtol=1e-10)
    np.testing.assert_allclose(stiff.loss, full.loss, rtol=1e-6)
    with pytest.raises(ValueError, match="stop_loss"):
        fs.integrate(mo, None, v, k, q, t_eval=t, stop_loss=float("nan"))


def test_integrate_past_keeps_a_time_past_the_level():
    """integrate_past stops below ``level`` with an output time past it, or solves to the end when the output
    grid has none between the level and the stop."""
    rng = np.random.default_rng(4)
    mo = fs.moments(_rotated(rng, SPECTRUM), 31)
    v, k, q = fs.init_separate(rng, 4, 1, 4, 1e-2)
    t = np.linspace(0.0, 3000.0, 3001)
    full = fs.integrate(mo, None, v, k, q, t_eval=t)
    level = 0.5 * (full.loss[0] + full.loss[-1])
    res = fs.integrate_past(mo, None, v, k, q, t_eval=t, level=level, stop_loss=0.5 * (level + full.loss[-1]))
    assert res.t.size < t.size and res.loss[-1] <= level
    np.testing.assert_array_equal(res.v, full.v[:res.t.size])
    coarse = t[::1000]                      # no output time between the level and the stop
    res = fs.integrate_past(mo, None, v, k, q, t_eval=coarse, level=level, stop_loss=level - 1e-9)
    assert res.t.size == coarse.size
    with pytest.raises(ValueError, match="stop_loss"):
        fs.integrate_past(mo, None, v, k, q, t_eval=t, level=level, stop_loss=level)


def test_init_separate_statistics():
    """eq. 36/37: E sum v^2 = E sum ||k||^2 = E sum ||q||^2 = w_init^2."""
    rng = np.random.default_rng(3)
    H, R, D, w = 4, 2, 3, 1e-2
    acc = batch_mean()
    for _ in range(4000):
        v, k, q = fs.init_separate(rng, H, R, D, w)
        acc.add(np.array([[v @ v, np.sum(k * k), np.sum(q * q), np.sum(k * q)]]) / w**2)
    z = acc.result().z([1.0, 1.0, 1.0, 0.0])
    assert np.all(np.abs(z) < z_threshold(4))
    v, k, q = fs.init_separate(np.random.default_rng(0), H, R, D, w)
    assert v.shape == (H,) and k.shape == q.shape == (H, R, D)


def test_aligned_start_is_balanced_and_follows_the_scalar_ode():
    rng = np.random.default_rng(4)
    Lam = _rotated(rng, SPECTRUM)
    lam, E = fs.eigenbasis(Lam)
    np.testing.assert_allclose(lam, SPECTRUM, atol=1e-14)
    v, k, q = fs.init_aligned_separate(Lam, 3, 2, [0.1, 0.2, 0.3], sigma=[2, 1, 4])
    kq, kv = fs.conserved(v, k, q)
    np.testing.assert_allclose(kq, 0, atol=1e-16)
    np.testing.assert_allclose(kv, 0, atol=1e-16)
    np.testing.assert_allclose(np.abs(k[1, 0] @ E[:, 0]), 0.2, rtol=1e-13)
    # eq. 21 on the manifold: dv_i/dt = lam^2 v^2 - lam a v^5 for the head's eigenvalue
    mo = fs.moments(Lam, 31)
    a = np.diag(E.T @ mo.A @ E)
    dv, _, _ = fs.gradients(mo, None, v, k, q)
    ode = theory.get("linear_attention.separate.scalar_ode_rhs")
    for i, d in enumerate([2, 1, 4]):
        assert dv[i] == pytest.approx(float(ode(v=v[i], lam=lam[d - 1], a=a[d - 1], tau=1.0)), rel=1e-12)


def test_plateaus_on_a_synthetic_staircase():
    t = np.linspace(0.0, 30.0, 30001)
    levels = [1.0, 0.5, 0.2]
    curve = 1.0 - 0.5 / (1 + np.exp(-(t - 10) * 5)) - 0.3 / (1 + np.exp(-(t - 20) * 5))
    p = fs.plateaus(t, curve, levels)
    np.testing.assert_allclose(p.drop_times, [10.0, 20.0], atol=2e-3)
    assert p.time_near[1] == pytest.approx(10.0 - 2 * np.log(1 / 0.02 - 1) / 5 * 1, abs=0.5)
    np.testing.assert_allclose(p.level_at_flattest, levels, atol=1e-8)
    assert fs.first_crossing(t, curve, 0.75) == pytest.approx(10.0, abs=1e-3)


@pytest.mark.parametrize("call, name", [
    (lambda: fs.init_separate(np.random.default_rng(0), 0, 1, 4, 1e-3), "H"),
    (lambda: fs.init_separate(np.random.default_rng(0), 2, 0, 4, 1e-3), "R"),
    (lambda: fs.init_separate(np.random.default_rng(0), 2, 1, 4, -1.0), "w_init"),
    (lambda: fs.init_separate(0, 2, 1, 4, 1.0), "rng"),
    (lambda: fs.init_aligned_separate(SPECTRUM, 5, 1, 1e-3), "H"),
    (lambda: fs.init_aligned_separate(SPECTRUM, 2, 1, 1e-3, sigma=[1, 1]), "sigma"),
    (lambda: fs.init_aligned_separate(SPECTRUM, 2, 1, [1e-3, -1.0]), "w_init"),
    (lambda: fs.integrate(np.eye(3), 5, np.ones(2), np.ones((3, 1, 3)), np.ones((3, 1, 3)),
                          t_eval=[0, 1]), "k"),
    (lambda: fs.integrate(np.eye(3), 5, np.ones(2), np.ones((2, 1, 3)), np.ones((2, 2, 3)),
                          t_eval=[0, 1]), "q"),
    (lambda: fs.integrate(np.eye(3), 5, np.ones(2), np.ones((2, 1, 3)), np.ones((2, 1, 3)),
                          t_eval=[1, 0]), "t_eval"),
    (lambda: fs.integrate(np.eye(3), 0, np.ones(2), np.ones((2, 1, 3)), np.ones((2, 1, 3)),
                          t_eval=[0, 1]), "N"),
    (lambda: fs.integrate(np.eye(3), 5, np.ones(2), np.ones((2, 1, 3)), np.ones((2, 1, 3)),
                          tau=0, t_eval=[0, 1]), "tau"),
    (lambda: fs.conserved(np.ones(3), np.ones((2, 1, 3)), np.ones((2, 1, 3))), "v"),
    (lambda: fs.plateaus([0, 1, 2], [1, 0.5, 0.2], [0.2, 1.0]), "levels"),
], ids=["init-H", "init-R", "init-w_init", "init-rng", "aligned-H", "aligned-sigma",
        "aligned-w_init", "integrate-k", "integrate-q", "integrate-t_eval", "integrate-N",
        "integrate-tau", "conserved-v", "plateaus-levels"])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        call()
