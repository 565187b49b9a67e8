"""Mixed moments of a correlated Wishart matrix, ``E prod tr(Sigma^{e_1} W Sigma^{e_2} W ...)``, by the loop equations.

``X`` is ``d x n`` with i.i.d. columns ``x_j ~ N(0, Sigma)``, ``W = X X^T ~ W_d(n, Sigma)`` and
``S = W / n`` the sample covariance. A *word* ``(e_1, ..., e_m)`` (integers) stands for
``tr(Sigma^{e_1} W Sigma^{e_2} W ... Sigma^{e_m} W)``; the powers of Sigma commute, and a trace is
unchanged by rotating the word or reversing it (transpose), so a word is kept in a canonical
dihedral form. The empty word with exponent ``c`` is the power trace ``p_c = tr Sigma^c``
(``p_0 = d``).

The loop equations
------------------
Gaussian integration by parts for correlated columns, ``E[X_ij F] = sum_b Sigma_ib E[dF/dX_bj]``,
applied to the last ``W = X X^T`` of ``T = tr(C_1 W ... C_k W)`` (``C_i = Sigma^{c_i}``), with
``M = C_1 W ... W C_k`` and any product ``Pi`` of further words, gives ``E[T Pi]`` as the sum of

* ``n E[tr(Sigma M) Pi]``: the word ``(c_k + 1 + c_1, c_2, ..., c_{k-1})`` (``k = 1``: ``p_{c_1 + 1}``);
* for each ``p = 1..k-1`` (the derivative of the ``p``-th ``W`` inside ``M``):
  ``tr(L_p^T W R_p Sigma)``, the word ``(c_p + c_k + 1, c_{p-1}, ..., c_1, c_{p+1}, ..., c_{k-1})``
  (the real-Gaussian "twist": ``L_p = C_1 W ... C_p`` enters transposed), and
  ``tr(L_p W) tr(R_p Sigma)``, the words ``(c_1, ..., c_p)`` and ``(c_{p+1} + c_k + 1, c_{p+2}, ...,
  c_{k-1})`` (``p = k - 1``: ``p_{c_k + 1}``), ``R_p = C_{p+1} W ... W C_k``;
* for each other word ``(d_1, ..., d_m)`` of ``Pi`` and each of its ``m`` factors ``W``:
  ``tr(M Sigma (A + A^T) W)`` with ``A W`` the word rotated to end at that factor, i.e. the
  words ``(c_1, ..., c_{k-1}, c_k + 1 + d_{q+1}, d_{q+2}, ..., d_q)`` and
  ``(c_1, ..., c_{k-1}, c_k + 1 + d_q, d_{q-1}, ..., d_{q+1})`` replacing the two traces.

Each term has one factor ``W`` fewer, so the expectation is an exact polynomial in ``n`` and the
power traces ``p_c``, with nonnegative integer coefficients (each term of the Wick expansion is a
product of traces of products of powers of Sigma). At ``Sigma = I`` (``p_c = d``) it reduces to
:mod:`theory.preconditioned_gd.wishart`. Checks: ``E tr(Sigma W Sigma^{-1} W) = n (n + d + 1) p_2``
(``E[S Sigma^{-1} S] = (n + d + 1)/n Sigma``), ``E tr W^2 = n (n + 1) p_2 + n p_1^2``, the
Isserlis engine of :mod:`theory.gaussian`, and sampled matrices (tests and
``preconditioned_gd.multi_layer.mc_gd_loss``).

Cost (one core): the words of ``E tr(Sigma S^j Sigma^{-1} S^k)`` for all ``j, k <= L`` (the
plain-GD loss, :func:`gd_loss_terms`): ``L = 2`` 0.01 s, ``L = 3`` 0.06 s, ``L = 4`` 0.4 s,
``L = 5`` 3 s (measured; memoised per process).

Contains
--------
:func:`word_moment`     ``E prod tr(words)`` as ``{(n exponent, ((c, power), ...)): coefficient}``
:func:`gd_loss_terms`   the polynomials ``E tr(Sigma W^j Sigma^{-1} W^k)``, ``j, k <= L``

References
----------
.. [1] L. Isserlis, Biometrika 12 (1918); Gaussian integration by parts (Stein's identity).
.. [2] K. Ahn, X. Cheng, H. Daneshmand, S. Sra, NeurIPS 2023, App. D (plain GD as a baseline).
"""

from __future__ import annotations

from functools import cache

__all__ = ["canonical", "word_moment", "gd_loss_terms", "gd_word", "evaluate_terms"]


def canonical(word) -> tuple:
    """The least of the rotations of ``word`` and of its reverse (the dihedral class's representative)."""
    w = tuple(int(e) for e in word)
    if not w:
        return w
    r = w[::-1]
    return min(min(w[i:] + w[:i] for i in range(len(w))), min(r[i:] + r[:i] for i in range(len(r))))


def _state(words) -> tuple:
    return tuple(sorted((canonical(w) for w in words), key=lambda w: (-len(w), w)))


class _WordEquations:
    """The loop equations over ``ZZ[n, p_lo, ..., p_hi]`` (module docstring), memoised over states."""

    def __init__(self, lo: int, hi: int):
        from sympy import ZZ
        from sympy.polys.rings import ring

        self.lo, self.hi = lo, hi
        names = ["n"] + [f"p{c}".replace("-", "m") for c in range(lo, hi + 1)]
        self.R, *gens = ring(",".join(names), ZZ)
        self.n, self.p = gens[0], gens[1:]
        self.memo = {(): self.R.one}

    def power(self, c: int):
        if not self.lo <= c <= self.hi:
            raise ValueError(f"words: the power trace tr Sigma^{c} is outside [{self.lo}, {self.hi}]")
        return self.p[c - self.lo]

    def __call__(self, state: tuple):
        value = self.memo.get(state)
        if value is None:
            value = self.memo[state] = self._expand(state)
        return value

    def _term(self, words, rest, scalar=None):
        value = self(_state(list(words) + list(rest)))
        return value * scalar if scalar is not None else value

    def _expand(self, state: tuple):
        c, rest = state[0], state[1:]
        k = len(c)
        total = self.R.zero
        if k == 1:
            total += self.n * self._term((), rest, self.power(c[0] + 1))
        else:
            total += self.n * self._term([(c[k - 1] + 1 + c[0],) + c[1:k - 1]], rest)
        for p in range(1, k):
            total += self._term([(c[p - 1] + c[k - 1] + 1,) + c[:p - 1][::-1] + c[p:k - 1]], rest)
            if p < k - 1:
                total += self._term([c[:p], (c[p] + c[k - 1] + 1,) + c[p + 1:k - 1]], rest)
            else:
                total += self._term([c[:p]], rest, self.power(c[k - 1] + 1))
        for i, dd in enumerate(rest):
            others = rest[:i] + rest[i + 1:]
            m = len(dd)
            for q in range(m):
                for r in (dd[q + 1:] + dd[:q + 1], dd[:q + 1][::-1] + dd[q + 1:][::-1]):
                    total += self._term([c[:k - 1] + (c[k - 1] + 1 + r[0],) + r[1:]], others)
        return total


def _bounds(words) -> tuple[int, int]:
    """Exponents of the power traces that can appear: from the sum of the negative exponents to
    the number of factors W plus the sum of the positive ones (each integration by parts adds one
    Sigma)."""
    lo = min(0, sum(e for w in words for e in w if e < 0))
    hi = sum(len(w) for w in words) + sum(e for w in words for e in w if e > 0)
    return lo, hi


@cache
def _engine(lo: int, hi: int) -> _WordEquations:
    return _WordEquations(lo, hi)


def word_moment(words) -> dict:
    """``E prod_w tr(Sigma^{w_1} W ... Sigma^{w_m} W)`` over the ``words`` (tuples of integers;
    an empty word is ``tr I = d``) as ``{(a, ((c_1, e_1), ...)): coefficient}``: the polynomial
    ``sum coefficient n^a prod_i p_{c_i}^{e_i}`` (``p_c = tr Sigma^c``)."""
    words = [tuple(int(e) for e in w) for w in words]
    engine = _engine(*_bounds(words))
    zeros = sum(1 for w in words if not w)
    poly = engine(_state([w for w in words if w]))
    if zeros:
        poly = poly * engine.power(0) ** zeros
    out = {}
    for monom, coeff in poly.terms():
        traces = tuple((engine.lo + i, e) for i, e in enumerate(monom[1:]) if e)
        out[(monom[0], traces)] = int(coeff)
    return out


def gd_word(j: int, k: int) -> tuple:
    """The word of ``tr(Sigma W^j Sigma^{-1} W^k)``: ``(1, 0, ..., 0, -1, 0, ..., 0)`` (``j, k >= 1``);
    ``tr W^{j+k}`` (zeros) when ``j`` or ``k`` is 0 (``Sigma Sigma^{-1} = I``); ``()`` (``d``) when both are."""
    if j == 0 or k == 0:
        return (0,) * (j + k)
    return (1,) + (0,) * (j - 1) + (-1,) + (0,) * (k - 1)


@cache
def gd_loss_terms(L: int) -> dict:
    """``{(j, k): polynomial}`` for ``E tr(Sigma W^j Sigma^{-1} W^k)``, ``0 <= j <= k <= L`` (symmetric
    in ``j, k``: transpose), each in the form of :func:`word_moment`."""
    if not isinstance(L, int) or L < 0:
        raise ValueError(f"L: expected an integer >= 0, got {L!r}")
    return {(j, k): word_moment([gd_word(j, k)]) for j in range(L + 1) for k in range(j, L + 1)}


def evaluate_terms(poly: dict, n, traces: dict):
    """``sum coefficient n^a prod p_c^e`` with ``traces[c] = p_c`` (any number type: Fraction, mpf,
    float, tensor)."""
    total = 0
    for (a, factors), coeff in poly.items():
        term = coeff * n**a
        for c, e in factors:
            term = term * traces[c] ** e
        total = total + term
    return total
