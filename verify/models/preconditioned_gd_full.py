"""The L-layer linear transformer of Ahn, Cheng, Daneshmand, Sra 2023 trained beyond the sparse
parametrisation: every entry of ``P_l, Q_l`` (Adam runs restarted off the dead-layer plateau)
or the GD++ parametrisation (eq. 11); and what a finished run is compared with, Theorem 4's
set ``A_l = a_l Sigma^{-1}``, ``B_l = b_l I`` (for full matrices read off per layer after the
rescaling ``[P_l]_{d+1,d+1} = 1``) and the global minimum of ``preconditioned_gd.gdpp.loss``.
"""

from __future__ import annotations

import numpy as np

from verify.models.preconditioned_gd_training import (
    STOP_ABOVE,
    loss_trajectory,
    paired_loss,
    paired_losses,
    sqrt_psd,
    window_mean,
)
from verify.registry import Outcome
from verify.stats import evaluate as _cf

__all__ = ["train_restarting", "stalled_outcome", "full_run_statistics", "gdpp_errors", "train_gdpp",
           "gdpp_run_statistics"]


def train_restarting(ctx, d: int, L: int, n: int, Sigma, settings: dict, attempts: int):
    """Adam on full ``(d+1) x (d+1)`` ``P_l, Q_l`` (float32) from ``N(0, 0.01^2)`` on every
    entry; a run the guard stops or still on the plateau at the stall check is restarted from a
    fresh draw of the same generator, at most ``attempts`` runs in all.

    Returns ``(model, run, attempts, start Dist(B_0, I))`` of the last run."""
    import torch

    from verify.models.linear_transformer import LinearTransformer, dist_to_identity, train_adam

    gen = ctx.torch_generator(ctx.device)
    record = []
    for _ in range(attempts):
        model = LinearTransformer(d, L, "full", device=ctx.device, dtype=torch.float32)
        model.init_(gen, 0.01)
        start_dist_B0 = float(dist_to_identity(model.B_matrices())[0])
        run = train_adam(model, Sigma, n, generator=gen, device=ctx.device, log_every=10,
                         stop_above=STOP_ABOVE, iterate=ctx.iterate, **settings)
        record.append({"stopped at": run.stopped_at, "stalled at": run.stalled_at,
                       "last batch loss": float(run.batch_loss[-1]),
                       "seconds": run.seconds})
        if run.stopped_at is None and run.stalled_at is None:
            break
    return model, run, record, start_dist_B0


def stalled_outcome(run, L: int, settings: dict, attempts: list) -> Outcome:
    """The failed outcome when every run was still on the plateau at the stall check."""
    return Outcome(
        measured={"stalled at": run.stalled_at, "attempts": attempts},
        predicted={"a run past the plateau": True}, discrepancy=float("inf"),
        tolerance=1.0,
        criterion=f"Full P_l, Q_l, L = {L}: every one of {len(attempts)} runs was still on "
                  "the plateau at the stall check",
        details={"settings": settings, "L": L, "attempts": attempts,
                 "batch loss": loss_trajectory(run)})


def full_run_statistics(rng, Sigma, n: int, total: int, model, run, L: int, start_dist_B0: float,
                        attempts: list, extra_refs=()) -> dict:
    """What a finished run of full ``P_l, Q_l`` is compared with Theorem 4's set by: the
    learned ``A_l`` (eq.-8 sign) and ``B_l`` (averaged over the last 10 % of the logged
    iterates), ``Dist(Sigma^{1/2} A_l Sigma^{1/2}, I)``, ``Dist(A_l, I)``, ``Dist(B_l, I)``,
    ``a_l = tr(Sigma^{1/2} A_l Sigma^{1/2}) / d``, ``b_l = tr B_l / d``, and the held-out loss
    paired with the sparse optimum's (Theorem 3's ``optimal_steps``) on ``total`` prompts of
    ``rng``. ``"_P", "_Q", "_Sinv", "_a_sparse"``: the learned matrices, ``Sigma^{-1}`` and the
    sparse optimum's steps, for the caller (not for the report); ``"_extra"``: the held-out loss
    paired with each layer pair ``(P, Q)`` of ``extra_refs``, on the same prompts."""
    from verify.models.linear_transformer import dist_to_identity, sparse_layers

    d = Sigma.shape[0]
    Sh, Sinv = sqrt_psd(Sigma, 0.5), np.linalg.inv(Sigma)
    A, B = window_mean(run.A_log), window_mean(run.B_log)     # eq.-8 sign, P_dd = 1
    M = np.einsum("ij,ljk,km->lim", Sh, A, Sh)
    dist_M, dist_A, dist_B = dist_to_identity(M), dist_to_identity(A), dist_to_identity(B)
    a = np.trace(M, axis1=1, axis2=2) / d
    b = np.trace(B, axis1=1, axis2=2) / d
    P, Q = (t.detach().cpu().numpy().astype(np.float64) for t in model.matrices())
    a_sparse = np.asarray(_cf("preconditioned_gd.multi_layer.optimal_steps", n=n, d=d, L=L),
                          dtype=float)
    est, *extra = paired_losses(rng, Sigma, n, total, (P, Q),
                                [sparse_layers(a_sparse[:, None, None] * Sinv), *extra_refs])
    f_tr, f_sp, delta = est.mean
    se_delta = est.se[2]
    f_sparse = float(_cf("preconditioned_gd.multi_layer.optimal_loss", n=n, d=d, L=L))
    return {"Dist(Sigma^1/2 A_l Sigma^1/2, I)": dist_M, "Dist(A_l, I)": dist_A,
            "Dist(B_l, I)": dist_B, "a_l (eq. 8 sign)": a, "b_l": b,
            "label-label entries p_l [Q_l]_{d+1,d+1}": P[:, d, d] * Q[:, d, d],
            "x-y block norms": model.off_block_norms(),
            "held-out loss": [f_tr, est.se[0]], "sparse optimum (same prompts)": [f_sp, est.se[1]],
            "paired (trained - sparse optimum)": [delta, se_delta],
            "optimal_loss (sparse)": f_sparse, "final batch loss": float(run.batch_loss[-1]),
            "start Dist(B_0, I)": start_dist_B0, "attempts": attempts,
            "batch loss": loss_trajectory(run), "seconds": run.seconds,
            "_P": P, "_Q": Q, "_Sinv": Sinv, "_a_sparse": a_sparse, "_extra": extra}


def gdpp_errors(info: dict, a_sparse, minima) -> dict:
    """``L = 2``: the largest relative error of the learned ``(a_0, a_1, b_0)`` (eq.-8 sign)
    against the GD++ optimum, the second GD++ minimum and the sparse optimum (``b_0 = 0``),
    each relative to the GD++ optimum's magnitudes; ``expected``: the sparse optimum's own
    error (its value at the theory's point)."""
    (a_gd, b_gd, _), (a_2nd, b_2nd, _) = minima[0], minima[1]
    ab, ab_gd = np.r_[info["a_l (eq. 8 sign)"], info["b_l"][0]], np.r_[-a_gd, b_gd[0]]  # eq.-8 sign

    def rel_err(ref):
        return float(np.max(np.abs(ab - ref) / np.abs(ab_gd)))

    sparse = np.r_[a_sparse, 0.0]
    return {"GD++ optimum": rel_err(ab_gd), "second minimum": rel_err(np.r_[-a_2nd, b_2nd[0]]),
            "sparse optimum": rel_err(sparse),
            "expected sparse": float(np.max(np.abs(sparse - ab_gd) / np.abs(ab_gd)))}


def train_gdpp(ctx, d: int, L: int, n: int, Sigma, settings: dict, dtype: str, start_on=None):
    """Adam on the general parametrisation (eq. 11, GD++): from ``N(0, 0.05^2)`` on every
    entry with ``A_l = -start_on[l] Sigma^{-1}`` (the sparse optimum, eq.-11 sign) when
    ``start_on`` is given (the entries drawn in float64 whatever ``dtype``, so a float32 run
    starts from the float64 run's draws), else from ``N(0, 1e-3^2)`` on every entry. Returns
    ``(run, B_l at the start)``."""
    import torch

    from verify.models.linear_transformer import LinearTransformer, train_adam

    Sinv = np.linalg.inv(Sigma)
    gen = ctx.torch_generator(ctx.device)
    model = LinearTransformer(d, L, "gdpp", device=ctx.device, dtype=getattr(torch, dtype))
    if start_on is not None:
        B0 = LinearTransformer(d, L, "gdpp", device=ctx.device).init_(gen, 0.05).B.detach().cpu().numpy()
        model.load_(A=-start_on[:, None, None] * Sinv, B=B0)
    else:
        model.init_(gen, 1e-3)
    B_init = model.B.detach().cpu().numpy().copy()
    run = train_adam(model, Sigma, n, generator=gen, device=ctx.device, log_every=10,
                     stop_above=STOP_ABOVE, iterate=ctx.iterate, **settings)
    return run, B_init


def gdpp_run_statistics(rng, Sigma, n: int, total: int, run, a_sparse) -> dict:
    """A finished GD++ run against Theorem 4's set: the learned ``A_l`` (eq.-11 sign) and
    ``B_l`` (last 10 % of the logged iterates), ``Dist(B_l, I)``, ``Dist(Sigma^{1/2} A_l
    Sigma^{1/2}, I)``, the projections ``a_l``, ``b_l`` on the set, and the held-out losses of
    the trained model and of its projection, each paired with the sparse optimum's on
    ``total`` prompts of ``rng``."""
    from verify.models.linear_transformer import dist_to_identity, general_layers, sparse_layers

    d = Sigma.shape[0]
    Sh, Sinv = sqrt_psd(Sigma, 0.5), np.linalg.inv(Sigma)
    A = -window_mean(run.A_log)           # back to the eq.-11 sign
    B = window_mean(run.B_log)
    M = np.einsum("ij,ljk,km->lim", Sh, A, Sh)
    a = np.trace(M, axis1=1, axis2=2) / d
    b = np.trace(B, axis1=1, axis2=2) / d
    # held-out: the trained model vs the sparse optimum (paired), and its projection on the set
    A_proj, B_proj = a[:, None, None] * Sinv, b[:, None, None] * np.eye(d)
    est = paired_loss(rng, Sigma, n, total, general_layers(A, B),
                      sparse_layers(a_sparse[:, None, None] * Sinv))
    est_proj = paired_loss(rng, Sigma, n, total, general_layers(A_proj, B_proj),
                           sparse_layers(a_sparse[:, None, None] * Sinv))
    return {"A": A, "B": B, "dist_B": dist_to_identity(B), "dist_M": dist_to_identity(M), "a": a, "b": b,
            "est": est, "est_proj": est_proj}
