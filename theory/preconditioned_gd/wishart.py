"""Trace moments of a real white Wishart matrix, by Wick pairings (genus expansion).

With ``G`` a ``d x n`` matrix of i.i.d. standard normal entries, ``W = G G^T ~ W_d(n, I)``
and ``S_u = W / n`` is the empirical covariance of ``n`` white samples ``u_i ~ N(0, I_d)``.
The preconditioned-GD loss of Ahn et al. (2023) on the critical set of Theorem 3 is a
quadratic form in the moments ``m_k = E tr S_u^k`` (see :mod:`theory.preconditioned_gd.multi_layer`).

How the moments are counted
---------------------------
Write ``tr W^k = sum G[i_1, j_1] G[i_2, j_1] G[i_2, j_2] G[i_3, j_2] ... G[i_1, j_k]`` over
row indices ``i_1..i_k`` (range d) and column indices ``j_1..j_k`` (range n), ``i_{k+1} = i_1``.
The word has ``2k`` entries: entry ``2t`` is ``G[i_t, j_t]`` and entry ``2t + 1`` is
``G[i_{t+1}, j_t]`` (0-based ``t``). By Isserlis' theorem the expectation is a sum over the
``(2k - 1)!!`` perfect matchings of the entries; a matching contributes 1 for every index
assignment in which each matched pair has equal row *and* equal column indices, that is
``d^r n^c`` with ``r`` (``c``) the number of connected components of the row (column)
index variables glued by the pairs. Real Gaussian entries admit every matching
("twisted" ones included), so odd powers of the topological expansion appear.

Checks: ``k = 1..6`` against sampled Wishart matrices
(``preconditioned_gd.wishart.mc_trace_moments``), and at ``d = 1`` the chi-square
moments ``E (chi^2_n)^k = n (n + 2) ... (n + 2k - 2)`` (tests).

Contains
--------
:func:`matching_counts`   ``{(r, c): number of matchings}`` for ``E tr W^k``
:func:`trace_moment`      ``E tr W^k`` as a polynomial in ``n, d``
:func:`normalized_moment` ``m_k = E tr S_u^k = E tr W^k / n^k``, written in powers of ``1/n``
:func:`moments`           ``(m_0, ..., m_K)`` in the symbols ``n, d``
``preconditioned_gd.wishart.trace_moments``   the record of ``m_1, ..., m_6``

References
----------
.. [1] L. Isserlis, Biometrika 12 (1918) (the pairing formula).
.. [2] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, "Transformers learn to implement
   preconditioned gradient descent for in-context learning", NeurIPS 2023, App. B.2
   (the loss on the set A_l = a_l Sigma^{-1} reduces to white Wishart spectra).
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import TYPE_CHECKING

from ..params import index
from ..registry import ClosedForm, register

if TYPE_CHECKING:  # sympy is imported where an expression is built, not with the module
    import sympy as sp

__all__ = ["matching_counts", "trace_moment", "normalized_moment", "moments", "N_CTX", "D_DIM"]

#: Moments m_1..m_K of the record (the loss of L <= 3 layers needs m_1..m_6).
RECORD_MOMENTS = 6

N_CTX = index("n", "Context length (examples before the query).")
D_DIM = index("d", "Covariate dimension.", sample=(1, 9))


def _find(parent: list[int], i: int) -> int:
    while parent[i] != i:
        i = parent[i]
    return i


@cache
def matching_counts(k: int) -> dict[tuple[int, int], int]:
    """Numbers of perfect matchings of the ``2k`` entries of ``tr (G G^T)^k`` by the numbers
    ``(r, c)`` of row and column index classes they leave.

    ``E tr W^k = sum_{(r, c)} count * d^r * n^c``. The enumeration keeps a union-find of
    the ``k`` row and ``k`` column variables along a depth-first walk over matchings,
    undoing the unions on the way back, so each of the ``(2k - 1)!!`` matchings costs O(1)
    amortised work (``k = 6``: 10395 matchings).
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


def trace_moment(k: int, n: sp.Expr, d: sp.Expr) -> sp.Expr:
    """``E tr W^k`` for ``W ~ W_d(n, I)`` (``k >= 0``; ``k = 0`` gives ``d``)."""
    import sympy as sp

    if k == 0:
        return d
    return sp.Add(*[c * d**r * n**s for (r, s), c in sorted(matching_counts(k).items())])


def normalized_moment(k: int, n: sp.Expr, d: sp.Expr) -> sp.Expr:
    """``m_k = E tr S_u^k = E tr W^k / n^k``, as a sum of ``d^r n^(c - k)`` terms
    (``c <= k``: nonnegative powers of ``1/n`` only, positive coefficients, no cancellation)."""
    import sympy as sp

    if k == 0:
        return d
    return sp.Add(*[c * d**r * n**(s - k) for (r, s), c in sorted(matching_counts(k).items())])


@cache
def moments(K: int = RECORD_MOMENTS) -> tuple:
    """``(m_0, ..., m_K)`` with ``m_0 = d`` and ``m_k = E tr S_u^k``."""
    from . import sym

    n, d = sym("n"), sym("d")
    return tuple(normalized_moment(k, n, d) for k in range(K + 1))


def derive_trace_moments():
    import sympy as sp

    return sp.ImmutableMatrix(moments(RECORD_MOMENTS)[1:])


register(ClosedForm(
    id="preconditioned_gd.wishart.trace_moments",
    title="Wishart trace moments m_k = E tr S_u^k, k = 1..6",
    source="App. B.2 (moments entering the loss on S) [derived]",
    status="exact",
    params=(N_CTX, D_DIM),
    derive=derive_trace_moments,
    output="vector",
    doc="S_u = (1/n) sum_{i<=n} u_i u_i^T with u_i ~ N(0, I_d), i.e. W/n with W ~ W_d(n, I). "
        "Counted by Wick pairings of the 2k Gaussian entries of tr (G G^T)^k (genus expansion "
        "over all matchings, twisted ones included); output [m_1, ..., m_6].",
))
