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
from verify import Control, Outcome, check
from verify.stats import batch_mean, rel_frobenius, z_threshold
from verify.stats import evaluate as _cf
from verify.tasks.in_context_regression import (
    CHUNK,
    random_covariance,
    sample_task,
)

from .merged_monte_carlo import EIGENVALUES, N_SMALL, _schedule


def _max_abs_z(mean, se, predicted) -> float:
    """Largest |(mean - predicted) / se| (se > 0 everywhere here)."""
    return float(np.max(np.abs((np.asarray(mean) - np.asarray(predicted)) / np.asarray(se))))


# -- (a) the moments -------------------------------------------------------------------
_MOMENT_KEYS = ("lambda_hat", "lambda_hat_sq", "beta_beta", "yq_z", "zz", "yq_sq")


@check("linear_attention.data.mc_moments",
       covers=["linear_attention.data.lambda_hat_mean", "linear_attention.data.lambda_hat_sq",
               "linear_attention.data.beta_beta", "linear_attention.data.yq_z",
               "linear_attention.data.zz", "linear_attention.data.yq_sq",
               "linear_attention.data.fourth_moment", "linear_attention.data.lambda_hat_sq_eq30_line2"],
       decides=["linear_attention.data.lambda_hat_sq_eq30_line2"],
       method="monte_carlo",
       title="Monte Carlo of the in-context moments E[Lhat], E[Lhat^2], E[beta beta^T], "
             "E[y_q z], E[z z^T], E[y_q^2] and E[x x^T A x x^T]")
def mc_moments(ctx):
    rng = ctx.rng
    D, N = len(EIGENVALUES), N_SMALL
    Lam = random_covariance(rng, EIGENVALUES)
    A_rand = rng.standard_normal((D, D))
    # the 'A taken symmetric' control tests the antisymmetric part of A through Lambda K Lambda; a
    # Gaussian A alone can make it small (expected z 7.5 at one of 200 seeds), so A gets an extra
    # antisymmetric part coupling Lambda's two leading eigen-directions, with the sign of A's own
    # (no cancellation): the expected z is then >= 137 over the same 200 seeds
    _, Q = np.linalg.eigh(Lam)
    Q = Q[:, ::-1]
    Aq = Q.T @ A_rand @ Q
    K0 = np.zeros((D, D))
    K0[0, 1], K0[1, 0] = 1.0, -1.0
    A_rand = A_rand + (1.0 if Aq[0, 1] >= Aq[1, 0] else -1.0) * (Q @ K0 @ Q.T)
    total = ctx.pick(quick=500_000, full=20_000_000)
    marks = [10**3, 3 * 10**3, 10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6, 3 * 10**6, 10**7]

    pred = {
        "lambda_hat": _cf("linear_attention.data.lambda_hat_mean", Lambda=Lam, N=N),
        "lambda_hat_sq": _cf("linear_attention.data.lambda_hat_sq", Lambda=Lam, N=N),
        "beta_beta": _cf("linear_attention.data.beta_beta", Lambda=Lam, N=N),
        "yq_z": _cf("linear_attention.data.yq_z", Lambda=Lam),
        "zz": _cf("linear_attention.data.zz", Lambda=Lam, N=N),
        "yq_sq": np.array([_cf("linear_attention.data.yq_sq", Lambda=Lam)]),
        "fourth_moment": _cf("linear_attention.data.fourth_moment", Lambda=Lam, A=A_rand),
    }
    sizes = {k: int(np.size(pred[k])) for k in _MOMENT_KEYS}
    offsets = np.cumsum([0, *(sizes[k] for k in _MOMENT_KEYS)])

    seq = batch_mean()  # one row per sequence: every per-sequence moment side by side
    tok = batch_mean()  # one row per context token: x x^T A x x^T
    curve_n, curve_err = [], []
    zz_norm = np.linalg.norm(pred["zz"])
    for k in ctx.iterate(_schedule(total, CHUNK, marks), "moments"):
        task = sample_task(rng, Lam, N, int(k))
        B = task.batch
        Lh, b, z = task.lambda_hat, task.beta, task.z
        row = np.concatenate([
            Lh.reshape(B, -1),
            (Lh @ Lh).reshape(B, -1),
            (b[:, :, None] * b[:, None, :]).reshape(B, -1),
            task.y_q[:, None] * z,
            (z[:, :, None] * z[:, None, :]).reshape(B, -1),
            task.y_q[:, None] ** 2,
        ], axis=1)
        seq.add(row)
        x = task.x.reshape(-1, D)
        quad = np.einsum("ti,ij,tj->t", x, A_rand, x)
        tok.add((quad[:, None, None] * x[:, :, None] * x[:, None, :]).reshape(-1, D * D))
        if seq.n in marks or seq.n == total:
            est = seq.result()
            zz_hat = est.mean[offsets[4]:offsets[5]].reshape(D * D, D * D)
            curve_n.append(seq.n)
            curve_err.append(rel_frobenius(zz_hat, pred["zz"]))

    est_seq, est_tok = seq.result(), tok.result()
    mean, se = {}, {}
    for i, key in enumerate(_MOMENT_KEYS):
        sl = slice(offsets[i], offsets[i + 1])
        mean[key] = est_seq.mean[sl].reshape(np.shape(pred[key]))
        se[key] = est_seq.se[sl].reshape(np.shape(pred[key]))
    mean["fourth_moment"] = est_tok.mean.reshape(D, D)
    se["fourth_moment"] = est_tok.se.reshape(D, D)

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
    controls = [
        Control("E[z z^T] with the swapped Kronecker order E[Lhat^2] (x) Lambda",
                _max_abs_z(mean["zz"], se["zz"], swapped), z_crit,
                expected=_max_abs_z(pred["zz"], se["zz"], swapped)),
        Control("E[Lhat^2] from eq. 30 line 2 as printed",
                _max_abs_z(mean["lambda_hat_sq"], se["lambda_hat_sq"], eq30_val), z_crit,
                expected=_max_abs_z(pred["lambda_hat_sq"], se["lambda_hat_sq"], eq30_val)),
        Control("E[beta beta^T] without its 1/N term (Lambda^2)",
                _max_abs_z(mean["beta_beta"], se["beta_beta"], Lam @ Lam), z_crit,
                expected=_max_abs_z(pred["beta_beta"], se["beta_beta"], Lam @ Lam)),
        Control("E[x x^T A x x^T] with A taken symmetric (2 Lam A Lam + tr(A Lam) Lam)",
                _max_abs_z(mean["fourth_moment"], se["fourth_moment"], wrong_fourth), z_crit,
                expected=_max_abs_z(pred["fourth_moment"], se["fourth_moment"], wrong_fourth)),
    ]

    guide_c = np.sqrt(np.sum(se["zz"] ** 2) * est_seq.n) / zz_norm  # E||err||_F ~ c / sqrt(n)
    figure = {
        "kind": "lines",
        "title": f"Monte Carlo error of E[z z^T] (D={D}, N={N}, eigenvalues {EIGENVALUES})",
        "xlabel": "sequences n",
        "ylabel": "relative Frobenius error",
        "xscale": "log", "yscale": "log",
        "series": [
            {"label": "MC estimate vs Lambda (x) E[Lhat^2]", "x": curve_n, "y": curve_err,
             "style": "o"},
            {"label": "sqrt(sum of variances / n) / ||E[z z^T]||  (n^-1/2 guide)",
             "x": curve_n, "y": [float(guide_c / np.sqrt(n)) for n in curve_n],
             "style": "--"},
        ],
    }
    return Outcome(
        measured={k: np.asarray(mean[k]).tolist() for k in ("lambda_hat_sq", "yq_z", "yq_sq")},
        predicted={k: np.asarray(pred[k]).tolist() for k in ("lambda_hat_sq", "yq_z", "yq_sq")},
        discrepancy=disc, tolerance=z_crit,
        criterion=(f"max |z| over all {n_entries} compared entries of the seven moments "
                   f"< z_threshold({n_entries}) (Bonferroni, family-wise false alarm 1e-6)"),
        controls=controls,
        details={
            "sequences": est_seq.n, "tokens_for_fourth_moment": est_tok.n,
            "D": D, "N": N, "eigenvalues": list(EIGENVALUES),
            "max_abs_z": per_z,
            "relative_frobenius_error": {k: rel_frobenius(mean[k], pred[k]) for k in pred},
            "note": "a row-major vec of E[y_q z] is not a usable control: E[y_q beta x_q^T] = "
                    "Lambda^2 is symmetric, so both vec orders agree. The vec convention is "
                    "tested on E[z z^T]: a row-major z = beta (x) x_q = K z (K the commutation "
                    "matrix) has E[z z^T] = E[Lhat^2] (x) Lambda, the swapped-order control",
        },
        figures={
            "zz_error_vs_samples": figure,
            "zz_matrices": {
                "kind": "heatmaps",
                "title": f"E[z z^T] ({D * D} x {D * D}): Monte Carlo, eq. 44 and the swapped order",
                "panels": [
                    {"label": f"Monte Carlo (n = {est_seq.n})", "matrix": mean["zz"].tolist()},
                    {"label": "Lambda (x) E[Lhat^2] (eq. 44)", "matrix": pred["zz"].tolist()},
                    {"label": "E[Lhat^2] (x) Lambda (control)", "matrix": swapped.tolist()},
                ],
            },
        },
    )
