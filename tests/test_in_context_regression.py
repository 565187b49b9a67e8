"""The in-context regression samplers (verify.tasks.in_context_regression): shapes, the
identities of App. C.1 (beta = Lambda_hat w), the column-major cubic feature, the token
matrix of eq. 1, the next-token prefixes of App. A.1, determinism and input validation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verify.stats import z_threshold
from verify.tasks.in_context_regression import (
    NextTokenSequences,
    RegressionTask,
    beta,
    cubic_feature,
    iter_sequences,
    iter_tasks,
    lambda_hat,
    random_covariance,
    random_orthogonal,
    sample_sequences,
    sample_task,
    token_matrix,
)

EIG = (1.0, 0.5, 0.2)


def _lam(seed=0):
    return random_covariance(np.random.default_rng(seed), EIG)


# -- covariances -------------------------------------------------------------------------
def test_random_orthogonal_is_orthogonal():
    Q = random_orthogonal(np.random.default_rng(1), 5)
    np.testing.assert_allclose(Q.T @ Q, np.eye(5), atol=1e-13)


def test_random_orthogonal_sign_fix_makes_columns_unbiased():
    # Without the sign fix of diag(R), Q[0, 0] = g_00 / R_00 has one fixed sign (LAPACK's
    # Householder QR makes R_00 = -sign(g_00) |g_0|); Haar matrices have either sign.
    rng = np.random.default_rng(2)
    signs = [np.sign(random_orthogonal(rng, 3)[0, 0]) for _ in range(200)]
    assert 40 < sum(s > 0 for s in signs) < 160


def test_random_covariance_spectrum_and_symmetry():
    lam = random_covariance(np.random.default_rng(3), (0.4, 0.3, 0.2, 0.1))
    assert np.array_equal(lam, lam.T)
    np.testing.assert_allclose(np.linalg.eigvalsh(lam)[::-1], [0.4, 0.3, 0.2, 0.1], atol=1e-14)
    assert np.max(np.abs(lam - np.diag(np.diag(lam)))) > 1e-3  # eigenvectors are not the axes


# -- fixed-length sequences ----------------------------------------------------------------
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), D=st.integers(1, 4), N=st.integers(1, 6),
       B=st.integers(1, 5))
def test_task_shapes_and_identities(seed, D, N, B):
    rng = np.random.default_rng(seed)
    lam = random_covariance(rng, np.linspace(1.0, 0.3, D))
    t = sample_task(rng, lam, N, B)
    assert isinstance(t, RegressionTask)
    assert (t.batch, t.N, t.D) == (B, N, D)
    assert t.x.shape == (B, N, D) and t.x_q.shape == (B, D) and t.w.shape == (B, D)
    assert t.y.shape == (B, N) and t.y_q.shape == (B,)
    assert t.lambda_hat.shape == (B, D, D) and t.beta.shape == (B, D)
    assert t.z.shape == (B, D * D) and t.tokens.shape == (B, D + 1, N + 1)
    # labels (eq. 2, no noise) and beta = Lambda_hat w (eq. 29)
    np.testing.assert_allclose(t.y, np.einsum("bnd,bd->bn", t.x, t.w), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t.y_q, np.einsum("bd,bd->b", t.x_q, t.w), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t.beta, np.einsum("bij,bj->bi", t.lambda_hat, t.w),
                               rtol=1e-10, atol=1e-12)


def test_lambda_hat_and_beta_match_loops():
    t = sample_task(np.random.default_rng(4), _lam(), 4, 3)
    for b in range(3):
        Lh = sum(np.outer(t.x[b, n], t.x[b, n]) for n in range(4)) / 4
        be = sum(t.y[b, n] * t.x[b, n] for n in range(4)) / 4
        np.testing.assert_allclose(t.lambda_hat[b], Lh, rtol=1e-13)
        np.testing.assert_allclose(t.beta[b], be, rtol=1e-13)
    np.testing.assert_allclose(lambda_hat(t.x), t.lambda_hat)
    np.testing.assert_allclose(beta(t.x, t.y), t.beta)


def test_z_is_column_major_vec_and_kron():
    t = sample_task(np.random.default_rng(5), _lam(), 5, 4)
    for b in range(4):
        # eq. 38: a (x) b = vec(b a^T), vec stacking columns
        np.testing.assert_allclose(t.z[b], np.kron(t.x_q[b], t.beta[b]), rtol=1e-13)
        np.testing.assert_allclose(t.z[b], np.outer(t.beta[b], t.x_q[b]).reshape(-1, order="F"),
                                   rtol=1e-13)
    # explicit entry: z[j*D + i] = x_q[j] beta[i]
    assert t.z[0, 1 * 3 + 2] == pytest.approx(t.x_q[0, 1] * t.beta[0, 2])
    assert not np.allclose(t.z[0], np.kron(t.beta[0], t.x_q[0]))  # row-major order differs


def test_prediction_is_feature_inner_product():
    # eq. 6: beta^T M x_q = vec(M)^T vec(beta x_q^T) = vec(M)^T z
    rng = np.random.default_rng(6)
    t = sample_task(rng, _lam(), 5, 7)
    M = rng.standard_normal((3, 3))
    np.testing.assert_allclose(t.predict(M), t.z @ M.reshape(-1, order="F"), rtol=1e-12)


def test_token_matrix_layout():
    t = sample_task(np.random.default_rng(7), _lam(), 4, 2)
    X = t.tokens
    D, N = 3, 4
    for b in range(2):
        for n in range(N):
            np.testing.assert_array_equal(X[b, :D, n], t.x[b, n])  # tokens are columns
            assert X[b, D, n] == t.y[b, n]
        np.testing.assert_array_equal(X[b, :D, N], t.x_q[b])  # query last
        assert X[b, D, N] == 0.0  # query label slot is zero
        # X X^T / N blocks of eq. 28 (context part; the query adds x_q x_q^T / N)
        G = X[b] @ X[b].T / N
        np.testing.assert_allclose(G[:D, :D], t.lambda_hat[b] + np.outer(t.x_q[b], t.x_q[b]) / N,
                                   rtol=1e-12)
        np.testing.assert_allclose(G[:D, D], t.beta[b], rtol=1e-12)
        np.testing.assert_allclose(G[D, D], t.w[b] @ t.lambda_hat[b] @ t.w[b], rtol=1e-12)
    np.testing.assert_array_equal(token_matrix(t.x, t.y, t.x_q), X)


def test_token_covariance_statistically():
    lam = _lam()
    t = sample_task(np.random.default_rng(8), lam, 10, 20_000)
    x = t.x.reshape(-1, 3)
    outer = (x[:, :, None] * x[:, None, :]).reshape(len(x), -1)
    z = (outer.mean(0) - lam.reshape(-1)) / (outer.std(0, ddof=1) / np.sqrt(len(x)))
    assert np.max(np.abs(z)) < z_threshold(9)
    w_cov = t.w.T @ t.w / len(t.w)
    assert np.max(np.abs(w_cov - np.eye(3))) < 0.05


def test_seed_determinism():
    lam = _lam()
    a = sample_task(np.random.default_rng(9), lam, 5, 6)
    b = sample_task(np.random.default_rng(9), lam, 5, 6)
    c = sample_task(np.random.default_rng(10), lam, 5, 6)
    for f in ("x", "x_q", "w", "y", "y_q"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.x, c.x)
    np.testing.assert_array_equal(random_covariance(np.random.default_rng(1), EIG),
                                  random_covariance(np.random.default_rng(1), EIG))


def test_eigenvalue_list_is_diagonal_covariance():
    a = sample_task(np.random.default_rng(11), [2.0, 1.0], 3, 4)
    b = sample_task(np.random.default_rng(11), np.diag([2.0, 1.0]), 3, 4)
    np.testing.assert_allclose(a.x, b.x)


def test_iter_tasks_chunks():
    lam = _lam()
    sizes = [t.batch for t in iter_tasks(np.random.default_rng(12), lam, 5, 25, chunk=10)]
    assert sizes == [10, 10, 5]
    a = [t.x for t in iter_tasks(np.random.default_rng(12), lam, 5, 25, chunk=10)]
    b = [t.x for t in iter_tasks(np.random.default_rng(12), lam, 5, 25, chunk=10)]
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


# -- next-token sequences (App. A.1) ----------------------------------------------------------
def test_next_token_prefixes():
    rng = np.random.default_rng(13)
    lam = _lam()
    s = sample_sequences(rng, lam, 6, 4)
    assert isinstance(s, NextTokenSequences)
    assert (s.batch, s.N_max, s.D) == (4, 6, 3)
    assert s.x.shape == (4, 7, 3) and s.y.shape == (4, 7) and s.w.shape == (4, 3)
    np.testing.assert_array_equal(s.context_lengths, np.arange(1, 7))
    assert s.beta.shape == (4, 6, 3) and s.z.shape == (4, 6, 9)
    np.testing.assert_allclose(s.y, np.einsum("bnd,bd->bn", s.x, s.w), rtol=1e-12, atol=1e-12)
    M = rng.standard_normal((3, 3))
    pred = s.predict(M)
    for p in range(6):  # prediction p (0-based) is token n = p + 2, context length p + 1
        ctx_x, ctx_y = s.x[:, :p + 1], s.y[:, :p + 1]
        b_ref = beta(ctx_x, ctx_y)  # 1/(n-1) sum_{m<n} y_m x_m
        np.testing.assert_allclose(s.beta[:, p], b_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(s.beta[:, p], np.einsum("bij,bj->bi", lambda_hat(ctx_x), s.w),
                                   rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(s.queries[:, p], s.x[:, p + 1])
        np.testing.assert_array_equal(s.targets[:, p], s.y[:, p + 1])
        np.testing.assert_allclose(s.z[:, p], cubic_feature(b_ref, s.x[:, p + 1]), rtol=1e-12)
        np.testing.assert_allclose(pred[:, p], np.einsum("bi,ij,bj->b", b_ref, M, s.x[:, p + 1]),
                                   rtol=1e-10, atol=1e-12)


def test_iter_sequences_chunks_and_determinism():
    lam = _lam()
    a = [s.x for s in iter_sequences(np.random.default_rng(14), lam, 4, 7, chunk=3)]
    b = [s.x for s in iter_sequences(np.random.default_rng(14), lam, 4, 7, chunk=3)]
    assert [len(u) for u in a] == [3, 3, 1]
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


# -- validation ---------------------------------------------------------------------------------
def _g():
    return np.random.default_rng(0)


BAD_INPUTS = [
    ("Lambda-not-symmetric", "Lambda", lambda: sample_task(_g(), [[1.0, 0.5], [0.0, 1.0]], 3, 2)),
    ("Lambda-not-pd", "Lambda", lambda: sample_task(_g(), [[1.0, 2.0], [2.0, 1.0]], 3, 2)),
    ("Lambda-nan", "Lambda", lambda: sample_task(_g(), [1.0, np.nan], 3, 2)),
    ("Lambda-negative-eigenvalue", "Lambda", lambda: sample_task(_g(), [1.0, -1.0], 3, 2)),
    ("N-zero", "N", lambda: sample_task(_g(), [1.0], 0, 2)),
    ("N-fraction", "N", lambda: sample_task(_g(), [1.0], 2.5, 2)),
    ("N-bool", "N", lambda: sample_task(_g(), [1.0], True, 2)),
    ("batch-zero", "batch", lambda: sample_task(_g(), [1.0], 3, 0)),
    ("rng-int", "rng", lambda: sample_task(0, [1.0], 3, 2)),
    ("rng-legacy", "rng", lambda: sample_task(np.random.RandomState(0), [1.0], 3, 2)),
    ("eigenvalues-zero", "eigenvalues", lambda: random_covariance(_g(), [1.0, 0.0])),
    ("eigenvalues-2d", "eigenvalues", lambda: random_covariance(_g(), [[1.0]])),
    ("eigenvalues-empty", "eigenvalues", lambda: random_covariance(_g(), [])),
    ("eigenvalues-inf", "eigenvalues", lambda: random_covariance(_g(), [1.0, np.inf])),
    ("D-zero", "D", lambda: random_orthogonal(_g(), 0)),
    ("total-zero", "total", lambda: iter_tasks(_g(), [1.0], 3, 0)),
    ("chunk-zero", "chunk", lambda: iter_tasks(_g(), [1.0], 3, 5, chunk=0)),
    ("N_max-zero", "N_max", lambda: sample_sequences(_g(), [1.0], 0, 2)),
    ("total-negative", "total", lambda: iter_sequences(_g(), [1.0], 2, -1)),
    ("x_q-shape", "x_q", lambda: cubic_feature(np.zeros((2, 3)), np.zeros((2, 2)))),
    ("y-shape-tokens", "y",
     lambda: token_matrix(np.zeros((2, 3, 2)), np.zeros((2, 4)), np.zeros((2, 2)))),
    ("x_q-shape-tokens", "x_q",
     lambda: token_matrix(np.zeros((2, 3, 2)), np.zeros((2, 3)), np.zeros((2, 3)))),
    ("x-ndim", "x", lambda: lambda_hat(np.zeros((2, 3)))),
    ("y-shape-beta", "y", lambda: beta(np.zeros((2, 3, 2)), np.zeros((2, 2)))),
    ("M-shape", "M", lambda: sample_task(_g(), [1.0, 2.0], 3, 2).predict(np.eye(3))),
    ("M-shape-ntp", "M", lambda: sample_sequences(_g(), [1.0, 2.0], 3, 2).predict(np.eye(1))),
]


@pytest.mark.parametrize("name, call", [pytest.param(n, c, id=i) for i, n, c in BAD_INPUTS])
def test_bad_input_raises_value_error_naming_parameter(name, call):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        call()


def test_random_orthogonals_are_orthogonal_and_haar_on_average():
    """A batch of Haar matrices: each orthogonal; E[U^T M U] = (tr M / D) I (the Haar second moment)."""
    from verify.tasks.in_context_regression import random_orthogonals

    rng = np.random.default_rng(5)
    U = random_orthogonals(rng, 20_000, 3)
    assert U.shape == (20_000, 3, 3)
    np.testing.assert_allclose(np.einsum("bji,bjk->bik", U, U), np.broadcast_to(np.eye(3), U.shape), atol=1e-12)
    M = np.diag([3.0, 0.0, 0.0])
    avg = np.einsum("bji,jk,bkl->il", U, M, U) / len(U)
    np.testing.assert_allclose(avg, np.eye(3), atol=0.05)          # s.e. of each entry ~ 0.01
    with pytest.raises(ValueError, match="batch"):
        random_orthogonals(rng, 0, 3)
