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
from scipy import integrate, optimize

import theory
from theory.scan_snap.h import h_continuous, trajectory
from verify import Control, Outcome, check

EPS = np.finfo(float).eps


def _cf(id, **kw):
    return theory.get(id)(**kw)


def _h(t, M, eta):
    return h_continuous("numpy", np.asarray(t, dtype=float), M, eta)


# =====================================================================================
# Lemma 7
# =====================================================================================
@check("scan_snap.h.lemma7_gap",
       covers=["scan_snap.h.discrete", "scan_snap.h.continuous", "scan_snap.h.gap_bound"],
       method="exact_flow",
       title="h*(s) iterated exactly vs h(s): Lemma 7's 0 <= h* - h <= 2 eta_Y/M")
def lemma7_gap(ctx):
    Ms = (10, 100, 1000, 10_000)
    etas = (0.01, 0.1, 0.5, 1.0, 5.0)
    S = ctx.pick(quick=100_000, full=1_000_000)
    worst_ratio, worst_low, ctrl_ratio, ctrl_low, details = 0.0, 0.0, 0.0, 0.0, {}
    for M in Ms:
        for eta in etas:
            hs = trajectory(S, M, eta)
            h = _h(np.arange(S + 1, dtype=float), M, eta)
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
            gap = h_wrong - _h(np.arange(len(h_wrong), dtype=float), M, eta)
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
       title="Linear and logarithmic growth of h(t) and h*(s) against their error terms")
def regimes(ctx):
    Ms = (10, 100, 1000, 10_000)
    etas = (0.1, 1.0, 5.0)
    lin, log, lin_ctrl, log_ctrl, details = 0.0, 0.0, 0.0, 0.0, {}
    e_lin, e_log = 0.0, 0.0  # expected control statistics: wrong form vs the registered form
    for M in Ms:
        for eta in etas:
            tA = _cf("scan_snap.speed.scan_end", M=M, K=1, eta_Y=eta)
            tB = _cf("scan_snap.speed.crossing_time", M=max(M, 4), K=1, eta_Y=eta)
            # linear: e^u + (M-1) u = 1 + M eta t gives u = eta t - u^2/(2M) + ..., so the relative
            # error of eta t/M is about u/(2M); test |ratio - 1| <= u/M at t = 1e-5..1e-1 t_A
            t = tA * np.logspace(-5, -1, 9)
            h = _h(t, M, eta)
            u = M * h
            pred = _cf("scan_snap.h.linear", t=t, M=M, eta_Y=eta)
            lin = max(lin, float(np.max(np.abs(h / pred - 1) / (u / M))))
            lin_ctrl = max(lin_ctrl, float(np.max(np.abs(h / (eta * t / (M - 1)) - 1) / (u / M))))
            e_lin = max(e_lin, float(np.max(np.abs(pred / (eta * t / (M - 1)) - 1) / (u / M))))
            # logarithmic: u = ln(M eta t + 1 - (M-1) u), so |u - ln(M eta t)| <= ((M-1) u + 1)/(M eta t)
            # to first order; test |ratio - 1| <= 2 ((M-1) u + 1)/(M eta t u) at t = 10..1e8 t_B
            t = tB * np.logspace(1, 8, 8)
            h = _h(t, M, eta)
            u = M * h
            err_bound = 2 * ((M - 1) * u + 1) / (M * eta * t * u)
            pred = _cf("scan_snap.h.logarithmic", t=t, M=M, eta_Y=eta)
            log = max(log, float(np.max(np.abs(h / pred - 1) / err_bound)))
            log_ctrl = max(log_ctrl, float(np.max(np.abs(h / (np.log(eta * t) / M) - 1) / err_bound)))
            e_log = max(e_log, float(np.max(np.abs(pred / (np.log(eta * t) / M) - 1) / err_bound)))
            # the discrete recursion in both regimes (reported)
            s_lin = max(1, int(tA / 10))
            s_log = min(int(100 * tB), 100_000)
            hs = trajectory(s_log, M, eta)
            details[f"M={M}, eta_Y={eta}"] = {
                "t_A": tA, "t_B": tB,
                "h*(s)/(eta s/M) at s = t_A/10": float(hs[s_lin] / (eta * s_lin / M)),
                "h*(s)/(ln(M eta s)/M) at s = min(100 t_B, 3e5)": float(hs[s_log] / (math.log(M * eta * s_log) / M))}
    disc = max(lin, log)
    return Outcome(
        measured={"linear: max |h/(eta t/M) - 1|/(u/M)": lin,
                  "log: max |h/(ln(M eta t)/M) - 1|/error term": log},
        predicted="both <= 1",
        discrepancy=disc, tolerance=1.0,
        criterion="h(t) from eq. 45 against the linear form at t = 1e-5..1e-1 t_A (relative error <= u/M, "
                  "twice the second-order term u/(2M)) and the log form at t = 10..1e8 t_B (relative "
                  "error <= twice the first-order term ((M-1) u + 1)/(M eta_Y t u)); M = 10..1e4, "
                  "eta_Y = 0.1..5",
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
    h = _h(t, M, eta)
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
       title="t(h(t)) = t, Lemma 9's identities, Lemma 8's roots and the crossing times to machine precision")
def identities(ctx):
    rng = ctx.rng
    n = ctx.pick(quick=200, full=5000)
    M = rng.integers(4, 10_001, size=n)
    eta = rng.uniform(1e-3, 10, size=n)
    t = np.exp(rng.uniform(np.log(1e-6), np.log(1e9), size=n))
    errs = {}
    h = np.array([_h(t[i], M[i], eta[i]) for i in range(n)])
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
            hA, hB = _h(tA / 3, m, e), _h(tB / 3, m, e)
            cross.append(abs(math.exp(m * hA) / (m - 1) - 1))
            cross.append(abs(math.exp(m * hB) / ((m - 1) * m * hB) - 1))
            tA_wrong = 3 * (m + (m - 1) * math.log(m - 1)) / (m * e)
            ctrl52 = max(ctrl52, abs(math.exp(m * _h(tA_wrong / 3, m, e)) / (m - 1) - 1))
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


# =====================================================================================
# gamma: exact integral and peak
# =====================================================================================
@check("scan_snap.speed.gamma_integral",
       covers=["scan_snap.speed.gamma", "scan_snap.speed.gamma_integral", "scan_snap.speed.gamma_peak",
               "scan_snap.speed.gamma_peak_time", "scan_snap.speed.scan_time"],
       method="exact_flow",
       title="eta_Z int gamma against quadrature; the peak of gamma against numerical maximisation")
def gamma_integral(ctx):
    cases = [(30, 2, 0.5, 0.3), (1000, 10, 1.0, 0.5), (1000, 1, 0.01, 1.0), (10_000, 5, 5.0, 2.0), (2, 3, 10.0, 0.1)]
    cases = ctx.pick(quick=cases, full=cases + [(100, 20, 0.1, 0.5), (5000, 50, 2.0, 1.0)])
    rel, ctrl, peak_err, details = 0.0, 0.0, 0.0, {}
    for M, K, eta, etaZ in cases:
        g = lambda s: _cf("scan_snap.speed.gamma", t=s, M=M, K=K, eta_Y=eta)
        tp = K * math.log(M) / eta if M > 1 else K / eta
        ends = tp * np.array([0.1, 1.0, 10.0, 1e3, 1e6])
        # quadrature on log-spaced panels (gamma is smooth; the tail decays like ln t/t)
        knots = np.r_[0.0, tp * np.logspace(-3, 6, 37)]
        cum = np.r_[0.0, np.cumsum([integrate.quad(g, a, b, epsabs=0, epsrel=1e-13, limit=200)[0]
                                    for a, b in zip(knots[:-1], knots[1:])])]
        for T in ends:
            j = np.searchsorted(knots, T)
            part = cum[j - 1] + integrate.quad(g, knots[j - 1], T, epsabs=0, epsrel=1e-13, limit=200)[0]
            quad = etaZ * part
            exact = _cf("scan_snap.speed.gamma_integral", t=T, M=M, K=K, eta_Y=eta, eta_Z=etaZ)
            rel = max(rel, abs(exact / quad - 1))
            ctrl = max(ctrl, abs(exact / K / quad - 1))
        # peak: maximise gamma over log t numerically, compare value and location
        res = optimize.minimize_scalar(lambda x: -g(math.exp(x)), bracket=(math.log(tp / 10), math.log(tp)),
                                       tol=1e-12)
        t_num, g_num = math.exp(res.x), -res.fun
        g_pk = _cf("scan_snap.speed.gamma_peak", M=M, K=K, eta_Y=eta)
        t_pk = _cf("scan_snap.speed.gamma_peak_time", M=M, K=K, eta_Y=eta)
        # the value is flat at the maximum: |dg| ~ g'' dt^2, so the value is tested at 1e-10 and the
        # location (sqrt of the value precision) at 1e-5
        peak_err = max(peak_err, abs(g_num / g_pk - 1), abs(t_num / t_pk - 1) * (1e-10 / 1e-5))
        details[f"M={M}, K={K}, eta_Y={eta}, eta_Z={etaZ}"] = {
            "gamma_max": g_pk, "numerical_max": g_num, "t_peak/t_0'": t_pk / tp, "numerical t_peak/t_0'": t_num / tp}
    disc = max(rel, peak_err)
    return Outcome(
        measured={"max |exact/quad - 1|": rel, "peak (scaled)": peak_err},
        predicted=0.0, discrepancy=disc, tolerance=1e-10,
        criterion="Gamma(t) = (eta_Z/eta_Y) K (M-1)^2 h(t/K)^2/2 against adaptive quadrature (epsrel 1e-13 per "
                  "panel) of eta_Z gamma at t = 0.1..1e6 t_0' within 1e-10 (the quadrature tolerance plus the "
                  "panel sum); the peak value within 1e-10 and its location within 1e-5 (flat maximum) "
                  "of scipy's maximisation; 5 (M, K, eta_Y, eta_Z) cases incl. M = 2 and M = 1e4",
        # expected: Gamma/K against Gamma is off by |1/K - 1| (largest K of the cases)
        controls=[Control("the integral without the factor K (Gamma/K)", ctrl, 1e-10,
                          expected=max(abs(1 / c[1] - 1) for c in cases))],
        details=details,
    )


# =====================================================================================
# gamma asymptotics, time scales, Lemma 9's stages, Corollary 1
# =====================================================================================
@check("scan_snap.speed.asymptotics",
       covers=["scan_snap.speed.gamma", "scan_snap.speed.gamma_linear", "scan_snap.speed.gamma_log",
               "scan_snap.speed.scan_time", "scan_snap.speed.scan_end", "scan_snap.speed.snap_time",
               "scan_snap.speed.crossing_time", "scan_snap.speed.convergence_steps", "scan_snap.h.discrete"],
       decides=["scan_snap.speed.gamma_log"],
       method="exact_flow",
       title="gamma's two stages (Theorem 1(b) printed vs Lemma 9), t_0' < t_A < t_B < t_0, Corollary 1's count")
def asymptotics(ctx):
    failures, details = [], {}
    worst, ctrl_printed, e_printed = 0.0, 0.0, 0.0
    ratio_printed_t0 = {}
    for M in (30, 100, 1000, 10_000):
        for K, eta in ((1, 1.0), (10, 0.5), (3, 5.0)):
            kw = dict(M=M, K=K, eta_Y=eta)
            tp, tA = _cf("scan_snap.speed.scan_time", **kw), _cf("scan_snap.speed.scan_end", **kw)
            tB, t0 = _cf("scan_snap.speed.crossing_time", **kw), _cf("scan_snap.speed.snap_time", **kw)
            if not tp < tA < tB < t0:
                failures.append(f"order of time scales at {kw}")
            r = tB / t0
            # t_B/t_0 = (M-1)/M - 1/(2 M u_hi) exactly
            u_hi = eta * t0 / (2 * K)
            worst = max(worst, abs(r / ((M - 1) / M - 1 / (2 * M * u_hi)) - 1) / 1e-12)
            # stage inequalities of Lemma 9 on their ranges (t/K clock)
            t1 = tp * np.logspace(-3, 0, 30)
            t1 = t1[t1 >= 1]                                   # integer steps t >= 1
            u1 = M * _h(t1 / K, M, eta)
            if not np.all(np.exp(u1) <= np.minimum(M - 1, (M - 1) * u1)):
                failures.append(f"stage 1 at {kw}")
            t2 = t0 * np.logspace(0, 6, 30)
            u2 = M * _h(t2 / K, M, eta)
            if not np.all(np.exp(u2) >= np.maximum(M - 1, (M - 1) * u2)):
                failures.append(f"stage 2 at {kw}")
            # gamma against its stages: ratio -> 1 at both ends, with the derived error terms
            g = lambda t: _cf("scan_snap.speed.gamma", t=t, **kw)
            small = tp * np.array([1e-4, 1e-3])
            lin = np.array([g(t) / _cf("scan_snap.speed.gamma_linear", t=t, **kw) for t in small])
            # relative error of the linear stage: h = eta t/(K M) (1 - u/(2M)) and (M-1) + e^u = M (1 + u/M):
            # 3u/(2M) to first order (u = M h(t/K)); allow 2u/M
            us = M * _h(small / K, M, eta)
            worst = max(worst, float(np.max(np.abs(lin - 1) / (2 * us / M))))
            big = t0 * np.array([1e4, 1e6])
            lg = np.array([g(t) / _cf("scan_snap.speed.gamma_log", t=t, **kw) for t in big])
            uu = M * _h(big / K, M, eta)
            # exactly gamma = (M-1)^2 u/(M (x + 2 - M - (M-1) u)), x = M eta t/K, u = ln(x + 1 - (M-1) u):
            # gamma/lead - 1 = O((M-1)(u + 2)/x) to first order; allow twice that
            allow = 2 * (M - 1) * (uu + 2) * K / (M * eta * big)
            worst = max(worst, float(np.max(np.abs(lg - 1) / allow)))
            lg_printed = np.array([g(t) / _cf("scan_snap.speed.gamma_log", t=t, printed=True, **kw) for t in big])
            ctrl_printed = max(ctrl_printed, float(np.max(np.abs(lg_printed - 1) / allow)))
            # expected: the printed form against Lemma 9's log form (the registered one)
            e_printed = max(e_printed, float(np.max(np.abs(np.array(
                [_cf("scan_snap.speed.gamma_log", t=t, **kw)
                 / _cf("scan_snap.speed.gamma_log", t=t, printed=True, **kw) for t in big]) - 1) / allow)))
            pr = g(t0) / _cf("scan_snap.speed.gamma_log", t=t0, printed=True, **kw)
            ratio_printed_t0[f"M={M}, K={K}, eta_Y={eta}"] = pr
            details[f"M={M}, K={K}, eta_Y={eta}"] = {
                "t_0'": tp, "t_A": tA, "t_B": tB, "t_0": t0, "t_B/t_0": r, "(M-1)/M": (M - 1) / M,
                "gamma/(eta t/K) at 0.1 t_0', 0.5 t_0', t_0'": [g(c * tp) / (eta * c * tp / K) for c in (0.1, 0.5, 1.0)],
                "gamma/Lemma 9 form at t_0, 10 t_0, 1e3 t_0": [
                    g(c * t0) / (K * math.log(M * eta * c * t0 / K) / (eta * c * t0)) for c in (1, 10, 1e3)],
                "gamma/printed Theorem 1(b) at t_0, 1e6 t_0": [pr, g(1e6 * t0) / _cf(
                    "scan_snap.speed.gamma_log", t=1e6 * t0, printed=True, **kw)]}
    # Corollary 1: the discrete recursion (one class) reaches ||e_n - alpha_n|| <= eps after S steps
    cor = {}
    for M, eta, eps in ((1000, 0.5, 0.01), (100, 1.0, 0.05), (30, 0.1, 0.1)):
        hs = trajectory(int(2 * _cf("scan_snap.speed.convergence_steps", M=M, K=1, eta_Y=eta, epsilon=eps)) + 10,
                        M, eta)
        norm = (M - 1) * math.sqrt(M / (M - 1)) / ((M - 1) + np.exp(M * hs))
        S = int(np.argmax(norm <= eps))
        sharp = _cf("scan_snap.speed.convergence_steps", M=M, K=1, eta_Y=eta, epsilon=eps)
        bound = math.log(M / eps) / (eps * eta)
        cor[f"M={M}, eta_Y={eta}, eps={eps}"] = {"steps": S, "sharp": sharp, "paper_bound": bound}
        # Lemma 7 brackets the discrete count: h* >= h gives S <= ceil(sharp); h* - h <= 2 eta_Y/M with
        # h' = eta_Y/((M-1) + e^{Mh}) >= eta_Y/((M-1) + E_eps) at the target gives sharp - S <= 2 ((M-1) + E)/M
        E = (M - 1) * (math.sqrt(M / (M - 1)) / eps - 1)
        if not (sharp - 2 * ((M - 1) + E) / M - 1 <= S <= math.ceil(sharp)):
            failures.append(f"Corollary 1 count outside Lemma 7's bracket at M={M}")
        if S > bound:
            failures.append(f"Corollary 1 bound at M={M}")
    details["corollary_1"] = cor
    printed_t0 = ratio_printed_t0["M=1000, K=1, eta_Y=1.0"]
    disc = worst if not failures else float("inf")
    return Outcome(
        measured={"worst scaled error": worst, "failures": failures,
                  "gamma/printed Theorem 1(b) at t_0 (M=1000)": printed_t0},
        predicted="all scaled errors <= 1; time scales ordered; stage inequalities hold",
        discrepancy=disc, tolerance=1.0,
        criterion="gamma/(linear stage) - 1 within twice its first-order term 3u/(2M) at 1e-4..1e-3 t_0'; "
                  "gamma/(Lemma 9 log stage) - 1 within twice its first-order terms at 1e4, 1e6 t_0; "
                  "t_B/t_0 = (M-1)/M - 1/(2 M u_hi) to 1e-12; Lemma 9's stage inequalities on "
                  "[1e-3 t_0', t_0'] (t >= 1) and [t_0, 1e6 t_0]; Corollary 1's discrete step count inside "
                  "the bracket Lemma 7 implies around the sharp count, and below the paper's bound. Theorem 1(b)'s printed "
                  "form is held to the same allowance at the same points (control)",
        controls=[Control("Theorem 1(b) printed K ln(eta_Y t/K)/(eta_Y t) at 1e4, 1e6 t_0 (scaled error)",
                          ctrl_printed, 1.0, expected=e_printed)],
        details=details, figures=_gamma_figure(),
    )


def _gamma_figure(M: int = 1000, K: int = 1, eta: float = 1.0) -> dict:
    """gamma(t) with its two stages and the time scales (one figure for the report)."""
    kw = dict(M=M, K=K, eta_Y=eta)
    tp, t0 = _cf("scan_snap.speed.scan_time", **kw), _cf("scan_snap.speed.snap_time", **kw)
    t = np.geomspace(1e-3 * tp, 1e4 * t0, 300)
    g = np.array([_cf("scan_snap.speed.gamma", t=x, **kw) for x in t])
    lin = np.array([_cf("scan_snap.speed.gamma_linear", t=x, **kw) for x in t])
    late = t >= tp
    lg = np.array([_cf("scan_snap.speed.gamma_log", t=x, **kw) for x in t[late]])
    lg_p = np.array([_cf("scan_snap.speed.gamma_log", t=x, printed=True, **kw) for x in t[late]])
    early = t <= 2 * t0
    top = float(g.max()) * 3
    return {"gamma": {
        "kind": "lines", "xscale": "log", "yscale": "log", "xlabel": "t (batch-1 steps)",
        "ylabel": "speed coefficient gamma(t)",
        "title": f"gamma(t), M = {M}, K = {K}, eta_Y = {eta}: scanning (linear) then snapping "
                 f"(t_0' = {tp:.3g}, t_0 = {t0:.3g})",
        "series": [{"label": "gamma(t) exact (h from eq. 45)", "x": t.tolist(), "y": g.tolist(), "color": "k"},
                   {"label": "linear stage ((M-1)/M)^2 eta_Y t / K", "x": t[early].tolist(),
                    "y": lin[early].tolist(), "style": "--"},
                   {"label": "log stage, Lemma 9: K ln(M eta_Y t/K)/(eta_Y t)", "x": t[late].tolist(),
                    "y": lg.tolist(), "style": "--"},
                   {"label": "Theorem 1(b) as printed: K ln(eta_Y t/K)/(eta_Y t)", "x": t[late].tolist(),
                    "y": np.clip(lg_p, 1e-12, None).tolist(), "style": ":"},
                   {"label": "t_0' and t_0", "x": [tp, tp, np.nan, t0, t0],
                    "y": [1e-3, top, np.nan, 1e-3, top], "style": ":", "color": "0.5"}]}}
