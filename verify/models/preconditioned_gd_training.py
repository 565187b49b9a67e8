"""Training runs of the linear transformer of Ahn, Cheng, Daneshmand, Sra 2023 (§4.3, §5.1),
shared by the torch checks of ``preconditioned_gd``: the experiment's covariance, held-out loss
of a trained model paired with a reference, the logged loss and weights of a run, and the
outcome of a run that ``train_adam`` stopped.
"""

from __future__ import annotations

import numpy as np

from verify.registry import Outcome
from verify.stats import batch_mean

__all__ = ["N_CONTEXT", "DIM", "STOP_ABOVE", "sqrt_psd", "paired_loss", "paired_losses", "experiment_covariance",
           "loss_trajectory", "stopped_outcome", "window_mean", "train_sparse", "sparse_run_statistics",
           "sparse_figures"]

#: The paper's sizes (§4.3): context length and dimension.
N_CONTEXT, DIM = 20, 5


def sqrt_psd(Sigma: np.ndarray, power: float) -> np.ndarray:
    """``Sigma^power`` of a symmetric positive semi-definite matrix (eigendecomposition)."""
    w, V = np.linalg.eigh(Sigma)
    return (V * w ** power) @ V.T


def paired_loss(rng, Sigma, n, total, layers, layers_ref, chunk=20000):
    """Per-prompt squared errors of two models on the same held-out prompts (numpy forward).

    Returns the :class:`verify.stats.MeanEstimate` of ``(e, e_ref, e - e_ref)``.
    """
    return paired_losses(rng, Sigma, n, total, layers, [layers_ref], chunk)[0]


def paired_losses(rng, Sigma, n, total, layers, refs, chunk=20000):
    """:func:`paired_loss` of one model against each of several references, all on the same
    held-out prompts (one draw, the model's forward pass once). The first estimate is the one
    :func:`paired_loss` returns for the same ``rng``.

    Returns a list of :class:`verify.stats.MeanEstimate` of ``(e, e_ref, e - e_ref)``, one per
    reference.

    The predictions are the linear transformer's (eqs. 2-4) by the Gram recursion
    (:func:`verify.models.linear_transformer_monte_carlo.predict_gram`, the same function as
    :func:`verify.models.linear_transformer.predict` to round-off), from one context Gram matrix
    per prompt shared by every model, formed from the covariates' Gram matrix and ``w*``
    (:meth:`verify.tasks.preconditioned_gd.Prompts.gram`) without the token matrices.
    """
    from verify.models.linear_transformer_monte_carlo import predict_gram
    from verify.tasks.preconditioned_gd import iter_prompts

    accs = [batch_mean() for _ in refs]
    for pr in iter_prompts(rng, Sigma, n, total, task="inverse", chunk=chunk):
        gram = pr.gram()
        e = (predict_gram(gram, *layers) - pr.target) ** 2
        for acc, layers_ref in zip(accs, refs):
            e_ref = (predict_gram(gram, *layers_ref) - pr.target) ** 2
            acc.add(np.stack([e, e_ref, e - e_ref], axis=1))
    return [acc.result() for acc in accs]


def experiment_covariance(ctx):
    """The covariance of the training experiments (§4.3): the distorted covariance with the
    experiment's eigenvalues, a fresh Haar ``U`` per seed (``ctx.rng``); the draw already taken
    for a run of :func:`verify.models.preconditioned_gd_runs.over_problem_draws` when ``ctx``
    carries one (``ctx.problem_covariance``)."""
    from verify.tasks.preconditioned_gd import EXPERIMENT_EIGENVALUES, distorted_covariance

    drawn = getattr(ctx, "problem_covariance", None)
    if drawn is not None:
        return drawn

    Sigma = distorted_covariance(ctx.rng, EXPERIMENT_EIGENVALUES)
    return Sigma


#: A batch loss above this stops a run (``train_adam(stop_above=...)``): 100 times
#: ``E y^2 = d`` of the task, where the zero network already scores ``d``.
STOP_ABOVE = 100.0 * DIM


def loss_trajectory(run, points: int = 40) -> list[list[float]]:
    """About ``points`` ``[step, batch loss]`` pairs of a run, evenly spread, the last included."""
    idx = np.unique(np.r_[np.linspace(1, len(run.step) - 1, points).round().astype(int),
                          len(run.step) - 1]) if len(run.step) > 1 else np.array([0])
    return [[int(run.step[i]), float(run.batch_loss[i])] for i in idx]


def stopped_outcome(run, criterion: str, details: dict) -> Outcome:
    """The failed outcome of a run that ``train_adam`` stopped (non-finite or exploding loss)."""
    return Outcome(
        measured={"stopped at step": run.stopped_at,
                  "batch loss there": float(run.batch_loss[-1])},
        predicted={"a run to the end": True}, discrepancy=float("inf"), tolerance=1.0,
        criterion=(f"the training stopped at step {run.stopped_at}: batch loss "
                   f"{run.batch_loss[-1]:.3g} (above {STOP_ABOVE:g} or non-finite). " + criterion),
        details={**details, "batch loss": loss_trajectory(run), "seconds": run.seconds})


def window_mean(log: np.ndarray, frac: float = 0.1) -> np.ndarray:
    """Average of the last ``frac`` of the logged weights (damps the last steps' SGD noise)."""
    k = max(1, int(round(len(log) * frac)))
    return log[-k:].mean(axis=0)


def train_sparse(ctx, d: int, L: int, n: int, Sigma, settings: dict, dtype: str = "float64"):
    """Adam on the sparse L-layer transformer (eq. 8) from ``A_l`` entries ``N(0, 1e-3^2)``, in
    precision ``dtype`` (the model and its prompts)."""
    import torch

    from verify.models.linear_transformer import LinearTransformer, train_adam

    gen = ctx.torch_generator(ctx.device)
    model = LinearTransformer(d, L, "sparse", device=ctx.device, dtype=getattr(torch, dtype)).init_(gen, 1e-3)
    return train_adam(model, Sigma, n, generator=gen, device=ctx.device, log_every=10,
                      stop_above=STOP_ABOVE, iterate=ctx.iterate, **settings)


def sparse_run_statistics(rng, Sigma, n: int, total: int, run, a_star):
    """A finished sparse run against Theorem 3's optimum ``A_l = a*_l Sigma^{-1}``: the learned
    ``A_l`` (last 10 % of the logged iterates), ``M_l = Sigma^{1/2} A_l Sigma^{1/2}``,
    ``Dist(M_l, I)``, ``Dist(A_l, I)``, the sorted steps ``tr M_l / d`` and the held-out loss
    paired with the optimum's on ``total`` prompts of ``rng``."""
    from verify.models.linear_transformer import dist_to_identity, sparse_layers

    d = Sigma.shape[0]
    Sh, Sinv = sqrt_psd(Sigma, 0.5), np.linalg.inv(Sigma)
    A = window_mean(run.A_log)
    M = np.einsum("ij,ljk,km->lim", Sh, A, Sh)
    steps = np.sort(np.trace(M, axis1=1, axis2=2) / d)
    est = paired_loss(rng, Sigma, n, total, sparse_layers(A), sparse_layers(a_star[:, None, None] * Sinv))
    return A, M, dist_to_identity(M), dist_to_identity(A), steps, est


def sparse_figures(run, Sigma, A, M, a_star, L: int) -> dict:
    """``Dist`` of each layer's preconditioner during training, and the learned
    ``Sigma^{1/2} A_l Sigma^{1/2}`` next to ``a*_l I`` (layers in ascending step order)."""
    from verify.models.linear_transformer import dist_to_identity

    d = Sigma.shape[0]
    Sh = sqrt_psd(Sigma, 0.5)
    dist = {
        "kind": "lines", "title": f"Sparse transformer, L={L}: Dist during training",
        "xlabel": "Adam step", "ylabel": "Dist(., I)",
        "series": [{"label": f"Dist(Sigma^1/2 A_{l} Sigma^1/2, I)", "x": run.step.tolist(),
                    "y": dist_to_identity(np.einsum("ij,tjk,km->tim", Sh, run.A_log[:, l],
                                                    Sh)).tolist()} for l in range(L)]
        + [{"label": f"Dist(A_{l}, I)", "style": "--", "x": run.step.tolist(),
            "y": dist_to_identity(run.A_log[:, l]).tolist()} for l in range(L)],
    }
    # learned Sigma^1/2 A_l Sigma^1/2 (layers in ascending step order) next to a*_l I
    order = np.argsort(np.trace(M, axis1=1, axis2=2))
    panels = []
    for rank, l in enumerate(order):
        panels += [{"label": f"learned Sigma^1/2 A_{l} Sigma^1/2", "matrix": M[l].tolist()},
                   {"label": f"predicted a*_{rank} I = {a_star[rank]:.3f} I",
                    "matrix": (a_star[rank] * np.eye(d)).tolist()}]
    panels.append({"label": "learned A (first layer): not a multiple of I", "matrix": A[order[0]].tolist()})
    matrices = {"kind": "heatmaps",
                "title": f"Sparse transformer, L={L}: learned vs predicted preconditioners",
                "panels": panels}
    return {f"dist_L{L}": dist, f"matrices_L{L}": matrices}
