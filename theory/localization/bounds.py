"""Norm bounds of W_QK from the eigenspectrum (Bao, Hataya, Karakida 2024, eqs. 7, 10).

Derived here (not retyped):

* ``bounds.spectral_lower``, ``bounds.frobenius_lower`` (eq. 7): the sharp constants ``c`` in
  ``|tr(W_QK Sigma)| <= c ||W_QK|| ||Sigma||_2``, evaluated at the equality case
  ``W_QK = Sigma = I_d`` (the upper bounds on ``c`` are von Neumann's trace inequality,
  ``c_2 <= d``, and Cauchy-Schwarz, ``c_F <= sqrt(d)``). The printed first inequality of
  eq. 7 uses ``sqrt(d)`` for the spectral norm: the erratum;
* ``bounds.frobenius_upper`` (eq. 10, the valid chain): ``W_QK = Sigma^{-1/2} B Sigma^{-1/2}``
  with ``B = Sigma^{1/2} W_QK Sigma^{1/2}`` symmetric, ``||B||_F^2 = tr W^2``.

``sigma_max`` / ``sigma_min`` are the largest / smallest eigenvalue of Sigma.

Contains
--------
``localization.bounds.spectral_lower``, ``.frobenius_lower``, ``.frobenius_upper``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention networks localize when QK-eigenspectrum
   concentrates", ICML 2024, eqs. 7, 10.
"""

from __future__ import annotations

from ..params import positive
from ..registry import ClosedForm, register
from . import sym
from .eigen import D_DIM
from .random_walk import TRW, TRW2

SIG_MAX = positive("sigma_max", "Largest eigenvalue ||Sigma||_2 of the token covariance.", example=1.7)
SIG_MIN = positive("sigma_min", "Smallest eigenvalue of the token covariance (1/||Sigma^-1||_2).",
                   example=0.4)


def _sharp_constant(norm_of_identity):
    """c = |tr(I_d I_d)| / (||I_d|| ||I_d||_2) at the equality case W_QK = Sigma = I_d."""
    import sympy as sp

    I = sp.Identity(sym("d"))
    return sp.simplify(sp.trace(I * I) / (norm_of_identity(I) * 1))


def derive_spectral_lower():
    """|tr W| / (c_2 ||Sigma||_2) <= ||W_QK||_2, c_2 = d (||I_d||_2 = 1)."""
    import sympy as sp

    c = _sharp_constant(lambda I: sp.Integer(1))
    return sp.Abs(sym("trW")) / (c * sym("sigma_max"))


def derive_frobenius_lower():
    """|tr W| / (c_F ||Sigma||_2) <= ||W_QK||_F, c_F = sqrt(d) (||I_d||_F = sqrt(tr I_d))."""
    import sympy as sp

    c = _sharp_constant(lambda I: sp.sqrt(sp.trace(I.T * I)))
    return sp.Abs(sym("trW")) / (c * sym("sigma_max"))


def printed_eq7_first():
    """Eq. 7's first term |tr W| / (sqrt(d) ||Sigma||_2), printed as a lower bound of ||W_QK||_2."""
    import sympy as sp

    return sp.Abs(sym("trW")) / (sp.sqrt(sym("d")) * sym("sigma_max"))


def derive_frobenius_upper():
    """||W_QK||_F = ||Sigma^-1/2 B Sigma^-1/2||_F <= ||Sigma^-1/2||_2^2 ||B||_F, ||B||_F^2 = tr W^2."""
    import sympy as sp

    inv_sqrt_norm = sym("sigma_min") ** sp.Rational(-1, 2)
    return inv_sqrt_norm**2 * sp.sqrt(sym("trW2"))


register(ClosedForm(
    id="localization.bounds.spectral_lower",
    title="Lower bound |tr W| / (d ||Sigma||_2) of ||W_QK||_2",
    source="eq. 7 (first inequality, corrected)",
    status="exact",
    params=(TRW, D_DIM, SIG_MAX),
    derive=derive_spectral_lower,
    printed=printed_eq7_first,
    erratum="Eq. 7 prints |tr W| / (sqrt(d) ||Sigma||_2) <= ||W_QK||_2, false: W_QK = Sigma = I_d "
            "gives sqrt(d) <= 1. The sharp constant for the spectral norm is d (von Neumann); "
            "sqrt(d) is the constant for the Frobenius norm (localization.bounds.frobenius_lower), "
            "so the rank-collapse chain of eq. 7 survives from ||W_QK||_F on.",
    doc="|tr(W_QK Sigma)| <= sum_k sigma_k(W_QK) sigma_k(Sigma) <= d ||W_QK||_2 ||Sigma||_2; "
        "equality at W_QK = Sigma = I_d.",
))

register(ClosedForm(
    id="localization.bounds.frobenius_lower",
    title="Lower bound |tr W| / (sqrt(d) ||Sigma||_2) of ||W_QK||_F (and of the entrywise l1 norm)",
    source="eq. 7 (valid version)",
    status="exact",
    params=(TRW, D_DIM, SIG_MAX),
    derive=derive_frobenius_lower,
    printed=printed_eq7_first,
    doc="|<W_QK^T, Sigma>_F| <= ||W_QK||_F ||Sigma||_F <= sqrt(d) ||W_QK||_F ||Sigma||_2; equality at "
        "W_QK = Sigma = I_d. With ||W_QK||_F <= ||W_QK||_1 (entrywise) this is the valid part of eq. 7.",
))

register(ClosedForm(
    id="localization.bounds.frobenius_upper",
    title="Upper bound ||Sigma^-1||_2 sqrt(tr W^2) of ||W_QK||_F (symmetric W_QK)",
    source="eq. 10 (valid chain)",
    status="exact",
    params=(TRW2, SIG_MIN),
    derive=derive_frobenius_upper,
    doc="For symmetric W_QK: ||W_QK||_2 <= ||W_QK||_F <= ||Sigma^-1||_2 sqrt(tr W^2) <= "
        "||Sigma^-1||_F sqrt(tr W^2); the last is eq. 10's end-to-end claim, which survives although "
        "its middle equality sqrt(tr W^2) = ||W||_F is false (localization.eigen.scale).",
))
