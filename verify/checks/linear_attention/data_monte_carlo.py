"""Checks of ``linear_attention.data`` (see also :mod:`verify.checks.linear_attention.merged_monte_carlo`).

Contains
--------
``linear_attention.data.mc_moments``
    Monte Carlo of the in-context moments E[Lhat], E[Lhat^2], E[beta beta^T], E[y_q z], E[z z^T], E[y_q^2] and E[x x^T
    A x x^T]
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Outcome, check
from verify.outcomes import z_control
from verify.settings import Setting
from verify.stats import rel_frobenius, z_threshold
from verify.tasks.feature_least_squares import EIGENVALUES, N_SMALL
from verify.tasks.in_context_moments import moment_figures, moment_predictions, probe_matrix, sample_moments
from verify.tasks.in_context_regression import (
    random_covariance,
)


def _max_abs_z(mean, se, predicted) -> float:
    """Largest |(mean - predicted) / se| (se > 0 everywhere here)."""
    return float(np.max(np.abs((np.asarray(mean) - np.asarray(predicted)) / np.asarray(se))))


# -- (a) the moments -------------------------------------------------------------------


@check("linear_attention.data.mc_moments",
       covers=["linear_attention.data.lambda_hat_mean", "linear_attention.data.lambda_hat_sq",
               "linear_attention.data.beta_beta", "linear_attention.data.yq_z",
               "linear_attention.data.zz", "linear_attention.data.yq_sq",
               "linear_attention.data.fourth_moment", "linear_attention.data.lambda_hat_sq_eq30_line2"],
       decides=["linear_attention.data.lambda_hat_sq_eq30_line2"],
       method="monte_carlo",
       title="Monte Carlo of the in-context moments E[Lhat], E[Lhat^2], E[beta beta^T], "
             "E[y_q z], E[z z^T], E[y_q^2] and E[x x^T A x x^T]",
       settings=[Setting("N", "int", quick=N_SMALL, full=N_SMALL, low=2, high=32,
                         doc="context length N (>= 2: at N = 1 the printed eq. 30 line 2 is exact, its control "
                             "vacuous; <= 32: the per-token fourth moment is held in memory)"),
                 Setting("spectrum", "spectrum", quick=EIGENVALUES, full=EIGENVALUES,
                         doc="eigenvalues of Lambda (white, power:ALPHA or a list), randomly rotated"),
                 Setting("D", "int", quick=len(EIGENVALUES), full=len(EIGENVALUES), low=1, high=6,
                         doc="token dimension for a white or power spectrum (a list fixes D; <= 6: "
                             "E[z z^T] has D^4 entries per sequence)"),
                 # quick: the controls' expected max |z| >= 5.6 x the threshold at seeds 0-19 (8.9 x at 5e5)
                 Setting("samples", "int", quick=200_000, full=20_000_000, low=10_000, high=10**9,
                         doc="sampled sequences")])
def mc_moments(ctx):
    """Sample means of the in-context moments (eqs. 27-31, 43-44, App. C.1) against the closed forms, max |z|
    over every entry (Bonferroni); controls: the swapped Kronecker order of E[z z^T], eq. 30 line 2
    as printed, E[beta beta^T] without its 1/N term, and the fourth moment with A taken symmetric.

    Quick profile (2e5 sequences), seeds 0-19: 20/20 pass, worst discrepancy/tolerance 0.745
    (seed 13); every control rejected at every seed, expected max |z| at least 5.6, 683, 11.9 and
    38 times the threshold (measured at least 5.6, 683, 11.7, 38).
    """
    rng = ctx.rng
    spec, N = ctx.setting("spectrum"), ctx.setting("N")
    eigenvalues = spec.eigenvalues(ctx.setting("D"))
    D = len(eigenvalues)
    Lam = random_covariance(rng, eigenvalues)
    A_rand = probe_matrix(rng, Lam)
    total = ctx.setting("samples")

    pred = moment_predictions(Lam, N, A_rand)   # eqs. 27-31, 43-44
    est_seq, est_tok, mean, se, curve_n, curve_err = sample_moments(rng, Lam, N, A_rand, total, pred,
                                                                    ctx.iterate)
    per_z = {key: _max_abs_z(mean[key], se[key], pred[key]) for key in pred}
    n_entries = sum(int(np.size(pred[key])) for key in pred)
    z_crit = z_threshold(n_entries)
    disc = max(per_z.values())

    # Negative controls, each on the statistic of the quantity it concerns.
    eq30_val = theory.get("linear_attention.data.lambda_hat_sq_eq30_line2")(Lambda=Lam, N=N, printed=True)
    swapped = np.kron(pred["lambda_hat_sq"], Lam)
    # 2 Lam A Lam + tr(A Lam) Lam: the fourth moment as if A were symmetric.
    wrong_fourth = pred["fourth_moment"] + Lam @ (A_rand - A_rand.T) @ Lam
    # expected z of each control: max |wrong - true| / SE over the entries it concerns
    wrong = {"E[z z^T] with the swapped Kronecker order E[Lhat^2] (x) Lambda": ("zz", swapped),
             "E[Lhat^2] from eq. 30 line 2 as printed": ("lambda_hat_sq", eq30_val),
             "E[beta beta^T] without its 1/N term (Lambda^2)": ("beta_beta", Lam @ Lam),
             "E[x x^T A x x^T] with A taken symmetric (2 Lam A Lam + tr(A Lam) Lam)": ("fourth_moment", wrong_fourth)}
    controls = [z_control(name, (mean[k], se[k]), w, pred[k], tolerance=z_crit) for name, (k, w) in wrong.items()]
    return Outcome(
        measured={k: np.asarray(mean[k]).tolist() for k in ("lambda_hat_sq", "yq_z", "yq_sq")},
        predicted={k: np.asarray(pred[k]).tolist() for k in ("lambda_hat_sq", "yq_z", "yq_sq")},
        discrepancy=disc, tolerance=z_crit,
        criterion=(f"max |z| over all {n_entries} compared entries of the seven moments "
                   f"< z_threshold({n_entries}) (Bonferroni, family-wise false alarm 1e-6)"),
        controls=controls,
        details={
            "sequences": est_seq.n, "tokens_for_fourth_moment": est_tok.n,
            "D": D, "N": N, "eigenvalues": list(eigenvalues),
            "max_abs_z": per_z,
            "relative_frobenius_error": {k: rel_frobenius(mean[k], pred[k]) for k in pred},
            "note": "a row-major vec of E[y_q z] is not a usable control: E[y_q beta x_q^T] = "
                    "Lambda^2 is symmetric, so both vec orders agree. The vec convention is "
                    "tested on E[z z^T]: a row-major z = beta (x) x_q = K z (K the commutation "
                    "matrix) has E[z z^T] = E[Lhat^2] (x) Lambda, the swapped-order control",
        },
        figures=moment_figures(D, N, tuple(eigenvalues), est_seq, mean, se, pred, swapped, curve_n, curve_err),
    )
