"""Checks of ``linear_attention.merged`` (see also :mod:`verify.checks.linear_attention.symbolic`).

Contains
--------
``linear_attention.merged.large_context_limit``
    M*(N) tends to Lambda^{-1} with error decaying as 1/N (§3.4)
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting


@check("linear_attention.merged.large_context_limit", method="high_precision",
       covers=["linear_attention.merged.converged_matrix_limit", "linear_attention.merged.converged_matrix"],
       title="M*(N) tends to Lambda^{-1} with error decaying as 1/N (§3.4)",
       settings=[Setting("spectrum", "spectrum", quick=(0.4, 0.3, 0.2, 0.1), full=(0.4, 0.3, 0.2, 0.1),
                         doc="eigenvalues of Lambda (white, power:ALPHA or a list), randomly rotated"),
                 Setting("D", "int", quick=4, full=4, low=1, high=64,
                         doc="token dimension for a white or power spectrum (a list fixes D)")])
def large_context_limit(ctx):
    Lam_eigs = np.array(ctx.setting("spectrum").eigenvalues(ctx.setting("D")))
    q, _ = np.linalg.qr(ctx.rng.standard_normal((Lam_eigs.size, Lam_eigs.size)))
    Lam = (q * Lam_eigs) @ q.T
    limit = theory.get("linear_attention.merged.converged_matrix_limit")(Lambda=Lam)
    Ns = np.logspace(3, 9, 7)
    err = np.array([np.linalg.norm(theory.get("linear_attention.merged.converged_matrix")(Lambda=Lam, N=n) - limit)
                    for n in Ns])
    slope = float(np.polyfit(np.log(Ns), np.log(err), 1)[0])
    # negative control: a wrong limit, Lambda^{-2}, is far from M*(N) at the largest N
    wrong = np.linalg.inv(Lam @ Lam)
    wrong_err = np.linalg.norm(theory.get("linear_attention.merged.converged_matrix")(Lambda=Lam, N=1e9) - wrong)
    return Outcome(
        measured=slope, predicted=-1.0, discrepancy=abs(slope + 1), tolerance=0.01,
        criterion="log-log slope of ||M*(N) - Lambda^{-1}||_F over N = 1e3..1e9 equals -1 within 0.01 "
                  "(M* = Lambda^{-1} - (Lambda + tr(Lambda) I) Lambda^{-2}/N + O(N^-2))",
        controls=[Control("Lambda^{-2} as the limit (||M*(1e9) - Lambda^{-2}||_F)", wrong_err, 1e-3,
                          expected=float(np.linalg.norm(limit - wrong)))],  # the limits' closed-form gap
        details={"N": Ns.tolist(), "error": err.tolist()},
        figures={"limit": {"kind": "lines", "title": "M*(N) → Λ⁻¹ (Zhang et al. §3.4)",
                           "xlabel": "context length N", "ylabel": "‖M*(N) − Λ⁻¹‖_F",
                           "xscale": "log", "yscale": "log",
                           "series": [{"label": "closed form", "x": Ns.tolist(), "y": err.tolist(), "style": "o"},
                                      {"label": "∝ 1/N", "x": Ns.tolist(),
                                       "y": (err[0] * Ns[0] / Ns).tolist(), "style": "--"}]}},
    )
