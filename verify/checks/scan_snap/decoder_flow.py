"""Checks of ``scan_snap.decoder`` (see also :mod:`verify.checks.scan_snap.attention_flow`).

Contains
--------
``scan_snap.decoder.lemma5_flow``
    Lemma 5: iterated single-class decoder = (M-1) h*(s) zeta_n, alpha_n(s) of eq. 32
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.flows.scan_snap import lemma5_case
from verify.settings import Setting


def _get(name):
    return theory.get(f"scan_snap.{name}")


# -- Lemma 5 ----------------------------------------------------------------------------------------
@check("scan_snap.decoder.lemma5_flow", aliases=["scan_snap.dynamics.lemma5_decoder"], method="exact_flow",
       covers=["scan_snap.decoder.label_logit", "scan_snap.decoder.alpha_correct", "scan_snap.decoder.residual",
               "scan_snap.h.discrete"],
       title="Lemma 5: iterated single-class decoder = (M-1) h*(s) zeta_n, alpha_n(s) of eq. 32",
       settings=[Setting("steps", "int", quick=2000, full=20000, low=8, high=10**7,
                         doc="decoder steps s (round-off tolerance scales with them)")])
def lemma5_decoder(ctx):
    steps = ctx.setting("steps")
    cases = [(30, 0.5), (1000, 0.5), (34, 2.0)]
    rows, worst_w, worst_a, worst_rec = [], 0.0, 0.0, 0.0
    ctrl_cont, ctrl_shift = np.inf, np.inf
    e_cont, e_shift = np.inf, np.inf  # expected: the wrong closed forms against the right ones
    for M, eta in cases:
        c = lemma5_case(ctx.rng, M, eta, steps)
        ew, ea, er = c["rel_err_w"], c["rel_err_alpha"], c["rel_err_records"]
        ctrl_cont, ctrl_shift = min(ctrl_cont, c["control continuous"]), min(ctrl_shift, c["control shift"])
        e_cont, e_shift = min(e_cont, c["expected continuous"]), min(e_shift, c["expected shift"])
        worst_w, worst_a, worst_rec = max(worst_w, ew), max(worst_a, ea), max(worst_rec, er)
        rows.append({"M": M, "eta_Y": eta, "label": c["label"], "rel_err_w": ew, "rel_err_alpha": ea,
                     "rel_err_records": er, "h*(S)": c["h*(S)"]})
    disc = max(worst_w, worst_a, worst_rec)
    # round-off model: float64 sums of `steps` terms (~ steps * 2^-52 relative) times the
    # cancellation factor 1/(1 - alpha) <= 10 of the residual: 10 * steps * 2^-52
    tol = 10.0 * steps * 2.0**-52
    return Outcome(
        measured={"max_rel_err_w": worst_w, "max_rel_err_alpha": worst_a, "max_rel_err_records": worst_rec},
        predicted="w_n(s) = h*(s) (M e_n - 1); alpha_nn(s) = e^{M h*(s-1)}/((M-1) + e^{M h*(s-1)})",
        discrepancy=disc, tolerance=tol,
        criterion=f"max relative error over s <= {steps} and all M entries of w_n(s) and alpha_n(s) (and of "
                  f"the records label_logit/alpha_correct/residual at 8 steps) <= {tol:.2g}: both sides are float64 "
                  f"sums of {steps} terms of size eta_Y/M, so round-off is ~ s * 2^-52, and the residual 1 - alpha "
                  "adds a cancellation of at most a factor 1/(1 - alpha) ~ 10 here: tolerance 10 s 2^-52",
        controls=[Control("continuous h(s) (eq. 45) in place of h*(s)", float(ctrl_cont), tol, expected=float(e_cont)),
                  Control("alpha_n(s) from h*(s) instead of h*(s-1)", float(ctrl_shift), tol,
                          expected=float(e_shift))],
        details={"cases": rows, "steps": steps, "attention f": "random nonnegative unit vector (L = 12)"},
    )
