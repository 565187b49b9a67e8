"""Checks of ``localization.bounds`` (see also :mod:`verify.checks.localization.gradient`).

Contains
--------
``localization.bounds.norm_bounds``
    Eq. 7 (valid versions) and eq. 10 (valid chain) on random draws and W_QK = Sigma = I
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting
from verify.tasks.qk_spectra import qk_draws


@check("localization.bounds.norm_bounds", aliases=["localization.gradient.norm_bounds"],
       covers=["localization.bounds.spectral_lower", "localization.bounds.frobenius_lower",
               "localization.bounds.frobenius_upper"],
       decides=["localization.bounds.spectral_lower"], method="monte_carlo",
       title="Eq. 7 (valid versions) and eq. 10 (valid chain) on random draws and W_QK = Sigma = I",
       settings=[Setting("samples", "int", quick=2000, full=20000, low=1, high=10**7,
                         doc="random (d, Sigma, W_QK) draws")])
def norm_bounds(ctx):
    rng = ctx.rng
    n = ctx.setting("samples")
    lo2, loF, up, printed = (theory.get(f"localization.bounds.{k}") for k in
                             ("spectral_lower", "frobenius_lower", "frobenius_upper", "spectral_lower"))
    cases = list(qk_draws(rng, n))
    d_cx = 16
    cases.append((d_cx, np.eye(d_cx), np.eye(d_cx)))           # counterexample to the printed bound
    ratios, printed_ratios = [], []
    for d, Sigma, W_QK in cases:
        ev = np.linalg.eigvalsh(Sigma)
        trW = float(np.trace(W_QK @ Sigma))
        trW2 = float(np.trace(W_QK @ Sigma @ W_QK @ Sigma))
        n2, nF, n1 = np.linalg.norm(W_QK, 2), np.linalg.norm(W_QK), np.abs(W_QK).sum()
        ratios += [lo2(trW=trW, d=d, sigma_max=ev[-1]) / n2,
                   loF(trW=trW, d=d, sigma_max=ev[-1]) / nF,
                   nF / n1,
                   nF / up(trW2=trW2, sigma_min=ev[0])]
        printed_ratios.append(lo2(printed=True, trW=trW, d=d, sigma_max=ev[-1]) / n2)
    tol = 1 + 1e-12
    worst = float(max(ratios))
    return Outcome(
        measured=worst, predicted="<= 1", discrepancy=worst, tolerance=tol,
        criterion=(f"max over {len(cases)} cases ({n} random draws, d = 2..16, anisotropic Sigma, plus W_QK = Sigma = "
                   f"I_{d_cx}) of bound/norm for |tr W|/(d ||Sigma||_2) <= ||W_QK||_2, |tr W|/(sqrt(d) ||Sigma||_2) "
                   "<= ||W_QK||_F <= ||W_QK||_1 and ||W_QK||_F / (||Sigma^-1||_2 sqrt(tr W^2)); <= 1 up to "
                   "round-off 1e-12 (the identity case attains 1)"),
        controls=[Control("printed eq. 7 first inequality |tr W|/(sqrt(d) ||Sigma||_2) <= ||W_QK||_2, max ratio",
                          float(max(printed_ratios)), tol,
                          # at W_QK = Sigma = I_d: |tr W|/(sqrt(d) ||Sigma||_2) = sqrt(d), ||W_QK||_2 = 1
                          expected=float(np.sqrt(d_cx)))],
        details={"cases": len(cases), "counterexample_printed_ratio": float(printed_ratios[-1]),
                 "printed_violations_random": int(np.sum(np.array(printed_ratios[:-1]) > tol)),
                 "ratio_at_identity_spectral": float(ratios[-4])},
    )
