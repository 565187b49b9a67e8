"""Checks of ``localization.eigen`` (see also :mod:`verify.checks.localization.gradient`).

Contains
--------
``localization.eigen.spectrum``
    Eigenspectrum variance (eq. 8), bound (eq. 5), xi, eta, tr W^2 vs eigenvalues of W
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting
from verify.tasks.qk_spectra import qk_draws


@check("localization.eigen.spectrum", aliases=["localization.gradient.eigenspectrum"],
       covers=["localization.eigen.variance", "localization.eigen.trace_bound", "localization.eigen.xi",
               "localization.eigen.eta", "localization.eigen.scale"],
       decides=["localization.eigen.scale"], method="monte_carlo",
       title="Eigenspectrum variance (eq. 8), bound (eq. 5), xi, eta, tr W^2 vs eigenvalues of W",
       settings=[Setting("samples", "int", quick=2000, full=20000, low=1, high=10**7,
                         doc="random (d, Sigma, W_QK) draws")])
def eigenspectrum(ctx):
    rng = ctx.rng
    n = ctx.setting("samples")
    names = ("variance", "trace_bound", "xi", "eta", "scale")
    records = {k: theory.get(f"localization.eigen.{k}") for k in names}
    # the emitted functions (positional: the parameters, then D), called directly: 9 registry calls per draw
    # (validation included) cost 0.4 s of the 1 s of a quick run. The first draw goes through the registry
    # (__call__ validates every parameter and the domain), the rest through the same functions, which give the
    # same values: the registry's numpy path is emitted function + float()
    fn = {k: r.function() for k, r in records.items()}
    fn_printed = records["scale"].printed_function()
    direct = {"variance": lambda d, trW, trW2: float(fn["variance"](d, trW, trW2, None)),
              "trace_bound": lambda d, trW2: float(fn["trace_bound"](d, trW2, None)),
              "xi": lambda trW, trW2: float(fn["xi"](trW, trW2, None)),
              "eta": lambda trW2, temperature: float(fn["eta"](trW2, temperature, None))}
    errs, ctrl_scale, ctrl_eta, slack, tight = [], [], [], [], []
    gap_scale, gap_eta = [], []  # expected control statistics: wrong vs registered closed form
    for k, (d, Sigma, W_QK) in enumerate(qk_draws(rng, n)):
        cf = records if k == 0 else direct
        w = np.linalg.eigvals(W_QK @ Sigma).real          # real: W ~ Sigma^1/2 W_QK Sigma^1/2
        trW, trW2 = w.sum(), (w**2).sum()
        lam = np.sqrt(d)
        if k == 0:
            scale, printed = cf["scale"](Sigma=Sigma, W_QK=W_QK), cf["scale"](printed=True, Sigma=Sigma, W_QK=W_QK)
        else:
            scale, printed = float(fn["scale"](Sigma, W_QK, d)), float(fn_printed(Sigma, W_QK, d))
        errs.append(abs(scale - trW2) / trW2)
        var = d**2 * np.var(w)
        errs.append(abs(cf["variance"](d=d, trW=trW, trW2=trW2) - var) / var)
        xi, eta = cf["xi"](trW=trW, trW2=trW2), cf["eta"](trW2=trW2, temperature=lam)
        errs.append(abs(xi * eta * lam - trW) / np.sqrt(trW2))
        slack.append(abs(trW) / cf["trace_bound"](d=d, trW2=trW2))   # <= 1 (eq. 5); also |xi| <= sqrt(d)
        slack.append(abs(xi) / np.sqrt(d))
        # equality of eq. 5 at equal eigenvalues of W: W_QK = c Sigma^-1
        c = rng.normal()
        w_eq = np.linalg.eigvals(c * np.linalg.inv(Sigma) @ Sigma).real
        tight.append(abs(1 - abs(w_eq.sum()) / cf["trace_bound"](d=d, trW2=(w_eq**2).sum())))
        ctrl_scale.append(abs(printed - trW2) / trW2)
        ctrl_eta.append(abs(xi * np.sqrt(trW2) / lam**2 * lam - trW) / np.sqrt(trW2))
        gap_scale.append(abs(printed - scale) / scale)
        gap_eta.append(abs(xi * np.sqrt(trW2) / lam**2 - xi * eta) * lam / np.sqrt(trW2))
    tol = 1e-9
    disc = max(max(errs), max(tight), max(0.0, max(slack) - 1.0))
    return Outcome(
        measured=float(max(errs)), predicted=0.0, discrepancy=float(disc), tolerance=tol,
        criterion=(f"over {n} draws (d = 2..16, Sigma = R^T R/d + 1e-3 I, symmetric W_QK with N(m, s^2) spectra): "
                   "relative errors of tr W^2, d^2 V[w_i] (eq. 8) and xi eta lambda = tr W against the "
                   "eigenvalues of W, the excess of |tr W| / sqrt(d tr W^2) and |xi| / sqrt(d) over 1 (eq. 5) "
                   f"and the gap to equality at W_QK = c Sigma^-1, all <= {tol:g} (eigenvalue round-off "
                   "of a non-symmetric eig, amplified by cancellation in d tr W^2 - tr(W)^2)"),
        controls=[Control("printed eq. 10 equality tr W^2 = ||W||_F^2, median error", float(np.median(ctrl_scale)), tol,
                          expected=float(np.median(gap_scale))),
                  Control("eta with lambda^2 (Fig. 2 caption), median error of xi eta lambda = tr W",
                          float(np.median(ctrl_eta)), tol, expected=float(np.median(gap_eta)))],
        details={"draws": n, "max_rel_identity": float(max(errs)), "max_ratio_eq5": float(max(slack)),
                 "max_gap_at_equality": float(max(tight)),
                 "printed_eq10_violations": int(np.sum(np.array(ctrl_scale) > tol)),
                 "printed_eq10_rel_min_max": [float(min(ctrl_scale)), float(max(ctrl_scale))]},
    )
