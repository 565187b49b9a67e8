"""verify.flows.lazy: the tangent kernels are the exact flows' own dM/dt, and the frozen-kernel
solution solves its linear ODE."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from verify.flows import lazy
from verify.flows import merged as fm
from verify.flows import separate as fs
from verify.tasks.in_context_regression import random_covariance

D, N = 3, 7


@pytest.fixture(scope="module")
def mo():
    return fm.moments(random_covariance(np.random.default_rng(5), [0.5, 0.3, 0.2]), N)


def _dM_dt(f, y, unpack, matrix, h=1e-6):
    """dM/dt of a flow at y, by a central difference along the flow's own direction."""
    dy = f(0.0, y)
    return (matrix(*unpack(y + h * dy)) - matrix(*unpack(y - h * dy))) / (2 * h)


def test_merged_kernel_is_the_flows_dM_dt(mo):
    rng = np.random.default_rng(0)
    v, U = fm.init_merged(rng, 3, D, 0.8)
    G = fm.gradient(mo, None, fm.effective_matrix(v, U))
    K = lazy.kernel_merged(v, U)
    dM = _dM_dt(fm.rhs(mo, None), fm._pack(v, U), lambda y: fm._unpack(y, 3, D), fm.effective_matrix)
    np.testing.assert_allclose((K @ G.ravel()).reshape(D, D), dM, atol=1e-7 * np.abs(dM).max())
    np.testing.assert_allclose(K, K.T)
    assert np.linalg.eigvalsh(K).min() > 0


@pytest.mark.parametrize("R", [1, 2])
def test_separate_kernel_is_the_flows_dM_dt(mo, R):
    rng = np.random.default_rng(1)
    v, k, q = fs.init_separate(rng, 3, R, D, 0.8)
    G = fm.gradient(mo, None, fs.effective_matrix(v, k, q))
    K = lazy.kernel_separate(v, k, q)
    dM = _dM_dt(fs.rhs(mo, None, 3, R), fs._pack(v, k, q), lambda y: fs._unpack(y, 3, R, D), fs.effective_matrix)
    np.testing.assert_allclose((K @ G.ravel()).reshape(D, D), dM, atol=1e-7 * np.abs(dM).max())
    np.testing.assert_allclose(K, K.T, atol=1e-15)
    # a wrong kernel (the value path only) misses the flow's dM/dt
    P = np.einsum("ird,ire->ide", k, q).reshape(3, -1)
    assert np.abs((P.T @ P @ G.ravel()).reshape(D, D) - dM).max() > 0.1 * np.abs(dM).max()


def test_lazy_matrices_solve_the_frozen_kernel_ode(mo):
    rng = np.random.default_rng(2)
    v, k, q = fs.init_separate(rng, 4, 1, D, 1.5)
    K, M0 = lazy.kernel_separate(v, k, q), fs.effective_matrix(v, k, q)
    t = np.array([0.0, 0.5, 3.0, 20.0])
    S = np.kron(mo.A, mo.Lambda)

    def ode(_t, m):
        return K @ (mo.L2.ravel() - S @ m)

    ref = solve_ivp(ode, (0, t[-1]), M0.ravel(), t_eval=t, rtol=1e-11, atol=1e-13).y.T.reshape(-1, D, D)
    out = lazy.lazy_matrices(mo, None, K, M0, t)
    np.testing.assert_allclose(out, ref, atol=1e-8 * np.abs(ref).max())
    np.testing.assert_allclose(out[0], M0, atol=1e-12)
    with pytest.raises(ValueError, match="^K"):
        lazy.lazy_matrices(mo, None, K[:3], M0, t)
    with pytest.raises(ValueError, match="^M0"):
        lazy.lazy_matrices(mo, None, K, M0[:2], t)
