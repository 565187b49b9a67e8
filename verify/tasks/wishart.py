"""In-context statistics of the regression task without the context tokens (Zhang, Singh,
Latham, Saxe 2025, App. C.1): ``N Lambda_hat`` is Wishart with ``N`` degrees of freedom and
scale ``Lambda`` (eq. 27), and ``beta = Lambda_hat w`` (eq. 29).
"""

from __future__ import annotations

import numpy as np

from verify.tasks.in_context_regression import covariance_factor

__all__ = ["sample_wishart_betas"]


def sample_wishart_betas(rng: np.random.Generator, Lambda, N: int, batch: int):
    """``(beta, x_q, y_q, w)`` for ``batch`` sequences of context length ``N`` without drawing
    the ``N`` context tokens.

    ``N Lambda_hat`` is Wishart with ``N`` degrees of freedom and scale ``Lambda``, drawn by
    the Bartlett decomposition ``C A A^T C^T`` (``C`` the Cholesky factor of ``Lambda``;
    ``A`` lower triangular, ``A_ii^2 ~ chi^2(N - i)`` for ``i = 0..D-1``, ``A_ij ~ N(0, 1)``
    below the diagonal), independent of ``w ~ N(0, I)`` and ``x_q ~ N(0, Lambda)``; then
    ``beta = Lambda_hat w`` (eq. 29). Cost ``O(batch D^2)`` for any ``N`` (``N >= D``).
    """
    C = covariance_factor(Lambda)
    D = C.shape[0]
    N, batch = int(N), int(batch)
    if N < D:
        raise ValueError(f"N: the Bartlett draw needs N >= D = {D}, got {N}")
    if batch < 1:
        raise ValueError(f"batch: expected >= 1, got {batch}")
    A = np.tril(rng.standard_normal((batch, D, D)), -1)
    idx = np.arange(D)
    A[:, idx, idx] = np.sqrt(rng.chisquare(N - idx, size=(batch, D)))
    w = rng.standard_normal((batch, D))
    x_q = rng.standard_normal((batch, D)) @ C.T
    u = np.einsum("bji,bj->bi", A, w @ C)              # A^T C^T w
    beta = np.einsum("bij,bj->bi", A, u) @ C.T / N     # C A A^T C^T w / N
    return beta, x_q, np.einsum("bd,bd->b", x_q, w), w
