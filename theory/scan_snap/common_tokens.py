"""Several common tokens in the symmetric case of Scan and Snap (Tian, Wang, Chen, Du 2023,
Corollary 2, eqs. 101-107).

Corollary 2's setting: all K classes share one query; their distinct tokens are images of each other
under bijections that keep ``P(l|n)``; every common token ``l`` has the same ``P(l|n) = rho_l`` in
every class; ``Z(0) = 0``. Then (eqs. 101-106) the symmetry persists, every class has the same
normaliser, ``f_nl = f_l`` on a common token for every ``n``, and every overlap is the same,
``q = f_n^T f_n' = sum_{l in G_CT} f_l^2``. Derived here (sympy):

* Eq. 107: the per-pair term of eq. 97 for a common token, ``f_l ((f_n^T f_n') f_l - f_l) = -f_l^2 (1 - q)``.
* The rate: ``E = q (J - I)``, so ``I + E = (1 - q) I + q J`` and (Sherman-Morrison)
  ``(I + E)^{-1} = (I - q/(1 + (K - 1) q) J)/(1 - q)``; the off-diagonal entry of ``E' = I - (I + E)^{-1}``
  is ``beta = q/((1 - q)(1 + (K - 1) q)) > 0`` (Theorem 1's ``beta`` to leading order), and eq. 10 with
  its class sum averaged (expected batch-1 SGD) gives
  ``dz_l/(eta_Z gamma) = -(K - 1) beta f_l^2 (1 - q) = -(K - 1) q f_l^2/(1 + (K - 1) q) < 0``.

Contains
--------
``scan_snap.common_tokens.pair_term``, ``.rate``.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..params import index, positive
from ..registry import ClosedForm, register
from . import sym

F_L = positive("f_l", "Entry f_nl = f_l (the same in every class) of the normalised attention on a common token.",
               sample=(0.05, 0.6), example=0.3)
Q_OV = positive("q", "Overlap q = f_n^T f_n' = sum over the common tokens of f_l^2 (the same for every pair, < 1).",
                sample=(0.1, 0.9), example=0.4)
K2 = index("K", "Number of classes K >= 2 (one shared query).", low=2, sample=(2, 30), example=4)

__all__ = ["symmetric_eprime"]


@cache
def derive_pair_term():
    """f_nl [(f_n^T f_n') f_nl - f_n'l] with f_nl = f_n'l = f_l and f_n^T f_n' = q."""
    import sympy as sp

    f, q = sym("f_l"), sym("q")
    return sp.factor(f * (q * f - f))


@cache
def symmetric_eprime():
    """(diagonal, off-diagonal) entries of E' = I - (I + E)^{-1} for E = q (J - I), K x K: the inverse of
    a I + b J is (I - b/(a + K b) J)/a (Sherman-Morrison), checked at K = 3 against sympy's inverse."""
    import sympy as sp

    K, q = sym("K"), sym("q")
    a, b = 1 - q, q
    inv_diag = (1 - b / (a + K * b)) / a
    inv_off = -(b / (a + K * b)) / a
    qq = sp.Rational(1, 5)
    E3 = qq * (sp.ones(3, 3) - sp.eye(3))
    ref = (sp.eye(3) + E3).inv()
    assert sp.simplify(ref[0, 0] - inv_diag.subs({K: 3, q: qq})) == 0
    assert sp.simplify(ref[0, 1] - inv_off.subs({K: 3, q: qq})) == 0
    return sp.simplify(1 - inv_diag), sp.simplify(-inv_off)


@cache
def derive_rate():
    """(1/K) sum_n f_l sum_{n' != n} beta (q f_l - f_l) (eq. 10 averaged over the K classes, eq. 107)."""
    import sympy as sp

    K = sym("K")
    _, beta = symmetric_eprime()
    per_class = (K - 1) * beta * derive_pair_term()
    return sp.factor(sp.simplify(per_class))


def printed_pair_term():
    """Eq. 107: -f_l^2 (1 - f_n^T f_n')."""
    return -sym("f_l") ** 2 * (1 - sym("q"))


def _overlap_domain(values, dims):
    q, f = np.asarray(values["q"]), np.asarray(values["f_l"])
    if np.any(q >= 1):
        raise ValueError("q: the overlap of two distinct unit vectors with distinct tokens must be < 1, got "
                         f"{values['q']!r}")
    if np.any(f**2 > q * (1 + 1e-12)):
        raise ValueError("f_l: f_l^2 is one term of q = sum_{l in G_CT} f_l^2, so f_l^2 <= q")


register(ClosedForm(
    id="scan_snap.common_tokens.pair_term",
    title="Corollary 2, eq. 107: per-pair term of a common token in the symmetric case, -f_l^2 (1 - q)",
    source="Corollary 2, eq. 107",
    status="exact",
    params=(F_L, Q_OV),
    derive=derive_pair_term,
    printed=printed_pair_term,
    domain=_overlap_domain,
    doc="With f_nl = f_n'l = f_l and f_n^T f_n' = q (eqs. 101-106), the term f_nl [(f_n^T f_n') f_nl - f_n'l] of eq. "
        "97 is -f_l^2 (1 - q) < 0 for every pair, however many common tokens there are.",
))

register(ClosedForm(
    id="scan_snap.common_tokens.rate",
    title="Corollary 2: dz_l/(eta_Z gamma) = -(K - 1) q f_l^2/(1 + (K - 1) q) for every common token l",
    source="Corollary 2 (eqs. 10, 101-107, beta = E')",
    status="exact",
    params=(K2, Q_OV, F_L),
    derive=derive_rate,
    domain=_overlap_domain,
    doc="Eq. 10 with Theorem 1's beta = E' (leading order) and its class sum averaged (expected batch-1 SGD; the "
        "literal sum is K times this): E = q (J - I), beta = q/((1 - q)(1 + (K - 1) q)), and each of the K - 1 pairs "
        "contributes beta times eq. 107. Negative for every common token, so all of them fall (Corollary 2).",
))
