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

Contains
--------
``localization.u.mean``, ``.mean_limit``, ``.variance``, ``.variance_limit``.

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

__all__ = ["derive_mean", "derive_variance"]


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
