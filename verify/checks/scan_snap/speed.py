"""Checks of ``scan_snap.speed`` (see also :mod:`verify.checks.scan_snap.h`).

Contains
--------
``scan_snap.speed.gamma_integral``
    eta_Z int gamma against quadrature; the peak of gamma against numerical maximisation
``scan_snap.speed.asymptotics``
    gamma's two stages (Theorem 1(b) printed vs Lemma 9), t_0' < t_A < t_B < t_0, Corollary 1's count

(Scan and Snap, Tian, Wang, Chen, Du 2023.) The cases are named settings, one equal-length list per
quantity, zipped into cases (``python -m verify settings ID``): ``M``, ``K``, ``eta_Y``, ``eta_Z`` of
gamma_integral; ``M`` and the paired ``K``, ``eta_Y`` of asymptotics, and Corollary 1's ``cor_M``,
``cor_eta_Y``, ``epsilon``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate, optimize

import theory
from theory.scan_snap.h import trajectory
from verify import Control, Outcome, check
from verify.flows.scan_snap import h_numpy
from verify.settings import Setting
from verify.stats import evaluate as _cf


def _zipped(ctx, *names: str) -> list[tuple]:
    """The settings ``names`` (lists paired with the first, ``Setting.paired_with``) zipped into cases."""
    return list(zip(*(ctx.setting(name) for name in names)))


def _column(cases, j: int) -> tuple:
    return tuple(c[j] for c in cases)


# =====================================================================================
# gamma: exact integral and peak
# =====================================================================================
#: (M, K, eta_Y, eta_Z) cases of gamma_integral (quick; full adds two)
GAMMA_CASES = ((30, 2, 0.5, 0.3), (1000, 10, 1.0, 0.5), (1000, 1, 0.01, 1.0), (10_000, 5, 5.0, 2.0), (2, 3, 10.0, 0.1))
GAMMA_CASES_FULL = GAMMA_CASES + ((100, 20, 0.1, 0.5), (5000, 50, 2.0, 1.0))


@check("scan_snap.speed.gamma_integral",
       covers=["scan_snap.speed.gamma", "scan_snap.speed.gamma_integral", "scan_snap.speed.gamma_peak",
               "scan_snap.speed.gamma_peak_time", "scan_snap.speed.scan_time"],
       method="exact_flow",
       title="eta_Z int gamma against quadrature; the peak of gamma against numerical maximisation",
       settings=[Setting("M", "ints", quick=_column(GAMMA_CASES, 0), full=_column(GAMMA_CASES_FULL, 0), low=2,
                         high=10**9, doc="vocabulary sizes M, one per case"),
                 Setting("K", "ints", quick=_column(GAMMA_CASES, 1), full=_column(GAMMA_CASES_FULL, 1), low=1,
                         high=10**6, doc="numbers of classes K, one per case", paired_with="M"),
                 Setting("eta_Y", "floats", quick=_column(GAMMA_CASES, 2), full=_column(GAMMA_CASES_FULL, 2),
                         low=1e-6, high=1e6, doc="learning rates eta_Y, one per case", paired_with="M"),
                 Setting("eta_Z", "floats", quick=_column(GAMMA_CASES, 3), full=_column(GAMMA_CASES_FULL, 3),
                         low=1e-6, high=1e6, doc="learning rates eta_Z, one per case", paired_with="M")])
def gamma_integral(ctx):
    cases = _zipped(ctx, "M", "K", "eta_Y", "eta_Z")
    rel, ctrl, peak_err, details = 0.0, 0.0, 0.0, {}
    for M, K, eta, etaZ in cases:
        g = theory.get("scan_snap.speed.gamma").of("t", M=M, K=K, eta_Y=eta)   # validated once (ClosedForm.of)
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
                  f"of scipy's maximisation; {len(cases)} (M, K, eta_Y, eta_Z) cases "
                  f"(M = {', '.join(str(c[0]) for c in cases)})",
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
       title="gamma's two stages (Theorem 1(b) printed vs Lemma 9), t_0' < t_A < t_B < t_0, Corollary 1's count",
       settings=[Setting("M", "ints", quick=(30, 100, 1000, 10_000), full=(30, 100, 1000, 10_000), low=2, high=10**9,
                         doc="vocabulary sizes M (each with every (K, eta_Y) pair)"),
                 Setting("K", "ints", quick=(1, 10, 3), full=(1, 10, 3), low=1, high=10**6,
                         doc="numbers of classes K, paired with eta_Y"),
                 Setting("eta_Y", "floats", quick=(1.0, 0.5, 5.0), full=(1.0, 0.5, 5.0), low=1e-6, high=1e6,
                         doc="learning rates eta_Y, one per K", paired_with="K"),
                 Setting("cor_M", "ints", quick=(1000, 100, 30), full=(1000, 100, 30), low=2, high=10**6,
                         doc="Corollary 1: vocabulary sizes M (one class), paired with cor_eta_Y and epsilon"),
                 Setting("cor_eta_Y", "floats", quick=(0.5, 1.0, 0.1), full=(0.5, 1.0, 0.1), low=1e-3, high=100.0,
                         doc="Corollary 1: learning rates eta_Y, one per cor_M", paired_with="cor_M"),
                 Setting("epsilon", "floats", quick=(0.01, 0.05, 0.1), full=(0.01, 0.05, 0.1), low=1e-4, high=0.5,
                         doc="Corollary 1: targets ||e_n - alpha_n|| <= epsilon, one per cor_M", paired_with="cor_M")])
def asymptotics(ctx):
    failures, details = [], {}
    worst, ctrl_printed, e_printed = 0.0, 0.0, 0.0
    ratio_printed_t0 = {}
    Ms = ctx.setting("M")
    pairs = _zipped(ctx, "K", "eta_Y")
    corollary = _zipped(ctx, "cor_M", "cor_eta_Y", "epsilon")
    for M in Ms:
        for K, eta in pairs:
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
            u1 = M * h_numpy(t1 / K, M, eta)
            if not np.all(np.exp(u1) <= np.minimum(M - 1, (M - 1) * u1)):
                failures.append(f"stage 1 at {kw}")
            t2 = t0 * np.logspace(0, 6, 30)
            u2 = M * h_numpy(t2 / K, M, eta)
            if not np.all(np.exp(u2) >= np.maximum(M - 1, (M - 1) * u2)):
                failures.append(f"stage 2 at {kw}")
            # gamma against its stages: ratio -> 1 at both ends, with the derived error terms
            def g(t):
                return _cf("scan_snap.speed.gamma", t=t, **kw)
            small = tp * np.array([1e-4, 1e-3])
            lin = np.asarray(_cf("scan_snap.speed.gamma", t=small, **kw) / _cf("scan_snap.speed.gamma_linear",
                                                                               t=small, **kw), float)
            # relative error of the linear stage: h = eta t/(K M) (1 - u/(2M)) and (M-1) + e^u = M (1 + u/M):
            # 3u/(2M) to first order (u = M h(t/K)); allow 2u/M
            us = M * h_numpy(small / K, M, eta)
            worst = max(worst, float(np.max(np.abs(lin - 1) / (2 * us / M))))
            big = t0 * np.array([1e4, 1e6])
            g_big = np.asarray(_cf("scan_snap.speed.gamma", t=big, **kw), float)
            log_big = np.asarray(_cf("scan_snap.speed.gamma_log", t=big, **kw), float)
            printed_big = np.asarray(_cf("scan_snap.speed.gamma_log", t=big, printed=True, **kw), float)
            lg = g_big / log_big
            uu = M * h_numpy(big / K, M, eta)
            # exactly gamma = (M-1)^2 u/(M (x + 2 - M - (M-1) u)), x = M eta t/K, u = ln(x + 1 - (M-1) u):
            # gamma/lead - 1 = O((M-1)(u + 2)/x) to first order; allow twice that
            allow = 2 * (M - 1) * (uu + 2) * K / (M * eta * big)
            worst = max(worst, float(np.max(np.abs(lg - 1) / allow)))
            lg_printed = g_big / printed_big
            ctrl_printed = max(ctrl_printed, float(np.max(np.abs(lg_printed - 1) / allow)))
            # expected: the printed form against Lemma 9's log form (the registered one)
            e_printed = max(e_printed, float(np.max(np.abs(log_big / printed_big - 1) / allow)))
            pr = g(t0) / _cf("scan_snap.speed.gamma_log", t=t0, printed=True, **kw)
            ratio_printed_t0[f"M={M}, K={K}, eta_Y={eta}"] = pr
            details[f"M={M}, K={K}, eta_Y={eta}"] = {
                "t_0'": tp, "t_A": tA, "t_B": tB, "t_0": t0, "t_B/t_0": r, "(M-1)/M": (M - 1) / M,
                "gamma/(eta t/K) at 0.1 t_0', 0.5 t_0', t_0'": [g(c * tp) / (eta * c * tp / K)
                                                                for c in (0.1, 0.5, 1.0)],
                "gamma/Lemma 9 form at t_0, 10 t_0, 1e3 t_0": [
                    g(c * t0) / (K * math.log(M * eta * c * t0 / K) / (eta * c * t0)) for c in (1, 10, 1e3)],
                "gamma/printed Theorem 1(b) at t_0, 1e6 t_0": [pr, g(1e6 * t0) / _cf(
                    "scan_snap.speed.gamma_log", t=1e6 * t0, printed=True, **kw)]}
    # Corollary 1: the discrete recursion (one class) reaches ||e_n - alpha_n|| <= eps after S steps
    cor = {}
    for M, eta, eps in corollary:
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
    # reported: the M nearest 1000 (log scale) with the first (K, eta_Y) pair (M = 1000, K = 1, eta_Y = 1)
    M_rep = min(Ms, key=lambda m: (abs(math.log(m / 1000)), m))
    printed_t0 = ratio_printed_t0[f"M={M_rep}, K={pairs[0][0]}, eta_Y={pairs[0][1]}"]
    disc = worst if not failures else float("inf")
    return Outcome(
        measured={"worst scaled error": worst, "failures": failures,
                  f"gamma/printed Theorem 1(b) at t_0 (M={M_rep})": printed_t0},
        predicted="all scaled errors <= 1; time scales ordered; stage inequalities hold",
        discrepancy=disc, tolerance=1.0,
        criterion="gamma/(linear stage) - 1 within twice its first-order term 3u/(2M) at 1e-4..1e-3 t_0'; "
                  "gamma/(Lemma 9 log stage) - 1 within twice its first-order terms at 1e4, 1e6 t_0; "
                  "t_B/t_0 = (M-1)/M - 1/(2 M u_hi) to 1e-12; Lemma 9's stage inequalities on "
                  "[1e-3 t_0', t_0'] (t >= 1) and [t_0, 1e6 t_0]; Corollary 1's discrete step count inside "
                  "the bracket Lemma 7 implies around the sharp count, and below the paper's bound. Theorem 1(b)'s "
                  "printed "
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
    # one call per curve over the grid (the values of one call per point)
    g = np.asarray(_cf("scan_snap.speed.gamma", t=t, **kw), float)
    lin = np.asarray(_cf("scan_snap.speed.gamma_linear", t=t, **kw), float)
    late = t >= tp
    lg = np.asarray(_cf("scan_snap.speed.gamma_log", t=t[late], **kw), float)
    lg_p = np.asarray(_cf("scan_snap.speed.gamma_log", t=t[late], printed=True, **kw), float)
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
