"""Random-walk tokens and the linearised softmax signal of Bao, Hataya, Karakida 2024.

Assumption 1: ``x_1 ~ N(0, Sigma)``, ``x_{t+1} ~ N(x_t, Sigma)``, so the tokens are Gaussian
with ``Cov(x_s, x_t) = min(s, t) Sigma``. Tokens are **columns**: ``X`` has shape ``(B, d, T)``
(a leading batch axis), built as the cumulative sum of i.i.d. ``N(0, Sigma)`` increments.

The query is the last token; ``omega = X^T W_QK x_T / lambda`` and the linearised softmax
coordinate (Sec. 2, Definition 1) is

    u_i = omega_i/T - sum_j omega_j/T^2 + 1/T,

whose probability of lying in [0, 1] is the signal-propagation probability rho_i.

Contains
--------
:func:`sample_walks`            X of shape (B, d, T), float64
:func:`iter_walks`              the same in chunks
:func:`linearised_signal`       u of shape (B, T) for given X, W_QK, temperature
:func:`symmetric_qk`            W_QK = B diag(w) B^T with Haar-random eigenvectors B
:func:`spectrum`                eigenvalues: quantiles of N(mean, std^2) (deterministic)
:func:`anisotropic_covariance`  the simulations' Sigma = R^T R / d, R_ab ~ U(-2.5, 2.5)
:func:`traces`                  (tr(W_QK Sigma), tr(W_QK Sigma W_QK Sigma))
:func:`query_products`          x_t^T x_T, t = 1..T, for Sigma = I in any dimension, in O(T) per walk
:func:`cumsum_tokens`           the cumulative sum over the token axis of (B, T, d) increments, in place

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention Networks Localize When QK-eigenspectrum
   Concentrates", ICML 2024, Sec. 2, Assumption 1, Sec. 4 (simulation set-up).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from scipy.special import ndtri

from .. import validate
from .in_context_regression import random_orthogonal

__all__ = ["CHUNK", "sample_walks", "iter_walks", "linearised_signal", "symmetric_qk", "spectrum",
           "anisotropic_covariance", "traces", "query_products", "cumsum_tokens"]

#: Walks per chunk of :func:`iter_walks` (a (4096, 128, 64) float64 chunk is 268 MB; keep d T small).
CHUNK = 4096


def _check_covariance(Sigma) -> np.ndarray:
    S = np.asarray(Sigma, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] == 0:
        raise ValueError(f"Sigma: expected a square d x d matrix, got shape {S.shape}")
    if not np.all(np.isfinite(S)) or np.max(np.abs(S - S.T)) > 1e-10 * max(np.max(np.abs(S)), 1e-300):
        raise ValueError("Sigma: expected a finite symmetric matrix")
    return 0.5 * (S + S.T)


def _factor(Sigma: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.cholesky(Sigma)
    except np.linalg.LinAlgError:
        raise ValueError("Sigma: matrix is not positive definite") from None


def sample_walks(rng: np.random.Generator, Sigma, T: int, batch: int) -> np.ndarray:
    """``batch`` random walks of ``T`` tokens (Assumption 1), shape ``(batch, d, T)``.

    Parameters
    ----------
    rng : numpy.random.Generator
    Sigma : (d, d) array
        Increment covariance (symmetric positive definite).
    T : int
        Number of tokens (>= 1).
    batch : int
        Number of walks (>= 1).
    """
    rng = validate.rng(rng)
    S = _check_covariance(Sigma)
    T, batch = validate.integer("T", T), validate.integer("batch", batch)
    L = _factor(S)
    # increments as rows, N(0, Sigma); a C-ordered L^T: numpy multiplies a stack by a transposed matrix
    # without BLAS (10-15x slower at d = 128), by a C-ordered one with it (the same values)
    Z = rng.standard_normal((batch, T, S.shape[0]))
    if not np.array_equal(L, np.eye(S.shape[0])):   # Sigma = I (Assumption 1's usual case): the product is Z
        Z = Z @ np.ascontiguousarray(L.T)
    return cumsum_tokens(Z).transpose(0, 2, 1)


def cumsum_tokens(Z: np.ndarray) -> np.ndarray:
    """``np.cumsum(Z, axis=1)`` of increments ``Z`` (batch, T, d), float64, computed in place and returned
    (the same sums in the same order, so the same values): one addition of contiguous (batch, d) slabs per
    token where the slabs are large (about 4x faster than numpy's strided cumsum, which also allocates a
    second array of the walks' size)."""
    if not isinstance(Z, np.ndarray) or Z.ndim != 3 or Z.dtype != np.float64:
        raise ValueError(f"Z: expected a float64 array of shape (batch, T, d), got {getattr(Z, 'dtype', type(Z))} "
                         f"of shape {np.shape(Z)}")
    if Z.shape[0] * Z.shape[2] < 1024 or not Z.flags.c_contiguous:
        return np.cumsum(Z, axis=1, out=Z)
    for t in range(1, Z.shape[1]):
        np.add(Z[:, t], Z[:, t - 1], out=Z[:, t])
    return Z


def iter_walks(rng: np.random.Generator, Sigma, T: int, total: int, chunk: int = CHUNK) -> Iterator[np.ndarray]:
    """``total`` walks in chunks of at most ``chunk`` (each from :func:`sample_walks`)."""
    total, chunk = validate.integer("total", total), validate.integer("chunk", chunk)
    done = 0
    while done < total:
        k = min(chunk, total - done)
        yield sample_walks(rng, Sigma, T, k)
        done += k


def linearised_signal(X: np.ndarray, W_QK, temperature: float) -> np.ndarray:
    """``u`` of shape ``(B, T)``: ``u_i = omega_i/T - sum_j omega_j/T^2 + 1/T`` with
    ``omega = X^T W_QK x_T / temperature`` (query = last token)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 3:
        raise ValueError(f"X: expected shape (B, d, T), got {X.shape}")
    W = np.asarray(W_QK, dtype=np.float64)
    if W.shape != (X.shape[1], X.shape[1]):
        raise ValueError(f"W_QK: expected shape {(X.shape[1], X.shape[1])}, got {W.shape}")
    if not np.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {temperature!r}")
    T = X.shape[2]
    q = X[:, :, -1] @ W.T                                   # W_QK x_T, (B, d)
    omega = np.einsum("bdt,bd->bt", X, q) / temperature
    return omega / T - omega.sum(axis=1, keepdims=True) / T**2 + 1.0 / T


def spectrum(d: int, mean: float, std: float) -> np.ndarray:
    """``d`` eigenvalues at the quantiles ``(k - 1/2)/d`` of ``N(mean, std^2)``, descending
    (a deterministic stand-in for the paper's i.i.d. Gaussian eigenvalues)."""
    d = validate.integer("d", d)
    q = ndtri((np.arange(d) + 0.5) / d)
    return np.sort(mean + std * q)[::-1]


def symmetric_qk(rng: np.random.Generator, eigenvalues) -> np.ndarray:
    """``W_QK = B diag(eigenvalues) B^T`` with Haar-random orthogonal ``B`` (symmetric)."""
    rng = validate.rng(rng)
    w = np.asarray(eigenvalues, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)):
        raise ValueError(f"eigenvalues: expected a non-empty finite list, got {eigenvalues!r}")
    B = random_orthogonal(rng, w.size)
    W = (B * w) @ B.T
    return 0.5 * (W + W.T)


def anisotropic_covariance(rng: np.random.Generator, d: int) -> np.ndarray:
    """``Sigma = R^T R / d`` with ``R_ab ~ U(-2.5, 2.5)`` i.i.d. (Sec. 4 simulations)."""
    rng = validate.rng(rng)
    d = validate.integer("d", d)
    R = rng.uniform(-2.5, 2.5, size=(d, d))
    S = R.T @ R / d
    return 0.5 * (S + S.T)


def traces(W_QK, Sigma) -> tuple[float, float]:
    """``(tr(W), tr(W^2))`` with ``W = W_QK Sigma``; ``tr(W^2) = tr(W_QK Sigma W_QK Sigma)``,
    which is not ``||W||_F^2`` for anisotropic Sigma."""
    W = np.asarray(W_QK, dtype=np.float64) @ _check_covariance(Sigma)
    return float(np.trace(W)), float(np.trace(W @ W))


def query_products(rng: np.random.Generator, T: int, batch: int, m: int) -> np.ndarray:
    """``x_t^T x_T`` for t = 1..T of ``batch`` random walks in R^m with ``Sigma = I`` (Assumption 1),
    shape ``(batch, T)``, exactly in law and at a cost independent of ``m``.

    Given ``x_T``, the walk is ``x_t = (t/T) x_T + z_t`` with ``z`` an m-dimensional Brownian bridge
    (``Cov(z_s, z_t) = (min(s, t) - s t/T) I``) independent of ``x_T``; by rotation invariance
    ``z_t^T x_T = R b_t`` with ``R = |x_T|`` and ``b`` a one-dimensional bridge independent of ``R``:

        x_t^T x_T = (t/T) R^2 + R b_t,   R^2 ~ T chi^2_m,   b_t = w_t - (t/T) w_T  (w a 1-d walk).

    A symmetric ``W_QK`` with the eigenvalue ``a_g`` on ``m_g`` directions (``Sigma = I``) gives
    ``omega_t = sum_g a_g x_{g,t}^T x_{g,T} / lambda`` with an independent call per group: the
    signal of Sec. 4 at the paper's ``d = xi^2`` (Fig. 3 needs d = 262144) for the price of d = 1.
    """
    rng = validate.rng(rng)
    T, batch, m = (validate.integer(n, v) for n, v in (("T", T), ("batch", batch), ("m", m)))
    t = np.arange(1, T + 1) / T
    # in place (the arithmetic of w = cumsum(N), b = w - t w_T, t R^2 + R b, so the same values): the
    # (batch, T) arrays are large (fig2 draws 40M of them) and each new one costs its page faults
    w = rng.standard_normal((batch, T))
    np.cumsum(w, axis=1, out=w)
    out = np.multiply(t, w[:, -1:])
    b = np.subtract(w, out, out=w)
    R2 = T * rng.chisquare(m, size=(batch, 1))
    np.multiply(t, R2, out=out)
    out += np.multiply(np.sqrt(R2), b, out=b)
    return out
