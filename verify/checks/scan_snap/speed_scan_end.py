"""Checks of ``scan_snap.speed`` (see also :mod:`verify.checks.scan_snap.attention_eq88`).

Contains
--------
``scan_snap.speed.eq52_scan_end``
    Eq. 52: t_A > ln M/eta_Y holds for 5 <= M <= 1e4 and fails for M = 2, 3, 4
"""

from __future__ import annotations

import mpmath
import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import evaluate as _cf


# =====================================================================================
# Eq. 52
# =====================================================================================
@check("scan_snap.speed.eq52_scan_end", aliases=["scan_snap.errata.eq52_scan_end"],
       covers=["scan_snap.speed.scan_end", "scan_snap.speed.scan_time"],
       method="exact_flow",
       title="Eq. 52: t_A > ln M/eta_Y holds for 5 <= M <= 1e4 and fails for M = 2, 3, 4",
       refutes={"Tian et al. 2023, Lemma 9, eq. 52 (App. D.3)":
                "The claim t_A = (M - 2 + (M - 1) ln(M - 1))/(M eta_Y) > ln M/eta_Y is false for "
                "M = 2, 3, 4 (at M = 4, eta_Y = 1: t_A = 1.324 < ln 4 = 1.386); it holds for every M >= 5 "
                "checked (5..1e4), so stage 1 of Lemma 9 holds on t <= K ln M/eta_Y only for M >= 5."},
       settings=[Setting("M_max", "int", quick=10_000, full=100_000, low=20, high=10**7,
                         doc="largest vocabulary size M tested (M = 2..M_max)")])
def eq52_scan_end(ctx):
    """Sign of t_A - ln M/eta_Y (eta_Y = K = 1; both sides scale as K/eta_Y) for M = 2..1e4.

    t_A is the registered record (scan_snap.speed.scan_end) on M = 2..1e4, each sign confirmed
    at 50 digits in mpmath, with the relative margins reported against float64 round-off.
    """
    Ms = np.arange(2, ctx.setting("M_max") + 1)
    tA = np.array([_cf("scan_snap.speed.scan_end", M=int(m), K=1, eta_Y=1.0) for m in Ms])
    lnM = np.log(Ms)
    holds = tA > lnM
    margin = (tA - lnM) / lnM
    # the float64 signs agree with 50-digit arithmetic wherever the margin is small
    with mpmath.workdps(50):
        exact = {int(m): mpmath.mpf(m - 2 + (m - 1) * mpmath.log(m - 1)) / m - mpmath.log(m) for m in range(2, 21)}
    assert all((exact[m] > 0) == bool(holds[m - 2]) for m in exact)
    mismatch_corrected = int(np.sum(holds != (Ms >= 5)))      # "holds iff M >= 5"
    mismatch_printed = int(np.sum(~holds))                      # "holds for every M"
    return Outcome(
        measured={"M where t_A <= ln M": Ms[~holds].tolist(),
                  "t_A, ln M at M = 4": [float(tA[2]), float(lnM[2])],
                  "min relative margin (t_A - ln M)/ln M over M >= 5": float(margin[3:].min()),
                  "max relative margin over M <= 4": float(margin[:3].max())},
        predicted="t_A > ln M/eta_Y exactly for M >= 5",
        discrepancy=mismatch_corrected, tolerance=0,
        criterion=f"count of M in 2..{Ms[-1]} where [t_A > ln M] differs from [M >= 5] must be 0: a sign test, "
                  "exact because every relative margin (>= 0.06 at M = 5, <= -0.04 at M = 4) is ~1e13 times "
                  "float64 round-off, and M <= 20 is confirmed at 50 digits",
        controls=[Control("eq. 52 as printed: t_A > ln M/eta_Y for every M (violations counted)",
                          mismatch_printed, 0, expected=float(np.sum(Ms < 5)))],   # M = 2, 3, 4
        details={"exact (50 digits) t_A - ln M at M = 2..6": {m: float(exact[m]) for m in range(2, 7)}},
    )
