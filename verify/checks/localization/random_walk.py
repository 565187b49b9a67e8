"""Checks of ``localization.random_walk`` (see also :mod:`verify.checks.localization.u`).

Contains
--------
``localization.random_walk.mc_lemma4``
    Monte Carlo of the random-walk moments of Lemma 4 (eqs. 15-18) and eq. 22
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import batch_mean, z_threshold
from verify.stats import evaluate as _cf
from verify.tasks.random_walk import anisotropic_covariance, iter_walks, symmetric_qk, traces

# =====================================================================================
# Lemma 4 and eq. 22 by Monte Carlo
# =====================================================================================
_LEMMA4 = ("localization.random_walk.quadratic_mean", "localization.random_walk.quadratic_second_moment",
           "localization.random_walk.cross_moment", "localization.random_walk.mixed_moment",
           "localization.random_walk.query_product")


@check("localization.random_walk.mc_lemma4",
       covers=list(_LEMMA4), decides=list(_LEMMA4), method="monte_carlo",
       title="Monte Carlo of the random-walk moments of Lemma 4 (eqs. 15-18) and eq. 22",
       settings=[Setting("T", "int", quick=8, full=8, low=6, high=500,
                         doc="sequence length T (positions i, k = 2, 5; d = 3)"),
                 Setting("samples", "int", quick=400_000, full=4_000_000, low=1000, high=10**9,
                         doc="sampled random walks")])
def mc_lemma4(ctx):
    rng = ctx.rng
    d, T, i, k = 3, ctx.setting("T"), 2, 5
    total = ctx.setting("samples")
    # printed eq. 15 differs from eq. 15 by tr W, which an indefinite W can make vanish (expected z of
    # that control 1.2 at one of 200 seeds): draw (Sigma, W) until |tr W| >= sqrt(tr W^2)/2, which
    # keeps every control's expected z >= 66 over the same 200 seeds
    for _ in range(100):
        Sigma = anisotropic_covariance(rng, d)
        W = symmetric_qk(rng, [0.9, -0.4, 0.3])
        trW, trW2 = traces(W, Sigma)
        if abs(trW) >= 0.5 * np.sqrt(trW2):
            break
    acc = batch_mean()
    for X in iter_walks(rng, Sigma, T, total, chunk=100_000):
        xi, xk, xT = X[:, :, i - 1], X[:, :, k - 1], X[:, :, T - 1]
        qii = np.einsum("bd,de,be->b", xi, W, xi)
        qik = np.einsum("bd,de,be->b", xi, W, xk)
        qkk = np.einsum("bd,de,be->b", xk, W, xk)
        siT = np.einsum("bd,de,be->b", xi, W, xT)
        skT = np.einsum("bd,de,be->b", xk, W, xT)
        acc.add(np.stack([qii, qii**2, qik**2, qik * qkk, siT * skT], axis=1))
    est = acc.result()
    args = [dict(i=i, trW=trW), dict(i=i, trW=trW, trW2=trW2), dict(i=i, k=k, trW=trW, trW2=trW2),
            dict(i=i, k=k, trW=trW, trW2=trW2), dict(i=i, k=k, T=T, trW=trW, trW2=trW2)]
    pred = np.array([_cf(id, **a) for id, a in zip(_LEMMA4, args)])
    printed = np.array([theory.get(id)(printed=True, **a) for id, a in zip(_LEMMA4, args)])
    z = np.abs(est.z(pred))
    z_printed = np.abs(est.z(printed))
    e_printed = np.abs(printed - pred) / est.se  # expected z of each printed form
    zc = z_threshold(len(pred))
    names = ("eq. 15", "eq. 16", "eq. 17", "eq. 18", "eq. 22")
    return Outcome(
        measured=dict(zip(names, est.mean.tolist())), predicted=dict(zip(names, pred.tolist())),
        discrepancy=float(z.max()), tolerance=zc,
        criterion=f"max |z| over the 5 moments at (i, k, T) = ({i}, {k}, {T}), d = {d}, anisotropic Sigma, "
                  f"{total} walks < family-wise threshold (false alarm 1e-6)",
        controls=[Control(f"printed {n} (constants of a walk from x_1 = 0, plus 2A + B)", float(zp), zc,
                          expected=float(ep))
                  for n, zp, ep in zip(names, z_printed, e_printed)],
        details={"z": dict(zip(names, z.tolist())), "printed": dict(zip(names, printed.tolist())),
                 "se": dict(zip(names, est.se.tolist())), "trW": trW, "trW2": trW2},
    )
