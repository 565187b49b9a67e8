"""Checks of the single-layer results of Ahn, Cheng, Daneshmand, Sra 2023 (Theorems 1 and 5).

Every Monte Carlo check runs the real transformer forward pass
(:func:`verify.models.linear_transformer.predict`, eqs. 2-4) on prompts from
:mod:`verify.tasks.preconditioned_gd`, estimates losses with standard errors, and compares
with the registered closed forms through z-scores against the family-wise threshold
:func:`verify.stats.z_threshold` (false alarm :data:`verify.stats.FALSE_ALARM` per check).
Nearby losses are compared on the same prompts (paired differences), which cancels most of
the noise. Every check carries negative controls that the same statistic must reject.

Contains
--------
``preconditioned_gd.single_layer.mc_optimum``          f(Gamma*) = f* (Theorem 1, eqs. 6-7), and
                                                       the best plain-GD and best Sigma^{-1}
                                                       preconditioners are worse by the exact gap
``preconditioned_gd.single_layer.mc_perturbation``     f(Gamma* + Delta) - f* = tr(Sigma Delta^T E[S^2] Delta)
``preconditioned_gd.single_layer.lifted_least_squares`` no single-layer (P, Q) beats Gamma*: least
                                                       squares on every feature G_kl x_q[j]
``preconditioned_gd.single_layer.mc_inverse_task``     optimum under w* ~ N(0, Sigma^{-1})
``preconditioned_gd.relu.mc_loss``                     ReLU attention f(A) = c ||A||^2 + tr A + d (Theorem 5)
``preconditioned_gd.single_layer.one_theory``          symbolic: Theorem 1 = the merged-model minimum of
                                                       Zhang et al. 2025; stationarity
"""

from __future__ import annotations

import dataclasses

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.models.linear_transformer import sparse_layers
from verify.models.linear_transformer_monte_carlo import predict_gram
from verify.outcomes import z_score
from verify.stats import batch_mean, chunks, rel_frobenius, z_threshold
from verify.stats import evaluate as _cf
from verify.tasks.in_context_regression import random_orthogonal
from verify.tasks.lifted_least_squares import (
    SandwichLS,
    best_scalar,
    gamma_coefficients,
    lifted_features,
    predict_sparse,
)
from verify.settings import Setting
from verify.tasks.preconditioned_gd import EXPERIMENT_EIGENVALUES, Prompts, distorted_covariance, sample_prompts

TOPIC = "preconditioned_gd.single_layer"


#: Prompts per forward call (bounded memory).
CHUNK = 50_000


#: A strongly anisotropic 3 x 3 spectrum for the small configuration (d = 3, n = 4).
SMALL_EIGENVALUES = (2.0, 0.5, 0.1)


# -- (a) the optimum ------------------------------------------------------------------------
@check(f"{TOPIC}.mc_optimum",
       covers=[f"{TOPIC}.optimal_preconditioner", f"{TOPIC}.optimal_loss", f"{TOPIC}.loss",
               f"{TOPIC}.optimal_preconditioner_isotropic"],
       method="monte_carlo",
       title="Theorem 1 by Monte Carlo of the single-layer forward pass: the loss at Gamma* (eq. 6) "
             "equals f*, and plain GD and Sigma^{-1} preconditioning lose by the exact gap",
       # quick: the weakest control (plain GD as optimal as Gamma*, d = 3, n = 4) had an expected z of
       # 6.5 x the threshold at 2e5 prompts; the expected z scales like sqrt(prompts), so 1.25e5 keeps it
       # >= 5 x (measured 5.17-5.83 x at seeds 0-19); the z of the compared values does not grow with size
       settings=[Setting("samples", "int", quick=125_000, full=2_000_000, low=1000, high=10**9,
                         doc="sampled prompts per configuration")])
def mc_optimum(ctx):
    """Theorem 1 at three configurations (the paper's spectrum at d = 5, n = 20; an anisotropic 3 x 3
    spectrum and the isotropic case at n = 4): the single-layer forward pass's Monte Carlo loss at
    ``Gamma*`` against ``optimal_loss`` and ``loss(Gamma*)``, and the paired losses of the best plain-GD
    step and the best ``Sigma^{-1}``-preconditioned step against the exact gaps (max |z|, family-wise
    threshold); the forward pass equals ``h^T Gamma x_q`` (eq. 15) on 1000 prompts. Controls: each
    alternative as optimal as ``Gamma*`` (paired gap 0; expected z the exact gap over the measured s.e.).

    Quick profile (1.25e5 prompts per configuration; by the Gram recursion
    :func:`~verify.models.linear_transformer_monte_carlo.predict_gram`), seeds 0-19: 20/20 pass, worst
    discrepancy/tolerance 0.589 (seed 10, threshold 5.33); controls' expected z at least 7.9, 8.0 (d = 5)
    and 5.17, 5.19 (d = 3) times the threshold (measured at least 7.8, 8.0, 4.8, 5.1); forward pass
    against eq. 15 within 5.3e-15. The Gram recursion reads the prompts' Gram matrix from S and w*
    (:meth:`~verify.tasks.preconditioned_gd.Prompts.gram`; the token matrices only for the 1000 prompts
    of eq. 15): z-scores equal to 1e-13 relative at seeds 0-2, 0.49-0.50 s CPU at seed 0 against
    0.57-0.64 s from the tokens (warm, back to back)."""
    rng = ctx.rng
    loss = theory.get(f"{TOPIC}.loss")
    configs = [
        ("experiment spectrum, d=5, n=20", distorted_covariance(rng, EXPERIMENT_EIGENVALUES), 20),
        ("anisotropic, d=3, n=4", distorted_covariance(rng, SMALL_EIGENVALUES), 4),
        ("isotropic (eq. 7), d=3, n=4", np.eye(3), 4),
    ]
    total = ctx.setting("samples")
    zs, controls, per = [], [], {}
    forward_vs_reduced = 0.0
    for name, Sigma, n in configs:
        d = Sigma.shape[0]
        G = _cf(f"{TOPIC}.optimal_preconditioner", Sigma=Sigma, n=n)
        f_star = _cf(f"{TOPIC}.optimal_loss", Sigma=Sigma, n=n)
        isotropic = np.allclose(Sigma, np.eye(d))
        if isotropic:  # eq. 7 gives the same matrix
            G = _cf(f"{TOPIC}.optimal_preconditioner_isotropic", d=d, n=n) * np.eye(d)
        alts = {}
        if not isotropic:
            Sinv = np.linalg.inv(Sigma)
            alts["plain GD, best step (gamma I)"] = best_scalar(loss, Sigma, n, np.eye(d)) * np.eye(d)
            alts["Sigma^{-1} preconditioning, best step"] = best_scalar(loss, Sigma, n, Sinv) * Sinv
        est = batch_mean()
        for k in chunks(total, CHUNK):
            pr = sample_prompts(rng, Sigma, n, k)
            # the forward pass by the Gram recursion (the same function as predict_sparse, tests) on the
            # prompts' Gram matrix from S and w* (Prompts.gram: the tokens' to round-off, not formed)
            g = pr.gram()
            e_opt = (predict_gram(g, *sparse_layers([G])) - pr.target) ** 2
            cols = [e_opt] + [(predict_gram(g, *sparse_layers([A])) - pr.target) ** 2 - e_opt for A in alts.values()]
            est.add(np.stack(cols, axis=1))
            if forward_vs_reduced == 0.0:  # the forward equals the reduced formula h^T A x_q (eq. 15)
                few = Prompts(X=pr.X[:1000], w=pr.w[:1000])
                reduced = np.einsum("bi,ij,bj->b", few.h, G, few.query)
                forward_vs_reduced = float(np.max(np.abs(predict_sparse(few.tokens(), G) - reduced)))
        r = est.result()
        z_opt = z_score(r.mean[0], r.se[0], f_star)
        z_loss_fn = z_score(r.mean[0], r.se[0], loss(Sigma=Sigma, n=n, A=G))
        zs += [z_opt, z_loss_fn]
        per[name] = {"f_star": f_star, "mc": float(r.mean[0]), "se": float(r.se[0]), "z": z_opt,
                     "Gamma_star_eigenvalues": np.linalg.eigvalsh(G).tolist()}
        for j, (alt, A) in enumerate(alts.items(), start=1):
            gap = loss(Sigma=Sigma, n=n, A=A) - f_star
            z_gap = z_score(r.mean[j], r.se[j], gap)
            zs.append(z_gap)
            per[name][alt] = {"exact_gap": gap, "mc_gap": float(r.mean[j]), "se": float(r.se[j]),
                              "z_vs_exact_gap": z_gap}
            controls.append(Control(f"{name}: {alt} as optimal as Gamma* (paired gap = 0)",
                                    abs(z_score(r.mean[j], r.se[j], 0.0)), 0.0,
                                    expected=float(abs(gap) / r.se[j])))  # exact gap / measured s.e.
    z_crit = z_threshold(len(zs))
    controls = [dataclasses.replace(c, tolerance=z_crit) for c in controls]
    return Outcome(
        measured={k: v["mc"] for k, v in per.items()},
        predicted={k: v["f_star"] for k, v in per.items()},
        discrepancy=float(max(abs(z) for z in zs)) if forward_vs_reduced <= 1e-10 else float("inf"),
        tolerance=z_crit,
        criterion=(f"max |z| over {len(zs)} comparisons (MC loss at Gamma* vs optimal_loss and vs loss(Gamma*); "
                   f"paired MC gaps of the controls vs the exact gaps) < z_threshold({len(zs)}); the forward "
                   "pass must equal h^T Gamma x_q to 1e-10 (float64 round-off of O(n d^2) sums)"),
        controls=controls,
        details={"prompts_per_config": total, "per_config": per,
                 "max_abs_forward_minus_reduced": forward_vs_reduced},
    )


# -- (b) excess loss of a perturbation ------------------------------------------------------------
@check(f"{TOPIC}.mc_perturbation",
       covers=[f"{TOPIC}.loss", f"{TOPIC}.optimal_preconditioner"],
       method="monte_carlo",
       title="Paired Monte Carlo: f(Gamma* + Delta) - f(Gamma*) = tr(Sigma Delta^T E[S^2] Delta) for "
             "non-symmetric Delta (not the transposed tr(Sigma Delta E[S^2] Delta^T))",
       settings=[Setting("n", "int", quick=4, full=4, low=1, high=10_000,
                         doc="context examples n (d = 3, spectrum SMALL_EIGENVALUES)"),
                 # quick 1.2e5 (was 3e5), sized by its control: seeds 0-19 20/20, worst discrepancy/tolerance
                 # 0.448 (seed 16), the control's expected z at least 7.4 x the threshold (measured 7.2 x)
                 Setting("samples", "int", quick=120_000, full=3_000_000, low=1000, high=10**9,
                         doc="sampled prompts")])
def mc_perturbation(ctx):
    rng = ctx.rng
    d, n = 3, ctx.setting("n")
    lam = np.array(SMALL_EIGENVALUES)
    V = random_orthogonal(rng, d)  # columns: eigenvectors for lam (descending)
    Sigma = V @ np.diag(lam) @ V.T
    Sigma = 0.5 * (Sigma + Sigma.T)
    M2 = (n + 1) / n * Sigma @ Sigma + np.trace(Sigma) / n * Sigma  # E[S^2]
    G = _cf(f"{TOPIC}.optimal_preconditioner", Sigma=Sigma, n=n)
    f_star = _cf(f"{TOPIC}.optimal_loss", Sigma=Sigma, n=n)
    loss = theory.get(f"{TOPIC}.loss")
    deltas = {
        "random non-symmetric": 0.5 * rng.standard_normal((d, d)),
        "rank one e_large e_small^T": 0.5 * np.outer(V[:, 0], V[:, 2]),
        "rank one e_small e_large^T": 0.5 * np.outer(V[:, 2], V[:, 0]),
    }
    total = ctx.setting("samples")
    est = batch_mean()
    for k in chunks(total, CHUNK):
        pr = sample_prompts(rng, Sigma, n, k)
        Z0 = pr.tokens()
        e0 = (predict_sparse(Z0, G) - pr.target) ** 2
        est.add(np.stack([(predict_sparse(Z0, G + D) - pr.target) ** 2 - e0 for D in deltas.values()], axis=1))
    r = est.result()
    exact = np.array([loss(Sigma=Sigma, n=n, A=G + D) - f_star for D in deltas.values()])
    formula = np.array([np.trace(Sigma @ D.T @ M2 @ D) for D in deltas.values()])
    transposed = np.array([np.trace(Sigma @ D @ M2 @ D.T) for D in deltas.values()])
    z = r.z(exact)
    z_formula = r.z(formula)
    z_crit = z_threshold(2 * len(deltas))
    disc = float(max(np.max(np.abs(z)), np.max(np.abs(z_formula))))
    return Outcome(
        measured=r.mean.tolist(), predicted=exact.tolist(), discrepancy=disc, tolerance=z_crit,
        criterion=(f"max |z| of the paired MC excess losses vs loss(Gamma*+Delta) - optimal_loss and vs "
                   f"tr(Sigma Delta^T E[S^2] Delta) ({2 * len(deltas)} comparisons) < z_threshold"),
        controls=[Control("transposed excess tr(Sigma Delta E[S^2] Delta^T)",
                          float(np.max(np.abs(r.z(transposed)))), z_crit,
                          expected=float(np.max(np.abs(transposed - exact) / r.se)))],
        details={"d": d, "n": n, "eigenvalues": list(SMALL_EIGENVALUES), "prompts": r.n,
                 "deltas": list(deltas), "se": r.se.tolist(), "z": z.tolist(),
                 "transposed_form": transposed.tolist(),
                 "closed_form_vs_trace_formula": float(np.max(np.abs(exact - formula)))},
    )


# -- (c) optimality over every single-layer (P, Q) --------------------------------------------------


@check(f"{TOPIC}.lifted_least_squares",
       covers=[f"{TOPIC}.optimal_preconditioner", f"{TOPIC}.optimal_loss"],
       method="monte_carlo",
       title="No single-layer (P, Q) beats Gamma*: least squares of y_q on every feature G_kl x_q[j] "
             "recovers h^T Gamma* x_q, and its held-out loss is not below f*",
       settings=[Setting("config", "choice", quick="small", full="experiment", choices=("small", "experiment"),
                         doc="prompt distribution: small (d = 3, n = 4) or experiment (d = 5, n = 20)"),
                 # quick 1e5 (was 3e5), sized by its controls: seeds 0-19 20/20, worst discrepancy/tolerance
                 # 0.545 (seed 15), the controls' expected z at least 24.5 and 9.0 x the threshold (measured
                 # at least 6.7 and 6.1 x)
                 Setting("samples", "int", quick=100_000, full=2_000_000, low=1000, high=10**9,
                         doc="training prompts for the least squares (and as many held out)")])
def lifted_least_squares(ctx):
    rng = ctx.rng
    if ctx.setting("config") == "experiment":
        Sigma, n = distorted_covariance(rng, EXPERIMENT_EIGENVALUES), 20
    else:
        Sigma, n = distorted_covariance(rng, SMALL_EIGENVALUES), 4
    d = Sigma.shape[0]
    G = _cf(f"{TOPIC}.optimal_preconditioner", Sigma=Sigma, n=n)
    f_star = _cf(f"{TOPIC}.optimal_loss", Sigma=Sigma, n=n)
    Sinv = np.linalg.inv(Sigma)
    hyp = {"Gamma*": gamma_coefficients(G),
           "Sigma^-1 (n -> inf)": gamma_coefficients(Sinv),
           "n/(n+d+1) Sigma^-1 (Theorem-3 model)": gamma_coefficients(n / (n + d + 1) * Sinv)}
    train = ctx.setting("samples")
    ls = SandwichLS(hyp)
    for k in chunks(train, 25_000):
        pr = sample_prompts(rng, Sigma, n, k)
        ls.add(lifted_features(pr), pr.target)
    m_hat = ls.fit()
    held = batch_mean()
    for k in chunks(train, 25_000):
        pr = sample_prompts(rng, Sigma, n, k)
        X = lifted_features(pr)
        e_ls = (X @ m_hat - pr.target) ** 2
        e_opt = (predict_sparse(pr.tokens(), G) - pr.target) ** 2
        held.add(np.stack([e_ls, e_ls - e_opt, e_opt], axis=1))
    h = held.result()
    z_coef = ls.z("Gamma*")
    K = z_coef.size
    z_crit = z_threshold(K + 2)
    # one-sided: the least-squares predictor must not be *better* than Gamma* beyond noise
    z_ls_below = z_score(h.mean[1], h.se[1], 0.0)
    z_opt = z_score(h.mean[2], h.se[2], f_star)
    disc = max(float(np.max(np.abs(z_coef))), max(-z_ls_below, 0.0), abs(z_opt))
    k, l = np.triu_indices(d + 1)
    block = m_hat.reshape(k.size, d)[(l == d) & (k < d)]
    # expected control z: |wrong - true coefficients| over the sandwich s.e. of the fit under
    # Gamma* (from the accumulated sums; no new sampling)
    se_coef = ls.se("Gamma*")
    exp_coef = {name: float(np.max(np.abs(hyp[name] - hyp["Gamma*"]) / se_coef)) for name in hyp}
    return Outcome(
        measured={"coefficients_on_h_j_xq_j'": block.tolist(), "held_out_loss": float(h.mean[0])},
        predicted={"Gamma_star": G.tolist(), "optimal_loss": f_star},
        discrepancy=disc, tolerance=z_crit,
        criterion=(f"max over: |z| of all {K} least-squares coefficients vs those of h^T Gamma* x_q "
                   "(sandwich SEs), the one-sided z of (held-out LS loss - loss at Gamma*, paired) below 0, "
                   f"and |z| of the held-out loss at Gamma* vs optimal_loss; < z_threshold({K + 2})"),
        controls=[Control(f"coefficients of {name}", float(np.max(np.abs(ls.z(name)))), z_crit,
                          expected=exp_coef[name])
                  for name in hyp if name != "Gamma*"],
        details={"d": d, "n": n, "features": K, "train": train, "held_out": h.n,
                 "held_out_ls_minus_gamma_star": float(h.mean[1]), "se": float(h.se[1]),
                 "relative_error_block": rel_frobenius(block, G),
                 "max_abs_other_coefficients": float(np.max(np.abs(
                     np.delete(m_hat.reshape(k.size, d), np.where((l == d) & (k < d))[0], axis=0))))},
    )


# -- (d) the Theorem-3 data model, L = 1 ----------------------------------------------------------------
@check(f"{TOPIC}.mc_inverse_task",
       covers=[f"{TOPIC}.optimal_preconditioner_inverse_task", f"{TOPIC}.optimal_loss_inverse_task"],
       method="monte_carlo",
       title="One layer under w* ~ N(0, Sigma^{-1}): the loss at n/(n+d+1) Sigma^{-1} is d(d+1)/(n+d+1), "
             "and Theorem 1's preconditioner (with its tr Sigma ridge) is worse",
       # quick: the controls' expected |z| >= 6.2 x the threshold 5.16 at seeds 0-19 (12 x at 2e5)
       settings=[Setting("samples", "int", quick=50_000, full=2_000_000, low=1000, high=10**9,
                         doc="sampled prompts per configuration")])
def mc_inverse_task(ctx):
    """Theorem 3's data model at one layer (w* ~ N(0, Sigma^{-1}), §4.2), d = 5, n = 20 and d = 3, n = 4:
    the Monte Carlo loss at ``n/(n+d+1) Sigma^{-1}`` against ``d(d+1)/(n+d+1)``, and the paired
    gap of the 1.1x step against the exact ``0.01 (d - f*)``; control: Theorem 1's preconditioner
    taken as optimal here (paired gap 0), expected |z| the exact gap over the measured s.e.

    Quick profile (5e4 prompts per configuration), seeds 0-19: 20/20 pass, worst
    discrepancy/tolerance 0.749 (seed 11); both controls rejected at every seed, expected |z| at
    least 7.8 (d = 5) and 6.2 (d = 3) times the threshold (measured at least 8.1 and 6.1). The forward
    pass is the Gram recursion on :meth:`Prompts.gram <verify.tasks.preconditioned_gd.Prompts.gram>` (the
    token pass's values to round-off: seeds 0-19 every z within 6e-14 relative, the numbers above
    unchanged); seed 0 about 0.2 s CPU warm (0.5 s by the token pass), 0.3 s cold (1.2 s).
    """
    rng = ctx.rng
    configs = [(distorted_covariance(rng, EXPERIMENT_EIGENVALUES), 20),
               (distorted_covariance(rng, SMALL_EIGENVALUES), 4)]
    total = ctx.setting("samples")
    zs, controls, per = [], [], []
    for Sigma, n in configs:
        d = Sigma.shape[0]
        G = _cf(f"{TOPIC}.optimal_preconditioner_inverse_task", Sigma=Sigma, n=n)
        G1 = _cf(f"{TOPIC}.optimal_preconditioner", Sigma=Sigma, n=n)
        f_star = _cf(f"{TOPIC}.optimal_loss_inverse_task", d=d, n=n)
        # a 10% larger step: tests that the optimum is a minimum along its own direction
        est = batch_mean()
        for k in chunks(total, CHUNK):
            pr = sample_prompts(rng, Sigma, n, k, task="inverse")
            g = pr.gram()   # the forward pass by the Gram recursion (predict_sparse's values to round-off)
            e = (predict_gram(g, *sparse_layers([G])) - pr.target) ** 2
            est.add(np.stack([e, (predict_gram(g, *sparse_layers([G1])) - pr.target) ** 2 - e,
                              (predict_gram(g, *sparse_layers([1.1 * G])) - pr.target) ** 2 - e], axis=1))
        r = est.result()
        # exact gap of 1.1 G along the direction: f(a) quadratic, f(1.1 a*) - f* = 0.01 * (d - f*)
        gap_scaled = 0.01 * (d - f_star)
        zs += [z_score(r.mean[0], r.se[0], f_star), z_score(r.mean[2], r.se[2], gap_scaled)]
        # expected: the exact gap f(G1) - f* under w* ~ N(0, Sigma^{-1}) over the measured s.e.;
        # f(A) = d - 2 tr(Sigma A) + (n+d+1)/n tr(Sigma A^T Sigma A) (E[S Sigma^{-1} S] =
        # (n+d+1)/n Sigma), which gives f* = d(d+1)/(n+d+1) at n/(n+d+1) Sigma^{-1}
        f_G1 = d - 2 * np.trace(Sigma @ G1) + (n + d + 1) / n * np.trace(Sigma @ G1.T @ Sigma @ G1)
        controls.append(Control(f"d={d}, n={n}: Theorem 1's Gamma* as optimal here (paired gap = 0)",
                                abs(z_score(r.mean[1], r.se[1], 0.0)), 0.0,
                                expected=float(abs(f_G1 - f_star) / r.se[1])))
        per.append({"d": d, "n": n, "f_star": f_star, "mc": float(r.mean[0]), "se": float(r.se[0]),
                    "gap_theorem1": float(r.mean[1]), "gap_theorem1_se": float(r.se[1]),
                    "gap_1.1x": float(r.mean[2]), "gap_1.1x_predicted": gap_scaled})
    z_crit = z_threshold(len(zs))
    controls = [dataclasses.replace(c, tolerance=z_crit) for c in controls]
    return Outcome(
        measured=[p["mc"] for p in per], predicted=[p["f_star"] for p in per],
        discrepancy=float(max(abs(z) for z in zs)), tolerance=z_crit,
        criterion=(f"max |z| over {len(zs)} comparisons: MC loss at n/(n+d+1) Sigma^-1 vs d(d+1)/(n+d+1), and "
                   "the paired gap of 1.1x that preconditioner vs the exact 0.01 (d - f*) of a quadratic "
                   "with minimum f* and value d at 0"),
        controls=controls, details={"prompts_per_config": total, "per_config": per},
    )


# -- (e) one theory, two papers (symbolic) ---------------------------------------------------------------
@check(f"{TOPIC}.one_theory",
       covers=[f"{TOPIC}.optimal_preconditioner", f"{TOPIC}.optimal_loss", f"{TOPIC}.loss",
               f"{TOPIC}.optimal_preconditioner_inverse_task", f"{TOPIC}.optimal_loss_inverse_task",
               "preconditioned_gd.relu.optimal_scale"],
       method="symbolic",
       title="Theorem 1's optimum and optimal loss are the merged-model minimum of Zhang et al. 2025 "
             "(Lambda = Sigma, N = n); the derived optima are stationary")
def one_theory(ctx):
    """Each identity and control is a sympy proof; the proofs are kept with the derivations in
    theory's cache (:func:`theory.cache.derivation`), keyed by the source of the records they
    compare and of :mod:`theory.compare` (an edit there, or ``ATTENTION_THEORY_CACHE=off``,
    proves them again)."""
    from theory import cache

    proofs = cache.derivation(f"{TOPIC}.one_theory.proofs",
                              ["theory.preconditioned_gd", "theory.linear_attention", "theory.compare"],
                              _one_theory_proofs)
    claims, stats = proofs["claims"], proofs["controls"]
    failed = [k for k, ok in claims.items() if not ok]
    # exact symbolic comparisons (no sampling): each statistic is its own expected value
    controls = [
        Control("Theorem-3-model optimum n/(n+d+1) Sigma^-1 == merged.converged_matrix", stats[0], 0.5,
                expected=stats[0]),
        Control("optimal_loss == merged.global_min_loss at N + 1", stats[1], 0.5, expected=stats[1]),
        Control("loss(A) == merged.loss(M = A^T) (transpose convention)", stats[2], 0.5, expected=stats[2]),
    ]
    return Outcome(
        measured={k: bool(v) for k, v in claims.items()}, predicted={k: True for k in claims},
        discrepancy=float(len(failed)), tolerance=0.0,
        criterion="sympy proves every identity (exact: spectral images for functions of one covariance, "
                  "explicit 2x2/3x3 matrices otherwise); each control must be proved different",
        controls=controls, details={"failed": failed},
    )


def _one_theory_proofs() -> dict:
    """The sympy proofs of :func:`one_theory`: ``{"claims": {identity: proved}, "controls": [for each
    wrong form, 0.0 where it is proved equal (the control fails), else 1.0]}``."""
    from theory.compare import equal
    from theory.preconditioned_gd import relu, sym
    from theory.preconditioned_gd import single_layer as sl

    ident = sl.one_theory_identities()
    claims = {
        "optimal_preconditioner == merged.converged_matrix": ident["optimal_preconditioner"],
        "optimal_loss == merged.global_min_loss": ident["optimal_loss"],
        "loss(A) == merged.loss(M = A)": ident["loss"],
        "gradient vanishes at Gamma* (identity task)": sl.stationarity_residual() == 0,
        "gradient vanishes at the inverse-task optimum": sl.stationarity_residual("inverse") == 0,
        "inverse-task optimum == n/(n+d+1) Sigma^-1": equal(
            sl.to_merged_symbols(sl.derive_optimal_preconditioner("inverse")),
            sl.to_merged_symbols(sl.worked_optimal_preconditioner_inverse_task()), covariance=sym("Lambda")),
        "inverse-task optimal loss == d(d+1)/(n+d+1)": equal(
            sl.derive_optimal_loss_inverse_task(), sl.worked_optimal_loss_inverse_task()),
        "ReLU gradient vanishes at a* I": relu.stationarity_residual() == 0,
    }
    # controls: wrong forms the same comparisons must tell apart
    merged_L = theory.get("linear_attention.merged.global_min_loss").expr
    N = sym("N")
    wrong_loss = merged_L.xreplace({N: N + 1})  # an off-by-one context length
    stats = [0.0 if ident["control_inverse_task_optimum"] else 1.0,
             0.0 if equal(sl.to_merged_symbols(sl.derive_optimal_loss()), wrong_loss,
                          covariance=sym("Lambda")) else 1.0,
             0.0 if equal(sl.to_merged_symbols(sl.derive_loss()).xreplace({sym("A"): sym("M").T}),
                          theory.get("linear_attention.merged.loss").expr, covariance=sym("Lambda")) else 1.0]
    return {"claims": {k: bool(v) for k, v in claims.items()}, "controls": stats}
