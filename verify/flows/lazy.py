"""The lazy (frozen-kernel) limit of the linear-attention flows (Zhang, Singh, Latham, Saxe 2025, §5,
"Effect of initialization", Fig. 6).

Both models learn through their effective matrix ``M`` (``sum_i v_i U_i`` for ATTN_M, eq. 8;
``sum_{i,r} v_i k_ir q_ir^T`` for ATTN_S, eq. 14). Under the exact flow ``dtheta/dt = J^T
vec(G(M))`` with ``G(M) = Lambda^2 - A M Lambda`` (``-1/2 dL/dM``, ``tau = 1``) and ``J = dvec(M) /
dtheta``, so ``dvec(M)/dt = K vec(G(M))`` with the tangent kernel ``K = J J^T``. Freezing ``K`` at
the start makes the flow linear in ``M``::

    dvec(M)/dt = K (vec(Lambda^2) - S vec(M)),   S = A (x) Lambda   (row-major vec)

whose solution ``M(t) = M* + exp(-K S t) (M_0 - M*)``, ``M* = A^{-1} Lambda`` (eq. 11), is a sum of
exponentials: the loss decays without plateaus. A large initialisation makes the weights move little
relative to their size, and the exact flow follows this solution (lazy training, Chizat et al.
2019); a small one does not (the rich regime of the paper's analysis).

Contents
--------
kernel_merged      ``K`` for ATTN_M at ``(v, U)``
kernel_separate    ``K`` for ATTN_S at ``(v, k, q)``
lazy_matrices      ``M(t)`` of the frozen-kernel flow
"""

from __future__ import annotations

import numpy as np

from .merged import _as_moments

__all__ = ["kernel_merged", "kernel_separate", "lazy_matrices"]


def _basis(D: int) -> np.ndarray:
    """The D^2 unit matrices ``E_ab`` (row-major order), shape (D^2, D, D)."""
    return np.eye(D * D).reshape(D * D, D, D)


def kernel_merged(v, U) -> np.ndarray:
    """Tangent kernel of ATTN_M: ``K vec(G) = vec(sum_i <U_i, G> U_i + (sum_i v_i^2) G)``
    (``dv_i = <U_i, G>``, ``dU_i = v_i G``), a (D^2, D^2) symmetric PSD matrix (row-major vec)."""
    v = np.asarray(v, dtype=np.float64)
    U = np.asarray(U, dtype=np.float64)
    u = U.reshape(U.shape[0], -1)
    return u.T @ u + float(np.sum(v**2)) * np.eye(u.shape[1])


def kernel_separate(v, k, q) -> np.ndarray:
    """Tangent kernel of ATTN_S: ``K vec(G) = vec(sum_{i,r} (k_ir^T G q_ir) k_ir q_ir^T
    + v_i^2 (G q_ir q_ir^T + k_ir k_ir^T G))`` (``dv_i = sum_r k_ir^T G q_ir``, ``dk_ir = v_i G
    q_ir``, ``dq_ir = v_i G^T k_ir``), (D^2, D^2), row-major vec."""
    v = np.asarray(v, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    H, R, D = k.shape
    E = _basis(D)
    # each head's value direction: sum_r k_ir q_ir^T
    P = np.einsum("ird,ire->ide", k, q).reshape(H, D * D)
    Qq = np.einsum("ird,ire->ide", q, q)                   # sum_r q q^T per head
    Kk = np.einsum("ird,ire->ide", k, k)                   # sum_r k k^T per head
    w = v**2
    right = np.einsum("i,xab,ibc->xac", w, E, Qq).reshape(D * D, D * D)   # G -> sum v^2 G q q^T
    left = np.einsum("i,iab,xbc->xac", w, Kk, E).reshape(D * D, D * D)    # G -> sum v^2 k k^T G
    return P.T @ P + (right + left).T


def lazy_matrices(Lambda, N, K, M0, t) -> np.ndarray:
    """``M(t) = M* + exp(-K S t)(M_0 - M*)`` along the frozen-kernel flow, shape (T, D, D).

    ``K`` is symmetric PSD and ``S = A (x) Lambda`` symmetric PD, so ``K S`` is diagonalised through
    the symmetric ``S^{1/2} K S^{1/2}``: real, non-negative rates, no matrix exponential per time.
    """
    mo = _as_moments(Lambda, N)
    D = mo.D
    K = np.asarray(K, dtype=np.float64)
    if K.shape != (D * D, D * D):
        raise ValueError(f"K: expected shape ({D * D}, {D * D}), got {K.shape}")
    M0 = np.asarray(M0, dtype=np.float64)
    if M0.shape != (D, D):
        raise ValueError(f"M0: expected shape ({D}, {D}), got {M0.shape}")
    t = np.asarray(t, dtype=np.float64)
    S = np.kron(mo.A, mo.Lambda)                           # vec(A M Lambda) = (A (x) Lambda) vec(M)
    s, V = np.linalg.eigh(S)
    S_half, S_mhalf = (V * np.sqrt(s)) @ V.T, (V / np.sqrt(s)) @ V.T
    rates, W = np.linalg.eigh(S_half @ K @ S_half)          # K S = S^-1/2 (S^1/2 K S^1/2) S^1/2
    m_star = np.linalg.solve(S, mo.L2.ravel())
    c = W.T @ (S_half @ (M0.ravel() - m_star))
    decay = np.exp(-np.outer(t, np.clip(rates, 0.0, None)))   # (T, D^2)
    m = m_star + (decay * c) @ (S_mhalf @ W).T
    return m.reshape(t.size, D, D)
