"""Random-walk tokens and their moments (Bao, Hataya, Karakida 2024, §2, Assumption 1, Lemma 4, eq. 22).

Setting (§2, Assumption 1). Tokens are the columns of ``X = [x_1 ... x_T]`` with
``x_1 ~ N(0, Sigma)``, ``x_{t+1} ~ N(x_t, Sigma)``, so ``Cov(x_s, x_t) = min(s, t) Sigma``. The
query is the last token; ``W_QK`` is symmetric and ``W = W_QK Sigma``; the parameters are
``trW = tr(W_QK Sigma)`` and ``trW2 = tr(W_QK Sigma W_QK Sigma)`` (not ||W||_F^2). The parameters
and the index domain (``i <= k <= T``) declared here are shared by
:mod:`theory.localization.softmax`, :mod:`theory.localization.u` and :mod:`theory.localization.rho`.

Derived here (not retyped): the random-walk moments ``E[s_j] = j trW`` and ``E[s_j s_k] =
(T j + j k) trW2 + j k trW^2`` (``s_j = x_j^T W_QK x_T``, ``j <= k``) by the Isserlis engine
(:mod:`theory.gaussian`) on the independent increments ``x_j = g_1``, ``x_k = g_1 + g_2``,
``x_T = g_1 + g_2 + g_3`` (``g_1 ~ N(0, j Sigma)``, ``g_2 ~ N(0, (k-j) Sigma)``,
``g_3 ~ N(0, (T-k) Sigma)``); the same engine gives Lemma 4 (eqs. 15-18) and eq. 22.

Errata: Lemma 4 and eq. 22 carry constants for a walk started at ``x_1 = 0`` (and even then are
off by ``2A + B``).

Contains
--------
``localization.random_walk.quadratic_mean``, ``.quadratic_second_moment``, ``.cross_moment``,
``.mixed_moment``, ``.query_product``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention Networks Localize When QK-eigenspectrum
   Concentrates", ICML 2024. Assumption 1, Lemma 4 (App. A), eq. 22 (App. C).
"""

from __future__ import annotations

from functools import cache

from ..params import index, positive, real
from ..registry import ClosedForm, register
from . import sym

I_KEY = index("i", "Key position (1-based); the query is the last token T.", example=3)
K_KEY = index("k", "Second token position, k >= i (Lemma 4, eq. 22).", example=5)
T_LEN = index("T", "Sequence length (number of tokens).", example=8)
TRW = real("trW", "Eigenspectrum mean tr(W) = tr(W_QK Sigma).", example=0.7)
TRW2 = positive("trW2", "Eigenspectrum scale tr(W^2) = tr(W_QK Sigma W_QK Sigma).", example=1.3)
TEMP = positive("temperature", "Softmax temperature lambda (commonly sqrt(d)).", example=2.0)


# -- domains ---------------------------------------------------------------------------
def _le(values, small, large):
    import numpy as np

    if np.any(np.asarray(values[small]) > np.asarray(values[large])):
        raise ValueError(f"{small}: must be <= {large} = {values[large]}, got {values[small]}")


def index_domain(values: dict, dims: dict) -> None:
    """i <= k <= T for whichever of i, k, T the record has (``ValueError`` naming the index)."""
    if "i" in values and "k" in values:
        _le(values, "i", "k")
    if "k" in values and "T" in values:
        _le(values, "k", "T")
    if "i" in values and "T" in values:
        _le(values, "i", "T")


# -- random-walk moments by Isserlis -------------------------------------------------------
@cache
def _walk():
    """Symbols and the increments g1, g2, g3 of positions j <= k <= T."""
    import sympy as sp

    from ..gaussian import Gaussian
    from ..symbols import dim

    j, k, T = sp.symbols("j k T_walk", positive=True)
    Sig = sym("Sigma")
    W = sp.MatrixSymbol("W_QK", dim(), dim())
    g = (Gaussian("g1", j * Sig), Gaussian("g2", (k - j) * Sig), Gaussian("g3", (T - k) * Sig))
    return j, k, T, W, g


def _reduce_traces(expr):
    """W_QK symmetric; tr(c W Sigma) -> c trW, tr(c W Sigma W Sigma) -> c trW2."""
    import sympy as sp

    j, k, T, W, g = _walk()
    Sig = sym("Sigma")
    words = {(W, Sig): sym("trW"), (W, Sig, W, Sig): sym("trW2")}

    def rep(tr):
        m = tr.arg.doit() if isinstance(tr.arg, sp.MatMul) else sp.MatMul(tr.arg).doit()
        coeff, mats = m.as_coeff_matrices()
        return coeff * words[tuple(mats)]

    expr = sp.sympify(expr).xreplace({sp.Transpose(W): W})
    return sp.expand(expr.replace(lambda x: isinstance(x, sp.Trace), rep))


def _bilinear(a, b):
    """E[a^T W b] for tokens given as lists of increments."""
    from ..gaussian import expectation

    W = _walk()[3]
    return _reduce_traces(sum(expectation(p.row, W, q.col) for p in a for q in b))


def _bilinear_product(a, b, c, e):
    """E[(a^T W b)(c^T W e)] for tokens given as lists of increments."""
    from ..gaussian import expectation

    W = _walk()[3]
    return _reduce_traces(sum(expectation(p.row, W, q.col, r.row, W, s.col)
                              for p in a for q in b for r in c for s in e))


@cache
def random_walk_moments():
    """Derived moments in the walk symbols (j, k, T_walk) with j <= k <= T_walk.

    Returns a dict: ``s_mean`` = E[x_j^T W x_T], ``s_product`` = E[x_j^T W x_T x_k^T W x_T],
    ``quadratic`` = E[x_j^T W x_j], ``quadratic_sq`` = E[(x_j^T W x_j)^2],
    ``cross`` = E[x_j^T W x_k x_k^T W x_j], ``mixed`` = E[x_j^T W x_k x_k^T W x_k].
    """
    j, k, T, W, (g1, g2, g3) = _walk()
    xj, xk, xT = [g1], [g1, g2], [g1, g2, g3]
    return {
        "s_mean": _bilinear(xj, xT),
        "s_product": _bilinear_product(xj, xT, xk, xT),
        "quadratic": _bilinear(xj, xj),
        "quadratic_sq": _bilinear_product(xj, xj, xj, xj),
        "cross": _bilinear_product(xj, xk, xk, xj),
        "mixed": _bilinear_product(xj, xk, xk, xk),
    }


def walk_moment(name, i="i", k="k"):
    """A moment of :func:`random_walk_moments` in the parameter symbols (j -> i, k -> k, T)."""
    j, kk, T, W, g = _walk()
    return random_walk_moments()[name].xreplace({j: sym(i), kk: sym(k), T: sym("T")})


def signal_covariance():
    """Cov(s_j, s_k) for j <= k as a function of two symbols, and E[s_j]."""
    import sympy as sp

    j, k, T, W, g = _walk()
    m = random_walk_moments()
    cov = sp.expand(m["s_product"] - m["s_mean"] * m["s_mean"].xreplace({j: k}))
    return cov.xreplace({T: sym("T")}), m["s_mean"], j, k


# -- Lemma 4 and eq. 22 ------------------------------------------------------------------------
def _A_B():
    return sym("trW2"), sym("trW") ** 2


def printed_quadratic_mean():
    return (sym("i") - 1) * sym("trW")


def printed_quadratic_second_moment():
    i = sym("i")
    A, B = _A_B()
    return (i**2 - 2 * i + 2) * (2 * A + B)


def printed_cross_moment():
    i, k = sym("i"), sym("k")
    A, B = _A_B()
    return (i**2 + i * k - 3 * i - k + 4) * A + (i**2 - 2 * i + 2) * B


def printed_mixed_moment():
    i, k = sym("i"), sym("k")
    A, B = _A_B()
    return (i * k - i - k + 2) * (2 * A + B)


def printed_query_product():
    """Eq. 22: (ij + (T-2)i - j - (T-4)) tr(W^2) + (ij - i - j + 2) tr(W)^2 (j written k here)."""
    i, k, T = sym("i"), sym("k"), sym("T")
    A, B = _A_B()
    return (i * k + (T - 2) * i - k - (T - 4)) * A + (i * k - i - k + 2) * B


# -- registry ----------------------------------------------------------------------------------
#: Assumption 1 in words, for the records' documentation.
RANDOM_WALK = ("Assumption 1 (x_1 ~ N(0, Sigma), Cov(x_s, x_t) = min(s, t) Sigma), W_QK symmetric and "
               "independent of X; trW = tr(W_QK Sigma), trW2 = tr(W_QK Sigma W_QK Sigma). ")

register(ClosedForm(
    id="localization.random_walk.quadratic_mean",
    title="E[x_i^T W x_i] for a random walk (Lemma 4, eq. 15)",
    source="Lemma 4, eq. 15",
    status="exact",
    params=(I_KEY, TRW),
    derive=lambda: walk_moment("quadratic"),
    printed=printed_quadratic_mean,
    doc=RANDOM_WALK + "Here W is any symmetric matrix (W_QK in the application).",
    erratum="Eq. 15 prints (i - 1) tr(W Sigma), the value for a walk started at x_1 = 0; under "
            "Assumption 1 as stated (x_1 ~ N(0, Sigma)) it is i tr(W Sigma). Leading order agrees.",
))

register(ClosedForm(
    id="localization.random_walk.quadratic_second_moment",
    title="E[(x_i^T W x_i)^2] for a random walk (Lemma 4, eq. 16)",
    source="Lemma 4, eq. 16",
    status="exact",
    params=(I_KEY, TRW, TRW2),
    derive=lambda: walk_moment("quadratic_sq"),
    printed=printed_quadratic_second_moment,
    doc=RANDOM_WALK + "i^2 (2A + B) with A = tr(W Sigma W Sigma), B = tr(W Sigma)^2.",
    erratum="Eq. 16 prints (i^2 - 2i + 2)(2A + B); under Assumption 1 it is i^2 (2A + B) (with "
            "x_1 = 0 it would be (i - 1)^2 (2A + B): the printed constant adds another 2A + B). "
            "Leading order agrees.",
))

register(ClosedForm(
    id="localization.random_walk.cross_moment",
    title="E[x_i^T W x_k x_k^T W x_i] for a random walk, i <= k (Lemma 4, eq. 17)",
    source="Lemma 4, eq. 17",
    status="exact",
    params=(I_KEY, K_KEY, TRW, TRW2),
    derive=lambda: walk_moment("cross"),
    printed=printed_cross_moment,
    domain=index_domain,
    doc=RANDOM_WALK + "(i^2 + i k) A + i^2 B with A = tr(W Sigma W Sigma), B = tr(W Sigma)^2 "
        "(the paper's j is k).",
    erratum="Eq. 17 prints (i^2 + ij - 3i - j + 4) A + (i^2 - 2i + 2) B; under Assumption 1 it is "
            "(i^2 + ij) A + i^2 B (x_1 = 0 would give (i-1)(i+j-2) A + (i-1)^2 B; the printed form "
            "adds 2A + B to that). Leading order agrees.",
))

register(ClosedForm(
    id="localization.random_walk.mixed_moment",
    title="E[x_i^T W x_k x_k^T W x_k] for a random walk, i <= k (Lemma 4, eq. 18)",
    source="Lemma 4, eq. 18",
    status="exact",
    params=(I_KEY, K_KEY, TRW, TRW2),
    derive=lambda: walk_moment("mixed"),
    printed=printed_mixed_moment,
    domain=index_domain,
    doc=RANDOM_WALK + "i k (2A + B) (the paper's j is k).",
    erratum="Eq. 18 prints (ij - i - j + 2)(2A + B); under Assumption 1 it is ij (2A + B) (x_1 = 0 "
            "would give (i-1)(j-1)(2A + B); the printed form adds 2A + B). Leading order agrees.",
))

register(ClosedForm(
    id="localization.random_walk.query_product",
    title="E[x_i^T W_QK x_T x_k^T W_QK x_T], i <= k <= T (eq. 22)",
    source="App. C, eq. 22",
    status="exact",
    params=(I_KEY, K_KEY, T_LEN, TRW, TRW2),
    derive=lambda: walk_moment("s_product"),
    printed=printed_query_product,
    domain=index_domain,
    doc=RANDOM_WALK + "E[s_i s_k] = (T i + i k) tr(W^2) + i k tr(W)^2; Cov(s_i, s_k) = "
        "(T min + i k) tr(W^2). The paper's j is k.",
    erratum="Eq. 22 prints (ij + (T-2) i - j - (T-4)) tr(W^2) + (ij - i - j + 2) tr(W)^2 (constants "
            "of a walk started at x_1 = 0, inherited from Lemma 4); under Assumption 1 it is "
            "(T i + ij) tr(W^2) + ij tr(W)^2. The leading terms agree.",
))
