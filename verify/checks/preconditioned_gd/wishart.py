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
def white_spectra(rng: np.random.Generator, n: int, d: int, batch: int) -> np.ndarray:
    """Eigenvalues (batch, d) of ``S_u = (1/n) sum_{i<=n} u_i u_i^T``, ``u_i ~ N(0, I_d)``."""
    G = rng.standard_normal((batch, d, n))
    return np.linalg.eigvalsh(np.einsum("bdi,bei->bde", G, G) / n)


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
    the measured s.e.)."""
    configs = [(4, 3), (N_PAPER, D_PAPER), (2, 6)]  # small n; the paper's sizes; rank-deficient n < d
    total = ctx.setting("samples")
    k = np.arange(1, K_MAX + 1)
    per, zs, z_m3, z_planar = {}, [], [], []
    e_m3, e_planar = [], []  # expected control z: |wrong - true closed form| / measured s.e.
    for n, d in configs:
        acc = batch_mean()
        for size in chunks(total, 50_000):
            s = white_spectra(ctx.rng, n, d, size)
            acc.add((s[:, :, None] ** k).sum(axis=1))
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
