"""Checks of ``preconditioned_gd.least_squares`` (Ahn, Cheng, Daneshmand, Sra 2023, App. D: the OLS
baseline of Fig. 6).

Contains
--------
``preconditioned_gd.least_squares.mc_loss``
    Minimum-norm least squares on the whitened covariates, run on sampled prompts: ``d - n`` below
    ``n = d``, zero from ``n = d`` on.
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.models.preconditioned_gd_baselines import OLS, mc_algorithm_loss
from verify.settings import Setting
from verify.stats import evaluate as _cf
from verify.stats import z_threshold
from verify.tasks.preconditioned_gd import EXPERIMENT_EIGENVALUES, distorted_covariance

#: Context lengths below d = 5 (loss d - n, z-tested) and from d on (loss 0: the data are noiseless).
SHORT, LONG = (1, 2, 4), (5, 20)
#: A mean squared error below this (times E y^2 = d) counts as zero: float64 round-off of the
#: least-squares solve is about 1e-25 here, the smallest nonzero loss of the family is 1 (n = d - 1).
ZERO = 1e-12

#: The raw-coordinate minimum-norm solution's loss E tr(Sigma^{-1} (I - Pi_X) Sigma (I - Pi_X)) at the
#: experiments' eigenvalues (1, 1, .25, .0625, 1), n = 2 and 4 (rotation-invariant): Monte Carlo
#: of 2e5 prompts (seed 11), 4.06 +- 0.02 and 2.36 +- 0.02 against d - n = 3 and 1 (the control's
#: expectation).
RAW_OLS = {2: 4.06, 4: 2.36}


@check("preconditioned_gd.least_squares.mc_loss", covers=[OLS], method="monte_carlo",
       title="Minimum-norm least squares in context (whitened): loss d - n for n < d, 0 for n >= d",
       settings=[Setting("samples", "int", quick=20_000, full=400_000, low=1000, high=10**9,
                         doc="sampled prompts per context length")])
def mc_loss(ctx):
    """Solve ``min ||v||`` subject to ``v^T u_i = y_i`` on the whitened covariates ``u_i = C^{-1}
    x_i`` (``Sigma = C C^T``; the authors' OLS, ``pinv``, here by batched solves of the min(n, d)-square
    normal equations, :func:`~verify.models.preconditioned_gd_baselines.min_norm_solution`, the same
    values to round-off), predict ``<C^{-1} x_q, v>``, and compare
    the mean squared query error with ``least_squares.loss`` = ``d - min(n, d)``: a z-test for ``n <
    d``; for ``n >= d`` the mean must be below ``1e-12 d`` (round-off is about 1e-25). Seeds 0-19
    (quick): all pass; worst |z| 2.67 against the threshold 5.23; the controls' |z| at least 19.7
    (off-by-one), 16.6 (raw coordinates, n = 2) and 23.9 (n = 4); the n >= d means at most 3e-24 (against
    5e-12). Seed 0 quick: about 0.3 s CPU (0.6 s with an SVD per prompt, ``pinv``: at seeds 0-19 the z
    within 4e-13 of the pinv runs', every verdict and the statistics above unchanged). Full (4e5 prompts
    per n), seeds 0-1: 2/2 pass, worst |z| 2.26; controls at least 105.6, 78.4, 118.3 (expected 105.6,
    77.6, 115.7), the same with pinv and with the solves; 3.7-3.9 s per seed (65-71 s with pinv, under load).

    Controls: the raw-coordinate minimum-norm solution (on the covariates as drawn), whose loss
    exceeds ``d - n`` when Sigma is not a multiple of I (:data:`RAW_OLS`), and the authors'
    off-by-one ``d - (n - 1)`` (their baselines fit ``n - 1`` examples).
    """
    total = ctx.setting("samples")
    d = len(EXPERIMENT_EIGENVALUES)
    Sigma = distorted_covariance(ctx.rng, EXPERIMENT_EIGENVALUES)
    z_crit = z_threshold(len(SHORT) + 3)
    rows, z, zero, controls = {}, [], [], []
    for n in SHORT + LONG:
        f = float(_cf(OLS, n=n, d=d))
        est = mc_algorithm_loss(ctx.rng, Sigma, n, total, "ols")
        rows[f"n={n}"] = {"predicted": f, "measured": float(est.mean), "se": float(est.se)}
        if n < d:
            z.append(float(est.z(f)))
            rows[f"n={n}"]["z"] = z[-1]
            f_off = float(_cf(OLS, n=n - 1, d=d)) if n > 1 else float(d)
            if n == 2:
                controls.append(Control("d - (n - 1) (the authors' off-by-one), n = 2: |z|",
                                        abs(float(est.z(f_off))), z_crit, expected=abs(f_off - f) / float(est.se)))
        else:
            zero.append(float(est.mean) / (ZERO * d))
        if n in RAW_OLS:
            raw = mc_algorithm_loss(ctx.rng, Sigma, n, total, "ols_raw")
            rows[f"n={n}"]["raw coordinates"] = [float(raw.mean), float(raw.se)]
            controls.append(Control(f"minimum norm in raw coordinates, n = {n}: |z| against d - n",
                                    abs(float(raw.z(f))), z_crit, expected=abs(RAW_OLS[n] - f) / float(raw.se)))
    disc = max(max(abs(x) for x in z) / z_crit, max(zero))
    return Outcome(
        measured={k: v["measured"] for k, v in rows.items()},
        predicted={k: v["predicted"] for k, v in rows.items()},
        discrepancy=disc, tolerance=1.0,
        criterion=(f"max of |z| / z_crit (z_crit = {z_crit:.2f}, family-wise 1e-6) over n = {SHORT} and of the "
                   f"mean squared error / ({ZERO:g} d) over n = {LONG} must be <= 1 ({total} prompts each; d = {d}, "
                   f"Sigma with eigenvalues {EXPERIMENT_EIGENVALUES}, random rotation)"),
        controls=controls,
        details={"cases": rows, "Sigma eigenvalues": np.linalg.eigvalsh(Sigma).tolist()},
    )
