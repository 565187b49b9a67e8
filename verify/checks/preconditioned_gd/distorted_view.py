"""Checks of §4.2 of Ahn, Cheng, Daneshmand, Sra 2023 ("linear regression with distorted view of the data").

Contains
--------
``preconditioned_gd.distorted_view.risk_hessian_newton``
    The Hessian of ``R_{w*}(w) = (1/2n)(w - w*)^T X X^T (w - w*)`` by central differences on sampled
    contexts is ``S = X X^T / n`` (``distorted_view.risk_hessian``) at every n, not the printed
    ``(1/2n) X X^T``; a Newton step with it lands on ``w*``, with the printed one at ``2 w* - w``.
``preconditioned_gd.distorted_view.task_vector``
    With ``x = W xbar`` the labels are ``<x, W^{-T} wbar>``; the printed ``w* = Sigma^{-1/2} wbar``
    reproduces them only for symmetric ``W`` (both have the law ``N(0, Sigma^{-1})``).
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting
from verify.tasks.in_context_regression import random_orthogonals

HESSIAN = "preconditioned_gd.distorted_view.risk_hessian"
#: Relative round-off tolerance of the exact identities here (O(1) sums of O(n) products).
ROUNDOFF = 1e-10


def _risk(X: np.ndarray, w_star: np.ndarray):
    """``R(w) = (1/2n) ||X^T (w - w*)||^2`` for a context ``X`` (d, n): the printed definition."""
    n = X.shape[1]
    return lambda w: float(np.sum((X.T @ (w - w_star)) ** 2) / (2 * n))


def _central_hessian(R, w: np.ndarray, h: float = 1.0) -> np.ndarray:
    """``(R(w + h e_i + h e_j) - R(w + h e_i - h e_j) - R(w - h e_i + h e_j) + R(w - h e_i - h e_j)) /
    (4 h^2)``: exact for a quadratic (no truncation error), so only round-off remains."""
    d = w.size
    E = np.eye(d) * h
    H = np.empty((d, d))
    for i in range(d):
        for j in range(d):
            H[i, j] = (R(w + E[i] + E[j]) - R(w + E[i] - E[j]) - R(w - E[i] + E[j]) + R(w - E[i] - E[j])) / (4 * h * h)
    return H


def _central_gradient(R, w: np.ndarray, h: float = 1.0) -> np.ndarray:
    """``(R(w + h e_i) - R(w - h e_i)) / (2h)``: exact for a quadratic."""
    E = np.eye(w.size) * h
    return np.array([(R(w + e) - R(w - e)) / (2 * h) for e in E])


@check("preconditioned_gd.distorted_view.risk_hessian_newton", covers=[HESSIAN], method="monte_carlo",
       decides=[HESSIAN],
       title="§4.2: the Hessian of R_{w*}(w) = (1/2n)(w - w*)^T X X^T (w - w*) is (1/n) X X^T at every n (central "
             "differences on sampled contexts), not the printed (1/2n) X X^T; Newton's step lands on w*",
       settings=[Setting("n", "ints", quick=(10, 20, 1000), full=(10, 20, 100, 1000, 10_000), low=1, high=10**6,
                         doc="context lengths n (n >= d for the Newton step)"),
                 Setting("samples", "int", quick=20, full=50, low=1, high=10**5,
                         doc="sampled (context, w, w*) per n")])
def risk_hessian_newton(ctx):
    """For each ``n`` and each sample: a context ``X`` of ``n`` covariates ``x ~ N(0, Sigma)``
    (the experiments' distorted Sigma, ``d = 5``), ``w*, w ~ N(0, I)``; the Hessian and gradient of
    the printed risk by central differences with step 1 (exact for a quadratic: the only error is
    round-off, relative ~1e-14), compared with ``risk_hessian(S)``, ``S = X X^T / n``; then one
    Newton step ``w - H^{-1} grad R`` with the record's ``H`` (must give ``w*``).

    Controls (deterministic on the sampled inputs; each statistic is its own expected value): the
    printed Hessian ``(1/2n) X X^T`` (relative error 1/2 at every n: "at least in the case of large n"
    does not rescue it) and its Newton step (lands at ``2 w* - w``: error ``||w - w*||``, relative 1).

    Measured, quick profile, seeds 0-19: 20/20 pass, worst relative error 1.1e-13 against 1e-10; full
    profile (n up to 1e4, 50 samples each), seeds 0-1: 2/2, worst 8.7e-14.
    """
    from verify.tasks.preconditioned_gd import distorted_covariance

    rng = ctx.rng
    Sigma = distorted_covariance(rng)
    C = np.linalg.cholesky(Sigma)
    d = Sigma.shape[0]
    hess = theory.get(HESSIAN)
    worst, worst_newton, ctrl_h, ctrl_newton = 0.0, 0.0, np.inf, np.inf
    rows = {}
    for n in ctx.setting("n"):
        if n < d:
            raise ValueError(f"n: the Newton step needs n >= d = {d}, got {n}")
        errs, newton, printed_errs, printed_newton = [], [], [], []
        for _ in range(ctx.setting("samples")):
            X = C @ rng.standard_normal((d, n))
            w_star, w = rng.standard_normal(d), rng.standard_normal(d)
            R = _risk(X, w_star)
            H_fd, g_fd = _central_hessian(R, w), _central_gradient(R, w)
            S = X @ X.T / n
            H, H_printed = hess(S=S), hess(S=S, printed=True)
            scale = np.max(np.abs(H_fd))
            errs.append(np.max(np.abs(H_fd - H)) / scale)
            printed_errs.append(np.max(np.abs(H_fd - H_printed)) / scale)
            step = np.linalg.solve(H, g_fd)
            newton.append(np.linalg.norm(w - step - w_star) / np.linalg.norm(w - w_star))
            printed_newton.append(np.linalg.norm(w - np.linalg.solve(H_printed, g_fd) - w_star)
                                  / np.linalg.norm(w - w_star))
        rows[f"n={n}"] = {"hessian rel error": max(errs), "newton rel error": max(newton),
                          "printed hessian rel error (min)": min(printed_errs),
                          "printed newton rel error (min)": min(printed_newton)}
        worst, worst_newton = max(worst, max(errs)), max(worst_newton, max(newton))
        ctrl_h, ctrl_newton = min(ctrl_h, min(printed_errs)), min(ctrl_newton, min(printed_newton))
    disc = max(worst, worst_newton)
    return Outcome(
        measured={"hessian rel error": worst, "newton rel error": worst_newton}, predicted=0.0,
        discrepancy=disc, tolerance=ROUNDOFF,
        criterion=(f"max relative error of the central-difference Hessian of R against risk_hessian(S) and of the "
                   f"Newton step against w*, over n in {list(ctx.setting('n'))} ({ctx.setting('samples')} samples "
                   f"each, d = {d}, distorted Sigma) <= {ROUNDOFF:g}: exact identities (central differences are exact "
                   "for a quadratic), so only round-off remains, amplified by cond(S) in the Newton solve"),
        controls=[Control("printed Hessian (1/2n) X X^T, smallest relative error over n and samples (deterministic: "
                          "1/2)", float(ctrl_h), ROUNDOFF, expected=float(ctrl_h)),
                  Control("Newton step with the printed Hessian: distance to w* relative to ||w - w*|| (deterministic: "
                          "1, it lands at 2 w* - w)", float(ctrl_newton), ROUNDOFF, expected=float(ctrl_newton))],
        details={"per_n": rows, "Sigma_eigenvalues": np.linalg.eigvalsh(Sigma).tolist()},
    )


@check("preconditioned_gd.distorted_view.task_vector", covers=[], method="monte_carlo",
       title="§4.2: with x = W xbar, y = <xbar, wbar> = <x, W^{-T} wbar>; the printed w* = Sigma^{-1/2} wbar gives "
             "the labels only for symmetric W (same law N(0, Sigma^{-1}))",
       refutes={"Ahn et al. 2023, §4.2 (distorted view): w* := Sigma^{-1/2} wbar gives y^(i) = <x^(i), w*>":
                "With x = W xbar and Sigma = W W^T, <x, w*> = xbar^T W^T w* equals <xbar, wbar> for every xbar only if "
                "W^T w* = wbar, i.e. w* = W^{-T} wbar; Sigma^{-1/2} wbar equals it only when W = Sigma^{1/2} "
                "(symmetric W). Both have the law N(0, Sigma^{-1}) (W^{-T} W^{-1} = Sigma^{-1}), so the data model "
                "of Theorems 3-4 (x ~ N(0, Sigma), w* ~ N(0, Sigma^{-1})) and everything built on it are right."},
       settings=[Setting("n", "int", quick=20, full=20, low=1, high=10_000, doc="covariates per prompt (n + 1 with the "
                                                                                 "query)"),
                 Setting("samples", "int", quick=200, full=20_000, low=1, high=10**6,
                         doc="sampled (W, xbar, wbar) prompts")])
def task_vector(ctx):
    """Per sample: a non-symmetric ``W = U diag(s) V^T`` (``U, V`` Haar, ``s ~ U(0.5, 2)``, ``d = 5``), latent
    ``xbar^(1..n+1), wbar ~ N(0, I)``, ``x = W xbar``, ``y = <xbar, wbar>``. Exact identities (relative
    round-off, ~1e-15 times cond(W) <= 4):

    - ``<x, W^{-T} wbar> = y`` for every covariate;
    - with ``W = Sigma^{1/2}`` (symmetric) the printed ``w* = Sigma^{-1/2} wbar`` gives ``y`` too;
    - ``Cov(W^{-T} wbar) = W^{-T} W^{-1} = Sigma^{-1} = Cov(Sigma^{-1/2} wbar)`` (the law is right).

    Control (deterministic): the printed ``w* = Sigma^{-1/2} wbar`` with the non-symmetric ``W``:
    the smallest, over samples, of the largest relative label error.

    Measured, quick profile, seeds 0-19: 20/20 pass, worst 5.4e-15 against 1e-10; the control's
    smallest error 0.16. Full profile (2e4 samples), seeds 0-1: 2/2, worst 8.0e-15, control 0.083.
    """
    rng = ctx.rng
    n, samples, d = ctx.setting("n"), ctx.setting("samples"), 5
    worst = {"<x, W^-T wbar> = y": 0.0, "symmetric W: <x, Sigma^-1/2 wbar> = y": 0.0,
             "W^-T W^-1 = Sigma^-1": 0.0}
    printed = np.inf
    for _ in range(samples):
        U, V = random_orthogonals(rng, 2, d)
        W = U @ np.diag(rng.uniform(0.5, 2.0, d)) @ V.T     # non-symmetric, cond(W) <= 4
        Sigma = W @ W.T
        lam, V = np.linalg.eigh(Sigma)
        S_half, S_mhalf = V @ np.diag(np.sqrt(lam)) @ V.T, V @ np.diag(lam ** -0.5) @ V.T
        xbar, wbar = rng.standard_normal((d, n + 1)), rng.standard_normal(d)
        y = xbar.T @ wbar
        scale = np.max(np.abs(y))
        Winv = np.linalg.inv(W)
        x = W @ xbar
        err = np.max(np.abs(x.T @ (Winv.T @ wbar) - y)) / scale
        worst["<x, W^-T wbar> = y"] = max(worst["<x, W^-T wbar> = y"], err)
        printed = min(printed, np.max(np.abs(x.T @ (S_mhalf @ wbar) - y)) / scale)
        x_sym = S_half @ xbar
        worst["symmetric W: <x, Sigma^-1/2 wbar> = y"] = max(worst["symmetric W: <x, Sigma^-1/2 wbar> = y"],
                                                             np.max(np.abs(x_sym.T @ (S_mhalf @ wbar) - y)) / scale)
        Si = np.linalg.inv(Sigma)
        worst["W^-T W^-1 = Sigma^-1"] = max(worst["W^-T W^-1 = Sigma^-1"],
                                            np.max(np.abs(Winv.T @ Winv - Si)) / np.max(np.abs(Si)))
    disc = float(max(worst.values()))
    return Outcome(
        measured={k: float(v) for k, v in worst.items()}, predicted=0.0, discrepancy=disc, tolerance=ROUNDOFF,
        criterion=(f"max relative error of three exact identities over {samples} samples (d = {d}, n = {n}, W = U "
                   f"diag(s) V^T, s in [0.5, 2]) <= {ROUNDOFF:g} (round-off times cond(W) <= 4)"),
        controls=[Control("printed w* = Sigma^{-1/2} wbar with a non-symmetric W: smallest over samples of the largest "
                          "relative label error (deterministic)", float(printed), ROUNDOFF, expected=float(printed))],
        details={"samples": samples},
    )
