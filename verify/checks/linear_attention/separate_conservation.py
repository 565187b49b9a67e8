"""The conservation laws of rank-R ATTN_S along the exact flow (Zhang, Singh, Latham, Saxe 2025, App. F.6,
eq. 88).

Contains
--------
``linear_attention.separate.flow_rank_conservation``
    |k_ir|^2 - |q_ir|^2 (each r) and sum_r |k_ir|^2 - v_i^2 (each head) stay constant through the drops of a
    rank-2 and a rank-3 flow; the laws eq. 88 does not state (|k_ir|^2 - v_i^2 alone, |k_i1|^2 - |k_i2|^2) do not
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting

#: Drift allowed for a conserved quantity, relative to the largest squared norm of the run (the flow is
#: integrated at rtol 1e-12; seeds 0-19 drift at most 2.2e-12).
DRIFT_TOL = 1e-8


def _laws(v, k, q):
    """The quantities of eq. 88 along a trajectory (T, H), (T, H, R, D): per (head, r) |k|^2 - |q|^2, per head
    sum_r |k|^2 - v^2; and two that eq. 88 does not state: per (head, r) |k_r|^2 - v^2 and |k_1|^2 - |k_2|^2."""
    kk, qq = (k**2).sum(-1), (q**2).sum(-1)                      # (T, H, R)
    stated = np.concatenate([(kk - qq).reshape(len(v), -1), kk.sum(-1) - v**2], axis=1)
    unstated = np.concatenate([(kk - v[:, :, None] ** 2).reshape(len(v), -1), kk[:, :, 0] - kk[:, :, 1]], axis=1)
    return stated, unstated


@check("linear_attention.separate.flow_rank_conservation", covers=[], method="exact_flow",
       title="Eq. 88: |k_ir|^2 - |q_ir|^2 and sum_r |k_ir|^2 - v_i^2 are conserved by the rank-R flow (R = 2, 3); "
             "no law links different r",
       settings=[Setting("D", "int", quick=4, full=6, low=2, high=16, doc="token dimension D"),
                 Setting("N", "int", quick=15, full=31, low=1, high=10**4, doc="context length N"),
                 Setting("w_init", "float", quick=0.3, full=0.3, low=1e-4, high=2.0,
                         doc="scale of the eq.-36 start (large enough for the flow to move every weight)"),
                 Setting("t_end", "float", quick=200.0, full=2000.0, low=1.0, high=1e6,
                         doc="end of the integration (time in units of tau)")])
def flow_rank_conservation(ctx):
    """App. F.6: for rank-``R`` heads (``tau dv_i = sum_r k_ir^T G q_ir``, ``tau dk_ir = v_i G q_ir``,
    ``tau dq_ir = v_i G^T k_ir``) the quantities ``|k_ir|^2 - |q_ir|^2`` for every ``r`` and ``sum_r
    |k_ir|^2 - v_i^2`` are conserved (derived for any ``G`` in
    :func:`theory.linear_attention.separate.conservation_rates`). The exact flow of eq. 83 (DOP853, rtol
    1e-12) from an eq.-36 draw with ``R = 2`` (``H = 2``) and ``R = 3`` (``H = 2``), ``lambda_d`` proportional
    to ``1/d``, integrated through its drops: every stated quantity's drift over the run, relative to the
    largest squared norm, at most :data:`DRIFT_TOL`.

    Control: the laws eq. 88 does not state and that do not hold for ``R > 1`` (``|k_ir|^2 - v_i^2`` for
    one ``r``, which is conserved only at ``R = 1``, and ``|k_i1|^2 - |k_i2|^2``) must drift by more.
    """
    from verify.flows import separate as fs
    from verify.tasks.in_context_regression import random_covariance

    D, N = ctx.setting("D"), ctx.setting("N")
    w_init, t_end = ctx.setting("w_init"), ctx.setting("t_end")
    eig = 1.0 / np.arange(1, D + 1)
    Lam = random_covariance(ctx.rng, eig / eig.sum())
    drift, control, per_R = 0.0, np.inf, {}
    for R in (2, 3):
        H = 2
        v0, k0, q0 = fs.init_separate(ctx.rng, H, R, D, w_init)
        res = fs.integrate(Lam, N, v0, k0, q0, t_eval=np.linspace(0.0, t_end, 2001), rtol=1e-12)
        scale = float(max(np.max(res.v**2), np.max((res.k**2).sum(-1)), np.max((res.q**2).sum(-1))))
        stated, unstated = _laws(res.v, res.k, res.q)
        d = float(np.max(np.abs(stated - stated[0]))) / scale
        c = float(np.max(np.abs(unstated - unstated[0]))) / scale
        drift, control = max(drift, d), min(control, c)
        per_R[R] = {"stated drift / scale": d, "unstated drift / scale": c, "scale": scale,
                    "loss (start, end)": [float(res.loss[0]), float(res.loss[-1])]}
    return Outcome(
        measured={"largest relative drift of eq. 88's quantities": drift},
        predicted={"drift": 0.0},
        discrepancy=drift, tolerance=DRIFT_TOL,
        criterion=(f"max over R = 2, 3, heads and ranks of the drift of |k_ir|^2 - |q_ir|^2 and sum_r |k_ir|^2 - "
                   f"v_i^2 over t in [0, {t_end:g}], relative to the run's largest squared norm, <= {DRIFT_TOL:g} "
                   f"(rtol 1e-12); D = {D}, N = {N}, H = 2, w_init = {w_init:g}"),
        controls=[Control("the unstated laws |k_ir|^2 - v_i^2 (one r) and |k_i1|^2 - |k_i2|^2: smallest relative "
                          "drift", control, DRIFT_TOL, expected=None)],
        details={"per R": per_R, "eigenvalues": eig / eig.sum()},
    )
