"""Token scanning (Tian et al. 2023, §5 after Theorem 3, and App. E eq. 108) along the attention ODE (eq. 10
with Theorem 1's beta = E', class sum averaged, in the time tau = eta_Z int gamma).

Contains
--------
``scan_snap.attention.scanning_order``
    With Z(0) = 0 the distinct tokens of a class are dropped in order of increasing P(l|n): the normalised
    attention f_nl of each non-dominant distinct token peaks and then falls, the peaks come in order of P, the
    ones that do not peak within the horizon are the most probable, the dominant one never peaks, and the order
    of the f_nl by P holds at every time. Eq. 108's ratio of velocities equals f_nl^2/f_nl'^2 (printed as
    dz_l/z_l'); with random Z(0), eq. 11 holds with r(0) built from z_ml'(0) (printed as z_m'l'(0)).
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.models.scan_snap import attention_velocity, single_common
from verify.settings import Setting


def _integrate(classes, taus, Z0=None):
    """Eq. 10 (averaged class sum) in tau from Z0 (default 0): every query row, at the times ``taus``."""
    from scipy.integrate import solve_ivp

    M = classes.M
    rows = np.unique(classes.psi)
    Zs = np.zeros((M, M)) if Z0 is None else np.array(Z0, dtype=float)

    def rhs(_, y):
        Z = Zs.copy()
        Z[rows] = y.reshape(len(rows), M)
        return attention_velocity(classes, Z, 1.0 / classes.K)[0][rows].ravel()

    sol = solve_ivp(rhs, (0.0, taus[-1]), Zs[rows].ravel(), t_eval=taus, method="DOP853", rtol=1e-11, atol=1e-13)
    if not sol.success:
        raise RuntimeError(f"solve_ivp: {sol.message}")
    out = np.repeat(Zs[None], len(taus), axis=0)
    out[:, rows] = sol.y.T.reshape(len(taus), len(rows), M)
    return out


def _f(classes, Z):
    c = classes.attention(Z)
    return c / np.linalg.norm(c, axis=1, keepdims=True)


_EQ108 = ("Eq. 108 (proof of Theorem 3) writes 'dz_l/z_l' = r_{l/l'|n}(t) + 1'; the ratio is of the velocities, "
          "dz_l/dz_l' = f_nl^2/f_nl'^2 (eq. 98), which is what eqs. 109-111 integrate. The logits' ratio z_l/z_l' is "
          "another quantity (0/0 at Z(0) = 0, and away from r + 1 later).")
_PRIOR = ("§5, 'Initial value as prior': r_{l/l'|n}(0) is printed with exp(z_m'l'(0)) in the denominator; both logits "
          "belong to the query m = psi(n) of class n, so it is exp(z_ml'(0)) (with a random Z(0) the printed form uses "
          "another query's logit and eq. 11 fails with it).")


@check("scan_snap.attention.scanning_order", method="exact_flow",
       covers=["scan_snap.attention.relative_gain"],
       title="Token scanning (§5): with Z(0) = 0 distinct tokens drop in order of increasing P(l|n) along eq. 10; "
             "eq. 108's velocity ratio; eq. 11 from a random Z(0) with r(0) from z_ml'(0)",
       refutes={"Tian et al. 2023, eq. 108 (proof of Theorem 3)": _EQ108,
                "Tian et al. 2023, §5 'Initial value as prior' (r_{l/l'|n}(0))": _PRIOR},
       settings=[Setting("points", "int", quick=300, full=3000, low=20, high=10**6,
                         doc="ODE output times (log-spaced in tau up to 1e7)")])
def scanning_order(ctx):
    """(a) single_common(K, 6) with K in {3, 4} (one shared query, one common token, distinct weights linspace(1, 2, 6)
    in every class), Z(0) = 0, tau in [1e-3, 1e7] log-spaced: for class 0's distinct tokens, the time at which f_nl
    peaks, and the order of the f_nl. (b) At every output time, eq. 108: the velocity ratio dz_l/dz_l' (from eq. 10)
    against f_nl^2/f_nl'^2 for the dominant token l and every other distinct token l'. (c) single_common(4, 5) with one
    query per class and Z(0) ~ N(0, 0.3^2) on every query row (ctx.rng): eq. 11, r(t) = r(0) e^{2 (z_ml(t) - z_ml(0))},
    with r(0) = (P_l e^{z_ml(0)}/(P_l' e^{z_ml'(0)}))^2 - 1.

    Criterion: the number of order violations (a peak out of order of P; a non-peaking token less probable than a
    peaking one; the dominant token peaking; a pair of f_nl out of the order of P at some time) must be 0, plus max(eq.
    108 relative error / 1e-9, eq. 11 relative error / 1e-7) <= 1 (ODE tolerance rtol 1e-11 over tau up to 1e7).
    Controls: the reversed order (higher P dropped first): its violations; eq. 108 as printed (dz_l/z_l'); r(0) with
    z_m'l'(0), m' the next class's query.

    Measured (quick, seeds 0-19): pass 20/20, 0 violations (K = 3: peaks at tau = 49, 101, 263, 1.6e3; the two most
    probable do not peak by 1e7), eq. 108 to 1e-15, eq. 11 to 1e-9; controls: reversed order 6+ violations, eq. 108
    printed >= 0.04 relative, z_m'l'(0) >= 0.1 relative. About 2 s.
    """
    pts = ctx.setting("points")
    taus = np.concatenate([[0.0], np.geomspace(1e-3, 1e7, pts)])
    viol, rev, e108, c108, rows = 0, 0, 0.0, np.inf, {}
    for K in (3, 4):
        cl = single_common(K, 6)
        Zt = _integrate(cl, taus)
        m = cl.psi[0]
        dts = np.flatnonzero(cl.distinct[0])
        order = dts[np.argsort(cl.P[0, dts])]                     # increasing P
        F = np.array([_f(cl, Z)[0] for Z in Zt])
        peak = np.array([int(np.argmax(F[:, l])) for l in order])
        peaked = peak < len(taus) - 1
        tpk = taus[peak]
        # order of the peaks among the peaked; no peak after a non-peak; the dominant never peaks
        viol += int(np.sum(np.diff(tpk[peaked]) <= 0)) + int(np.any(peaked[1:] & ~peaked[:-1])) + int(peaked[-1])
        viol += int(np.sum(np.diff(F[:, order], axis=1) <= 0))     # f in the order of P at every time
        rev += int(np.sum(np.diff(tpk[peaked][::-1]) <= 0)) + int(np.sum(np.diff(F[:, order[::-1]], axis=1) <= 0))
        l0 = order[-1]
        for Z in Zt[1:]:
            v = attention_velocity(cl, Z, 1.0 / K)[0][m]
            f = _f(cl, Z)[0]
            for lp in order[:-1]:
                e108 = max(e108, abs(v[l0] / v[lp] / (f[l0] ** 2 / f[lp] ** 2) - 1))
                c108 = min(c108, abs(v[l0] / Z[m, lp] / (f[l0] ** 2 / f[lp] ** 2) - 1))
        rows[f"K={K}"] = {"P (increasing)": cl.P[0, order].tolist(),
                          "peak tau (None: no peak by 1e7)": [float(t) if p else None for t, p in zip(tpk, peaked)],
                          "f at tau = 0, end": [F[0, order].tolist(), F[-1, order].tolist()]}
    # (c) random Z(0), one query per class: eq. 11 with r(0) from z_ml'(0), against z_m'l'(0)
    cl = single_common(4, 5, shared_query=False)
    Z0 = np.zeros((cl.M, cl.M))
    qs = np.unique(cl.psi)
    Z0[qs] = 0.3 * ctx.rng.standard_normal((len(qs), cl.M))
    taus_c = np.concatenate([[0.0], np.geomspace(1e-2, 1e4, 60)])
    Zt = _integrate(cl, taus_c, Z0)
    e11, c11 = 0.0, np.inf
    for n in range(cl.K):
        m, m2 = cl.psi[n], cl.psi[(n + 1) % cl.K]
        d = np.flatnonzero(cl.distinct[n])
        l, lp = d[-1], d[0]
        P = cl.P[n]
        r0 = (P[l] * np.exp(Z0[m, l]) / (P[lp] * np.exp(Z0[m, lp]))) ** 2 - 1
        r0p = (P[l] * np.exp(Z0[m, l]) / (P[lp] * np.exp(Z0[m2, lp]))) ** 2 - 1
        for Z in Zt:
            f = _f(cl, Z)[n]
            r = f[l] ** 2 / f[lp] ** 2 - 1
            chi = np.exp(2 * (Z[m, l] - Z0[m, l]))
            e11 = max(e11, abs(r - r0 * chi) / abs(r))
            c11 = min(c11, abs(r - r0p * chi) / abs(r))
    stat = viol + max(e108 / 1e-9, e11 / 1e-7)
    return Outcome(
        measured={"order violations": viol, "eq. 108 error": e108, "eq. 11 error (random Z(0))": e11},
        predicted="drop order = increasing P; eqs. 108, 11 exact", discrepancy=float(stat), tolerance=1.0,
        criterion="count of order violations (peaks out of the order of P, a non-peaking token less probable than a "
                  "peaking one, the dominant token peaking, f_nl out of the order of P at some time) plus max(eq. "
                  "108 relative error / 1e-9, eq. 11 relative error / 1e-7): ODE tolerance rtol 1e-11",
        controls=[Control("reversed order (higher P dropped first): violations", float(rev), 1.0,
                          expected=float(rev)),
                  Control("eq. 108 as printed (dz_l/z_l'): min relative error / 1e-9", c108 / 1e-9, 1.0,
                          expected=c108 / 1e-9),
                  Control("r(0) with z_m'l'(0) (another query): min relative error of eq. 11 / 1e-7", c11 / 1e-7, 1.0,
                          expected=c11 / 1e-7)],
        details={"scanning": rows},
    )
