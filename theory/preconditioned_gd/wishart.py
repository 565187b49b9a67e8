"""Trace moments of a real white Wishart matrix, by the loop equations (Gaussian integration by parts).

With ``G`` a ``d x n`` matrix of i.i.d. standard normal entries, ``W = G G^T ~ W_d(n, I)``
and ``S_u = W / n`` is the empirical covariance of ``n`` white samples ``u_i ~ N(0, I_d)``.
The preconditioned-GD loss of Ahn et al. (2023) on the critical set of Theorem 3 is a
quadratic form in the moments ``m_k = E tr S_u^k`` (see :mod:`theory.preconditioned_gd.multi_layer`),
the GD++ loss of Theorem 4 a linear form in them (:mod:`theory.preconditioned_gd.gdpp`).

The loop equations
------------------
Gaussian integration by parts, ``E[G_ij F(G)] = E[dF/dG_ij]``, applied to the last factor
``W = G G^T`` of ``tr W^k = sum_ij G_ij (G^T W^{k-1})_ji`` gives, for any product
``Pi = prod_i tr W^{m_i}`` of further traces (``tr W^0 = d``)::

    E[tr W^k Pi] = (n + k - 1) E[tr W^{k-1} Pi]
                   + sum_{a=1}^{k-1} E[tr W^a tr W^{k-1-a} Pi]
                   + sum_i 2 m_i E[tr W^{k+m_i-1} Pi / tr W^{m_i}]

(``n``: the derivative of ``G_ij`` itself, summed over the ``n`` columns; ``k - 1``: the
derivative of one of the ``k - 1`` other factors ``W`` that closes back into one trace; the sum
over ``a``: the same derivative splitting the trace in two, the real-Gaussian ("twisted")
term; the last sum: the derivative of another trace, ``d tr W^m = 2 m tr(W^{m-1} G dG^T)``,
joining the two traces). Every term has total degree ``sum k_i`` one lower, so the multi-trace
moments ``E prod_i tr W^{k_i}``, memoised over the partitions ``(k_1 >= k_2 >= ...)``, are
exact polynomials in ``n, d`` with nonnegative integer coefficients. Checks: ``k = 1`` gives
``n d``, ``k = 2`` gives ``n d (n + d + 1)``.

Cost: the states are the partitions of the totals up to ``K``, each computed once from about
``K`` others, so ``E tr W^K`` costs ``sum_{j <= K} p(j)`` (``p`` the partition numbers,
``exp(pi sqrt(2 j / 3))`` growth: not polynomial, but small where the records need it): at
integer ``n, d`` (Python integers, :func:`exact_moments`) measured on one core: ``K = 9``
(``L = 4`` layers) 0.2 ms, ``K = 17`` 2 ms, ``K = 25`` 0.014 s, ``K = 33`` 0.09 s, ``K = 41``
0.5 s (the terms grouped as in :meth:`_LoopEquations._expand`; one state per term took about 3x
as long); as polynomials in ``ZZ[n, d]`` (:func:`trace_moment` with symbols) ``K = 9`` 0.05 s,
``K = 17`` 0.07 s. The former enumeration of the ``(2K - 1)!!`` Wick matchings
(:func:`matching_counts`, kept as an independent reference) needed 3 s at ``K = 6`` and
about an hour at ``K = 9``.

Checks: the matching counts for ``k <= 7`` and the ``d = 1`` chi-square moments
``E (chi^2_n)^k = n (n + 2) ... (n + 2k - 2)`` (tests), ``E (tr W)^2 = n d (n d + 2)``
(``tr W ~ chi^2_{nd}``), the Isserlis engine of :mod:`theory.gaussian` (``k <= 4``), and
sampled Wishart matrices for ``k = 1..8`` (``preconditioned_gd.wishart.mc_trace_moments``).

Contains
--------
:func:`multi_trace_moment` ``E prod_i tr W^{k_i}`` (polynomial in ``n, d``, or an integer at integer ``n, d``)
:func:`trace_moment`       ``E tr W^k``
:func:`normalized_moment`  ``m_k = E tr S_u^k = E tr W^k / n^k``, written in powers of ``1/n``
:func:`moments`            ``(m_0, ..., m_K)`` in the symbols ``n, d``
:func:`exact_moments`      ``(m_0, ..., m_K)`` as exact fractions at integer ``n, d``
:func:`matching_counts`    the Wick-matching enumeration (exponential; the independent reference)
``preconditioned_gd.wishart.trace_moments``   the record of ``m_1, ..., m_6``
``preconditioned_gd.wishart.trace_moment``    the record of ``m_k`` for any ``k <= 48``

References
----------
.. [1] L. Isserlis, Biometrika 12 (1918) (the pairing formula); Gaussian integration by parts
   (Stein's identity) gives the loop (Schwinger-Dyson) equations above.
.. [2] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement
   preconditioned gradient descent for in-context learning", NeurIPS 2023, App. B.2
   (the loss on the set A_l = a_l Sigma^{-1} reduces to white Wishart spectra).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from ..params import index
from ..registry import ClosedForm, register

if TYPE_CHECKING:  # sympy is imported where an expression is built, not with the module
    import sympy as sp

__all__ = ["multi_trace_moment", "trace_moment", "normalized_moment", "moments", "exact_moments",
           "matching_counts", "to_number", "N_CTX", "D_DIM", "MAX_MOMENT"]

#: Moments m_1..m_K of the vector record (the loss of L <= 3 layers needs m_1..m_6).
RECORD_MOMENTS = 6
#: Largest k of the record ``trace_moment`` (about 3 s for the first call at a new (n, d)).
MAX_MOMENT = 48

N_CTX = index("n", "Context length (examples before the query).")
D_DIM = index("d", "Covariate dimension.", sample=(1, 9))


# -- the loop equations ----------------------------------------------------------------------
class _LoopEquations:
    """``E prod_i tr W^{k_i}`` by the loop equations (module docstring), memoised over partitions.

    ``n`` and ``d`` are Python integers (exact values) or generators of a polynomial ring
    (exact polynomials); ``one`` is the unit of that arithmetic.
    """

    def __init__(self, n, d, one):
        self.n, self.d = n, d
        self.memo: dict[tuple, object] = {(): one}

    def __call__(self, parts: tuple):
        """``parts``: a partition, sorted in descending order, of positive integers."""
        value = self.memo.get(parts)
        if value is None:
            value = self.memo[parts] = self._expand(parts)
        return value

    def _expand(self, parts: tuple):
        # the loop equation above, its terms grouped: the split traces (a, k - 1 - a) and (k - 1 - a, a)
        # are one state, a = k - 1 is tr W^{k-1} times tr W^0 = d, and equal traces of Pi join alike
        k, rest = parts[0], parts[1:]
        if k == 1:
            total = self.n * self.d * self(rest)
        else:
            total = (self.n + (k - 1) + self.d) * self(_merged(rest, (k - 1,)))
        for a in range(1, (k - 1) // 2 + 1):
            b = k - 1 - a
            term = self(_merged(rest, (a, b) if a == b else (b, a)))
            total = total + (term if a == b else 2 * term)
        seen = None
        for i, m in enumerate(rest):
            if m == seen:
                continue
            seen, count = m, rest.count(m)
            total = total + (2 * m * count) * self(_merged(rest[:i] + rest[i + 1:], (k + m - 1,)))
        return total


def _merged(rest: tuple, new: tuple) -> tuple:
    """The partition ``rest`` (descending) with the parts ``new`` (descending, positive) added."""
    return tuple(sorted(rest + new, reverse=True)) if rest else new


@cache
def _polynomial_engine():
    """The loop equations over the polynomial ring ``ZZ[n, d]`` (one per process)."""
    from sympy import ZZ
    from sympy.polys.rings import ring

    R, n, d = ring("n, d", ZZ)
    return R, _LoopEquations(n, d, R.one)


@lru_cache(maxsize=64)
def _integer_engine(n: int, d: int) -> _LoopEquations:
    return _LoopEquations(n, d, 1)


def _partition(parts) -> tuple:
    for k in parts:
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"parts: expected integers >= 0, got {parts!r}")
    return tuple(sorted(parts, reverse=True))


def multi_trace_moment(parts, n, d):
    """``E prod_i tr W^{k_i}`` for ``W ~ W_d(n, I)`` and ``parts = (k_1, k_2, ...)`` (``k_i >= 0``,
    ``tr W^0 = d``). At integer ``n, d`` (Python ``int``) an exact integer; otherwise a sympy
    polynomial in ``n, d`` (the polynomial of ``ZZ[n, d]`` with ``n``, ``d`` substituted)."""
    key = _partition(parts)
    zeros = sum(1 for k in key if k == 0)
    key = tuple(k for k in key if k > 0)
    if isinstance(n, int) and isinstance(d, int) and not isinstance(n, bool) and not isinstance(d, bool):
        if n < 1 or d < 1:
            raise ValueError(f"n, d: expected integers >= 1, got {n!r}, {d!r}")
        return _integer_engine(n, d)(key) * d**zeros
    R, engine = _polynomial_engine()
    return engine(key).as_expr(n, d) * d**zeros


def trace_moment(k: int, n: sp.Expr, d: sp.Expr) -> sp.Expr:
    """``E tr W^k`` for ``W ~ W_d(n, I)`` (``k >= 0``; ``k = 0`` gives ``d``)."""
    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k: expected an integer >= 0, got {k!r}")
    return multi_trace_moment((k,), n, d)


def normalized_moment(k: int, n: sp.Expr, d: sp.Expr) -> sp.Expr:
    """``m_k = E tr S_u^k = E tr W^k / n^k``, as a sum of ``d^r n^(c - k)`` terms
    (``c <= k``: nonnegative powers of ``1/n`` only, positive coefficients, no cancellation)."""
    import sympy as sp

    if not isinstance(k, int) or k < 0:
        raise ValueError(f"k: expected an integer >= 0, got {k!r}")
    if k == 0:
        return d
    R, engine = _polynomial_engine()
    poly = engine((k,))
    return sp.Add(*[c * d**j * n**(i - k) for (i, j), c in sorted(poly.terms())])


@cache
def moments(K: int = RECORD_MOMENTS) -> tuple:
    """``(m_0, ..., m_K)`` with ``m_0 = d`` and ``m_k = E tr S_u^k``."""
    from . import sym

    n, d = sym("n"), sym("d")
    return tuple(normalized_moment(k, n, d) for k in range(K + 1))


def exact_moments(n: int, d: int, K: int) -> tuple[Fraction, ...]:
    """``(m_0, ..., m_K)`` at integer ``n, d`` as exact fractions (``m_k = E tr W^k / n^k``).

    The integer loop equations are memoised per ``(n, d)`` (the 64 most recent pairs), so a
    second call at the same pair costs only the moments not yet computed."""
    engine = _integer_engine(int(n), int(d))
    return tuple(Fraction(engine((k,)) if k else d, n**k) for k in range(K + 1))


def to_number(x: Fraction, backend: str = "numpy"):
    """An exact fraction in ``backend``: a float (``inf`` where it exceeds float64; one rounding),
    an ``mpmath.mpf`` at the working precision, or a float64 tensor."""
    if backend == "mpmath":
        import mpmath

        return mpmath.mpf(x.numerator) / x.denominator
    try:
        value = float(x)
    except OverflowError:
        value = float("inf") if x > 0 else float("-inf")
    if backend == "torch":
        import torch

        return torch.as_tensor(value, dtype=torch.float64)
    return value


# -- the independent reference: Wick matchings ----------------------------------------------
def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        i = parent[i]
    return i


@cache
def matching_counts(k: int) -> dict[tuple[int, int], int]:
    """Numbers of perfect matchings of the ``2k`` entries of ``tr (G G^T)^k`` by the numbers
    ``(r, c)`` of row and column index classes they leave (Isserlis: ``E tr W^k = sum_{(r, c)}
    count * d^r * n^c``).

    Write ``tr W^k = sum G[i_1, j_1] G[i_2, j_1] G[i_2, j_2] ... G[i_1, j_k]``: entry ``2t`` is
    ``G[i_t, j_t]``, entry ``2t + 1`` is ``G[i_{t+1}, j_t]``; a matching contributes
    ``d^r n^c`` with ``r`` (``c``) the connected components of the row (column) index variables
    glued by its pairs (every matching, twisted ones included: real entries). A depth-first walk
    with an undoable union-find, O(1) amortised per matching, but ``(2k - 1)!!`` matchings
    (``k = 6``: 10395, 3 s; ``k = 8``: 2 027 025): kept as the independent reference of the loop
    equations (tests), not used by the records.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k: expected an integer >= 1, got {k!r}")
    rows_of = [(t if e == 0 else (t + 1) % k) for t in range(k) for e in (0, 1)]
    cols_of = [t for t in range(k) for _ in (0, 1)]
    row_parent, col_parent = list(range(k)), list(range(k))
    counts: Counter = Counter()
    free = list(range(2 * k))

    def union(parent, a, b):
        ra, rb = _find(parent, a), _find(parent, b)
        if ra == rb:
            return None
        parent[rb] = ra
        return rb

    def walk(rows_left: int, cols_left: int):
        if len(free) == 2:  # the last pair: count its merges without another call
            p, q = free
            r = rows_left - (_find(row_parent, rows_of[p]) != _find(row_parent, rows_of[q]))
            c = cols_left - (_find(col_parent, cols_of[p]) != _find(col_parent, cols_of[q]))
            counts[(r, c)] += 1
            return
        p = free.pop(0)
        for idx in range(len(free)):
            q = free.pop(idx)
            ur = union(row_parent, rows_of[p], rows_of[q])
            uc = union(col_parent, cols_of[p], cols_of[q])
            walk(rows_left - (ur is not None), cols_left - (uc is not None))
            if ur is not None:
                row_parent[ur] = ur
            if uc is not None:
                col_parent[uc] = uc
            free.insert(idx, q)
        free.insert(0, p)

    walk(k, k)
    return dict(counts)


# -- records ----------------------------------------------------------------------------------
def derive_trace_moments():
    import sympy as sp

    return sp.ImmutableMatrix(moments(RECORD_MOMENTS)[1:])


def derive_trace_moment():
    """The defining relation of ``m_k``: the loop equations (module docstring) evaluated exactly
    at the integers ``n, d``; shown as ``m_k = E tr W^k / n^k``."""
    import sympy as sp

    from . import sym

    k, n = sym("k"), sym("n")
    return sp.Eq(sp.Function("m")(k), sp.Function("E_trW")(k) / n**k)


def _trace_moment(backend, values, dims):
    n, d, k = int(values["n"]), int(values["d"]), int(values["k"])
    return to_number(exact_moments(n, d, k)[k], backend)


register(ClosedForm(
    id="preconditioned_gd.wishart.trace_moments",
    title="Wishart trace moments m_k = E tr S_u^k, k = 1..6",
    source="App. B.2 (moments entering the loss on S) [derived]",
    status="exact",
    params=(N_CTX, D_DIM),
    derive=derive_trace_moments,
    output="vector",
    doc="S_u = (1/n) sum_{i<=n} u_i u_i^T with u_i ~ N(0, I_d), i.e. W/n with W ~ W_d(n, I). "
        "Derived by the loop equations (Gaussian integration by parts, memoised over partitions; "
        "equal to the count of Wick pairings, twisted ones included); output [m_1, ..., m_6]. "
        "Any k: preconditioned_gd.wishart.trace_moment.",
))

register(ClosedForm(
    id="preconditioned_gd.wishart.trace_moment",
    title="Wishart trace moment m_k = E tr S_u^k for any k (loop equations, exact at integer n, d)",
    source="App. B.2 (moments entering the loss on S) [derived]",
    status="exact",
    params=(N_CTX, D_DIM, index("k", f"Order of the moment, 0 <= k <= {MAX_MOMENT}.", low=0, high=MAX_MOMENT,
                                sample=(0, 16))),
    derive=derive_trace_moment,
    evaluate=_trace_moment,
    doc="m_k = E tr W^k / n^k, W ~ W_d(n, I), computed exactly (integers) by the loop equations "
        "E[tr W^k Pi] = (n+k-1) E[tr W^{k-1} Pi] + sum_{a=1}^{k-1} E[tr W^a tr W^{k-1-a} Pi] "
        "+ sum_i 2 m_i E[tr W^{k+m_i-1} Pi / tr W^{m_i}] (tr W^0 = d), memoised over partitions "
        "and per (n, d), then rounded once. m_0 = d. Cost of the first call at a new (n, d): "
        "k = 9: 0.5 ms, k = 25: 0.15 s, k = 33: 0.9 s, k = 41: 3.2 s (one core).",
))
