"""Mean and variance of the linearised-softmax signal u_i (Bao, Hataya, Karakida 2024, §2, Lemma 1).

With ``omega = X^T W_QK x_T / lambda`` (``lambda`` is the parameter ``temperature``) and the
softmax's Taylor coefficients at the origin (:mod:`theory.localization.softmax`), the linearised coordinate is

    u_i = <gamma^i, omega> + gamma_0^i = omega_i/T - sum_j omega_j/T^2 + 1/T.

Derived here (not retyped), under random-walk tokens (:mod:`theory.localization.random_walk`): the exact finite-T
mean and variance of ``u_i`` by ``sympy.summation`` over the key index (the min(j, k) in the
covariance split into j < k, j = k, j > k), and their T -> infinity limits at fixed theta = i/T
by ``sympy.limit``.

Errata: Lemma 1's variance drops ``2 T^2 i trW2`` in term (B2) of its proof, so its
``2 theta^2 + 7/12`` should read ``2 theta^2 - 2 theta + 7/12``.

The proof of Lemma 1 (App. C) expands ``E[<gamma^i, X^T W_QK x_T>^2]`` (``s_j = x_j^T W_QK x_T``) as
``(A)/T^2 - ((B1) + (B2) + (B3))/T^3 + ((C1) + (C2))/T^4`` with ``(A) = E[s_i^2]``, ``(B1) = 2 E[s_i^2]``,
``(B2) = 2 sum_{j>i} E[s_i s_j]``, ``(B3) = 2 sum_{j<i} E[s_i s_j]``, ``(C1) = sum_j E[s_j^2]``, ``(C2) =
2 sum_{j<j'} E[s_j s_j']``, and states their leading orders. Each is derived here exactly at finite T
by summing eq. 22 (derived, :mod:`theory.localization.random_walk`), and its leading order as the
limit at fixed theta = i/T; (B2) and the second moment carry the slip that makes Lemma 1's variance
wrong.

Contains
--------
``localization.u.mean``, ``.mean_limit``, ``.variance``, ``.variance_limit``; the proof's terms
``.proof_a_limit``, ``.proof_b2``, ``.proof_b2_limit``, ``.proof_b3_limit``, ``.proof_c2_limit``,
``.second_moment``, ``.second_moment_limit``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention Networks Localize When QK-eigenspectrum
   Concentrates", ICML 2024. Sec. 2 (softmax Taylor expansion), Lemma 1 (App. C).
"""

from __future__ import annotations

from functools import cache

from ..registry import ClosedForm, register
from . import sym
from .random_walk import I_KEY, RANDOM_WALK, T_LEN, TEMP, TRW, TRW2, index_domain, signal_covariance

__all__ = ["derive_mean", "derive_variance", "proof_terms", "proof_term_limit"]


@cache
def derive_mean():
    """mu^i = E[s_i]/(lambda T) - sum_j E[s_j]/(lambda T^2) + 1/T."""
    import sympy as sp

    i, T, lam = sym("i"), sym("T"), sym("temperature")
    cov, mean, j, k = signal_covariance()
    a = sp.Symbol("a", integer=True, positive=True)
    total = sp.summation(mean.xreplace({j: a}), (a, 1, T))
    return sp.factor(mean.xreplace({j: i}) / (lam * T) - total / (lam * T**2) + 1 / T)


@cache
def derive_variance():
    """v^i = [Cov(s_i, s_i)/T^2 - 2 sum_j Cov(s_i, s_j)/T^3 + sum_{j,k} Cov(s_j, s_k)/T^4] / lambda^2,
    with Cov(s_j, s_k) = c(min, max) from the engine (the sums split at the diagonal)."""
    import sympy as sp

    i, T, lam = sym("i"), sym("T"), sym("temperature")
    cov, mean, j, k = signal_covariance()
    a, b = sp.symbols("a b", integer=True, positive=True)

    def c(lo, hi):
        return cov.xreplace({j: lo, k: hi})

    row = sp.summation(c(a, i), (a, 1, i)) + sp.summation(c(i, a), (a, i + 1, T))
    full = sp.summation(c(a, a), (a, 1, T)) + 2 * sp.summation(sp.summation(c(a, b), (a, 1, b - 1)), (b, 1, T))
    return sp.factor(sp.simplify((c(i, i) / T**2 - 2 * row / T**3 + full / T**4) / lam**2))


def _limit_at_fixed_theta(expr):
    """T -> infinity with i = theta T, then theta written back as i/T."""
    import sympy as sp

    i, T = sym("i"), sym("T")
    theta = sp.Symbol("theta_limit", positive=True)
    lim = sp.limit(expr.xreplace({i: theta * T}), T, sp.oo)
    return sp.expand(lim.xreplace({theta: i / T}))


@cache
def derive_mean_limit():
    return _limit_at_fixed_theta(derive_mean())


@cache
def derive_variance_limit():
    return _limit_at_fixed_theta(derive_variance())


@cache
def proof_terms():
    """The terms of the proof of Lemma 1 (App. C), exact at finite T: a dict with keys ``A``, ``B1``,
    ``B2``, ``B3``, ``C1``, ``C2`` and ``second_moment`` = E[<gamma^i, X^T W_QK x_T>^2] =
    A/T^2 - (B1 + B2 + B3)/T^3 + (C1 + C2)/T^4, from E[s_j s_k] (eq. 22 derived, j <= k)."""
    import sympy as sp

    from .random_walk import walk_moment

    i, k, T = sym("i"), sym("k"), sym("T")
    prod = walk_moment("s_product")

    def f(lo, hi):
        return prod.xreplace({i: lo, k: hi})

    a, b = sp.symbols("a_sum b_sum", integer=True, positive=True)
    out = {"A": f(i, i), "B1": 2 * f(i, i),
           "B2": 2 * sp.summation(f(i, a), (a, i + 1, T)),
           "B3": 2 * sp.summation(f(a, i), (a, 1, i - 1)),
           "C1": sp.summation(f(a, a), (a, 1, T)),
           "C2": 2 * sp.summation(sp.summation(f(a, b), (a, 1, b - 1)), (b, 1, T))}
    out = {key: sp.factor(sp.expand(v)) for key, v in out.items()}
    out["second_moment"] = sp.factor(sp.expand(out["A"] / T**2 - (out["B1"] + out["B2"] + out["B3"]) / T**3
                                               + (out["C1"] + out["C2"]) / T**4))
    return out


#: The power of T that each proof term is stated at (its leading order is T^k times a function of theta).
PROOF_ORDERS = {"A": 2, "B1": 3, "B2": 3, "B3": 3, "C1": 4, "C2": 4, "second_moment": 0}


@cache
def proof_term_limit(name: str):
    """The leading order T^k lim_{T -> oo} term(i = theta T)/T^k of a proof term, theta written back as i/T."""
    import sympy as sp

    T = sym("T")
    k = PROOF_ORDERS[name]
    return sp.expand(T**k * _limit_at_fixed_theta(proof_terms()[name] / T**k))


def _printed_proof(name):
    import sympy as sp

    i, T, A, B = sym("i"), sym("T"), sym("trW2"), sym("trW") ** 2
    return {"A": (i**2 + T * i) * A + i**2 * B,
            "B2": (T**2 * i - 2 * T * i**2 - i**3) * A + (T**2 * i - i**3) * B,
            "B3": (T * i**2 + i**3) * A + i**3 * B,
            "C2": sp.Rational(7, 12) * T**4 * A + T**4 / 4 * B,
            "second_moment": (sp.Rational(7, 12) + 2 * i**2 / T**2) * A
            + (sp.Rational(1, 4) - i / T + i**2 / T**2) * B}[name]


def printed_mean():
    """Lemma 1: mu^i = (i/T - 1/2) tr(W)/lambda + o(1)."""
    import sympy as sp

    i, T = sym("i"), sym("T")
    return (i / T - sp.Rational(1, 2)) * sym("trW") / sym("temperature")


def printed_variance():
    """Lemma 1: v^i = (2 i^2/T^2 + 7/12) tr(W^2)/lambda^2 + o(1)."""
    import sympy as sp

    i, T = sym("i"), sym("T")
    return (2 * i**2 / T**2 + sp.Rational(7, 12)) * sym("trW2") / sym("temperature") ** 2


register(ClosedForm(
    id="localization.u.mean",
    title="mu^i = E[u_i], the exact finite-T mean of the linearised softmax coordinate",
    source="Lemma 1 (exact form [derived])",
    status="exact",
    params=(I_KEY, T_LEN, TRW, TEMP),
    derive=derive_mean,
    domain=index_domain,
    doc=RANDOM_WALK + "mu^i = (i - (T+1)/2) tr(W)/(lambda T) + 1/T. Depends on W_QK only through tr(W). "
        "Lemma 1 prints the T -> infinity limit (localization.u.mean_limit).",
))

register(ClosedForm(
    id="localization.u.mean_limit",
    title="Large-T mean (i/T - 1/2) tr(W)/lambda of Lemma 1",
    source="Lemma 1",
    status="asymptotic",
    params=(I_KEY, T_LEN, TRW, TEMP),
    derive=derive_mean_limit,
    printed=printed_mean,
    domain=index_domain,
    doc=RANDOM_WALK + "T -> infinity limit of localization.u.mean at fixed theta = i/T, written in i/T; "
        "off by O(1/T) at finite T (about 0.1 at T = 40 for eigenvalue spectra of mean 0.5).",
))

register(ClosedForm(
    id="localization.u.variance",
    title="v^i = Var[u_i], the exact finite-T variance of the linearised softmax coordinate",
    source="Lemma 1 (exact form [derived]; printed variance is wrong)",
    status="exact",
    params=(I_KEY, T_LEN, TRW2, TEMP),
    derive=derive_variance,
    domain=index_domain,
    doc=RANDOM_WALK + "v^i = tr(W^2)/lambda^2 (24 i^2 - 24 T i - 24 i + 7 T^2 + 12 T + 5)/(12 T^2) = "
        "tr(W^2)/lambda^2 [2 theta^2 - 2 theta + 7/12 + (1 - 2 theta)/T + 5/(12 T^2)], theta = i/T. "
        "Depends on W_QK only through tr(W^2). The printed Lemma 1 variance is kept (erratum) on "
        "localization.u.variance_limit.",
))

register(ClosedForm(
    id="localization.u.variance_limit",
    title="Large-T variance (2 theta^2 - 2 theta + 7/12) tr(W^2)/lambda^2 (Lemma 1, corrected)",
    source="Lemma 1",
    status="asymptotic",
    params=(I_KEY, T_LEN, TRW2, TEMP),
    derive=derive_variance_limit,
    printed=printed_variance,
    domain=index_domain,
    doc=RANDOM_WALK + "T -> infinity limit of localization.u.variance at fixed theta = i/T: "
        "(2 (theta - 1/2)^2 + 1/12) tr(W^2)/lambda^2, symmetric about theta = 1/2 and smallest there.",
    erratum="Lemma 1 prints v^i = (2 i^2/T^2 + 7/12) tr(W^2)/lambda^2; the correct leading term is "
            "(2 theta^2 - 2 theta + 7/12) tr(W^2)/lambda^2. The proof's term (B2) = 2 sum_{j>i} E[s_i s_j] "
            "drops 2 T^2 i tr(W^2) (it should read (3 T^2 i - 2 T i^2 - i^3) tr(W^2) + ...). The printed "
            "form is right only at theta = 0; at theta = 1/2 it is 13 times too large. Monte Carlo "
            "follows the corrected form.",
))


# -- the proof of Lemma 1 (App. C) ----------------------------------------------------------------
_PROOF = ("App. C (proof of Lemma 1): s_j = x_j^T W_QK x_T, E[s_j s_k] = (T j + j k) tr(W^2) + j k tr(W)^2 "
          "(eq. 22 derived, j <= k). ")

register(ClosedForm(
    id="localization.u.proof_a_limit",
    title="Lemma 1's proof, term (A) = E[s_i^2], leading order (i^2 + T i) tr(W^2) + i^2 tr(W)^2",
    source="App. C (proof of Lemma 1), term (A)",
    status="asymptotic",
    params=(I_KEY, T_LEN, TRW, TRW2),
    derive=lambda: proof_term_limit("A"),
    printed=lambda: _printed_proof("A"),
    domain=index_domain,
    doc=_PROOF + "Exactly E[s_i^2] = (T i + i^2) tr(W^2) + i^2 tr(W)^2 (the printed o(T^2) remainder is the "
                 "x_1 = 0 constants of eq. 22).",
))

register(ClosedForm(
    id="localization.u.proof_b2",
    title="Lemma 1's proof, term (B2) = 2 sum_{j>i} E[s_i s_j], exact at finite T",
    source="App. C (proof of Lemma 1), term (B2) [derived]",
    status="exact",
    params=(I_KEY, T_LEN, TRW, TRW2),
    derive=lambda: proof_terms()["B2"],
    domain=index_domain,
    doc=_PROOF + "(B2) = 2 sum_{j=i+1}^T ((T i + i j) tr(W^2) + i j tr(W)^2) = i (T - i) ((3 T + i + 1) tr(W^2) + "
                 "(T + i + 1) tr(W)^2).",
))

register(ClosedForm(
    id="localization.u.proof_b2_limit",
    title="Lemma 1's proof, term (B2), leading order (3 T^2 i - 2 T i^2 - i^3) tr(W^2) + (T^2 i - i^3) tr(W)^2",
    source="App. C (proof of Lemma 1), term (B2)",
    status="asymptotic",
    params=(I_KEY, T_LEN, TRW, TRW2),
    derive=lambda: proof_term_limit("B2"),
    printed=lambda: _printed_proof("B2"),
    domain=index_domain,
    doc=_PROOF + "T^3 times the limit of (B2)/T^3 at fixed theta = i/T.",
    erratum="App. C prints (B2) = (T^2 i - 2 T i^2 - i^3) tr(W^2) + (T^2 i - i^3) tr(W)^2 + o(T^3): the sum "
            "2 sum_{j>i} T i tr(W^2) = 2 T i (T - i) tr(W^2) contributes 2 T^2 i, which is dropped; the "
            "leading term is (3 T^2 i - 2 T i^2 - i^3) tr(W^2). This slip is what makes Lemma 1's variance "
            "2 theta^2 + 7/12 instead of 2 theta^2 - 2 theta + 7/12.",
))

register(ClosedForm(
    id="localization.u.proof_b3_limit",
    title="Lemma 1's proof, term (B3) = 2 sum_{j<i} E[s_i s_j], leading order (T i^2 + i^3) tr(W^2) + i^3 tr(W)^2",
    source="App. C (proof of Lemma 1), term (B3)",
    status="asymptotic",
    params=(I_KEY, T_LEN, TRW, TRW2),
    derive=lambda: proof_term_limit("B3"),
    printed=lambda: _printed_proof("B3"),
    domain=index_domain,
    doc=_PROOF + "T^3 times the limit of (B3)/T^3 at fixed theta = i/T.",
))

register(ClosedForm(
    id="localization.u.proof_c2_limit",
    title="Lemma 1's proof, term (C2) = 2 sum_{j<j'} E[s_j s_j'], leading order 7 T^4/12 tr(W^2) + T^4/4 tr(W)^2",
    source="App. C (proof of Lemma 1), term (C2)",
    status="asymptotic",
    params=(T_LEN, TRW, TRW2),
    derive=lambda: proof_term_limit("C2"),
    printed=lambda: _printed_proof("C2"),
    doc=_PROOF + "T^4 times the limit of (C2)/T^4.",
))

register(ClosedForm(
    id="localization.u.second_moment",
    title="E[<gamma^i, X^T W_QK x_T>^2], the second moment in Lemma 1's proof, exact at finite T",
    source="App. C (proof of Lemma 1) [derived]",
    status="exact",
    params=(I_KEY, T_LEN, TRW, TRW2),
    derive=lambda: proof_terms()["second_moment"],
    domain=index_domain,
    doc=_PROOF + "(A)/T^2 - ((B1) + (B2) + (B3))/T^3 + ((C1) + (C2))/T^4; equals lambda^2 (v^i + (mu^i - 1/T)^2) "
                 "with the exact moments of localization.u.variance and .mean (the offset gamma_0^i = 1/T "
                 "is not part of <gamma^i, omega>).",
))

register(ClosedForm(
    id="localization.u.second_moment_limit",
    title="E[<gamma^i, X^T W_QK x_T>^2], leading order (7/12 - 2 theta + 2 theta^2) tr(W^2) + (theta - 1/2)^2 tr(W)^2",
    source="App. C (proof of Lemma 1)",
    status="asymptotic",
    params=(I_KEY, T_LEN, TRW, TRW2),
    derive=lambda: proof_term_limit("second_moment"),
    printed=lambda: _printed_proof("second_moment"),
    domain=index_domain,
    doc=_PROOF + "The T -> infinity limit at fixed theta = i/T.",
    erratum="App. C prints (7/12 + 2 i^2/T^2) tr(W^2) + (1/4 - i/T + i^2/T^2) tr(W)^2: the (B2) slip (a dropped "
            "2 T^2 i tr(W^2)) removes the -2 i/T of the tr(W^2) coefficient; the (tr W)^2 part is right. The "
            "printed variance of Lemma 1 follows from it.",
))
