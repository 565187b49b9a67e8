"""Self-attention dynamics of Scan and Snap (Tian, Wang, Chen, Du 2023, §5-6, App. E-F).

Derived here (sympy, not retyped); the decoder (Lemma 5) is :mod:`theory.scan_snap.decoder`:

* Theorem 2, eq. 99: with a single common token ``l`` (the only overlap of classes n, n') the
  per-pair term of eq. 97 is ``-(1 - f_nl^2) f_n^T f_n'``.
* Theorem 3, eq. 11: separating ``dz_l / dz_l' = r + 1`` (eqs. 108-110) and solving for the other
  token gives the relative gain ``r(t) = r(0) exp(2 (z_l(t) - z_l(0)))``.
* Theorem 4 (eqs. 118-129): the common-token logit obeys ``dz/dt = -k C0^{-1} eta_Z gamma e^{4z}``
  and ``dB_n/dt = eta_Z C0^{-1} gamma e^{4z}``; sympy's ``dsolve`` in the variable
  ``Gamma = eta_Z int_0^t gamma`` gives ``z = -1/4 ln(1 + 4 k Gamma / C0)`` and the definite integral
  ``B_n = 1/(4k) ln(1 + 4 k Gamma / C0)``. The substitution ``dt = K ((M-1) + e^{M h}) / eta_Y dh``
  of eqs. 125-128 (the clock h(t/K) of eq. 44) integrates gamma exactly:
  ``Gamma = (eta_Z/eta_Y) K (M-1)^2 h(t/K)^2 / 2``. ``k = 1`` is Theorem 4's hypothesis (the class sum
  of eq. 10 read as an average, i.e. expected batch-1 SGD); ``k = K`` is eq. 10's sum read literally.
* Eq. 14's two regimes: the corrected B_n with ``h(t/K) ~ eta_Y t/(M K)`` (the slope of eq. 44 at
  h = 0) and ``h(t/K) ~ ln(M eta_Y t/K)/M`` (the dominant balance ``e^{M h} ~ M eta_Y t/K`` of eq. 45).
* Eq. 13 in the symmetric case (K classes sharing the query and one common token of overlap ``q =
  f_n^T f_n'``): ``E = q (J - I)`` inverts in closed form, ``beta = E' = q/((1-q)(1+(K-1) q))``, so
  ``xi_n/gamma = (K-1) q^2/((1-q)(1+(K-1) q))`` and the averaged common-token rate is ``-(K-1) q^2/(1 +
  (K-1) q)``; to leading order in ``q = e^{2z}/rho0^2`` both are ``e^{4z}/C0`` with ``C0 = rho0^4/(K-1)``.

Errata: eq. 124 drops the lower limit of the integral, so the paper's
``B_n = 1/4 ln(C0 + 4 Gamma)`` (and eqs. 14, 129-132) carries an extra ``1/4 ln C0`` (B_n(0) != 0);
eq. 10 sums over classes, which under Theorem 4's clock multiplies the common-token rate by K; eq. 13's
``C0 := rho0^4/K`` should be ``rho0^4/(K-1)``. Theorem 3's bound (eq. 12) and the consequences of Theorem 4
are :mod:`theory.scan_snap.growth`.

Records whose value needs ``h`` evaluate it through ``scan_snap.h.continuous`` /
``scan_snap.h.discrete`` in the requested backend (``evaluate=``); the sympy expression is
written in the auxiliary symbol ``h`` (passed as a derived value to the emitted printed form).

Contains
--------
``scan_snap.attention.growth``, ``.growth_printed``, ``.growth_literal``, ``.common_logit``,
``.common_logit_literal``, ``.growth_scanning``, ``.growth_snapping``, ``.relative_gain``,
``.common_pair_term``, ``.symmetric_xi``, ``.symmetric_common_rate``, ``.snap_constant``.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..params import index, nonnegative, positive
from ..backends import backend_ops
from ..registry import ClosedForm, register
from .decoder import ETA_Y, M_VOCAB
from .h import ETA_Z

T_STEPS = nonnegative("t", "Total number of batch-1 SGD steps (each of the K classes has had about t/K).",
                      sample=(0, 20))
K_CLASSES = index("K", "Number of next tokens (sequence classes), sampled uniformly.")
C0 = positive("C0", "Constant C0 of Theorem 4 (rho_0^4 / K in the paper's heuristic, eq. 13).")
R0 = positive("r0", "Initial relative gain r_{l/l'|n}(0) > 0 of a distinct token l over l' (Theorem 3).")
DZ = nonnegative("dz", "Growth z_ml(t) - z_ml(0) of the distinct token's logit (>= 0 by Theorem 2).")
F_NL = positive("f_nl", "Entry f_nl of the normalised attention f_n on the common token l (<= 1).")
F_NPL = positive("f_npl", "Entry f_n'l of class n' on the same common token l (<= 1).")

BN_PARAMS = (T_STEPS, M_VOCAB, K_CLASSES, ETA_Y, ETA_Z, C0)

__all__ = ["derive_common_logit", "derive_growth", "derive_gamma_integral", "printed_growth",
           "separable_solution"]


def _sym(name):
    from . import sym

    return sym(name)


# -- Theorem 4 ---------------------------------------------------------------------------------
@cache
def separable_solution(k=1):
    """dsolve of dz/dGamma = -k e^{4z}/C0, z(0) = 0, and B(Gamma) = int_0^Gamma e^{4z}/C0.

    Returns (z(Gamma), B(Gamma), Gamma symbol). ``k`` is 1 (Theorem 4) or the class count
    K (eq. 10 summed literally).
    """
    import sympy as sp

    G = sp.Symbol("Gamma", nonnegative=True)
    C = _sym("C0")
    k = sp.sympify(k)
    z = sp.Function("z")
    sol = sp.dsolve(sp.Eq(z(G).diff(G), -k * sp.exp(4 * z(G)) / C), z(G), ics={z(0): 0})
    zG = sp.logcombine(sol.rhs, force=True)
    g = sp.Symbol("g", nonnegative=True)
    B = sp.integrate(sp.exp(4 * zG.subs(G, g)) / C, (g, 0, G))
    return sp.simplify(zG), sp.simplify(B), G


@cache
def derive_gamma_integral():
    """Gamma = eta_Z int_0^t gamma(t') dt' by the substitution t' -> h(t'/K) (eqs. 125-128)."""
    import sympy as sp

    M, K, eY, eZ, h = _sym("M"), _sym("K"), _sym("eta_Y"), _sym("eta_Z"), _sym("h")
    u = sp.Symbol("u", nonnegative=True)
    gamma = (M - 1) ** 2 * u / ((M - 1) + sp.exp(M * u))  # gamma(t) at h(t/K) = u (R3)
    dt_du = K * ((M - 1) + sp.exp(M * u)) / eY  # from dh(t/K)/dt = eta_Y / (K ((M-1) + e^{M h}))  (eq. 44)
    return sp.factor(sp.integrate(sp.simplify(eZ * gamma * dt_du), (u, 0, h)))


def _in_h(expr_of_gamma, G):
    return expr_of_gamma.xreplace({G: derive_gamma_integral()})


@cache
def derive_growth(literal=False):
    """B_n(t) in terms of h = h(t/K): 1/(4k) ln(1 + 4 k Gamma/C0), k = K if ``literal``."""
    _, B, G = separable_solution(_sym("K") if literal else 1)
    return _in_h(B, G)


@cache
def derive_common_logit(literal=False):
    z, _, G = separable_solution(_sym("K") if literal else 1)
    return _in_h(z, G)


def printed_growth():
    """Eq. 124/129 as printed: 1/4 ln(C0 + 2 (eta_Z/eta_Y) K (M-1)^2 h^2)."""
    import sympy as sp

    M, K, eY, eZ, h, C = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "h", "C0"))
    return sp.log(C + 2 * eZ / eY * K * (M - 1) ** 2 * h**2) / 4


def printed_common_logit():
    """Eq. 122: exp(-4 z) = 4 C0^{-1} Gamma + 1, Gamma from eq. 128."""
    import sympy as sp

    M, K, eY, eZ, h, C = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "h", "C0"))
    return -sp.log(4 / C * (eZ / eY) * K * (M - 1) ** 2 * h**2 / 2 + 1) / 4


# eq. 14: asymptotic h(t/K) in the two regimes
@cache
def _h_linear():
    """h(t/K) ~ t/K * dh/dt|_{h=0} with dh/dt = eta_Y/((M-1) + e^{M h}) (eq. 44)."""
    import sympy as sp

    M, K, eY, t, h = (_sym(n) for n in ("M", "K", "eta_Y", "t", "h"))
    slope = (eY / ((M - 1) + sp.exp(M * h))).subs(h, 0)
    return sp.simplify(slope * t / K)


@cache
def _h_log():
    """h(t/K) from the dominant balance e^{M h} = M eta_Y (t/K) of eq. 45 at large t."""
    import sympy as sp

    M, K, eY, t, h = (_sym(n) for n in ("M", "K", "eta_Y", "t", "h"))
    (sol,) = sp.solve(sp.Eq(sp.exp(M * h), M * eY * t / K), h)
    return sol


@cache
def derive_growth_scanning():
    import sympy as sp

    return sp.simplify(derive_growth().xreplace({_sym("h"): _h_linear()}))


@cache
def derive_growth_snapping():
    return derive_growth().xreplace({_sym("h"): _h_log()})


def _stable_asymptotic(h_of_t):
    """1/4 log1p(4 Gamma/C0) with Gamma at the asymptotic h (no cancellation at small t)."""
    from sympy.codegen.cfunctions import log1p

    G = derive_gamma_integral().xreplace({_sym("h"): h_of_t})
    return log1p(4 * G / _sym("C0")) / 4


def printed_growth_scanning():
    """Eq. 14, t < t_0': 1/4 ln(C0 + 2 (M-1)^2/(K M^2) eta_Y eta_Z t^2)."""
    import sympy as sp

    M, K, eY, eZ, t, C = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "t", "C0"))
    return sp.log(C + 2 * (M - 1) ** 2 / (K * M**2) * eY * eZ * t**2) / 4


def printed_growth_snapping():
    """Eq. 14, t >= t_0: 1/4 ln(C0 + 2 K (M-1)^2/M^2 (eta_Z/eta_Y) ln^2(M eta_Y t/K))."""
    import sympy as sp

    M, K, eY, eZ, t, C = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "t", "C0"))
    return sp.log(C + 2 * K * (M - 1) ** 2 / M**2 * eZ / eY * sp.log(M * eY * t / K) ** 2) / 4


# -- Theorem 3 --------------------------------------------------------------------------------
@cache
def derive_relative_gain():
    """Eqs. 108-111: e^{-2 dz_l} dz_l = (r0 + 1) e^{-2 dz_l'} dz_l' integrated from 0; solve for dz_l'
    and substitute into r = f_l^2/f_l'^2 - 1 = (r0 + 1) e^{2 (dz_l - dz_l')} - 1."""
    import sympy as sp

    r0, a = _sym("r0"), _sym("dz")
    b, x = sp.Symbol("b_other", real=True), sp.Symbol("x", real=True)
    lhs = sp.integrate(sp.exp(-2 * x), (x, 0, a))
    rhs = (r0 + 1) * sp.integrate(sp.exp(-2 * x), (x, 0, b))
    # solve for e^{-2 b} (linear in it)
    E = sp.Symbol("E_b", positive=True)
    (Eb,) = sp.solve(sp.Eq(lhs, rhs.subs(sp.exp(-2 * b), E)), E)
    r = (r0 + 1) * sp.exp(2 * a) * Eb - 1
    return sp.simplify(sp.expand(r))


def printed_relative_gain():
    """Eq. 11: r(t) = r(0) chi_l(t), chi_l = exp(2 (z_ml(t) - z_ml(0)))."""
    import sympy as sp

    return _sym("r0") * sp.exp(2 * _sym("dz"))


# -- Theorem 2 --------------------------------------------------------------------------------
@cache
def derive_common_pair_term():
    """Eq. 97's per-pair term f_nl [(f_n^T f_n') f_nl - f_n'l] with f_n^T f_n' = f_nl f_n'l
    (classes n, n' share only the token l)."""
    import sympy as sp

    a, b = _sym("f_nl"), _sym("f_npl")
    overlap = a * b
    return sp.factor(a * (overlap * a - b))


def printed_common_pair_term():
    """Eq. 99: -(1 - f_nl^2) (f_n^T f_n')."""
    a, b = _sym("f_nl"), _sym("f_npl")
    return -(1 - a**2) * (a * b)


# -- eq. 13: the symmetric single-common-token case -------------------------------------------------------
@cache
def symmetric_inverse():
    """(I + E)^{-1} for E = q (J - I) (K x K, J the all-ones matrix), as (a, b) with (I + E)^{-1} = a I + b J:
    (x I + y J)(a I + b J) = x a I + (x b + y a + K y b) J, solved for the identity."""
    import sympy as sp

    q, K = _sym("q"), _sym("K")
    a, b = sp.symbols("a b")
    x, y = 1 - q, q                                        # I + E = (1 - q) I + q J
    sol = sp.solve([sp.Eq(x * a, 1), sp.Eq(x * b + y * a + K * y * b, 0)], [a, b], dict=True)[0]
    return sp.simplify(sol[a]), sp.simplify(sol[b])


@cache
def derive_symmetric_xi():
    """xi_n/gamma = sum_{n' != n} beta_nn' f_n^T f_n' with beta = E' = I - (I + E)^{-1} off the diagonal
    (= -b) and f_n^T f_n' = q for all n != n' (one common token of weight f_l^2 = q in every class)."""
    import sympy as sp

    q, K = _sym("q"), _sym("K")
    _, b = symmetric_inverse()
    return sp.factor(sp.simplify((K - 1) * (-b) * q))


@cache
def derive_symmetric_common_rate():
    """dz_ml/dt / (eta_Z gamma) of the common token from eq. 97 averaged over the K classes (expected
    batch-1 SGD): (1/K) sum_n f_l sum_{n' != n} beta_nn' (q f_l - f_l) with f_l = sqrt(q)."""
    import sympy as sp

    q, K = _sym("q"), _sym("K")
    _, b = symmetric_inverse()
    fl = sp.sqrt(q)
    per_class = fl * (K - 1) * (-b) * (q * fl - fl)
    return sp.factor(sp.simplify(K * per_class / K))


@cache
def derive_snap_constant():
    """Eq. 13's C0: with q = e^{2z}/rho0^2 (normaliser held at rho0), xi_n/gamma = e^{4z}/C0 to leading
    order in q, and the averaged common-token rate -eta_Z gamma e^{4z}/C0 with the same C0."""
    import sympy as sp

    q, rho0 = _sym("q"), _sym("rho0")
    lead_xi = sp.series(derive_symmetric_xi(), q, 0, 3).removeO()
    lead_z = sp.series(derive_symmetric_common_rate(), q, 0, 3).removeO()
    assert sp.simplify(lead_xi + lead_z) == 0               # the same constant in both halves of eq. 13
    coef = sp.simplify(lead_xi / q**2)
    return sp.simplify(rho0**4 / coef)


def printed_snap_constant():
    """Eq. 13: C0 := rho0^4/K."""
    return _sym("rho0") ** 4 / _sym("K")


# -- numerics ----------------------------------------------------------------------------------
def _h_of_t(backend, values):
    """h(t/K) from scan_snap.h.continuous in ``backend``."""
    import theory

    conv = backend_ops(backend).number
    t = conv(values["t"])
    eta = conv(values["eta_Y"]) if backend == "torch" else values["eta_Y"]  # float64 inside
    return theory.get("scan_snap.h.continuous")(backend, t=t / values["K"], M=values["M"], eta_Y=eta)


def _gamma_integral(backend, values, h):
    conv = backend_ops(backend).number
    M, K = values["M"], values["K"]
    return conv(values["eta_Z"]) / conv(values["eta_Y"]) * K * (M - 1) ** 2 * h**2 / 2


def _bn_eval(kind):
    def evaluate(backend, values, dims):
        ops = backend_ops(backend)
        log1p, log, conv = ops.log1p, ops.log, ops.number
        h = _h_of_t(backend, values)
        G = _gamma_integral(backend, values, h)
        C, K = conv(values["C0"]), values["K"]
        if kind == "growth":
            return log1p(4 * G / C) / 4
        if kind == "literal":
            return log1p(4 * K * G / C) / (4 * K)
        if kind == "logit":
            return -log1p(4 * G / C) / 4
        if kind == "logit_literal":
            return -log1p(4 * K * G / C) / 4
        if kind == "printed":
            return log(C + 4 * G) / 4
        raise AssertionError(kind)

    return evaluate


def _bn_derived(values, dims, backend="numpy"):
    return {"h": _h_of_t(backend, values)}


def _t_positive(values, dims):
    if np.any(np.asarray(values["t"]) <= 0):
        raise ValueError(f"t: must be > 0 (ln t in the snapping regime), got {values['t']!r}")


def _f_domain(values, dims):
    for n in ("f_nl", "f_npl"):
        if np.any(np.asarray(values[n]) > 1):
            raise ValueError(f"{n}: an entry of a unit vector must be <= 1, got {values[n]!r}")


def _q_domain(values, dims):
    if np.any(np.asarray(values["q"]) >= 1):
        raise ValueError(f"q: the overlap f_n^T f_n' = f_l^2 of two unit vectors must be < 1, got {values['q']!r}")


def _rho0_domain(values, dims):
    if np.any(np.asarray(values["rho0"]) < 1):
        raise ValueError(f"rho0: ||c~_n||/c~_ln >= 1, got {values['rho0']!r}")


# -- registry ---------------------------------------------------------------------------------------
_CLOCK = ("t counts total batch-1 SGD steps; h = h(t/K) solves dh/dt = eta_Y/((M-1) + e^{M h}) "
          "(eq. 44, record scan_snap.h.continuous); Gamma = eta_Z int_0^t gamma = (eta_Z/eta_Y) K "
          "(M-1)^2 h^2/2 exactly (eqs. 125-128).")
_ERR_124 = ("Eq. 124 drops the lower limit of the definite integral int_0^t dGamma/(C0 + 4 Gamma): the "
            "paper's B_n = 1/4 ln(C0 + 4 Gamma) exceeds the correct 1/4 ln(1 + 4 Gamma/C0) by 1/4 ln C0 "
            "at every t (so its B_n(0) = ln(C0)/4 != 0); eqs. 14, 129-132 inherit the offset. Growth "
            "rates are unaffected.")

register(ClosedForm(
    id="scan_snap.attention.growth",
    title="B_n(t) of Theorem 4: the corrected definite integral 1/4 ln(1 + 4 Gamma/C0)",
    source="Theorem 4, eqs. 118-129 (integration constant corrected)",
    status="exact",
    params=BN_PARAMS,
    derive=derive_growth,
    printed=printed_growth,
    derived=_bn_derived,
    derived_names=("h",),
    evaluate=_bn_eval("growth"),
    doc="B_n(t) = eta_Z int_0^t xi_n under Theorem 4's hypotheses dz_ml/dt = -C0^{-1} eta_Z gamma e^{4 z_ml}, "
        "xi_n = C0^{-1} gamma e^{4 z_ml}, z_ml(0) = 0 (the class sum of eq. 10 read as an average: "
        "expected batch-1 SGD). Exact given h; the hypotheses are the paper's heuristic (eq. 13). "
        + _CLOCK + " B_n(0) = 0; B_n ~ 1/2 ln t in the scanning stage and ~ 1/2 ln ln t after t_0 once "
        "4 Gamma >> C0.",
    erratum=_ERR_124,
))

register(ClosedForm(
    id="scan_snap.attention.growth_printed",
    title="B_n(t) as printed in eqs. 124/129: 1/4 ln(C0 + 4 Gamma) (integration-constant erratum)",
    source="Theorem 4, eqs. 124, 129 (as printed)",
    status="heuristic",
    params=BN_PARAMS,
    derive=printed_growth,
    printed=printed_growth,
    derived=_bn_derived,
    derived_names=("h",),
    evaluate=_bn_eval("printed"),
    doc="Registered so that the paper's formula can be evaluated; it is WRONG by the constant "
        "1/4 ln C0 (B_n(0) = ln(C0)/4): use scan_snap.attention.growth. " + _ERR_124,
))

register(ClosedForm(
    id="scan_snap.attention.growth_literal",
    title="B_n(t) under the literal class sum of eq. 10: 1/(4K) ln(1 + 4 K Gamma/C0)",
    source="eq. 10 summed over the K classes, with Theorem 4's xi_n (the literal reading)",
    status="exact",
    params=BN_PARAMS,
    derive=lambda: derive_growth(True),
    derived=_bn_derived,
    derived_names=("h",),
    evaluate=_bn_eval("literal"),
    doc="Eq. 10 sums over the K classes that share the query, so with Theorem 4's xi_n = C0^{-1} gamma "
        "e^{4z} the common-token rate is dz/dt = -K C0^{-1} eta_Z gamma e^{4z} (factor K explicit) while "
        "dB_n/dt = eta_Z xi_n keeps no K: then z = -1/4 ln(1 + 4 K Gamma/C0) and B_n = 1/(4K) ln(1 + 4 K "
        "Gamma/C0), exactly given that ODE. " + _CLOCK + " For 4 K Gamma << C0 it equals the averaged "
        "reading; at large Gamma it is about 1/K of it.",
))

register(ClosedForm(
    id="scan_snap.attention.common_logit",
    title="Common-token logit z_ml(t) = -1/4 ln(1 + 4 Gamma/C0) (Theorem 4, eq. 122)",
    source="Theorem 4, eq. 122",
    status="exact",
    params=BN_PARAMS,
    derive=derive_common_logit,
    printed=printed_common_logit,
    derived=_bn_derived,
    derived_names=("h",),
    evaluate=_bn_eval("logit"),
    doc="Solution of dz/dt = -C0^{-1} eta_Z gamma(t) e^{4z}, z(0) = 0 (dsolve in Gamma). " + _CLOCK
        + " Eq. 122 keeps the integration constant (the erratum enters only at eq. 124).",
))

register(ClosedForm(
    id="scan_snap.attention.common_logit_literal",
    title="Common-token logit under the literal class sum: -1/4 ln(1 + 4 K Gamma/C0)",
    source="eq. 10 summed over the K classes (the literal reading)",
    status="exact",
    params=BN_PARAMS,
    derive=lambda: derive_common_logit(True),
    derived=_bn_derived,
    derived_names=("h",),
    evaluate=_bn_eval("logit_literal"),
    doc="Solution of dz/dt = -K C0^{-1} eta_Z gamma e^{4z}, z(0) = 0: eq. 10's sum over K classes with "
        "Theorem 4's per-class xi_n. " + _CLOCK,
))

_ERR_14 = ("Eq. 14 inherits eq. 124's dropped integration constant: the printed form adds C0 inside the "
           "log instead of dividing by it, i.e. it exceeds the corrected asymptotic form by 1/4 ln C0.")

register(ClosedForm(
    id="scan_snap.attention.growth_scanning",
    title="Eq. 14, scanning stage t < t_0': B_n with h(t/K) ~ eta_Y t/(M K)",
    source="Theorem 4, eqs. 14, 130 (integration constant corrected)",
    status="asymptotic",
    params=BN_PARAMS,
    derive=derive_growth_scanning,
    printed=printed_growth_scanning,
    stable=lambda: _stable_asymptotic(_h_linear()),
    doc="1/4 ln(1 + 2 (M-1)^2 eta_Y eta_Z t^2 / (K M^2 C0)): the corrected B_n with the linear stage of h "
        "(the slope eta_Y/M of eq. 44 at h = 0). Accurate for t << t_0' = K ln M/eta_Y (against eq. 10's ODE: 0.05% at "
        "0.1 t_0', 11% at t_0').",
    erratum=_ERR_14,
))

register(ClosedForm(
    id="scan_snap.attention.growth_snapping",
    title="Eq. 14, snapping stage t >= t_0: B_n with h(t/K) ~ ln(M eta_Y t/K)/M",
    source="Theorem 4, eqs. 14, 131 (integration constant corrected)",
    status="asymptotic",
    params=BN_PARAMS,
    derive=derive_growth_snapping,
    printed=printed_growth_snapping,
    stable=lambda: _stable_asymptotic(_h_log()),
    domain=_t_positive,
    doc="1/4 ln(1 + 2 K (M-1)^2 eta_Z ln^2(M eta_Y t/K) / (M^2 eta_Y C0)): the corrected B_n with the "
        "logarithmic stage of h (e^{M h} ~ M eta_Y t/K dominates eq. 45). Relative error -> 0 as t -> oo "
        "(spec: 2.2% at t_0, 0.01% at 100 t_0 in the paper's convention).",
    erratum=_ERR_14,
))

register(ClosedForm(
    id="scan_snap.attention.relative_gain",
    title="Theorem 3: relative gain r(t) = r(0) exp(2 (z_ml(t) - z_ml(0)))",
    source="Theorem 3, eqs. 11, 108-111",
    status="exact",
    params=(R0, DZ),
    derive=derive_relative_gain,
    printed=printed_relative_gain,
    doc="For distinct tokens l, l' of class n, dz_l/dz_l' = f_nl^2/f_nl'^2 = r + 1 (eq. 98); separating "
        "and integrating from 0 gives r_{l/l'|n}(t) = r(0) chi_l(t) with chi_l = e^{2 dz}, dz = z_ml(t) - "
        "z_ml(0). Also valid for r0 in (-1, 0) (the parameter is declared positive: Theorem 3's dominant "
        "token). The paper's definition prints f^2_{n'l'} in the denominator (typo for f^2_{nl'}).",
))

register(ClosedForm(
    id="scan_snap.attention.common_pair_term",
    title="Theorem 2, eq. 99: per-pair term of a single common token, -(1 - f_nl^2) f_n^T f_n'",
    source="Theorem 2(b), eqs. 97, 99",
    status="exact",
    params=(F_NL, F_NPL),
    derive=derive_common_pair_term,
    printed=printed_common_pair_term,
    domain=_f_domain,
    doc="If classes n and n' share only the token l, f_n^T f_n' = f_nl f_n'l and the term f_nl [(f_n^T f_n') "
        "f_nl - f_n'l] of eq. 97 equals -(1 - f_nl^2) f_nl f_n'l <= 0; summed with beta_nn' it gives "
        "dz_ml = -eta_Z sum_n (1 - f_nl^2) xi_n (eq. 100). A distinct token (f_n'l = 0) gives f_nl^2 "
        "f_n^T f_n' >= 0 instead (eq. 98).",
))

Q_P = positive("q", "Overlap f_n^T f_n' = f_nl^2 of two classes sharing only the common token l (< 1).",
               example=0.1, sample=(0.001, 0.9))
K2_P = index("K", "Number of classes sharing the query, K >= 2.", low=2)
RHO0_P = positive("rho0", "rho0 = ||c~_n||/c~_ln: the normaliser of f_n over the common token's score (>= 1).",
                  example=3.0, sample=(1.0, 20.0))
_SYM_CASE = ("Symmetric case of Theorem 4 / Corollary 2 with one common token: K classes share the query, each "
             "has the common token with the same f_l^2 = q (so f_n^T f_n' = q, E = q (J - I)) and its own "
             "distinct tokens; beta = E' = I - (I + E)^{-1} (Theorem 1 to leading order, as in eq. 10).")

register(ClosedForm(
    id="scan_snap.attention.symmetric_xi",
    title="xi_n/gamma = (K-1) q^2/((1-q)(1+(K-1) q)) with one common token of overlap q (symmetric case)",
    source="Theorem 1(a), eq. 13 (exact in the symmetric single-common-token case) [derived]",
    status="exact",
    params=(Q_P, K2_P),
    derive=derive_symmetric_xi,
    domain=_q_domain,
    doc=_SYM_CASE + " (I + E)^{-1} = (I - q J/(1 + (K-1) q))/(1 - q), so beta_nn' = q/((1-q)(1+(K-1) q)) "
        "and xi_n/gamma = (K-1) q beta. To leading order (K-1) q^2, i.e. e^{4z}/C0 with C0 = rho0^4/(K-1).",
))

register(ClosedForm(
    id="scan_snap.attention.symmetric_common_rate",
    title="Common-token rate dz/dt/(eta_Z gamma) = -(K-1) q^2/(1+(K-1) q), eq. 10 averaged over classes",
    source="eqs. 10, 13, 100 (exact in the symmetric single-common-token case) [derived]",
    status="exact",
    params=(Q_P, K2_P),
    derive=derive_symmetric_common_rate,
    domain=_q_domain,
    doc=_SYM_CASE + " Eq. 10's class sum read as an average (expected batch-1 SGD, the clock of gamma(t)); "
        "the literal sum is K times this. Equals -(1 - q) xi_n/gamma (eq. 100).",
))

register(ClosedForm(
    id="scan_snap.attention.snap_constant",
    title="C0 of eq. 13: rho0^4/(K-1) (leading order in f_l^2 = e^{2z}/rho0^2)",
    source="eq. 13 (corrected), Theorem 4",
    status="asymptotic",
    params=(RHO0_P, K2_P),
    derive=derive_snap_constant,
    printed=printed_snap_constant,
    domain=_rho0_domain,
    doc=_SYM_CASE + " With the normaliser of f_n held at rho0 (q = e^{2z}/rho0^2), xi_n/gamma and the averaged "
        "common-token rate are e^{4z}/C0 and -eta_Z gamma e^{4z}/C0 to leading order in q, with C0 = "
        "rho0^4/(K-1); the relative corrections are (K-1) q and q (records symmetric_xi, "
        "symmetric_common_rate), so eq. 13 needs K q << 1.",
    erratum="Eq. 13 defines C0 := rho0^4/K, but the sum over n' != n has K - 1 terms: with the class sum of "
            "eq. 10 averaged (the reading under which Theorem 4's two hypotheses share one C0) both halves "
            "of eq. 13 hold with C0 = rho0^4/(K-1); rho0^4/K makes the common token fall K/(K-1) times too "
            "fast. (Read literally, the sum gives rho0^4/(K (K-1)) for z and rho0^4/(K-1) for xi_n: no "
            "single C0.)",
))
