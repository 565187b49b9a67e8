"""Eq. 13 of Scan and Snap (Tian et al. 2023) with a constant C0 that does not come from the run.

* ``scan_snap.attention.eq13_snap_constant``: in Theorem 4's setting (K classes sharing the query, one common
  token, the same distinct weights in every class) the exact rates of eq. 10 are the records symmetric_xi and
  symmetric_common_rate (checked against the velocity to round-off); eq. 13 holds with C0 = rho0^4/(K - 1)
  (scan_snap.attention.snap_constant) to first order in q0 = 1/rho0^2: Theorem 4's z_ml(t) and B_n(t) with that C0
  stay, at every time, inside the bracket that the a priori range of the neglected terms allows; the paper's
  C0 = rho0^4/K leaves it.
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.models.scan_snap import integrate_shared_query, shared_query_velocity, single_common
from verify.settings import Setting

from .attention_flow import _bracket


def _get(name):
    return theory.get(f"scan_snap.{name}")


def a_priori_ranges(q0, K, y):
    """Ranges of eps (z rate) and delta (xi_n) relative to eq. 13 with C0 = rho0^4/(K-1), from the exact symmetric
    rates -(K-1) q^2/(1 + (K-1) q) and (K-1) q^2/((1-q)(1 + (K-1) q)) with q/q_h in [e^{-2y}, 1/(1-q0)] and q <=
    q0/(1-q0) (q_h = e^{2z}/rho0^2 <= q0 since z_CT <= 0 by Theorem 2(b); the normaliser grows by at most e^{2y}, y
    the largest distinct-token growth). ``y`` may be an array over time."""
    qmax = q0 / (1 - q0)
    lo = np.atleast_1d(np.exp(-4 * np.asarray(y, dtype=float)) / (1 + (K - 1) * qmax) - 1)
    eps_hi = 1 / (1 - q0) ** 2 - 1
    dlt_hi = 1 / ((1 - q0) ** 2 * (1 - qmax)) - 1
    return lo, np.full_like(lo, eps_hi), lo, np.full_like(lo, dlt_hi)


def distinct_growth_bound(a, B, K):
    """Smallest y >= 0 with y = a e^{2y} B/K (fixed point from 0): the largest distinct-token growth when its f^2
    is at most a e^{2y} (normaliser >= the distinct tokens' initial mass) and it grows at f^2 dB_n/K (eq. 98
    averaged); inf where no fixed point exists."""
    y = np.zeros_like(np.asarray(B, dtype=float))
    for _ in range(200):
        y = a * np.exp(2 * y) * B / K
    ok = a * np.exp(2 * y) * B / K - y <= 1e-12 * np.maximum(1, y)
    return np.where(ok & (2 * a * B / K * np.exp(2 * y) < 1), y, np.inf)


@check("scan_snap.attention.eq13_snap_constant", method="exact_flow",
       covers=["scan_snap.attention.snap_constant", "scan_snap.attention.symmetric_xi",
               "scan_snap.attention.symmetric_common_rate", "scan_snap.attention.common_logit",
               "scan_snap.attention.growth"],
       decides=["scan_snap.attention.snap_constant"],
       title="Eq. 13 with an independent C0 = rho0^4/(K-1): Theorem 4's z_ml(t), B_n(t) inside the a priori bracket "
             "along eq. 10; exact symmetric rates; C0 = rho0^4/K rejected",
       settings=[Setting("K", "ints", quick=(4, 10), full=(2, 4, 10), low=2, high=64, doc="classes sharing the query"),
                 Setting("D", "int", quick=32, full=64, low=2, high=512, doc="distinct tokens per class"),
                 Setting("common_weight", "float", quick=0.5, full=0.5, low=1e-3, high=10.0,
                         doc="weight of the common token (distinct weights linspace(1, 2, D))")])
def eq13_snap_constant(ctx):
    """Eq. 13 against eq. 10 (averaged class sum) with C0 fixed before the run.

    (i) Exact symmetric rates: at 50 random symmetric states (common logit ~ U(-3, 0), the same distinct logits ~
    U(0, 2) in every class), the eq. 10 velocity of the common token / eta_Z gamma and xi_n/gamma against the records
    symmetric_common_rate and symmetric_xi at q = f_l^2: relative error / 1e-12.
    (ii) Along the ODE (eta_Y = 1, eta_Z = 20 (K - 1), t in [1e-2, 1e8]): if dz/dt = -(1 + eps) eta_Z gamma e^{4z}/C0
    and dB_n/dt = (1 + delta) eta_Z gamma e^{4z}/C0 with eps, delta in ranges fixed before the run (a_priori_ranges:
    from the exact rates, q0 = 1/rho0^2 and the bound y(t) on the distinct tokens' growth computed from the closed-form
    B_n), then z and B_n lie between the closed forms at the ends of the ranges (_bracket); statistic = max over t and
    K of |form - ODE|/(bracket width + 1e-9), pass if <= 1. Control: the same test with the paper's C0 = rho0^4/K.

    Measured (deterministic; 20/20 seeds): statistic 0.81 (K = 10; 0.59 at K = 4), relative errors of z, B_n 1-3%,
    the ODE inside the bracket; symmetric rates to 1e-15; control (rho0^4/K) 20 x the width. About 2 s.
    """
    details, worst, ctrl, e_ctrl = {}, 0.0, 0.0, 0.0
    # (i) exact symmetric rates
    sym_err = 0.0
    rng = ctx.rng
    for K in ctx.setting("K"):
        classes = single_common(K, 6, common_weight=ctx.setting("common_weight"))
        P = classes.P[:, classes.P.sum(0) > 0]
        for _ in range(25):
            zd = rng.uniform(0, 2, 6)
            z = np.concatenate([[rng.uniform(-3, 0)], np.tile(zd, K)])
            v, xi, f = shared_query_velocity(P, z, 1.0 / K)
            q = f[0, 0] ** 2
            r1 = float(_get("attention.symmetric_common_rate")(q=q, K=K))
            r2 = float(_get("attention.symmetric_xi")(q=q, K=K))
            sym_err = max(sym_err, abs(v[0] - r1) / abs(r1), float(np.max(np.abs(xi - r2))) / abs(r2))
    # (ii) the ODE against the bracket with an independent C0
    D, cw = ctx.setting("D"), ctx.setting("common_weight")
    for K in ctx.setting("K"):
        classes = single_common(K, D, common_weight=cw)
        P = classes.P[:, classes.P.sum(0) > 0]
        M = classes.M
        rho0 = float(np.linalg.norm(P[0]) / P[0, 0])
        q0 = 1 / rho0**2
        w2 = P[0, 1:1 + D] ** 2
        a = float(w2.max() / w2.sum())
        eta_Y, eta_Z = 1.0, 20.0 * (K - 1)
        ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e8, 200)])
        z, B = integrate_shared_query(P, M, eta_Y, eta_Z, ts, 1.0 / K)
        zc, Bn = z[:, 0], B[:, 0]
        G = _get("speed.gamma_integral")(t=ts, M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z)
        sel = ts > 0
        Cd = float(_get("attention.snap_constant")(rho0=rho0, K=K))
        Cp = float(_get("attention.snap_constant")(rho0=rho0, K=K, printed=True))
        kw = dict(t=ts, M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z)
        # a priori ranges of eps, delta relative to eq. 13 with C0 = Cd, and the bracket they give
        dhi0 = a_priori_ranges(q0, K, 0.0)[3][0]
        y = distinct_growth_bound(a, _get("attention.growth")(**kw, C0=Cd) * (1 + dhi0), K)
        e_lo, e_hi, d_lo, d_hi = a_priori_ranges(q0, K, y)
        (z_lo, _), (B_lo, _), _ = _bracket(G, Cd, 1, e_hi, d_lo)      # fastest fall, slowest growth of B
        (_, z_hi), (_, B_hi), _ = _bracket(G, Cd, 1, e_lo, d_hi)
        zl, zh = np.minimum(z_lo, z_hi), np.maximum(z_lo, z_hi)
        bl, bh = np.minimum(B_lo, B_hi), np.maximum(B_lo, B_hi)
        wz, wB = zh - zl + 1e-9, bh - bl + 1e-9
        inside = float(max(np.max((zl - zc)[sel] / wz[sel]), np.max((zc - zh)[sel] / wz[sel]),
                           np.max((bl - Bn)[sel] / wB[sel]), np.max((Bn - bh)[sel] / wB[sel])))
        forms = {}
        for name, C0 in (("derived rho0^4/(K-1)", Cd), ("printed rho0^4/K", Cp)):
            zf, Bf = _get("attention.common_logit")(**kw, C0=C0), _get("attention.growth")(**kw, C0=C0)
            forms[name] = zf
            ratio = float(max(np.max(np.abs(zf - zc)[sel] / wz[sel]), np.max(np.abs(Bf - Bn)[sel] / wB[sel])))
            details[f"K = {K}, C0 {name}"] = {
                "C0": C0, "max |form - ODE|/width": ratio,
                "z_ml(end): ODE, form": [float(zc[-1]), float(zf[-1])],
                "B_n(end): ODE, form": [float(Bn[-1]), float(Bf[-1])],
                "max relative error of z, B": [float(np.max(np.abs(zf - zc)[sel] / np.abs(zc[sel]))),
                                                float(np.max(np.abs(Bf - Bn)[sel] / Bn[sel]))]}
            if name.startswith("derived"):
                worst = max(worst, ratio)
            else:
                ctrl = max(ctrl, ratio)
        # expected for the control: the printed form against the derived one, over the bracket width
        e_ctrl = max(e_ctrl, float(np.max(np.abs(forms["printed rho0^4/K"] - forms["derived rho0^4/(K-1)"])[sel]
                                          / wz[sel])))
        details[f"K = {K}, bracket"] = {"q0": q0, "K q0": K * q0, "eps range (end)": [float(e_lo[-1]), float(e_hi[-1])],
                                         "delta range (end)": [float(d_lo[-1]), float(d_hi[-1])],
                                         "y(end) (distinct growth bound)": float(y[-1]),
                                         "ODE outside the bracket (max excess/width, <= 0 inside)": inside}
        worst = max(worst, 1.0 + inside if inside > 0 else 0.0)
    stat = max(worst, sym_err / 1e-12)
    return Outcome(
        measured={"max |form - ODE|/bracket width (C0 = rho0^4/(K-1))": worst, "symmetric rates rel error": sym_err},
        predicted="<= 1", discrepancy=float(stat), tolerance=1.0,
        criterion="max over K, t of |Theorem 4 form - eq. 10 ODE|/(width of the a priori bracket + 1e-9) for z_ml and "
                  "B_n "
                  "with C0 = rho0^4/(K-1) fixed before the run (the ODE must also lie inside the bracket), and the "
                  "exact symmetric rates to 1e-12; pass if <= 1",
        controls=[Control("C0 = rho0^4/K (eq. 13 as printed): max |form - ODE|/bracket width", ctrl, 1.0,
                          expected=float(e_ctrl))],
        details=details,
    )
