"""Checks of ``preconditioned_gd.single_layer`` (see also :mod:`verify.checks.preconditioned_gd.multi_layer_torch`).

Contains
--------
``preconditioned_gd.single_layer.torch_theorem3_full``
    One layer, every entry of P, Q trained: the effective preconditioner is n/(n+d+1) Sigma^{-1}
"""

from __future__ import annotations

import numpy as np

from verify import Control, Outcome, check
from verify.models.preconditioned_gd_runs import RUNS, over_problem_draws
from verify.models.preconditioned_gd_training import (
    DIM,
    N_CONTEXT,
    STOP_ABOVE,
    experiment_covariance,
    loss_trajectory,
    paired_loss,
    sqrt_psd,
    stopped_outcome,
    window_mean,
)
from verify.settings import Setting
from verify.stats import evaluate as _cf
from verify.stats import z_threshold

# =====================================================================================
# Theorem 3 / Theorem 1 setting, full P, Q, one layer
# =====================================================================================
#: Quick: 1500 steps of batch 350 in float32 (:data:`FULL_DTYPE`). Seeds 0-19: 20/20 pass, worst
#: part 0.424 (weighted preconditioner error 2.1 % against 5 %, seed 10), paired loss excess at
#: most 2.0 % of f* (against 5 %); controls' expected values at least 6.9 (Theorem 1's
#: preconditioner), 15.7 (plain GD) and 12.4 (n/2, |z|) times their thresholds (values at least
#: 6.6, 15.6, 12.3). The former quick run (batch 500, torch bmm; 1.4-1.6 times the CPU time) gave worst
#: 0.357 (the paired loss excess) and errors at most 1.6 %, and before it batch 1000 in float64
#: worst 0.350 and at most 1.2 %; batch 250 passed 20/20 but its worst part reached 0.759 (seed
#: 9, the paired loss excess): not taken.
FULL_QUICK = dict(steps=1500, batch=350, lr=0.05, halve_every=400, betas=(0.9, 0.999))


FULL_FULL = dict(steps=10000, batch=8000, lr=0.01, halve_every=2500, betas=(0.9, 0.999),
                 compile=True, threads=None)


#: Precision of the trained model and its prompts per profile (the held-out evaluation is always
#: float64, numpy).
FULL_DTYPE = {"quick": "float32", "full": "float64"}


#: Tolerances: (weighted relative error of the preconditioner, relative loss excess,
#: norm of the output-relevant blocks outside eq. 8 relative to ||Gamma*||).
FULL_TOL = {"quick": (0.05, 0.05, 0.05), "full": (0.02, 0.01, 0.02)}


def _weighted_err(G, G_ref, Sh) -> float:
    """``||Sigma^{1/2} (G - G_ref) Sigma^{1/2}||_F / ||Sigma^{1/2} G_ref Sigma^{1/2}||_F``."""
    return float(np.linalg.norm(Sh @ (G - G_ref) @ Sh) / np.linalg.norm(Sh @ G_ref @ Sh))


@check("preconditioned_gd.single_layer.torch_theorem3_full", aliases=["preconditioned_gd.torch.theorem3_full"],
       covers=["preconditioned_gd.single_layer.optimal_preconditioner_inverse_task",
               "preconditioned_gd.single_layer.optimal_loss_inverse_task"],
       method="torch", needs=("torch",),
       title="One layer, every entry of P, Q trained: the effective preconditioner is "
             "n/(n+d+1) Sigma^{-1}",
       settings=[Setting("steps", "int", quick=FULL_QUICK["steps"], full=FULL_FULL["steps"], low=1, high=10**6,
                         doc="optimiser steps"),
                 Setting("batch", "int", quick=FULL_QUICK["batch"], full=FULL_FULL["batch"], low=1, high=10**6,
                         doc="prompts per training batch"),
                 Setting("lr", "float", quick=FULL_QUICK["lr"], full=FULL_FULL["lr"], low=1e-6, high=10.0,
                         doc="initial learning rate (halved on the profile's schedule)"),
                 Setting("samples", "int", quick=50_000, full=1_000_000, low=1000, high=10**8,
                         doc="held-out prompts of the Monte Carlo evaluation"), RUNS])
def theorem3_full(ctx):
    """Train one layer with full ``(d+1) x (d+1)`` matrices ``P, Q``.

    Only the last row ``b^T`` of ``P`` and the first ``d`` columns of ``Q`` reach the output
    (eq. 14); at the optimum ``b = p e_{d+1}``, ``Q[:, 1:d] = -p^{-1} [Gamma*; 0]`` with
    ``Gamma* = n/(n+d+1) Sigma^{-1}`` (Theorem-3 data model, ``L = 1``). The learned effective
    preconditioner ``Gamma = -p Q[1:d, 1:d]`` is compared with ``Gamma*`` in the
    ``Sigma^{1/2} . Sigma^{1/2}`` metric; the relevant off-blocks ``P[d+1, 1:d]``,
    ``Q[d+1, 1:d]`` must vanish; the paired held-out loss excess and the MC loss of
    ``Gamma*`` vs ``optimal_loss_inverse_task``. Init: all entries ``N(0, 0.1^2)``.

    Full profile: the paper's 5 runs (setting ``runs``, :mod:`verify.models.preconditioned_gd_runs`),
    each with its own rotation of Sigma, initialisation and batches; the check passes only if all
    5 do. Not run to the end on the 2-core CPU; at 100 steps (``--set steps=100``) the 5-run path
    executes (500 s with ``torch.compile`` under load; 0 of 5 pass, as expected after 1 % of the
    steps, every control rejected).
    """
    return over_problem_draws(ctx, _theorem3_full_run)  # one run per draw of Sigma (setting runs)


def _theorem3_full_run(ctx):
    """One run of :func:`theorem3_full` (one draw of Sigma, init and batches)."""
    import torch

    from verify.models.linear_transformer import LinearTransformer, dist_to_identity, sparse_layers, train_adam

    n, d = N_CONTEXT, DIM
    settings = dict(ctx.pick(quick=FULL_QUICK, full=FULL_FULL), steps=ctx.setting("steps"),
                    batch=ctx.setting("batch"), lr=ctx.setting("lr"))
    tol_pre, tol_excess, tol_off = FULL_TOL[ctx.profile]
    total = ctx.setting("samples")
    Sigma = experiment_covariance(ctx)
    Sh = sqrt_psd(Sigma, 0.5)
    gen = ctx.torch_generator(ctx.device)
    model = LinearTransformer(d, 1, "full", device=ctx.device,
                              dtype=getattr(torch, FULL_DTYPE[ctx.profile])).init_(gen, 0.1)
    run = train_adam(model, Sigma, n, generator=gen, device=ctx.device, log_every=10,
                     stop_above=STOP_ABOVE, iterate=ctx.iterate, **settings)
    if run.stopped_at is not None:
        return stopped_outcome(run, "One layer, full P, Q.", {"settings": settings, "device": ctx.device})
    G = window_mean(run.A_log)[0]
    G_star = np.asarray(_cf("preconditioned_gd.single_layer.optimal_preconditioner_inverse_task",
                            Sigma=Sigma, n=n), dtype=float)
    G_wrong = np.asarray(_cf("preconditioned_gd.single_layer.optimal_preconditioner",
                             Sigma=Sigma, n=n), dtype=float)
    f_star = float(_cf("preconditioned_gd.single_layer.optimal_loss_inverse_task", d=d, n=n))
    f_wrong = float(_cf("preconditioned_gd.single_layer.optimal_loss_inverse_task", d=d, n=n // 2))
    err = _weighted_err(G, G_star, Sh)
    err_wrong = _weighted_err(G, G_wrong, Sh)
    off = model.off_block_norms()
    off_rel = max(off["P last row"], off["Q last row"]) / float(np.linalg.norm(G_star))
    P, Q = (t.detach().cpu().numpy().astype(np.float64) for t in model.matrices())
    est = paired_loss(ctx.rng, Sigma, n, total, (P, Q), sparse_layers(G_star[None]))
    f_tr, f_opt, delta = est.mean
    se_tr, se_opt, se_delta = est.se
    z_crit = z_threshold(2)
    z_opt = (f_opt - f_star) / se_opt
    parts = {"weighted preconditioner error / tol": err / tol_pre,
             "off-block norm / ||Gamma*|| / tol": off_rel / tol_off,
             "paired loss excess / f* / tol": (delta / f_star) / tol_excess,
             "|z| MC f(Gamma*) vs optimal_loss / z_crit": abs(z_opt) / z_crit,
             "-z(trained - optimum) / z_crit": -(delta / se_delta) / z_crit}
    M = Sh @ G @ Sh
    return Outcome(
        measured={"Gamma (weighted error)": err, "held-out loss": f_tr,
                  "step tr(Sigma^1/2 Gamma Sigma^1/2)/d": float(np.trace(M) / d)},
        predicted={"Gamma*": G_star, "optimal_loss": f_star, "step": n / (n + d + 1)},
        discrepancy=max(parts.values()), tolerance=1.0,
        criterion=(f"max of normalised discrepancies <= 1: ||Sigma^1/2 (Gamma - Gamma*) "
                   f"Sigma^1/2||_F / ||Sigma^1/2 Gamma* Sigma^1/2||_F <= {tol_pre}, output-"
                   f"relevant off-blocks <= {tol_off} ||Gamma*||, paired loss excess <= "
                   f"{tol_excess:.0%} of f*, MC f(Gamma*) within z_crit = {z_crit:.2f} s.e., not "
                   "significantly below the optimum. Quick tolerances: after 1500 steps the "
                   "runs of seeds 0-19 reached at most 2.1 % (window-averaged); 5 % is still far "
                   "below the wrong-task preconditioner's distance" if ctx.profile == "quick" else
                   f"max of normalised discrepancies <= 1 (full profile tolerances {FULL_TOL['full']})"),
        # expected: each statistic at the theory's point Gamma = Gamma* (closed forms), the
        # last over the measured s.e.
        controls=[
            Control("Theorem 1's preconditioner (task w ~ N(0, I), with the tr(Sigma) ridge): "
                    "weighted error", err_wrong, tol_pre,
                    expected=_weighted_err(G_star, G_wrong, Sh)),
            Control("plain GD (Gamma proportional to I): Dist(Gamma, I)",
                    float(dist_to_identity(G)), tol_pre, expected=float(dist_to_identity(G_star))),
            Control("MC f(Gamma*) vs optimal_loss_inverse_task at the wrong context length n/2: |z|",
                    abs((f_opt - f_wrong) / se_opt), z_crit,
                    expected=float(abs(f_star - f_wrong) / se_opt)),
        ],
        details={"settings": settings, "dtype": FULL_DTYPE[ctx.profile],
                 "Sigma eigenvalues": np.linalg.eigvalsh(Sigma), "parts": parts, "off-block norms": off,
                 "Dist(Sigma^1/2 Gamma Sigma^1/2, I)": float(dist_to_identity(M)),
                 "held-out": {"trained": [f_tr, se_tr],
                 "Gamma*": [f_opt, se_opt], "paired excess": [delta, se_delta]},
                 "batch loss": loss_trajectory(run), "seconds": run.seconds,
                 "device": ctx.device},
    )
