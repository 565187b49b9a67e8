"""The softmax at the origin (Bao, Hataya, Karakida 2024, §2, R1).

The first-order Taylor coefficients of the softmax over ``T`` logits at the origin are
``gamma^i = e^i/T - 1/T^2`` and ``gamma_0^i = 1/T``; derived here by ``sympy.diff`` of the softmax
with symbolic length T. They define the linearised coordinate ``u_i`` of :mod:`theory.localization.u`.

Contains
--------
``localization.softmax.value_at_origin``, ``.jacobian_diagonal``, ``.jacobian_offdiagonal``.

References
----------
.. [1] H. Bao, R. Hataya, R. Karakida, "Self-attention Networks Localize When QK-eigenspectrum
   Concentrates", ICML 2024. Sec. 2 (softmax Taylor expansion, R1), Remark 2.
"""

from __future__ import annotations

from functools import cache

from ..registry import ClosedForm, register
from . import sym
from .random_walk import T_LEN


@cache
def softmax_taylor():
    """(S(0)_i, dS_i/domega_i (0), dS_i/domega_alpha (0)) for alpha != i, with symbolic T.

    The softmax coordinate i with only omega_i = a and omega_alpha = b non-zero (the other
    T - 2 logits at 0) is ``e^a / (e^a + e^b + T - 2)``; its value and first derivatives at the
    origin are the Taylor coefficients gamma_0^i, gamma^i_i and gamma^i_alpha.
    """
    import sympy as sp

    T = sym("T")
    a, b = sp.symbols("a b", real=True)
    S = sp.exp(a) / (sp.exp(a) + sp.exp(b) + T - 2)
    at0 = {a: 0, b: 0}
    return (sp.simplify(S.subs(at0)), sp.factor(sp.diff(S, a).subs(at0)), sp.factor(sp.diff(S, b).subs(at0)))


register(ClosedForm(
    id="localization.softmax.value_at_origin",
    title="gamma_0^i = S(0)_i, the softmax at the origin",
    source="Sec. 2 (R1)",
    status="exact",
    params=(T_LEN,),
    derive=lambda: softmax_taylor()[0],
    printed=lambda: 1 / sym("T"),
    doc="The constant term of the first-order Taylor expansion of the softmax at omega = 0.",
))

register(ClosedForm(
    id="localization.softmax.jacobian_diagonal",
    title="gamma^i_i = dS_i/domega_i at the origin",
    source="Sec. 2 (R1: gamma^i = e^i/T - 1/T^2)",
    status="exact",
    params=(T_LEN,),
    derive=lambda: softmax_taylor()[1],
    printed=lambda: 1 / sym("T") - 1 / sym("T") ** 2,
    doc="Diagonal of the softmax Jacobian diag(p) - p p^T at p = 1/T. Remark 2 writes "
        "'gamma^i_alpha = T^{-1} + o(1)' where gamma^i_i is meant.",
))

register(ClosedForm(
    id="localization.softmax.jacobian_offdiagonal",
    title="gamma^i_alpha = dS_i/domega_alpha at the origin (alpha != i)",
    source="Sec. 2 (R1: gamma^i = e^i/T - 1/T^2)",
    status="exact",
    params=(T_LEN,),
    derive=lambda: softmax_taylor()[2],
    printed=lambda: -1 / sym("T") ** 2,
    doc="Individually O(1/T^2), but the T - 1 of them produce the -1/2 in mu^i and the 7/12 and "
        "-2 theta in v^i: the 'selector' heuristic of Sec. 3 ignores them.",
))
