"""Checks of ``scan_snap.common_tokens`` (Tian et al. 2023, Corollary 2, eqs. 101-107): several common tokens in
the symmetric case, on the attention ODE (eq. 10) and on the expected batch-1 dynamics with a learned decoder.

Contains
--------
``scan_snap.common_tokens.corollary2_flow``
    Symmetric classes (one query, distinct tokens with the same probabilities in every class, common tokens
    with class-independent probabilities, Z(0) = 0): along eq. 10 every common-token logit falls at every
    time, the symmetry of eqs. 101-106 persists, and the velocity equals the record ``common_tokens.rate``; in
    the expected batch-1 dynamics (Lemma 1 with a learned Y) every common-token logit falls at every step.
    Control: Corollary 2's condition (3) broken (a common token weighted by class), which makes it rise.
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.models.scan_snap import SequenceClasses, attention_velocity
from verify.settings import Setting


def common_classes(common_weights, K: int, D: int = 5) -> SequenceClasses:
    """K classes sharing one query; C common tokens (ids 0..C-1) with weights ``common_weights`` ((C,) the same in
    every class, or (K, C)); D distinct tokens per class with weights linspace(1, 2, D) (the same in every class)."""
    w = np.asarray(common_weights, dtype=float)
    Wc = np.broadcast_to(w, (K, w.shape[-1]))
    C = Wc.shape[1]
    n_ctx = C + K * D
    M = n_ctx + 1 + K
    P = np.zeros((K, M))
    P[:, :C] = Wc
    for n in range(K):
        P[n, C + n * D:C + (n + 1) * D] = np.linspace(1.0, 2.0, D)
    P /= P.sum(1, keepdims=True)
    return SequenceClasses(P, np.full(K, n_ctx), n_ctx + 1 + np.arange(K))


def _ode(classes, tau_max, points):
    """Eq. 10 with the class sum averaged, in the time tau = eta_Z int gamma (dz/dtau = attention_velocity / K):
    the query row at ``points`` times in [0, tau_max] (DOP853)."""
    from scipy.integrate import solve_ivp

    m = classes.psi[0]
    M = classes.M

    def rhs(_, z):
        Z = np.zeros((M, M))
        Z[m] = z
        return attention_velocity(classes, Z, 1.0 / classes.K)[0][m]

    ts = np.linspace(0.0, tau_max, points)
    sol = solve_ivp(rhs, (0.0, tau_max), np.zeros(M), t_eval=ts, method="DOP853", rtol=1e-11, atol=1e-13)
    if not sol.success:
        raise RuntimeError(f"solve_ivp: {sol.message}")
    return sol.y.T


def _state_stats(classes, z, C, D, record=True):
    """At one state z (query row): CT velocities, their error against the record, the symmetry residuals."""
    K, M = classes.K, classes.M
    Z = np.zeros((M, M))
    Z[classes.psi[0]] = z
    v = attention_velocity(classes, Z, 1.0 / K)[0][classes.psi[0]]
    c = classes.attention(Z)
    f = c / np.linalg.norm(c, axis=1, keepdims=True)
    if not record:
        return {"v": v[:C]}
    q = float((f[0] @ f[1]))
    rate = theory.get("scan_snap.common_tokens.rate")
    pred = np.array([float(rate(K=K, q=q, f_l=f[0, l])) for l in range(C)])
    dts = np.array([z[C + n * D:C + (n + 1) * D] for n in range(K)])            # z_l of phi-images
    norms = np.linalg.norm(classes.P * np.exp(z - z.max()), axis=1)
    return {"v": v[:C], "rate error": float(np.abs(v[:C] - pred).max() / np.abs(pred).max()),
            "symmetry": float(max(np.ptp(dts, axis=0).max(), np.ptp(norms) / norms.max()))}


@check("scan_snap.common_tokens.corollary2_flow", method="exact_flow",
       covers=["scan_snap.common_tokens.pair_term", "scan_snap.common_tokens.rate"],
       title="Corollary 2 (eqs. 101-107): with symmetric classes every common-token logit falls, along eq. 10 and in "
             "the expected batch-1 dynamics with a learned decoder; the rate equals -(K-1) q f_l^2/(1 + (K-1) q)",
       settings=[Setting("steps", "int", quick=1500, full=20000, low=10, high=10**7,
                         doc="steps of the expected batch-1 dynamics"),
                 Setting("points", "int", quick=100, full=1000, low=10, high=10**6, doc="ODE output times")])
def corollary2_flow(ctx):
    """Settings (K, C common tokens with weights): (3, (3, 1.5, 0.5)) and (4, (2, 1)); D = 5 distinct tokens per class
    with weights linspace(1, 2, 5), one query, Z(0) = 0 (Corollary 2's conditions 1-4).

    (a) Eq. 10 with beta = E' (Theorem 1 to leading order) and the class sum averaged, integrated in tau = eta_Z int
    gamma (the sign and symmetry claims do not depend on gamma > 0) to tau = 60 (the common tokens' mass falls from
    0.49 to about 0.01): at every output time every common-token velocity is negative, equals the record rate(K, q, f_l)
    at that state (q = f_n^T f_n', f_l = f_nl; computed by matrix inversion in attention_velocity, by the closed form
    in the record), and the symmetry of eqs. 101-106 holds (z_l = z_phi(l), equal normalisers o_n). (b) The expected
    batch-1 dynamics (class-averaged cross-entropy gradient, Lemma 1 in the long-sequence limit, learned Y from 0),
    eta_Y = 1, eta_Z = 0.05: after step 1 (Y = 0 gives g = 0) every common-token logit falls at every step.

    Criterion: the number of nonnegative common-token velocities (ODE times) and of non-falling common-token logits
    (population steps) must be 0, and (statistic added) the rate error over 1e-10 and the symmetry residual over 1e-8
    (the ODE tolerance) must be <= 1. Control: condition (3) broken, K = 3 with common weights (2, 2, 1) in class 1
    and (0.1, 2, 1) in classes 2, 3: the first common token rises (counts of the same violations; expected from its
    velocity at Z = 0, +0.008).

    Measured (quick, seeds 0-19; deterministic): pass, 0 violations, rate error 5e-15, symmetry 1e-13; control: the
    asymmetric token rises at every ODE time until tau ~ 4 and in the first ~100 population steps. About 0.3 s.
    """
    from verify.flows.scan_snap_expected import expected_run

    steps, points = ctx.setting("steps"), ctx.setting("points")
    D = 5
    viol, err, sym, rows = 0, 0.0, 0.0, {}
    for K, w in ((3, (3.0, 1.5, 0.5)), (4, (2.0, 1.0))):
        C = len(w)
        classes = common_classes(w, K, D)
        zs = _ode(classes, 60.0, points)
        vmax = -np.inf
        for z in zs[1:]:
            st = _state_stats(classes, z, C, D)
            viol += int(np.sum(st["v"] >= 0))
            vmax = max(vmax, float(st["v"].max()))
            err, sym = max(err, st["rate error"]), max(sym, st["symmetry"])
        pop = expected_run(classes, 1.0, 0.05, steps)
        zc = pop["z"][:, 0, :C]
        rises = int(np.sum(np.diff(zc[1:], axis=0) >= 0))
        viol += rises
        dts = np.array([pop["Z"][classes.psi[0], C + n * D:C + (n + 1) * D] for n in range(K)])
        sym = max(sym, float(np.ptp(dts, axis=0).max()))
        rows[f"K={K}, common weights {w}"] = {
            "largest CT velocity along eq. 10": vmax, "CT mass at tau = 0, 60":
                [float(classes.attention(np.zeros((classes.M, classes.M)))[0, :C].sum()),
                 float(classes.P[0, :C] @ np.exp(zs[-1, :C]) / (classes.P[0] @ np.exp(zs[-1])))],
            "population: CT logits at the end": zc[-1].tolist(), "population: non-falling steps": rises}
    # control: condition (3) broken
    bad = common_classes(np.array([[2.0, 2.0, 1.0], [0.1, 2.0, 1.0], [0.1, 2.0, 1.0]]), 3, D)
    zs = _ode(bad, 60.0, points)
    ctrl = sum(int(np.sum(_state_stats(bad, z, 3, D, record=False)["v"] >= 0)) for z in zs[1:])
    pop = expected_run(bad, 1.0, 0.05, steps)
    ctrl += int(np.sum(np.diff(pop["z"][1:, 0, :3], axis=0) >= 0))
    Z0 = np.zeros((bad.M, bad.M))
    v0 = float(attention_velocity(bad, Z0, 1 / 3)[0][bad.psi[0], 0])
    stat = viol + max(err / 1e-10, sym / 1e-8)
    return Outcome(
        measured={"violations": viol, "rate error": err, "symmetry residual": sym},
        predicted="every common-token logit falls; rate = record; symmetry exact", discrepancy=float(stat),
        tolerance=1.0,
        criterion=f"count of nonnegative common-token velocities at {points} ODE times and of non-falling common-token "
                  f"logits over {steps} expected batch-1 steps (must be 0), plus max(rate error / 1e-10, symmetry "
                  "residual / 1e-8) (<= 1): the rate is an identity at each state and the symmetry is exact up to the "
                  "ODE tolerance (rtol 1e-11)",
        controls=[Control("condition (3) broken (a common token weighted by class): violations", float(ctrl), 1.0,
                          expected=float(v0 > 0))],
        details={"settings": rows, "control velocity of the asymmetric token at Z = 0": v0},
    )
