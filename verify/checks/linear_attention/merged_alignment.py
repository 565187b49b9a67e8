"""The merged model's weights on the plateau (Zhang, Singh, Latham, Saxe 2025, App. D.6.2, Fig. 9(ii)).

Contains
--------
``linear_attention.merged.flow_plateau_weights``
    Along the exact flow from the eq.-34 start, what each head's key-query block U_i gains on the plateau is
    proportional to G(0) = E[y_q beta x_q^T] = Lambda^2 (``linear_attention.merged.gradient`` at M = 0), not to
    Lambda or M*
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import evaluate as _cf

#: The plateau ends, for this check, when the loss has fallen this fraction of L(0) - L*.
PLATEAU_FRACTION = 0.01
#: Allowed 1 - |cos| between a head's gain on the plateau and G(0) (seeds 0-19: at most 1.1e-5 at the 1 % point:
#: G(M) departs from G(0) by O(M), and the deviation grows like the square of the fraction fallen).
ALIGN_TOL = 1e-4


def _cos(A, B) -> float:
    return float(np.sum(A * B) / (np.linalg.norm(A) * np.linalg.norm(B)))


@check("linear_attention.merged.flow_plateau_weights", covers=["linear_attention.merged.gradient",
                                                               "linear_attention.merged.converged_matrix"],
       method="exact_flow",
       title="Fig. 9(ii): on the plateau every head's U_i grows along G(0) = Lambda^2 (eq.-34 start, exact flow), "
             "not along Lambda or M*",
       settings=[Setting("spectrum", "spectrum", quick=(0.4, 0.3, 0.2, 0.1), full=(0.4, 0.3, 0.2, 0.1),
                         doc="eigenvalues of Lambda (Fig. 1), randomly rotated"),
                 Setting("D", "int", quick=4, full=4, low=2, high=16,
                         doc="token dimension for a white or power spectrum (a list fixes D)"),
                 Setting("N", "int", quick=31, full=31, low=1, high=10**4, doc="context length N"),
                 Setting("H", "int", quick=8, full=8, low=1, high=64, doc="heads H"),
                 Setting("w_init", "floats", quick=(1e-2, 1e-3), full=(1e-2, 1e-3, 1e-4), low=1e-6, high=0.1,
                         doc="scales of the eq.-34 start (one draw, rescaled)")])
def flow_plateau_weights(ctx):
    """App. D.6.2 / Fig. 9(ii): near ``M = 0`` the flow is ``tau dU_i/dt = v_i G(0)``, ``tau dv_i/dt =
    <U_i, G(0)>`` with ``G(0) = linear_attention.merged.gradient(M = 0) = Lambda^2``, so each head's key-query
    block gains a multiple of ``Lambda^2`` while the loss stays on its plateau. Measured along the exact flow
    (DOP853, rtol 1e-10) from one eq.-34 draw at each ``w_init``, at the time the loss has fallen
    :data:`PLATEAU_FRACTION` of ``L(0) - L*``: for every head, ``1 - |cos(U_i(t) - U_i(0), G(0))|`` at most
    :data:`ALIGN_TOL`. Reported: ``M`` at four plateau times (eq. 54) against ``M*`` (``converged_matrix``),
    still turning.

    Controls: the gains along ``Lambda`` (rather than ``Lambda^2``) and along ``M*`` (where the weights end up)
    must miss by more than the tolerance; their expected values are the same cosines with ``G(0)`` in place of
    the gains."""
    from verify.flows import merged as fm
    from verify.tasks.in_context_regression import random_covariance

    eig = np.array(ctx.setting("spectrum").eigenvalues(ctx.setting("D")))
    D, N, H = len(eig), ctx.setting("N"), ctx.setting("H")
    Lam = random_covariance(ctx.rng, eig)
    G0 = np.asarray(_cf("linear_attention.merged.gradient", Lambda=Lam, N=N, M=np.zeros((D, D))), float)
    M_star = np.asarray(_cf("linear_attention.merged.converged_matrix", Lambda=Lam, N=N), float)
    L_star = float(_cf("linear_attention.merged.global_min_loss", Lambda=Lam, N=N))
    v1, U1 = fm.init_merged(ctx.rng, H, D, 1.0)
    rows, worst, ctrl_lam, ctrl_star, end_err = {}, 0.0, np.inf, np.inf, 0.0
    for w in sorted(ctx.setting("w_init"), reverse=True):
        # eq. 54's plateau time sets the horizon (the drop follows it within a few plateau times)
        T = 4.0 * float(_cf("linear_attention.merged.plateau_time", Lambda=Lam, tau=1.0, w_init=w))
        res = fm.integrate(Lam, N, w * v1, w * U1, t_eval=np.linspace(0.0, T, 20001))
        L0 = float(res.loss[0])
        fallen = res.loss <= L0 - PLATEAU_FRACTION * (L0 - L_star)
        if not fallen.any():
            raise ValueError(f"w_init: at {w:g} the loss did not leave its plateau by t = {T:g}")
        i = int(np.argmax(fallen))
        gain = res.U[i] - res.U[0]
        dev = [1.0 - abs(_cos(gain[h], G0)) for h in range(H)]
        worst = max(worst, max(dev))
        ctrl_lam = min(ctrl_lam, min(1.0 - abs(_cos(gain[h], Lam)) for h in range(H)))
        ctrl_star = min(ctrl_star, min(1.0 - abs(_cos(gain[h], M_star)) for h in range(H)))
        end_err = max(end_err, float(np.linalg.norm(res.M[-1] - M_star) / np.linalg.norm(M_star)))
        rows[f"{w:g}"] = {"t at the plateau's end": float(res.t[i]), "1 - |cos(gain_i, G(0))| per head": dev,
                          "||U(0)|| / ||gain||": float(np.linalg.norm(res.U[0]) / np.linalg.norm(gain)),
                          "||M(T) - M*|| / ||M*||": float(np.linalg.norm(res.M[-1] - M_star) / np.linalg.norm(M_star))}
    return Outcome(
        measured={"max 1 - |cos(U_i gain, G(0))|": worst},
        predicted={"gain direction": "G(0) = Lambda^2"},
        discrepancy=worst, tolerance=ALIGN_TOL,
        criterion=(f"max over heads and w_init of 1 - |cos(U_i(t_p) - U_i(0), G(0))| <= {ALIGN_TOL:g}, t_p the time "
                   f"the loss has fallen {PLATEAU_FRACTION:g} of L(0) - L*; D = {D}, N = {N}, H = {H}"),
        controls=[Control("gains along Lambda (not Lambda^2): min 1 - |cos|", ctrl_lam, ALIGN_TOL,
                          expected=1.0 - abs(_cos(G0, Lam))),
                  Control("gains along M* (where M ends): min 1 - |cos|", ctrl_star, ALIGN_TOL,
                          expected=1.0 - abs(_cos(G0, M_star)))],
        details={"per w_init": rows, "||M - M*|| / ||M*|| at four plateau times (report)": end_err, "eigenvalues": eig},
    )
