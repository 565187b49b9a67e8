"""Checks of ``scan_snap.decoder`` (see also :mod:`verify.checks.scan_snap.attention_flow`).

Contains
--------
``scan_snap.decoder.lemma5_flow``
    Lemma 5: iterated single-class decoder = (M-1) h*(s) zeta_n, alpha_n(s) of eq. 32
"""

from __future__ import annotations

import numpy as np

from theory.scan_snap.h import trajectory
from verify import Control, Outcome, check
from verify.models.scan_snap import decoder_run

from .attention_flow import _get


# -- Lemma 5 ----------------------------------------------------------------------------------------
@check("scan_snap.decoder.lemma5_flow", aliases=["scan_snap.dynamics.lemma5_decoder"], method="exact_flow",
       covers=["scan_snap.decoder.label_logit", "scan_snap.decoder.alpha_correct", "scan_snap.decoder.residual",
               "scan_snap.h.discrete"],
       title="Lemma 5: iterated single-class decoder = (M-1) h*(s) zeta_n, alpha_n(s) of eq. 32")
def lemma5_decoder(ctx):
    steps = ctx.pick(quick=2000, full=20000)
    cases = [(30, 0.5), (1000, 0.5), (34, 2.0)]
    rows, worst_w, worst_a, worst_rec = [], 0.0, 0.0, 0.0
    ctrl_cont, ctrl_shift = np.inf, np.inf
    e_cont, e_shift = np.inf, np.inf  # expected: the wrong closed forms against the right ones
    for M, eta in cases:
        L = 12
        f = np.abs(ctx.rng.standard_normal(L))
        f /= np.linalg.norm(f)
        label = int(ctx.rng.integers(M))
        w, alpha = decoder_run(M, eta, steps, f, label)
        hs = trajectory(steps, M, eta)
        pattern = -np.ones(M)
        pattern[label] = M - 1  # (M - 1) zeta_n = M e_n - 1
        pred_w = hs[:, None] * pattern[None, :]
        ew = np.max(np.abs(w - pred_w)) / np.max(np.abs(pred_w))
        a_lab = 1.0 / (1.0 + (M - 1) * np.exp(-M * hs[:-1]))  # eq. 32 with h*(s-1)
        a_oth = 1.0 / ((M - 1) + np.exp(M * hs[:-1]))
        pred_a = np.repeat(a_oth[:, None], M, axis=1)
        pred_a[:, label] = a_lab
        ea = np.max(np.abs(alpha - pred_a)) / np.max(np.abs(pred_a))
        # the registered records at log-spaced steps (evaluated through scan_snap.h.discrete)
        ss = np.unique(np.geomspace(1, steps, 8).astype(int))
        rec = []
        for s in ss:
            kw = dict(s=int(s), M=M, eta_Y=eta)
            rec += [abs(_get("decoder.label_logit")(**kw) - w[s, label]) / abs(w[s, label]),
                    abs(_get("decoder.alpha_correct")(**kw) - alpha[s - 1, label]) / alpha[s - 1, label],
                    abs(_get("decoder.residual")(**kw) - (1 - alpha[s - 1, label])) / (1 - alpha[s - 1, label])]
        er = max(rec)
        # controls: the continuous h(s) in place of h*(s); alpha from h*(s) instead of h*(s-1)
        hc = _get("h.continuous")(t=np.arange(steps + 1, dtype=float), M=M, eta_Y=eta)
        ctrl_cont = min(ctrl_cont, np.max(np.abs(w - hc[:, None] * pattern[None, :])) / np.max(np.abs(pred_w)))
        a_shift = 1.0 / (1.0 + (M - 1) * np.exp(-M * hs[1:]))
        ctrl_shift = min(ctrl_shift, np.max(np.abs(alpha[:, label] - a_shift)) / np.max(a_lab))
        e_cont = min(e_cont, np.max(np.abs((hs - hc)[:, None] * pattern[None, :])) / np.max(np.abs(pred_w)))
        e_shift = min(e_shift, np.max(np.abs(a_lab - a_shift)) / np.max(a_lab))
        worst_w, worst_a, worst_rec = max(worst_w, ew), max(worst_a, ea), max(worst_rec, er)
        rows.append({"M": M, "eta_Y": eta, "label": label, "rel_err_w": ew, "rel_err_alpha": ea,
                     "rel_err_records": er, "h*(S)": hs[-1]})
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
