"""Symbolic equality of closed forms (derived vs printed, derived vs numeric rewrite).

Three tiers, cheapest first:

1. scalar expressions: ``cancel``/``simplify`` of the difference;
2. functions of one covariance (the symmetric matrix passed as ``covariance``, and eigen-projectors
   of it passed as ``projectors``): equality of the spectral images
   (:func:`theory.matrices.spectral`), exact for every D;
3. anything else with matrices: explicit matrices of symbols at D = 2 and 3, entry by entry.

Which matrix is the covariance is the caller's knowledge, not a name known here: a record says it
(:meth:`theory.registry.ClosedForm.equal` passes its covariance parameter and its projector
symbols).
"""

from __future__ import annotations

import sympy as sp

from .matrices import evaluate_explicit, explicit, spectral, trace_summand
from .symbols import dim

__all__ = ["equal", "is_zero"]

from sympy.codegen.cfunctions import expm1, log1p  # noqa: E402

_CFUNCS = (expm1, log1p)


def is_zero(e: sp.Expr) -> bool:
    """True when the scalar ``e`` simplifies to 0."""
    e = sp.sympify(e)
    if e.has(sp.UnevaluatedExpr):
        e = e.replace(lambda x: isinstance(x, sp.UnevaluatedExpr), lambda x: x.args[0])
    if e.has(sp.harmonic):  # H_n = digamma(n + 1) + Euler's gamma
        e = e.replace(sp.harmonic, lambda n: sp.polygamma(0, n + 1) + sp.EulerGamma)
    if e.has(*_CFUNCS):
        e = e.replace(expm1, lambda x: sp.exp(x) - 1).replace(log1p, lambda x: sp.log(1 + x))
    if e == 0:
        return True
    if e.has(sp.exp):
        e = _exp_to_symbol(sp.expand(e, power_exp=True, mul=False, multinomial=False))
    if e.has(sp.log):
        e = sp.expand_log(e.replace(sp.log, lambda x: sp.log(sp.factor(sp.together(x)))), force=True)
    num, _ = sp.fraction(sp.together(e))
    if sp.expand(num) == 0:
        return True
    c = sp.cancel(e)
    if c == 0:
        return True
    return sp.simplify(c) == 0


def _is_matrix(e) -> bool:
    return getattr(e, "is_Matrix", False) or any(isinstance(a, sp.MatrixExpr) for a in sp.preorder_traversal(e))


def equal(a: sp.Basic, b: sp.Basic, *, covariance: sp.MatrixSymbol | None = None, projectors=()) -> bool:
    """Whether the closed forms ``a`` and ``b`` are identical (see module docstring).

    ``covariance``: the symmetric D x D ``MatrixSymbol`` the expressions are functions of, if
    any; ``projectors``: ``MatrixSymbol`` eigen-projectors of it (they commute with it and are
    idempotent). Without a covariance, matrix expressions are compared entry by entry at D = 2, 3.
    """
    a, b = (_plain(sp.sympify(x)) for x in (a, b))
    if getattr(a, "is_Matrix", False) != getattr(b, "is_Matrix", False):
        return False
    if getattr(a, "is_Matrix", False) and a.shape != b.shape:
        return False
    if not (_is_matrix(a) or _is_matrix(b)):
        if not _numerically_close(a, b):
            return False
        return is_zero(a - b)
    mats = {m.name for e in (a, b) for m in e.atoms(sp.MatrixSymbol)}
    if covariance is not None:
        Lam = covariance
        lam = sp.Symbol("lambda", positive=True)
        proj = {P: sp.Symbol(f"p_{P.name}", nonnegative=True) for P in projectors}
        try:
            return is_zero(_idempotent(spectral(a, Lam, lam, proj) - spectral(b, Lam, lam, proj), proj))
        except ValueError:
            pass
        if not getattr(a, "is_Matrix", False):
            # sums over eigen-directions: equal summands suffice
            try:
                diff = trace_summand(a, Lam, lam, proj) - trace_summand(b, Lam, lam, proj)
                if is_zero(_idempotent(diff, proj)):
                    return True
            except ValueError:
                pass
        if mats <= {Lam.name}:
            # a function of one covariance is orthogonally equivariant: a diagonal one suffices
            for d in (2, 3):
                diag = sp.diag(*[sp.Symbol(f"lambda_{i}", positive=True) for i in range(d)])
                ea, eb = (_at(e, Lam, diag, d) for e in (a, b))
                diff = (ea - eb) if isinstance(ea, sp.MatrixBase) else sp.Matrix([ea - eb])
                if not all(is_zero(x) for x in diff):
                    return False
            return True
    for d in (2, 3):
        ea, eb = explicit(a, dim(), d), explicit(b, dim(), d)
        diff = (ea - eb) if isinstance(ea, sp.MatrixBase) else sp.Matrix([ea - eb])
        if not all(is_zero(x) for x in diff):
            return False
    return True


def _at(e, Lam, value, d):
    return evaluate_explicit(e.subs(dim(), d).xreplace({sp.MatrixSymbol(Lam.name, d, d): sp.ImmutableMatrix(value)}))


def _exp_to_symbol(e):
    """Replace exponentials exp(k u) (integer k) by X**k, so that exponential polynomials
    become rational functions that ``cancel`` decides quickly."""
    exps = list(e.atoms(sp.exp))
    if not exps:
        return e
    args = [x.args[0] for x in exps]
    base = min(args, key=lambda a: sp.count_ops(a))
    X = sp.Dummy("X", positive=True)
    reps = {}
    for x, a in zip(exps, args):
        k = sp.simplify(a / base)
        if not (k.is_Integer or (k.is_Rational and k.q <= 4)):
            return e
        reps[x] = X**k
    return e.xreplace(reps)


def _numerically_close(a, b, trials=3) -> bool:
    """Quick refutation: evaluate both scalars at random positive points (30 digits)."""
    import random

    syms = sorted(a.free_symbols | b.free_symbols, key=str)
    rnd = random.Random(12345)
    for _ in range(trials):
        point = {s: sp.Rational(rnd.randint(2, 40), rnd.randint(2, 9)) for s in syms}
        try:
            va, vb = complex(a.evalf(30, subs=point)), complex(b.evalf(30, subs=point))
        except (TypeError, ValueError):
            return True  # cannot evaluate numerically: leave it to the symbolic test
        if abs(va.imag) > 1e-25 * (1 + abs(va)) or abs(vb.imag) > 1e-25 * (1 + abs(vb)):
            continue  # outside the real domain of one form (a log or root branch): no verdict
        if abs(va - vb) > 1e-20 * (1 + abs(va) + abs(vb)):
            return False
    return True


def _plain(e):
    """Drop UnevaluatedExpr wrappers (used only to steer numerics)."""
    if e.has(sp.UnevaluatedExpr):
        return e.replace(lambda x: isinstance(x, sp.UnevaluatedExpr), lambda x: x.args[0])
    return e


def _idempotent(e, proj):
    """Reduce p**k -> p for the projector images (p is 0 or 1)."""
    e = sp.expand(e)
    for p in proj.values():
        e = e.replace(lambda x: x.is_Pow and x.base == p and x.exp.is_Integer and x.exp > 1, lambda x: p)
    return e
