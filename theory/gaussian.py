"""Gaussian expectation engine: Isserlis (Wick) pairings on matrix words.

Derives expectations such as E[x x^T A x x^T], E[Lambda_hat A Lambda_hat] for a symbolic
number of samples N, or E[w^T Lambda_hat M x_q x_q^T M^T Lambda_hat w], in index-free
matrix form (MatrixSymbols of symbolic size D, traces, transposes), without
``sympy.stats.MultivariateNormal`` (which hangs on symbolic covariances).

How it works
------------
A *word* is a matrix product of factors: constant matrices, scalars, occurrences of
zero-mean Gaussian vectors as columns ``x`` or rows ``x^T``, and sample covariances
``Lambda_hat = (1/N) sum_n x_n x_n^T``.

1. Each sample covariance occurrence is expanded into ``x_(n) x_(n)^T``; the occurrences'
   sample indices are summed by set partitions: a partition into b blocks stands for
   N (N-1) ... (N-b+1) index tuples of b distinct, independent copies, weighted 1/N^k.
2. Isserlis: the expectation of a product of zero-mean jointly Gaussian entries is the sum
   over perfect matchings of the occurrences of each vector of the products of covariances.
3. Each matching is contracted as a graph. Every vector occurrence has one
   dimension-D leg; the constant matrices between legs form oriented *segments*
   (chain-left-end -> first column vector, row vector -> next column vector, ...,
   last row vector -> chain-right-end). A pairing joins two occurrences by their
   covariance. The path from the left end to the right end is the matrix part of the
   result; every closed cycle is a trace.

References
----------
.. [1] L. Isserlis, "On a formula for the product-moment coefficient of any order of a
   normal frequency distribution in any number of variables", Biometrika 12 (1918).
.. [2] Zhang, Singh, Latham, Saxe (2025), App. C.1 and D.4: the moments this engine
   re-derives (eqs. 30-33, 43-45).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from itertools import count
from typing import Iterator, Sequence

import sympy as sp

__all__ = ["Gaussian", "SampleCovariance", "Closed", "expectation", "expectation_kron", "set_partitions",
           "perfect_matchings"]


@dataclass(frozen=True)
class Gaussian:
    """A zero-mean Gaussian column vector ``x ~ N(0, cov)``.

    ``cov`` is a symmetric sympy matrix expression (e.g. a MatrixSymbol or Identity).
    Distinct ``Gaussian`` objects (by name) are independent.
    """

    name: str
    cov: sp.MatrixExpr

    @property
    def col(self) -> "_Occ":
        return _Occ(self, False)

    @property
    def row(self) -> "_Occ":
        return _Occ(self, True)

    @property
    def dim(self):
        return self.cov.shape[0]


@dataclass(frozen=True)
class _Occ:
    vec: Gaussian
    transposed: bool


@dataclass(frozen=True)
class SampleCovariance:
    """``(1/N) sum_{n=1}^N x_n x_n^T`` for N i.i.d. copies ``x_n`` of ``vec``."""

    vec: Gaussian
    N: sp.Expr


def set_partitions(items: Sequence) -> Iterator[list[list]]:
    """All set partitions of ``items`` (Bell-number many)."""
    items = list(items)
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        yield [[first]] + part
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]


def perfect_matchings(items: Sequence) -> Iterator[list[tuple]]:
    """All perfect matchings of ``items`` ((n-1)!! many for even n, none for odd n)."""
    items = list(items)
    if not items:
        yield []
        return
    if len(items) % 2:
        return
    first = items[0]
    for i in range(1, len(items)):
        rest = items[1:i] + items[i + 1:]
        for m in perfect_matchings(rest):
            yield [(first, items[i])] + m


def _is_matrix(f) -> bool:
    return getattr(f, "is_Matrix", False)


def _expand_samples(word: Sequence) -> list[tuple[sp.Expr, list]]:
    """Step 1: replace sample covariances by outer products of numbered copies."""
    slots = [i for i, f in enumerate(word) if isinstance(f, SampleCovariance)]
    if not slots:
        return [(sp.S.One, list(word))]
    groups: dict[tuple, list[int]] = {}
    for i in slots:
        f = word[i]
        groups.setdefault((f.vec, f.N), []).append(i)
    terms = [(sp.S.One, {})]
    fresh = count()
    for (vec, N), positions in groups.items():
        new_terms = []
        k = len(positions)
        for part in set_partitions(positions):
            b = len(part)
            weight = sp.ff(N, b) / N**k
            copies = {}
            for block in part:
                copy = Gaussian(f"{vec.name}#{next(fresh)}", vec.cov)
                for pos in block:
                    copies[pos] = copy
            for w, assign in terms:
                new_terms.append((w * weight, {**assign, **copies}))
        terms = new_terms
    out = []
    for w, assign in terms:
        new_word = []
        for i, f in enumerate(word):
            if i in assign:
                new_word += [assign[i].col, assign[i].row]
            else:
                new_word.append(f)
        out.append((w, new_word))
    return out


def _segments(word: Sequence, offset: int = 0):
    """Split a word of occurrences/constants into scalar factor, segments and open ends.

    Returns ``(scalar, occurrences, segments, has_ends)`` where ``segments`` is a list of
    ``(start, matrices, end)`` with nodes ``'L'``, ``'R'`` or an occurrence position (its index
    in the word plus ``offset``).
    """
    scalar = sp.S.One
    occs = {}
    segments = []
    # the open D-run: (start node, list of constant matrices); None when at a size-1 index
    first = word[0]
    run = ("L", []) if (_is_matrix(first) or (isinstance(first, _Occ) and not first.transposed)) else None
    has_ends = run is not None
    for pos, f in enumerate(word, start=offset):
        if isinstance(f, _Occ):
            occs[pos] = f
            if not f.transposed:  # column: closes the current D-run
                if run is None:
                    raise ValueError("word: a column vector must follow a D-sized index")
                segments.append((run[0], run[1], pos))
                run = None
            else:  # row: opens a D-run
                if run is not None:
                    raise ValueError("word: a row vector must follow a size-1 index")
                run = (pos, [])
        elif _is_matrix(f):
            if run is None:
                raise ValueError(f"word: matrix {f} must follow a D-sized index")
            run[1].append(f)
        else:
            scalar *= f
    if run is not None:
        if not has_ends:
            raise ValueError("word: a row-vector start needs a column-vector end")
        segments.append((run[0], run[1], "R"))
    elif has_ends:
        raise ValueError("word: a matrix-valued word must end on a D-sized index")
    return scalar, occs, segments, has_ends


def _product(mats: list) -> sp.MatrixExpr | None:
    mats = [m for m in mats if m is not None]
    if not mats:
        return None
    return reduce(lambda a, b: sp.MatMul(a, b), mats)


def _transpose(mats: list) -> list:
    return [sp.Transpose(m) for m in reversed(mats)]


def _contract(occs, segments, has_ends, matching, dim):
    """Step 3: follow the graph of one matching; return the matrix (or scalar) it gives."""
    seg_at = {}
    for idx, (a, mats, b) in enumerate(segments):
        seg_at[a] = (idx, mats, b, False)
        seg_at[b] = (idx, mats, a, True)
    partner = {}
    for a, b in matching:
        partner[a] = b
        partner[b] = a
    used = set()

    def walk(node):
        """From ``node`` leave along its segment; return matrices and the node reached."""
        mats = []
        while True:
            idx, seg_mats, other, rev = seg_at[node]
            used.add(idx)
            mats += _transpose(seg_mats) if rev else list(seg_mats)
            if other in ("L", "R"):
                return mats, other
            mats.append(occs[other].vec.cov)
            node = partner[other]
            if node == start:
                return mats, node

    result = sp.S.One
    if has_ends:
        start = "L"
        mats, end = walk("L")
        assert end == "R"
        path = _product(mats)
        result = path if path is not None else sp.Identity(dim)
    traces = sp.S.One
    for idx, (a, _mats, _b) in enumerate(segments):
        if idx in used:
            continue
        start = a
        mats, _ = walk(a)
        body = _product(mats)
        traces *= sp.Trace(body) if body is not None else dim
    return traces * result if has_ends else traces


def expectation(*word) -> sp.Basic:
    """Expectation of the matrix product ``word`` over all its Gaussian vectors.

    Parameters
    ----------
    *word
        Factors in order: ``g.col`` / ``g.row`` for a :class:`Gaussian` ``g``,
        :class:`SampleCovariance` objects, constant sympy matrices, sympy scalars, and
        :class:`Closed` scalar words that multiply the rest.

    Returns
    -------
    sympy expression
        Matrix expression (if the word is a matrix) or scalar.

    Examples
    --------
    >>> import sympy as sp
    >>> D = sp.Symbol("D", integer=True, positive=True)
    >>> Lam, A = sp.MatrixSymbol("Lambda", D, D), sp.MatrixSymbol("A", D, D)
    >>> x = Gaussian("x", Lam)
    >>> expectation(x.col, x.row, A, x.col, x.row)
    Lambda*A*Lambda + Lambda*A.T*Lambda + Trace(A*Lambda)*Lambda
    """
    flat = []
    for f in word:  # a closed scalar word rides along, after a separator
        flat += [_BREAK, *f.word] if isinstance(f, Closed) else [f]
    terms = []
    dim = None
    for weight, w in _expand_samples(flat):
        scalar, occs, segments, has_ends = _chains(w)
        by_vec: dict[Gaussian, list[int]] = {}
        for pos, o in occs.items():
            by_vec.setdefault(o.vec, []).append(pos)
            dim = o.vec.dim
        if any(len(p) % 2 for p in by_vec.values()):
            continue
        per_vec = [list(perfect_matchings(p)) for p in by_vec.values()]
        for combo in _cartesian(per_vec):
            matching = [pair for m in combo for pair in m]
            terms.append(weight * scalar * _contract(occs, segments, has_ends, matching, dim))
    if not terms:
        return sp.S.Zero
    total = sp.MatAdd(*terms) if _is_matrix(terms[0]) else sp.Add(*terms)
    return _tidy(total)


@dataclass(frozen=True)
class Closed:
    """A scalar word such as ``w^T Lambda_hat w`` (a row vector ... a column vector) that multiplies
    the rest of an :func:`expectation` word: ``expectation(x_q.col, x_q.row, Closed(w.row, Lhat,
    w.col))`` is ``E[x_q x_q^T (w^T Lambda_hat w)]``. Its Gaussian vectors and sample covariances are
    paired and partitioned together with the rest of the word's."""

    word: tuple

    def __init__(self, *word):
        object.__setattr__(self, "word", tuple(word))


#: Separates the closed scalar words from the main word after the samples are expanded.
_BREAK = object()


def _chains(word: Sequence):
    """:func:`_segments` of a word with closed scalar words after :data:`_BREAK` separators: the
    main word may be matrix-valued; each closed word must have no open ends."""
    cuts = [i for i, f in enumerate(word) if f is _BREAK]
    bounds = list(zip([-1, *cuts], [*cuts, len(word)]))
    scalar, occs, segments, has_ends = _segments(word[:bounds[0][1]])
    for a, b in bounds[1:]:
        if b == a + 1:
            raise ValueError("Closed: an empty scalar word")
        s2, o2, seg2, ends2 = _segments(word[a + 1:b], offset=a + 1)
        if ends2:
            raise ValueError("Closed: the word must be a scalar (a row vector first, a column vector last)")
        scalar *= s2
        occs.update(o2)
        segments += seg2
    return scalar, occs, segments, has_ends


def _cartesian(lists):
    if not lists:
        yield []
        return
    for head in lists[0]:
        for tail in _cartesian(lists[1:]):
            yield [head] + tail


def expectation_kron(left: Sequence, right: Sequence) -> sp.MatrixExpr:
    """E[L (x) R] for words ``left`` and ``right`` over disjoint sets of Gaussian vectors.

    Independence makes the expectation of the Kronecker product the Kronecker product of
    the expectations; a vector shared by both sides raises ``ValueError``.
    """

    def vecs(word):
        out = set()
        for f in word:
            if isinstance(f, _Occ):
                out.add(f.vec.name)
            elif isinstance(f, SampleCovariance):
                out.add(f.vec.name)
        return out

    shared = vecs(left) & vecs(right)
    if shared:
        raise ValueError(f"left, right: share the Gaussian vectors {sorted(shared)}")
    return sp.KroneckerProduct(expectation(*left), expectation(*right))


def _tidy(expr):
    """Collect like terms; expand falling factorials into polynomials in N."""
    expr = expr.replace(lambda e: isinstance(e, sp.FallingFactorial), lambda e: e.expand(func=True)) \
        if hasattr(expr, "replace") else expr
    if getattr(expr, "is_Matrix", False):
        expr = expr.doit()
        if isinstance(expr, sp.MatAdd):
            # group terms by their matrix part and simplify each coefficient
            coeffs: dict = {}
            for term in expr.args:
                c, m = _split_coeff(term)
                coeffs[m] = coeffs.get(m, 0) + c
            expr = sp.MatAdd(*[sp.factor(sp.expand(c)) * m for m, c in coeffs.items()
                               if sp.expand(c) != 0]).doit()
        return expr
    return sp.expand(expr)


def _split_coeff(term):
    if isinstance(term, sp.MatMul):
        scalars = [a for a in term.args if not _is_matrix(a)]
        mats = [a for a in term.args if _is_matrix(a)]
        return sp.Mul(*scalars), sp.MatMul(*mats).doit() if len(mats) > 1 else mats[0]
    return sp.S.One, term
