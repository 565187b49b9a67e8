"""Estimators with standard errors, z-scores and family-wise thresholds.

Every Monte Carlo check in ``verify`` compares a closed form with a sample mean through
z-scores ``(mean - predicted) / SE`` and rejects when the largest |z| over the family of
compared entries exceeds :func:`z_threshold`, the two-sided Bonferroni threshold for a
stated family-wise false-alarm rate. The suite-wide rate is :data:`FALSE_ALARM`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri, stdtrit

__all__ = ["FALSE_ALARM", "MeanEstimate", "batch_mean", "z_threshold", "t_threshold", "max_abs_z", "rel_frobenius",
           "rel_err", "rel_max"]

#: Family-wise false-alarm probability of one Monte Carlo check (per check, per run).
FALSE_ALARM = 1e-6


def z_threshold(n_tests: int, alpha: float = FALSE_ALARM) -> float:
    """Two-sided |z| threshold with family-wise false-alarm rate ``alpha`` over
    ``n_tests`` (Bonferroni): ``Phi^{-1}(1 - alpha / (2 n_tests))``."""
    if n_tests < 1:
        raise ValueError(f"n_tests: must be >= 1, got {n_tests}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    return float(-ndtri(alpha / (2 * n_tests)))


def t_threshold(n_tests: int, dof: int, alpha: float = FALSE_ALARM) -> float:
    """:func:`z_threshold` for statistics whose standard error comes from ``dof + 1`` batch means
    (Student's t with ``dof`` degrees of freedom): the family-wise rate stays ``alpha`` however few
    batches there are (the normal threshold would understate it: 3.7e-6 instead of 1e-6 at 199
    degrees of freedom and 100 tests)."""
    if n_tests < 1:
        raise ValueError(f"n_tests: must be >= 1, got {n_tests}")
    if not isinstance(dof, (int, np.integer)) or dof < 1:
        raise ValueError(f"dof: must be an integer >= 1, got {dof!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    return float(-stdtrit(int(dof), alpha / (2 * n_tests)))


@dataclass
class MeanEstimate:
    """A sample mean of an array-valued quantity with its standard error (same shape)."""

    mean: np.ndarray
    se: np.ndarray
    n: int

    def z(self, predicted) -> np.ndarray:
        """z-scores of ``predicted`` against this estimate (entries with SE = 0 and an exact
        match give 0; with SE = 0 and a mismatch give inf)."""
        diff = self.mean - np.asarray(predicted, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(self.se > 0, diff / np.where(self.se > 0, self.se, 1.0),
                         np.where(np.abs(diff) <= 1e-12 * (1 + np.abs(self.mean)), 0.0, np.inf))
        return z


class batch_mean:
    """Streaming mean and standard error over batches (Welford/Chan, float64).

    ``add(samples)`` takes an array whose first axis indexes i.i.d. samples.
    """

    def __init__(self):
        self.n = 0
        self._mean = None
        self._m2 = None

    def add(self, samples: np.ndarray) -> None:
        samples = np.asarray(samples, dtype=np.float64)
        k = samples.shape[0]
        if k == 0:
            return
        m = samples.mean(axis=0)
        m2 = ((samples - m) ** 2).sum(axis=0)
        if self.n == 0:
            self.n, self._mean, self._m2 = k, m, m2
            return
        n = self.n + k
        delta = m - self._mean
        self._mean = self._mean + delta * (k / n)
        self._m2 = self._m2 + m2 + delta**2 * (self.n * k / n)
        self.n = n

    def result(self) -> MeanEstimate:
        if self.n < 2:
            raise ValueError("samples: need at least 2 samples for a standard error")
        var = self._m2 / (self.n - 1)
        return MeanEstimate(self._mean, np.sqrt(var / self.n), self.n)


def max_abs_z(est: MeanEstimate, predicted) -> float:
    """Largest |z| over all entries."""
    return float(np.max(np.abs(est.z(predicted))))


def rel_frobenius(a, b) -> float:
    """||a - b||_F / ||b||_F."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def rel_max(a, b) -> float:
    """max |a - b| / max |b| (entrywise), with |b| floored at 1e-300."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def rel_err(a, b, scale: float = 0.0) -> float:
    """max |a - b| / max(max |b|, scale): the relative error of ``a`` against the reference
    ``b``, with an absolute floor ``scale`` (the size of the quantity where ``b`` happens to
    vanish), so that a reference of 0 is not compared with round-off relative to itself."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    denom = max(float(np.max(np.abs(b))) if b.size else 0.0, float(scale), 1e-300)
    return float(np.max(np.abs(a - b)) / denom) if a.size else 0.0


def chunks(total: int, chunk: int):
    """Batch sizes ``chunk, chunk, ..., rest`` summing to ``total`` (bounded memory per batch)."""
    while total > 0:
        yield min(chunk, total)
        total -= chunk


def evaluate(id: str, **params):
    """The numpy value of closed form ``id`` at ``params``: ``theory.get(id)(**params)``."""
    import theory

    return theory.get(id)(**params)
