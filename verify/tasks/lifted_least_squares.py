"""The single-layer linear transformer of Ahn, Cheng, Daneshmand, Sra 2023 (eq. 8, Theorem 1)
as a linear model: every single-layer ``(P, Q)`` predicts a linear function of the lifted
features ``G_kl x_q[j]`` (``G = (1/n) sum_i z_i z_i^T``, eq. 15), so least squares on them with
sandwich standard errors (:class:`SandwichLS`) tests optimality over all of ``(P, Q)``.
"""

from __future__ import annotations

import numpy as np

from verify.models.linear_transformer import predict, sparse_layers

__all__ = ["predict_sparse", "best_scalar", "lifted_features", "gamma_coefficients", "SandwichLS"]


def predict_sparse(Z0: np.ndarray, A: np.ndarray) -> np.ndarray:
    """One sparse layer (eq. 8): P = E_{d+1,d+1}, Q = -[[A, 0], [0, 0]]; TF_1 = -[Z_1]_{d+1,n+1}."""
    P, Q = sparse_layers([A])
    return predict(Z0, P, Q)


def best_scalar(loss, Sigma, n, B) -> float:
    """argmin_g f(g B) from the exact loss, which is quadratic in g: f(g) = f0 + b g + a g^2."""
    f0, f1, fm = (loss(Sigma=Sigma, n=n, A=g * B) for g in (0.0, 1.0, -1.0))
    a, b = (f1 + fm) / 2 - f0, (f1 - fm) / 2
    return -b / (2 * a)


def lifted_features(pr) -> np.ndarray:
    """Features G_kl x_q[j] (k <= l), G = (1/n) sum_i z_i z_i^T over the context tokens (eq. 15)."""
    Z = pr.tokens()[:, :, :-1]
    Gm = np.einsum("bki,bli->bkl", Z, Z) / pr.n
    k, l = np.triu_indices(Gm.shape[1])
    g = Gm[:, k, l]
    return (g[:, :, None] * pr.query[:, None, :]).reshape(g.shape[0], -1)


def gamma_coefficients(Gamma: np.ndarray) -> np.ndarray:
    """Coefficient vector of the predictor h^T Gamma x_q in the lifted features (h_j = G_{j,d+1})."""
    d = Gamma.shape[0]
    k, l = np.triu_indices(d + 1)
    coef = np.zeros((k.size, d))
    for row, (kk, ll) in enumerate(zip(k, l)):
        if ll == d and kk < d:
            coef[row] = Gamma[kk]
    return coef.reshape(-1)


class SandwichLS:
    """Streaming least squares with sandwich (heteroscedasticity-robust) z-scores of the fit
    against hypothesised coefficient vectors: with g_i = x_i (y_i - x_i^T m0), the fit satisfies
    m_hat - m0 = H^{-1} mean(g) exactly (H = mean x x^T), and Cov(m_hat) = H^{-1} Cov(g) H^{-1} / N."""

    def __init__(self, hypotheses: dict):
        self.hyp = hypotheses
        self.N = 0
        self.H = 0.0
        self.b = 0.0
        self.g = {k: 0.0 for k in hypotheses}
        self.gg = {k: 0.0 for k in hypotheses}

    def add(self, X, y):
        self.N += len(y)
        self.H = self.H + X.T @ X
        self.b = self.b + X.T @ y
        for k, m in self.hyp.items():
            Xr = X * (y - X @ m)[:, None]
            self.g[k] = self.g[k] + Xr.sum(axis=0)
            self.gg[k] = self.gg[k] + Xr.T @ Xr

    def fit(self):
        return np.linalg.solve(self.H, self.b)

    def se(self, name):
        """Sandwich standard errors of the fit under the hypothesis ``name``."""
        N = self.N
        Hinv = np.linalg.inv(self.H / N)
        gbar = self.g[name] / N
        cov_g = (self.gg[name] - N * np.outer(gbar, gbar)) / (N - 1)
        return np.sqrt(np.diag(Hinv @ cov_g @ Hinv / N))

    def z(self, name):
        """z-scores of the fit against the hypothesis ``name``."""
        N = self.N
        Hinv = np.linalg.inv(self.H / N)
        gbar = self.g[name] / N
        cov_g = (self.gg[name] - N * np.outer(gbar, gbar)) / (N - 1)
        cov = Hinv @ cov_g @ Hinv / N
        return (Hinv @ gbar) / np.sqrt(np.diag(cov))
