"""Training runs of the linear transformer of Ahn, Cheng, Daneshmand, Sra 2023 (§4.3, §5.1),
shared by the torch checks of ``preconditioned_gd``: the experiment's covariance, held-out loss
of a trained model paired with a reference, the logged loss and weights of a run, and the
outcome of a run that ``train_adam`` stopped.
"""

from __future__ import annotations

import numpy as np

from verify.registry import Outcome
from verify.stats import batch_mean

__all__ = ["N_CONTEXT", "DIM", "STOP_ABOVE", "sqrt_psd", "paired_loss", "experiment_covariance",
           "loss_trajectory", "stopped_outcome", "window_mean"]

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
    from verify.models.linear_transformer import predict
    from verify.tasks.preconditioned_gd import iter_prompts

    acc = batch_mean()
    for pr in iter_prompts(rng, Sigma, n, total, task="inverse", chunk=chunk):
        Z0 = pr.tokens()
        e = (predict(Z0, *layers) - pr.target) ** 2
        e_ref = (predict(Z0, *layers_ref) - pr.target) ** 2
        acc.add(np.stack([e, e_ref, e - e_ref], axis=1))
    return acc.result()


def experiment_covariance(ctx):
    """The covariance of the training experiments (§4.3): the distorted covariance with the
    experiment's eigenvalues, a fresh Haar ``U`` per seed (``ctx.rng``)."""
    from verify.tasks.preconditioned_gd import EXPERIMENT_EIGENVALUES, distorted_covariance

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
