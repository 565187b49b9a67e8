"""Checks of ``localization.softmax`` (see also :mod:`verify.checks.localization.u`).

Contains
--------
``localization.softmax.jacobian_at_origin``
    Softmax value and Jacobian at the origin vs central differences of the real softmax
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import evaluate as _cf


# =====================================================================================
# softmax Jacobian at the origin
# =====================================================================================
@check("localization.softmax.jacobian_at_origin",
       covers=["localization.softmax.value_at_origin", "localization.softmax.jacobian_diagonal",
               "localization.softmax.jacobian_offdiagonal"],
       method="high_precision",
       title="Softmax value and Jacobian at the origin vs central differences of the real softmax",
       settings=[Setting("T", "ints", quick=(2, 5, 40), full=(2, 3, 5, 10, 40, 200), low=2, high=10**5,
                         doc="sequence lengths T (softmax over T logits)")])
def jacobian_at_origin(ctx):
    import mpmath

    worst, per_T, sel_expected = 0.0, {}, 0.0
    lengths = ctx.setting("T")
    h = mpmath.mpf("1e-20")
    with mpmath.workdps(60):
        for T in lengths:
            def S(k, a, b):  # softmax coordinate 1 with omega_1 = a (if k == 0), omega_2 = b
                logits = [mpmath.mpf(0)] * T
                logits[0] += a
                if T > 1:
                    logits[1] += b
                return mpmath.exp(logits[0]) / mpmath.fsum(mpmath.exp(x) for x in logits)
            fd_diag = (S(0, h, 0) - S(0, -h, 0)) / (2 * h)
            fd_off = (S(0, 0, h) - S(0, 0, -h)) / (2 * h)
            ref = np.array([float(S(0, 0, 0)), float(fd_diag), float(fd_off)])
            got = np.array([_cf("localization.softmax.value_at_origin", T=T),
                            _cf("localization.softmax.jacobian_diagonal", T=T),
                            _cf("localization.softmax.jacobian_offdiagonal", T=T)])
            err = float(np.max(np.abs(got - ref) / np.abs(ref)))
            per_T[T] = err
            worst = max(worst, err)
            # the 'selector' heuristic gamma^i = e^i/T (no centring): diagonal 1/T, off-diagonal 0
            selector = float(np.max(np.abs(np.array([1 / T, 1 / T, 0.0]) - ref) / np.abs(ref)))
            # expected: the same relative gap against the registered forms (1 from the off-diagonal)
            sel_expected = max(sel_expected, float(np.max(np.abs(np.array([1 / T, 1 / T, 0.0]) - got)
                                                          / np.abs(got))))
    T = lengths[-1]
    return Outcome(
        measured=per_T, predicted="S(0)_i = 1/T, dS_i/domega_i = 1/T - 1/T^2, dS_i/domega_a = -1/T^2",
        discrepancy=worst, tolerance=1e-12,
        criterion="max relative error of the registered values vs central differences (h = 1e-20) of the "
                  "softmax at 60 digits; the difference error is O(h^2), so 1e-12 is float64 round-off",
        controls=[Control(f"selector heuristic gamma^i = e^i/T (off-diagonal 0, T = {T})", selector, 1e-12,
                          expected=sel_expected)],
    )
