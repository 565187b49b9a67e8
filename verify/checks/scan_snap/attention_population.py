"""Eq. 10 (Lemma 4) of Scan and Snap (Tian et al. 2023) against the population dynamics it summarises.

* ``scan_snap.attention.eq10_population``: the population (Y, Z) dynamics (eq. 4 with a learned decoder, every
  class's update weighted 1/K per step: the expected batch-1 step) against the eq. 10 ODE (class sum averaged,
  Theorem 1's beta = E'), for the common-token logit z_ml(t), the dominant distinct token's logit and B_n(t), and
  the decoder's speed coefficient gamma(t) (its peak time, the snap-time clock t/K, and insight (a)'s 1/eta_Y).
  With the decoder on the modified gradient of eq. 26 (the dynamics Theorem 5 solves) eq. 10 is the large-M limit;
  with the true gradient of eq. 3 the cross-class coefficient is O(1/M), not E', and eq. 10 overstates the
  attention dynamics by a factor that grows with M.
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.models.scan_snap import integrate_shared_query, population_growth_run, single_common
from verify.settings import Setting


def _get(name):
    return theory.get(f"scan_snap.{name}")


def _late_error(pop, ode, window):
    return float(np.max(np.abs(pop[window] - ode[window]) / np.abs(ode[window])))


_REFUTES = {
    "Tian et al. 2023, Lemma 4 (eq. 10) with Theorem 1's beta_nn' = E'_nn' (eqs. 9, 89) for the model's own gradient":
        "E' is the cross-class coefficient of the modified decoder gradient (eq. 26; Lemma 3, Theorem 5). Under the "
        "gradient of the model (eqs. 3, 7) the decoder is Y = sum_n f_n A_n^T with A_n ~ zeta_n, so g_n = Y(e_n - "
        "alpha_n) has beta_nn' ~ -zeta_n'^T zeta_n = M/(M-1)^2 = O(1/M) plus O(f_n^T f_n') corrections, not E' = "
        "O(f_n^T f_n'). In the population model (K = 4, one common token, f_n^T f_n' = 0.078, eta_Z/eta_Y = 0.01) "
        "eq. 10 overstates z_ml(t) by 3.4x at M = 100 and 9x at M = 300 (and matches at M = 26 only because 1/M and "
        "f^T f' are there of the same size); with the decoder on eq. 26 the same population matches eq. 10 to 10% "
        "(M = 100) and 2% (M = 300). Assumption 2 (|lambda_i(E)| >= 6/sqrt(M)) puts f^T f' M >= 6 sqrt(M) >> 1, the "
        "regime where the two differ most.",
}


@check("scan_snap.attention.eq10_population", method="exact_flow",
       covers=["scan_snap.speed.gamma", "scan_snap.speed.gamma_peak_time", "scan_snap.speed.snap_time",
               "scan_snap.attention.common_pair_term"],
       refutes=_REFUTES,
       title="Eq. 10 vs the population model: it is the large-M limit with eq. 26's modified decoder gradient, and "
             "overstates the true-gradient dynamics by ~E' M; gamma(t), its peak and the t/K clock hold",
       settings=[Setting("M", "ints", quick=(26, 100, 300), full=(26, 100, 300), low=26, high=5000,
                         doc="vocabulary sizes (K = 4, D = 5, one common token; padded with unused tokens)"),
                 Setting("ratio", "float", quick=0.01, full=0.01, low=1e-4, high=1.0, doc="eta_Z/eta_Y (eta_Y = 1)")])
def eq10_population(ctx):
    """Population model (expected batch-1 step, Y(0) = Z(0) = 0, eta_Y = 1, eta_Z = ratio) against eq. 10.

    Data: single_common(4, 5) (common weight 1, distinct weights linspace(1, 2, 5), shared query), padded to each M
    (unused tokens: the output softmax size of the h recursion). Window: t in [10 t_0, 15 t_0], t_0 = snap_time.
    Criterion (statistic = max of the ratios, pass if <= 1):
    (a) modified decoder (eq. 26): max relative error of z_ml, z_ml0 and B_n (eta_Z sum of the Theorem-1 xi_n of the
    state) against the ODE on the window, at M >= 100, over tol(M) = 2/(q0 M): the neglected O(1/M) terms of beta
    (|delta_3| < 3/M, eq. 89) relative to beta ~ E' ~ q0 = f_n^T f_n';
    (b) gamma(t) (class mean of g_l0/f_l0, both decoders): |gamma_pop/gamma - 1| over t >= t_peak/2 within lambda_1 =
    (K - 1) q0 (Theorem 1's corrections are O(|lambda_1(E)|)), and the peak step within 1 + 5% of gamma_peak_time,
    here and at eta_Y = 0.25, 0.5 (M = 26; insight (a): t_0, t_peak ~ 1/eta_Y).
    Controls: eq. 10 for the true gradient (the refuted statement): error at the largest M over tol(M), expected (1 -
    (M/(M-1)^2)/E')/tol (leading-order beta of the true gradient); the literal class sum (factor K) for the modified
    decoder; gamma's peak on the clock h(t) (per-class count = total steps, no /K).

    Scope of (a)'s tolerance: 2/(q0 M) is the 1/M part; at M = 1000 (--set M=1000) the modified decoder is 3-5.5% off
    on [10, 15] t_0 against tol 0.026: a floor of a few % from gamma (2%), the O(1/t) lag of the left-point steps and
    eta_Z/eta_Y, so the full profile runs the quick sizes; the true gradient is 30x off there (z_ml -0.0014 against
    -0.042; beta measured 0.0032 against E' = 0.068).

    Measured (deterministic; 20/20 seeds): statistic 0.39 ((a): errors 0.10 at M = 100, 0.02 at M = 300); the true
    gradient 0.73, 0.90 off (z_ml 3.4x, 9x too small against eq. 10); gamma within 7%, peaks at round(t_peak);
    controls 10.5, 8.3, 7.7 x. About 5 s.
    """
    Ms = list(ctx.setting("M"))
    K, D, eta_Y, eta_Z = 4, 5, 1.0, ctx.setting("ratio")
    details, stat_a, ctrl_true, e_true, ctrl_lit, e_lit = {}, 0.0, 0.0, 0.0, np.inf, np.inf
    g_err, peak_err = 0.0, 0.0
    for M in Ms:
        classes = single_common(K, D, vocabulary=M if M > 26 else None)
        M = classes.M
        P = classes.P[:, classes.P.sum(0) > 0]
        q0 = float((P[0, 0] / np.linalg.norm(P[0])) ** 2)
        lam1 = (K - 1) * q0
        Ep = q0 / ((1 - q0) * (1 + (K - 1) * q0))                 # E'_nn' of the symmetric case (symmetric_xi)
        t0 = float(_get("speed.snap_time")(M=M, K=K, eta_Y=eta_Y))
        steps = int(15 * t0)
        ts = np.arange(steps + 1, dtype=float)
        win = ts >= 10 * t0
        zo, Bo = integrate_shared_query(P, M, eta_Y, eta_Z, ts, 1.0 / K)
        zl, _ = integrate_shared_query(P, M, eta_Y, eta_Z, ts, 1.0)
        tol = 2 / (q0 * M)
        tp = float(_get("speed.gamma_peak_time")(M=M, K=K, eta_Y=eta_Y))
        gam = _get("speed.gamma")(t=ts[:-1], M=M, K=K, eta_Y=eta_Y)
        row = {"M": M, "q0 = f_n^T f_n'": q0, "E'_nn'": Ep, "M/(M-1)^2": M / (M - 1) ** 2, "tol(M) = 2/(q0 M)": tol}
        for mod in (True, False):
            run = population_growth_run(classes, eta_Y, eta_Z, None, steps=steps, modified=mod)
            z = run["z"]
            B = eta_Z * np.concatenate([np.zeros((1, K)), np.cumsum(run["xi"], 0)])
            errs = [_late_error(z[:, 0], zo[:, 0], win), _late_error(z[:, D], zo[:, D], win),
                    _late_error(B[:, 0], Bo[:, 0], win)]
            gm = run["gamma"].mean(1)
            w = ts[:-1] >= tp / 2
            g_err = max(g_err, float(np.max(np.abs(gm[w] / gam[w] - 1))) / lam1)
            peak = int(np.argmax(gm))
            peak_err = max(peak_err, abs(peak - tp) / (1 + 0.05 * tp))
            key = "modified (eq. 26)" if mod else "true gradient (eq. 3)"
            # Theorem 1's decomposition of g_0 = Y (e_0 - alpha_0) in the basis F at the end: beta_0n' = -coef/coef_0
            c = classes.attention(run["Z"])
            F = (c / np.linalg.norm(c, axis=1, keepdims=True)).T
            a = np.exp(run["Y"].T @ F[:, 0] - np.max(run["Y"].T @ F[:, 0]))
            a /= a.sum()
            e = -a
            e[classes.label[0]] += 1.0
            g0 = run["Y"] @ e
            coef = np.linalg.lstsq(F, g0, rcond=None)[0]
            row[key] = {"max rel error z_CT, z_l0, B_n in the window": errs,
                        "z_CT(end): population, eq. 10": [float(z[-1, 0]), float(zo[-1, 0])],
                        "gamma peak step (predicted)": [peak, tp],
                        "max |gamma_pop/gamma - 1|": float(np.max(np.abs(gm[w] / gam[w] - 1))),
                        "beta_0n' of g at the end (mean over n'; E' and M/(M-1)^2 above)":
                            float(np.mean(-coef[1:] / coef[0])),
                        "|g - its projection on span F| / |g| at the end": float(np.linalg.norm(g0 - F @ coef)
                                                                                / np.linalg.norm(g0))}
            if mod and M >= 100:
                stat_a = max(stat_a, max(errs) / tol)
            if mod and M == max(Ms):
                ctrl_lit = _late_error(z[:, 0], zl[:, 0], win) / tol
                e_lit = (1 - 1 / K) / tol                         # the literal sum moves z about K times as fast
            if not mod and M == max(Ms):
                ctrl_true = max(errs) / tol
                e_true = (1 - (M / (M - 1) ** 2) / Ep) / tol
        details[f"M = {M}"] = row
    # insight (a) in the population: the peak of gamma at eta_Y = 0.25, 0.5 (M = 26), and the clock without /K
    classes = single_common(K, D)
    M = classes.M
    peaks, ctrl_clock, e_clock = {}, np.inf, np.inf
    for eY in (0.25, 0.5, 1.0):
        tp = float(_get("speed.gamma_peak_time")(M=M, K=K, eta_Y=eY))
        run = population_growth_run(classes, eY, 0.0, None, steps=int(3 * tp) + 5)
        peak = int(np.argmax(run["gamma"].mean(1)))
        peaks[str(eY)] = [peak, tp]
        peak_err = max(peak_err, abs(peak - tp) / (1 + 0.05 * tp))
        tp1 = float(_get("speed.gamma_peak_time")(M=M, K=1, eta_Y=eY))    # the clock h(t): no /K
        ctrl_clock = min(ctrl_clock, abs(peak - tp1) / (1 + 0.05 * tp1))
        e_clock = min(e_clock, abs(tp - tp1) / (1 + 0.05 * tp1))
    details["gamma peak step vs gamma_peak_time (M = 26, eta_Z = 0)"] = peaks
    stat = max(stat_a, g_err, peak_err)
    return Outcome(
        measured={"(a) modified decoder: max error/tol(M), M >= 100": stat_a, "(b) max |gamma_pop/gamma - 1|/lambda_1":
                  g_err, "(b) max |peak - t_peak|/(1 + 0.05 t_peak)": peak_err},
        predicted="<= 1", discrepancy=float(stat), tolerance=1.0,
        criterion="max of: (a) modified-decoder population vs eq. 10, max relative error of z_ml, z_ml0, B_n on t in "
                  "[10, 15] t_0 over 2/(q0 M) (M >= 100); (b) |gamma_pop/gamma - 1| for t >= t_peak/2 over lambda_1 = "
                  "(K-1) q0, and |argmax gamma_pop - gamma_peak_time| over 1 + 5% (eta_Y = 0.25, 0.5, 1); pass if <= 1",
        controls=[Control(f"eq. 10 for the true gradient (refuted), M = {max(Ms)}: max error/tol(M)", float(ctrl_true),
                          1.0, expected=float(e_true)),
                  Control(f"the literal class sum (factor K), modified decoder, M = {max(Ms)}: max error/tol(M)",
                          float(ctrl_lit), 1.0, expected=float(e_lit)),
                  Control("gamma on the clock h(t) (no /K): min over eta_Y of |peak - t_peak(K = 1)|/(1 + 5%)",
                          float(ctrl_clock), 1.0, expected=float(e_clock))],
        details=details,
    )
