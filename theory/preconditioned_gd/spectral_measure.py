"""The expected spectral measure of the white Wishart covariance: Jacobi matrices and Gauss rules.

``mu`` is the expected spectral measure of ``S_u = W / n``, ``W ~ W_d(n, I)``:
``int phi dmu = E sum_k phi(s_k) = E tr phi(S_u)`` (total mass ``d``, moments ``m_k = E tr S_u^k``
of :mod:`theory.preconditioned_gd.wishart`). Its support is infinite (a density on ``(0, oo)``,
plus an atom of mass ``d - n`` at 0 when ``n < d``), so every Hankel matrix of its moments is
positive definite and its monic orthogonal polynomials satisfy ``pi_{j+1}(s) = (s - alpha_j)
pi_j(s) - beta_j pi_{j-1}(s)`` with ``beta_j > 0``.

What is computed here, exactly at integer ``n, d``:

* the recurrence coefficients ``alpha_j, beta_j`` (``beta_0 = int dmu``) of ``mu`` and of the
  weighted measure ``s mu(ds)`` (moments ``m_{k+1}``), by Chebyshev's algorithm in exact rational
  arithmetic from the exact moments (no ill-conditioning: the moment map is only ill-conditioned
  in floating point);
* the ``N``-point Gauss rule ``int phi dmu = sum_i w_i phi(x_i)``, exact for polynomials of degree
  ``<= 2N - 1``: the nodes are the eigenvalues of the Jacobi matrix (symmetric tridiagonal, the
  exact ``alpha_j`` on the diagonal, ``sqrt(beta_j)`` beside it), the weights the Christoffel numbers
  ``w_i = 1 / sum_{j<N} phi_j(x_i)^2`` (``phi_j`` orthonormal), positive;
* the rule of the measure shifted by ``-1`` (nodes ``x_i - 1``, from the exact ``alpha_j - 1``): the
  losses of :mod:`theory.preconditioned_gd.multi_layer` are evaluated in ``e = s - 1`` so that at
  large ``n`` (nodes clustered at 1, spread ``~ sqrt(d / n)``) the nodes keep their relative accuracy;
* the Christoffel function at 0, ``lambda_L(0) = 1 / sum_{j<=L} pi_j(0)^2 / h_j`` (``h_j = beta_0
  ... beta_j``): the minimum of ``int p^2 dmu`` over polynomials of degree ``<= L`` with ``p(0) = 1``.

In float64 (numpy) the nodes are the eigenvalues of the float64 Jacobi matrix (LAPACK, absolute
error ``~ eps ||J||``), the weights the Christoffel numbers (relative error ``~ N eps``); in mpmath
both at the working precision (``mpmath.eigsy``); torch gets the float64 values as tensors.

References
----------
.. [1] G. H. Golub, J. H. Welsch, "Calculation of Gauss quadrature rules", Math. Comp. 23 (1969).
.. [2] W. Gautschi, *Orthogonal Polynomials: Computation and Approximation*, Oxford 2004, §2.1
   (Chebyshev's algorithm), §1.4 (Christoffel function, kernel polynomials).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from .wishart import exact_moments

__all__ = ["recurrence", "gauss_rule", "christoffel_at_zero", "kernel_zeros"]


def _chebyshev(mom: tuple[Fraction, ...], N: int) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
    """``(alpha_0..alpha_{N-1}, beta_0..beta_{N-1})`` from the moments ``mom[0..2N-1]`` (exact)."""
    if len(mom) < 2 * N:
        raise ValueError(f"N: {N} recurrence coefficients need {2 * N} moments, got {len(mom)}")
    alpha, beta = [mom[1] / mom[0]], [mom[0]]
    prev = [Fraction(0)] * (2 * N)          # sigma_{k-2, l}
    cur = list(mom[: 2 * N])                 # sigma_{k-1, l}
    for k in range(1, N):
        nxt = [Fraction(0)] * (2 * N)
        for l in range(k, 2 * N - k):
            nxt[l] = cur[l + 1] - alpha[k - 1] * cur[l] - beta[k - 1] * prev[l]
        alpha.append(nxt[k + 1] / nxt[k] - cur[k] / cur[k - 1])
        beta.append(nxt[k] / cur[k - 1])
        prev, cur = cur, nxt
    return tuple(alpha), tuple(beta)


@lru_cache(maxsize=256)
def recurrence(n: int, d: int, N: int, power: int = 0) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
    """Exact ``(alpha_j, beta_j)``, ``j < N``, of ``s^power mu(ds)`` (``power`` 0 or 1) at integer ``n, d``.

    Needs the moments ``m_power .. m_{power + 2N - 1}``."""
    if power not in (0, 1):
        raise ValueError(f"power: expected 0 or 1, got {power!r}")
    m = exact_moments(n, d, 2 * N - 1 + power)
    return _chebyshev(m[power:], N)


def _orthonormal_sum(alpha, sq_beta, x, N, one):
    """``sum_{j<N} phi_j(x)^2`` by the orthonormal three-term recurrence (any number type)."""
    prev, cur = 0 * one, one / sq_beta[0]
    total = cur * cur
    for j in range(N - 1):
        prev, cur = cur, ((x - alpha[j]) * cur - sq_beta[j] * prev) / sq_beta[j + 1]
        total = total + cur * cur
    return total


def gauss_rule(n: int, d: int, N: int, *, power: int = 0, shift: int = 0, backend: str = "numpy"):
    """The ``N``-point Gauss rule ``(nodes, weights)`` of ``s^power mu(ds)``, nodes shifted by ``-shift``.

    ``sum_i w_i phi(x_i)`` equals ``int phi(s - shift) s^power mu(ds)`` for every polynomial ``phi``
    of degree ``<= 2N - 1``. numpy: float64 arrays; mpmath: lists of ``mpf`` at the working
    precision; torch: float64 tensors (the numpy values). The float64 rule is memoised (read-only
    arrays): the GD++ searches evaluate their loss at the same rule thousands of times."""
    if backend != "mpmath":
        nodes, weights = _float64_rule(int(n), int(d), int(N), power, shift)
        if backend == "torch":
            import torch

            return torch.tensor(nodes, dtype=torch.float64), torch.tensor(weights, dtype=torch.float64)
        return nodes, weights
    alpha, beta = recurrence(int(n), int(d), int(N), power)
    alpha = [a - shift for a in alpha]
    import mpmath

    a = [mpmath.mpf(x.numerator) / x.denominator for x in alpha]
    sb = [mpmath.sqrt(mpmath.mpf(x.numerator) / x.denominator) for x in beta]
    J = mpmath.matrix(N, N)
    for i in range(N):
        J[i, i] = a[i]
        if i + 1 < N:
            J[i, i + 1] = J[i + 1, i] = sb[i + 1]
    nodes = sorted(mpmath.eigsy(J, eigvals_only=True)) if N > 1 else [a[0]]
    weights = [1 / _orthonormal_sum(a, sb, x, N, mpmath.mpf(1)) for x in nodes]
    return nodes, weights


@lru_cache(maxsize=256)
def _float64_rule(n: int, d: int, N: int, power: int, shift: int):
    """:func:`gauss_rule` in float64: ``(nodes, weights)``, read-only numpy arrays."""
    import numpy as np
    from scipy.linalg import eigh_tridiagonal

    from .wishart import to_number

    alpha, beta = recurrence(n, d, N, power)
    a = np.array([to_number(x - shift) for x in alpha])
    sb = np.sqrt(np.array([to_number(x) for x in beta]))
    nodes = eigh_tridiagonal(a, sb[1:], eigvals_only=True) if N > 1 else a.copy()
    weights = 1.0 / _orthonormal_sum(a, sb, nodes, N, np.ones_like(nodes))
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


@lru_cache(maxsize=256)
def christoffel_at_zero(n: int, d: int, L: int) -> Fraction:
    """``min { int p^2 dmu : deg p <= L, p(0) = 1 }`` exactly: ``1 / sum_{j=0}^{L} pi_j(0)^2 / h_j``.

    ``pi_j(0)`` by the monic recurrence, ``h_j = beta_0 beta_1 ... beta_j`` (the squared norms)."""
    alpha, beta = recurrence(int(n), int(d), int(L) + 1)
    prev, cur, h = Fraction(0), Fraction(1), beta[0]
    total = cur * cur / h
    for j in range(L):
        prev, cur = cur, -alpha[j] * cur - beta[j] * prev
        h = h * beta[j + 1]
        total += cur * cur / h
    return 1 / total


def kernel_zeros(n: int, d: int, L: int, *, shift: int = 0, backend: str = "numpy"):
    """The zeros of the degree-``L`` kernel polynomial (minimiser of ``int p^2 dmu``, ``p(0) = 1``),
    shifted by ``-shift``, ascending: the zeros of the degree-``L`` orthogonal polynomial of
    ``s mu(ds)`` (Christoffel-Darboux: ``K_L(s, 0) ~ (pi_{L+1}(s) pi_L(0) - pi_L(s) pi_{L+1}(0)) / s``,
    the orthogonal polynomial of ``s mu(ds)`` since the support lies in ``[0, oo)``), i.e. the
    nodes of its ``L``-point Gauss rule."""
    nodes, _ = gauss_rule(n, d, L, power=1, shift=shift, backend=backend)
    return nodes
