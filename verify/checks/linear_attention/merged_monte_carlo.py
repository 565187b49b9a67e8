"""Monte Carlo checks of the in-context regression moments, the merged model's global
minimum and the next-token plateaus (Zhang, Singh, Latham, Saxe 2025).

Each check samples the data model of §2.1 (:mod:`verify.tasks.in_context_regression`),
compares sample means with the registered closed forms through z-scores, and rejects when
the largest |z| exceeds the family-wise threshold :func:`verify.stats.z_threshold` over all
compared entries (false-alarm rate :data:`verify.stats.FALSE_ALARM` per check). Every
check carries negative controls, wrong forms that the same statistic must reject.

Contains
--------
``linear_attention.data.mc_moments``        E[Lhat], E[Lhat^2], E[beta beta^T], E[y_q z],
                                            E[z z^T], E[y_q^2], E[x x^T A x x^T]
                                            (eqs. 27-31, 43-44)
``linear_attention.merged.mc_global_min``   loss of the eq.-11 predictor, L(M) for a random M,
                                            and the duality: least squares of y_q on z gives
                                            vec(M*) (eqs. 9b, 11, 46)
``linear_attention.ntp.mc_plateaus``        next-token loss (eq. 23) at the zero predictor and
                                            at eq. 25; least squares over all positions
                                            (eqs. 24-26)

Least-squares standard errors
-----------------------------
The regression of ``y_q`` on ``z`` has heteroscedastic residuals (``y_q - z^T m`` is cubic
in Gaussians and its variance depends on ``z``), so the textbook ``sigma^2 (Z^T Z)^{-1}``
is not the sampling covariance of the fit. The checks use the sandwich (robust) covariance
instead, in its score form: for a hypothesised ``m0``, the estimating function
``g_i = b_i - A_i m0`` (``A_i = z_i z_i^T``, ``b_i = y_i z_i``) has mean zero under the
hypothesis, ``m_hat - m0 = A_hat^{-1} mean(g)`` exactly, and
``Cov(m_hat) = A^{-1} Cov(g) A^{-1} / n``. For the next-token loss the unit is the sequence
(its ``N_max`` positions are dependent), so ``A_i`` and ``b_i`` are averages over the
positions of one sequence (cluster-robust).
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.stats import batch_mean, rel_frobenius, z_threshold
from verify.stats import evaluate as _cf
from verify.tasks.in_context_regression import (
    CHUNK,
    random_covariance,
    sample_task,
)

#: Spectrum of the non-white covariance used by these checks (random eigenvectors).
EIGENVALUES = (1.0, 0.5, 0.2)


#: Small context length, so that the 1/N terms are large.
N_SMALL = 5




def _vec(M: np.ndarray) -> np.ndarray:
    """Column-major vec."""
    return np.asarray(M).reshape(-1, order="F")


def _unvec(v: np.ndarray, D: int) -> np.ndarray:
    return np.asarray(v).reshape(D, D, order="F")


def _schedule(total: int, chunk: int, marks) -> list[int]:
    """Chunk sizes whose cumulative sums hit every mark below ``total``, then ``total``."""
    cuts = sorted({int(m) for m in marks if 0 < m < total}
                  | set(range(chunk, total, chunk)) | {total})
    return list(np.diff([0, *cuts]))


# -- least squares with sandwich standard errors -------------------------------------
class _ScoreLeastSquares:
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


# -- (b) global minimum and duality ----------------------------------------------------
@check("linear_attention.merged.mc_global_min",
       covers=["linear_attention.merged.converged_matrix",
               "linear_attention.merged.global_min_loss", "linear_attention.merged.loss"],
       method="monte_carlo",
       title="Global minimum of the merged model: loss of the eq.-11 predictor, L(M) at a "
             "random M, and least squares of y_q on z recovering vec(M*)")
def mc_global_min(ctx):
    rng = ctx.rng
    D, N = len(EIGENVALUES), N_SMALL
    Lam = random_covariance(rng, EIGENVALUES)
    # scale 2: the 1/N term of L(M) (quadratic in M) is then >= 45 SE at every one of 150 seeds
    # tried (at scale 0.5 it fell to 12 SE)
    M_rand = 2.0 * rng.standard_normal((D, D))
    total = ctx.pick(quick=1_000_000, full=20_000_000)

    M_star = _cf("linear_attention.merged.converged_matrix", Lambda=Lam, N=N)
    M_inf = _cf("linear_attention.merged.converged_matrix_limit", Lambda=Lam)
    L_star = _cf("linear_attention.merged.global_min_loss", Lambda=Lam, N=N)
    L_rand = _cf("linear_attention.merged.loss", Lambda=Lam, N=N, M=M_rand)
    L_inf_pred = _cf("linear_attention.merged.loss", Lambda=Lam, N=N, M=M_inf)
    # Wrong form: L(M) with E[Lhat^2] replaced by its N -> infinity value Lambda^2.
    L_rand_no_1_over_N = float(np.trace(Lam) - 2 * np.trace(Lam @ M_rand @ Lam)
                               + np.trace(M_rand @ Lam @ M_rand.T @ Lam @ Lam))

    losses = batch_mean()
    ls = _ScoreLeastSquares({"eq11": _vec(M_star), "inverse": _vec(M_inf)})
    for k in ctx.iterate(_schedule(total, CHUNK, []), "global min"):
        task = sample_task(rng, Lam, N, int(k))
        z = task.z
        losses.add(np.stack([(task.y_q - task.predict(M_star)) ** 2,
                             (task.y_q - task.predict(M_rand)) ** 2], axis=1))
        ls.add(z[:, :, None] * z[:, None, :], task.y_q[:, None] * z)

    est = losses.result()
    z_star = float(est.z([L_star, L_rand])[0])
    z_rand = float(est.z([L_star, L_rand])[1])
    z_ls = ls.z("eq11")
    M_hat = _unvec(ls.fit(), D)
    z_crit = z_threshold(2 + D * D)
    disc = max(abs(z_star), abs(z_rand), float(np.max(np.abs(z_ls))))
    controls = [
        Control("L(Lambda^-1) (the N -> inf predictor) as the minimum loss at finite N",
                abs(float((est.mean[0] - L_inf_pred) / est.se[0])), z_crit,
                expected=abs(float((L_star - L_inf_pred) / est.se[0]))),
        Control("least squares of y_q on z against vec(Lambda^-1)",
                float(np.max(np.abs(ls.z("inverse")))), z_crit, expected=ls.expected_z("eq11", "inverse")),
        Control("L(M) at the random M without the 1/N term (E[Lhat^2] -> Lambda^2)",
                abs(float((est.mean[1] - L_rand_no_1_over_N) / est.se[1])), z_crit,
                expected=abs(float((L_rand - L_rand_no_1_over_N) / est.se[1]))),
    ]
    return Outcome(
        measured={"loss_eq11": float(est.mean[0]), "loss_random_M": float(est.mean[1]),
                  "M_least_squares": M_hat.tolist()},
        predicted={"global_min_loss": L_star, "loss_random_M": L_rand,
                   "converged_matrix": np.asarray(M_star).tolist()},
        discrepancy=disc, tolerance=z_crit,
        criterion=(f"max |z| over the two losses and the {D * D} least-squares coefficients "
                   f"(sandwich SEs; residuals are heteroscedastic) < z_threshold({2 + D * D})"),
        controls=controls,
        details={
            "sequences": est.n, "D": D, "N": N, "eigenvalues": list(EIGENVALUES),
            "z_loss_eq11": z_star, "z_loss_random_M": z_rand,
            "max_abs_z_least_squares": float(np.max(np.abs(z_ls))),
            "se_loss_eq11": float(est.se[0]), "se_loss_random_M": float(est.se[1]),
            "relative_error_least_squares": rel_frobenius(M_hat, M_star),
            "loss_of_inverse_predictor_closed_form": L_inf_pred,
            "loss_random_M_without_1_over_N": L_rand_no_1_over_N,
        },
    )
