"""Least squares of the merged model's features with sandwich standard errors (Zhang, Singh,
Latham, Saxe 2025, eqs. 9b, 11, 24-26, 46), and the setting of its Monte Carlo checks.

The regression of ``y_q`` on ``z = vec(beta x_q^T)`` has heteroscedastic residuals, so the
sampling covariance of the fit is the sandwich ``A^{-1} Cov(g) A^{-1} / n`` of the estimating
function ``g_i = b_i - A_i m0`` (``A_i = z_i z_i^T``, ``b_i = y_i z_i``), evaluated under each
hypothesised ``m0`` (:class:`ScoreLeastSquares`).
"""

from __future__ import annotations

import numpy as np

from verify.stats import batch_mean
from verify.tasks.in_context_regression import CHUNK, sample_sequences, sample_task

__all__ = ["EIGENVALUES", "N_SMALL", "vec", "unvec", "schedule", "ScoreLeastSquares", "feature_regression",
           "next_token_regression"]


#: Spectrum of the non-white covariance used by these checks (random eigenvectors).
EIGENVALUES = (1.0, 0.5, 0.2)


#: Small context length, so that the 1/N terms are large.
N_SMALL = 5


def vec(M: np.ndarray) -> np.ndarray:
    """Column-major vec."""
    return np.asarray(M).reshape(-1, order="F")


def unvec(v: np.ndarray, D: int) -> np.ndarray:
    return np.asarray(v).reshape(D, D, order="F")


def schedule(total: int, chunk: int, marks) -> list[int]:
    """Chunk sizes whose cumulative sums hit every mark below ``total``, then ``total``."""
    cuts = sorted({int(m) for m in marks if 0 < m < total}
                  | set(range(chunk, total, chunk)) | {total})
    return list(np.diff([0, *cuts]))


class ScoreLeastSquares:
    """Streaming least squares ``m_hat = A_hat^{-1} b_hat`` from per-unit ``A_i``, ``b_i``,
    with the sandwich covariance evaluated at each hypothesised coefficient vector."""

    def __init__(self, hypotheses: dict[str, np.ndarray]):
        self.hyp = {k: np.asarray(v, dtype=float) for k, v in hypotheses.items()}
        self.n = 0
        self.sum_A = 0.0
        self.sum_b = 0.0
        self.sum_g = {k: 0.0 for k in self.hyp}
        self.sum_gg = {k: 0.0 for k in self.hyp}

    def add(self, A: np.ndarray, b: np.ndarray) -> None:
        """``A``: (B, K, K), ``b``: (B, K)."""
        self.n += b.shape[0]
        self.sum_A = self.sum_A + A.sum(axis=0)
        self.sum_b = self.sum_b + b.sum(axis=0)
        for k, m in self.hyp.items():
            g = b - A @ m
            self.sum_g[k] = self.sum_g[k] + g.sum(axis=0)
            self.sum_gg[k] = self.sum_gg[k] + g.T @ g

    def fit(self) -> np.ndarray:
        return np.linalg.solve(self.sum_A / self.n, self.sum_b / self.n)

    def se(self, name: str) -> np.ndarray:
        """Sandwich standard errors of ``m_hat`` under the hypothesis ``m_name``."""
        n = self.n
        A_inv = np.linalg.inv(self.sum_A / n)
        g_bar = self.sum_g[name] / n
        cov_g = (self.sum_gg[name] - n * np.outer(g_bar, g_bar)) / (n - 1)
        return np.sqrt(np.diag(A_inv @ cov_g @ A_inv.T / n))

    def z(self, name: str) -> np.ndarray:
        """z-scores of ``m_hat - m_name`` with the sandwich covariance under ``m_name``."""
        diff = np.linalg.solve(self.sum_A / self.n, self.sum_g[name] / self.n)  # = m_hat - m_name
        return diff / self.se(name)

    def expected_z(self, true: str, wrong: str) -> float:
        """Expected max |z| of the hypothesis ``wrong`` when ``true`` holds:
        max |m_wrong - m_true| / SE, with the SEs the statistic ``z(wrong)`` divides by (the
        sandwich under ``wrong``, inflated by the misfit's residuals)."""
        return float(np.max(np.abs(self.hyp[wrong] - self.hyp[true]) / self.se(wrong)))


def feature_regression(rng, Lam, N: int, total: int, M_star, M_rand, M_inf, iterate=None):
    """Sequences of the in-context regression task (§2.1): per sequence the squared errors of
    ``beta^T M x_q`` at ``M_star`` and ``M_rand``, and the least squares of ``y_q`` on ``z`` (eq. 46)
    under the hypotheses ``M_star`` ("eq11") and ``M_inf`` ("inverse"). Returns ``(loss estimate,
    ScoreLeastSquares)``."""
    sizes = schedule(total, CHUNK, [])
    losses = batch_mean()
    ls = ScoreLeastSquares({"eq11": vec(M_star), "inverse": vec(M_inf)})
    for k in (iterate(sizes, "global min") if iterate else sizes):
        task = sample_task(rng, Lam, N, int(k))
        z = task.z
        losses.add(np.stack([(task.y_q - task.predict(M_star)) ** 2,
                             (task.y_q - task.predict(M_rand)) ** 2], axis=1))
        ls.add(z[:, :, None] * z[:, None, :], task.y_q[:, None] * z)
    return losses.result(), ls


def next_token_regression(rng, Lam, N_max: int, total: int, chunk: int, M_ntp, M_fixed, iterate=None):
    """Next-token sequences (App. A.1) of lengths ``1..N_max``: per sequence the position-averaged
    losses (eq. 23) of the zero predictor and of ``M_ntp``, and the least squares of the targets on
    ``z`` over all positions, clustered by sequence, under the hypotheses ``M_ntp`` ("eq25") and
    ``M_fixed`` ("fixed_N"). Returns ``(loss estimate, ScoreLeastSquares)``."""
    sizes = schedule(total, chunk, [])
    losses = batch_mean()  # one row per sequence: position-averaged losses (eq. 23)
    ls = ScoreLeastSquares({"eq25": vec(M_ntp), "fixed_N": vec(M_fixed)})
    for k in (iterate(sizes, "next-token") if iterate else sizes):
        seqs = sample_sequences(rng, Lam, N_max, int(k))
        t = seqs.targets
        z = seqs.z  # (B, N_max, D^2)
        losses.add(np.stack([(t**2).mean(axis=1),
                             ((t - seqs.predict(M_ntp)) ** 2).mean(axis=1)], axis=1))
        ls.add(np.einsum("bpi,bpj->bij", z, z) / N_max, np.einsum("bp,bpi->bi", t, z) / N_max)
    return losses.result(), ls
