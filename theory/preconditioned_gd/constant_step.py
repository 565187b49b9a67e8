"""L steps of Sigma^{-1}-preconditioned GD with one constant step size: the "L-step preconditioned
GD" baseline of Figs. 6-7 (Ahn, Cheng, Daneshmand, Sra 2023, App. D).

Setting of Theorem 3: ``x ~ N(0, Sigma)``, ``w* ~ N(0, Sigma^{-1})``, noiseless labels, ``n``
context examples, ``w_0 = 0``, ``w_{l+1} = w_l - a Sigma^{-1} (S w_l - h)`` (``S``, ``h`` the
in-context covariance and correlation; the step ``a`` in the eq.-8 convention, the ``1/n``
included: the authors' code applies ``eta`` to the unnormalised gradient, so ``a = eta n``). This
is the sparse transformer of eq. 8 with every ``A_l = a Sigma^{-1}`` (Lemma 1), the point of
Theorem 3's set with equal steps, so its loss is :mod:`theory.preconditioned_gd.multi_layer`'s
``E tr prod_l (I - a_l S_u)^2`` at ``a_l = a``:

    f(a) = E tr (I - a S_u)^{2L} = sum_{k=0}^{2L} binom(2L, k) (-a)^k m_k,

with the white Wishart moments ``m_k = E tr S_u^k`` (:mod:`theory.preconditioned_gd.wishart`;
``m_0 = d``). Sigma drops out. ``(1 - a s)^{2L}`` is convex in ``a`` for every ``s``, so ``f`` is
strictly convex; its minimiser is the unique real root of

    f'(a) / (-2L) = E tr S_u (I - a S_u)^{2L-1} = sum_{k=0}^{2L-1} binom(2L-1, k) (-a)^k m_{k+1},

decreasing from ``m_1 = d`` at ``a = 0`` (``L = 1``: ``a* = m_1/m_2 = n/(n+d+1)``, Theorem 3's
one-layer optimum). For ``L >= 2`` one step is worse than the optimal per-layer steps of
Theorem 3 (``preconditioned_gd.multi_layer.optimal_loss``): at ``n = 20, d = 5``,
``f(a*) = 0.4990, 0.2683`` against ``0.3612, 0.1336`` for ``L = 2, 3``.

Depth: ``L <= 4`` (``m_8``; :data:`MAX_LAYERS`).

Contains
--------
``preconditioned_gd.constant_step.loss``, ``.optimal_step``.

References
----------
.. [1] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement preconditioned
   gradient descent for in-context learning", NeurIPS 2023, Theorem 3, Lemma 1, App. D (Figs. 6-7).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import numpy as np

from ..params import index, positive
from ..registry import ClosedForm, register
from . import sym
from .multi_layer import kernel_coefficients, spectral_loss
from .wishart import D_DIM, N_CTX, matching_counts, moments

__all__ = ["MAX_LAYERS", "derive_loss", "stable_loss", "derive_optimal_step", "slope_coefficients",
           "optimal_step"]

#: Largest depth: the loss of L steps needs the moments m_1..m_{2L}.
MAX_LAYERS = 4

LAYERS = index("L", "Number of steps (layers) L.", low=1, high=MAX_LAYERS)
STEP = positive("a", "The constant step size a (A_l = a Sigma^{-1} for every layer; eq.-8 convention, the "
                     "1/n included).", example=0.7, sample=(0.05, 1.5))


def _by_layers(values_per_L):
    """``Piecewise`` over ``L = 1..MAX_LAYERS`` (the last one as the default branch)."""
    import sympy as sp

    L = sym("L")
    branches = [(v, sp.Eq(L, k + 1)) for k, v in enumerate(values_per_L[:-1])]
    return sp.Piecewise(*branches, (values_per_L[-1], True))


def loss_of(L: int):
    """``E tr (I - a S_u)^{2L}``: Theorem 3's loss polynomial with ``L`` equal steps."""
    a = sym("a")
    return spectral_loss(kernel_coefficients([a] * L), moments(2 * L))


def derive_loss():
    """``f(a) = sum_{j,k} c_j c_k m_{j+k}`` with ``prod_l (1 - a s) = (1 - a s)^L = sum_k c_k s^k``,
    per ``L = 1..4``."""
    return _by_layers([loss_of(L) for L in range(1, MAX_LAYERS + 1)])


def stable_loss():
    """The loss expanded around ``S_u = I``: ``sum_j binom(2L, j) (1 - a)^{2L-j} (-a)^j mu_j`` with the
    central moments ``mu_j = E tr (S_u - I)^j`` (cancelled exactly; ``mu_0 = d``, ``mu_1 = 0``).
    The raw form adds terms of size ``~ d a^k`` to a loss that can be ``1e-2`` (large ``n``);
    this one keeps the small central moments apart. Equal to :func:`derive_loss` (tests)."""
    import sympy as sp

    a = sym("a")
    m = moments(2 * MAX_LAYERS)
    mu = [sp.factor(sp.cancel(sp.Add(*[sp.binomial(k, i) * (-1) ** (k - i) * m[i] for i in range(k + 1)])))
          for k in range(2 * MAX_LAYERS + 1)]
    return _by_layers([sp.Add(*[sp.binomial(2 * L, j) * (1 - a) ** (2 * L - j) * (-a) ** j * mu[j]
                                for j in range(2 * L + 1)]) for L in range(1, MAX_LAYERS + 1)])


def derive_optimal_step():
    """The defining relation of the optimal step ``a* = a*(n, d, L)``: ``f'(a*) = 0``, written as
    ``E tr S_u (I - a* S_u)^{2L-1} = 0`` (the derivative of :func:`loss_of` over ``-2L``, checked
    symbolically by the tests)."""
    import sympy as sp

    n, d, L = sym("n"), sym("d"), sym("L")
    star = sp.Function("a_star")(n, d, L)
    m = moments(2 * MAX_LAYERS)
    slope = [sp.Add(*[sp.binomial(2 * k - 1, j) * (-star) ** j * m[j + 1] for j in range(2 * k)])
             for k in range(1, MAX_LAYERS + 1)]
    return sp.Eq(_by_layers(slope), 0)


@cache
def _moments_exact(n: int, d: int, K: int) -> tuple:
    """``(m_0, ..., m_K)`` at integers ``n, d`` as exact fractions (the pairing counts of
    :func:`theory.preconditioned_gd.wishart.matching_counts`)."""
    out = [Fraction(d)]
    for k in range(1, K + 1):
        out.append(sum((Fraction(c * d**r * n**s, n**k) for (r, s), c in matching_counts(k).items()),
                       Fraction(0)))
    return tuple(out)


def slope_coefficients(n: int, d: int, L: int) -> tuple:
    """Exact coefficients ``q_j = binom(2L-1, j) (-1)^j m_{j+1}`` (``j = 0..2L-1``) of
    ``f'(a) / (-2L) = sum_j q_j a^j``."""
    from math import comb

    m = _moments_exact(int(n), int(d), 2 * int(L))
    return tuple(comb(2 * L - 1, j) * (-1) ** j * m[j + 1] for j in range(2 * L))


def optimal_step(n: int, d: int, L: int, backend: str = "numpy"):
    """The root of ``f'`` (:func:`slope_coefficients`) in ``backend``'s arithmetic.

    The slope ``g(a) = sum_j q_j a^j`` falls strictly from ``g(0) = m_1 = d > 0`` to ``-inf`` (odd
    degree, leading coefficient ``-m_{2L}``): the bracket ``[0, hi]`` with ``hi`` doubled from
    ``m_1/m_2`` until ``g(hi) <= 0``, then bisection to the working precision (float64: 60
    halvings, then a Newton polish; mpmath: ``mp.prec + 10`` halvings)."""
    q = slope_coefficients(n, d, L)
    if backend == "mpmath":
        import mpmath

        coef = [mpmath.mpf(x.numerator) / x.denominator for x in q]
        steps, number = mpmath.mp.prec + 10, mpmath.mpf
    else:
        coef = [float(x) for x in q]
        steps, number = 60, float

    def g(x):
        out = 0 * x
        for c in reversed(coef):
            out = out * x + c
        return out

    lo, hi = number(0), coef[0] / -coef[1] * 2  # m_1 / m_2 (q_1 = -binom(2L-1, 1) m_2), doubled
    while g(hi) > 0:
        lo, hi = hi, 2 * hi
    for _ in range(steps):
        mid = (lo + hi) / 2
        if g(mid) > 0:
            lo = mid
        else:
            hi = mid
    x = (lo + hi) / 2
    if backend != "mpmath":
        dg = sum(j * c * x ** (j - 1) for j, c in enumerate(coef) if j > 0)
        if dg != 0:
            x = x - g(x) / dg
    return x


def _optimal_step(backend, values, dims):
    x = optimal_step(values["n"], values["d"], values["L"], "mpmath" if backend == "mpmath" else "numpy")
    if backend == "torch":
        import torch

        return torch.as_tensor(float(x), dtype=torch.float64)
    return np.float64(x) if backend == "numpy" else x


_DOC = ("x ~ N(0, Sigma), w* ~ N(0, Sigma^{-1}), noiseless; L steps w_{l+1} = w_l - a Sigma^{-1} (S w_l - h) "
        "from w_0 = 0 (the sparse transformer with every A_l = a Sigma^{-1}). ")

register(ClosedForm(
    id="preconditioned_gd.constant_step.loss",
    title="Loss of L-step Sigma^{-1}-preconditioned GD with one step a: E tr (I - a S_u)^{2L}, L <= 4",
    source="App. D, Figs. 6-7 (L-step preconditioned GD), Theorem 3 [loss derived]",
    status="exact",
    params=(N_CTX, D_DIM, LAYERS, STEP),
    derive=derive_loss,
    stable=stable_loss,
    doc=_DOC + "f(a) = sum_k binom(2L, k) (-a)^k m_k with the white Wishart moments m_k = E tr S_u^k; "
        "Sigma drops out. The authors' grid steps eta act on the unnormalised gradient with n - 1 "
        "examples (their off-by-one): a = eta (n - 1) at n - 1.",
))

register(ClosedForm(
    id="preconditioned_gd.constant_step.optimal_step",
    title="Optimal constant step a* of L-step Sigma^{-1}-preconditioned GD (f'(a*) = 0), L <= 4",
    source="App. D, Figs. 6-7 (step 'found by grid search') [value derived]",
    status="exact",
    params=(N_CTX, D_DIM, LAYERS),
    derive=derive_optimal_step,
    evaluate=_optimal_step,
    doc=_DOC + "f is strictly convex in a; a* is the unique real root of E tr S_u (I - a S_u)^{2L-1} = "
        "sum_j binom(2L-1, j) (-a)^j m_{j+1} (exact rational coefficients, root by bisection at the "
        "backend's precision). L = 1: n/(n+d+1). n = 20, d = 5: 0.7692, 0.7428, 0.7157, 0.6889 for "
        "L = 1..4 (losses 1.1538, 0.4990, 0.2683, 0.1633).",
))
