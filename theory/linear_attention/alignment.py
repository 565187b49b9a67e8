"""Alignment during a plateau of ATTN_S: the linearised flow of a head still near its start (Zhang, Singh,
Latham, Saxe 2025, App. E.5.1, eqs. 64-66; App. E.6.1, eqs. 72-73).

While a head's weights are small, the flow of eq. 14 (``tau dk_i/dt = v_i G q_i``, ``tau dq_i/dt = v_i G^T
k_i`` with ``G = linear_attention.merged.gradient``) is linear in ``(k_i, q_i)`` with ``G`` frozen at the
fixed point ``M_m`` the other heads hold (errors of relative order ``w_init^2``). ``G(M_m)`` is diagonal in
the eigenbasis of ``Lambda``: its eigenvalue ``omega_d`` is derived here from ``merged.gradient``, ``lambda_d^2``
in a direction not learned yet (``M`` has eigenvalue 0 there; eq. 64's and eq. 72's Omega) and 0 in a learned
one (``M`` at the fixed point ``m*_d``). With ``V = (1/tau) integral_{t_m}^t v_i`` each eigen-component solves
``dk/dV = omega q``, ``dq/dV = omega k`` (``dsolve``):

    k_d = k_d(t_m) cosh(omega_d V) + q_d(t_m) sinh(omega_d V),
    q_d = k_d(t_m) sinh(omega_d V) + q_d(t_m) cosh(omega_d V),

eq. 66 (``m = 0``) and eq. 73 in ``cosh``/``sinh`` form. In a learned direction both components stay where
they were at ``t_m``; eq. 73's third term gives both ``k_d(t_m) + q_d(t_m)`` instead (an erratum:
``learned_component``).

Contains
--------
``linear_attention.alignment.key_component``, ``.query_component``, ``.learned_component``.
"""

from __future__ import annotations

from functools import cache

from ..params import positive, real
from ..registry import ClosedForm, register

LAM = positive("lam", "Eigenvalue lambda_d of Lambda (a direction not learned yet, d > m).")
V_INT = real("V", "V = (1/tau) integral of the head's value weight v_i from t_m (negative where v_i < 0).")
K0 = real("k0", "The component e_d^T k_i(t_m) of the head's key at the start of the window.")
Q0 = real("q0", "The component e_d^T q_i(t_m) of the head's query at the start of the window.")
OWN = real("own", "A learned direction's component of the key (or query) at t_m.")
OTHER = real("other", "The same component of the query (or key) at t_m.")


def _sym(name):
    from . import sym

    return sym(name)


@cache
def rate(learned: bool):
    """omega_d, the eigenvalue of G(M_m) = -1/2 dL/dM (``linear_attention.merged.gradient``) in an
    eigen-direction with ``M``'s eigenvalue 0 (not learned) or the fixed point's ``m*_d`` (learned)."""
    import sympy as sp

    from ..matrices import spectral
    from . import merged
    from .data import variables

    m_d = merged.converged_eigenvalue() if learned else sp.S.Zero
    return sp.simplify(spectral(merged.derive_gradient(), variables().Lam, _sym("lam"), {_sym("M"): m_d}))


@cache
def _solution(learned: bool):
    """(k(V), q(V)) from dk/dV = omega q, dq/dV = omega k, k(0) = k0, q(0) = q0 (``dsolve``)."""
    import sympy as sp

    V = _sym("V")
    k, q = sp.Function("k"), sp.Function("q")
    omega = rate(learned)
    k0, q0 = (_sym("own"), _sym("other")) if learned else (_sym("k0"), _sym("q0"))
    sol = sp.dsolve([sp.Eq(k(V).diff(V), omega * q(V)), sp.Eq(q(V).diff(V), omega * k(V))],
                    [k(V), q(V)], ics={k(0): k0, q(0): q0})
    by = {s.lhs: sp.expand(s.rhs.rewrite(sp.exp)) for s in sol}   # e^{+-omega V} apart: nothing overflows early
    return by[k(V)], by[q(V)]


def derive_key_component():
    return _solution(False)[0]


def derive_query_component():
    return _solution(False)[1]


def derive_learned_component():
    return _solution(True)[0]


def _printed_exponentials(sign):
    """Eq. 66 / the first two terms of eq. 73: 1/2 (k0 + q0) e^{lambda^2 V} [e_d; e_d] + 1/2 (k0 - q0)
    e^{-lambda^2 V} [e_d; -e_d]; ``sign`` +1 picks the key's component, -1 the query's."""
    import sympy as sp

    lam, V, k0, q0 = (_sym(n) for n in ("lam", "V", "k0", "q0"))
    return (k0 + q0) / 2 * sp.exp(lam**2 * V) + sign * (k0 - q0) / 2 * sp.exp(-lam**2 * V)


def printed_key_component():
    return _printed_exponentials(1)


def printed_query_component():
    return _printed_exponentials(-1)


def printed_learned_component():
    """Eq. 73, third term: sum_{d <= m} e_d^T (k_i(t_m) + q_i(t_m)) [e_d; e_d], the same sum in the key's
    and the query's component."""
    return _sym("own") + _sym("other")


register(ClosedForm(
    id="linear_attention.alignment.key_component",
    title="e_d^T k_i during a plateau, linearised: the key's component along a direction not learned yet",
    source="eq. 66 (m = 0) and eq. 73 (d > m), App. E.5.1, E.6.1",
    status="asymptotic",
    params=(LAM, V_INT, K0, Q0),
    derive=derive_key_component,
    printed=printed_key_component,
    doc="k_d(t) = k_d(t_m) cosh(lambda_d^2 V) + q_d(t_m) sinh(lambda_d^2 V) with V = (1/tau) int_{t_m}^t v_i: "
        "the linearised flow of a head whose weights are still small (relative error O(w_init^2)). The "
        "exponent lambda_d^2 is G's eigenvalue where M is 0, derived from linear_attention.merged.gradient.",
))

register(ClosedForm(
    id="linear_attention.alignment.query_component",
    title="e_d^T q_i during a plateau, linearised: the query's component along a direction not learned yet",
    source="eq. 66 (m = 0) and eq. 73 (d > m), App. E.5.1, E.6.1",
    status="asymptotic",
    params=(LAM, V_INT, K0, Q0),
    derive=derive_query_component,
    printed=printed_query_component,
    doc="q_d(t) = k_d(t_m) sinh(lambda_d^2 V) + q_d(t_m) cosh(lambda_d^2 V): with v_i > 0 the key and query "
        "grow along (e_d, e_d), with v_i < 0 along (e_d, -e_d); fastest for the largest unlearned lambda_d.",
))

register(ClosedForm(
    id="linear_attention.alignment.learned_component",
    title="A learned direction's component of a small head's key (or query) during a later plateau",
    source="eq. 73, third term (App. E.6.1)",
    status="asymptotic",
    params=(OWN, OTHER),
    derive=derive_learned_component,
    printed=printed_learned_component,
    doc="G(M_m) vanishes along the learned directions e_d, d <= m, so the key's and the query's components "
        "there stay where they were at t_m, each its own.",
    erratum="Eq. 73's third term, sum_{d <= m} e_d^T (k_i(t_m) + q_i(t_m)) [e_d; e_d], gives the key and the "
            "query the same component k_d(t_m) + q_d(t_m) along a learned direction; it should be "
            "sum_{d <= m} [(e_d^T k_i(t_m)) e_d; (e_d^T q_i(t_m)) e_d]: at t = t_m the printed form already "
            "disagrees with the state it starts from.",
))
