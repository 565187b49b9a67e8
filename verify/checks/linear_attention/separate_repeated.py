"""ATTN_S with repeated eigenvalues (Zhang, Singh, Latham, Saxe 2025, App. F.5, Fig. 13).

Contains
--------
``linear_attention.separate.flow_repeated_eigenvalues``
    With lambda_1 = lambda_2 the fixed points form a continuous family: M_u = c u u^T is stationary at the level
    L(M_1) for every unit u in the eigenspace, not outside it; the plateau near L(M_1) between learning two
    directions of one eigenspace is measured along the exact flow over several draws (reported)
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import evaluate as _cf

#: Round-off tolerance of the stationarity and of the level (relative).
ROUNDOFF_RTOL = 1e-12
#: Fig. 13's spectrum: two eigenspaces of dimension 2.
FIG13_EIGENVALUES = (0.35, 0.35, 0.15, 0.15)


def _head_flow(Lam, N: int, c: float, u) -> float:
    """The flow of one head k = q = c^(1/3) u, v = c^(1/3) (so v k q^T = c u u^T = M): ``tau dk = v G q``,
    ``tau dq = v G^T k``, ``tau dv = k^T G q`` with ``G = G(M)``; returns the norm of the whole right-hand side."""
    s = c ** (1.0 / 3.0)
    G = np.asarray(_cf("linear_attention.merged.gradient", Lambda=Lam, N=N, M=c * np.outer(u, u)), float)
    k = q = s * u
    return float(np.sqrt(np.sum((s * G @ q) ** 2) + np.sum((s * G.T @ k) ** 2) + (k @ G @ q) ** 2))


@check("linear_attention.separate.flow_repeated_eigenvalues",
       covers=["linear_attention.separate.fixed_point_matrix", "linear_attention.separate.saddle_loss",
               "linear_attention.merged.gradient", "linear_attention.merged.loss"],
       method="exact_flow",
       title="Fig. 13 / App. F.5: with repeated eigenvalues the fixed points form continuous families (M_u = c u u^T "
             "for every unit u in the eigenspace, at the level L(M_1)); plateaus inside an eigenspace reported",
       settings=[Setting("N", "int", quick=31, full=31, low=1, high=10**4, doc="context length N"),
                 Setting("points", "int", quick=20, full=200, low=1, high=10**4,
                         doc="random unit vectors u of the eigenspace tested"),
                 Setting("draws", "int", quick=0, full=10, low=0, high=100,
                         doc="eq.-36 draws whose flows are reported (H = 5, R = 1, w_init = 1e-2; 0: none)")])
def flow_repeated_eigenvalues(ctx):
    """Fig. 13's spectrum ``(0.35, 0.35, 0.15, 0.15)`` with random eigenvectors. For ``points`` random unit
    ``u`` in the top eigenspace, ``M_u = c u u^T`` with ``c`` the coefficient of the one-direction fixed point
    (``fixed_point_matrix`` at ``S = {1}``): the flow's right-hand side ``G(M_u)``
    moves the head ``k = q = c^(1/3) u``, ``v = c^(1/3)`` by ``tau dk = v G q``, ``tau dq = v G^T k``, ``tau dv =
    k^T G q`` with ``G = linear_attention.merged.gradient(M_u)``: that flow vanishes, and the loss
    (``merged.loss``) is ``L(M_1)`` (``saddle_loss``), both to round-off (relative to ``||G(0)||`` and
    ``L(M_1)``): a circle of fixed points at one level, where distinct eigenvalues give isolated ones.

    Control: ``u`` tilted out of the eigenspace (a component 0.1 along the next eigenvector) is not stationary;
    its expected flow is that of the same tilt of ``e_1``.

    Reported (not asserted; App. F.5: "the plateaus may also be skipped for certain random seeds"): along the
    exact flow from ``draws`` eq.-36 starts (``H = 5``, ``R = 1``, ``w_init = 1e-2``), the time spent within 2 %
    of the gap of each level ``L(M_m)``, in units of ``tau / (lambda_{m+1}^2 w_init)``: ``m = 1`` and ``m = 3``
    lie between two directions of one eigenspace."""
    from verify.flows import separate as fs
    from verify.flows.separate_ranks import saddle_levels
    from verify.tasks.in_context_regression import random_covariance

    N = ctx.setting("N")
    eig = np.array(FIG13_EIGENVALUES)
    D = eig.size
    Lam = random_covariance(ctx.rng, eig)
    _, E = fs.eigenbasis(Lam)
    top = E[:, :2]                                                   # the eigenspace of 0.35
    M1 = np.asarray(_cf("linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=N, S=[1]), float)
    c = float(np.trace(M1))                                          # M_1 = c e_1 e_1^T
    levels = saddle_levels(Lam, N, D)
    L1 = float(levels[1])
    G_scale = float(np.linalg.norm(_cf("linear_attention.merged.gradient", Lambda=Lam, N=N, M=np.zeros((D, D)))))
    grad, level, tilted = 0.0, 0.0, np.inf
    for _ in range(ctx.setting("points")):
        a = ctx.rng.standard_normal(2)
        u = top @ (a / np.linalg.norm(a))
        Mu = c * np.outer(u, u)
        grad = max(grad, _head_flow(Lam, N, c, u) / G_scale)
        loss = float(_cf("linear_attention.merged.loss", Lambda=Lam, N=N, M=Mu))
        level = max(level, abs(loss - L1) / L1)
        ut = u + 0.1 * E[:, 2]
        tilted = min(tilted, _head_flow(Lam, N, c, ut / np.linalg.norm(ut)) / G_scale)
    # the tilt's expected flow: the same tilt of the eigenbasis vector e_1 itself
    e_t = E[:, 0] + 0.1 * E[:, 2]
    tilted_expected = _head_flow(Lam, N, c, e_t / np.linalg.norm(e_t)) / G_scale
    # report: plateaus along the exact flow
    runs = []
    for rng in ctx.spawn(ctx.setting("draws")):
        w_init = 1e-2
        v0, k0, q0 = fs.init_separate(rng, 5, 1, D, w_init)
        T = 40.0 / (eig[-1] ** 2 * w_init)
        res = fs.integrate(Lam, N, v0, k0, q0, t_eval=np.linspace(0.0, T, 8001))
        dt = np.diff(res.t, prepend=0.0)
        near = {}
        for m in range(D):
            gap = 0.02 * (levels[m] - levels[m + 1])
            unit = 1.0 / (eig[m] ** 2 * w_init)
            near[f"m={m}"] = float(np.sum(dt[np.abs(res.loss - levels[m]) <= gap]) / unit)
        runs.append(near)
    parts = {"head flow at M_u / ||G(0)||": grad, "|L(M_u) - L(M_1)| / L(M_1)": level}
    return Outcome(
        measured=parts,
        predicted={"head flow at M_u": 0.0, "L(M_u)": L1},
        discrepancy=max(parts.values()), tolerance=ROUNDOFF_RTOL,
        criterion=(f"over {ctx.setting('points')} random unit u in the top eigenspace of Fig. 13's Lambda: the flow of "
                   f"the head c^(1/3) (u, u, 1) at M = c u u^T over ||G(0)||, and |L(c u u^T) - L(M_1)| / L(M_1), "
                   f"<= {ROUNDOFF_RTOL:g} (round-off); N = {N}"),
        controls=[Control("u tilted out of the eigenspace (0.1 along e_3): smallest head flow / ||G(0)||", tilted,
                          ROUNDOFF_RTOL, expected=tilted_expected)],
        details={"c (M_1 = c e_1 e_1^T)": c, "levels L(M_m)": levels,
                 "time near L(M_m) / (tau / (lambda_(m+1)^2 w_init)) per draw (report)": runs},
    )
