"""The spectral lemmas behind Theorem 1 of Scan and Snap (Tian, Wang, Chen, Du 2023, App. D.5,
Lemmas 13-17, eqs. 74-80, 89-93, Assumption 2).

The attention vectors of the K classes have the Gram matrix ``F^T F = I + E`` (E symmetric, zero
diagonal, nonnegative off-diagonal entries ``f_n^T f_n'``), with eigenvalues ``lambda_i`` ordered by
magnitude, ``|lambda_1| >= ... >= |lambda_K|``. Theorem 1's coefficients are built from
``E' = I - (I + E)^{-1}``. Every record below is a scalar function of the spectrum, derived here:

* Lemma 14 (eqs. 75-77): the Neumann series ``sum_{n>=0} (-E)^n`` of ``(I + E)^{-1}`` summed by
  sympy on an eigenvalue: ``E'`` has the eigenvalue ``lambda/(1 + lambda)``; written in the
  eigenvalue ``mu = 1 + lambda`` of ``F^T F``, ``1 - 1/mu``.
* Lemma 15 (eq. 78) and eq. 90: the largest ``|x/(1 + x)|`` over ``|x| <= |lambda_1|`` (at
  ``x = -|lambda_1|``), ``|lambda_1|/(1 - |lambda_1|)``; at ``|lambda_1| = 1/K`` it is ``1/(K - 1)``.
* Lemma 17 (eq. 80): the largest ``|x - x/(1 + x)| = x^2/(1 + x)`` over ``|x| <= |lambda_1|``,
  ``lambda_1^2/(1 - |lambda_1|)`` (Cauchy-Schwarz does the rest).
* Eq. 93 (4th line): ``-E'_nn = sum_k lambda_k^2/(1 + lambda_k) u_nk^2`` (eq. 79) is at least the
  smallest ``x^2/(1 + x)`` over the spectrum, ``lambda_min^2/(1 + |lambda_1|)``.
* Eq. 93 (last line): ``1/2 lambda_min^2 - 3 K |lambda_1|/M``, the 1/2 justified for
  ``delta_1 >= -1/4`` and ``K >= 2``; positive (at least ``15/M``) under Assumption 2.
* Eq. 89: ``|delta_2|, |delta_3| <= 2 M (1 + 3 |delta_1|)/(M - 1)^2``.
* Assumption 2 with equal overlaps ``f_n^T f_n' = rho``: ``E = rho (J - I)`` has the eigenvalues
  ``rho (K - 1)`` and ``-rho``; ``rho (K-1) < 1/K`` and ``rho >= 6/sqrt(M)`` meet only when
  ``M > 36 K^2 (K - 1)^2``.

Errata: eq. 76 writes the series as ``sum_{n>=1} (-D^n)``, which sums to ``lambda/(1 - lambda)``,
not the ``-lambda/(1 + lambda)`` of eq. 75's ``(-D)^n`` that eq. 77 uses; eq. 93's 4th line divides
by ``1 - |lambda_1|`` where a lower bound needs ``1 + |lambda_1|``.

Contains
--------
``scan_snap.spectral.eprime_eigenvalue``, ``.eprime_radius``, ``.eprime_entry``, ``.eprime_gap``,
``.diagonal_bound``, ``.xi_lower_bound``, ``.delta_bound``, ``.assumption2_vocabulary``.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..params import index, positive
from ..registry import ClosedForm, register
from . import sym

MU = positive("mu", "An eigenvalue mu = 1 + lambda of the Gram matrix F^T F = I + E (0 < mu < 2: |lambda| < 1).",
              sample=(0.2, 1.8), example=0.8)
LAM1 = positive("lam1", "|lambda_1|, the largest eigenvalue magnitude of E (< 1; Assumption 2: < 1/K).",
                sample=(0.01, 0.9), example=0.2)
LAM_MIN = positive("lam_min", "min_i |lambda_i(E)|, the smallest eigenvalue magnitude of E (<= |lambda_1|).",
                   sample=(0.01, 0.5), example=0.1)
K2 = index("K", "Number of classes K >= 2.", low=2, sample=(2, 30), example=4)
M_V = index("M", "Vocabulary size M >= 2.", low=2, sample=(2, 10**5), example=1000)
DELTA1 = positive("delta1", "|delta_1| > 0 of eq. 87 (the relative error theta_n + (1 + theta_n)/(M - 1)).",
                     sample=(1e-4, 0.5), example=0.01)

__all__ = ["derive_eprime_eigenvalue", "printed_eprime_eigenvalue"]


def _x():
    import sympy as sp

    return sp.Symbol("x", real=True)


# -- Lemma 14 ---------------------------------------------------------------------------------------
@cache
def derive_eprime_eigenvalue():
    """lambda' = 1 - sum_{n>=0} (-lambda)^n (eq. 75 on one eigenvalue), lambda = mu - 1, |lambda| < 1."""
    import sympy as sp

    mu = sym("mu")
    n = sp.Symbol("n", integer=True, nonnegative=True)
    lam = sp.Symbol("lam", real=True)
    series = sp.summation((-lam) ** n, (n, 0, sp.oo))
    inverse = _converged(series, lam)                      # 1/(1 + lambda) for |lambda| < 1
    return sp.simplify((1 - inverse).subs(lam, mu - 1))


def printed_eprime_eigenvalue():
    """Eq. 76 read literally: E' = -U^T (sum_{n>=1} (-D^n)) U, i.e. lambda' = sum_{n>=1} lambda^n."""
    import sympy as sp

    mu = sym("mu")
    n = sp.Symbol("n", integer=True, positive=True)
    lam = sp.Symbol("lam", real=True)
    series = sp.summation(-(lam**n), (n, 1, sp.oo))
    return sp.simplify(-_converged(series, lam).subs(lam, mu - 1))


def _converged(series, lam):
    """The value of a geometric series on its disc of convergence |lam| < 1 (sympy's Piecewise)."""
    import sympy as sp

    series = sp.piecewise_fold(series)
    if isinstance(series, sp.Piecewise):
        value, cond = series.args[0]
        assert cond.subs(lam, sp.Rational(1, 2)) == sp.true and cond.subs(lam, -sp.Rational(1, 2)) == sp.true
        return value
    return series


# -- Lemmas 15, 17, eqs. 90, 93 ------------------------------------------------------------------------
@cache
def derive_eprime_radius():
    """max_{|x| <= |lambda_1|} |x/(1 + x)|: |x/(1 + x)| is decreasing on (-1, 0] and increasing on
    [0, 1), and the left end is the larger: |lambda_1|/(1 - |lambda_1|)."""
    x = _x()
    l1 = sym("lam1")
    on_left = -x / (1 + x)                                     # |x/(1+x)| for x in (-1, 0]
    on_right = x / (1 + x)                                     # for x in [0, 1)
    return _larger_end(on_left.subs(x, -l1), on_right.subs(x, l1))


@cache
def derive_eprime_gap():
    """max_{|x| <= |lambda_1|} |x - x/(1 + x)| = max x^2/(1 + x): at x = -|lambda_1| (eq. 80 with
    sum_k |u_nk u_n'k| <= 1)."""
    x = _x()
    l1 = sym("lam1")
    gap = x - x / (1 + x)
    return _larger_end(gap.subs(x, -l1), gap.subs(x, l1))


def _larger_end(left, right):
    """``left`` after proving left > right for every 0 < |lambda_1| < 1 (written |lambda_1| = 1/(1 + s),
    s > 0); the functions of x compared here are monotone on [-|lambda_1|, 0] and [0, |lambda_1|]."""
    import sympy as sp

    s = sp.Symbol("s", positive=True)
    diff = sp.factor(sp.simplify((left - right).subs(sym("lam1"), 1 / (1 + s))))
    assert diff.is_positive, diff
    return sp.factor(sp.simplify(left))


@cache
def derive_eprime_entry():
    """Eq. 90: |E'_kn| <= max_i |lambda_i(E')| (Lemma 13 applied to E') <= the radius at
    |lambda_1| -> 1/K (Assumption 2's ceiling)."""
    import sympy as sp

    return sp.simplify(derive_eprime_radius().subs(sym("lam1"), 1 / sym("K")))


@cache
def derive_diagonal_bound():
    """-E'_nn = sum_k lambda_k^2/(1 + lambda_k) u_nk^2 (eq. 79) with sum_k u_nk^2 = 1 is at least
    min_k lambda_k^2/(1 + lambda_k) >= lambda_min^2/(1 + |lambda_1|) (numerator at least lambda_min^2,
    denominator at most 1 + |lambda_1|)."""
    return sym("lam_min") ** 2 / (1 + sym("lam1"))


def printed_diagonal_bound():
    """Eq. 93, 4th line (delta_1 = delta_3 = 0, 1 + sigma = 1): min_i |lambda_i|^2/(1 - |lambda_1|)."""
    return sym("lam_min") ** 2 / (1 - sym("lam1"))


@cache
def derive_xi_lower_bound():
    """Eq. 93's last line: (1 + delta_1) lambda_min^2/(1 + |lambda_1|) - (3/M) K |lambda_1| (the 4th
    line corrected, eq. 90 and |delta_3| < 3/M) with (1 + delta_1)/(1 + |lambda_1|) >= 1/2, which
    holds for delta_1 >= -1/4 and |lambda_1| < 1/K <= 1/2 (the corner is checked here)."""
    import sympy as sp

    d, l1, lm, K, M = sp.Symbol("d", real=True), sym("lam1"), sym("lam_min"), sym("K"), sym("M")
    ratio = (1 + d) / (1 + l1)
    corner = ratio.subs({d: -sp.Rational(1, 4), l1: sp.Rational(1, 2)})
    assert corner == sp.Rational(1, 2)                 # the smallest ratio on d >= -1/4, l1 <= 1/2
    return corner * lm**2 - 3 * K * l1 / M


def printed_xi_lower_bound():
    return sym("lam_min") ** 2 / 2 - 3 * sym("K") * sym("lam1") / sym("M")


@cache
def derive_delta_bound():
    """Eq. 89: |delta_3| = |q_0| |(1 + theta_n') - sum_{k != n} (1 + theta_k) E'_kn'| <= |q_0| (1 + max|theta|)
    (1 + (K - 1)/(K - 1)) by eq. 90, with q_0 = -M/(M - 1)^2 (App. D.1) and max|theta| <= 3 |delta_1| as the
    paper takes it; delta_2 has one term fewer."""
    M, d1 = sym("M"), sym("delta1")
    q0 = -M / (M - 1) ** 2
    return abs(q0) * 2 * (1 + 3 * d1)


@cache
def derive_assumption2_vocabulary():
    """Equal overlaps rho: E = rho (J - I) has the eigenvalues rho (K - 1) (eigenvector 1) and -rho
    (K - 1 times), so |lambda_1| = rho (K - 1) and min |lambda_i| = rho (K >= 2). Assumption 2 asks
    rho (K - 1) < 1/K and rho >= 6/sqrt(M): the two meet when 6/sqrt(M) < 1/(K (K - 1))."""
    import sympy as sp

    K = sym("K")
    rho = sp.Symbol("rho", positive=True)
    J = sp.ones(3, 3)                                   # the eigenvalues of J - I checked at K = 3
    assert sorted((J - sp.eye(3)).eigenvals()) == [-1, 2]
    lam1, lam_min = rho * (K - 1), rho
    rho_max = sp.solve(sp.Eq(lam1, 1 / K), rho)[0]
    m = sp.Symbol("m", positive=True)
    (boundary,) = sp.solve(sp.Eq(6 / sp.sqrt(m), lam_min.subs(rho, rho_max)), m)
    return sp.expand(boundary)


# -- numerics -----------------------------------------------------------------------------------------
def _radius_domain(values, dims):
    if np.any(np.asarray(values["lam1"]) >= 1):
        raise ValueError("lam1: |lambda_1| must be < 1 (Lemma 14: the Neumann series converges), got "
                         f"{values['lam1']!r}")


def _mu_domain(values, dims):
    if np.any(np.asarray(values["mu"]) >= 2):
        raise ValueError(f"mu: an eigenvalue of F^T F = I + E needs |lambda| = |mu - 1| < 1 (Lemma 14), got "
                         f"{values['mu']!r}")


def _spectrum_domain(values, dims):
    _radius_domain(values, dims)
    if np.any(np.asarray(values["lam_min"]) > np.asarray(values["lam1"])):
        raise ValueError("lam_min: min |lambda_i| cannot exceed |lambda_1| (the largest magnitude)")


# -- registry -----------------------------------------------------------------------------------------
_GRAM = ("E = F^T F - I (symmetric, zero diagonal, off-diagonal f_n^T f_n' >= 0), eigenvalues ordered by "
         "magnitude |lambda_1| >= ... >= |lambda_K|; E' = I - (I + E)^{-1} (Lemma 14).")

register(ClosedForm(
    id="scan_snap.spectral.eprime_eigenvalue",
    title="Lemma 14: the eigenvalue of E' = I - (I + E)^{-1}, lambda/(1 + lambda) = 1 - 1/mu",
    source="Lemma 14, eqs. 75-77",
    status="exact",
    params=(MU,),
    derive=derive_eprime_eigenvalue,
    printed=printed_eprime_eigenvalue,
    domain=_mu_domain,
    example={"mu": 0.8},
    doc="E' shares E's eigenvectors; on the eigenvalue lambda of E (mu = 1 + lambda of F^T F) it is "
        "1 - sum_{n>=0} (-lambda)^n = lambda/(1 + lambda) for |lambda| < 1. " + _GRAM,
    erratum="Eq. 76 writes the Neumann series as I + U^T (sum_{n>=1} (-D^n)) U: read literally, -D^n sums to "
            "E' = U^T D' U with lambda' = lambda/(1 - lambda). The series of eq. 75, sum (-1)^n E^n = "
            "U^T sum (-D)^n U, has -lambda/(1 + lambda) (the fact eq. 77 then quotes), so eq. 77's "
            "lambda' = lambda/(1 + lambda) is right and eq. 76 should read sum_{n>=1} (-D)^n.",
))

register(ClosedForm(
    id="scan_snap.spectral.eprime_radius",
    title="Lemma 15: max_i |lambda_i(E')| <= |lambda_1|/(1 - |lambda_1|)",
    source="Lemma 15, eq. 78",
    status="exact",
    params=(LAM1,),
    derive=derive_eprime_radius,
    printed=lambda: sym("lam1") / (1 - sym("lam1")),
    domain=_radius_domain,
    doc="The largest |x/(1 + x)| over |x| <= |lambda_1| < 1, attained at x = -|lambda_1| (so the bound is "
        "sharp when -|lambda_1| is an eigenvalue of E). Lemma 15 states it with any lambda >= |lambda_1| in "
        "the denominator; this record is the sharp case lambda = |lambda_1|. " + _GRAM,
))

register(ClosedForm(
    id="scan_snap.spectral.eprime_entry",
    title="Eq. 90: |E'_kn| <= 1/(K - 1) under Assumption 2 (|lambda_1| < 1/K)",
    source="eq. 90",
    status="exact",
    params=(K2,),
    derive=derive_eprime_entry,
    printed=lambda: 1 / (sym("K") - 1),
    doc="An entry of a symmetric matrix is at most its spectral radius (Lemma 13 applied to E'), which is at "
        "most |lambda_1|/(1 - |lambda_1|) (Lemma 15) < (1/K)/(1 - 1/K) = 1/(K - 1). " + _GRAM,
))

register(ClosedForm(
    id="scan_snap.spectral.eprime_gap",
    title="Lemma 17: |E'_nn' - E_nn'| <= lambda_1^2/(1 - |lambda_1|)",
    source="Lemma 17, eq. 80",
    status="exact",
    params=(LAM1,),
    derive=derive_eprime_gap,
    printed=lambda: sym("lam1") ** 2 / (1 - sym("lam1")),
    domain=_radius_domain,
    doc="E - E' = U^T diag(lambda_k^2/(1 + lambda_k)) U; |lambda^2/(1 + lambda)| over |lambda| <= |lambda_1| is "
        "largest at -|lambda_1|, and sum_k |u_nk u_n'k| <= 1 (Cauchy-Schwarz). " + _GRAM,
))

register(ClosedForm(
    id="scan_snap.spectral.diagonal_bound",
    title="Eq. 93 (4th line, via eq. 79): -E'_nn >= lambda_min^2/(1 + |lambda_1|)",
    source="Lemma 16, eqs. 79, 93",
    status="exact",
    params=(LAM_MIN, LAM1),
    derive=derive_diagonal_bound,
    printed=printed_diagonal_bound,
    domain=_spectrum_domain,
    example={"lam_min": 0.2, "lam1": 0.2},
    doc="-E'_nn = sum_k lambda_k^2/(1 + lambda_k) u_nk^2 (eq. 79, Lemma 16) is a convex combination of the "
        "lambda_k^2/(1 + lambda_k), each at least lambda_min^2/(1 + |lambda_1|). " + _GRAM,
    erratum="Eq. 93's 4th line bounds sum_k lambda_k^2/(1 + lambda_k) u_nk^2 from below by min_i |lambda_i|^2/(1 - "
            "|lambda_1|), which is larger than every term lambda^2/(1 + lambda) with lambda > -|lambda_1|: with "
            "K = 2 and f_1^T f_2 = rho (eigenvalues +-rho) -E'_nn = rho^2/(1 - rho^2) < rho^2/(1 - rho). A lower bound "
            "needs 1 + |lambda_1|; the last line (1/2 lambda_min^2 - 3 K |lambda_1|/M) still follows.",
))

register(ClosedForm(
    id="scan_snap.spectral.xi_lower_bound",
    title="Eq. 93: xi_n/(gamma (1 + sigma)) > 1/2 lambda_min^2 - 3 K |lambda_1|/M (Theorem 1(a))",
    source="Theorem 1(a), eq. 93",
    status="exact",
    params=(LAM_MIN, LAM1, K2, M_V),
    derive=derive_xi_lower_bound,
    printed=printed_xi_lower_bound,
    domain=_spectrum_domain,
    doc="sum_{n' != n} beta_nn' f_n^T f_n' = (1 + sigma)[-(1 + delta_1) E'_nn + delta_3 sum_n' E_nn'] (eqs. 89, 92) "
        "with -E'_nn >= lambda_min^2/(1 + |lambda_1|) (record diagonal_bound), |delta_3| < 3/M and sum_n' E_nn' "
        "<= K |lambda_1| (Lemma 13). Under Assumption 2 (lambda_min >= 6/sqrt(M), |lambda_1| < 1/K) it is at "
        "least 18/M - 3/M = 15/M > 0. " + _GRAM,
))

register(ClosedForm(
    id="scan_snap.spectral.delta_bound",
    title="Eq. 89: |delta_2|, |delta_3| <= 2 M (1 + 3 |delta_1|)/(M - 1)^2 (< 3/M)",
    source="proof of Theorem 1, eqs. 87, 89",
    status="exact",
    params=(M_V, DELTA1),
    derive=derive_delta_bound,
    printed=lambda: sym("M") / (sym("M") - 1) ** 2 * 2 * (1 + 3 * sym("delta1")),
    doc="delta_2 = -q_0 sum_{k != n} (1 + theta_k) E'_kn (eq. 86 against 87) and delta_3 = -q_0 (1 + theta_n') + "
        "q_0 sum_{k != n} (1 + theta_k) E'_kn' (eq. 88 with the corrected sign, against 89); eq. 90 bounds "
        "sum_k |E'_kn| by 1. Below 3/M once 2 M^2 (1 + 3 |delta_1|) < 3 (M - 1)^2 (M >= 7 at delta_1 = 0.01).",
))

register(ClosedForm(
    id="scan_snap.spectral.assumption2_vocabulary",
    title="Assumption 2 with equal overlaps f_n^T f_n' = rho: feasible only for M > 36 K^2 (K - 1)^2",
    source="Assumption 2",
    status="exact",
    params=(K2,),
    derive=derive_assumption2_vocabulary,
    doc="E = rho (J - I) has eigenvalues rho (K - 1) and -rho: |lambda_1| < 1/K needs rho < 1/(K (K - 1)), "
        "|lambda_i| >= 6/sqrt(M) needs rho >= 6/sqrt(M); both hold for some rho exactly when M exceeds this "
        "value (5184 at K = 4, 291600 at K = 10). For any E, |lambda_K| <= |lambda_1| gives the weaker necessary "
        "M > 36 K^2. Syn-Small (K = 2, M = 34 with f_1^T f_2 = 0.72 at Z = 0) violates both conditions.",
))
