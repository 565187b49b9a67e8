"""Samplers of the in-context linear-regression task (Zhang, Singh, Latham, Saxe 2025).

Data model (§2.1, eqs. 1-2): a sequence holds context tokens ``x_1..x_N`` and a query
``x_q``, all i.i.d. ``N(0, Lambda)``, and a task vector ``w ~ N(0, I)`` drawn per sequence,
independent of the tokens. Labels are ``y_n = w^T x_n`` and the target is ``y_q = w^T x_q``;
there is no label noise. In-context statistics (App. C.1): ``Lambda_hat = (1/N) sum_n x_n
x_n^T`` (27), ``beta = (1/N) sum_n y_n x_n = Lambda_hat w`` (29); cubic feature of the merged
model ``z = vec(beta x_q^T) = x_q (x) beta`` (eqs. 7, 42), with column-major ``vec``.

Everything is vectorised over a leading batch axis ``B`` (one row per sequence), float64.
Large sample counts are drawn in chunks (:func:`iter_tasks`, :func:`iter_sequences`) so
that memory stays bounded.

Contains
--------
:func:`random_orthogonal`      Haar-random orthogonal matrix (QR with sign fix)
:func:`random_covariance`      ``Q diag(eigenvalues) Q^T`` with random eigenvectors
:class:`RegressionTask`        one batch of fixed-length sequences (eqs. 1-2)
:func:`sample_task`            draw a :class:`RegressionTask`
:func:`iter_tasks`             draw many sequences in chunks
:func:`lambda_hat` ...         the statistics of App. C.1 (:func:`beta`, :func:`cubic_feature`) and
:func:`token_matrix`           the token matrix of eq. 1
:class:`NextTokenSequences`    sequences of length ``N_max + 1`` for the next-token loss (App. A.1)
:func:`sample_sequences`       draw a :class:`NextTokenSequences`
:func:`iter_sequences`         draw many of them in chunks

References
----------
.. [1] Y. Zhang, A. K. Singh, P. E. Latham, A. Saxe, "Training Dynamics of In-Context
   Learning in Linear Attention", ICML 2025, §2.1, App. A.1, App. C.1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from theory.params import covariance as _covariance_param

from .. import validate

__all__ = [
    "CHUNK",
    "NextTokenSequences",
    "RegressionTask",
    "beta",
    "covariance_factor",
    "cubic_feature",
    "iter_sequences",
    "iter_tasks",
    "lambda_hat",
    "random_covariance",
    "random_orthogonal",
    "random_orthogonals",
    "sample_sequences",
    "sample_task",
    "token_matrix",
]

#: Default number of sequences drawn at once by the chunked iterators.
CHUNK = 100_000

_LAMBDA = _covariance_param("Lambda", "Token covariance (eq. 2).")


# -- validation ----------------------------------------------------------------------
def _check_lambda(Lambda) -> np.ndarray:
    """A symmetric positive-definite D x D matrix (a 1-D array is read as eigenvalues of a
    diagonal covariance), validated as the closed forms validate it."""
    return _LAMBDA.validate(Lambda, {})


# -- covariances ---------------------------------------------------------------------
def random_orthogonal(rng: np.random.Generator, D: int) -> np.ndarray:
    """A Haar-distributed random ``D x D`` orthogonal matrix.

    QR decomposition of a standard Gaussian matrix, with the columns of ``Q`` multiplied by
    the signs of ``diag(R)`` so that the distribution is uniform (Haar) on O(D).

    Parameters
    ----------
    rng : numpy.random.Generator
    D : int
        Size, ``>= 1``.
    """
    rng = validate.rng(rng)
    D = validate.integer("D", D)
    q, r = np.linalg.qr(rng.standard_normal((D, D)))
    signs = np.sign(np.diag(r))
    signs[signs == 0] = 1.0
    return q * signs


def random_orthogonals(rng: np.random.Generator, batch: int, D: int) -> np.ndarray:
    """``batch`` independent Haar-distributed ``D x D`` orthogonal matrices, shape ``(batch, D, D)``:
    :func:`random_orthogonal` vectorised (one batched QR, the same sign correction)."""
    rng = validate.rng(rng)
    D = validate.integer("D", D)
    batch = validate.integer("batch", batch)
    q, r = np.linalg.qr(rng.standard_normal((batch, D, D)))
    signs = np.sign(np.diagonal(r, axis1=1, axis2=2))
    signs[signs == 0] = 1.0
    return q * signs[:, None, :]


def random_covariance(rng: np.random.Generator, eigenvalues) -> np.ndarray:
    """``Lambda = Q diag(eigenvalues) Q^T`` with Haar-random eigenvectors ``Q``.

    The paper's anisotropic experiments use a fixed spectrum with random eigenvectors
    (e.g. eigenvalues ``(0.4, 0.3, 0.2, 0.1)``, Fig. 1).

    Parameters
    ----------
    rng : numpy.random.Generator
    eigenvalues : array_like, shape (D,)
        Positive, finite eigenvalues (any order; column ``d`` of ``Q`` is the eigenvector of
        ``eigenvalues[d]``).

    Returns
    -------
    ndarray, shape (D, D)
        Symmetric positive definite (exactly symmetric).
    """
    rng = validate.rng(rng)
    try:
        lam = np.asarray(eigenvalues, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"eigenvalues: expected real numbers, got {eigenvalues!r}") from None
    if lam.ndim != 1 or lam.size == 0:
        raise ValueError(f"eigenvalues: expected a non-empty 1-D array, got shape {lam.shape}")
    if not np.all(np.isfinite(lam)):
        raise ValueError("eigenvalues: contains NaN or infinity")
    if np.any(lam <= 0):
        raise ValueError(f"eigenvalues: must be positive, got {lam.tolist()}")
    q = random_orthogonal(rng, lam.size)
    cov = (q * lam) @ q.T
    return 0.5 * (cov + cov.T)


def covariance_factor(Lambda) -> np.ndarray:
    """A matrix ``L`` with ``L L^T = Lambda`` (Cholesky), so ``g @ L.T ~ N(0, Lambda)`` for
    standard Gaussian rows ``g``."""
    return np.linalg.cholesky(_check_lambda(Lambda))


# -- statistics (App. C.1) -----------------------------------------------------------
def lambda_hat(x: np.ndarray) -> np.ndarray:
    """In-context covariance ``Lambda_hat = (1/N) sum_n x_n x_n^T`` (eq. 27).

    ``x`` has shape ``(B, N, D)``; returns ``(B, D, D)``.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 3 or x.shape[1] == 0:
        raise ValueError(f"x: expected shape (B, N, D) with N >= 1, got {x.shape}")
    return np.einsum("bnd,bne->bde", x, x) / x.shape[1]


def beta(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``beta = (1/N) sum_n y_n x_n`` (eq. 4), shape ``(B, D)`` from ``x (B, N, D)``,
    ``y (B, N)``. Equals ``Lambda_hat w`` (eq. 29) for noiseless labels."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 3 or x.shape[1] == 0:
        raise ValueError(f"x: expected shape (B, N, D) with N >= 1, got {x.shape}")
    if y.shape != x.shape[:2]:
        raise ValueError(f"y: expected shape {x.shape[:2]} to match x, got {y.shape}")
    return np.einsum("bn,bnd->bd", y, x) / x.shape[1]


def cubic_feature(beta: np.ndarray, x_q: np.ndarray) -> np.ndarray:
    """``z = vec(beta x_q^T) = x_q (x) beta`` (eqs. 7, 38, 42), column-major ``vec``.

    Entry ``j * D + i`` is ``x_q[j] * beta[i]``. Works on any leading axes: ``beta`` and
    ``x_q`` of shape ``(..., D)`` give ``(..., D^2)``.
    """
    beta = np.asarray(beta, dtype=np.float64)
    x_q = np.asarray(x_q, dtype=np.float64)
    if beta.shape != x_q.shape or beta.ndim < 1:
        raise ValueError(f"x_q: expected the shape of beta {beta.shape}, got {x_q.shape}")
    D = beta.shape[-1]
    return (x_q[..., :, None] * beta[..., None, :]).reshape(*beta.shape[:-1], D * D)


def token_matrix(x: np.ndarray, y: np.ndarray, x_q: np.ndarray) -> np.ndarray:
    """The token matrix ``X`` of eq. 1, shape ``(B, D + 1, N + 1)``.

    Columns are tokens: column ``n < N`` is ``[x_n; y_n]``, the last column is
    ``[x_q; 0]`` (the query's label slot is zero).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    x_q = np.asarray(x_q, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"x: expected shape (B, N, D), got {x.shape}")
    B, N, D = x.shape
    if y.shape != (B, N):
        raise ValueError(f"y: expected shape {(B, N)}, got {y.shape}")
    if x_q.shape != (B, D):
        raise ValueError(f"x_q: expected shape {(B, D)}, got {x_q.shape}")
    X = np.zeros((B, D + 1, N + 1))
    X[:, :D, :N] = x.transpose(0, 2, 1)
    X[:, :D, N] = x_q
    X[:, D, :N] = y
    return X


# -- fixed-length sequences ------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class RegressionTask:
    """A batch of ``B`` in-context regression sequences of fixed context length ``N``.

    Attributes
    ----------
    x : ndarray, shape (B, N, D)
        Context tokens ``x_n ~ N(0, Lambda)``.
    x_q : ndarray, shape (B, D)
        Query tokens ``x_q ~ N(0, Lambda)``.
    w : ndarray, shape (B, D)
        Task vectors ``w ~ N(0, I)``, one per sequence.
    y : ndarray, shape (B, N)
        Context labels ``y_n = w^T x_n``.
    y_q : ndarray, shape (B,)
        Query targets ``y_q = w^T x_q``.
    """

    x: np.ndarray
    x_q: np.ndarray
    w: np.ndarray
    y: np.ndarray
    y_q: np.ndarray

    @property
    def batch(self) -> int:
        return self.x.shape[0]

    @property
    def N(self) -> int:
        return self.x.shape[1]

    @property
    def D(self) -> int:
        return self.x.shape[2]

    @property
    def lambda_hat(self) -> np.ndarray:
        """``(B, D, D)``, eq. 27."""
        return lambda_hat(self.x)

    @property
    def beta(self) -> np.ndarray:
        """``(B, D)``, eq. 4 / 29."""
        return beta(self.x, self.y)

    @property
    def z(self) -> np.ndarray:
        """``(B, D^2)``, ``vec(beta x_q^T) = x_q (x) beta`` (column-major, eq. 42)."""
        return cubic_feature(self.beta, self.x_q)

    @property
    def tokens(self) -> np.ndarray:
        """``(B, D + 1, N + 1)``, the token matrix ``X`` of eq. 1."""
        return token_matrix(self.x, self.y, self.x_q)

    def predict(self, M) -> np.ndarray:
        """Merged-model prediction ``y_hat = beta^T M x_q`` (eq. 6 with ``M = sum_i v_i U_i``),
        shape ``(B,)``."""
        M = np.asarray(M, dtype=np.float64)
        if M.shape != (self.D, self.D):
            raise ValueError(f"M: expected shape {(self.D, self.D)}, got {M.shape}")
        return np.einsum("bi,ij,bj->b", self.beta, M, self.x_q)


def sample_task(rng: np.random.Generator, Lambda, N: int, batch: int) -> RegressionTask:
    """Draw ``batch`` sequences of the data model of §2.1 (eqs. 1-2).

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness.
    Lambda : array_like, shape (D, D) or (D,)
        Token covariance, symmetric positive definite (a 1-D array is the eigenvalues of a
        diagonal covariance).
    N : int
        Context length, ``>= 1``.
    batch : int
        Number of sequences ``B``, ``>= 1``.

    Returns
    -------
    RegressionTask

    Notes
    -----
    Draw order (fixed, so one seed gives one batch): context tokens, query tokens, task
    vectors. Tokens are ``g @ L^T`` with ``L`` the Cholesky factor of ``Lambda``.
    """
    rng = validate.rng(rng)
    L = covariance_factor(Lambda)
    N = validate.integer("N", N)
    B = validate.integer("batch", batch)
    D = L.shape[0]
    x = rng.standard_normal((B, N, D)) @ np.ascontiguousarray(L.T)  # C order: the stacked product by BLAS
    x_q = rng.standard_normal((B, D)) @ L.T
    w = rng.standard_normal((B, D))
    y = np.einsum("bnd,bd->bn", x, w)
    y_q = np.einsum("bd,bd->b", x_q, w)
    return RegressionTask(x=x, x_q=x_q, w=w, y=y, y_q=y_q)


def _chunks(total: int, chunk: int) -> Iterator[int]:
    done = 0
    while done < total:
        k = min(chunk, total - done)
        yield k
        done += k


def iter_tasks(rng: np.random.Generator, Lambda, N: int, total: int,
               chunk: int = CHUNK) -> Iterator[RegressionTask]:
    """Draw ``total`` sequences as successive :class:`RegressionTask` batches of at most
    ``chunk`` sequences (the last one may be smaller), all from ``rng``.

    Arguments are validated when called (not on first iteration). The batches are drawn
    lazily, in order, so the same ``rng`` state and ``chunk`` give the same batches.
    """
    rng = validate.rng(rng)
    Lambda = _check_lambda(Lambda)
    N = validate.integer("N", N)
    total = validate.integer("total", total)
    chunk = validate.integer("chunk", chunk)
    return (sample_task(rng, Lambda, N, k) for k in _chunks(total, chunk))


# -- next-token sequences (App. A.1) -----------------------------------------------------
@dataclass(frozen=True, eq=False)
class NextTokenSequences:
    """A batch of sequences of length ``N_max + 1`` for the next-token loss (App. A.1, eq. 23).

    Every token ``n = 2, ..., N_max + 1`` (1-based) is a query whose context is the ``n - 1``
    labelled tokens before it, so one sequence yields ``N_max`` predictions, one per
    context length ``1, ..., N_max`` (the uniform length distribution of A.1). The ``1/N``
    of eq. 4 is the current context length: ``beta_n = (1/(n-1)) sum_{m<n} y_m x_m``.

    Attributes
    ----------
    x : ndarray, shape (B, N_max + 1, D)
        Tokens ``x_n ~ N(0, Lambda)``.
    w : ndarray, shape (B, D)
        Task vectors ``w ~ N(0, I)``.
    y : ndarray, shape (B, N_max + 1)
        Labels ``y_n = w^T x_n``.
    """

    x: np.ndarray
    w: np.ndarray
    y: np.ndarray

    @property
    def batch(self) -> int:
        return self.x.shape[0]

    @property
    def N_max(self) -> int:
        return self.x.shape[1] - 1

    @property
    def D(self) -> int:
        return self.x.shape[2]

    @property
    def context_lengths(self) -> np.ndarray:
        """``(N_max,)``: ``1, ..., N_max``, the context length of each prediction."""
        return np.arange(1, self.N_max + 1)

    @property
    def queries(self) -> np.ndarray:
        """``(B, N_max, D)``: the query token of each prediction, ``x_2, ..., x_{N_max+1}``."""
        return self.x[:, 1:, :]

    @property
    def targets(self) -> np.ndarray:
        """``(B, N_max)``: the target of each prediction, ``y_2, ..., y_{N_max+1}``."""
        return self.y[:, 1:]

    @property
    def beta(self) -> np.ndarray:
        """``(B, N_max, D)``: ``beta`` of each prefix, ``(1/(n-1)) sum_{m<n} y_m x_m``."""
        partial = np.cumsum(self.y[:, :-1, None] * self.x[:, :-1, :], axis=1)
        return partial / self.context_lengths[None, :, None]

    @property
    def z(self) -> np.ndarray:
        """``(B, N_max, D^2)``: cubic feature ``x_n (x) beta_n`` of each prediction."""
        return cubic_feature(self.beta, self.queries)

    def predict(self, M) -> np.ndarray:
        """``(B, N_max)``: merged-model predictions ``beta_n^T M x_n``."""
        M = np.asarray(M, dtype=np.float64)
        if M.shape != (self.D, self.D):
            raise ValueError(f"M: expected shape {(self.D, self.D)}, got {M.shape}")
        return np.einsum("bni,ij,bnj->bn", self.beta, M, self.queries)


def sample_sequences(rng: np.random.Generator, Lambda, N_max: int,
                     batch: int) -> NextTokenSequences:
    """Draw ``batch`` sequences of ``N_max + 1`` tokens for the next-token loss (App. A.1).

    Parameters
    ----------
    rng : numpy.random.Generator
    Lambda : array_like, shape (D, D) or (D,)
        Token covariance (as in :func:`sample_task`).
    N_max : int
        Largest context length, ``>= 1``.
    batch : int
        Number of sequences, ``>= 1``.
    """
    rng = validate.rng(rng)
    L = covariance_factor(Lambda)
    N_max = validate.integer("N_max", N_max)
    B = validate.integer("batch", batch)
    D = L.shape[0]
    x = rng.standard_normal((B, N_max + 1, D)) @ np.ascontiguousarray(L.T)  # C order: the stacked product by BLAS
    w = rng.standard_normal((B, D))
    y = np.einsum("bnd,bd->bn", x, w)
    return NextTokenSequences(x=x, w=w, y=y)


def iter_sequences(rng: np.random.Generator, Lambda, N_max: int, total: int,
                   chunk: int = CHUNK) -> Iterator[NextTokenSequences]:
    """Draw ``total`` next-token sequences in batches of at most ``chunk``."""
    rng = validate.rng(rng)
    Lambda = _check_lambda(Lambda)
    N_max = validate.integer("N_max", N_max)
    total = validate.integer("total", total)
    chunk = validate.integer("chunk", chunk)
    return (sample_sequences(rng, Lambda, N_max, k) for k in _chunks(total, chunk))
