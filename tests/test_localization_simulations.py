"""The simulation helpers of the localization checks (Bao, Hataya, Karakida 2024, Secs. 4-5, Fig. 5):
real softmax entropy, attention-only stacks, rho's participation ratio and the fast paths that share
random walks across eigenspectra.

Reference values are direct computations (scipy's entropy, explicit matrix products,
:func:`verify.tasks.random_walk.linearised_signal`), not the helpers under test.
"""

import numpy as np
import pytest
from scipy.stats import entropy

from verify.checks.localization.entropy_softmax import _grams, attention_entropy, entropy_keys_first, stated_sign
from verify.checks.localization.rank_collapse import attention_layer, haar_stack, log_residual, unit_quantiles
from verify.checks.localization.rho_trends import (
    _indicators,
    _pr_influence,
    _signal_parts,
    participation_ratio,
)
from verify.registry import get_check, run_check
from verify.tasks.random_walk import anisotropic_covariance, linearised_signal, spectrum, symmetric_qk


def test_attention_entropy_is_the_shannon_entropy_of_the_softmax():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 7, 9)) * 3
    p = np.exp(logits - logits.max(-1, keepdims=True))
    ref = entropy(p / p.sum(-1, keepdims=True), axis=-1)
    assert np.allclose(attention_entropy(logits), ref, rtol=1e-12, atol=1e-13)
    assert attention_entropy(np.zeros(40)) == pytest.approx(np.log(40), rel=1e-14)
    # a peaked row: no overflow, entropy -> 0
    assert 0 <= attention_entropy(np.array([1e4, 0.0, -1e4])) < 1e-300 + 1e-12


def test_entropy_keys_first_is_the_entropy_of_the_transposed_logits():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((6, 9, 9)) * np.array([0.1, 3.0, 30.0, 1.0, 300.0, 5.0])[:, None, None]
    keys_first = np.ascontiguousarray(logits.transpose(2, 0, 1))        # [s, walk, t]
    got = entropy_keys_first(keys_first, np.empty_like(keys_first), np.empty_like(keys_first))
    assert got.shape == (6, 9)
    assert np.allclose(got, attention_entropy(logits), rtol=1e-12, atol=1e-12)


def test_eigenbasis_logits_equal_the_rotated_walk_logits():
    """(m G0 + s G1) from walks Y equals X^T W_QK X for X = B Y and W_QK = B diag(m + s q) B^T."""
    d, T, m, s = 6, 5, 0.3, 0.7
    G0, G1 = _grams(np.random.default_rng(1), d, T, 3)
    Y = np.cumsum(np.random.default_rng(1).standard_normal((3, T, d)), axis=1)
    B = np.linalg.qr(np.random.default_rng(2).standard_normal((d, d)))[0]
    W = (B * spectrum(d, m, s)) @ B.T
    X = Y @ B.T                                                     # rows x_t = B y_t
    assert np.allclose(m * G0 + s * G1, X @ W @ X.transpose(0, 2, 1), rtol=1e-12, atol=1e-10)


def test_stated_signs():
    assert stated_sign("all queries", 0.0, 1.01, 40) == 1
    assert stated_sign("all queries", -5.7, 1.9, 40) == -1
    assert stated_sign("all queries", -5.7, 1.04, 40) == 0
    assert stated_sign("last query", 0.1, 2.0, 40) == 1
    assert stated_sign("last query", 5.7, 1.9, 40) == -1
    assert stated_sign("last query", 5.7, 1.9, 80) == 0
    assert stated_sign("last query", 1.1, 1.9, 40) == 0


def test_unit_quantiles_fix_both_traces():
    for d in (2, 7, 128):
        q = unit_quantiles(d)
        m, s = 0.3, 0.8
        w = m + s * q
        assert w.sum() == pytest.approx(d * m, rel=1e-12)
        assert np.sum(w**2) == pytest.approx(d * (m * m + s * s), rel=1e-12)


def test_attention_layer_is_softmax_mixing_and_zero_qk_collapses_in_one_layer():
    rng = np.random.default_rng(3)
    n, T, d = 4, 6, 5
    X = rng.standard_normal((n, T, d))
    B = haar_stack(rng, n, d)
    assert np.allclose(B @ B.transpose(0, 2, 1), np.eye(d), atol=1e-12)
    w = rng.standard_normal(d)
    out = attention_layer(X, B, w, 2.0)
    for k in range(n):
        W = (B[k] * w) @ B[k].T
        L = X[k] @ W @ X[k].T / 2.0
        P = np.exp(L - L.max(1, keepdims=True))
        P /= P.sum(1, keepdims=True)
        assert np.allclose(out[k], P @ X[k], rtol=1e-12, atol=1e-12)
    # W_QK = 0: uniform attention, every token becomes the mean; res = 0 up to round-off
    flat = attention_layer(X, B, np.zeros(d), 2.0)
    assert np.all(log_residual(flat) < np.log(1e-14))
    assert np.allclose(log_residual(3.0 * X), log_residual(X), atol=1e-13)


def test_participation_ratio_counts_propagating_tokens():
    assert participation_ratio(np.full(40, 0.3)) == pytest.approx(40)
    assert participation_ratio(np.r_[np.ones(7), np.zeros(33)]) == pytest.approx(7)


def test_pr_influence_is_the_derivative_of_the_participation_ratio():
    rng = np.random.default_rng(4)
    rho = rng.uniform(0.1, 0.9, 12)
    h = rng.uniform(0, 1, (3, 12))
    eps = 1e-7
    fd = [(participation_ratio(rho + eps * hk) - participation_ratio(rho - eps * hk)) / (2 * eps) for hk in h]
    assert np.allclose(_pr_influence(h, rho), fd, rtol=1e-6)


def test_signal_parts_give_the_linearised_signal():
    """u from (m a + s b)/lambda equals linearised_signal for W_QK = m I + s M under anisotropic Sigma."""
    d, T, n, m, s, lam = 5, 8, 6, 0.2, 0.9, 1.7
    Sigma = anisotropic_covariance(np.random.default_rng(5), d)
    M = symmetric_qk(np.random.default_rng(6), np.linspace(-1, 1, d))
    a, b = _signal_parts(np.random.default_rng(7), Sigma, M[None], T, n)
    Lc = np.linalg.cholesky(Sigma)
    X = np.cumsum(np.random.default_rng(7).standard_normal((n, T, d)) @ Lc.T, axis=1).transpose(0, 2, 1)
    u = linearised_signal(X, m * np.eye(d) + s * M, lam)
    assert np.array_equal(_indicators((m * a[0] + s * b[0]) / lam), ((u >= 0) & (u <= 1)).astype(float))


def test_rank_collapse_check_needs_the_zero_mean_spectrum():
    res = run_check(get_check("localization.rank_collapse.attention_stack"), settings={"fraction": "0.5,1"})
    assert not res.passed and res.error.startswith("ValueError: fraction:")
