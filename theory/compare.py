"""Symbolic equality of closed forms (derived vs printed, derived vs numeric rewrite).

Three tiers, cheapest first:

1. scalar expressions: ``cancel``/``simplify`` of the difference;
2. functions of one covariance Lambda: equality of the spectral images
   (:func:`theory.matrices.spectral`), exact for every D;
3. anything else with matrices: explicit matrices of symbols at D = 2 and 3, entry by entry.
"""

from __future__ import annotations

import sympy as sp

from .matrices import explicit, spectral
from .symbols import dim, sym

__all__ = ["equal", "is_zero"]


def is_zero(e: sp.Expr) -> bool:
    """True when the scalar ``e`` simplifies to 0."""
    e = sp.sympify(e)
    if e == 0:
        return True
    c = sp.cancel(sp.expand(e))
    if c == 0:
        return True
    return sp.simplify(c) == 0


def _is_matrix(e) -> bool:
    return getattr(e, "is_Matrix", False) or any(isinstance(a, sp.MatrixExpr) for a in sp.preorder_traversal(e))


def equal(a: sp.Basic, b: sp.Basic) -> bool:
    """Whether the closed forms ``a`` and ``b`` are identical (see module docstring)."""
    a, b = sp.sympify(a), sp.sympify(b)
    if getattr(a, "is_Matrix", False) != getattr(b, "is_Matrix", False):
        return False
    if getattr(a, "is_Matrix", False) and a.shape != b.shape:
        return False
    if not (_is_matrix(a) or _is_matrix(b)):
        return is_zero(a - b)
    Lam = sym("Lambda")
    lam = sp.Symbol("lambda", positive=True)
    try:
        return is_zero(spectral(a, Lam, lam) - spectral(b, Lam, lam))
    except ValueError:
        pass
    for d in (2, 3):
        ea, eb = explicit(a, dim(), d), explicit(b, dim(), d)
        diff = (ea - eb) if isinstance(ea, sp.MatrixBase) else sp.Matrix([ea - eb])
        if not all(is_zero(x) for x in diff):
            return False
    return True
