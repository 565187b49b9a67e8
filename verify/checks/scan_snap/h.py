"""Checks of the h recursion, its continuous counterpart and the speed coefficient (Tian et al. 2023, App. D).

Contains
--------
``scan_snap.h.lemma7_gap``
    The recursion h*(s) (eq. 33) iterated exactly against the continuous h(s) (eq. 45) on a grid
    of (M, eta_Y), s up to 1e5 (quick) or 1e6 (full): Lemma 7(a)'s 0 <= h* - h <= 2 eta_Y/M.
    Controls: the bound 0.1 eta_Y/M; a recursion with (M - 1) replaced by M (h* below h).
``scan_snap.h.regimes``
    Linear (h ~ eta_Y t/M) and logarithmic (h ~ ln(M eta_Y t)/M) growth of h against their
    derived error terms. Controls: eta_Y t/(M - 1); ln(eta_Y t)/M (the missing M of Theorem 1(b)).
``scan_snap.h.identities``
    t(h(t)) = t; the Lemma 9 identities (53, 54, 56, 57) at h = h(t); the Lemma 8 roots and eqs.
    50/51 fixed points; the crossing times t_A (eq. 52) and t_B against h(t) at those times; all
    to machine precision. Controls: eq. 53 with (M - 1) -> M; eq. 52 without the -2.
``scan_snap.speed.gamma_integral``
    The exact integral (eqs. 125-128) against scipy quadrature of gamma, and the peak of gamma
    (derived: u* = 1 + W_0((M-1)/e)) against a numerical maximisation. Control: the integral
    without the factor K.
``scan_snap.speed.asymptotics``
    gamma against its two stages (Lemma 9, Theorem 1(b) printed: decides the erratum), the time
    scales t_0' < t_A < t_B < t_0 with t_B/t_0 -> (M-1)/M, Lemma 9's stage inequalities on their
    ranges, and Corollary 1's step count (discrete recursion vs the sharp count and the paper's bound).
"""

from __future__ import annotations

import math

import numpy as np

from theory.scan_snap.h import trajectory
from verify import Control, Outcome, check
from verify.flows.scan_snap import h_numpy, regime_errors
from verify.settings import Setting
from verify.stats import evaluate as _cf

EPS = np.finfo(float).eps




# =====================================================================================
# Lemma 7
# =====================================================================================
@check("scan_snap.h.lemma7_gap",
       covers=["scan_snap.h.discrete", "scan_snap.h.continuous", "scan_snap.h.gap_bound"],
       method="exact_flow",
       title="h*(s) iterated exactly vs h(s): Lemma 7's 0 <= h* - h <= 2 eta_Y/M",
       settings=[Setting("S", "int", quick=100_000, full=1_000_000, low=1000, high=10**8,
                         doc="steps S of the exact recursion h*(s), s = 0..S")])
def lemma7_gap(ctx):
    Ms = (10, 100, 1000, 10_000)
    etas = (0.01, 0.1, 0.5, 1.0, 5.0)
    S = ctx.setting("S")
    worst_ratio, worst_low, ctrl_ratio, ctrl_low, details = 0.0, 0.0, 0.0, 0.0, {}
    for M in Ms:
        for eta in etas:
            hs = trajectory(S, M, eta)
            h = h_numpy(np.arange(S + 1, dtype=float), M, eta)
            gap = hs - h
            bound = _cf("scan_snap.h.gap_bound", M=M, eta_Y=eta)
            # round-off allowance for the lower side: the S-term float64 sum and the Newton solve
            allow = (S + 4) * EPS * hs[-1]
            ratio = float(gap.max() / bound)
            low = float(max(0.0, -gap.min()) / allow)
            worst_ratio, worst_low = max(worst_ratio, ratio), max(worst_low, low)
            ctrl_ratio = max(ctrl_ratio, float(gap.max() / (0.1 * eta / M)))
            s_end = np.array([S // 100, S // 10, S])
            details[f"M={M}, eta_Y={eta}"] = {
                "max_gap_over_bound": ratio, "argmax_s": int(gap.argmax()),
                "gap_M_s_over_ln_s (Lemma 7b: -> 1/2)": (gap[s_end] * M * s_end / np.log(s_end)).tolist()}
            assert hs[5] == _cf("scan_snap.h.discrete", s=5, M=M, eta_Y=eta)
    # control 2: the recursion with (M - 1) -> M lies below h: the lower side of Lemma 7 fails
    for M in Ms:
        for eta in etas:
            h_wrong, x = [0.0], 0.0
            for _ in range(2000):
                x += eta / (M + math.exp(M * x))
                h_wrong.append(x)
            h_wrong = np.array(h_wrong)
            gap = h_wrong - h_numpy(np.arange(len(h_wrong), dtype=float), M, eta)
            allow = (len(h_wrong) + 4) * EPS * h_wrong[-1]
            ctrl_low = max(ctrl_low, float(max(0.0, -gap.min()) / allow))
    disc = max(worst_ratio, worst_low)
    return Outcome(
        measured={"max (h* - h)/(2 eta_Y/M)": worst_ratio, "max (h - h*)/round-off": worst_low},
        predicted="0 <= h* - h <= 2 eta_Y/M (Lemma 7a)",
        discrepancy=disc, tolerance=1.0,
        criterion=f"over M in {Ms}, eta_Y in {etas}, s = 0..{S}: max (h* - h)/(2 eta_Y/M) <= 1 (the lemma's "
                  "bound, exact), and h - h* never exceeds the float64 round-off of the S-term sum "
                  "((S + 4) eps h*(S)), so both sides are tested at their stated values",
        # both control statistics compare closed forms only (h* of eq. 33 iterated exactly, h of eq. 45):
        # they are deterministic and are their own expected values
        controls=[Control("bound 0.1 eta_Y/M (twenty times tighter)", ctrl_ratio, 1.0, expected=ctrl_ratio),
                  Control("recursion with (M - 1) -> M: h* - h >= 0 (in round-off units)", ctrl_low, 1.0,
                          expected=ctrl_low)],
        details=details,
    )


# =====================================================================================
# Regimes
# =====================================================================================
@check("scan_snap.h.regimes",
       covers=["scan_snap.h.linear", "scan_snap.h.logarithmic", "scan_snap.h.continuous",
               "scan_snap.h.discrete", "scan_snap.speed.scan_end", "scan_snap.speed.crossing_time"],
       method="exact_flow",
       title="Linear and logarithmic growth of h(t) and h*(s) against their error terms",
       settings=[Setting("M", "ints", quick=(10, 100, 1000, 10_000), full=(10, 100, 1000, 10_000), low=3,
                         high=10**7, doc="vocabulary sizes M"),
                 Setting("eta_Y", "floats", quick=(0.1, 1.0, 5.0), full=(0.1, 1.0, 5.0), low=1e-3, high=100.0,
                         doc="decoder learning rates eta_Y")])
def regimes(ctx):
    Ms = ctx.setting("M")
    etas = ctx.setting("eta_Y")
    lin, log, lin_ctrl, log_ctrl, details = 0.0, 0.0, 0.0, 0.0, {}
    e_lin, e_log = 0.0, 0.0  # expected control statistics: wrong form vs the registered form
    for M in Ms:
        for eta in etas:
            r, details[f"M={M}, eta_Y={eta}"] = regime_errors(M, eta)
            lin, lin_ctrl, e_lin = max(lin, r["lin"]), max(lin_ctrl, r["lin_ctrl"]), max(e_lin, r["e_lin"])
            log, log_ctrl, e_log = max(log, r["log"]), max(log_ctrl, r["log_ctrl"]), max(e_log, r["e_log"])
    disc = max(lin, log)
    return Outcome(
        measured={"linear: max |h/(eta t/M) - 1|/(u/M)": lin,
                  "log: max |h/(ln(M eta t)/M) - 1|/error term": log},
        predicted="both <= 1",
        discrepancy=disc, tolerance=1.0,
        criterion="h(t) from eq. 45 against the linear form at t = 1e-5..1e-1 t_A (relative error <= u/M, "
                  "twice the second-order term u/(2M)) and the log form at t = 10..1e8 t_B (relative "
                  f"error <= twice the first-order term ((M-1) u + 1)/(M eta_Y t u)); M = {Ms}, "
                  f"eta_Y = {etas}",
        controls=[Control("linear form with M - 1 in place of M", lin_ctrl, 1.0, expected=e_lin),
                  Control("log form without M inside the log (Theorem 1(b)'s ln(eta_Y t))", log_ctrl, 1.0,
                          expected=e_log)],
        details=details, figures=_h_figure(),
    )


def _h_figure(M: int = 1000, eta: float = 0.5, S: int = 100_000) -> dict:
    """h*(s) (eq. 33) and h(t) (eq. 45) with the linear and logarithmic regimes (for the report)."""
    hs = trajectory(S, M, eta)
    s = np.unique(np.geomspace(1, S, 200).astype(int))
    t = np.geomspace(1e-2, S, 300)
    h = h_numpy(t, M, eta)
    tA = _cf("scan_snap.speed.scan_end", M=M, K=1, eta_Y=eta)
    early, late = t <= 3 * tA, t >= tA / 3
    return {"h": {
        "kind": "lines", "xscale": "log", "yscale": "log", "xlabel": "s (steps) / t",
        "ylabel": "h", "title": f"h*(s) (eq. 33) and h(t) (eq. 45), M = {M}, eta_Y = {eta}: "
                                f"linear, then logarithmic (t_A = {tA:.3g})",
        "series": [{"label": "h*(s), recursion eq. 33", "x": s.tolist(), "y": hs[s].tolist(), "style": "o",
                    "color": "k"},
                   {"label": "h(t), continuous eq. 45", "x": t.tolist(), "y": h.tolist()},
                   {"label": "linear regime eta_Y t / M", "x": t[early].tolist(),
                    "y": (eta * t[early] / M).tolist(), "style": "--"},
                   {"label": "logarithmic regime ln(M eta_Y t)/M", "x": t[late].tolist(),
                    "y": (np.log(M * eta * t[late]) / M).tolist(), "style": "--"}]}}


# =====================================================================================
# Identities
# =====================================================================================
@check("scan_snap.h.identities",
       covers=["scan_snap.h.time_of", "scan_snap.h.continuous", "scan_snap.h.identity_53",
               "scan_snap.h.identity_54", "scan_snap.h.identity_56", "scan_snap.h.identity_57",
               "scan_snap.h.root_low", "scan_snap.h.root_high", "scan_snap.h.omega_0", "scan_snap.h.omega_1",
               "scan_snap.speed.scan_end", "scan_snap.speed.crossing_time"],
       method="exact_flow",
       title="t(h(t)) = t, Lemma 9's identities, Lemma 8's roots and the crossing times to machine precision",
       settings=[Setting("samples", "int", quick=200, full=5000, low=1, high=10**6,
                         doc="random (M, eta_Y, t) points")])
def identities(ctx):
    rng = ctx.rng
    n = ctx.setting("samples")
    M = rng.integers(4, 10_001, size=n)
    eta = rng.uniform(1e-3, 10, size=n)
    t = np.exp(rng.uniform(np.log(1e-6), np.log(1e9), size=n))
    errs = {}
    h = np.array([h_numpy(t[i], M[i], eta[i]) for i in range(n)])
    back = np.array([_cf("scan_snap.h.time_of", h=h[i], M=M[i], eta_Y=eta[i]) for i in range(n)])
    errs["t(h(t)) = t"] = float(np.max(np.abs(back / t - 1)))
    # Lemma 9 identities (K = 1), printed right-hand sides with t and h = h(t), vs the left-hand sides
    u = M * h
    d1, d2 = np.exp(u) / (M - 1), np.exp(u) / ((M - 1) * u)
    A = M * eta * t + 1
    gamma = (M - 1) ** 2 * h / ((M - 1) + np.exp(u))
    X = A / (1 + 1 / d2)
    rhs = {"53": (A / ((1 + d2) * M * (M - 1)), h), "54": (A / ((1 + d1) * (1 + d2) * M), gamma),
           "56": (np.log(X) / M, h), "57": ((M - 1) / M * (M - 1) * np.log(X) / ((1 + 1 / d1) * X), gamma)}
    # allowance: 1e-12, plus for the log forms the conditioning of ln X near X = 1 (eps/|ln X|)
    base = 1e-12
    cond = base + 16 * EPS / np.abs(np.log(X))
    for k, (r, l) in rhs.items():
        allow = cond if k in ("56", "57") else base
        errs[f"eq. {k}"] = float(np.max(np.abs(r / l - 1) / allow)) * base
    ctrl53 = float(np.max(np.abs(A / ((1 + np.exp(u) / (M * u)) * M * M) / h - 1)))
    # Lemma 8: roots solve e^u = (M-1) u; eqs. 50 and 51 hold at the registered omegas
    Mr = np.unique(np.r_[4, 5, 30, 100, 1000, 10_000, rng.integers(4, 10_001, size=20)])
    res = []
    for m in Mr:
        for rid in ("scan_snap.h.root_low", "scan_snap.h.root_high"):
            ur = m * _cf(rid, M=m)
            res.append(abs(math.exp(ur) / ((m - 1) * ur) - 1))
        w0, w1 = _cf("scan_snap.h.omega_0", M=m), _cf("scan_snap.h.omega_1", M=m)
        lnM = math.log(m)
        res.append(abs((math.log(m / (m - 1)) + m ** (w0 - 1)) / (w0 * lnM) - 1))        # eq. 50
        res.append(abs(m**w1 / ((1 + w1) * lnM * (m - 1) / m) - 1))                       # eq. 51
    errs["Lemma 8 roots, eqs. 50-51"] = float(max(res))
    # crossing times: at t_A, e^{M h} = M - 1; at t_B, e^{M h} = (M - 1) M h (K = 3 clock: h(t/K))
    cross, ctrl52 = [], 0.0
    for m in Mr:
        for e in (0.1, 1.0, 5.0):
            tA = _cf("scan_snap.speed.scan_end", M=m, K=3, eta_Y=e)
            tB = _cf("scan_snap.speed.crossing_time", M=m, K=3, eta_Y=e)
            hA, hB = h_numpy(tA / 3, m, e), h_numpy(tB / 3, m, e)
            cross.append(abs(math.exp(m * hA) / (m - 1) - 1))
            cross.append(abs(math.exp(m * hB) / ((m - 1) * m * hB) - 1))
            tA_wrong = 3 * (m + (m - 1) * math.log(m - 1)) / (m * e)
            ctrl52 = max(ctrl52, abs(math.exp(m * h_numpy(tA_wrong / 3, m, e)) / (m - 1) - 1))
    # the crossing residual is the conditioning of u -> e^u (error in u times ~ u), allow 64 eps u
    errs["crossings t_A, t_B"] = float(max(cross))
    tol = 1e-12
    disc = max(errs.values())
    return Outcome(
        measured=errs, predicted=0.0, discrepancy=disc, tolerance=tol,
        criterion=f"max relative residual over {n} random (M in 4..1e4, eta_Y in 1e-3..10, t in 1e-6..1e9) "
                  "and the Lemma-8 grid; 1e-12 allows float64 round-off through exp(u) with u <= 33 "
                  "(u eps ~ 1e-14) and the Newton solve; eqs. 56-57 (ln X with X -> 1 at small t) are "
                  "scaled by their conditioning, 1e-12 + 16 eps/|ln X|",
        # closed form vs closed form (h of eq. 45 at the same points): deterministic, their own expected values
        controls=[Control("eq. 53 with (M - 1) -> M", ctrl53, tol, expected=ctrl53),
                  Control("eq. 52 without the -2 (t_A too late)", ctrl52, tol, expected=ctrl52)],
        details={"n_points": n, "M_grid": Mr.tolist()},
    )
