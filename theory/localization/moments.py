"""Moments of the linearised-softmax signal under random-walk tokens (Bao, Hataya, Karakida 2024).

Setting (§2, Assumption 1, Lemma 1). Tokens are the columns of ``X = [x_1 ... x_T]`` with
``x_1 ~ N(0, Sigma)``, ``x_{t+1} ~ N(x_t, Sigma)``, so ``Cov(x_s, x_t) = min(s, t) Sigma``. The
query is the last token; ``omega = X^T W_QK x_T / lambda`` (``lambda`` is the parameter
``temperature``) with ``W_QK`` symmetric and ``W = W_QK Sigma``. The first-order Taylor
coefficients of the softmax at the origin are ``gamma^i = e^i/T - 1/T^2`` and ``gamma_0^i = 1/T``
(R1), and the linearised coordinate is

    u_i = <gamma^i, omega> + gamma_0^i = omega_i/T - sum_j omega_j/T^2 + 1/T.

Parameters ``trW = tr(W_QK Sigma)`` and ``trW2 = tr(W_QK Sigma W_QK Sigma)`` (not ||W||_F^2).

What is derived here (not retyped):

* the softmax Jacobian at the origin, by ``sympy.diff`` of the softmax with symbolic length T;
* the random-walk moments ``E[s_j] = j trW`` and ``E[s_j s_k] = (T j + j k) trW2 + j k trW^2``
  (``s_j = x_j^T W_QK x_T``, ``j <= k``) by the Isserlis engine (:mod:`theory.gaussian`) on the
  independent increments ``x_j = g_1``, ``x_k = g_1 + g_2``, ``x_T = g_1 + g_2 + g_3``
  (``g_1 ~ N(0, j Sigma)``, ``g_2 ~ N(0, (k-j) Sigma)``, ``g_3 ~ N(0, (T-k) Sigma)``);
  the same engine gives Lemma 4 (eqs. 15-18) and eq. 22;
* the exact finite-T mean and variance of ``u_i`` by ``sympy.summation`` over the key index
  (the min(j, k) in the covariance split into j < k, j = k, j > k);
* their T -> infinity limits at fixed theta = i/T by ``sympy.limit``.

Errata (spec §2, §5.2): Lemma 1's variance drops ``2 T^2 i trW2`` in term (B2) of its proof, so
its ``2 theta^2 + 7/12`` should read ``2 theta^2 - 2 theta + 7/12``; Lemma 4 and eq. 22 carry
constants for a walk started at ``x_1 = 0`` (and even then are off by ``2A + B``).

Contains
--------
``localization.softmax.value_at_origin``, ``.jacobian_diagonal``, ``.jacobian_offdiagonal``,
``localization.u.mean``, ``.mean_limit``, ``.variance``, ``.variance_limit``,
``localization.random_walk.quadratic_mean``, ``.quadratic_second_moment``, ``.cross_moment``,
``.mixed_moment``, ``.query_product``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention Networks Localize When QK-eigenspectrum
   Concentrates", ICML 2024. Sec. 2 (softmax Taylor expansion), Lemma 1 (App. C), Lemma 4
   (App. A), eq. 22.
"""

from __future__ import annotations

from functools import cache

from ..params import Param, index, positive, real
from ..registry import ClosedForm, register

PAPER = "Bao, Hataya, Karakida 2024"

I_KEY = index("i", "Key position (1-based); the query is the last token T.")
K_KEY = index("k", "Second token position, k >= i (Lemma 4, eq. 22).")
T_LEN = index("T", "Sequence length (number of tokens).")
TRW = real("trW", "Eigenspectrum mean tr(W) = tr(W_QK Sigma).")
TRW2 = positive("trW2", "Eigenspectrum scale tr(W^2) = tr(W_QK Sigma W_QK Sigma).")
TEMP = positive("temperature", "Softmax temperature lambda (commonly sqrt(d)).")

__all__ = ["PAPER", "I_KEY", "K_KEY", "T_LEN", "TRW", "TRW2", "TEMP", "derive_mean", "derive_variance",
           "random_walk_moments", "index_domain"]


def _sym(name):
    from ..symbols import sym

    return sym(name)


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


# -- R1: the softmax at the origin -------------------------------------------------------
@cache
def softmax_taylor():
    """(S(0)_i, dS_i/domega_i (0), dS_i/domega_alpha (0)) for alpha != i, with symbolic T.

    The softmax coordinate i with only omega_i = a and omega_alpha = b non-zero (the other
    T - 2 logits at 0) is ``e^a / (e^a + e^b + T - 2)``; its value and first derivatives at the
    origin are the Taylor coefficients gamma_0^i, gamma^i_i and gamma^i_alpha.
    """
    import sympy as sp

    T = _sym("T")
    a, b = sp.symbols("a b", real=True)
    S = sp.exp(a) / (sp.exp(a) + sp.exp(b) + T - 2)
    at0 = {a: 0, b: 0}
    return (sp.simplify(S.subs(at0)), sp.factor(sp.diff(S, a).subs(at0)), sp.factor(sp.diff(S, b).subs(at0)))


# -- random-walk moments by Isserlis -------------------------------------------------------
@cache
def _walk():
    """Symbols and the increments g1, g2, g3 of positions j <= k <= T."""
    import sympy as sp

    from ..gaussian import Gaussian
    from ..symbols import dim

    j, k, T = sp.symbols("j k T_walk", positive=True)
    Sig = _sym("Sigma")
    W = sp.MatrixSymbol("W_QK", dim(), dim())
    g = (Gaussian("g1", j * Sig), Gaussian("g2", (k - j) * Sig), Gaussian("g3", (T - k) * Sig))
    return j, k, T, W, g


def _reduce_traces(expr):
    """W_QK symmetric; tr(c W Sigma) -> c trW, tr(c W Sigma W Sigma) -> c trW2."""
    import sympy as sp

    j, k, T, W, g = _walk()
    Sig = _sym("Sigma")
    words = {(W, Sig): _sym("trW"), (W, Sig, W, Sig): _sym("trW2")}

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


def _walk_moment(name, i="i", k="k"):
    """A moment of :func:`random_walk_moments` in the parameter symbols (j -> i, k -> k, T)."""
    j, kk, T, W, g = _walk()
    return random_walk_moments()[name].xreplace({j: _sym(i), kk: _sym(k), T: _sym("T")})


def _signal_covariance():
    """Cov(s_j, s_k) for j <= k as a function of two symbols, and E[s_j]."""
    import sympy as sp

    j, k, T, W, g = _walk()
    m = random_walk_moments()
    cov = sp.expand(m["s_product"] - m["s_mean"] * m["s_mean"].xreplace({j: k}))
    return cov.xreplace({T: _sym("T")}), m["s_mean"], j, k


# -- Lemma 1: mean and variance of u_i --------------------------------------------------------
@cache
def derive_mean():
    """mu^i = E[s_i]/(lambda T) - sum_j E[s_j]/(lambda T^2) + 1/T."""
    import sympy as sp

    i, T, lam = _sym("i"), _sym("T"), _sym("temperature")
    cov, mean, j, k = _signal_covariance()
    a = sp.Symbol("a", integer=True, positive=True)
    total = sp.summation(mean.xreplace({j: a}), (a, 1, T))
    return sp.factor(mean.xreplace({j: i}) / (lam * T) - total / (lam * T**2) + 1 / T)


@cache
def derive_variance():
    """v^i = [Cov(s_i, s_i)/T^2 - 2 sum_j Cov(s_i, s_j)/T^3 + sum_{j,k} Cov(s_j, s_k)/T^4] / lambda^2,
    with Cov(s_j, s_k) = c(min, max) from the engine (the sums split at the diagonal)."""
    import sympy as sp

    i, T, lam = _sym("i"), _sym("T"), _sym("temperature")
    cov, mean, j, k = _signal_covariance()
    a, b = sp.symbols("a b", integer=True, positive=True)

    def c(lo, hi):
        return cov.xreplace({j: lo, k: hi})

    row = sp.summation(c(a, i), (a, 1, i)) + sp.summation(c(i, a), (a, i + 1, T))
    full = sp.summation(c(a, a), (a, 1, T)) + 2 * sp.summation(sp.summation(c(a, b), (a, 1, b - 1)), (b, 1, T))
    return sp.factor(sp.simplify((c(i, i) / T**2 - 2 * row / T**3 + full / T**4) / lam**2))


def _limit_at_fixed_theta(expr):
    """T -> infinity with i = theta T, then theta written back as i/T."""
    import sympy as sp

    i, T = _sym("i"), _sym("T")
    theta = sp.Symbol("theta_limit", positive=True)
    lim = sp.limit(expr.xreplace({i: theta * T}), T, sp.oo)
    return sp.expand(lim.xreplace({theta: i / T}))


@cache
def derive_mean_limit():
    return _limit_at_fixed_theta(derive_mean())


@cache
def derive_variance_limit():
    return _limit_at_fixed_theta(derive_variance())


def printed_mean():
    """Lemma 1: mu^i = (i/T - 1/2) tr(W)/lambda + o(1)."""
    import sympy as sp

    i, T = _sym("i"), _sym("T")
    return (i / T - sp.Rational(1, 2)) * _sym("trW") / _sym("temperature")


def printed_variance():
    """Lemma 1: v^i = (2 i^2/T^2 + 7/12) tr(W^2)/lambda^2 + o(1)."""
    import sympy as sp

    i, T = _sym("i"), _sym("T")
    return (2 * i**2 / T**2 + sp.Rational(7, 12)) * _sym("trW2") / _sym("temperature") ** 2


# -- Lemma 4 and eq. 22 ------------------------------------------------------------------------
def _A_B():
    return _sym("trW2"), _sym("trW") ** 2


def printed_quadratic_mean():
    return (_sym("i") - 1) * _sym("trW")


def printed_quadratic_second_moment():
    i = _sym("i")
    A, B = _A_B()
    return (i**2 - 2 * i + 2) * (2 * A + B)


def printed_cross_moment():
    i, k = _sym("i"), _sym("k")
    A, B = _A_B()
    return (i**2 + i * k - 3 * i - k + 4) * A + (i**2 - 2 * i + 2) * B


def printed_mixed_moment():
    i, k = _sym("i"), _sym("k")
    A, B = _A_B()
    return (i * k - i - k + 2) * (2 * A + B)


def printed_query_product():
    """Eq. 22: (ij + (T-2)i - j - (T-4)) tr(W^2) + (ij - i - j + 2) tr(W)^2 (j written k here)."""
    i, k, T = _sym("i"), _sym("k"), _sym("T")
    A, B = _A_B()
    return (i * k + (T - 2) * i - k - (T - 4)) * A + (i * k - i - k + 2) * B


# -- registry ----------------------------------------------------------------------------------
_RW = ("Assumption 1 (x_1 ~ N(0, Sigma), Cov(x_s, x_t) = min(s, t) Sigma), W_QK symmetric and "
       "independent of X; trW = tr(W_QK Sigma), trW2 = tr(W_QK Sigma W_QK Sigma). ")

register(ClosedForm(
    id="localization.softmax.value_at_origin",
    title="gamma_0^i = S(0)_i, the softmax at the origin",
    source=f"{PAPER}, Sec. 2 (R1)",
    status="exact",
    params=(T_LEN,),
    derive=lambda: softmax_taylor()[0],
    printed=lambda: 1 / _sym("T"),
    doc="The constant term of the first-order Taylor expansion of the softmax at omega = 0.",
))

register(ClosedForm(
    id="localization.softmax.jacobian_diagonal",
    title="gamma^i_i = dS_i/domega_i at the origin",
    source=f"{PAPER}, Sec. 2 (R1: gamma^i = e^i/T - 1/T^2)",
    status="exact",
    params=(T_LEN,),
    derive=lambda: softmax_taylor()[1],
    printed=lambda: 1 / _sym("T") - 1 / _sym("T") ** 2,
    doc="Diagonal of the softmax Jacobian diag(p) - p p^T at p = 1/T. Remark 2 writes "
        "'gamma^i_alpha = T^{-1} + o(1)' where gamma^i_i is meant.",
))

register(ClosedForm(
    id="localization.softmax.jacobian_offdiagonal",
    title="gamma^i_alpha = dS_i/domega_alpha at the origin (alpha != i)",
    source=f"{PAPER}, Sec. 2 (R1: gamma^i = e^i/T - 1/T^2)",
    status="exact",
    params=(T_LEN,),
    derive=lambda: softmax_taylor()[2],
    printed=lambda: -1 / _sym("T") ** 2,
    doc="Individually O(1/T^2), but the T - 1 of them produce the -1/2 in mu^i and the 7/12 and "
        "-2 theta in v^i: the 'selector' heuristic of Sec. 3 ignores them.",
))

register(ClosedForm(
    id="localization.u.mean",
    title="mu^i = E[u_i], the exact finite-T mean of the linearised softmax coordinate",
    source=f"{PAPER}, Lemma 1 (exact form [derived])",
    status="exact",
    params=(I_KEY, T_LEN, TRW, TEMP),
    derive=derive_mean,
    domain=index_domain,
    doc=_RW + "mu^i = (i - (T+1)/2) tr(W)/(lambda T) + 1/T. Depends on W_QK only through tr(W). "
        "Lemma 1 prints the T -> infinity limit (localization.u.mean_limit).",
))

register(ClosedForm(
    id="localization.u.mean_limit",
    title="Large-T mean (i/T - 1/2) tr(W)/lambda of Lemma 1",
    source=f"{PAPER}, Lemma 1",
    status="asymptotic",
    params=(I_KEY, T_LEN, TRW, TEMP),
    derive=derive_mean_limit,
    printed=printed_mean,
    domain=index_domain,
    doc=_RW + "T -> infinity limit of localization.u.mean at fixed theta = i/T, written in i/T; "
        "off by O(1/T) at finite T (about 0.1 at T = 40 for the spec's spectra).",
))

register(ClosedForm(
    id="localization.u.variance",
    title="v^i = Var[u_i], the exact finite-T variance of the linearised softmax coordinate",
    source=f"{PAPER}, Lemma 1 (exact form [derived]; printed variance is wrong)",
    status="exact",
    params=(I_KEY, T_LEN, TRW2, TEMP),
    derive=derive_variance,
    domain=index_domain,
    doc=_RW + "v^i = tr(W^2)/lambda^2 (24 i^2 - 24 T i - 24 i + 7 T^2 + 12 T + 5)/(12 T^2) = "
        "tr(W^2)/lambda^2 [2 theta^2 - 2 theta + 7/12 + (1 - 2 theta)/T + 5/(12 T^2)], theta = i/T. "
        "Depends on W_QK only through tr(W^2). The printed Lemma 1 variance is kept (erratum) on "
        "localization.u.variance_limit.",
))

register(ClosedForm(
    id="localization.u.variance_limit",
    title="Large-T variance (2 theta^2 - 2 theta + 7/12) tr(W^2)/lambda^2 (Lemma 1, corrected)",
    source=f"{PAPER}, Lemma 1",
    status="asymptotic",
    params=(I_KEY, T_LEN, TRW2, TEMP),
    derive=derive_variance_limit,
    printed=printed_variance,
    domain=index_domain,
    doc=_RW + "T -> infinity limit of localization.u.variance at fixed theta = i/T: "
        "(2 (theta - 1/2)^2 + 1/12) tr(W^2)/lambda^2, symmetric about theta = 1/2 and smallest there.",
    erratum="Lemma 1 prints v^i = (2 i^2/T^2 + 7/12) tr(W^2)/lambda^2; the correct leading term is "
            "(2 theta^2 - 2 theta + 7/12) tr(W^2)/lambda^2. The proof's term (B2) = 2 sum_{j>i} E[s_i s_j] "
            "drops 2 T^2 i tr(W^2) (it should read (3 T^2 i - 2 T i^2 - i^3) tr(W^2) + ...). The printed "
            "form is right only at theta = 0; at theta = 1/2 it is 13 times too large. Monte Carlo "
            "follows the corrected form.",
))

register(ClosedForm(
    id="localization.random_walk.quadratic_mean",
    title="E[x_i^T W x_i] for a random walk (Lemma 4, eq. 15)",
    source=f"{PAPER}, Lemma 4, eq. 15",
    status="exact",
    params=(I_KEY, TRW),
    derive=lambda: _walk_moment("quadratic"),
    printed=printed_quadratic_mean,
    doc=_RW + "Here W is any symmetric matrix (W_QK in the application).",
    erratum="Eq. 15 prints (i - 1) tr(W Sigma), the value for a walk started at x_1 = 0; under "
            "Assumption 1 as stated (x_1 ~ N(0, Sigma)) it is i tr(W Sigma). Leading order agrees.",
))

register(ClosedForm(
    id="localization.random_walk.quadratic_second_moment",
    title="E[(x_i^T W x_i)^2] for a random walk (Lemma 4, eq. 16)",
    source=f"{PAPER}, Lemma 4, eq. 16",
    status="exact",
    params=(I_KEY, TRW, TRW2),
    derive=lambda: _walk_moment("quadratic_sq"),
    printed=printed_quadratic_second_moment,
    doc=_RW + "i^2 (2A + B) with A = tr(W Sigma W Sigma), B = tr(W Sigma)^2.",
    erratum="Eq. 16 prints (i^2 - 2i + 2)(2A + B); under Assumption 1 it is i^2 (2A + B) (with "
            "x_1 = 0 it would be (i - 1)^2 (2A + B): the printed constant adds another 2A + B). "
            "Leading order agrees.",
))

register(ClosedForm(
    id="localization.random_walk.cross_moment",
    title="E[x_i^T W x_k x_k^T W x_i] for a random walk, i <= k (Lemma 4, eq. 17)",
    source=f"{PAPER}, Lemma 4, eq. 17",
    status="exact",
    params=(I_KEY, K_KEY, TRW, TRW2),
    derive=lambda: _walk_moment("cross"),
    printed=printed_cross_moment,
    domain=index_domain,
    doc=_RW + "(i^2 + i k) A + i^2 B with A = tr(W Sigma W Sigma), B = tr(W Sigma)^2 (the paper's j is k).",
    erratum="Eq. 17 prints (i^2 + ij - 3i - j + 4) A + (i^2 - 2i + 2) B; under Assumption 1 it is "
            "(i^2 + ij) A + i^2 B (x_1 = 0 would give (i-1)(i+j-2) A + (i-1)^2 B; the printed form "
            "adds 2A + B to that). Leading order agrees.",
))

register(ClosedForm(
    id="localization.random_walk.mixed_moment",
    title="E[x_i^T W x_k x_k^T W x_k] for a random walk, i <= k (Lemma 4, eq. 18)",
    source=f"{PAPER}, Lemma 4, eq. 18",
    status="exact",
    params=(I_KEY, K_KEY, TRW, TRW2),
    derive=lambda: _walk_moment("mixed"),
    printed=printed_mixed_moment,
    domain=index_domain,
    doc=_RW + "i k (2A + B) (the paper's j is k).",
    erratum="Eq. 18 prints (ij - i - j + 2)(2A + B); under Assumption 1 it is ij (2A + B) (x_1 = 0 "
            "would give (i-1)(j-1)(2A + B); the printed form adds 2A + B). Leading order agrees.",
))

register(ClosedForm(
    id="localization.random_walk.query_product",
    title="E[x_i^T W_QK x_T x_k^T W_QK x_T], i <= k <= T (eq. 22)",
    source=f"{PAPER}, App. C, eq. 22",
    status="exact",
    params=(I_KEY, K_KEY, T_LEN, TRW, TRW2),
    derive=lambda: _walk_moment("s_product"),
    printed=printed_query_product,
    domain=index_domain,
    doc=_RW + "E[s_i s_k] = (T i + i k) tr(W^2) + i k tr(W)^2; Cov(s_i, s_k) = (T min + i k) tr(W^2). "
        "The paper's j is k.",
    erratum="Eq. 22 prints (ij + (T-2) i - j - (T-4)) tr(W^2) + (ij - i - j + 2) tr(W)^2 (constants "
            "of a walk started at x_1 = 0, inherited from Lemma 4); under Assumption 1 it is "
            "(T i + ij) tr(W^2) + ij tr(W)^2. The leading terms agree.",
))
