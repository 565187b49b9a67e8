"""The closed forms against the exact gradient flow of both weight matrices (scipy, DOP853)."""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting

from ..dynamics import flow, problem, shallow, strengths, wrong_rate

RTOL = 1e-10
#: 100 times the integrator's relative tolerance: the logistic does not amplify a relative error
#: of u (d ln u(t) / d ln u0 = 1 - u/s <= 1), so the error stays a few rtol (5 rtol at worst, seeds 0-19).
TOLERANCE = 1e-8


@check("saxe_linear.modes.flow_matrix", method="exact_flow",
       covers=["saxe_linear.modes.strength", "saxe_linear.modes.learning_time"],
       title="Mode strengths and half-rise times of the exact two-layer gradient flow (4 modes)",
       settings=[Setting("modes", "int", quick=4, full=8, low=1, high=12,
                         doc="modes (nonzero singular values of Sigma31, drawn in [1, 3] at least 0.1 apart; "
                             "<= n_in and n_out)"),
                 Setting("n_in", "int", quick=5, full=10, low=1, high=1000, doc="input units N1"),
                 Setting("n_out", "int", quick=4, full=8, low=1, high=1000, doc="output units N3")])
def flow_matrix(ctx):
    strength, learning_time = theory.get("saxe_linear.modes.strength"), theory.get("saxe_linear.modes.learning_time")
    modes, n_in, n_out = ctx.setting("modes"), ctx.setting("n_in"), ctx.setting("n_out")
    if modes > min(n_in, n_out):
        raise ValueError(f"modes: must be <= n_in = {n_in} and n_out = {n_out}, got {modes}")
    p = problem(ctx.rng, modes=modes, n_in=n_in, n_out=n_out)
    half = learning_time(s=p.s, u0=p.u0, u_f=p.s / 2, tau=p.tau)
    t_end = 2.5 * float(np.max(half))
    ts = np.linspace(0.0, t_end, ctx.pick(quick=60, full=400))
    products, half_measured = flow(p, t_end, ts, rtol=RTOL)
    read = [strengths(p, M) for M in products]
    measured = np.array([u for u, _ in read]).T                # modes x times
    leak = max(off for _, off in read)
    grid = dict(s=p.s[:, None], u0=p.u0[:, None], t=ts[None, :], tau=p.tau)
    predicted = strength(**grid)
    err_u = float(np.max(np.abs(measured - predicted) / p.s[:, None]))
    err_t = float(np.max(np.abs(half_measured - half) / half))
    discrepancy = max(err_u, err_t, leak)

    controls = []
    for name, wrong in (("logistic at rate s instead of 2s", wrong_rate),
                        ("single-layer network: exponential approach", shallow)):
        w = wrong(**grid)
        controls.append(Control(name, float(np.max(np.abs(measured - w) / p.s[:, None])), TOLERANCE,
                                expected=float(np.max(np.abs(predicted - w) / p.s[:, None]))))
    return Outcome(
        measured={"half_times": half_measured.tolist(), "final": measured[:, -1].tolist()},
        predicted={"half_times": half.tolist(), "final": predicted[:, -1].tolist()},
        discrepancy=discrepancy, tolerance=TOLERANCE,
        criterion=f"max over modes and {len(ts)} times of |u - closed form| / s, the relative error of "
                  "each mode's half-rise time, and the off-diagonal leak of U^T W32 W21 V / s_max, all "
                  f"< {TOLERANCE:g} (100 x the integrator's rtol {RTOL:g}; the logistic does not amplify "
                  "relative errors)",
        controls=controls,
        details={"s": p.s.tolist(), "u0": p.u0.tolist(), "t_end": t_end, "strength_error": err_u,
                 "half_time_error": err_t, "off_diagonal": leak},
        figures={"mode_strengths": {"t": ts, **{f"mode {k + 1}": measured[k] for k in range(len(p.s))},
                                    **{f"theory {k + 1}": predicted[k] for k in range(len(p.s))}}},
    )
