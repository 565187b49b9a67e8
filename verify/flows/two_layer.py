"""The exact in-context loss of two sparse layers at ``Sigma = I`` for any ``A_0, A_1`` (Ahn,
Cheng, Daneshmand, Sra 2023, Theorem 2).

Setting of Theorem 2: ``x^(1..n+1), w* ~ N(0, I_d)``, noiseless labels, two layers of eq. 8
(``P_l = E_{d+1,d+1}``, ``Q_l = -[[A_l, 0], [0, 0]]``, the ``1/n`` of eq. 4 included). By Lemma 1
(with the transpose the forward pass really has, ``A_l^T``) the prediction is ``<x_q, w_2>`` with
``w_{l+1} = w_l - A_l^T (S w_l - S w*)`` from ``w_0 = 0``, ``S = (1/n) sum_i x^(i) x^(i)T``, so

    TF_2 - y_q = -x_q^T K w*,      K = (I - A_1^T S)(I - A_0^T S),

and with ``E[x_q x_q^T] = E[w* w*^T] = I`` the loss is ``f(A_0, A_1) = E tr(K K^T)``, a polynomial
of degree 4 in ``S``. Writing ``B_l = A_l^T`` and ``C = B_0 + B_1``::

    tr(K K^T) = d - 2 tr(C S) + 2 tr(B_1 S B_0 S) + tr(C S S C^T)
                - 2 tr(B_1 S B_0 S S C^T) + tr(B_1 S B_0 S S B_0^T S B_1^T).

Its expectation needs the moment tensors ``T_k = E[S^{(x) k}]`` (``k <= 4``), computed here
exactly by Isserlis' theorem: ``S_{ij} = (1/n) sum_t x_{ti} x_{tj}``, so
``E[S_{i_1 j_1} ... S_{i_k j_k}] = n^{-k} sum_p n^{c(p)} prod_{(s, s') in p} delta``, the sum over
the ``(2k - 1)!!`` pairings ``p`` of the ``2k`` index slots and ``c(p)`` the number of connected
components of the ``k`` factors glued by ``p`` (each component shares one sample index ``t``).
This is the genus expansion of :mod:`theory.preconditioned_gd.wishart` in tensor form,
implemented independently; the checks compare it with Monte Carlo of the real forward pass.

The loss is exact (no sampling noise), so an optimiser over ``A_0, A_1`` finds the minimiser
itself, not that of a sample average (which overfits the heavy tails of a degree-4 polynomial
of a Wishart matrix). It is written in torch (float64) for exact gradients.

Contains
--------
:func:`moment_tensor`      ``E[S^{(x) k}]`` as an array of ``2k`` axes of length ``d``
:class:`TwoLayerLoss`      ``f(A_0, A_1)`` and its gradient, exact
:func:`minimise`           L-BFGS over symmetric (or unconstrained) ``A_0, A_1`` on the exact loss
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

__all__ = ["moment_tensor", "TwoLayerLoss", "minimise", "MinimiserResult"]


def _components(k: int, pairing) -> int:
    """Connected components of the ``k`` factors (slot ``s`` belongs to factor ``s // 2``)."""
    parent = list(range(k))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for s, t in pairing:
        parent[find(s // 2)] = find(t // 2)
    return len({find(a) for a in range(k)})


@cache
def moment_tensor(d: int, n: int, k: int, traced: tuple = ()) -> np.ndarray:
    """``E[S_{i_1 j_1} ... S_{i_k j_k}]`` for ``S`` the covariance of ``n`` white samples in ``R^d``,
    axes in the order ``i_1, j_1, ..., i_k, j_k``; exact (Isserlis pairings, genus weights).

    ``traced``: pairs of slots (0-based, slot ``2m`` is ``i_{m+1}``, ``2m + 1`` is ``j_{m+1}``) set
    equal and summed, e.g. ``((3, 4),)`` gives ``E[S_{i_1 j_1} (S^2)_{i_2 j_3}]`` for ``k = 3``;
    their axes are left out."""
    from theory.gaussian import perfect_matchings  # sympy is imported on first use, not with the check modules

    if d < 1 or n < 1 or k < 1:
        raise ValueError(f"d, n, k: expected positive integers, got {d}, {n}, {k}")
    letters = list("abcdefghijklmnop"[: 2 * k])
    for s, t in traced:
        letters[t] = letters[s]
    out = "".join(letters[s] for s in range(2 * k) if all(s not in pair for pair in traced))
    I = np.eye(d)
    T = 0.0
    for p in perfect_matchings(range(2 * k)):
        spec = ",".join(letters[s] + letters[t] for s, t in p) + "->" + out
        T = T + float(n) ** (_components(k, p) - k) * np.einsum(spec, *([I] * k))
    return np.asarray(T)


@cache
def _contracted(d: int, n: int):
    """The moments the loss needs, with the ``S S`` pairs already contracted (torch, float64):
    ``E S``, ``E[S (x) S]``, ``E[S^2]``, ``E[S_bc (S^2)_df]``, ``E[S_bc (S^2)_df S_gh]``."""
    import torch

    t = {"S": moment_tensor(d, n, 1), "SS": moment_tensor(d, n, 2),
         "S2": moment_tensor(d, n, 2, ((1, 2),)),
         "S_S2": moment_tensor(d, n, 3, ((3, 4),)),
         "S_S2_S": moment_tensor(d, n, 4, ((3, 4),))}
    return {k: torch.as_tensor(v, dtype=torch.float64) for k, v in t.items()}


@dataclass
class TwoLayerLoss:
    """``f(A_0, A_1) = E (TF_2 - y_q)^2`` of two sparse layers (eq. 8) at ``Sigma = I``,
    ``w* ~ N(0, I)``, for any real ``A_0, A_1`` (module docstring), exact.

    ``loss(A0, A1)`` takes numpy arrays or torch tensors (autograd flows through them)."""

    d: int
    n: int

    def __post_init__(self):
        if self.d < 1 or self.n < 1:
            raise ValueError(f"d, n: expected positive integers, got {self.d}, {self.n}")

    def loss(self, A0, A1):
        import torch

        m = _contracted(self.d, self.n)
        B0 = torch.as_tensor(A0, dtype=torch.float64).T
        B1 = torch.as_tensor(A1, dtype=torch.float64).T
        C = B0 + B1
        td = torch.tensordot
        # contractions in an explicit order (pairs of small tensors; no d^6 intermediate)
        t1 = td(C, m["S"], dims=([0, 1], [1, 0]))                                   # tr(C E S)
        t2 = td(td(B1, m["SS"], dims=([1], [0])), B0, dims=([1, 2], [0, 1]))        # [a, a'] -> trace
        t3 = td(C @ m["S2"], C, dims=([0, 1], [0, 1]))
        v3 = td(m["S_S2"], B0, dims=([1, 2], [0, 1]))                               # [b, f]
        t4 = td(B1 @ v3, C, dims=([0, 1], [0, 1]))
        v4 = td(m["S_S2_S"], B0, dims=([1, 2], [0, 1]))                             # [b, f, g, h]
        w4 = td(v4, B0, dims=([1, 2], [1, 0]))                                      # [b, h]
        t5 = td(w4, B1.T @ B1, dims=([0, 1], [0, 1]))
        return self.d - 2 * t1 + 2 * torch.trace(t2) + t3 - 2 * t4 + t5

    def __call__(self, A0, A1) -> float:
        return float(self.loss(A0, A1))


@dataclass
class MinimiserResult:
    """One L-BFGS run: the matrices found, the loss there, the gradient norm, iterations."""

    A: np.ndarray          # (2, d, d)
    loss: float
    grad_norm: float
    iterations: int
    start: np.ndarray      # (2, d, d)


def minimise(f: TwoLayerLoss, start: np.ndarray, symmetric: bool = True, gtol: float = 1e-13,
             maxiter: int = 2000) -> MinimiserResult:
    """L-BFGS (scipy) on the exact loss from ``start`` (2, d, d); ``symmetric``: over symmetric
    ``A_0, A_1`` (parametrised by their upper triangles), else over all real ``A_0, A_1``."""
    import torch
    from scipy.optimize import minimize

    d = f.d
    start = np.asarray(start, dtype=float)
    if start.shape != (2, d, d):
        raise ValueError(f"start: expected shape (2, {d}, {d}), got {start.shape}")
    iu = np.triu_indices(d)

    def unpack(theta):
        if not symmetric:
            return theta.reshape(2, d, d)
        A = torch.zeros((2, d, d), dtype=torch.float64)
        A = A.index_put((torch.arange(2)[:, None], torch.as_tensor(iu[0]), torch.as_tensor(iu[1])),
                        theta.reshape(2, -1))
        return A + A.transpose(1, 2) - torch.diag_embed(torch.diagonal(A, dim1=1, dim2=2))

    def fun(x):
        theta = torch.as_tensor(x, dtype=torch.float64).requires_grad_(True)
        A = unpack(theta)
        value = f.loss(A[0], A[1])
        (g,) = torch.autograd.grad(value, theta)
        return float(value.detach()), g.numpy().astype(float)

    x0 = (start[:, iu[0], iu[1]] if symmetric else start).reshape(-1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 5 x 5 matrices: one thread is several times faster than two
    try:
        res = minimize(fun, x0, jac=True, method="L-BFGS-B",
                       options={"maxiter": maxiter, "gtol": gtol, "ftol": 1e-16, "maxcor": 30})
        A = unpack(torch.as_tensor(res.x, dtype=torch.float64)).detach().numpy()
        _, g = fun(res.x)
    finally:
        torch.set_num_threads(threads)
    return MinimiserResult(A=A, loss=float(res.fun), grad_norm=float(np.linalg.norm(g)), iterations=int(res.nit),
                           start=start)
