"""Checks of ``preconditioned_gd.wishart`` (see also :mod:`verify.checks.preconditioned_gd.multi_layer`).

Contains
--------
``preconditioned_gd.wishart.mc_trace_moments``
    Wishart trace moments E tr S_u^k, k = 1..8 (the loss of L = 4 layers needs m_1..m_8), against sampled
    white Wishart matrices
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.models.linear_transformer_monte_carlo import D_PAPER, N_PAPER, planar_moments
from verify.settings import Setting
from verify.stats import batch_mean, chunks, z_threshold
from verify.stats import evaluate as _cf

MOMENTS = "preconditioned_gd.wishart.trace_moments"
MOMENT = "preconditioned_gd.wishart.trace_moment"
#: Largest order tested: m_1..m_8 enter the loss of four layers (App. D, Fig. 7).
K_MAX = 8


# -- reference spectra and wrong moment models -----------------------------------------
def white_wishart(rng: np.random.Generator, n: int, d: int, batch: int) -> np.ndarray:
    """Matrices (batch, m, m), ``m = min(n, d)``, whose eigenvalues are the non-zero ones of ``S_u = (1/n)
    sum_{i<=n} u_i u_i^T``, ``u_i ~ N(0, I_d)`` (the other ``d - m`` are 0).

    Drawn by the Bartlett decomposition instead of the ``n`` vectors: the non-zero eigenvalues of
    ``G G^T`` (``G`` the d x n matrix of the ``u_i``) are those of the ``m x m`` Wishart matrix ``W_m(M, I)``,
    ``M = max(n, d)`` (``G^T G`` when ``n < d``), which is ``A A^T`` with ``A`` lower triangular,
    ``A_ii^2 ~ chi^2(M - i)`` (i = 0..m-1), ``A_ij ~ N(0, 1)`` below the diagonal, all independent. The same
    law with m(m+1)/2 draws instead of d n (15 instead of 100 at the paper's n = 20, d = 5) and an m x m
    matrix (2 x 2 instead of 6 x 6 at n = 2, d = 6): about half the time of the check."""
    m, dof = min(n, d), max(n, d)
    A = np.tril(rng.standard_normal((batch, m, m)), -1)
    i = np.arange(m)
    A[:, i, i] = np.sqrt(rng.chisquare(dof - i, size=(batch, m)))
    return A @ A.transpose(0, 2, 1) / n


def trace_powers(M: np.ndarray, K: int) -> np.ndarray:
    """``tr M^k``, k = 1..K, per symmetric matrix of ``M`` (batch, m, m): ``tr M^(a+b) = <M^a, M^b>_F`` with
    ``a = floor(k/2)``, so ``M^2..M^ceil(K/2)`` are the only products (3 at K = 8). The power sums of the
    eigenvalues without an eigenproblem: half the time of ``eigvalsh`` and running products, the same
    values to ~2e-14 relative."""
    powers = [None, M]
    for _ in range(2, (K + 1) // 2 + 1):
        powers.append(powers[-1] @ M)
    out = np.empty((M.shape[0], K))
    out[:, 0] = np.trace(M, axis1=1, axis2=2)
    for k in range(2, K + 1):
        out[:, k - 1] = np.einsum("bij,bij->b", powers[k // 2], powers[k - k // 2])
    return out


# -- (a) Wishart trace moments ----------------------------------------------------------
@check("preconditioned_gd.wishart.mc_trace_moments", covers=[MOMENTS, MOMENT], method="monte_carlo",
       title=f"Wishart trace moments E tr S_u^k, k = 1..{K_MAX}, against sampled white Wishart matrices",
       settings=[Setting("samples", "int", quick=200_000, full=4_000_000, low=1000, high=10**9,
                         doc="sampled Wishart matrices per (n, d)")])
def mc_trace_moments(ctx):
    """``m_1..m_6`` from ``trace_moments`` and ``m_7, m_8`` from ``trace_moment`` (the loop equations)
    against the sampled ``sum_k s_k^j`` with per-sample standard errors, max |z| over the family.
    Controls: ``m_3`` without its ``+4 n d`` term (the smallest real-Gaussian correction) and the
    planar (Marchenko-Pastur, Narayana) moments, each with its expected z (the closed-form gap over
    the measured s.e.).

    Quick profile (2e5 matrices per (n, d), drawn by the Bartlett decomposition, :func:`white_wishart`),
    seeds 0-19: 20/20 pass, worst discrepancy/tolerance 0.559 (seed 7, threshold 5.48); controls'
    expected z 2.41-2.50 (m_3) and 20.3-20.8 (planar) times the threshold, measured at least 2.12 and
    20.3 times. The m_3 control is below 5 x, so the size is not reduced (the Bartlett draw halves the
    time at the same size; ``tr S_u^k`` from matrix products, :func:`trace_powers`, halves it again:
    0.9 -> 0.5 s of CPU at seed 0, the same z to ~1e-13). Full profile (4e6), seeds 0-1: 2/2, worst
    0.455; controls at least 10.9 x and 91 x the threshold."""
    configs = [(4, 3), (N_PAPER, D_PAPER), (2, 6)]  # small n; the paper's sizes; rank-deficient n < d
    total = ctx.setting("samples")
    per, zs, z_m3, z_planar = {}, [], [], []
    e_m3, e_planar = [], []  # expected control z: |wrong - true closed form| / measured s.e.
    for n, d in configs:
        acc = batch_mean()
        for size in chunks(total, 50_000):
            acc.add(trace_powers(white_wishart(ctx.rng, n, d, size), K_MAX))
        est = acc.result()
        m = np.concatenate([_cf(MOMENTS, n=n, d=d), [_cf(MOMENT, n=n, d=d, k=j) for j in range(7, K_MAX + 1)]])
        wrong_m3 = m.copy()
        wrong_m3[2] -= 4 * n * d / n**3  # E tr W^3 without its "+4" term
        planar = planar_moments(n, d, K_MAX)
        zs.append(est.z(m))
        z_m3.append(est.z(wrong_m3))
        z_planar.append(est.z(planar))
        e_m3.append(np.abs(wrong_m3 - m) / est.se)
        e_planar.append(np.abs(planar - m) / est.se)
        per[f"n={n},d={d}"] = {"predicted": m.tolist(), "measured": est.mean.tolist(),
                               "rel_se": (est.se / m).tolist(), "z": zs[-1].tolist()}
    z_crit = z_threshold(K_MAX * len(configs))
    disc = float(np.max(np.abs(zs)))
    return Outcome(
        measured={c: v["measured"] for c, v in per.items()},
        predicted={c: v["predicted"] for c, v in per.items()},
        discrepancy=disc, tolerance=z_crit,
        criterion=f"max |z| over {K_MAX * len(configs)} moments (k = 1..{K_MAX} at (n, d) = {configs}), "
                  f"{total} white Wishart samples each, per-sample s.e.; family-wise false alarm 1e-6",
        controls=[Control("m_3 without the +4 n d term", float(np.max(np.abs(z_m3))), z_crit,
                          expected=float(np.max(e_m3))),
                  Control("planar (Marchenko-Pastur) pairings only", float(np.max(np.abs(z_planar))), z_crit,
                          expected=float(np.max(e_planar)))],
        details={"samples_per_config": total, "per_config": per},
    )
