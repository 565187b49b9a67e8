"""High-dimensional data (Zhang, Singh, Latham, Saxe 2025, App. B, Fig. 8).

Contains
--------
``linear_attention.high_dim.flow_drops``
    N = 127, lambda_d proportional to 1/d with trace 1: ATTN_S still lingers at eq.-19 levels (several
    drops), ATTN_M at none between L(0) and L* (one drop)
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting

#: A plateau: the flow's flattest level between two crossings within this of eq. 19 (relative).
LEVEL_RTOL = 0.01
#: No plateau: the flattest level between two crossings at least this far from eq. 19 (relative; a loss
#: passing a level without lingering is flattest near a mid-level, a quarter of a gap or so away).
NO_PLATEAU = 0.05
#: "Several drops": at least this fraction of the intermediate levels m = 1..D-1 carry an ATTN_S plateau (two
#: drops from a random start can coincide when their eigenvalues are close: seed 6 of the quick profile, levels
#: 5 and 6 of lambda_d ~ 1/d, drops 1.3 % apart, level 5 passed 1.1 % away).
MIN_PLATEAUS = 0.5
#: The merged flow is integrated until its excess loss is below this fraction of L(0) - L*.
CONVERGED = 1e-5


@check("linear_attention.high_dim.flow_drops",
       covers=["linear_attention.separate.saddle_loss", "linear_attention.merged.global_min_loss"],
       method="exact_flow",
       title="Fig. 8: with N = 127 and lambda_d ~ 1/d, ATTN_S lingers at eq.-19 levels (several drops) and "
             "ATTN_M at none between L(0) and L* (one drop)",
       settings=[Setting("spectrum", "spectrum", quick="power:1", full="power:1",
                         doc="eigenvalues of Lambda (scaled to trace 1), randomly rotated"),
                 Setting("D", "int", quick=6, full=8, low=2, high=32, doc="token dimension"),
                 Setting("N", "int", quick=127, full=127, low=1, high=10**5, doc="context length N"),
                 Setting("H_M", "int", quick=8, full=8, low=1, high=256, doc="heads of ATTN_M (ATTN_S: H = D, R = 1)"),
                 Setting("w_init", "float", quick=1e-2, full=1e-3, low=1e-8, high=0.1,
                         doc="scale of the eq.-34 / eq.-36 starts"),
                 Setting("points", "int", quick=2000, full=8000, low=500, high=10**6,
                         doc="log-spaced times at which each flow is recorded")])
def flow_drops(ctx):
    """Exact flows from the eq.-36 start (ATTN_S, ``H = D`` rank-one heads) and the eq.-34 start (ATTN_M,
    ``H_M`` heads) in the setting of Fig. 8 (``N = 127``, ``lambda_d`` proportional to ``1/d``, trace 1,
    random eigenvectors). The paper: "qualitatively the same" as Figs. 1 and 3, i.e. ATTN_M makes one
    abrupt drop and ATTN_S several, with plateaus at eq. 19.

    Statistic (:func:`verify.flows.separate.plateaus` against the eq.-19 levels ``L(M_0..M_D)``): the
    loss's flattest point between consecutive mid-level crossings, relative to the level it passes.
    ATTN_S: within :data:`LEVEL_RTOL` of eq. 19 at the start, at the end, and at no fewer than
    :data:`MIN_PLATEAUS` of the intermediate levels (several drops with plateaus at eq. 19; two drops
    can merge when their eigenvalues are close). ATTN_M: at least :data:`NO_PLATEAU` away from every
    intermediate level ``m = 1..D-1`` (it lingers at none: one drop from ``L(0)``), and it starts and
    ends within :data:`LEVEL_RTOL` of ``L(0)`` and ``L* = L(M_D)``
    (``linear_attention.merged.global_min_loss``). Quick (``D = 6``), seeds 0-19: ATTN_S lingers at all
    5 intermediate levels (within 5e-4) at 19 seeds and at 4 at seed 6; ATTN_M passes every intermediate
    level at least 0.150 away.

    Controls: the two statistics swapped - ATTN_M's curve as a staircase (its flattest points within
    1 % of eq. 19) and ATTN_S's curve as one drop (at least 5 % from every intermediate level).
    """
    from verify.flows import merged as fm
    from verify.flows import separate as fs
    from verify.flows.separate_ranks import saddle_levels, thinned_series
    from verify.tasks.in_context_regression import random_covariance

    eig = np.asarray(ctx.setting("spectrum").eigenvalues(ctx.setting("D")), dtype=np.float64)
    eig = eig / eig.sum()
    D, N, H_M, w = eig.size, ctx.setting("N"), ctx.setting("H_M"), ctx.setting("w_init")
    n_t = ctx.setting("points")
    Lam = random_covariance(ctx.rng, eig)
    mo = fs.moments(Lam, N)
    levels = saddle_levels(Lam, N, D)
    L_star = float(levels[-1])
    # ATTN_S: past its last drop (about 1/(lambda_D^2 w_init))
    v0, k0, q0 = fs.init_separate(ctx.rng, D, 1, D, w)
    T = 20.0 / (float(eig.min()) ** 2 * w)
    for _ in range(6):                       # the horizon x 4 until every drop is made
        t = np.concatenate([[0.0], np.geomspace(1e-2, T, n_t)])
        res_s = fs.integrate(mo, None, v0, k0, q0, t_eval=t, rtol=1e-8, method="LSODA", dense=True)
        p_s = fs.plateaus(res_s.t, res_s.loss, levels, func=res_s.loss_at)
        if np.all(np.isfinite(p_s.drop_times)):
            break
        T *= 4.0
    # ATTN_M: until converged (its slowest direction relaxes at about lambda_D^2)
    vm, Um = fm.init_merged(ctx.rng, H_M, D, w)
    Tm = 10.0 / float(eig.min()) ** 2
    for _ in range(8):
        tm = np.concatenate([[0.0], np.geomspace(1e-2, Tm, n_t)])
        res_m = fm.integrate(mo, None, vm, Um, t_eval=tm, rtol=1e-8, atol=1e-12, method="LSODA")
        if res_m.loss[-1] - L_star <= CONVERGED * (mo.tr - L_star):
            break
        Tm *= 4.0
    p_m = fs.plateaus(res_m.t, res_m.loss, levels)
    err_s = np.abs(p_s.level_at_flattest / levels - 1.0)             # NaN where a plateau is missing
    err_m = np.abs(p_m.level_at_flattest / levels - 1.0)
    inner = slice(1, D)
    final_m = abs(float(res_m.loss[-1]) / L_star - 1.0)

    def nearest(x):
        return float(np.min(x)) if np.all(np.isfinite(x)) else 0.0

    required = int(np.ceil(MIN_PLATEAUS * (D - 1)))

    def staircase(err):   # needed / found intermediate plateaus at eq. 19 (inf: none found)
        found = int(np.sum(np.nan_to_num(err[inner], nan=np.inf) <= LEVEL_RTOL))
        return required / found if found else float("inf"), found

    part_s, found_s = staircase(err_s)
    part_m_stair, found_m = staircase(err_m)
    parts = {f"ATTN_S: intermediate plateaus at eq. 19, needed ({required}) / found": part_s,
             "ATTN_S: start and final level / tol": max(err_s[0], err_s[D]) / LEVEL_RTOL,
             "ATTN_M: no plateau: min distance from an intermediate level, as tol / distance":
                 NO_PLATEAU / max(nearest(err_m[inner]), 1e-300),
             "ATTN_M: start and final level / tol": max(err_m[0], final_m) / LEVEL_RTOL}
    controls = [
        Control(f"ATTN_M's curve as a staircase: intermediate plateaus needed ({required}) / found ({found_m})",
                part_m_stair, 1.0, expected=float("inf")),
        Control("ATTN_S's curve as one drop: tol / min distance from an intermediate level",
                NO_PLATEAU / max(nearest(err_s[inner]), 1e-300), 1.0, expected=None)]
    series = [thinned_series(res_s.t[1:], res_s.loss[1:], f"ATTN_S (H = {D}, R = 1)"),
              thinned_series(res_m.t[1:], res_m.loss[1:], f"ATTN_M (H = {H_M})")]
    series += [{"label": "eq. 19" if m == 0 else None, "x": [float(res_m.t[1]), float(res_s.t[-1])], "y": [L, L],
                "style": ":", "color": "gray"} for m, L in enumerate(levels)]
    return Outcome(
        measured={"ATTN_S level errors": err_s.tolist(), "ATTN_M level distances": err_m.tolist(),
                  "ATTN_M final level": float(res_m.loss[-1])},
        predicted={"eq. 19 levels": levels.tolist(), "ATTN_S": "a plateau at every level",
                   "ATTN_M": "none between L(0) and L*"},
        discrepancy=max(parts.values()), tolerance=1.0,
        criterion=(f"ATTN_S flattest between crossings within {LEVEL_RTOL:.0%} of every eq.-19 level; ATTN_M at least "
                   f"{NO_PLATEAU:.0%} from every intermediate level, its start and end within {LEVEL_RTOL:.0%} of "
                   f"L(0), L* (D = {D}, N = {N}, lambda_d ~ 1/d, H_M = {H_M}, w_init = {w:g})"),
        controls=controls,
        details={"parts": parts, "levels": levels.tolist(), "drops ATTN_S": p_s.drop_times.tolist(),
                 "drops ATTN_M": p_m.drop_times.tolist(), "horizon ATTN_S": float(T), "horizon ATTN_M": float(Tm)},
        figures={"loss": {"kind": "lines", "title": f"Fig. 8: N = {N}, λ_d ∝ 1/d, D = {D}", "xlabel": "t/τ",
                          "ylabel": "population loss", "xscale": "log", "series": series}})
