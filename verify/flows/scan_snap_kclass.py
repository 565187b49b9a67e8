"""The K-class decoder of Tian, Wang, Chen, Du 2023 ("Scan and Snap") iterated step by step.

With the attention frozen (Assumption 1(c)) and the long-sequence limit (Lemma 2), class ``n`` feeds
the decoder the unit vector ``f_n`` (the columns of ``F``) and the label ``e_n``. One batch-1 step of
class ``n`` is ``Y += eta_Y d_n (e_n - alpha_n)^T`` with ``alpha_n = softmax(Y^T f_n)`` and

* ``d_n = f_n - F E' e_n`` (the modified gradient of eq. 26, ``E' = I - (I + E)^{-1}``, ``F^T F = I + E``;
  Lemma 3, Theorem 5),
* ``d_n = f_n`` (the gradient of eq. 7; Remark 1),
* ``d_n = f_n - F E'_printed e_n`` with App. D.1's printed ``E'_printed = (I + E)^{-1} - I``.

``F`` lives on ``L`` contextual tokens and the softmax on ``M`` output tokens (the next tokens are the
outputs ``0..K-1``): only the ``L`` rows of ``Y`` that ``F`` touches ever move, so ``Y`` is stored as an
``L x M`` block. Also: a sampler of attention vectors that satisfy Assumption 2 on a vocabulary of
size ``M``, and the coefficients of Theorem 1's decomposition of ``g = Y (e_n - alpha_n)`` in ``F``.
"""

from __future__ import annotations

import math

import numpy as np

from theory.scan_snap.h import trajectory

__all__ = ["GRADIENTS", "eprime", "assumption2_attention", "spectrum", "kclass_decoder", "theorem5_Y",
           "decomposition"]

#: The decoder updates :func:`kclass_decoder` iterates.
GRADIENTS = ("modified", "original", "printed_sign")


def eprime(F: np.ndarray, printed: bool = False) -> np.ndarray:
    """E' = I - (F^T F)^{-1} (Lemma 14); ``printed``: App. D.1's (I + E)^{-1} - I."""
    K = F.shape[1]
    Ep = np.eye(K) - np.linalg.inv(F.T @ F)
    return -Ep if printed else Ep


def spectrum(F: np.ndarray) -> np.ndarray:
    """Eigenvalues of E = F^T F - I ordered by decreasing magnitude."""
    lam = np.linalg.eigvalsh(F.T @ F - np.eye(F.shape[1]))
    return lam[np.argsort(-np.abs(lam))]


def assumption2_attention(rng, M: int, K: int, distinct: int = 6, common: int = 3, tries: int = 100_000,
                          floor: float | None = None) -> np.ndarray:
    """Nonnegative unit columns f_n (L = common + K distinct tokens, L x K) with F^T F = I + E satisfying
    Assumption 2 on a vocabulary of size M: |lambda_1| < 1/K and every |lambda_i| >= ``floor`` (default
    6/sqrt(M)). Class n has its own block of ``distinct`` tokens (weights U(0.5, 1)) and all classes share
    ``common`` tokens with weights s U(0, 1), s ~ U(0.1, 1.5) per draw; rejection sampling.

    ``floor=0`` with a tiny s is how a control builds weakly overlapping F that break the eigenvalue floor."""
    lo = 6.0 / math.sqrt(M) if floor is None else floor
    L = common + K * distinct
    for _ in range(tries):
        F = np.zeros((L, K))
        s = rng.uniform(0.1, 1.5)
        for n in range(K):
            F[common + n * distinct:common + (n + 1) * distinct, n] = rng.uniform(0.5, 1.0, distinct)
            F[:common, n] = s * rng.uniform(0.0, 1.0, common)
        F /= np.linalg.norm(F, axis=0)
        a = np.abs(spectrum(F))
        if a[0] < 1.0 / K and a[-1] >= lo:
            return F
    raise RuntimeError(f"no F satisfying Assumption 2 found for M = {M}, K = {K} (M > 36 K^2 (K-1)^2 is needed "
                       "for equal overlaps)")


def _softmax(x):
    x = x - x.max()
    e = np.exp(x)
    return e / e.sum()


def kclass_decoder(F: np.ndarray, M: int, eta_Y: float, order, gradient: str = "modified", watch: bool = True):
    """Iterate the K-class decoder from Y = 0 over the classes ``order`` (labels 0..K-1).

    Returns a dict: ``Y`` (L x M block: the rows of the contextual tokens), ``counts`` (N_n), ``W`` (F^T Y, K x M),
    and with ``watch`` ``off_rows``: the largest move of a row j != n of W = F^T Y in one step of class n (W formed
    before and after the step), in units of the round-off of forming W, eps (L + 1) max|W| (Lemma 3: of order 1
    for the modified gradient), and ``move``: the smallest move of row n in those units.
    """
    if gradient not in GRADIENTS:
        raise ValueError(f"gradient: expected one of {GRADIENTS}, got {gradient!r}")
    L, K = F.shape
    if M < L or M < K:
        raise ValueError(f"M: the vocabulary must hold the L = {L} contextual tokens and K = {K} labels, got {M}")
    order = np.asarray(order, dtype=int)
    if gradient == "original":
        D = F
    else:
        D = F - F @ eprime(F, printed=gradient == "printed_sign")
    Y = np.zeros((L, M))
    eps = np.finfo(float).eps
    off, least = 0.0, np.inf
    W = F.T @ Y
    for n in order:
        a = _softmax(Y.T @ F[:, n])
        err = -a
        err[n] += 1.0
        Y += eta_Y * np.outer(D[:, n], err)
        if watch:
            after = F.T @ Y
            unit = eps * (L + 1) * max(float(np.abs(W).max()), float(np.abs(after).max()))
            move = np.abs(after - W).max(axis=1) / unit
            W = after
            if K > 1:
                off = max(off, float(np.delete(move, n).max()))
            least = min(least, float(move[n]))
    out = {"Y": Y, "counts": np.bincount(order, minlength=K), "W": F.T @ Y}
    if watch:
        out["off_rows"], out["move"] = off, least
    return out


def zeta_rows(M: int, K: int) -> np.ndarray:
    """zeta_n = M/(M-1) (e_n - 1/M) for n < K (App. D.1), K x M."""
    E = np.zeros((K, M))
    E[np.arange(K), np.arange(K)] = 1.0                 # np.eye(M)[:K] without the M x M identity
    return M / (M - 1) * (E - 1.0 / M)


def theorem5_Y(F: np.ndarray, M: int, eta_Y: float, counts, without_eprime: bool = False):
    """Eq. 70 with the discrete h* of eq. 33: Y = F (I - E')(I + Theta) W-bar(N), W-bar rows (M-1) h*(N-bar) zeta_n,
    N-bar = ceil(N/K), theta_n = h*(N_n)/h*(N-bar) - 1 (eqs. 66-69). Returns (Y (L x M), theta, h*(N-bar)).
    ``without_eprime``: F (I + Theta) W-bar (the form for orthonormal F, a control)."""
    counts = np.asarray(counts)
    K = F.shape[1]
    Nbar = math.ceil(counts.sum() / K)
    hs = trajectory(int(max(counts.max(), Nbar)), M, eta_Y)
    theta = hs[counts] / hs[Nbar] - 1.0
    Wbar = (M - 1) * hs[Nbar] * zeta_rows(M, K)
    core = np.eye(K) if without_eprime else np.eye(K) - eprime(F)
    return F @ core @ np.diag(1 + theta) @ Wbar, theta, hs[Nbar]


def decomposition(F: np.ndarray, Y: np.ndarray, M: int, eta_Y: float, counts, n: int):
    """Theorem 1's decomposition of g = Y (e_n - alpha_n) (alpha_n = softmax(Y^T f_n), the real softmax of the
    iterated decoder) in the basis F, divided by gamma (1 + sigma) = (M-1)^2 h*(N-bar)/((M-1) + e^{M h*(N_n)})
    (eqs. 71, 85 with h*). Returns (a (K,): g = gamma (1 + sigma) F a, so iota_n = a_n and beta_nn' = -a_n'; the
    relative residual of g outside span F)."""
    counts = np.asarray(counts)
    K = F.shape[1]
    Nbar = math.ceil(counts.sum() / K)
    hs = trajectory(int(max(counts.max(), Nbar)), M, eta_Y)
    alpha = _softmax(Y.T @ F[:, n])
    err = -alpha
    err[n] = np.sum(np.delete(alpha, n))          # 1 - alpha_n without cancellation
    g = Y @ err
    a, *_ = np.linalg.lstsq(F, g, rcond=None)
    resid = float(np.linalg.norm(F @ a - g) / np.linalg.norm(g))
    u = M * hs[counts[n]]
    scale = (M - 1) ** 2 * hs[Nbar] * math.exp(-u) / ((M - 1) * math.exp(-u) + 1.0)
    return a / scale, resid
