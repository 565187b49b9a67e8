"""Weights at the fixed points of separate key/query attention ATTN_S and the exact flow's
gradient there (Zhang, Singh, Latham, Saxe 2025, eqs. 14, 20, 60-63, 84-87).

For a subset ``S`` of the eigen-directions the fixed point ``M_S`` (eq. 20) is realised by
rank-one heads (eq. 20a: the minimum-norm head ``v^3 = lambda_d / a_d``, ``k = q = v e_d``) or
by rank-two heads holding two directions each with a shared ``v_i = 1`` (eqs. 84-86); the
gradient of eq. 14 vanishes there exactly, so what is left is float64 rounding, bounded by
:meth:`FixedPointProbe.tol`.
"""

from __future__ import annotations

import itertools

import numpy as np

from verify.flows import separate as fs
from verify.stats import evaluate as _cf

__all__ = ["FixedPointProbe"]


class FixedPointProbe:
    """The fixed points of ATTN_S for one ``Lambda`` and ``N``, with ``mo``, ``lam``, ``E`` from
    :func:`verify.flows.separate.moments` and :func:`verify.flows.separate.eigenbasis`."""

    def __init__(self, Lam, N: int, mo, lam, E):
        self.Lam, self.N, self.mo, self.lam, self.E = Lam, N, mo, lam, E
        self.D = D = lam.size
        self.a = np.einsum("di,de,ei->i", E, mo.A, E)          # a_d = e_d^T E[Lhat^2] e_d (eq. 32)
        self.eps = np.finfo(float).eps
        M_D = np.asarray(_cf("linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=N,
                             S=list(range(1, D + 1))))
        #: size of the terms of the gradient matrix G at the fixed points
        self.scale_G = (np.linalg.norm(mo.L2) + np.linalg.norm(mo.A, 2) * np.linalg.norm(M_D)
                        * np.linalg.norm(Lam, 2))

    def grad(self, v, k, q) -> float:
        """Largest |entry| of the gradient of eq. 14 at ``(v, k, q)``."""
        dv, dk, dq = fs.gradients(self.mo, None, v, k, q)
        return float(max(np.max(np.abs(dv)), np.max(np.abs(dk)), np.max(np.abs(dq))))

    def tol(self, v, k, q) -> float:
        """Rounding of O(D^2)-term products: 100 D^2 eps x weight scale^2 x size of the terms of G."""
        w = max(1.0, np.max(np.abs(v)), np.max(np.abs(k)), np.max(np.abs(q)))
        return 100 * self.D * self.D * self.eps * w * w * self.scale_G

    def rank1_weights(self, S, H):
        """``H`` rank-one heads, the first ``|S|`` the minimum-norm heads of eq. 20a for ``S``."""
        v, k = np.zeros(H), np.zeros((H, 1, self.D))
        for i, d in enumerate(S):
            # eq. 20a: the minimum-norm head for direction d (v^3 = lambda_d / a_d)
            v[i] = _cf("linear_attention.separate.ansatz_value_weight", lam=self.lam[d - 1],
                       trLambda=float(np.trace(self.Lam)), N=self.N)
            k[i, 0] = v[i] * self.E[:, d - 1]
        return v, k, k.copy()

    def rank2_weights(self, S, H):
        """``H`` rank-two heads holding two directions of ``S`` each with a shared ``v_i = 1``
        (rank R = 2, eqs. 84-86)."""
        v, k = np.zeros(H), np.zeros((H, 2, self.D))
        for j, d in enumerate(S):
            v[j // 2] = 1.0
            k[j // 2, j % 2] = np.sqrt(self.lam[d - 1] / self.a[d - 1]) * self.E[:, d - 1]
        return v, k, k.copy()

    def grad_expected(self, S, dM, v, k, q) -> float:
        """Eq. 14's gradient with ``G`` = eq. 60 at ``M_S - E[Lhat^2] dM Lambda`` (``G`` is affine
        in ``M``): what a perturbation of the weights changing ``M`` by ``dM`` should show."""
        G = (np.asarray(_cf("linear_attention.separate.fixed_point_gradient", Lambda=self.Lam, N=self.N, S=S))
             - self.mo.A @ dM @ self.Lam)
        Gq = q @ G.T
        return float(max(np.max(np.abs(np.einsum("ird,ird->i", k, Gq))),
                         np.max(np.abs(v[:, None, None] * Gq)), np.max(np.abs(v[:, None, None] * (k @ G)))))

    def perturbed(self, S):
        """The gradient over its rounding bound at three perturbed fixed points, each with its
        expected value (:meth:`grad_expected`): one head of ``M_D`` with ``v`` scaled by 1.01, head
        2 of ``M_S`` rotated by 0.05 rad towards ``e_3``, and an inactive head ``v = 0``,
        ``k = q = e_3`` at ``S`` (condition (C3) and eq. 87 violated)."""
        D, E = self.D, self.E
        v, k, q = self.rank1_weights(list(range(1, D + 1)), D)
        v_s = v * np.r_[1.01, np.ones(D - 1)]
        c_scaled = self.grad(v_s, k, q) / self.tol(v, k, q)
        e_scaled = (self.grad_expected(list(range(1, D + 1)), 0.01 * v[0] * np.outer(k[0, 0], q[0, 0]), v_s, k, q)
                    / self.tol(v, k, q))
        v, k, q = self.rank1_weights(S, D)
        k_old = k[1, 0].copy()
        k[1, 0] = v[1] * (np.cos(0.05) * E[:, 1] + np.sin(0.05) * E[:, 2])
        q[1, 0] = k[1, 0]
        c_rot = self.grad(v, k, q) / self.tol(v, k, q)
        e_rot = (self.grad_expected(S, v[1] * (np.outer(k[1, 0], k[1, 0]) - np.outer(k_old, k_old)), v, k, q)
                 / self.tol(v, k, q))
        v, k, q = self.rank1_weights(S, D)
        k[3, 0], q[3, 0] = E[:, 2], E[:, 2]              # v = 0, k = q = e_3: Omega term nonzero
        c_inactive = self.grad(v, k, q) / self.tol(v, k, q)
        e_inactive = self.grad_expected(S, np.zeros((D, D)), v, k, q) / self.tol(v, k, q)
        return (c_scaled, e_scaled), (c_rot, e_rot), (c_inactive, e_inactive)

    def subset_sweep(self) -> tuple[dict, int]:
        """Over every subset ``S`` of ``1..D`` and both realisations: the largest gradient over
        its rounding bound, ``M`` of the weights against ``M_S`` (eq. 20), the flow's gradient
        matrix at ``M_S`` against eq. 60, and ``L(M_S)`` against eq. 63, each over its tolerance.
        Returns ``(worst by part, number of subsets)``."""
        mo, Lam, N, D, eps = self.mo, self.Lam, self.N, self.D, self.eps
        worst = {"gradient / tol": 0.0, "|M(weights) - M_S| / tol": 0.0, "|L(M_S) - eq63| / 1e-12": 0.0,
                 "|G(M_S) - eq60| / tol": 0.0}
        n_sub = 0
        for m in range(D + 1):
            for S in itertools.combinations(range(1, D + 1), m):
                S = list(S)
                n_sub += 1
                M_S = np.asarray(_cf("linear_attention.separate.fixed_point_matrix", Lambda=Lam, N=N, S=S))
                for build in (self.rank1_weights, self.rank2_weights):
                    v, k, q = build(S, D)
                    worst["gradient / tol"] = max(worst["gradient / tol"], self.grad(v, k, q) / self.tol(v, k, q))
                    M = fs.effective_matrix(v, k, q)
                    worst["|M(weights) - M_S| / tol"] = max(
                        worst["|M(weights) - M_S| / tol"],
                        float(np.max(np.abs(M - M_S))) / (100 * D * eps * max(1.0, np.max(np.abs(M_S)))))
                G_S = mo.L2 - mo.A @ M_S @ Lam                 # the flow's gradient matrix at M_S
                G60 = np.asarray(_cf("linear_attention.separate.fixed_point_gradient", Lambda=Lam, N=N, S=S))
                worst["|G(M_S) - eq60| / tol"] = max(worst["|G(M_S) - eq60| / tol"],
                                                     float(np.max(np.abs(G_S - G60))) / (100 * D * eps * self.scale_G))
                L_S = float(fs.loss(mo, None, M_S))
                L63 = float(_cf("linear_attention.separate.subset_loss", Lambda=Lam, N=N, S=S))
                worst["|L(M_S) - eq63| / 1e-12"] = max(worst["|L(M_S) - eq63| / 1e-12"],
                                                       abs(L_S - L63) / 1e-12)
        return worst, n_sub
