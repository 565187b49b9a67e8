"""Check of the steps of the proof of Lemma 2.3 (Bao, Hataya, Karakida 2024, App. C).

Contains
--------
``localization.rho.lemma2_proof``
    rho'(theta) of eq. 6 as printed (``localization.rho.derivative``) and d/dtheta of
    (theta - 1/2)/sqrt(2D) (``localization.rho.proof_quotient_derivative``) against 60-digit central
    differences at random (theta, xi, eta); the proof's expressions and its bound
    |rho'| <= |xi|/(sqrt(pi) (2D)^{3/2} eta) are the rejected controls. Quick profile, seeds 0-19:
    20/20, worst relative error 4.6e-14 (tolerance 1e-12); controls off by 4-73, 0.45 and 0.22-0.48.
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting


@check("localization.rho.lemma2_proof",
       covers=["localization.rho.derivative", "localization.rho.proof_quotient_derivative",
               "localization.rho.continuum_printed"],
       decides=["localization.rho.derivative", "localization.rho.proof_quotient_derivative"],
       method="high_precision",
       title="Lemma 2.3's proof: its rho'(theta), its quotient derivative and its bound vs central differences",
       settings=[Setting("points", "int", quick=40, full=400, low=4, high=10**5,
                         doc="random (theta, xi, eta) points (plus xi = 0 at theta = 1/4, 1/2, 1)"),
                 Setting("dps", "int", quick=60, full=60, low=30, high=1000,
                         doc="mpmath digits of the central differences (step 10^-(5 dps/12))")])
def lemma2_proof(ctx):
    import mpmath

    rng = ctx.rng
    k, dps = ctx.setting("points"), ctx.setting("dps")
    pts = [(float(rng.uniform(0.02, 0.98)), float(rng.uniform(-10, 10)), float(np.exp(rng.uniform(np.log(0.1),
                                                                                                   np.log(5)))))
           for _ in range(k)] + [(t, 0.0, 1.0) for t in (0.25, 0.5, 0.98)]
    rho = theory.get("localization.rho.continuum_printed").function("mpmath")     # (theta, xi, eta, D)
    der, quo = theory.get("localization.rho.derivative"), theory.get("localization.rho.proof_quotient_derivative")
    worst, worst_q, ctrl, ctrl_q, bound_excess = 0.0, 0.0, 0.0, 0.0, -np.inf
    with mpmath.workdps(dps):
        h = mpmath.mpf(f"1e-{dps * 5 // 12}")
        one = mpmath.mpf(1)
        for th, xi, eta in pts:
            t, x, e = mpmath.mpf(th), mpmath.mpf(xi), mpmath.mpf(eta)
            fd = (rho(t + h, x, e, one) - rho(t - h, x, e, one)) / (2 * h)
            scale = max(abs(float(fd)), 1e-3)
            worst = max(worst, abs(float(der(theta=th, xi=xi, eta=eta)) - float(fd)) / scale)
            ctrl = max(ctrl, abs(float(der(printed=True, theta=th, xi=xi, eta=eta)) - float(fd)) / scale)
            q = lambda s: (s - mpmath.mpf(1) / 2) / mpmath.sqrt(2 * (2 * s**2 + mpmath.mpf(7) / 12))  # noqa: E731
            fq = (q(t + h) - q(t - h)) / (2 * h)
            worst_q = max(worst_q, abs(float(quo(theta=th)) - float(fq)) / abs(float(fq)))
            ctrl_q = max(ctrl_q, abs(float(quo(printed=True, theta=th)) - float(fq)) / abs(float(fq)))
            D = 2 * th**2 + 7 / 12
            bound = abs(xi) / (np.sqrt(np.pi) * (2 * D) ** 1.5 * eta)
            bound_excess = max(bound_excess, abs(float(fd)) - bound)
    disc = max(worst, worst_q)
    tol = 1e-12
    return Outcome(
        measured={"max rel |rho' record - central difference|": worst,
                  "max rel |quotient derivative record - central difference|": worst_q},
        predicted=0.0, discrepancy=disc, tolerance=tol,
        criterion=f"relative error (floor 1e-3 on the scale of rho') of the registered derivatives against central "
                  f"differences (h = 1e-{dps * 5 // 12}, {dps} digits) of eq. 6 as printed and of "
                  "(theta - 1/2)/sqrt(2D) "
                  f"at {len(pts)} points (theta in (0, 1), xi in [-10, 10], eta log-uniform in [0.1, 5], and xi = 0) "
                  f"<= {tol:g} (float64 round-off; the difference error is O(h^2) = 1e-50); the proof's expressions "
                  "(largest error over the points) and its bound must be rejected",
        controls=[Control("the proof's rho'(theta) as printed (xi pulled out, wrong quotient derivative): max "
                          "relative error", ctrl, tol, expected=ctrl),
                  Control("the proof's d/dtheta (theta - 1/2)/sqrt(2D) as printed, "
                          "(4 theta^2 - theta + 5/3)/(2D)^{3/2}: "
                          "max relative error (it is right at theta = 1/4 and 1/2 only)", ctrl_q, tol, expected=ctrl_q),
                  Control("the proof's bound as printed, |rho'| <= |xi|/(sqrt(pi) (2D)^{3/2} eta): "
                          "max (|rho'| - bound)",
                          bound_excess, 0.0, expected=float(abs(der(theta=0.5, xi=0.0, eta=1.0))))],
        details={"points": len(pts), "rho_prime_at_xi0_theta_half_eta1": float(der(theta=0.5, xi=0.0, eta=1.0)),
                 "proof_rho_prime_there": float(der(printed=True, theta=0.5, xi=0.0, eta=1.0))},
    )
