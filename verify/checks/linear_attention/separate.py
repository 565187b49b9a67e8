"""Checks of the separate key/query linear attention ATTN_S (Zhang, Singh, Latham, Saxe 2025,
§4 and App. E-F): fixed points, plateau losses and the saddle-to-saddle flow.

The flow checks integrate the exact expected-loss gradient flow of eq. 14 in the reduced
D x D form of :mod:`verify.flows.separate` (no sampling noise). After a head has converged
the flow is stiff (relaxation rates ~ lambda a v^2 against plateaus of 1e5 tau), so they use
``solve_ivp(method="LSODA")`` (switches to BDF when stiff) at ``rtol = 1e-10``; on these
runs it agrees with DOP853 to 1e-8 relative in drop times, 15x faster. The Monte
Carlo check samples the data model of §2.1 and uses z-scores with the family-wise
threshold :func:`verify.stats.z_threshold`.

Contains
--------
``linear_attention.separate.fixed_points``     all 2^D function-space fixed points (eqs. 16-18,
                                               59-62): zero gradient, M_S, L(M_S) = eq. 63;
                                               the exact inactive-head condition
``linear_attention.separate.mc_subset_loss``   Monte Carlo loss of the PCR predictor (eq. 22)
                                               at every m = eq. 19
``linear_attention.separate.flow_staircase``   saddle-to-saddle flow from the eq.-36 start
                                               (plateau levels eq. 19, order e_1..e_D, M_D),
                                               and from the aligned start: eq. 21 and eq. 71
``linear_attention.separate.pcr_limit``        M_m(N) -> P_m Lambda^{-1} at rate 1/N and the
                                               PCR loss at N = 1e5 -> sum_{d>m} lambda_d
                                               (eq. 22; Wishart-drawn Lambda_hat)
"""

from __future__ import annotations


import numpy as np
from scipy.integrate import quad, solve_ivp

import theory
from verify import Control, Outcome, check
from verify.flows import separate as fs
from verify.flows.separate_fixed_points import FixedPointProbe
from verify.flows.separate_ranks import N_FIG, RTOL, SPECTRUM, TAU, saddle_levels, scalar_drop_times, staircase_figures
from verify.settings import Setting
from verify.stats import batch_mean, z_threshold
from verify.stats import evaluate as _cf
from verify.tasks.in_context_regression import iter_tasks, random_covariance
from verify.tasks.wishart import sample_wishart_betas


# -- (a) fixed points ---------------------------------------------------------------------
@check("linear_attention.separate.fixed_points",
       covers=["linear_attention.separate.fixed_point_matrix", "linear_attention.separate.subset_loss",
               "linear_attention.separate.ansatz_value_weight", "linear_attention.separate.fixed_point_gradient"],
       method="exact_flow",
       title="All 2^D fixed points of ATTN_S: zero gradient of eq. 14/83 at weights realising M_S, "
             "and L(M_S) = eq. 63 (non-white Lambda, N = 7)",
       settings=[Setting("D", "int", quick=5, full=6, low=4, high=10,
                         doc="token dimension D (all 2^D subsets are probed; >= 4 for the inactive-head probe "
                             "S = {1, 2}, k = e_3, q = e_4)"),
                 Setting("N", "int", quick=7, full=7, low=1, high=10**6, doc="context length N")])
def fixed_points(ctx):
    rng = ctx.rng
    D = ctx.setting("D")
    N = ctx.setting("N")
    eigs = 0.9 ** np.arange(D) * (1 + 0.5 * np.arange(D)[::-1] / D)   # distinct, descending
    Lam = random_covariance(rng, eigs)
    mo = fs.moments(Lam, N)
    lam, E = fs.eigenbasis(mo)
    fp = FixedPointProbe(Lam, N, mo, lam, E)
    worst, n_sub = fp.subset_sweep()
    # an inactive head with k in the unlearned span and q orthogonal to it under Omega
    S = [1, 2]
    v, k, q = fp.rank1_weights(S, D)
    k[3, 0], q[3, 0] = E[:, 2], E[:, 3]              # v = 0, k = e_3, q = e_4
    inactive_ok = fp.grad(v, k, q) / fp.tol(v, k, q)
    worst["inactive head k = e_3, q = e_4 / tol"] = inactive_ok
    disc = max(worst.values())
    # negative controls; expected: eq. 14's gradient with G = eq. 60 at M_S - E[Lhat^2] dM Lambda, dM
    # the closed-form change of M the perturbation makes (G is affine in M)
    (c_scaled, e_scaled), (c_rot, e_rot), (c_inactive, e_inactive) = fp.perturbed(S)
    # closed form vs closed form: the statistic is its own expected value
    L_wrong = max(abs(float(_cf("linear_attention.separate.subset_loss", Lambda=Lam, N=N, S=[d]))
                      - (np.trace(Lam) - lam[d - 1])) for d in range(1, D + 1)) / 1e-12
    return Outcome(
        measured=worst, predicted={"gradient": 0.0, "subsets": n_sub},
        discrepancy=disc, tolerance=1.0,
        criterion=f"each part / its tolerance <= 1 over all {n_sub} subsets S of 1..{D}, rank-1 and "
                  "rank-2 realisations: max |gradient| <= 100 D^2 eps x weight^2 x ||terms of G|| "
                  "(float64 rounding; the gradient vanishes exactly, eqs. 60-62); weights give "
                  "M_S to rounding; L(M_S) (exact quadratic loss) = eq. 63 to 1e-12; the inactive "
                  "head (v=0, k=e_3, q=e_4, S={1,2}) satisfies the exact condition eq. 87",
        controls=[
            Control("v of one head of M_D scaled by 1.01", c_scaled, 1.0, expected=e_scaled),
            Control("head 2 of M_{1,2} rotated by 0.05 rad towards e_3", c_rot, 1.0, expected=e_rot),
            Control("inactive head v=0, k=q=e_3 at S={1,2} ((C3) and eq. 87 violated)", c_inactive, 1.0,
                    expected=e_inactive),
            Control("single-direction losses with the N -> inf drop lambda_d", L_wrong, 1.0, expected=L_wrong),
        ],
        details={"D": D, "N": N, "eigenvalues": eigs.tolist(), "scale_G": fp.scale_G},
    )


# -- (b) Monte Carlo of the plateau losses ------------------------------------------------
@check("linear_attention.separate.mc_subset_loss",
       covers=["linear_attention.separate.saddle_loss", "linear_attention.separate.fixed_point_matrix",
               "linear_attention.separate.drop_size"],
       decides=["linear_attention.separate.drop_size"],
       method="monte_carlo",
       title="Monte Carlo loss of the in-context PCR predictor beta^T M_m x_q (eq. 22) at every "
             "m = 0..D against eq. 19 (non-white Lambda, N = 5)",
       settings=[Setting("N", "int", quick=5, full=5, low=1, high=100,
                         doc="context length N (batches of 100000 sequences are held in memory)"),
                 Setting("spectrum", "spectrum", quick=(1.0, 0.5, 0.25, 0.1), full=(1.0, 0.5, 0.25, 0.1),
                         doc="eigenvalues of Lambda (white, power:ALPHA or a list), randomly rotated"),
                 Setting("D", "int", quick=4, full=4, low=1, high=12,
                         doc="token dimension for a white or power spectrum (a list fixes D)"),
                 # quick 5e4 (was 4e5), sized by its control: seeds 0-19 20/20, worst discrepancy/tolerance
                 # 0.556 (seed 6), the control's expected z at least 17.1 x the threshold (measured 17.3 x)
                 Setting("samples", "int", quick=50_000, full=10_000_000, low=10_000, high=10**9,
                         doc="sampled sequences")])
def mc_subset_loss(ctx):
    rng = ctx.rng
    spec, N = ctx.setting("spectrum"), ctx.setting("N")
    eigs = tuple(spec.eigenvalues(ctx.setting("D")))
    D = len(eigs)
    Lam = random_covariance(rng, eigs)
    total = ctx.setting("samples")
    Ms = np.stack([np.asarray(_cf("linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=N,
                                  S=list(range(1, m + 1)))) for m in range(D + 1)])
    pred = saddle_levels(Lam, N, D)
    drops = np.array([float(_cf("linear_attention.separate.drop_size", Lambda=Lam, N=N, m=m))
                      for m in range(1, D + 1)])
    printed_drop = theory.get("linear_attention.separate.drop_size")
    rounded = np.array([float(printed_drop(Lambda=Lam, N=N, m=m, printed=True)) for m in range(1, D + 1)])
    acc = batch_mean()
    for task in ctx.iterate(iter_tasks(rng, Lam, N, total), "PCR losses"):
        yhat = np.einsum("bi,mij,bj->bm", task.beta, Ms, task.x_q)
        acc.add((task.y_q[:, None] - yhat) ** 2)
    est = acc.result()
    z = est.z(pred)
    z_crit = z_threshold(D + 1)
    disc = float(np.max(np.abs(z)))
    # the paper's rounding: drop m ~ lambda_m, so L(M_m) ~ tr Lambda - sum_{d<=m} lambda_d
    rounded_levels = pred[0] - np.r_[0.0, np.cumsum(rounded)]
    z_round = float(np.max(np.abs(est.z(rounded_levels)[1:])))
    consist = float(np.max(np.abs(drops - (pred[:-1] - pred[1:]))))
    return Outcome(
        measured=est.mean.tolist(), predicted=pred.tolist(),
        discrepancy=disc, tolerance=z_crit,
        passed=bool(disc <= z_crit and consist <= 1e-12),
        criterion=f"max |z| over m = 0..{D} of the Monte Carlo loss of beta^T M_m x_q vs eq. 19 "
                  f"< z_threshold({D + 1}); drop_size = L(M_(m-1)) - L(M_m) to 1e-12",
        controls=[Control("printed drop sizes: the paper's rounded lambda_m (N -> inf levels tr Lambda - sum lambda_d)",
                          z_round, z_crit, expected=float(np.max(np.abs(rounded_levels - pred)[1:] / est.se[1:])))],
        details={"sequences": est.n, "z": z.tolist(), "se": est.se.tolist(), "N": N,
                 "eigenvalues": list(eigs), "rounded_levels": rounded_levels.tolist(),
                 "drop_size_consistency": consist},
    )


# -- (c) the staircase --------------------------------------------------------------------


@check("linear_attention.separate.flow_staircase",
       covers=["linear_attention.separate.saddle_loss", "linear_attention.separate.fixed_point_matrix",
               "linear_attention.separate.scalar_ode_rhs", "linear_attention.separate.escape_time"],
       method="exact_flow",
       title="Saddle-to-saddle flow of rank-1 ATTN_S (H = D = 4, Fig.-1 spectrum, N = 31): plateaus "
             "at eq. 19, e_1..e_D learned in order, M -> M_D; aligned start vs eq. 21 and eq. 71",
       settings=[Setting("w_init", "float", quick=1e-3, full=1e-3, low=1e-8, high=0.1,
                         doc="scale of the eq.-36 random start"),
                 Setting("w_aligned", "float", quick=1e-3, full=1e-3, low=1e-8, high=0.1,
                         doc="scale of the aligned, balanced start (eqs. 21 and 71)"),
                 Setting("points", "int", quick=4000, full=20000, low=500, high=10**6,
                         doc="log-spaced times at which the random-start flow is recorded")])
def flow_staircase(ctx):
    D = H = len(SPECTRUM)
    N = N_FIG
    Lam = random_covariance(ctx.rng, SPECTRUM)
    mo = fs.moments(Lam, N)
    lam, E = fs.eigenbasis(mo)
    a = np.einsum("di,de,ei->i", E, mo.A, E)
    levels = saddle_levels(Lam, N, D)
    spec_levels = np.array([1.0, 0.640580, 0.377372, 0.209805, 0.135995])
    M_S = [np.asarray(_cf("linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=N,
                          S=list(range(1, m + 1)))) for m in range(D + 1)]
    nM = np.linalg.norm(M_S[-1])
    # 1. eq.-36 random start
    w = ctx.setting("w_init")
    (rng,) = ctx.spawn(1)
    v0, k0, q0 = fs.init_separate(rng, H, 1, D, w)
    T = 20.0 * TAU / (lam[-1] ** 2 * w)
    t = np.concatenate([[0.0], np.geomspace(1e-2, T, ctx.setting("points"))])
    res = fs.integrate(mo, None, v0, k0, q0, tau=TAU, t_eval=t, rtol=RTOL, method="LSODA", dense=True)
    p = fs.plateaus(res.t, res.loss, levels, func=res.loss_at)
    lvl_err = np.abs(p.level_at_flattest - levels) / levels
    M_err = [float(np.linalg.norm(res.M[j] - M_S[m]) / nM) if j >= 0 else np.inf
             for m, j in enumerate(p.flattest)]
    # wrong order: M_{1..m-1, m+1} instead of M_{1..m}
    M_swap = [float(np.linalg.norm(res.M[p.flattest[m]] - np.asarray(_cf(
        "linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=N,
        S=list(range(1, m)) + [m + 1]))) / nM) for m in range(1, D)]
    kq, kv = fs.conserved(res.v, res.k, res.q)
    drift = float(max(np.max(np.abs(kq - kq[0])), np.max(np.abs(kv - kv[0]))))
    rounded = np.array([np.sum(lam[m:]) for m in range(D + 1)])
    ctrl_round = float(np.max((np.abs(p.level_at_flattest - rounded) / levels)[1:]))
    exp_round = float(np.max((np.abs(levels - rounded) / levels)[1:]))   # eq. 19 vs the N -> inf levels
    exp_swap = min(float(np.linalg.norm(M_S[m] - np.asarray(_cf(
        "linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=N,
        S=list(range(1, m)) + [m + 1]))) / nM) for m in range(1, D))
    # 2. aligned, balanced start: eq. 21 per head and eq. 71
    wa = ctx.setting("w_aligned")
    va, ka, qa = fs.init_aligned_separate(mo, H, 1, wa)
    Ta = 1.5 * TAU / (lam[-1] ** 2 * wa)
    ta = np.concatenate([[0.0], np.geomspace(1.0, Ta, 3000)])
    ra = fs.integrate(mo, None, va, ka, qa, tau=TAU, t_eval=ta, rtol=RTOL, method="LSODA", dense=True)
    drops_flow = fs.plateaus(ra.t, ra.loss, levels, func=ra.loss_at).drop_times
    drops_ode, t_ode, curve_ode, v_ode = scalar_drop_times(lam, a, va, levels, mo, E, Ta)
    ode_err = float(np.max(np.abs(drops_flow / drops_ode - 1)))
    esc = np.array([float(_cf("linear_attention.separate.escape_time", Lambda=Lam, N=N, m=m, tau=TAU,
                              w_init=wa)) for m in range(1, D + 1)])
    esc_err = float(np.max(np.abs(drops_flow / esc - 1)))
    esc_wrong = float(np.min(np.abs(drops_flow / (TAU / (lam * wa)) - 1)))
    exp_esc = float(np.min(np.abs(esc / (TAU / (lam * wa)) - 1)))        # eq. 71 vs the wrong law
    parts = {
        "plateau levels rel / 1e-3": float(np.max(lvl_err)) / 1e-3,
        "M at plateau m vs M_{1..m} / 1e-2": float(max(M_err)) / 1e-2,
        "conservation drift / 1e-8": drift / 1e-8,
        "hand-computed levels (6 digits) / 5e-7": float(np.max(np.abs(
            saddle_levels(list(SPECTRUM), N, D) - spec_levels))) / 5e-7,
        "aligned flow vs eq. 21 drop times / 1e-5": ode_err / 1e-5,
        "aligned drop times vs eq. 71 / 1e-2": esc_err / 1e-2,
    }
    disc = max(parts.values())
    order_ok = bool(np.all(np.isfinite(p.drop_times)) and np.all(np.diff(p.drop_times) > 0))
    return Outcome(
        measured={"plateau_levels": p.level_at_flattest.tolist(), "drop_times": p.drop_times.tolist(),
                  "aligned_drop_times": drops_flow.tolist()},
        predicted={"saddle_loss": levels.tolist(), "eq21_drop_times": drops_ode.tolist(),
                   "escape_time": esc.tolist()},
        discrepancy=disc, tolerance=1.0, passed=bool(disc <= 1.0 and order_ok),
        criterion=f"each part / its tolerance <= 1. Random start (w_init = {w:g}): the loss at the "
                  "flattest point of each plateau equals eq. 19 to 1e-3 relative (the unlearned "
                  "heads are O(w_init) and enter M at O(w_init^2..3); measured 2e-9) and M "
                  "there is M_{1..m} to 1e-2 of ||M_D|| (drops in order e_1..e_D; the last is the "
                  "final M = M_D); eq. 82 conserved to 1e-8 (rtol 1e-10). Aligned start "
                  f"(v(0) = {wa:g}): the hand-computed levels for (0.4,0.3,0.2,0.1) to their 6-digit rounding (5e-7); "
                  "full-flow drop times = per-head eq. 21 to 1e-5 (exact there; "
                  "both at rtol 1e-10) and = eq. 71 to 1e-2 (leading order; correction "
                  "O(v(0)/v*) ~ 1e-3)",
        controls=[Control("N -> inf plateau levels sum_{d>m} lambda_d", ctrl_round / 1e-3, 1.0,
                          expected=exp_round / 1e-3),
                  Control("M at plateau m vs the wrong-order M_{1..m-1,m+1}", min(M_swap) / 1e-2, 1.0,
                          expected=exp_swap / 1e-2),
                  Control("escape time tau/(lambda_m w_init) (lambda instead of lambda^2)",
                          esc_wrong / 1e-2, 1.0, expected=exp_esc / 1e-2)],
        details={"parts": parts, "plateau_rel_err": lvl_err.tolist(), "M_rel_err": M_err,
                 "time_near_levels": p.time_near.tolist(), "nfev": res.nfev, "T": T,
                 "final_v": res.v[-1].tolist(), "v_star": (lam / a) ** (1 / 3),
                 "drops_in_order": order_ok},
        figures=staircase_figures(res, ra, T, Ta, levels, (t_ode, curve_ode, v_ode), lam, a),
    )


# -- (d) the implicit solution of the scalar ODE (eq. 70) -------------------------------------
@check("linear_attention.separate.scalar_ode_implicit",
       covers=["linear_attention.separate.scalar_ode_time", "linear_attention.separate.scalar_ode_rhs",
               "linear_attention.separate.scalar_ode_integrand", "linear_attention.data.lambda_hat_sq_eigenvalue"],
       decides=["linear_attention.separate.scalar_ode_integrand"],
       method="exact_flow",
       title="Eq. 70: the implicit solution t(v) of the scalar ODE against its numerical integration",
       settings=[Setting("lam", "float", quick=0.3, full=0.3, low=1e-3, high=1.0,
                         doc="the eigenvalue lambda (default lambda_2 of the Fig.-1 spectrum; tr Lambda = 1)"),
                 Setting("N", "int", quick=31, full=31, low=1, high=10**6, doc="context length N"),
                 Setting("v0", "float", quick=1e-3, full=1e-3, low=1e-8, high=0.1, doc="the start v(0)")])
def scalar_ode_implicit(ctx):
    lam, N, T = ctx.setting("lam"), ctx.setting("N"), 1.0
    a = float(theory.get("linear_attention.data.lambda_hat_sq_eigenvalue")(lam=lam, trLambda=T, N=N))
    tau, v0 = 1.0, ctx.setting("v0")
    v_star = (lam / a) ** (1 / 3)
    targets = v_star * np.array([0.01, 0.1, 0.5, 0.9, 0.99])
    closed = np.array([_cf("linear_attention.separate.scalar_ode_time", v=v, v0=v0, lam=lam, a=a, tau=tau)
                       for v in targets])

    # the record at each v the integrator asks for, validated once (ClosedForm.of): the values of full calls
    f_rhs = theory.get("linear_attention.separate.scalar_ode_rhs").of("v", lam=lam, a=a, tau=tau)

    def rhs(t, y):
        return [f_rhs(max(y[0], 0.0))]

    # one solve, an event per target, the last terminal: the steps up to each event are those of a solve
    # stopped there (the same integrator on the same span), so the same event times as one solve per target
    events = []
    for v in targets:
        def hit(t, y, v=v):
            return y[0] - v
        events.append(hit)
    events[-1].terminal = True
    sol = solve_ivp(rhs, [0, 2 * closed[-1]], [v0], events=events, rtol=1e-12, atol=1e-15, method="LSODA")
    numeric = np.array([float(te[0]) for te in sol.t_events])
    err = float(np.max(np.abs(closed - numeric) / numeric))
    # the integrand of eq. 70, derived and as printed (v^2 where v^5 belongs), integrated by quadrature
    integrand = {printed: theory.get("linear_attention.separate.scalar_ode_integrand").of("v", printed=printed, lam=lam,
                                                                                         a=a, tau=tau)
                 for printed in (False, True)}

    def quad_time(printed, v):
        return quad(integrand[printed], v0, v, epsrel=1e-12, epsabs=0.0, limit=400)[0]

    quad_derived = np.array([quad_time(False, v) for v in targets])
    err_integrand = float(np.max(np.abs(quad_derived - numeric) / numeric))
    typo = np.array([quad_time(True, v) for v in targets])
    typo_err = float(np.max(np.abs(typo - numeric) / numeric))
    return Outcome(
        measured=numeric.tolist(), predicted=closed.tolist(), discrepancy=max(err, err_integrand), tolerance=1e-7,
        criterion="max relative |t(v) - event time of solve_ivp on eq. 21| at v/v* = 0.01..0.99 for t(v) from "
                  "eq. 70's antiderivative and from quadrature of the derived integrand (integrator rtol 1e-12; "
                  "1e-7 leaves room for event location)",
        controls=[Control("eq. 70 with the printed integrand v^2 in place of v^5 (quadrature)", typo_err, 1e-7,
                          expected=float(np.max(np.abs(typo - closed) / closed)))],
        details={"lam": lam, "a": a, "v0": v0, "v_star": v_star, "targets": targets.tolist()},
    )


# -- (e) the loss along the alignment ansatz ---------------------------------------------------
@check("linear_attention.separate.ansatz_loss",
       covers=["linear_attention.separate.ansatz_loss_change", "linear_attention.data.lambda_hat_sq_eigenvalue"],
       method="exact_flow",
       title="Loss along the exact aligned flow = tr Lambda + sum of the ansatz loss changes (eqs. 20-21)",
       settings=[Setting("N", "int", quick=31, full=31, low=1, high=10**6, doc="context length N"),
                 Setting("w_init", "float", quick=0.05, full=0.05, low=1e-6, high=0.5,
                         doc="v(0) of the balanced aligned start")])
def ansatz_loss(ctx):
    lam = np.array([0.4, 0.3, 0.2, 0.1])
    N = ctx.setting("N")
    mo = fs.moments(lam, N)
    v0, k0, q0 = fs.init_aligned_separate(mo, 4, 1, ctx.setting("w_init"))
    res = fs.integrate(mo, None, v0, k0, q0, tau=1.0, t_eval=np.linspace(0, 400, 41), rtol=1e-10,
                       method="LSODA")
    a = np.array([_cf("linear_attention.data.lambda_hat_sq_eigenvalue", lam=l, trLambda=1.0, N=N) for l in lam])
    dirs = np.abs(res.k[:, :, 0, :]).argmax(axis=2)      # head -> its eigen-direction (Lambda diagonal)

    def predicted(a_used):
        return np.array([1.0 + sum(_cf("linear_attention.separate.ansatz_loss_change", v=abs(res.v[j, i]),
                                       lam=lam[dirs[j, i]], a=a_used[dirs[j, i]]) for i in range(4))
                         for j in range(len(res.t))])

    err = float(np.max(np.abs(res.loss - predicted(a)) / res.loss))
    wrong = float(np.max(np.abs(res.loss - predicted(lam**2)) / res.loss))  # N -> inf: a_d -> lambda_d^2
    return Outcome(
        measured=res.loss.tolist(), predicted=predicted(a).tolist(), discrepancy=err, tolerance=1e-8,
        criterion=f"max relative |L(M(t)) of the exact flow (balanced aligned start, H = D = 4, N = {N}) - "
                  "tr Lambda - sum_d (-2 lambda_d^2 v_d^3 + lambda_d a_d v_d^6)| over t in [0, 400] tau; "
                  "the manifold is invariant, so only the integrator's rtol 1e-10 remains",
        controls=[Control("a_d -> lambda_d^2 (the N -> infinity ansatz loss)", wrong, 1e-8,
                          expected=float(np.max(np.abs(predicted(lam**2) - predicted(a)) / predicted(a))))],
    )


# -- (f) the N -> infinity limit of the PCR predictor (eq. 22) -----------------------------------
def _loglog_slope(N, err) -> float:
    x, y = np.log(np.asarray(N, float)), np.log(np.asarray(err, float))
    return float(np.polyfit(x, y, 1)[0])


@check("linear_attention.separate.pcr_limit",
       covers=["linear_attention.separate.pcr_limit_matrix", "linear_attention.separate.fixed_point_matrix"],
       method="monte_carlo",
       title="In-context PCR at M_m tends to P_m Lambda^{-1} as N -> infinity at rate 1/N, and its "
             "loss at large N to the limit loss sum_{d>m} lambda_d (eq. 22; Fig.-1 spectrum)",
       settings=[Setting("N", "int", quick=10**5, full=10**6, low=len(SPECTRUM), high=10**12,
                         doc="context length N of the Monte Carlo part (N Lambda_hat drawn as a Wishart matrix)"),
                 Setting("samples", "int", quick=400_000, full=10_000_000, low=10_000, high=10**9,
                         doc="sampled sequences of the Monte Carlo part")])
def pcr_limit(ctx):
    """Eq. 22's limit: ``M_m(N) -> P_m Lambda^{-1}`` and ``beta^T M_m x_q -> w^T P_m x_q``.

    (i) Deterministic: ``e_m(N) = ||M_m(N) - P_m Lambda^{-1}||_F / ||P_m Lambda^{-1}||_F`` with
    ``M_m(N)`` = ``fixed_point_matrix(S = 1..m)`` and the limit = ``pcr_limit_matrix``, for
    ``N`` from 1e3 to 1e6; the least-squares log-log slope must be -1. Since
    ``M_m(N) - M_inf = -P Lambda^{-1} C (N + C)^{-1}`` with ``C = I + tr(Lambda) Lambda^{-1}``,
    the local slope is ``-1 + O(c/N)``, ``c = 1 + tr(Lambda)/lambda_m``: tolerance
    ``|slope + 1| <= 2 c_max / N_min`` (2.2e-2 here). (ii) Monte Carlo at ``N = 1e5``
    (``N Lambda_hat`` drawn as a Wishart matrix, :func:`sample_wishart_betas`): the loss of
    ``beta^T M_m(N) x_q`` for ``m = 0..D-1`` against the limit loss
    ``L_inf(P_m Lambda^{-1}) = tr Lambda - 2 tr(Lambda^2 M) + tr(M^T Lambda^2 M Lambda)``
    (the population loss with ``E Lambda_hat^2 -> Lambda^2``), ``|z| < z_threshold(D)``; the
    finite-``N`` bias ``sum_{d<=m} lambda_d c_d / (N + c_d) <= 3.9e-5`` is < 0.2 SE.
    Negative control: the full inverse ``Lambda^{-1}`` (no projector) in place of the limit:
    its deterministic error does not decay (slope ~ 0) and the loss of ``beta^T Lambda^{-1} x_q``
    tends to 0, not to ``sum_{d>m} lambda_d``.
    """
    rng = ctx.rng
    Lam = random_covariance(rng, SPECTRUM)
    lam = np.array(SPECTRUM)
    D = lam.size
    tr = float(np.sum(lam))
    Ns = np.unique(np.geomspace(1e3, 1e6, 7).round().astype(int))
    lim = {m: np.asarray(_cf("linear_attention.separate.pcr_limit_matrix", Lambda=Lam, m=m))
           for m in range(D + 1)}
    inv = np.linalg.inv(Lam)
    slopes, ctrl_slopes, first_order = {}, {}, {}
    for m in range(1, D + 1):
        Ms = [np.asarray(_cf("linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=int(N),
                             S=list(range(1, m + 1)))) for N in Ns]
        e = [np.linalg.norm(M - lim[m]) / np.linalg.norm(lim[m]) for M in Ms]
        slopes[m] = _loglog_slope(Ns, e)
        first_order[m] = float(Ns[-1] * e[-1])
        if m < D:
            ctrl_slopes[m] = _loglog_slope(Ns, [np.linalg.norm(M - inv) / np.linalg.norm(inv) for M in Ms])
    c_max = 1.0 + tr / float(np.min(lam))
    slope_tol = 2.0 * c_max / float(Ns[0])
    slope_dev = max(abs(s + 1.0) for s in slopes.values())
    ctrl_slope_dev = min(abs(s + 1.0) for s in ctrl_slopes.values())
    # (ii) Monte Carlo of the loss at large N
    N_big = ctx.setting("N")
    total = ctx.setting("samples")
    chunk = 100_000
    ms = list(range(D))
    M_fin = np.stack([np.asarray(_cf("linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=N_big,
                                     S=list(range(1, m + 1)))) for m in ms])
    L2 = Lam @ Lam
    L_inf = np.array([np.trace(Lam) - 2 * np.trace(L2 @ lim[m]) + np.trace(lim[m].T @ L2 @ lim[m] @ Lam)
                      for m in ms])
    acc, acc_ctrl = batch_mean(), batch_mean()
    done = 0
    while done < total:
        k = min(chunk, total - done)
        beta, x_q, y_q, _ = sample_wishart_betas(rng, Lam, N_big, k)
        yhat = np.einsum("bi,mij,bj->bm", beta, M_fin, x_q)
        acc.add((y_q[:, None] - yhat) ** 2)
        acc_ctrl.add(((y_q - np.einsum("bi,ij,bj->b", beta, inv, x_q)) ** 2)[:, None])
        done += k
    est, est_c = acc.result(), acc_ctrl.result()
    z = est.z(L_inf)
    z_crit = z_threshold(D)
    z_ctrl = float(np.min(np.abs((est_c.mean[0] - L_inf) / est_c.se[0])))
    # expected: the population loss of beta^T Lambda^{-1} x_q at N (eq. 9b) against the limit losses
    L_inv = float(_cf("linear_attention.merged.loss", Lambda=Lam, N=N_big, M=inv))
    z_ctrl_exp = float(np.min(np.abs((L_inv - L_inf) / est_c.se[0])))
    bias = np.array([sum(lam[d] * (1 + tr / lam[d]) / (N_big + 1 + tr / lam[d]) for d in range(m)) for m in ms])
    parts = {"|slope + 1| / tol": slope_dev / slope_tol, "max |z| / z_crit": float(np.max(np.abs(z))) / z_crit}
    disc = max(parts.values())
    return Outcome(
        measured={"log-log slope of ||M_m(N) - P_m Lambda^-1|| (m = 1..D)": list(slopes.values()),
                  "MC loss at N = %d (m = 0..D-1)" % N_big: est.mean.tolist()},
        predicted={"slope": -1.0, "limit loss sum_{d>m} lambda_d": L_inf.tolist()},
        discrepancy=disc, tolerance=1.0,
        criterion=f"max of two parts <= 1: |slope + 1| <= 2 c_max / N_min = {slope_tol:.3g} for the "
                  f"relative distance of fixed_point_matrix(N, S = 1..m) to pcr_limit_matrix over N = "
                  f"{Ns[0]}..{Ns[-1]} (the local slope is -1 + O(c/N), c = 1 + tr Lambda/lambda_m); and "
                  f"|z| < z_threshold({D}) = {z_crit:.2f} for the Monte Carlo loss ({total} sequences, "
                  f"Wishart-drawn Lambda_hat at N = {N_big}) of beta^T M_m(N) x_q against the limit loss "
                  "at P_m Lambda^{-1} (finite-N bias < 0.2 SE)",
        controls=[Control("full inverse Lambda^{-1} (no projector): min over m < D of |slope + 1| / tol",
                          ctrl_slope_dev / slope_tol, 1.0, expected=ctrl_slope_dev / slope_tol),
                  Control("full inverse: loss of beta^T Lambda^{-1} x_q vs the limit losses, min |z| / z_crit",
                          z_ctrl / z_crit, 1.0, expected=z_ctrl_exp / z_crit)],
        details={"parts": parts, "N grid": Ns.tolist(), "slopes": slopes, "control slopes": ctrl_slopes,
                 "N_max * e_m(N_max) (first-order coefficient)": first_order, "z": z.tolist(),
                 "se": est.se.tolist(), "finite-N bias": bias.tolist(), "bias / se": (bias / est.se).tolist(),
                 "control loss (Lambda^-1)": float(est_c.mean[0]), "sequences": est.n},
    )
