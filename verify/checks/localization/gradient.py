"""Checks of the QK-gradient (eq. 3), the eigenspectrum statistics and bounds (eqs. 5, 7-10)
and the LOCATER regulariser of Bao, Hataya, Karakida 2024.

Contains
--------
``localization.gradient.eq3_autograd``
    Eq. 3 with P restored against torch autograd of the per-sample loss of the clipped-linear
    model on random-walk tokens (samples within 1e-3 of a clip boundary rejected); the printed
    eq. 3 (no P) is the negative control; the index sums (19)-(21) against the matrix forms.
``localization.locater.grad_autograd``
    The LOCATER regulariser and its gradients (sympy matrix calculus) against autograd; the
    printed mean-term gradients are the controls.
``localization.eigen.spectrum``
    Eq. 8 (variance), eq. 5 (bound, tight at equal eigenvalues), xi, eta and tr(W^2) against
    the eigenvalues of W = W_QK Sigma on random draws with anisotropic Sigma; eq. 10's printed
    equality sqrt(tr W^2) = ||W||_F and the Fig. 2 caption's eta are the controls.
``localization.bounds.norm_bounds``
    Eq. 7 (valid versions) and eq. 10 (valid chain) on random draws and the counterexample
    W_QK = Sigma = I; the printed first inequality of eq. 7 is the control.
``localization.entropy.bound``
    Eq. 9: the corrected large-T bound stays below ln(T + 1), is decreasing in nu and approaches
    Zhai et al.'s finite-T bound; the printed eq. 9 exceeds ln T.
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.settings import Setting
from verify.tasks.random_walk import anisotropic_covariance, sample_walks

TOL_GRAD = 1e-9


def _rel(a, b):
    """Frobenius relative error per sample, ||a - b|| / ||b||."""
    return np.linalg.norm((a - b).reshape(len(b), -1), axis=1) / np.linalg.norm(b.reshape(len(b), -1), axis=1)


# =====================================================================================
@check("localization.gradient.eq3_autograd", covers=[], method="torch",
       title="Eq. 3 QK-gradient (P restored) vs autograd of the clipped-linear model",
       refutes={"Bao et al. 2024, eq. 3 (and App. B.1, lines 4-5)":
                "The QK-gradient is printed without the matrix P = X^T W_V^T W_F^T W_F W_V X in its "
                "first two terms; with P restored it equals autograd of the clipped-linear model "
                "(the printed form is off by O(1))."},
       settings=[Setting("d", "int", quick=6, full=6, low=2, high=64, doc="token dimension d (lambda = sqrt(d))"),
                 Setting("T", "int", quick=9, full=9, low=2, high=256, doc="sequence length T"),
                 Setting("samples", "int", quick=20, full=200, low=1, high=10**5,
                         doc="random (Sigma, W_QK, W_V, W_F) instances, 16 walks each")])
def eq3_autograd(ctx):
    import torch

    from verify.models.localization import (
        clipped_linear_loss,
        linearised_coefficients,
        qk_gradient,
        qk_gradient_expansion,
    )

    rng = ctx.rng
    d, T = ctx.setting("d"), ctx.setting("T")
    instances = ctx.setting("samples")
    per = 16
    lam = np.sqrt(d)
    rel_c, rel_p, rel_t, rel_exp, fractions = [], [], [], [], []
    gap_p, gap_t = [], []  # expected control statistics: wrong form vs the corrected closed form
    kept = 0
    for _ in range(instances):
        Sigma = anisotropic_covariance(rng, d)
        walk = sample_walks(rng, Sigma, T + 1, per)
        X, y = walk[:, :, :T], walk[:, :, T]
        W_QK = rng.standard_normal((d, d)) * rng.uniform(0.2, 1.0)
        W_V = rng.standard_normal((d, d)) / np.sqrt(d)
        W_F = np.eye(d) + rng.standard_normal((d, d)) / d
        u, _, _ = linearised_coefficients(np.einsum("bdt,de,be->bt", X, W_QK, X[:, :, -1]) / lam)
        inside = (u >= 0) & (u <= 1)
        ok = (np.min(np.minimum(np.abs(u), np.abs(u - 1)), axis=1) > 1e-3) & inside.any(axis=1)
        if not ok.any():
            continue
        X, y, u, inside = X[ok], y[ok], u[ok], inside[ok]
        kept += len(X)
        fractions.append(inside.mean())
        Wt = torch.tensor(W_QK, requires_grad=True)
        loss = clipped_linear_loss(torch.tensor(X), torch.tensor(y), Wt, torch.tensor(W_V),
                                   torch.tensor(W_F), lam)
        auto = np.stack([torch.autograd.grad(loss[b], Wt, retain_graph=True)[0].numpy()
                         for b in range(len(X))])
        corrected = qk_gradient(X, y, W_QK, W_V, W_F, lam, form="corrected")
        rel_c.append(_rel(corrected, auto))
        rel_p.append(_rel(qk_gradient(X, y, W_QK, W_V, W_F, lam, form="printed"), auto))
        rel_t.append(_rel(np.swapaxes(corrected, 1, 2), auto))
        gap_p.append(_rel(qk_gradient(X, y, W_QK, W_V, W_F, lam, form="printed"), corrected))
        gap_t.append(_rel(np.swapaxes(corrected, 1, 2), corrected))
        terms = qk_gradient(X, y, W_QK, W_V, W_F, lam, terms=True)
        sums = qk_gradient_expansion(X, y, W_QK, W_V, W_F, lam)
        rel_exp.append(max(np.max(_rel(s, t)) for s, t in zip(sums, terms)))
    rel_c, rel_p, rel_t = (np.concatenate(r) for r in (rel_c, rel_p, rel_t))
    disc = float(max(rel_c.max(), max(rel_exp)))
    return Outcome(
        measured=float(rel_c.max()), predicted=0.0, discrepancy=disc, tolerance=TOL_GRAD,
        criterion=(f"max over {kept} samples (d = {d}, T = {T}, anisotropic Sigma, clipping active) of the "
                   "Frobenius relative error of the corrected eq. 3 vs autograd, and of the sums (19)-(21) "
                   f"vs the matrix terms, <= {TOL_GRAD:g} (float64 round-off is ~1e-15; a wrong term "
                   "gives O(1))"),
        controls=[
            Control("printed eq. 3 (no P), smallest error over samples", float(rel_p.min()), TOL_GRAD,
                    expected=float(np.concatenate(gap_p).min())),
            Control("transposed gradient (x_T X^T order)", float(rel_t.min()), TOL_GRAD,
                    expected=float(np.concatenate(gap_t).min())),
        ],
        details={"samples": kept, "instances": instances, "max_rel_corrected": float(rel_c.max()),
                 "max_rel_expansion_19_21": float(max(rel_exp)),
                 "printed_rel_min_median_max": [float(rel_p.min()), float(np.median(rel_p)), float(rel_p.max())],
                 "fraction_unclipped_mean": float(np.mean(fractions)),
                 "boundary_rejection": "any u_i within 1e-3 of 0 or 1, or every coordinate clipped"},
    )


# =====================================================================================


