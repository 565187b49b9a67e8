"""Checks of ``localization.entropy`` (see also :mod:`verify.checks.localization.gradient`).

Contains
--------
``localization.entropy.bound``
    Eq. 9 (Bao, Hataya, Karakida 2024): corrected large-T entropy bound <= ln(T+1), decreasing,
    -> Zhai et al. Thm 3.1. Its sizes are named settings (``python -m verify settings
    localization.entropy.bound``): the lengths ``T`` (the gap is judged at the largest) and the
    number of ``nu`` grid points.
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting


# =====================================================================================
@check("localization.entropy.bound", aliases=["localization.gradient.entropy_bound"],
       covers=["localization.entropy.zhai_bound", "localization.entropy.zhai_theorem"],
       decides=["localization.entropy.zhai_bound"], method="high_precision",
       title="Eq. 9: corrected large-T entropy bound <= ln(T+1), decreasing, -> Zhai et al. Thm 3.1",
       settings=[Setting("T", "ints", quick=(8, 64, 512, 4096), full=(8, 64, 512, 4096), low=2, high=10**9,
                         doc="sequence lengths T (the gap to Thm 3.1, O(1/T), is judged at the largest)"),
                 Setting("nu", "int", quick=400, full=4000, low=2, high=10**6,
                         doc="log-spaced grid points nu in [1e-3, 100]")])
def entropy_bound(ctx):
    import sympy as sp

    from theory.localization import sym

    big, fin = theory.get("localization.entropy.zhai_bound"), theory.get("localization.entropy.zhai_theorem")
    nu = np.logspace(-3, 2, ctx.setting("nu"))
    Ts = tuple(ctx.setting("T"))
    T_max = max(Ts)
    # the large-T form starts at ln(1 + T) at nu = 0 (Thm 3.1 at ln T): compare with ln(T + 1)
    excess = max(float(np.max(big(T=T, nu=nu) - np.log1p(T))) for T in Ts + (10**6,))
    excess_fin = max(float(np.max(fin(T=T, nu=nu) - np.log(T))) for T in Ts)
    excess_printed = max(float(np.max(big(printed=True, T=T, nu=nu) - np.log1p(T))) for T in Ts)
    slope = sp.lambdify((sym("T"), sym("nu")), sp.diff(big.expr, sym("nu")), "numpy")
    max_slope = max(float(np.max(slope(T, nu))) for T in Ts)
    gaps = {T: float(np.max(np.abs(big(T=T, nu=nu) - fin(T=T, nu=nu)))) for T in Ts}
    gaps_printed = {T: float(np.max(np.abs(big(printed=True, T=T, nu=nu) - fin(T=T, nu=nu)))) for T in Ts}
    # the gap is O(1/T): T * gap stays bounded; the pass statistic is the gap at the largest T (4096)
    tol = 0.01
    passed = excess <= 1e-12 and max_slope <= 0 and gaps[T_max] <= tol
    return Outcome(
        measured=gaps[T_max], predicted=0.0, discrepancy=gaps[T_max], tolerance=tol, passed=passed,
        criterion=(f"corrected eq. 9 vs Zhai et al. Thm 3.1 at T = {T_max}, max over nu in [1e-3, 100] "
                   f"({len(nu)} points) of the absolute gap <= {tol} (the large-T replacements err by O(nu^2/T)); "
                   "also required: the bound <= ln(T + 1) (its value at nu = 0; Thm 3.1 itself is <= ln T) for "
                   f"T in {{{', '.join(map(str, Ts))}, 1e6}} and d/dnu <= 0 on the grid"),
        # deterministic: the expected statistics are the closed-form gaps themselves
        controls=[Control("printed eq. 9 (exp(-nu/2)): max excess over ln(T + 1)", excess_printed, 1e-12,
                          expected=excess_printed),
                  Control(f"printed eq. 9: gap to Zhai's bound at T = {T_max}", gaps_printed[T_max], tol,
                          expected=gaps_printed[T_max])],
        details={"max_excess_over_lnT": excess, "max_excess_over_lnT_zhai_finite": excess_fin,
                 "max_slope_dnu": max_slope, "gap_vs_T": gaps, "T_times_gap": {T: T * g for T, g in gaps.items()},
                 "printed_at_T64_nu4": big(printed=True, T=64, nu=4.0), "lnT_64": float(np.log(64)),
                 "corrected_at_T64_nu4": big(T=64, nu=4.0), "zhai_at_T64_nu4": fin(T=64, nu=4.0)},
    )
