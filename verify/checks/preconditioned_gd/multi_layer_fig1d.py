"""The loss level of Fig. 1d of Ahn, Cheng, Daneshmand, Sra 2023 (§4.3): "almost 0".

Contains
--------
``preconditioned_gd.multi_layer.fig1d_loss_level``
    Monte Carlo of the three-layer transformer of §4.3 (n = 20, d = 5, the experiments' Sigma,
    ``w* ~ N(0, Sigma^{-1})``) at Theorem 3's optimal steps: the loss is ``f*_3 = 0.1336``, 2.7 % of
    ``E y_q^2 = d = 5``, not "almost 0". (That training reaches ``f*_3`` and not below is
    ``preconditioned_gd.multi_layer.torch_theorem3_sparse``.)
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.models.linear_transformer import sparse_layers
from verify.models.linear_transformer_monte_carlo import D_PAPER, N_PAPER, OPT_LOSS, STEPS, predict_gram
from verify.settings import Setting
from verify.stats import batch_mean, chunks, z_threshold
from verify.stats import evaluate as _cf
from verify.tasks.preconditioned_gd import distorted_covariance, sample_prompts


@check("preconditioned_gd.multi_layer.fig1d_loss_level", covers=[OPT_LOSS, STEPS], method="monte_carlo",
       title="Fig. 1d: the three-layer loss at Theorem 3's optimum is f*_3 = 0.134, 2.7 % of E y_q^2 = 5 (Monte Carlo "
             "of the forward pass), not 'almost 0'",
       refutes={"Ahn et al. 2023, §4.3, Fig. 1d ('the training converges to an almost 0 value')":
                "The loss the three-layer transformer of §4.3 converges to is the optimum on S of Theorem 3, f*_3 = "
                "12138645/90852389 = 0.1336 at n = 20, d = 5 (ln f*_3 = -2.01), 2.7 % of E y_q^2 = d = 5: small "
                "against the start on Fig. 1d's log scale, but not near 0 (the GD++ layers of Theorem 4 train to far "
                "less at the same n, d: preconditioned_gd.gdpp.torch_theorem4). The parameters do match Theorem 3's "
                "critical point, as the paper says."},
       settings=[Setting("samples", "int", quick=100_000, full=2_000_000, low=1000, high=10**9,
                         doc="sampled prompts")])
def fig1d_loss_level(ctx):
    """§4.3's setting: ``n = 20``, ``d = 5``, ``Sigma`` with eigenvalues (1, 1, .25, .0625, 1) and a
    random rotation, ``w* ~ N(0, Sigma^{-1})``, three layers of eq. 8 at ``A_l = a_l Sigma^{-1}`` with
    the registered optimal steps (in random order, Lemma 4). Monte Carlo of ``(TF_3 - y_q)^2`` and of
    ``y_q^2`` on the same prompts: the loss against ``optimal_loss`` (L = 3) and ``E y_q^2`` against
    ``d`` (z); their ratio is reported.

    Control (the statement as printed): "almost 0" as a loss of 0, z of the Monte Carlo loss against 0
    (expected ``f*_3`` over the measured s.e.).

    Measured, quick profile (1e5 prompts), seeds 0-19: 20/20 pass, worst |z| 3.49 against 5.03; the
    loss 0.128-0.140, 2.6-2.8 % of the measured E y_q^2; the control's smallest z 26 (heavy tails of
    the degree-6 loss make its s.e. vary between seeds; at 4e4 prompts its expected z fell to 2.2 x the
    threshold, so the size is not reduced). The forward pass is the Gram recursion
    (:func:`~verify.models.linear_transformer_monte_carlo.predict_gram`, the same function as
    :func:`~verify.models.linear_transformer.predict`, tests; the same z to 1e-14 relative): about
    0.3 s of CPU (0.5 s by the token forward pass). Full profile (2e6 prompts),
    seeds 0-1: 2/2, worst |z| 1.16, loss 0.1334 (2.67 % of the measured E y_q^2 = 5.006), control >= 182.
    """
    rng = ctx.rng
    n, d, total = N_PAPER, D_PAPER, ctx.setting("samples")
    Sigma = distorted_covariance(rng)
    Si = np.linalg.inv(Sigma)
    a = rng.permutation(np.asarray(_cf(STEPS, n=n, d=d, L=3), dtype=float)[:3])
    f3 = _cf(OPT_LOSS, n=n, d=d, L=3)
    P, Q = sparse_layers([al * Si for al in a])
    est = batch_mean()
    for k in chunks(total, 20_000):
        pr = sample_prompts(rng, Sigma, n, k, task="inverse")
        est.add(np.stack([(predict_gram(pr.gram(), P, Q) - pr.target) ** 2, pr.target ** 2], axis=1))
    r = est.result()
    z = r.z([f3, d])
    z_crit = z_threshold(z.size)
    ratio = float(r.mean[0] / r.mean[1])
    return Outcome(
        measured={"loss": float(r.mean[0]), "E y_q^2": float(r.mean[1]), "loss / E y_q^2": ratio,
                  "ln loss": float(np.log(r.mean[0]))},
        predicted={"f*_3": f3, "E y_q^2": d, "ratio": f3 / d},
        discrepancy=float(np.max(np.abs(z))), tolerance=z_crit,
        criterion=(f"max |z| of the Monte Carlo loss at the optimal steps against optimal_loss (L = 3) and of E y_q^2 "
                   f"against d ({total} prompts, n = {n}, d = {d}, per-prompt s.e.) < z_threshold(2) = {z_crit:.2f} "
                   "(family-wise false alarm 1e-6)"),
        controls=[Control(f"Fig. 1d as printed ('almost 0'): the loss equal to 0, z (expected {f3 / r.se[0]:.0f})",
                          float(r.mean[0] / r.se[0]), z_crit, expected=float(f3 / r.se[0]))],
        details={"steps": a.tolist(), "se": r.se.tolist(), "prompts": total,
                 "Sigma_eigenvalues": np.linalg.eigvalsh(Sigma).tolist()},
    )
