"""The factors of the order evaluation of the QK-gradient (Bao, Hataya, Karakida 2024, App. B.2).

App. B.2 bounds the first gradient term (19) by a product of four sums over ``i, j, alpha, beta
in [T]`` (with ``Sigma = I``)::

    (A) = sum E[(gamma~^i_alpha gamma~^j_beta)^2]       (B) = sum E[(x_i^T P x_j)^2]
    (C) = sum E[(x_beta^T W_QK x_T)^2]                  (D) = sum E[(x_alpha x_T^T)^(.2)]

and states (A) = O(1), (B) = (C) = (D) = O(T^6). (A) depends on the clipping and has no closed
form; (B), (C) and (D) are moments of the random walk, derived here exactly at finite T by
summing the moments of :mod:`theory.localization.random_walk` (Isserlis) over the indices that
the summand does not depend on (a factor T per free index): each is a polynomial of degree 6
in T, so the printed orders hold. What the paper prints as their values does not:

* (B): eq. 17 (valid for i <= j, with the constants of a walk from x_1 = 0) summed over all
  (i, j): leading term 7/12 T^6 tr(P^2) + 1/3 T^6 tr(P)^2; the sum over all pairs needs
  min(i, j) and max(i, j) in eq. 17: 5/12 T^6 tr(P^2) + 1/6 T^6 tr(P)^2;
* (C): eq. 22 at i = j = beta, with its x_1 = 0 constants (leading term right);
* (D): the (i, j) element is written with ``x_{alpha,j}`` where ``x_{T,j}`` belongs (the
  paper's own next step conditions on x_alpha as for x_{T,j}): 1/3 T^6 (off the diagonal) and
  T^6 (on it) in place of 1/2 T^6 and 7/6 T^6.

``P`` is the symmetric matrix ``P-check = W_V^T W_F^T W_F W_V`` of eq. 19; ``trP = tr(P)``,
``trP2 = tr(P^2)``; with ``Sigma = I``, ``trW = tr(W_QK)`` and ``trW2 = tr(W_QK^2)``.

Contains
--------
``localization.orders.factor_b``, ``.factor_c``, ``.factor_d_diagonal``, ``.factor_d_offdiagonal``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention Networks Localize When QK-eigenspectrum
   Concentrates", ICML 2024, App. B.2 (and eqs. 17, 22 of App. A and C).
"""

from __future__ import annotations

from functools import cache

from ..params import positive
from ..registry import ClosedForm, register
from . import sym
from .random_walk import T_LEN, TRW, TRW2, walk_moment

__all__ = ["derive_factor_b", "derive_factor_c", "derive_factor_d"]

TRP = positive("trP", "tr(P) of P = W_V^T W_F^T W_F W_V (eq. 19's P-check), Sigma = I.", example=1.5)
TRP2 = positive("trP2", "tr(P^2) of P = W_V^T W_F^T W_F W_V (eq. 19's P-check), Sigma = I.", example=1.1)

_SIGMA_I = "App. B.2 takes Sigma = I (Assumption 1: Cov(x_s, x_t) = min(s, t) I). "


def _summation(expr, *ranges):
    import sympy as sp

    return sp.factor(sp.expand(sp.summation(expr, *ranges)))


def _pair_sum(f):
    """sum_{i, j in [T]} f(min(i, j), max(i, j)) for f given as a function of (lo, hi)."""
    import sympy as sp

    T = sym("T")
    a, b = sp.symbols("a_sum b_sum", integer=True, positive=True)
    return sp.summation(f(a, a), (a, 1, T)) + 2 * sp.summation(sp.summation(f(a, b), (a, 1, b - 1)), (b, 1, T))


@cache
def derive_factor_b():
    """(B) = T^2 sum_{i,j} E[(x_i^T P x_j)^2] with eq. 17 (derived) at (min, max)."""
    import sympy as sp

    i, k, T = sym("i"), sym("k"), sym("T")
    cross = walk_moment("cross").xreplace({sym("trW2"): sym("trP2"), sym("trW"): sym("trP")})
    return sp.factor(sp.expand(T**2 * _pair_sum(lambda lo, hi: cross.xreplace({i: lo, k: hi}))))


def printed_factor_b():
    """App. B.2: (B) = T^2 sum_{i,j} {(i^2 + ij - 3i - j + 4) tr(P^2) + (i^2 - 2i + 2) tr(P)^2}."""
    import sympy as sp

    T = sym("T")
    a, b = sp.symbols("a_sum b_sum", integer=True, positive=True)
    term = (a**2 + a * b - 3 * a - b + 4) * sym("trP2") + (a**2 - 2 * a + 2) * sym("trP") ** 2
    return _summation(T**2 * term, (a, 1, T), (b, 1, T))


@cache
def derive_factor_c():
    """(C) = T^3 sum_beta E[(x_beta^T W_QK x_T)^2] with eq. 22 (derived) at i = k = beta."""
    import sympy as sp

    i, k, T = sym("i"), sym("k"), sym("T")
    a = sp.Symbol("a_sum", integer=True, positive=True)
    return _summation(T**3 * walk_moment("s_product").xreplace({i: a, k: a}), (a, 1, T))


def printed_factor_c():
    """App. B.2: (C) = T^3 sum_beta {(beta^2 + (T-3) beta - (T-4)) tr(W^2) + (beta^2 - 2 beta + 2) tr(W)^2}."""
    import sympy as sp

    T = sym("T")
    a = sp.Symbol("a_sum", integer=True, positive=True)
    term = (a**2 + (T - 3) * a - (T - 4)) * sym("trW2") + (a**2 - 2 * a + 2) * sym("trW") ** 2
    return _summation(T**3 * term, (a, 1, T))


@cache
def _coordinate_moment(same: bool):
    """E[x_{alpha,i}^2 x_{T,j}^2] under Sigma = I (i = j if ``same``), from the increments
    x_alpha = g1 ~ N(0, alpha), x_T = g1 + g2 (g2 ~ N(0, T - alpha), independent) of one
    coordinate, or of two independent coordinates; by sympy.stats."""
    import sympy as sp
    from sympy import stats

    alpha = sp.Symbol("alpha_w", positive=True)
    rest = sp.Symbol("rest_w", positive=True)  # T - alpha
    g1, g2, h1, h2 = (stats.Normal(n, 0, sp.sqrt(v)) for n, v in
                      (("g1", alpha), ("g2", rest), ("h1", alpha), ("h2", rest)))
    other = (g1 + g2) if same else (h1 + h2)
    value = sp.expand(stats.E(g1**2 * other**2))
    return value, alpha, rest


@cache
def derive_factor_d(same: bool):
    """(D)_{ij} = T^3 sum_alpha E[x_{alpha,i}^2 x_{T,j}^2]."""
    import sympy as sp

    T = sym("T")
    value, alpha, rest = _coordinate_moment(same)
    a = sp.Symbol("a_sum", integer=True, positive=True)
    return _summation(T**3 * value.xreplace({alpha: a, rest: T - a}), (a, 1, T))


def printed_factor_d(same: bool):
    """App. B.2's first expression (D)_{ij} = T^3 sum_alpha E[x_{alpha,i}^2 x_{alpha,j}^2] (Sigma = I):
    E = 3 alpha^2 on the diagonal, alpha^2 off it (Isserlis on one or two coordinates of x_alpha)."""
    import sympy as sp

    T = sym("T")
    a = sp.Symbol("a_sum", integer=True, positive=True)
    return _summation(T**3 * (3 if same else 1) * a**2, (a, 1, T))


register(ClosedForm(
    id="localization.orders.factor_b",
    title="App. B.2 factor (B) = sum_{i,j,alpha,beta} E[(x_i^T P x_j)^2], exact at finite T",
    source="App. B.2, factor (B) (with eq. 17)",
    status="exact",
    params=(T_LEN, TRP, TRP2),
    derive=derive_factor_b,
    printed=printed_factor_b,
    doc=_SIGMA_I + "T^2 sum_{i,j in [T]} E[(x_i^T P x_j)^2] = T^3 (T + 1) ((2 T^2 + 2 T + 2) tr(P)^2 + "
        "(5 T^2 + 5 T + 2) tr(P^2))/12: a polynomial of degree 6 in T, so (B) = O(T^6) as printed, with "
        "leading term T^6 (5/12 tr(P^2) + 1/6 tr(P)^2).",
    erratum="App. B.2 writes (B) = T^2 sum_{i,j} {(i^2 + ij - 3i - j + 4) tr(P^2) + (i^2 - 2i + 2) tr(P)^2}: "
            "eq. 17, which holds for i <= j (and carries the constants of a walk started at x_1 = 0), summed "
            "over all pairs (i, j). Its leading term is T^6 (7/12 tr(P^2) + 1/3 tr(P)^2); the sum over "
            "all pairs needs eq. 17 at (min(i, j), max(i, j)): T^6 (5/12 tr(P^2) + 1/6 tr(P)^2). The "
            "order O(T^6) is right.",
))

register(ClosedForm(
    id="localization.orders.factor_c",
    title="App. B.2 factor (C) = sum_{i,j,alpha,beta} E[(x_beta^T W_QK x_T)^2], exact at finite T",
    source="App. B.2, factor (C) (with eq. 22)",
    status="exact",
    params=(T_LEN, TRW, TRW2),
    derive=derive_factor_c,
    printed=printed_factor_c,
    doc=_SIGMA_I + "T^3 sum_beta E[(x_beta^T W_QK x_T)^2] = T^3 sum_beta ((T beta + beta^2) tr(W^2) + "
        "beta^2 tr(W)^2): degree 6 in T, leading term T^6 (5/6 tr(W^2) + 1/3 tr(W)^2), so (C) = O(T^6) "
        "as printed.",
    erratum="App. B.2 writes (C) = T^3 sum_beta {(beta^2 + (T-3) beta - (T-4)) tr(W^2) + (beta^2 - 2 beta + 2) "
            "tr(W)^2}, eq. 22 at i = j = beta with its constants of a walk started at x_1 = 0; under "
            "Assumption 1 the summand is (T beta + beta^2) tr(W^2) + beta^2 tr(W)^2. Leading term and "
            "order O(T^6) agree.",
))

register(ClosedForm(
    id="localization.orders.factor_d_diagonal",
    title="App. B.2 factor (D), a diagonal element (i = j), exact at finite T",
    source="App. B.2, factor (D)",
    status="exact",
    params=(T_LEN,),
    derive=lambda: derive_factor_d(True),
    printed=lambda: printed_factor_d(True),
    doc=_SIGMA_I + "(D)_{ii} = T^3 sum_alpha E[x_{alpha,i}^2 x_{T,i}^2] = T^3 sum_alpha (alpha T + 2 alpha^2): "
        "degree 6, leading term 7/6 T^6, so (D) = O(T^6) as printed.",
    erratum="App. B.2 writes (D)_{ij} = T^3 sum_alpha E[x_{alpha,i}^2 x_{alpha,j}^2], with x_{alpha,j} where "
            "x_{T,j} belongs (the element of x_alpha x_T^T; the paper's next step, E[x_{T,j}^2 | x_alpha] = "
            "(T - alpha) + x_{alpha,j}^2, treats it as x_{T,j}); on the diagonal this is T^3 sum 3 alpha^2 "
            "(leading T^6) in place of 7/6 T^6. The order O(T^6) is right.",
))

register(ClosedForm(
    id="localization.orders.factor_d_offdiagonal",
    title="App. B.2 factor (D), an off-diagonal element (i != j), exact at finite T",
    source="App. B.2, factor (D)",
    status="exact",
    params=(T_LEN,),
    derive=lambda: derive_factor_d(False),
    printed=lambda: printed_factor_d(False),
    doc=_SIGMA_I + "(D)_{ij} = T^3 sum_alpha E[x_{alpha,i}^2] E[x_{T,j}^2] = T^3 sum_alpha alpha T (i != j): "
        "degree 6, leading term 1/2 T^6, so (D) = O(T^6) as printed.",
    erratum="App. B.2 writes (D)_{ij} = T^3 sum_alpha E[x_{alpha,i}^2 x_{alpha,j}^2] with x_{alpha,j} for "
            "x_{T,j}; off the diagonal this is T^3 sum alpha^2 (leading T^6/3) in place of T^6/2. The order "
            "O(T^6) is right.",
))
