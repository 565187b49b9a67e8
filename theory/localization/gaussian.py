"""Gaussian moments with a mean: Lemma 3 of Bao, Hataya, Karakida 2024 (App. A, eqs. 11-14).

For ``x ~ N(mu, Sigma)``, a fixed vector ``a`` and a symmetric matrix ``W``:

    (11)  E[x^T W x]                 = tr(W Sigma) + mu^T W mu
    (12)  E[x x^T]                   = Sigma + mu mu^T
    (13)  E[a^T W x x^T W x]         = 2 a^T W Sigma W mu + a^T W mu {tr(W Sigma) + mu^T W mu}
    (14)  E[x^T W x x^T W x]         = 2 tr(W Sigma W Sigma) + tr(W Sigma)^2 + 4 mu^T W Sigma W mu
                                       + 2 tr(W Sigma) mu^T W mu + (mu^T W mu)^2

Derivation (not retyped). Write ``x = mu + z`` with ``z ~ N(0, Sigma)`` and expand every
bilinear factor ``p^T W q`` (``p, q`` in ``{x, a}``) over ``x -> mu`` or ``x -> z``. A term with
an odd number of ``z`` vanishes (Isserlis: odd moments of a zero-mean Gaussian are zero). The
remaining ``z``-moments come from the Isserlis engine :func:`theory.gaussian.expectation`:

* no ``z``: the product of the constant factors;
* two ``z`` in one factor: ``E[z^T W z]`` times the other factors;
* one ``z`` in each of two factors: each factor is turned so that ``z`` stands on its right,
  ``u^T M z`` (``z^T M v = v^T M^T z``), and ``(u_1^T M_1 z)(u_2^T M_2 z) = u_1^T M_1 E[z z^T] M_2^T u_2``;
* four ``z``: ``E[z^T W z z^T W z]``.

The engine works for a general ``W``; the lemma's hypothesis ``W = W^T`` is then applied by
replacing ``W^T`` with ``W``. Scalars ``u^T M v`` are written as traces of 1 x 1 products.

Parameters and symmetry. ``W`` is the matrix parameter ``W_QK`` (Lemma 3 is applied to
``W_QK`` in Lemma 1), and the records evaluate the lemma at ``W = (W_QK + W_QK^T)/2``: for a
symmetric ``W_QK`` this is ``W_QK`` itself, and both the derived and the printed forms are
written in that symmetric part, so the comparison with the paper is exact for every input.
(For a non-symmetric ``W_QK`` the quadratic forms of eqs. 11 and 14 only see the symmetric part
anyway; eq. 13's first factor ``a^T W x`` is then the one of the symmetric part, not of ``W_QK``.)
``Sigma`` is the covariance of ``x``, ``mu`` its mean and ``a_vec`` the fixed vector ``a``
(both D-vectors).

Contains
--------
``localization.gaussian.quadratic_mean`` (eq. 11), ``.second_moment`` (eq. 12, matrix),
``.cubic_moment`` (eq. 13), ``.quartic_moment`` (eq. 14).

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention Networks Localize When QK-eigenspectrum
   Concentrates", ICML 2024, App. A, Lemma 3 (after Brookes, *The Matrix Reference Manual*).
.. [2] L. Isserlis, Biometrika 12 (1918).
"""

from __future__ import annotations

from functools import cache
from itertools import product

from ..params import covariance, matrix, vector
from ..registry import ClosedForm, register

SIGMA = covariance("Sigma", "Covariance of the Gaussian vector x ~ N(mu, Sigma).")
W_SYM = matrix("W_QK", "The matrix W of Lemma 3 (symmetric; the records use (W_QK + W_QK^T)/2).")
MU = vector("mu", "Mean of the Gaussian vector x ~ N(mu, Sigma).")
A_VEC = vector("a_vec", "The fixed vector a of eq. 13.")

__all__ = ["SIGMA", "W_SYM", "MU", "A_VEC", "gaussian_moment", "derive_quadratic_mean",
           "derive_second_moment", "derive_cubic_moment", "derive_quartic_moment"]


def _sym(name):
    from . import sym

    return sym(name)


def _scalar(u, M, v):
    """The scalar u^T M v (u, v D x 1) as the trace of a 1 x 1 product."""
    import sympy as sp

    return sp.Trace(sp.MatMul(u.T, M, v))


def _symmetric_part():
    """W = (W_QK + W_QK^T)/2, the symmetric W of Lemma 3."""
    import sympy as sp

    W = _sym("W_QK")
    return sp.MatAdd(W, W.T) / 2


def _apply_symmetry(expr):
    """Lemma 3's hypothesis W^T = W, then W -> (W_QK + W_QK^T)/2 (module docstring)."""
    import sympy as sp

    W = _sym("W_QK")
    expr = expr.xreplace({sp.Transpose(W): W})
    return expr.xreplace({W: _symmetric_part()})


@cache
def _z():
    """z ~ N(0, Sigma), the centred part of x = mu + z."""
    from ..gaussian import Gaussian

    return Gaussian("z", _sym("Sigma"))


def gaussian_moment(factors):
    """E[prod_k p_k^T W q_k] for x ~ N(mu, Sigma), each ``p_k, q_k`` in {"x", "a"}.

    Every ``x`` is split into ``mu`` (constant) and ``z`` (zero-mean Gaussian); the terms are
    reduced as in the module docstring. At most two factors (all Lemma 3 needs). Returns a
    scalar sympy expression in ``W_QK`` (general, not yet symmetrised), ``Sigma``, ``mu``, ``a_vec``.
    """
    import sympy as sp

    from ..gaussian import expectation

    if not 1 <= len(factors) <= 2:
        raise ValueError(f"factors: expected one or two bilinear factors, got {len(factors)}")
    W, mu, a = _sym("W_QK"), _sym("mu"), _sym("a_vec")
    z = _z()
    const = {"a": a, "mu": mu}
    slots = [s for f in factors for s in f]
    choices = [("mu", "z") if s == "x" else ("a",) for s in slots]
    total = sp.S.Zero
    for pick in product(*choices):
        chunks = [pick[2 * k: 2 * k + 2] for k in range(len(factors))]
        n_z = sum(s == "z" for s in pick)
        if n_z % 2:
            continue  # an odd moment of a zero-mean Gaussian (Isserlis)
        if n_z == 0:
            term = sp.Mul(*[_scalar(const[p], W, const[q]) for p, q in chunks])
        elif n_z == 4:
            term = expectation(z.row, W, z.col, z.row, W, z.col)
        elif any(c == ("z", "z") for c in chunks):  # z^T W z times a constant factor
            rest = [c for c in chunks if c != ("z", "z")]
            term = expectation(z.row, W, z.col) * sp.Mul(*[_scalar(const[p], W, const[q]) for p, q in rest])
        else:  # one z in each of the two factors: u_k^T M_k z
            turned = [(const[q], W.T) if p == "z" else (const[p], W) for p, q in chunks]
            (u1, M1), (u2, M2) = turned
            middle = expectation(M1, z.col, z.row, M2.T)  # M_1 E[z z^T] M_2^T
            term = sp.Trace(sp.MatMul(u1.T, middle, u2))
        total += term
    return total


def _tidy(expr):
    """Apply the symmetry (like terms combine once W^T is W)."""
    return _apply_symmetry(expr)


@cache
def derive_quadratic_mean():
    """Eq. 11: E[x^T W x]."""
    return _tidy(gaussian_moment([("x", "x")]))


@cache
def derive_second_moment():
    """Eq. 12: E[x x^T] = E[(mu + z)(mu + z)^T]; the cross terms are odd in z."""
    import sympy as sp

    from ..gaussian import expectation

    mu, z = _sym("mu"), _z()
    return sp.MatAdd(sp.MatMul(mu, mu.T), expectation(z.col, z.row)).doit()


@cache
def derive_cubic_moment():
    """Eq. 13: E[a^T W x x^T W x]."""
    return _tidy(gaussian_moment([("a", "x"), ("x", "x")]))


@cache
def derive_quartic_moment():
    """Eq. 14: E[x^T W x x^T W x]."""
    return _tidy(gaussian_moment([("x", "x"), ("x", "x")]))


# -- the paper's printed forms (in W = (W_QK + W_QK^T)/2) ----------------------------------------
def _printed_parts():
    import sympy as sp

    W, S, mu, a = _symmetric_part(), _sym("Sigma"), _sym("mu"), _sym("a_vec")
    trWS = sp.Trace(sp.MatMul(W, S))
    muWmu = _scalar(mu, W, mu)
    return W, S, mu, a, trWS, muWmu


def printed_quadratic_mean():
    """Eq. 11: tr(W Sigma) + mu^T W mu."""
    W, S, mu, a, trWS, muWmu = _printed_parts()
    return trWS + muWmu


def printed_second_moment():
    """Eq. 12: Sigma + mu mu^T."""
    import sympy as sp

    S, mu = _sym("Sigma"), _sym("mu")
    return sp.MatAdd(S, sp.MatMul(mu, mu.T))


def printed_cubic_moment():
    """Eq. 13: 2 a^T W Sigma W mu + a^T W mu {tr(W Sigma) + mu^T W mu}."""
    import sympy as sp

    W, S, mu, a, trWS, muWmu = _printed_parts()
    return 2 * _scalar(a, sp.MatMul(W, S, W), mu) + _scalar(a, W, mu) * (trWS + muWmu)


def printed_quartic_moment():
    """Eq. 14: 2 tr(W Sigma W Sigma) + tr(W Sigma)^2 + 4 mu^T W Sigma W mu + 2 tr(W Sigma) mu^T W mu
    + mu^T W mu mu^T W mu."""
    import sympy as sp

    W, S, mu, a, trWS, muWmu = _printed_parts()
    return (2 * sp.Trace(sp.MatMul(W, S, W, S)) + trWS**2 + 4 * _scalar(mu, sp.MatMul(W, S, W), mu)
            + 2 * trWS * muWmu + muWmu**2)


# -- records ------------------------------------------------------------------------------------
_HYP = ("x ~ N(mu, Sigma); W symmetric (evaluated at W = (W_QK + W_QK^T)/2, which is W_QK for "
        "a symmetric input). ")

register(ClosedForm(
    id="localization.gaussian.quadratic_mean",
    title="E[x^T W x] for x ~ N(mu, Sigma) (Lemma 3, eq. 11)",
    source="Lemma 3, eq. 11",
    status="exact",
    params=(SIGMA, W_SYM, MU),
    derive=derive_quadratic_mean,
    printed=printed_quadratic_mean,
    doc=_HYP + "tr(W Sigma) + mu^T W mu. Holds for any W if W is read as its symmetric part.",
))

register(ClosedForm(
    id="localization.gaussian.second_moment",
    title="E[x x^T] for x ~ N(mu, Sigma) (Lemma 3, eq. 12)",
    source="Lemma 3, eq. 12",
    status="exact",
    params=(SIGMA, MU),
    derive=derive_second_moment,
    printed=printed_second_moment,
    output="matrix",
    doc="x ~ N(mu, Sigma): Sigma + mu mu^T (the cross terms E[mu z^T] vanish).",
))

register(ClosedForm(
    id="localization.gaussian.cubic_moment",
    title="E[a^T W x x^T W x] for x ~ N(mu, Sigma) and fixed a (Lemma 3, eq. 13)",
    source="Lemma 3, eq. 13",
    status="exact",
    params=(SIGMA, W_SYM, MU, A_VEC),
    derive=derive_cubic_moment,
    printed=printed_cubic_moment,
    doc=_HYP + "2 a^T W Sigma W mu + a^T W mu {tr(W Sigma) + mu^T W mu}. Vanishes at mu = 0 (odd "
        "moment). For a general W the first term would read a^T W Sigma (W + W^T) mu.",
))

register(ClosedForm(
    id="localization.gaussian.quartic_moment",
    title="E[(x^T W x)^2] for x ~ N(mu, Sigma) (Lemma 3, eq. 14)",
    source="Lemma 3, eq. 14",
    status="exact",
    params=(SIGMA, W_SYM, MU),
    derive=derive_quartic_moment,
    printed=printed_quartic_moment,
    doc=_HYP + "2 tr(W Sigma W Sigma) + tr(W Sigma)^2 + 4 mu^T W Sigma W mu + 2 tr(W Sigma) mu^T W mu "
        "+ (mu^T W mu)^2; at mu = 0 the central fourth moment 2 tr((W Sigma)^2) + tr(W Sigma)^2.",
))
