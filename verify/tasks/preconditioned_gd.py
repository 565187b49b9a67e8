"""Prompts of the in-context regression task of Ahn, Cheng, Daneshmand, Sra 2023.

Data model (§2, Table 1): covariates ``x^(1..n+1) ~ N(0, Sigma)`` i.i.d., a task vector
``w*`` drawn per prompt, independent of them, noiseless labels ``y^(i) = <x^(i), w*>``.
Theorems 1, 2, 5 draw ``w* ~ N(0, I)``; Theorems 3, 4 draw ``w* ~ N(0, Sigma^{-1})``
(``task="inverse"``). ``n`` counts the context examples and excludes the query.

Tokens are **columns** (paper eq. 1)::

    Z_0 = [[x^(1) ... x^(n)  x^(n+1)],
           [y^(1) ... y^(n)  0      ]]      shape (d + 1, n + 1)

Everything is vectorised over a leading batch axis ``B``, float64.

Contains
--------
:class:`Prompts`          one batch of prompts: ``X`` (B, d, n+1), ``w`` (B, d), labels
:func:`sample_prompts`    draw :class:`Prompts`
:func:`iter_prompts`      draw many prompts in chunks
:func:`distorted_covariance`  the experiments' ``Sigma = U^T diag(1, 1, .25, .0625, 1) U``

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement
   preconditioned gradient descent for in-context learning", NeurIPS 2023, eqs. 1, 5.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import numpy as np

from .. import validate
from .in_context_regression import CHUNK, _chunks, covariance_factor, random_orthogonal

__all__ = ["EXPERIMENT_EIGENVALUES", "Prompts", "distorted_covariance", "iter_prompts", "sample_prompts"]

#: Eigenvalues of Sigma in the paper's experiments (§4.3, §5.1): D = diag(1, 1, 0.25, 0.0625, 1).
EXPERIMENT_EIGENVALUES = (1.0, 1.0, 0.25, 0.0625, 1.0)

TASKS = ("identity", "inverse")


@dataclass(frozen=True)
class Prompts:
    """A batch of prompts.

    Attributes
    ----------
    X : ndarray (B, d, n + 1)
        Covariates as columns; column ``n`` (0-based) is the query ``x^(n+1)``.
    w : ndarray (B, d)
        Task vectors ``w*``.
    """

    X: np.ndarray
    w: np.ndarray

    @property
    def batch(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    @property
    def n(self) -> int:
        """Context length (the query excluded)."""
        return self.X.shape[2] - 1

    @cached_property
    def y(self) -> np.ndarray:
        """All labels ``<x^(i), w*>``, shape (B, n + 1); the last one is the query target (computed once)."""
        return np.einsum("bdi,bd->bi", self.X, self.w)

    @property
    def target(self) -> np.ndarray:
        """The query label ``y^(n+1) = <x^(n+1), w*>``, shape (B,) (from the query alone: the same value
        whether or not :attr:`y` has been computed)."""
        return np.einsum("bd,bd->b", self.query, self.w)

    @property
    def context(self) -> np.ndarray:
        """Context covariates ``x^(1..n)``, shape (B, d, n)."""
        return self.X[:, :, :-1]

    @property
    def query(self) -> np.ndarray:
        """Query covariate ``x^(n+1)``, shape (B, d)."""
        return self.X[:, :, -1]

    @property
    def S(self) -> np.ndarray:
        """Empirical context covariance ``(1/n) sum_i x^(i) x^(i)T``, shape (B, d, d)."""
        C = self.context
        return (C @ C.transpose(0, 2, 1)) / self.n   # batched BLAS products (einsum: 2x slower)

    @property
    def h(self) -> np.ndarray:
        """In-context correlation ``(1/n) sum_i y^(i) x^(i) = S w*``, shape (B, d)."""
        return np.einsum("bdi,bi->bd", self.context, self.y[:, :-1]) / self.n

    def gram(self) -> tuple[np.ndarray, np.ndarray]:
        """``(G_0, z_q)``: the Gram matrix ``(1/n) Z_c Z_c^T`` of the context tokens, (B, d + 1, d + 1),
        and the query column ``[x^(n+1); 0]`` (B, d + 1) of :meth:`tokens`, without forming the tokens:
        the context's label row is ``w*^T X_c``, so ``G_0 = [[S, S w*], [w*^T S, w*^T S w*]]`` (the same
        matrix as from the tokens to round-off). What
        :func:`~verify.models.linear_transformer_monte_carlo.predict_gram` reads of the prompts."""
        B, d = self.batch, self.d
        S = self.S
        Sw = (S @ self.w[:, :, None])[:, :, 0]
        G = np.empty((B, d + 1, d + 1))
        G[:, :d, :d] = S
        G[:, :d, d] = Sw
        G[:, d, :d] = Sw
        G[:, d, d] = np.einsum("bd,bd->b", Sw, self.w)
        zq = np.zeros((B, d + 1))
        zq[:, :d] = self.query
        return G, zq

    def tokens(self) -> np.ndarray:
        """The token matrix ``Z_0`` of eq. 1, shape (B, d + 1, n + 1), query label 0."""
        y = self.y.copy()
        y[:, -1] = 0.0
        return np.concatenate([self.X, y[:, None, :]], axis=1)


def _check_sigma(Sigma) -> np.ndarray:
    from theory.params import covariance

    return covariance("Sigma", "covariance of the covariates").validate(Sigma, {})


def sample_prompts(rng: np.random.Generator, Sigma, n: int, batch: int, task: str = "identity") -> Prompts:
    """Draw ``batch`` prompts with ``n`` context examples.

    Parameters
    ----------
    rng : numpy.random.Generator
    Sigma : array_like
        Covariance of the covariates: a ``d x d`` SPD matrix or a list of eigenvalues.
    n : int
        Context length, ``>= 1`` (the query is extra).
    batch : int
        Number of prompts, ``>= 1``.
    task : {"identity", "inverse"}
        ``w* ~ N(0, I)`` (Theorems 1, 2, 5) or ``w* ~ N(0, Sigma^{-1})`` (Theorems 3, 4).
    """
    rng = validate.rng(rng)
    Sigma = _check_sigma(Sigma)
    n = validate.integer("n", n)
    batch = validate.integer("batch", batch)
    if task not in TASKS:
        raise ValueError(f"task: expected one of {TASKS}, got {task!r}")
    d = Sigma.shape[0]
    Lc = covariance_factor(Sigma)
    X = Lc @ rng.standard_normal((batch, d, n + 1))  # one BLAS product per prompt (einsum: 6x slower)
    g = rng.standard_normal((batch, d))
    # Sigma^{-1} = Lc^{-T} Lc^{-1}: w = Lc^{-T} g has covariance Sigma^{-1}
    w = g if task == "identity" else np.linalg.solve(Lc.T, g.T).T
    return Prompts(X=X, w=w)


def iter_prompts(rng: np.random.Generator, Sigma, n: int, total: int, task: str = "identity",
                 chunk: int = CHUNK) -> Iterator[Prompts]:
    """Draw ``total`` prompts in chunks of at most ``chunk`` (bounded memory)."""
    total = validate.integer("total", total)
    chunk = validate.integer("chunk", chunk)
    for size in _chunks(total, chunk):
        yield sample_prompts(rng, Sigma, n, size, task)


def distorted_covariance(rng: np.random.Generator, eigenvalues=EXPERIMENT_EIGENVALUES) -> np.ndarray:
    """``Sigma = U^T diag(eigenvalues) U`` with ``U`` Haar-random orthogonal (§4.3, §5.1)."""
    rng = validate.rng(rng)
    lam = np.asarray(eigenvalues, dtype=np.float64)
    if lam.ndim != 1 or lam.size == 0 or np.any(lam <= 0) or not np.all(np.isfinite(lam)):
        raise ValueError(f"eigenvalues: expected positive finite numbers, got {eigenvalues!r}")
    U = random_orthogonal(rng, lam.size)
    S = U.T @ np.diag(lam) @ U
    return 0.5 * (S + S.T)
