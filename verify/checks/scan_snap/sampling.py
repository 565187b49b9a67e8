"""Checks of ``scan_snap.sampling`` (Tian et al. 2023, App. D.4): uniform class sampling in the decoder.

By Lemma 3 the decoder row of class n after N steps depends on the class count N_n alone
(``w_n = (M-1) h(N_n) zeta_n``; ``scan_snap.decoder.kclass_flow`` checks it on the iterated decoder), so the
statements of Lemmas 10-12 and Corollary 1 are statements about the counts of uniform class sampling and
the function h of eq. 45 (record ``scan_snap.h.continuous``).

Contains
--------
``scan_snap.sampling.lemma10_coverage``
    Lemma 10 (eq. 58) and Remark 4 (eq. 60) by Monte Carlo of uniform class sampling: the coverage of the
    count radius is at least 1 - delta; eq. 58's second inequality holds only for N ln(2/delta) > (2 + sqrt 2)^2.
``scan_snap.sampling.lemma11_bounds``
    Lemma 11 on grids of (M, eta_Y, N-bar, Delta): eq. 63 (the concavity bound on h), eq. 64 (the largest
    |d ln g/ds|, attained), eq. 65 (|g(N_n) - g(N-bar)| <= g(N-bar) eta_Y Delta/3, for N_n < N-bar only when
    Delta << N-bar), and Corollary 1's |sigma| <= eta_Y Delta and, past t_B, |sigma| <= 2 Delta/(N-bar - Delta).
``scan_snap.sampling.lemma12_coverage``
    Lemma 12 and Corollary 1 by Monte Carlo: max_n |theta_n| and max_n |sigma_n| stay within the records'
    bounds with probability at least 1 - delta.
"""

from __future__ import annotations

import math

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import z_threshold


def _get(name):
    return theory.get(f"scan_snap.{name}")


def _h(t, M, eta):
    return _get("h.continuous")(t=np.asarray(t, dtype=float), M=M, eta_Y=eta)


def _g(t, M, eta):
    """g = 1/((M - 1) + e^{M h(t)}) (Lemma 11), as e^{-M h}/((M - 1) e^{-M h} + 1)."""
    u = M * _h(t, M, eta)
    return np.exp(-u) / ((M - 1) * np.exp(-u) + 1)


def _coverage_z(cov, target, R):
    """One-sided z = (target - coverage)/SE, SE = sqrt(cov (1 - cov)/R) floored at 1/R (as in Lemma 18's check)."""
    se = np.maximum(np.sqrt(cov * (1 - cov) / R), 1 / R)
    return (target - cov) / se


@check("scan_snap.sampling.lemma10_coverage", method="monte_carlo",
       covers=["scan_snap.sampling.count_radius"],
       title="Lemma 10 (eq. 58) and Remark 4 (eq. 60): class counts of uniform sampling stay within the radius with "
             "probability >= 1 - delta; eq. 58's '< sqrt(N ln(2/delta))' needs N ln(2/delta) > (2 + sqrt 2)^2",
       refutes={"Tian et al. 2023, Lemma 10, eq. 58 (second inequality)":
                "sqrt(N ln(2/delta)/2) + 1 < sqrt(N ln(2/delta)) is claimed for every delta in (0, 1); it holds "
                "exactly when N ln(2/delta) > (2 + sqrt 2)^2 = 11.66 (a (1 - 1/sqrt 2) > 1 with a = sqrt(N "
                "ln(2/delta))), so it fails e.g. at N = 5, delta = 0.5 (2.86 against 2.63). The first inequality, "
                "which the proofs use, holds for every "
                "N; the lemma is applied with N >> K^2, where the second holds too."},
       settings=[Setting("N", "ints", quick=(40, 1000, 20000), full=(40, 1000, 20000, 10**6), low=1, high=10**9,
                         doc="total steps N"),
                 Setting("K", "ints", quick=(2, 4, 10), full=(2, 4, 10, 50), low=1, high=10**4, doc="class counts K"),
                 Setting("samples", "int", quick=20000, full=200000, low=100, high=10**8,
                         doc="sampled count vectors per (N, K)")])
def lemma10_coverage(ctx):
    """Counts (N_1..N_K) ~ Multinomial(N, 1/K). For delta in {0.05, 0.2, 0.5}: the fraction of samples with
    |N_n - ceil(N/K)| <= count_radius(N, delta) (eq. 58) and with |N_n - N-bar| <= Delta = ceil(sqrt(N ln(1/delta)))
    (Remark 4, eq. 60), per class, and the exact binomial coverages (scipy).

    Criterion (statistic = max of the ratios, pass if <= 1): the one-sided z = (1 - delta - coverage)/SE over
    z_threshold(family) for every (N, K, delta, n, radius) (family-wise 1e-6); the number of exact binomial coverages
    below 1 - delta; the number of wrong verdicts of 'eq. 58's second inequality holds iff N ln(2/delta) > (2 +
    sqrt 2)^2' on a grid of (N, delta). Controls: the radius count_radius/3 (coverage below 1 - delta; expected z from
    the exact binomial coverage); eq. 58's second inequality as printed (for every N and delta): its failures on the
    grid.

    Measured (quick, seeds 0-19): pass 20/20, worst statistic 0 (coverage far above 1 - delta); controls: radius/3
    >= 7 x the threshold, eq. 58 as printed fails at 11 of 60 grid points. Under 1 s.
    """
    from scipy.stats import binom

    rng = ctx.rng
    Ns, Ks, R = list(ctx.setting("N")), list(ctx.setting("K")), ctx.setting("samples")
    deltas = (0.05, 0.2, 0.5)
    fam = 2 * len(Ns) * len(deltas) * sum(Ks)
    thr = z_threshold(fam)
    worst, ctrl, e_ctrl, exact_bad, rows = -np.inf, -np.inf, -np.inf, 0, {}
    for N in Ns:
        for K in Ks:
            counts = rng.multinomial(N, np.full(K, 1.0 / K), size=R)
            nbar = math.ceil(N / K)
            k = np.arange(N + 1)
            pmf = binom.pmf(k, N, 1.0 / K)
            for d in deltas:
                r58 = float(_get("sampling.count_radius")(N=N, delta=d))
                r60 = math.ceil(math.sqrt(N * math.log(1 / d)))
                for radius, tag in ((r58, "eq. 58"), (r60, "eq. 60"), (r58 / 3, "control")):
                    cov = np.mean(np.abs(counts - nbar) <= radius, axis=0)
                    z = _coverage_z(cov, 1 - d, R)
                    exact = float(pmf[np.abs(k - nbar) <= radius].sum())
                    if tag == "control":
                        ctrl = max(ctrl, float(z.max()))
                        se_e = math.sqrt(max(exact * (1 - exact), 1 / R) / R)
                        e_ctrl = max(e_ctrl, (1 - d - exact) / se_e)
                    else:
                        worst = max(worst, float(z.max()))
                        exact_bad += int(exact < 1 - d)
                        rows[f"N={N}, K={K}, delta={d}, {tag}"] = {"radius": radius, "min coverage": float(cov.min()),
                                                                   "exact": exact}
    # eq. 58's second inequality on a grid: holds iff N ln(2/delta) > (2 + sqrt 2)^2
    wrong, printed_fail = 0, 0
    for N in (1, 2, 3, 5, 8, 10, 20, 50, 100, 1000):
        for d in (0.01, 0.05, 0.2, 0.5, 0.8, 0.99):
            a = math.sqrt(N * math.log(2 / d))
            holds = float(_get("sampling.count_radius")(N=N, delta=d)) < a
            wrong += int(holds != (N * math.log(2 / d) > (2 + math.sqrt(2)) ** 2))
            printed_fail += int(not holds)
    stat = max(worst / thr, float(exact_bad), float(wrong))
    return Outcome(
        measured={"max one-sided z of 1 - delta - coverage": worst, "exact coverages below 1 - delta": exact_bad,
                  "wrong verdicts (eq. 58 second inequality)": wrong},
        predicted="coverage >= 1 - delta", discrepancy=float(stat), tolerance=1.0,
        criterion=f"max over (N, K, delta, n, radius) of z = (1 - delta - coverage)/SE / z_threshold({fam}) = "
                  f"{thr:.2f}; count of exact binomial coverages below 1 - delta; count of wrong verdicts of the "
                  "condition N ln(2/delta) > (2 + sqrt 2)^2 for eq. 58's second inequality (60 grid points); pass "
                  "if <= 1",
        controls=[Control("radius count_radius/3: max z / threshold", ctrl / thr, 1.0, expected=e_ctrl / thr),
                  Control("eq. 58's second inequality for every N, delta: grid points where it fails",
                          float(printed_fail), 0.0, expected=float(printed_fail))],
        details={"coverage": rows, "samples": R},
    )


def _ratios_63_65(M, eta, nbars, Delta):
    """Per N-bar: eq. 63 (both sides), eq. 65 up (N_n = N-bar + Delta) and down (N-bar - Delta), Corollary 1's
    |sigma| / (eta_Y Delta) (both sides), as ratios to the bounds."""
    hb, hu, hd = _h(nbars, M, eta), _h(nbars + Delta, M, eta), _h(nbars - Delta, M, eta)
    b63 = hb * Delta / (nbars - Delta)
    gb, gu, gd = _g(nbars, M, eta), _g(nbars + Delta, M, eta), _g(nbars - Delta, M, eta)
    s_up, s_dn = np.abs(gu / gb - 1), np.abs(gd / gb - 1)
    sb = float(_get("sampling.sigma_bound")(eta_Y=eta, Delta=Delta))
    return {"eq. 63": np.maximum((hb - hd) / b63, (hu - hb) / b63),
            "eq. 65 up": s_up / (eta * Delta / 3), "eq. 65 down": s_dn / (eta * Delta / 3),
            "sigma": np.maximum(s_up, s_dn) / sb, "s_up": s_up, "s_dn": s_dn}


@check("scan_snap.sampling.lemma11_bounds", method="exact_flow",
       covers=["scan_snap.sampling.log_slope_max", "scan_snap.sampling.sigma_bound",
               "scan_snap.sampling.sigma_snapping", "scan_snap.h.continuous"],
       title="Lemma 11 (eqs. 61-65) and Corollary 1's sigma bounds on h of eq. 45: eq. 63, the largest |d ln g/ds| "
             "(eq. 64), eq. 65 (for N_n < N-bar only when Delta << N-bar), |sigma| <= eta_Y Delta, <= 2 Delta/(N-bar "
             "- Delta)",
       settings=[Setting("points", "int", quick=60, full=600, low=5, high=10**5,
                         doc="N-bar values per (M, eta_Y, Delta)")])
def lemma11_bounds(ctx):
    """Grids: M in {4, 100, 1000, 10000} (eq. 64) or {100, 1000, 10000}, eta_Y in {0.01, 0.1, 0.5, 0.99}, Delta in
    {1, 10, 100}, N-bar log-spaced with Delta <= N-bar/10 (Remark 4's Delta << N-bar; 'points' values up to 1e7); h
    from the record scan_snap.h.continuous, g = 1/((M-1) + e^{M h}), sigma = g(N_n)/g(N-bar) - 1 at N_n = N-bar +-
    Delta.

    Criterion (statistic = max of the ratios, pass if <= 1): eq. 63, |h(N_n) - h(N-bar)| over h(N-bar) Delta/(N-bar -
    Delta); eq. 64, max over s of a central difference of ln g (step 1e-4 s) over the record log_slope_max, which must
    also be attained (1 - max ratio <= 1e-3, else the ratio 1 + that is used; an allowance of 1e-6 for the central
    difference, whose relative error is ~1e-8 at the step 1e-4 s); eq. 65 both sides over eta_Y Delta/3; |sigma| over
    the record sigma_bound (eta_Y Delta); past the per-class crossing t_B (N-bar - Delta >= t_B) |sigma| over the
    record sigma_snapping. Deterministic (the central difference is accurate to ~1e-8). Controls: eq. 65 for N_n <
    N-bar at Delta = N-bar/2 (outside Delta << N-bar); eq. 64 without the factor M/(M-1) (eta_Y/4) at M = 4.

    Measured (quick, seeds 0-19; deterministic): pass, worst statistic 0.999 (eq. 64 attained: 0.99996 of the record;
    eq. 63 <= 0.92, eq. 65 <= 0.85, sigma <= 0.98 of eta_Y Delta, <= 0.66 of 2 Delta/(N-bar - Delta)); controls: eq.
    65 at Delta = N-bar/2 1.25, eq. 64 without M/(M-1) 1.33. Under 1 s.
    """
    pts = ctx.setting("points")
    worst, keys = {}, ("eq. 63", "eq. 65 up", "eq. 65 down", "sigma", "sigma late")
    worst.update({k: 0.0 for k in keys})
    ctrl65 = 0.0
    for M in (100, 1000, 10000):
        for eta in (0.01, 0.1, 0.5, 0.99):
            tB = float(_get("speed.crossing_time")(M=M, K=1, eta_Y=eta))
            for Delta in (1.0, 10.0, 100.0):
                nbars = np.geomspace(10 * Delta, 1e7, pts)
                r = _ratios_63_65(M, eta, nbars, Delta)
                for k in keys[:4]:
                    worst[k] = max(worst[k], float(np.max(r[k])))
                late = nbars - Delta >= tB
                if np.any(late):
                    bound = _get("sampling.sigma_snapping")(Delta=Delta, Nbar=nbars[late])
                    worst["sigma late"] = max(worst["sigma late"],
                                              float(np.max(np.maximum(r["s_up"], r["s_dn"])[late] / bound)))
                half = np.geomspace(2 * Delta, 1e7, pts)                  # control: Delta = N-bar/2
                rc = _ratios_63_65(M, eta, 2 * Delta + 0 * half, Delta)
                ctrl65 = max(ctrl65, float(np.max(rc["eq. 65 down"])))
    # eq. 64: central differences of ln g along s, against the record (and attained)
    att, ctrl64 = 0.0, 0.0
    for M in (4, 100, 1000, 10000):
        for eta in (0.01, 0.1, 0.5, 0.99):
            s_star = float(_get("h.time_of")(h=math.log(M - 1) / M, M=M, eta_Y=eta))   # where e^{M h} = M - 1
            s = s_star * np.concatenate([np.geomspace(0.01, 100, pts), np.linspace(0.9, 1.1, 41)])
            ds = 1e-4 * s
            slope = np.abs(np.log(_g(s + ds, M, eta)) - np.log(_g(s - ds, M, eta))) / (2 * ds)
            bound = float(_get("sampling.log_slope_max")(M=M, eta_Y=eta))
            ratio = float(slope.max() / bound) / (1 + 1e-6)   # allowance: the central difference's error, ~1e-8
            worst["eq. 64"] = max(worst.get("eq. 64", 0.0), ratio)
            att = max(att, 1 - ratio)
            if M == 4:
                ctrl64 = max(ctrl64, float(slope.max() / (eta / 4)))
    worst["eq. 64 attained (1 - max ratio)"] = att
    ratios = [v for k, v in worst.items() if k != "eq. 64 attained (1 - max ratio)"]
    stat = max(max(ratios), 1 + att if att > 1e-3 else 0.0)
    return Outcome(
        measured=worst, predicted="every ratio <= 1; eq. 64's bound attained", discrepancy=float(stat), tolerance=1.0,
        criterion="max over the grids of eq. 63's |h(N_n) - h(N-bar)| / (h(N-bar) Delta/(N-bar - Delta)), eq. 64's "
                  "central-difference |d ln g/ds| / log_slope_max (1 + the shortfall if it is not attained within "
                  "1e-3), eq. 65's |g(N_n) - g(N-bar)| / (g(N-bar) eta_Y Delta/3) for N_n = N-bar +- Delta, |sigma| "
                  "/ (eta_Y Delta) and, past t_B, |sigma| / (2 Delta/(N-bar - Delta)); Delta <= N-bar/10; pass if <= "
                  "1",
        controls=[Control("eq. 65 for N_n = N-bar - Delta at Delta = N-bar/2 (Delta << N-bar dropped)", ctrl65, 1.0,
                          expected=1.25),
                  Control("eq. 64 without M/(M-1) (eta_Y/4) at M = 4", ctrl64, 1.0, expected=4 / 3)],
        details={"M": [100, 1000, 10000], "eta_Y": [0.01, 0.1, 0.5, 0.99], "Delta": [1, 10, 100], "points": pts},
    )


@check("scan_snap.sampling.lemma12_coverage", method="monte_carlo",
       covers=["scan_snap.sampling.theta_bound", "scan_snap.sampling.sigma_bound", "scan_snap.sampling.sigma_snapping",
               "scan_snap.sampling.count_radius"],
       title="Lemma 12 and Corollary 1 by Monte Carlo of uniform class sampling: max_n |theta_n| and max_n |sigma_n| "
             "within the records' bounds with probability >= 1 - delta",
       settings=[Setting("samples", "int", quick=20000, full=200000, low=100, high=10**8,
                         doc="sampled count vectors per case")])
def lemma12_coverage(ctx):
    """Cases (M, K, eta_Y, N): (1000, 4, 0.01, 2000) in the scanning stage (N-bar = 500 < t_0' = ln M/eta_Y = 691 per
    class, where
    theta_n ~ (N_n - N-bar)/N-bar), (1000, 4, 0.5, 20000) and (100, 10, 0.9, 20000) past the snap. Counts ~
    Multinomial(N, 1/K); theta_n = h(N_n)/h(N-bar) - 1 and sigma_n = g(N_n)/g(N-bar) - 1 (eqs. 66-69, 71; h of eq. 45,
    N-bar = ceil(N/K)). For delta in {0.05, 0.2}: the fraction of samples with max_n |theta_n| <= theta_bound(N, K,
    delta), with max_n |sigma_n| <= sigma_bound(eta_Y, r) (r = count_radius(N, delta/K)) and, where N-bar - r >= t_B,
    with max_n |sigma_n| <= sigma_snapping(r, N-bar).

    Criterion: max one-sided z = (1 - delta - coverage)/SE over z_threshold(family) (family-wise 1e-6), pass if <= 1.
    Control: the bound without its factor K (theta_bound/K ~ sqrt(ln(2K/delta)/(2N)), the 1/sqrt(N) rate of one class's
    frequency read as the count's relative error): its coverage falls far below 1 - delta in the scanning case;
    expected z from the exact binomial coverage p_1 of one class, as p_1^K (the classes treated as independent).

    Measured (quick, seeds 0-19): pass 20/20, worst statistic 0 (coverage >= 0.999 against 0.95); control
    (theta_bound/K) >= 19 x the threshold. About 1 s.
    """
    from scipy.stats import binom

    rng = ctx.rng
    R = ctx.setting("samples")
    cases = ((1000, 4, 0.01, 2000), (1000, 4, 0.5, 20000), (100, 10, 0.9, 20000))
    deltas = (0.05, 0.2)
    thr = z_threshold(3 * len(cases) * len(deltas))
    worst, ctrl, e_ctrl, rows = -np.inf, -np.inf, -np.inf, {}
    for M, K, eta, N in cases:
        counts = rng.multinomial(N, np.full(K, 1.0 / K), size=R)
        nbar = math.ceil(N / K)
        hN, gN = _h(nbar, M, eta), _g(nbar, M, eta)
        theta = np.abs(_h(counts, M, eta) / hN - 1).max(1)
        sigma = np.abs(_g(counts, M, eta) / gN - 1).max(1)
        tB = float(_get("speed.crossing_time")(M=M, K=1, eta_Y=eta))
        for d in deltas:
            tb = float(_get("sampling.theta_bound")(N=N, K=K, delta=d))
            r = float(_get("sampling.count_radius")(N=N, delta=d / K))
            sb = float(_get("sampling.sigma_bound")(eta_Y=eta, Delta=r))
            tests = {"theta": (theta <= tb).mean(), "sigma": (sigma <= sb).mean()}
            if nbar - r >= tB:
                tests["sigma late"] = (sigma <= float(_get("sampling.sigma_snapping")(Delta=r, Nbar=nbar))).mean()
            for k, cov in tests.items():
                worst = max(worst, float(_coverage_z(cov, 1 - d, R)))
            c_cov = (theta <= tb / K).mean()
            ctrl = max(ctrl, float(_coverage_z(c_cov, 1 - d, R)))
            k = np.arange(N + 1)                                # one class: P(|theta_1| <= tb/K), exact
            inside = np.abs(_h(k, M, eta) / hN - 1) <= tb / K
            p1 = float(binom.pmf(k, N, 1.0 / K)[inside].sum()) ** K   # the K classes as if independent
            e_ctrl = max(e_ctrl, (1 - d - p1) / math.sqrt(max(p1 * (1 - p1), 1 / R) / R))
            rows[f"M={M}, K={K}, eta_Y={eta}, N={N}, delta={d}"] = {
                "theta_bound": tb, "coverage": {k: float(v) for k, v in tests.items()}, "max |theta| (median)":
                float(np.median(theta)), "sigma_bound": sb, "control coverage (theta_bound/K)": float(c_cov)}
    return Outcome(
        measured={"max one-sided z": worst}, predicted="coverage >= 1 - delta",
        discrepancy=max(float(worst / thr), 0.0),
        tolerance=1.0,
        criterion="max over cases, delta and bounds (theta_bound, sigma_bound, sigma_snapping) of z = (1 - delta - "
                  f"coverage)/SE / z_threshold({3 * len(cases) * len(deltas)}) = {thr:.2f}; pass if <= 1",
        controls=[Control("theta_bound/K (no factor K): max z / threshold", ctrl / thr, 1.0, expected=e_ctrl / thr)],
        details={"cases": rows, "samples": R},
    )
