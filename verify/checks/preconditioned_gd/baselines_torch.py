"""App. D, Figs. 6-7 of Ahn, Cheng, Daneshmand, Sra 2023: the trained linear transformer against
plain GD, Sigma^{-1}-preconditioned GD and least squares, over the context length ``n`` (Fig. 6)
and the depth ``L`` (Fig. 7).

The transformer of both figures is the authors' ``Transformer_F``: the general layers of eq. 11
(``P_l = [[B_l, 0], [0, 1]]``, ``Q_l = [[A_l, 0], [0, 0]]``, every entry of ``A_l, B_l`` trained),
so it can run GD++ (Theorem 4) and beat every preconditioned GD. The models of one figure are
trained side by side (:func:`verify.models.preconditioned_gd_sweep.train_gdpp_sweep`) and evaluated
on held-out contexts (float64, numpy forward) together with the two constant-step algorithms, run
as the sparse transformer of eq. 8 on the same contexts; the query and the task are integrated out
exactly (:func:`verify.models.preconditioned_gd_baselines.conditional_losses`: the prediction is
``x_q^T R w*``, one forward pass with ``d`` label rows and ``d`` query columns gives ``R``), which
leaves only the context's randomness (the trained GD++ model's per-prompt errors are heavy-tailed:
at ``n = 6``, 3e4 plain held-out prompts gave it s.e. up to 0.09 against 0.02 typically). Every
baseline curve is a registered closed form
(:func:`verify.models.preconditioned_gd_baselines.baseline_losses`):

- least squares (OLS): ``preconditioned_gd.least_squares.loss``, ``d - min(n, d)`` (the Bayes risk);
- Sigma^{-1}-preconditioned GD with optimal per-layer steps (Theorem 3):
  ``preconditioned_gd.multi_layer.optimal_loss``;
- Sigma^{-1}-preconditioned GD with one step ("one constant step found by grid search"):
  ``preconditioned_gd.multi_layer.gd_optimal_loss`` at ``Sigma = I`` (whitening), step
  ``gd_optimal_step`` at ``Sigma = I``;
- plain GD with its best constant step: ``gd_optimal_loss`` / ``gd_optimal_step`` at Sigma.

The authors' code evaluates the baselines on ``n - 1`` examples (``Z[0:N-1]``: an off-by-one) with
steps from a grid; those curves are drawn dashed (``gd_loss`` at ``Sigma = I`` and ``n - 1`` on the
grid; OLS at ``n - 1``), the assertions use ``n``.

Contains
--------
``preconditioned_gd.baselines.torch_fig7``
    Test loss against the depth L (n = 20, d = 5).
``preconditioned_gd.baselines.torch_fig6``
    Test loss against the context length n (d = 5).
``preconditioned_gd.baselines.torch_fig7_deep``
    Fig. 7 at L = 3, 4: typical contexts (quantiles) against Theorem 3's optimal preconditioned GD.
``preconditioned_gd.baselines.torch_fig6_deep``
    Fig. 6 at the paper's L = 3: the same, over n.
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.figures import lines, series
from verify.models.preconditioned_gd_baselines import (
    CODE_GRID_GD,
    CODE_GRID_PGD,
    GD_LOSS,
    GD_OPT,
    GD_STEP,
    OLS,
    PGD_OPT,
    baseline_losses,
    conditional_losses,
)
from verify.models.preconditioned_gd_training import sqrt_psd
from verify.settings import Setting
from verify.stats import evaluate as _cf
from verify.stats import z_threshold
from verify.tasks.preconditioned_gd import EXPERIMENT_EIGENVALUES, distorted_covariance

D = len(EXPERIMENT_EIGENVALUES)
COVERS = [OLS, PGD_OPT, GD_LOSS, GD_STEP, GD_OPT]   # Fig. 7 has no OLS curve: COVERS[1:]
GDPP_OPT = "preconditioned_gd.gdpp.optimal_loss"

#: Quick: short side-by-side runs from N(0, 1e-3^2) on every entry, Adam (0.9, 0.999), lr 0.1
#: halved every 100 steps, per-matrix gradient clipping 0.01 (the paper's), a fresh batch each
#: step. Full: the authors' depths/lengths with longer runs (a CPU-sized version of their
#: 20000 (Fig. 7) / 8000 (Fig. 6) steps of batch 20000-40000).
SWEEP_QUICK = dict(steps=400, batch=300, lr=0.1, halve_every=100, betas=(0.9, 0.999), clip=0.01)
SWEEP_FULL = dict(steps=8000, batch=2000, lr=0.02, halve_every=2000, betas=(0.9, 0.999), clip=0.01,
                  compile=True, threads=None)

#: Tolerance on "at most the optimal preconditioned GD": the trained loss may exceed Theorem 3's
#: optimum by this fraction (plus z_crit s.e.). Binding only at L = 1, where the transformer can do
#: no better than that optimum (B_0 never reaches the output); at L >= 2 it runs GD++ and ends far
#: below. Quick: a 400-step run (the eigenvalue-0.0625 direction learns slowly); full: converged.
PGD_TOL = {"quick": 0.15, "full": 0.05}
#: "Far below plain GD": the trained loss (plus z_crit s.e.) times this factor must stay below plain
#: GD's closed form (best step) for L >= 2 (Fig. 7) and n >= 2d (Fig. 6). At L = 1 the attainable
#: ratio is only 2.247/1.154 = 1.95 (n = 20); for n < 2d the methods crowd towards the Bayes risk
#: (n = 6, L = 2: plain GD 2.73, Theorem 3's optimum 1.70): there the trained loss must be
#: significantly below plain GD run on the same prompts (paired z-test).
PLAIN_FACTOR = 1.5
#: A batch loss above this stops a sweep (a non-finite one always does): a divergence guard, not a
#: spike guard. One prompt with a large Wishart eigenvalue lifts a batch loss far above E y^2 = 5 at
#: small n or depth 3-4 while the clipped steps stay sound (L = 1..4 at quick settings, seed 0: above
#: 1e6 at step 49); a diverging run overflows within a few steps.
STOP_ABOVE = 1e30

TRAINED, PGD, GD = "trained", "PGD, one step (simulated)", "plain GD, best step (simulated)"


def _train(ctx, Sigma, specs, settings):
    """The side-by-side sweep of ``specs`` (float64 quick, float32 full); in the quick profile on the CPU
    with the loss gradient in closed form (``closed_gradient``: the same gradient as autograd to
    round-off, about 40 % less CPU per step)."""
    import torch

    from verify.models.preconditioned_gd_sweep import train_gdpp_sweep

    quick_cpu = ctx.profile == "quick" and torch.device(ctx.device).type == "cpu"
    return train_gdpp_sweep(specs, Sigma, generator=ctx.torch_generator(ctx.device),
                            dtype=torch.float64 if ctx.profile == "quick" else torch.float32,
                            stop_above=STOP_ABOVE, iterate=ctx.iterate, closed_gradient=quick_cpu, **settings)


def _stopped(run, what: str) -> Outcome:
    return Outcome(measured={"stopped at step": run.stopped_at}, predicted={"a run to the end": True},
                   discrepancy=float("inf"), tolerance=1.0,
                   criterion=f"{what}: a batch loss passed {STOP_ABOVE:g} or was not finite",
                   details={"settings": run.settings, "seconds": run.seconds})


def _models(run, k: int, Sigma, base: dict, tag: str = "") -> tuple[dict, dict]:
    """Model ``k`` of a sweep and the two constant-step algorithms at its ``(L, n)`` as ``(A, B)`` in the
    eq.-11 convention (the sparse layers of eq. 8: ``A_l -> -A_l``, ``B_l = 0``; names suffixed by
    ``tag``), and the trained model's Theorem-4 scalars."""
    from verify.models.linear_transformer import dist_to_identity

    L, n = run.specs[k]
    A, B = run.weights(k)
    M = np.einsum("ij,ljk,km->lim", sqrt_psd(Sigma, 0.5), A, sqrt_psd(Sigma, 0.5))
    zero = np.zeros((L, D, D))
    models = {TRAINED + tag: (A, B),
              PGD + tag: (np.stack([-base["PGD step a*"] * np.linalg.inv(Sigma)] * L), zero),
              GD + tag: (np.stack([-base["plain GD step eta*"] * np.eye(D)] * L), zero)}
    info = {"a_l (eq. 11 sign)": np.trace(M, axis1=1, axis2=2) / D, "b_l": np.trace(B, axis1=1, axis2=2) / D,
            "Dist(Sigma^1/2 A_l Sigma^1/2, I)": dist_to_identity(M),
            "final batch loss": float(np.mean(run.batch_loss[-max(1, len(run.step) // 10):, k]))}
    return models, info


def _z(est, value: float) -> float:
    return float(est.z(value))


def _trained_loss(est: dict, tag: str, b: dict) -> tuple[float, float]:
    """The trained model's loss with the one-step PGD run on the same prompts as a control variate
    (the regression estimator): ``mean(e_trained) - beta (mean(e_PGD) - gd_optimal_loss(I))``,
    ``beta = cov(e_trained, e_PGD) / var(e_PGD)`` from the three standard errors (of the two means
    and of the paired difference). Its s.e. ``sqrt(se_t^2 - cov^2 / se_P^2)`` is at most the plain
    mean's; the PGD's expectation is its closed form, checked alongside."""
    t, p, diff = est[TRAINED + tag], est[PGD + tag], est[(TRAINED + tag, PGD + tag)]
    st2, sp2, sd2 = float(t.se) ** 2, float(p.se) ** 2, float(diff.se) ** 2
    cov = (st2 + sp2 - sd2) / 2
    beta = cov / sp2 if sp2 > 0 else 0.0
    return float(t.mean) - beta * (float(p.mean) - b["PGD, one step"]), float(np.sqrt(max(st2 - beta * cov, 0.0)))


def _model_parts(parts: dict, label: str, est: dict, tag: str, b: dict, tol: float, z_crit: float, far: bool):
    """The per-model parts (normalised, <= 1 passes): the trained loss (:func:`_trained_loss`) against
    Theorem 3's optimum and plain GD, the simulated constant-step algorithms against their closed forms."""
    f_opt, f_gd = b["PGD, optimal steps (Theorem 3)"], b["plain GD, best step"]
    tr, se = _trained_loss(est, tag, b)
    parts[f"{label}: (trained + z s.e. - Theorem 3 optimum) / (tol f*)"] = (tr + z_crit * se - f_opt) / (tol * f_opt)
    if far:
        parts[f"{label}: {PLAIN_FACTOR} x (trained + z s.e.) / plain GD"] = PLAIN_FACTOR * (tr + z_crit * se) / f_gd
    else:
        zd = -_z(est[(TRAINED + tag, GD + tag)], 0.0)     # paired: plain GD - trained on the same prompts
        parts[f"{label}: z_crit / z(plain GD - trained), paired"] = z_crit / zd if zd > 0 else float("inf")
    parts[f"{label}: |z| simulated PGD one step vs gd_optimal_loss(I) / z_crit"] = (
        abs(_z(est[PGD + tag], b["PGD, one step"])) / z_crit)
    parts[f"{label}: |z| simulated plain GD vs gd_optimal_loss(Sigma) / z_crit"] = (
        abs(_z(est[GD + tag], f_gd)) / z_crit)


def _row(est: dict, tag: str, b: dict) -> dict:
    out = {k: [float(est[k + tag].mean), float(est[k + tag].se)] for k in (TRAINED, PGD, GD)}
    out[TRAINED + " (PGD control variate)"] = list(_trained_loss(est, tag, b))
    return out


# =====================================================================================
# Fig. 7: loss against depth
# =====================================================================================
#: Depths of the closed-form curves.
CURVE_L = (1, 2, 3, 4)


@check("preconditioned_gd.baselines.torch_fig7", covers=COVERS[1:], method="torch", needs=("torch",),
       title="App. D, Fig. 7: the trained L-layer transformer reaches Theorem 3's optimal preconditioned GD "
             "(L = 1) or beats it (GD++, L >= 2), far below plain GD; the baselines run against their closed forms",
       settings=[Setting("L", "ints", quick=(1, 2), full=(1, 2, 3, 4), low=1, high=4, doc="depths L (one model each)"),
                 Setting("steps", "int", quick=SWEEP_QUICK["steps"], full=SWEEP_FULL["steps"], low=1, high=10**6,
                         doc="optimiser steps"),
                 Setting("batch", "int", quick=SWEEP_QUICK["batch"], full=SWEEP_FULL["batch"], low=1, high=10**6,
                         doc="prompts per model and step"),
                 Setting("samples", "int", quick=10_000, full=200_000, low=1000, high=10**8,
                         doc="held-out contexts (shared by every model and algorithm; query and task "
                             "integrated out exactly)")])
def torch_fig7(ctx):
    """Fig. 7 (``n = 20``, ``d = 5``, the experiments' Sigma, a random rotation): the GD++ transformer
    trained at each depth; it and the two constant-step algorithms (the sparse transformer with
    ``A_l = a* Sigma^{-1}`` and ``A_l = eta* I``, the closed forms' best steps) run on the same held-out
    prompts.

    Asserted per ``L``: (i) the trained loss plus z_crit s.e. is at most Theorem 3's optimum times
    ``1 +`` :data:`PGD_TOL`; (ii) it (plus z_crit s.e.) times :data:`PLAIN_FACTOR` is below plain GD's
    ``gd_optimal_loss`` (``L >= 2``; at ``L = 1`` significantly below plain GD on the same prompts,
    paired); (iii) the simulated one-step PGD and plain GD within z_crit s.e. of ``gd_optimal_loss`` at
    ``Sigma = I`` and at Sigma; then (iv) the trained loss falls with ``L`` (paired z between
    consecutive depths) and (v) the closed-form curves are ordered as drawn, Theorem 3's optimum <=
    one-step PGD < plain GD, each falling with ``L = 1..4``. The trained loss is the one-step PGD's
    closed form plus the paired difference on the same prompts (:func:`_trained_loss`).

    Quick (``L = 1, 2``, 400 steps of batch 300, 1e4 contexts), seeds 0-19: 20/20 pass, worst part
    0.78 (L = 2, the simulated plain GD's |z| 4.2 against z_crit 5.31). Trained: L = 1 1.157-1.230
    (Theorem 3's optimum 1.1538: 0-7 % above), L = 2 0.150-0.211 (Theorem 3's optimum 0.3612, one-step
    PGD 0.4990, plain GD 1.6407; the L = 2 GD++ optimum 0.0575); the simulated one-step PGD and plain
    GD within 0.78 z_crit of their closed forms; the controls at least 5.52 (expected >= 4.86,
    tolerance 1) and 257 (expected >= 256, threshold 5.31); the same statistics with the gradient by
    autograd (the closed form, :func:`_train`, changes the runs at round-off). Cost at seed 0: 0.60 s
    CPU (warm; 0.89 s with autograd, back to back, on the shared 2-core machine under a load average of
    6-13). Full profile not run here: a probe of 100 of
    its 8000 steps (batch 1000, L = 1..4, torch.compile) took 87 s under that load. **Depths 3-4 are
    not covered by the quick evidence:** with the quick schedule and ``--set L=1,2,3,4`` (seeds 0-4)
    every seed fails at L = 3 or 4: the trained models' per-context losses are carried by rare
    contexts (L = 3: 0.08-0.35 with s.e. 0.02-0.16 on 1e4 contexts; L = 4: 0.008 to 4e4; the exact
    gdpp.loss at the L = 3 models' projections on Theorem 4's set is 0.075-0.29 against Theorem 3's
    0.1336), and the simulated plain GD's z-test at L = 4 reached |z| = 6.0 (seed 4), past the normal
    approximation at that sample size. The full profile's L = 3, 4 parts are untested here. Depths 3
    and 4 are checked by ``torch_fig7_deep`` on typical contexts (quantiles of the per-context loss
    against Theorem 3's PGD on the same contexts): the trained models' expected loss there is carried
    by contexts rarer than any batch (importance sampling: 0.9-33 at L = 3, 2e21-6e31 at L = 4 after
    the quick schedule), so their means are not the figure's curve.

    Controls: the trained model read as plain GD (a Sigma-blind transformer: its loss within the
    tolerance of plain GD's); the simulated plain GD read as Sigma-free (against the one-step PGD
    closed form, which plain GD would equal if Sigma dropped out as it does for preconditioned GD).
    """
    Ls = tuple(ctx.setting("L"))
    n = 20
    settings = dict(ctx.pick(quick=SWEEP_QUICK, full=SWEEP_FULL), steps=ctx.setting("steps"),
                    batch=ctx.setting("batch"))
    samples, tol = ctx.setting("samples"), PGD_TOL[ctx.profile]
    Sigma = distorted_covariance(ctx.rng, EXPERIMENT_EIGENVALUES)
    run = _train(ctx, Sigma, [(L, n) for L in Ls], settings)
    if run.stopped_at is not None:
        return _stopped(run, f"Fig. 7 sweep L = {Ls}")
    curve_L = sorted(set(Ls) | set(CURVE_L))
    base = {L: baseline_losses(EXPERIMENT_EIGENVALUES, n, L, CODE_GRID_GD) for L in curve_L}  # variable_L's grid
    models, info = {}, {}
    for k, L in enumerate(Ls):
        m, info[L] = _models(run, k, Sigma, base[L], f" L={L}")
        models.update(m)
    est = conditional_losses(ctx.rng, Sigma, n, samples, models)
    z_crit = z_threshold(4 * len(Ls) + max(len(Ls) - 1, 0))
    parts = {}
    for L in Ls:
        _model_parts(parts, f"L={L}", est, f" L={L}", base[L], tol, z_crit, far=L > 1)
    for L0, L1 in zip(Ls, Ls[1:]):
        z_dec = _z(est[(TRAINED + f" L={L0}", TRAINED + f" L={L1}")], 0.0)
        parts[f"L={L0}->{L1}: z_crit / z(trained loss decrease), paired"] = (
            z_crit / z_dec if z_dec > 0 else float("inf"))
    keys = ("PGD, optimal steps (Theorem 3)", "PGD, one step", "plain GD, best step")
    ordered = all(base[L][keys[0]] <= base[L][keys[1]] < base[L][keys[2]] for L in curve_L if L > 1)
    parts["closed forms: Theorem 3 optimum <= PGD one step < plain GD (L >= 2)"] = 0.0 if ordered else float("inf")
    for key in keys:
        vals = [base[L][key] for L in curve_L]
        parts[f"closed form {key}: falls with L"] = 0.0 if all(x > y for x, y in zip(vals, vals[1:])) else float("inf")
    Lm = max(Ls)
    (tr, tr_se), gd = _trained_loss(est, f" L={Lm}", base[Lm]), est[GD + f" L={Lm}"]
    f_gd, f_one, f_opt = (base[Lm][key] for key in ("plain GD, best step", "PGD, one step",
                                                    "PGD, optimal steps (Theorem 3)"))
    controls = [
        Control(f"the transformer as plain GD (Sigma-blind), L = {Lm}: |trained - plain GD| / (tol plain GD + z s.e.)",
                abs(tr - f_gd) / (tol * f_gd + z_crit * tr_se), 1.0,
                expected=abs(f_opt - f_gd) / (tol * f_gd + z_crit * tr_se)),
        Control(f"plain GD Sigma-free (simulated plain GD vs gd_optimal_loss(I)), L = {Lm}: |z|",
                abs(_z(gd, f_one)), z_crit, expected=abs(f_gd - f_one) / float(gd.se))]
    per_L = {L: {"held-out [mean, s.e.]": _row(est, f" L={L}", base[L]), **info[L]} for L in Ls}
    return Outcome(
        measured={f"L={L}": per_L[L]["held-out [mean, s.e.]"] for L in Ls},
        predicted={f"L={L}": {k: base[L][k] for k in keys} for L in Ls},
        discrepancy=max(parts.values()), tolerance=1.0,
        criterion=(f"max of normalised parts <= 1 over L = {Ls} (n = {n}, d = {D}, eigenvalues "
                   f"{EXPERIMENT_EIGENVALUES}, {samples} held-out contexts shared by all, (x_q, w*) integrated out, "
                   f"z_crit = {z_crit:.2f}): "
                   f"trained + z s.e. <= Theorem 3's optimum (1 + {tol}); {PLAIN_FACTOR} x (trained + z s.e.) below "
                   "plain GD's gd_optimal_loss (L = 1: significantly below, paired); the simulated one-step PGD and "
                   "plain GD within z_crit s.e. of gd_optimal_loss at I and at Sigma; the trained loss falling with L "
                   "(paired); the closed-form curves ordered and falling with L. "
                   + f"{settings['steps']} steps of batch {settings['batch']} per model."),
        controls=controls,
        details={"settings": settings, "n": n, "per L": per_L, "parts": parts,
                 "baselines (closed forms)": {f"L={L}": base[L] for L in curve_L},
                 "Sigma eigenvalues": np.linalg.eigvalsh(Sigma), "seconds (training)": run.seconds,
                 "device": ctx.device},
        figures={"fig7": _fig7(base, per_L, n, curve_L)},
    )


def _fig7(base, per_L, n, curve_L) -> dict:
    return _baseline_figure(f"Fig. 7: test loss against depth (n = {n}, d = {D})", "layers / steps L",
                            "trained transformer (eq. 11)", base, per_L, curve_L, log=True)


def _baseline_figure(title: str, xlabel: str, trained: str, base: dict, per: dict, curve, ols: bool = False,
                     log: bool = False) -> dict:
    """Figs. 6-7: the closed-form curves over ``curve`` (``base``: one dict of baselines per x), the
    trained transformer and the simulated algorithms over the trained x (``per``), OLS where asked."""
    def pick(key):
        return [base[x][key] for x in curve]

    xs = sorted(per)

    def held(key):
        return [per[x]["held-out [mean, s.e.]"][key] for x in xs]

    out = [series(trained, xs, [m for m, _ in held(TRAINED)], style="o", yerr=[e for _, e in held(TRAINED)])]
    if ols:
        out.append(series("OLS: d - min(n, d) (least_squares.loss)", curve, pick("OLS")))
    out += [series("PGD, optimal steps (Theorem 3: multi_layer.optimal_loss)", curve,
                   pick("PGD, optimal steps (Theorem 3)")),
            series("PGD, one step (gd_optimal_loss at Sigma = I)", curve, pick("PGD, one step")),
            series("plain GD, best step (gd_optimal_loss)", curve, pick("plain GD, best step")),
            series("PGD, one step, simulated", xs, [m for m, _ in held(PGD)], style="o"),
            series("plain GD, simulated", xs, [m for m, _ in held(GD)], style="o"),
            series("authors' code: PGD, grid step, n - 1 examples", curve,
                   pick("code: PGD, grid step, n - 1 examples"), style="--")]
    if ols:
        out.append(series("authors' code: OLS, n - 1 examples", curve, pick("code: OLS, n - 1 examples"),
                          style=":"))
    return lines(title, xlabel, "test loss", out, **({"yscale": "log"} if log else {}))


# =====================================================================================
# Fig. 6: loss against context length
# =====================================================================================
#: Context lengths of the closed-form curves (the paper's grid, and the odd ones below 6).
CURVE_N = (2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 18, 20)


@check("preconditioned_gd.baselines.torch_fig6", covers=COVERS, method="torch", needs=("torch",),
       title="App. D, Fig. 6: over the context length n, the trained transformer sits between least squares (the "
             "Bayes risk) and optimal preconditioned GD, below plain GD; the baselines run against their closed forms",
       settings=[Setting("L", "int", quick=2, full=3, low=1, high=4, doc="depth L of every model"),
                 Setting("n", "ints", quick=(2, 10, 20), full=(2, 4, 6, 8, 10, 12, 14, 16, 18, 20), low=1, high=200,
                         doc="context lengths n (one model each)"),
                 Setting("steps", "int", quick=SWEEP_QUICK["steps"], full=SWEEP_FULL["steps"], low=1, high=10**6,
                         doc="optimiser steps"),
                 Setting("batch", "int", quick=SWEEP_QUICK["batch"], full=SWEEP_FULL["batch"], low=1, high=10**6,
                         doc="prompts per model and step"),
                 Setting("samples", "int", quick=10_000, full=200_000, low=1000, high=10**8,
                         doc="held-out contexts per context length (query and task integrated out exactly)")])
def torch_fig6(ctx):
    """Fig. 6 (``d = 5``, the experiments' Sigma, a random rotation): the GD++ transformer of depth
    ``L`` trained at each ``n``; it and the two constant-step algorithms run on the same held-out
    prompts of that ``n``.

    Asserted per ``n``: (i) the trained loss plus z_crit s.e. is at most Theorem 3's optimum times
    ``1 +`` :data:`PGD_TOL`; (ii) it is not significantly below least squares' ``d - min(n, d)``, the
    Bayes risk (one-sided z); (iii) it is below plain GD, by :data:`PLAIN_FACTOR` against
    ``gd_optimal_loss`` for ``n >= 2d`` (significantly, paired z on the same prompts, below ``2d``,
    where the methods crowd towards the Bayes risk); (iv) the simulated one-step PGD and plain GD within
    z_crit s.e. of ``gd_optimal_loss`` at ``Sigma = I`` and at Sigma; and (v) the closed-form curves
    ordered as drawn, OLS <= Theorem 3's optimum <= one-step PGD < plain GD, each but OLS falling with
    ``n`` (on :data:`CURVE_N`). The paper's curves are for ``L = 3``; the quick profile trains
    ``L = 2`` at ``n = 2, 10, 20``, the full one ``L = 3`` at the paper's ``n = 2, 4, ..., 20``.

    Quick, seeds 0-19: 20/20 pass, worst part 0.67 (n = 2, trained vs plain GD, paired). Trained
    3.31-3.38, 0.55-0.65, 0.15-0.22 at n = 2, 10, 20 against OLS 3, 0, 0, Theorem 3's optimum 3.407,
    0.971, 0.361, one-step PGD 3.494, 1.181, 0.499 and plain GD 3.900, 2.190, 1.641; the simulated
    one-step PGD and plain GD within 0.45 z_crit of their closed forms. Controls (threshold 5.40): the
    PGD at n - 1 at least 189 (expected >= 191), the off-by-one Bayes risk at least 16.9, the
    transformer as OLS at least 37.2 (expected >= 11.9). (n = 6 in place of 10, 3e4 plain
    prompts: 1 seed of 20 failed through one heavy-tailed held-out prompt, before the query and
    task were integrated out.) The same statistics with the gradient by autograd (the closed form,
    :func:`_train`, changes the runs at round-off). Cost at seed 0: 0.93 s CPU (warm; 1.29 s with
    autograd, back to back, on the shared 2-core machine under a load average of 6-13). Full profile
    (L = 3, ten n, 8000 steps) not run here. **The paper's depth L = 3 is not covered by the quick
    evidence:** the quick schedule with ``--set L=3`` (seeds 0-2) fails every seed: the trained
    three-layer models' held-out losses are carried by rare contexts (n = 20: 0.32 +- 0.24, 26 +- 24,
    0.15 +- 0.06 on 1e4 contexts), as at Fig. 7's L = 3; ``torch_fig6_deep`` checks the three-layer
    models at ``n = 4, 10, 20`` (full: ``4..20``) on typical contexts (quantiles against Theorem 3's
    PGD on the same contexts).

    Controls: the simulated one-step PGD at the smallest ``n`` against its closed form at ``n - 1``
    (the authors' baselines fit ``n - 1`` examples); the transformer read as least squares at the
    largest ``n >= d`` (loss 0: the paper's transformer stays above OLS there), expected at least the
    GD++ optimum on Theorem 4's set (``gdpp.optimal_loss``) over the s.e.; the authors' off-by-one
    Bayes risk ``d - (n - 1)`` at the smallest ``n`` (the trained model must be significantly below
    it; expected: from Theorem 3's optimum, which it beats).
    """
    L = ctx.setting("L")
    ns = tuple(ctx.setting("n"))
    settings = dict(ctx.pick(quick=SWEEP_QUICK, full=SWEEP_FULL), steps=ctx.setting("steps"),
                    batch=ctx.setting("batch"))
    samples, tol = ctx.setting("samples"), PGD_TOL[ctx.profile]
    Sigma = distorted_covariance(ctx.rng, EXPERIMENT_EIGENVALUES)
    run = _train(ctx, Sigma, [(L, n) for n in ns], settings)
    if run.stopped_at is not None:
        return _stopped(run, f"Fig. 6 sweep n = {ns}, L = {L}")
    curve_n = sorted(set(CURVE_N) | set(ns))
    base = {n: baseline_losses(EXPERIMENT_EIGENVALUES, n, L, CODE_GRID_PGD) for n in curve_n}  # variable_N's grid
    z_crit = z_threshold(5 * len(ns))
    parts, per_n, est_n = {}, {}, {}
    for k, n in enumerate(ns):
        models, info = _models(run, k, Sigma, base[n])
        est = est_n[n] = conditional_losses(ctx.rng, Sigma, n, samples, models)
        _model_parts(parts, f"n={n}", est, "", base[n], tol, z_crit, far=n >= 2 * D)
        tr, tr_se = _trained_loss(est, "", base[n])
        parts[f"n={n}: (OLS - trained) / (z_crit s.e.) (Bayes risk)"] = (base[n]["OLS"] - tr) / (z_crit * tr_se)
        per_n[n] = {"held-out [mean, s.e.]": _row(est, "", base[n]), **info}
    keys = ("OLS", "PGD, optimal steps (Theorem 3)", "PGD, one step", "plain GD, best step")
    ordered = all(base[n][keys[0]] <= base[n][keys[1]] <= base[n][keys[2]] < base[n][keys[3]] for n in curve_n)
    parts["closed forms: OLS <= Theorem 3 optimum <= PGD one step < plain GD (every n of the curve)"] = (
        0.0 if ordered else float("inf"))
    for key in keys[1:]:
        vals = [base[n][key] for n in curve_n]
        parts[f"closed form {key}: falls with n"] = 0.0 if all(x > y for x, y in zip(vals, vals[1:])) else float("inf")
    n0, n1 = min(ns), max(ns)
    (tr0, tr0_se), pgd = _trained_loss(est_n[n0], "", base[n0]), est_n[n0][PGD]
    f_off = base[n0]["code: OLS, n - 1 examples"]
    off_by_one = {"d - (n - 1)": f_off, "trained": [tr0, tr0_se], "z(d - (n - 1) - trained)": (f_off - tr0) / tr0_se}
    f_pgd_off = float(_cf(GD_LOSS, Sigma=[1.0] * D, n=n0 - 1, eta=base[n0]["PGD step a*"], L=L)) if n0 > 1 else float(D)
    tr1, tr1_se = _trained_loss(est_n[n1], "", base[n1])
    f_gdpp = float(_cf(GDPP_OPT, n=n1, d=D, L=L)) if n1 >= D else None
    controls = [
        Control(f"simulated one-step PGD at n = {n0} vs its closed form at n - 1 = {n0 - 1} (the authors' "
                "off-by-one): |z|", abs(_z(pgd, f_pgd_off)), z_crit,
                expected=abs(f_pgd_off - base[n0]["PGD, one step"]) / float(pgd.se))]
    controls.append(Control(f"the authors' off-by-one Bayes risk d - (n - 1) = {f_off:g} at n = {n0}: z(d - (n - 1) - "
                            "trained) (the trained model must be significantly below it)", (f_off - tr0) / tr0_se,
                            z_crit, expected=(f_off - base[n0]["PGD, optimal steps (Theorem 3)"]) / tr0_se))
    if f_gdpp is not None:
        controls.append(Control(f"the transformer as least squares at n = {n1} >= d (loss d - min(n, d) = 0): "
                                "|z(trained - 0)|", abs(tr1) / tr1_se, z_crit,
                                expected=f_gdpp / tr1_se))
    return Outcome(
        measured={f"n={n}": per_n[n]["held-out [mean, s.e.]"] for n in ns},
        predicted={f"n={n}": {k: base[n][k] for k in keys} for n in ns},
        discrepancy=max(parts.values()), tolerance=1.0,
        criterion=(f"max of normalised parts <= 1 over n = {ns} (L = {L}, d = {D}, eigenvalues "
                   f"{EXPERIMENT_EIGENVALUES}, {samples} held-out contexts per n, (x_q, w*) integrated out, "
                   f"z_crit = {z_crit:.2f}): trained + z "
                   f"s.e. <= Theorem 3's optimum (1 + {tol}) and not significantly below d - min(n, d); below plain GD "
                   f"({PLAIN_FACTOR} x against gd_optimal_loss for n >= 2d, paired z-test below); the simulated "
                   "one-step PGD and plain GD within z_crit s.e. of gd_optimal_loss at I and at Sigma; the closed-form "
                   f"curves ordered and falling with n on n = {tuple(curve_n)}. The paper's Fig. 6 is L = 3; "
                   f"L = {L} here, {settings['steps']} steps of batch {settings['batch']} per model."),
        controls=controls,
        details={"settings": settings, "L": L, "per n": per_n, "parts": parts,
                 f"authors' off-by-one Bayes risk at n = {n0}": off_by_one,
                 f"GD++ optimum on Theorem 4's set (gdpp.optimal_loss), n = {n1}": f_gdpp,
                 "baselines (closed forms)": {f"n={n}": base[n] for n in curve_n},
                 "Sigma eigenvalues": np.linalg.eigvalsh(Sigma), "seconds (training)": run.seconds,
                 "device": ctx.device},
        figures={"fig6": _fig6(base, per_n, L, curve_n)},
    )


def _fig6(base, per_n, L, curve_n) -> dict:
    return _baseline_figure(f"Fig. 6: test loss against context length (L = {L}, d = {D})", "context length n",
                            f"trained transformer (eq. 11), L = {L}", base, per_n, curve_n, ols=True)


# =====================================================================================
# Fig. 7 at depths 3 and 4: typical contexts against Theorem 3's optimal preconditioned GD
# =====================================================================================
#: Quantiles of the per-context loss compared with Theorem 3's PGD: asserted (quick: the median; full:
#: the median and the 90 % quantile) and reported (both). After the quick schedule the L = 3 model's
#: 90 % quantile sits at Theorem 3's PGD's (seed 0: upper bound / lower bound 1.10), not below it.
DEEP_QUANTILES = {"quick": (0.5,), "full": (0.5, 0.9)}
DEEP_REPORTED = (0.5, 0.9)
#: Full profile of torch_fig7_deep: a CPU-sized longer run (lr halved every 500 steps).
DEEP_FULL = dict(steps=2000, batch=1000, lr=0.1, halve_every=500, betas=(0.9, 0.999), clip=0.01)
#: Quick batch of torch_fig6_deep's models with n < d (n = 4): its gradient is the noisiest (the Bayes
#: risk d - n stays in every prompt's loss) and its median sits nearest Theorem 3's PGD's; four times
#: the batch of the other n (a multiple of it: the trainer runs it as four rows of the stacked models).
DEEP6_BATCH_BELOW_D = 1200


def _quantile_bounds(values: np.ndarray, q: float, z: float) -> tuple[float, float, float]:
    """``(lower, estimate, upper)`` for the ``q``-quantile of the law of ``values`` (i.i.d.): the order
    statistics ``X_(k)`` at ``k = N q -+ z sqrt(N q (1 - q))`` (the binomial count of values below the
    quantile, normal approximation; distribution-free, whatever the tail)."""
    x = np.sort(np.asarray(values, dtype=float))
    N = len(x)
    half = z * np.sqrt(N * q * (1 - q))
    lo = int(np.clip(np.floor(N * q - half), 0, N - 1))
    hi = int(np.clip(np.ceil(N * q + half), 0, N - 1))
    return float(x[lo]), float(np.quantile(x, q)), float(x[hi])


def _tilted_mean(rng, Sigma, n: int, total: int, models: dict) -> dict:
    """Each model's expected loss (``(x_q, w*)`` integrated out) by importance sampling of the contexts:
    the largest eigenvalue stretched as in ``preconditioned_gd.gdpp.mc_optimum``
    (:func:`verify.models.linear_transformer_monte_carlo.tilted_prompts`), weighted by the exact density
    ratio. Unbiased. For Theorem 3's PGD (degree 2L in the context) the s.e. is sound; for a trained
    three- or four-layer model (degree up to 26 / 80) the mean is carried by contexts far rarer than the
    samples, and the estimate and its s.e. are reported only."""
    from verify.models.linear_transformer_monte_carlo import tilted_prompts
    from verify.models.preconditioned_gd_baselines import response_matrix
    from verify.stats import chunks

    d = Sigma.shape[0]
    Si, eye = np.linalg.inv(Sigma), np.eye(d)
    vals = {k: [] for k in models}
    for size in chunks(total, 10_000):
        pr, weight, _ = tilted_prompts(rng, Sigma, n, size)
        X = pr.X[:, :, :n]
        for k, (A, B) in models.items():
            D = response_matrix(X, A, B) - eye
            vals[k].append(weight * np.einsum("bjk,bjk->b", Sigma @ D, D @ Si))
    out = {}
    for k, v in vals.items():
        v = np.concatenate(v)
        out[k] = {"mean": float(v.mean()), "s.e.": float(v.std(ddof=1) / np.sqrt(len(v))),
                  "largest share of one context": float(v.max() / v.sum())}
    return out


@check("preconditioned_gd.baselines.torch_fig7_deep", covers=[PGD_OPT, "preconditioned_gd.multi_layer.optimal_steps",
                                                               GD_STEP, GD_OPT],
       method="torch", needs=("torch",),
       title="App. D, Fig. 7 at L = 3, 4: on typical contexts (median, 90 % quantile) the trained transformer is "
             "below Theorem 3's optimal preconditioned GD and far below plain GD, run on the same contexts; its "
             "expected loss is carried by rare contexts",
       settings=[Setting("L", "ints", quick=(3, 4), full=(3, 4), low=1, high=4, doc="depths L (one model each)"),
                 Setting("steps", "int", quick=SWEEP_QUICK["steps"], full=DEEP_FULL["steps"], low=1, high=10**6,
                         doc="optimiser steps"),
                 Setting("batch", "int", quick=SWEEP_QUICK["batch"], full=DEEP_FULL["batch"], low=1, high=10**6,
                         doc="prompts per model and step"),
                 Setting("samples", "int", quick=10_000, full=100_000, low=1000, high=10**8,
                         doc="held-out contexts (shared by every model and algorithm; query and task "
                             "integrated out exactly)"),
                 Setting("tilted", "int", quick=10_000, full=50_000, low=1000, high=10**8,
                         doc="importance-sampled contexts per model (Theorem 3's PGD's mean; the trained "
                             "model's expected loss, reported)")])
def torch_fig7_deep(ctx):
    """Fig. 7's depths 3 and 4 (``n = 20``, ``d = 5``, the experiments' Sigma, a random rotation): the
    GD++ transformer (eq. 11) trained at each depth side by side (as in ``torch_fig7``), then run with
    Theorem 3's optimal preconditioned GD (the sparse transformer of eq. 8, ``A_l = a*_l Sigma^{-1}``,
    ``preconditioned_gd.multi_layer.optimal_steps``), one-step PGD and plain GD with their best constant
    steps on the same held-out contexts (one set per depth), ``(x_q, w*)`` integrated out exactly
    (:func:`verify.models.preconditioned_gd_baselines.conditional_loss_values`).

    Why quantiles. The trained models' expected loss is not what the figure can show at these depths:
    their per-context loss is a polynomial of degree up to 26 (L = 3) / 80 (L = 4) in the context, and
    SGD on sampled batches leaves it large on contexts rarer than any batch. Importance sampling of the
    contexts (largest eigenvalue stretched, as in ``gdpp.mc_optimum``; :func:`_tilted_mean`, reported in
    the details) puts the trained models' expected loss far above Theorem 3's optimum (numbers below;
    also after 1500 steps, seeds 0-1: L = 3 2.1, 23, L = 4 5e27, 1e29; and at ``d = 3``, ``n = 40``,
    a lighter tail, 400 steps: L = 3 2-25 times the optimum, L = 4 1e9-1e14). Plain held-out means are
    heavy-tailed (one context of 1e4 carries them) and a z-test on them is unsound. What a finite test
    set (the figure's) sees is the typical context, and the claim tested is the figure's ordering there.

    Asserted per ``L`` (distribution-free: the order statistics at ``N q -+ z_crit sqrt(N q (1 - q))``
    bound the ``q``-quantile, :func:`_quantile_bounds`): (i) at ``q = 0.5`` (quick; ``0.5`` and ``0.9``
    in the full profile, :data:`DEEP_QUANTILES`) the upper bound of the trained model's quantile is at
    most the lower bound of Theorem 3's PGD's quantile (tolerance 1, no slack); (ii)
    :data:`PLAIN_FACTOR` times the upper bound of the trained 90 % quantile is below the lower bound of
    plain GD's median; (iii) Theorem 3's PGD, simulated, within z_crit s.e. of
    ``multi_layer.optimal_loss`` (the reference is the one the closed form describes), its mean by
    importance sampling (:func:`_tilted_mean`: the plain mean of its degree-2L loss misses rare contexts
    at L = 4, z = -5.7 on 1e4 plain contexts at one seed of 20); then (iv) the trained median falls from
    each depth to the next (upper bound at the deeper model below the lower bound at the shallower one).

    Quick (``L = 3, 4``, 400 steps of batch 300 as in ``torch_fig7``, 1e4 held-out and 1e4
    importance-sampled contexts per depth), seeds 0-19: 20/20 pass, worst part 0.61 (L = 3, the median
    against Theorem 3's PGD). Trained medians 0.015-0.047 (L = 3) and 0.0017-0.0056 (L = 4) against
    Theorem 3's PGD's 0.090-0.094 and 0.028-0.030 (part (i) at most 0.61 and 0.21), one-step PGD's
    0.22-0.23 and 0.12-0.13, plain GD's 1.34 and 1.15-1.16 (part (ii) at most 0.30); the median L = 4
    over L = 3 at most 0.26; Theorem 3's PGD's importance-sampled z in [-1.97, 1.59] (z_crit 5.36).
    Reported, not asserted: the trained 90 % quantile's upper bound over Theorem 3's PGD's lower bound
    0.39-1.10 (L = 3; above 1 at some seeds, the quick run has not converged there) and 0.09-0.33
    (L = 4); the plain held-out means 0.038 to 27.5 (L = 3) and 0.006 to 6.4e12 (L = 4); the
    importance-sampled expected losses 0.89 to 33 (L = 3) and 7e23 to 1.4e31 (L = 4). Controls: sign
    test z at least 99.90 (expected >= 99.9, threshold 5.36); one-step PGD's median bound ratio at
    least 4.71 (expected: the closed-form ratio 2.97, tolerance 1). Cost at seed 0: 1.67 s CPU (warm;
    2.50 s with autograd, back to back, on the shared 2-core machine under a load average of 6-13).
    (The gradient in closed form (:func:`_train`) and, before it, the prompts by one batched product
    (:func:`~verify.models.linear_transformer.sample_tokens_torch`) change the runs at round-off,
    which the L = 4 training amplifies: with autograd the same seeds gave L = 4 medians
    0.0017-0.0053, the median L = 4 over L = 3 at most 0.31 and the sign test z at least 99.88; with
    the former draws L = 4 medians 0.0016-0.0056 and the sign test z at least 99.92; the worst part
    0.61 each time.)
    Full profile (2000 steps of batch 1000, lr halved every 500 steps;
    1e5 held-out and 5e4 importance-sampled contexts), seeds 0-2: 3/3 pass, worst part 0.27 (L = 3,
    the 90 % quantile); trained medians 0.0025-0.0058 (L = 3) and 0.0003-0.0004 (L = 4) against
    Theorem 3's PGD's 0.092 and 0.029 (part (i) at most 0.066 and 0.014 at the median, 0.27 and 0.014
    at the 90 % quantile); importance-sampled expected losses 0.035, 0.64, 38 (L = 3: below Theorem
    3's 0.1336 at one seed of three) and 3e27-6e28 (L = 4); controls at least 316 (expected >= 316)
    and 4.40 (expected 2.97). 41-75 s per seed.

    Controls (at the largest depth): the trained transformer read as plain GD (Sigma-blind: then it
    would be below plain GD on half the contexts; sign test z of the fraction of contexts where it is
    lower, against 1/2), expected from Theorem 3's PGD's fraction on the same contexts; one-step PGD
    (the figure's constant-step curve, whose mean is 2-3 times Theorem 3's) put through part (i) in place
    of the trained model, expected from the closed forms' ratio.
    """
    Ls = tuple(ctx.setting("L"))
    n = 20
    samples = ctx.setting("samples")
    specs = [(L, n) for L in Ls]
    settings, Sigma, run = _deep_train(ctx, specs)
    if run.stopped_at is not None:
        return _stopped(run, f"Fig. 7 sweep L = {Ls}")
    asserted = DEEP_QUANTILES[ctx.profile]
    z_crit = z_threshold((2 * len(asserted) + 3) * len(Ls) + 2 * max(len(Ls) - 1, 0))
    parts, per, vals, q_tr, base, tilted = _deep_core(ctx, Sigma, run, specs, [f"L={L}" for L in Ls], samples,
                                                      z_crit, asserted, CODE_GRID_GD, ctx.setting("tilted"))
    for L0, L1 in zip(Ls, Ls[1:]):
        parts[f"L={L0}->{L1}: upper median trained L={L1} / lower median trained L={L0}"] = (
            q_tr[f"L={L1}"][2] / q_tr[f"L={L0}"][0])
    return _deep_outcome(parts, per, vals, base, f"L={max(Ls)}", samples, z_crit, asserted, settings, run, Sigma,
                         tilted, ctx,
                         f"over L = {Ls} (n = {n}, d = {D}", "the trained median falling with L. ")


def _deep_train(ctx, specs, batch=None):
    """``(settings, Sigma, run)`` of the deep sweeps (Figs. 6-7 at L = 3, 4): the profile's optimiser
    settings with the run's ``steps`` and ``batch`` (or the given ``batch``: a batch per ``n``), one draw
    of Sigma (the eigenvalues of §4.3, a random rotation), and the models of ``specs`` trained on it
    (:func:`_train`)."""
    settings = dict(ctx.pick(quick=SWEEP_QUICK, full=DEEP_FULL), steps=ctx.setting("steps"),
                    batch=ctx.setting("batch") if batch is None else batch)
    Sigma = distorted_covariance(ctx.rng, EXPERIMENT_EIGENVALUES)
    return settings, Sigma, _train(ctx, Sigma, specs, settings)


def _batch_text(batch) -> str:
    """``300`` or, for a batch per ``n``, ``1200 (n = 4), 300 (n = 10), ...``."""
    if isinstance(batch, dict):
        return ", ".join(f"{b} (n = {n})" for n, b in sorted(batch.items()))
    return str(batch)


def _deep_core(ctx, Sigma, run, specs, labels, samples, z_crit, asserted, grid, tilted_total):
    """The per-model parts of :func:`torch_fig7_deep` / :func:`torch_fig6_deep`: each trained model with
    Theorem 3's optimal-step PGD, one-step PGD and plain GD (best step) of its ``(L, n)`` on the same
    held-out contexts of its ``n``; quantile bounds (:func:`_quantile_bounds`), the simulated Theorem-3
    PGD's mean against ``optimal_loss`` (``n >= d``: on ``tilted_total`` importance-sampled contexts,
    :func:`_tilted_mean`, as the plain mean of its degree-2L loss misses rare contexts at L = 4: seed 5,
    1e4 plain contexts, z = -5.7), and (``n < d``) the Bayes risk ``d - n`` per context. Also returns the
    importance-sampled means of the trained models (reported)."""
    from verify.models.preconditioned_gd_baselines import conditional_loss_values

    Si = np.linalg.inv(Sigma)
    parts, per, vals, q_tr, base, tilted = {}, {}, {}, {}, {}, {}
    for k, ((L, n), lab) in enumerate(zip(specs, labels)):
        b = base[lab] = baseline_losses(EXPERIMENT_EIGENVALUES, n, L, grid)
        b["Theorem 3 steps a*_l"] = [float(x) for x in _cf("preconditioned_gd.multi_layer.optimal_steps",
                                                            n=n, d=D, L=L)]
        m, info = _models(run, k, Sigma, b)
        models = {"trained": m[TRAINED], "Theorem 3 PGD": (np.stack([-a * Si for a in b["Theorem 3 steps a*_l"]]),
                                                           np.zeros((L, D, D))),
                  "PGD, one step": m[PGD], "plain GD": m[GD]}
        v, top = conditional_loss_values(ctx.rng, Sigma, n, samples, models)
        vals[lab] = v
        tr, pgd, gd = v["trained"], v["Theorem 3 PGD"], v["plain GD"]
        f_opt = b["PGD, optimal steps (Theorem 3)"]
        row = {}
        for q in DEEP_REPORTED:
            bt, bp = _quantile_bounds(tr, q, z_crit), _quantile_bounds(pgd, q, z_crit)
            if q in asserted:
                parts[f"{lab}: upper {q}-quantile trained / lower {q}-quantile Theorem 3 PGD"] = bt[2] / bp[0]
            row[f"{q}-quantile [lower, estimate, upper]"] = {"trained": bt, "Theorem 3 PGD": bp,
                                                             "ratio upper / lower": bt[2] / bp[0]}
        q_tr[lab] = _quantile_bounds(tr, 0.5, z_crit)
        up9 = _quantile_bounds(tr, 0.9, z_crit)[2]
        gd_med = _quantile_bounds(gd, 0.5, z_crit)
        if n >= 2 * D:
            parts[f"{lab}: {PLAIN_FACTOR} x upper 0.9-quantile trained / lower median plain GD"] = (
                PLAIN_FACTOR * up9 / gd_med[0])
        else:
            parts[f"{lab}: upper median trained / lower median plain GD"] = q_tr[lab][2] / gd_med[0]
        if n < D:   # any predictor linear in the labels: E[(pred - y_q)^2 | X] >= tr(Sigma Cov(w* | X)) = d - n
            parts[f"{lab}: (d - n) - min over contexts of the trained loss, relative (Bayes risk, <= 1e-9)"] = (
                (D - n - float(tr.min())) / (D - n) / 1e-9)
        m_pgd, se_pgd = float(pgd.mean()), float(pgd.std(ddof=1) / np.sqrt(samples))
        if n >= D:
            tilted[lab] = _tilted_mean(ctx.rng, Sigma, n, tilted_total,
                                       {"trained": models["trained"], "Theorem 3 PGD": models["Theorem 3 PGD"]})
            m_pgd, se_pgd = tilted[lab]["Theorem 3 PGD"]["mean"], tilted[lab]["Theorem 3 PGD"]["s.e."]
        parts[f"{lab}: |z| simulated Theorem 3 PGD vs optimal_loss / z_crit"] = abs(m_pgd - f_opt) / se_pgd / z_crit
        row["median plain GD [lower, estimate, upper]"] = gd_med
        row["median one-step PGD [lower, estimate, upper]"] = _quantile_bounds(v["PGD, one step"], 0.5, z_crit)
        row["means (trained: heavy-tailed, not trusted)"] = {
            key: [float(x.mean()), float(x.std(ddof=1) / np.sqrt(samples))] for key, x in v.items()}
        row["fraction of contexts trained < Theorem 3 PGD"] = float(np.mean(tr < pgd))
        row["fraction of contexts trained < plain GD"] = float(np.mean(tr < gd))
        row["fraction of contexts Theorem 3 PGD < plain GD"] = float(np.mean(pgd < gd))
        row["largest lambda_max(S_u) among the held-out contexts"] = float(top.max())
        per[lab] = {**row, **info}
    return parts, per, vals, q_tr, base, tilted


def _deep_outcome(parts, per, vals, base, last, samples, z_crit, asserted, settings, run, Sigma, tilted, ctx,
                  where, extra):
    v = vals[last]
    tr, pgd, gd, one = v["trained"], v["Theorem 3 PGD"], v["plain GD"], v["PGD, one step"]
    sign = lambda frac: (frac - 0.5) / np.sqrt(0.25 / samples)   # noqa: E731  sign test z against 1/2
    b = base[last]
    controls = [
        Control(f"the transformer as plain GD (Sigma-blind), {last}: sign test z of P(trained < plain GD) = 1/2",
                sign(float(np.mean(tr < gd))), z_crit, expected=sign(float(np.mean(pgd < gd)))),
        Control(f"one-step PGD (the figure's constant-step curve) in place of the trained model, {last}: upper "
                "median / lower median of Theorem 3's PGD",
                _quantile_bounds(one, 0.5, z_crit)[2] / _quantile_bounds(pgd, 0.5, z_crit)[0], 1.0,
                expected=b["PGD, one step"] / b["PGD, optimal steps (Theorem 3)"])]
    keys = ("PGD, optimal steps (Theorem 3)", "PGD, one step", "plain GD, best step")
    return Outcome(
        measured={lab: {f"{q}-quantile trained": per[lab][f"{q}-quantile [lower, estimate, upper]"]["trained"][1]
                        for q in DEEP_REPORTED} for lab in per},
        predicted={lab: {f"{q}-quantile Theorem 3 PGD (simulated)":
                         per[lab][f"{q}-quantile [lower, estimate, upper]"]["Theorem 3 PGD"][1]
                         for q in DEEP_REPORTED} | {k: base[lab][k] for k in keys} for lab in per},
        discrepancy=max(parts.values()), tolerance=1.0,
        criterion=(f"max of normalised parts <= 1 {where}, eigenvalues {EXPERIMENT_EIGENVALUES}, {samples} held-out "
                   f"contexts, (x_q, w*) integrated out, z_crit = {z_crit:.2f} for the order-statistic bounds): the "
                   f"trained model's {' and '.join(f'{q}-quantile' for q in asserted)} (upper bound) at most Theorem "
                   f"3's PGD's (lower bound) on the same contexts; below plain GD ({PLAIN_FACTOR} x its 90 % quantile "
                   "below plain GD's median for n >= 2d, its median below it otherwise); the simulated Theorem-3 "
                   "PGD's mean within z_crit s.e. of optimal_loss; for n < d every context's trained loss at least "
                   f"the Bayes risk d - n; {extra}{settings['steps']} steps of batch {_batch_text(settings['batch'])} "
                   "per model."),
        controls=controls,
        details={"settings": settings, "per model": per, "parts": parts,
                 "importance-sampled means (trained: reported only; Theorem 3 PGD: part iii)": tilted,
                 "baselines (closed forms)": base,
                 "Sigma eigenvalues": np.linalg.eigvalsh(Sigma), "seconds (training)": run.seconds,
                 "device": ctx.device},
    )


@check("preconditioned_gd.baselines.torch_fig6_deep", covers=[PGD_OPT, "preconditioned_gd.multi_layer.optimal_steps",
                                                               GD_STEP, GD_OPT],
       method="torch", needs=("torch",),
       title="App. D, Fig. 6 at the paper's depth L = 3: over n, on typical contexts (median) the trained "
             "three-layer transformer is below Theorem 3's optimal preconditioned GD and plain GD, above the "
             "Bayes risk",
       settings=[Setting("n", "ints", quick=(4, 10, 20), full=(4, 6, 8, 10, 12, 14, 16, 18, 20), low=2, high=200,
                         doc="context lengths n (one three-layer model each)"),
                 Setting("steps", "int", quick=SWEEP_QUICK["steps"], full=DEEP_FULL["steps"], low=1, high=10**6,
                         doc="optimiser steps"),
                 Setting("batch", "int", quick=SWEEP_QUICK["batch"], full=DEEP_FULL["batch"], low=1, high=10**6,
                         doc="prompts per model and step (n >= d)"),
                 Setting("batch_below_d", "int", quick=DEEP6_BATCH_BELOW_D, full=DEEP_FULL["batch"], low=1,
                         high=10**6, doc="prompts per model and step for n < d (a multiple of batch)"),
                 Setting("samples", "int", quick=10_000, full=100_000, low=1000, high=10**8,
                         doc="held-out contexts per n (query and task integrated out exactly)"),
                 Setting("tilted", "int", quick=10_000, full=50_000, low=1000, high=10**8,
                         doc="importance-sampled contexts per n >= d (Theorem 3's PGD's mean; the trained "
                             "model's expected loss, reported)")])
def torch_fig6_deep(ctx):
    """Fig. 6 at the paper's depth (``L = 3``, ``d = 5``, the experiments' Sigma, a random rotation):
    the three-layer GD++ transformer trained at each ``n`` side by side, then run with Theorem 3's
    optimal-step PGD, one-step PGD and plain GD on the same held-out contexts of that ``n`` (as
    :func:`torch_fig7_deep`, whose docstring explains why the comparison is of quantiles: the trained
    models' expected loss is carried by rare contexts).

    Asserted per ``n`` (order-statistic bounds at z_crit, :func:`_quantile_bounds`): (i) the trained
    median (and 90 % quantile in the full profile) at most Theorem 3's PGD's; (ii) below plain GD
    (:data:`PLAIN_FACTOR` times the 90 % quantile below plain GD's median for ``n >= 2d``, the median
    below plain GD's median otherwise); (iii) the simulated Theorem-3 PGD's mean within z_crit s.e. of
    ``optimal_loss``; (iv) for ``n < d`` every context's trained loss at least the Bayes risk
    ``d - n`` (a bound for any predictor linear in the labels: ``E[(pred - y_q)^2 | X] >= tr(Sigma
    Cov(w* | X)) = d - n``; round-off only). Not asserted: ``n = 2``, where the three methods crowd at
    the Bayes risk 3 and the quick-trained median sits 0.3-1 % above Theorem 3's PGD's (3.16-3.19
    against 3.15-3.16, seeds 0-2): the figure's curves cannot be told apart there.

    Quick (``n = 4, 10, 20``, 400 steps, batch 1200 at ``n = 4`` (:data:`DEEP6_BATCH_BELOW_D`) and
    300 at ``n = 10, 20``, the gradient in closed form (:func:`_train`); 1e4 held-out and 1e4
    importance-sampled contexts per n), seeds 0-19: 20/20 pass, worst part 0.884 (seed 4; n = 4, the
    median against Theorem 3's PGD; 0.83-0.88 over the seeds). Trained medians 1.63-1.73, 0.12-0.28,
    0.011-0.037 at n = 4, 10, 20 against Theorem 3's PGD's 2.01-2.03, 0.52-0.53, 0.090-0.094 (part (i)
    at most 0.884, 0.59, 0.46), plain GD's 3.03-3.04, 1.90-1.92, 1.33-1.35 (part (ii) at most 0.59,
    0.64, 0.23); every context's trained loss above d - n = 1 at n = 4; Theorem 3's PGD's z at most
    0.55 z_crit. Reported: the 90 % quantile ratio 0.87-0.92, 0.58-0.90, 0.27-0.84; the plain held-out
    means up to 120, 516, 1.3; the importance-sampled expected losses 389 to 2.7e4 (n = 10) and 0.30
    to 303 (n = 20). Controls (threshold 5.40 / 1): sign test z at least 99.48 (expected >= 99.7);
    one-step PGD's median bound ratio at least 2.66 (expected 2.01). Cost at seed 0: 2.7-3.3 s CPU
    (warm), against 2.8-4.1 s before the n = 4 batch was raised (batch 300, autograd; back to back on
    the shared 2-core machine under a load average of 3-7): the closed-form gradient pays for it.
    The n = 4 model is what the part's margin rests on: with batch 300 for every n (autograd) the
    same seeds gave worst part 0.955 (seed 13), n = 4 medians 1.74-1.87 and part (i) 0.89-0.955 at
    n = 4, of which the order-statistic bounds' width accounts for a factor 1.027 only (the
    estimates' ratio 0.87-0.93); batch 2400 at n = 4 gave worst part 0.877 (seed 12) for about 25 %
    more CPU; the Adam schedule (lr 0.05 or 0.2, halving every 50 or 200 steps, beta1 0.97-0.99) and
    averaging the last 25-50 % of the iterates did not help (seeds 0, 1, 13: medians 1.78-2.06
    against 1.80).
    Full profile (n = 4, 6, ..., 20; 2000 steps of batch 1000; 1e5 held-out and 5e4 importance-sampled
    contexts per n), seeds 0-1: 2/2 pass, worst part 0.82 (n = 4, the 90 % quantile); trained medians
    1.50-1.52 (n = 4) falling to 0.0024-0.0052 (n = 20) against Theorem 3's PGD's 2.01 to 0.092 (part
    (i) at most 0.76 at the median, 0.82 at the 90 % quantile, both at n = 4; at most 0.24 and 0.57 for
    n >= 8); importance-sampled expected losses 1.4e5-1.7e5 (n = 6) falling to 0.19-40 (n = 20), the
    plain held-out means up to 1.8e4; Theorem 3's PGD's z within [-1.16, 1.49]; controls at least 315.8
    (expected >= 315.5, threshold 5.65) and 2.50 (expected 2.01). 128-130 s per seed.

    Controls as in :func:`torch_fig7_deep`, at the largest ``n``.
    """
    ns = tuple(ctx.setting("n"))
    L = 3
    samples = ctx.setting("samples")
    specs = [(L, n) for n in ns]
    below, b = ctx.setting("batch_below_d"), ctx.setting("batch")
    if any(n < D for n in ns) and below % b:
        raise ValueError(f"batch_below_d: expected a multiple of batch = {b} (the trainer runs it as rows of "
                         f"the stacked models), got {below}")
    batch = {n: below if n < D else b for n in ns}
    if len(set(batch.values())) == 1:   # one batch for every n (the full profile): an integer, as before
        batch = ctx.setting("batch")
    settings, Sigma, run = _deep_train(ctx, specs, batch)
    if run.stopped_at is not None:
        return _stopped(run, f"Fig. 6 sweep n = {ns}, L = {L}")
    asserted = DEEP_QUANTILES[ctx.profile]
    z_crit = z_threshold((2 * len(asserted) + 3) * len(ns))
    labels = [f"n={n}" for n in ns]
    parts, per, vals, _, base, tilted = _deep_core(ctx, Sigma, run, specs, labels, samples, z_crit, asserted,
                                                   CODE_GRID_PGD, ctx.setting("tilted"))
    return _deep_outcome(parts, per, vals, base, f"n={max(ns)}", samples, z_crit, asserted, settings, run, Sigma,
                         tilted, ctx, f"over n = {ns} (L = {L}, d = {D}", "")
