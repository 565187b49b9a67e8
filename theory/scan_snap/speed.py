"""The speed control coefficient of Scan and Snap and the times it sets (Tian, Wang, Chen, Du 2023,
Theorem 1, Lemma 9, Corollary 1, eqs. 50-52, 85, 125-128).

gamma(t) = (M-1)^2 h/((M-1) + exp(M h)) at h = h(t/K), the continuous solution of the decoder
recursion (:mod:`theory.scan_snap.h`, eq. 45): ``t`` counts total batch-1 SGD steps, of which each of the K classes
receives ``t/K``. Derived here (sympy): gamma in closed form through Lambert W; its integral
Gamma = eta_Z int_0^t gamma by the substitution dt = K t'(h) dh (eqs. 125-128); its two regimes
(stage 1, linear in t; stage 2, K ln(M eta_Y t/K)/(eta_Y t)); its peak (e^u (u - 1) = M - 1); the
end of the scan t_A (eq. 52), the scan time t_0' = K ln M/eta_Y, the snap time t_0 = 2 (1 + omega_1)
K ln M/eta_Y (omega_1 of eq. 51), the crossing time t_B, and Corollary 1's number of steps to reach
||e_n - alpha_n|| <= epsilon (sharp form).

Errata: Theorem 1(b) writes ``ln(eta_Y t/K)`` where Lemma 9 (correctly) has ``ln(M eta_Y t/K)``
(``scan_snap.speed.gamma_log``).

Contains
--------
``scan_snap.speed.gamma``, ``.gamma_integral``, ``.gamma_linear``, ``.gamma_log``, ``.scan_end``,
``.scan_time``, ``.snap_time``, ``.crossing_time``, ``.gamma_peak``, ``.gamma_peak_time``,
``.convergence_steps``.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from ..backends import backend_ops, working
from ..registry import ClosedForm, register
from . import sym
from .h import (
    EPS_P,
    ETA_Y,
    ETA_Z,
    K_P,
    M4_P,
    M_P,
    T_P,
    derive_linear,
    derive_omega_1,
    derive_time_of,
    explicit_solution,
    gamma_of_h,
    h_continuous,
    lambertw_real,
    lemma8_roots,
    root_u,
    syms,
    t_of_h_expr,
    t_positive,
)

__all__ = ["gamma_of_t"]


# -- speed control coefficient -------------------------------------------------------
@cache
def derive_gamma():
    """gamma(t) with h(t/K) from the Lambert-W solution; simplified with exp(M h) = (M-1) W."""

    M, eta, t, h = syms()
    K = sym("K")
    hK = explicit_solution().subs(t, t / K)
    return gamma_of_h().subs(h, hK)


@cache
def derive_gamma_integral():
    """eta_Z int_0^t gamma: substitute t' = K t(h) (dt' = K t'(h) dh), integrate h from 0 to h(t/K)."""
    import sympy as sp

    M, eta, t, h = syms()
    K, etaZ = sym("K"), sym("eta_Z")
    H = sp.Symbol("H", positive=True)
    dt_dh = K * derive_time_of().diff(h)
    assert sp.simplify(dt_dh - K * ((M - 1) + sp.exp(M * h)) / eta) == 0
    integral = sp.integrate(sp.simplify(gamma_of_h() * dt_dh), (h, 0, H))
    closed = sp.factor(etaZ * integral)
    assert sp.simplify(closed - etaZ / eta * K * (M - 1) ** 2 * H**2 / 2) == 0
    return closed.subs(H, explicit_solution().subs(t, t / K))


@cache
def derive_gamma_linear():
    """gamma(t) ~ gamma'(0) t as t -> 0 (with h(t/K) ~ eta_Y t/(M K))."""
    import sympy as sp

    M, eta, t, h = syms()
    K = sym("K")
    g = gamma_of_h().subs(h, derive_linear().subs(t, t / K))
    return sp.factor(sp.series(g, t, 0, 2).removeO())


@cache
def derive_gamma_log():
    """gamma(t) as t -> oo: exactly gamma = (M-1)^2 u/(M (A - (M-2) - (M-1) u)) with A = M eta_Y t/K + 1
    (using exp(u) = A - (M-1) u), and u ~ ln(M eta_Y t/K), A ~ M eta_Y t/K."""
    import sympy as sp

    M, eta, t, h = syms()
    K = sym("K")
    u = sp.Symbol("u", positive=True)
    A = M * eta * t / K + 1
    exact = (M - 1) ** 2 * (u / M) / ((M - 1) + (A - (M - 1) * u))
    assert sp.simplify(exact - gamma_of_h().subs(h, u / M).subs(sp.exp(u), A - (M - 1) * u)) == 0
    lead = (M - 1) ** 2 * sp.log(M * eta * t / K) / (M * (M * eta * t / K))
    # ratio of the exact form (u = ln(A - (M-1) u) ~ ln A + o(1)) to the leading term tends to 1
    x = sp.Symbol("x", positive=True)  # x = M eta_Y t / K
    ex = (M - 1) ** 2 * sp.log(x) / (M * (x + 1 - (M - 1) * sp.log(x) + (M - 1) - (M - 1)))
    assert sp.limit(ex / lead.subs(t, x * K / (M * eta)), x, sp.oo) == 1
    return lead


def printed_gamma_log():
    """Theorem 1(b): gamma = O(K ln(eta_Y t/K)/(eta_Y t)) for t >= t_0."""
    import sympy as sp

    M, eta, t, h = syms()
    K = sym("K")
    return K * sp.log(eta * t / K) / (eta * t)


@cache
def derive_scan_end():
    """t_A: K t(h) at the crossing exp(M h) = M - 1 (h = ln(M-1)/M)."""
    import sympy as sp

    M, eta, t, h = syms()
    return sp.simplify(sym("K") * t_of_h_expr(sp.log(M - 1) / M))


def printed_scan_end():
    """Eq. 52 (printed for K = 1), times K for the clock t/K."""
    import sympy as sp

    M, eta, t, h = syms()
    return sym("K") * (M - 2 + (M - 1) * sp.log(M - 1)) / (M * eta)


@cache
def derive_scan_time():
    """t_0' = K ln M/eta_Y: the leading term of t_A as M -> oo (checked: t_A / t_0' -> 1)."""
    import sympy as sp

    M, eta, t, h = syms()
    lead = sym("K") * sp.log(M) / eta
    assert sp.limit(derive_scan_end() / lead, M, sp.oo) == 1
    return lead


@cache
def derive_snap_time():
    """t_0 = 2 (1 + omega_1) K ln M / eta_Y (Lemma 9, Theorem 4) with omega_1 of eq. 51: 2 K u_hi/eta_Y."""
    import sympy as sp

    M, eta, t, h = syms()
    return sp.expand(2 * (1 + derive_omega_1()) * sym("K") * sp.log(M) / eta)


@cache
def derive_crossing_time():
    """t_B: K t(h) at the upper root of exp(M h) = (M-1) M h (u = u_hi, exp(u_hi) = (M-1) u_hi)."""
    import sympy as sp

    M, eta, t, h = syms()
    _, hi = lemma8_roots()
    tb = sym("K") * (sp.exp(hi) + (M - 1) * hi - 1) / (M * eta)
    return tb.subs(sp.exp(hi), (M - 1) * hi)


def _peak_u():
    """u* = M h at the maximum of gamma: d gamma/d h = 0, solved by sympy (e^u (u - 1) = M - 1)."""
    import sympy as sp

    M, eta, t, h = syms()
    u = sp.Symbol("u", positive=True)
    (us,) = sp.solve(sp.diff(gamma_of_h().subs(h, u / M), u), u)
    assert us == 1 + sp.LambertW((M - 1) / sp.E)
    return us


@cache
def derive_gamma_peak():
    """max_t gamma(t) = gamma at u* (gamma is increasing in h below u*/M and decreasing above)."""
    import sympy as sp

    M, eta, t, h = syms()
    us = _peak_u()
    g = gamma_of_h().subs(h, us / M)
    w = sp.LambertW((M - 1) / sp.E)
    g = sp.simplify(g.subs(sp.exp(us), (M - 1) / w))              # e^{1 + W} = (M-1)/W
    return g


@cache
def derive_gamma_peak_time():
    """argmax_t gamma(t) = K t(u*/M)."""
    import sympy as sp

    M, eta, t, h = syms()
    us = _peak_u()
    w = sp.LambertW((M - 1) / sp.E)
    return (sym("K") * t_of_h_expr(us / M)).subs(sp.exp(us), (M - 1) / w)


@cache
def derive_convergence_steps():
    """Corollary 1, sharp: ||e_n - alpha_n|| = (M-1) sqrt(M/(M-1))/((M-1) + e^{Mh}) <= epsilon holds
    once e^{Mh} >= E_eps = (M-1)(sqrt(M/(M-1))/epsilon - 1); total steps K t(h) there."""
    import sympy as sp

    M, eta, t, h = syms()
    eps = sym("epsilon")
    X = sp.Symbol("X", positive=True)                          # X = e^{M h}
    norm_zeta = sp.sqrt(M / (M - 1))                           # ||zeta_n|| = sqrt(q_1)
    (E,) = sp.solve(sp.Eq((M - 1) * norm_zeta / ((M - 1) + X), eps), X)
    return sym("K") * t_of_h_expr(sp.log(E) / M)


def stable_convergence_steps():
    """The derived K (E + (M-1) ln E - 1)/(M eta_Y), E = (M-1)(sqrt(M/(M-1))/epsilon - 1), in terms
    of y = E/M = (sqrt(M) sqrt(M-1) - (M-1) epsilon)/(M epsilon) and never E itself:
    K/eta_Y [y - 1/M + (1 - 1/M)(ln y + ln M)]. E overflows once M/epsilon > ~1e308 (M = 1e9,
    epsilon = 1e-300 gave inf for a value of 1e300), y only where the result does."""
    import sympy as sp

    M, eta, t, h = syms()
    K, eps = sym("K"), sym("epsilon")
    y = (sp.sqrt(M) * sp.sqrt(M - 1) - (M - 1) * eps) / (M * eps)   # > 0 on the domain of epsilon
    return K / eta * (y - 1 / M + (1 - 1 / M) * (sp.log(y) + sp.log(M)))


# =====================================================================================
# Numerics
# =====================================================================================
def gamma_of_t(backend, t, M, K, eta_Y):
    """gamma(t) = (M-1)^2 h/((M-1) + e^{M h}), h = h(t/K)."""
    tk = working(backend, t) / K
    h = h_continuous(backend, tk, M, eta_Y)
    return (M - 1) ** 2 * h / ((M - 1) + backend_ops(backend).exp(M * h))


def _gamma(backend, values, dims):
    return gamma_of_t(backend, values["t"], values["M"], values["K"], values["eta_Y"])


def _gamma_integral(backend, values, dims):
    t, M, K, eta, etaZ = (values[n] for n in ("t", "M", "K", "eta_Y", "eta_Z"))
    tk = working(backend, t) / K
    h = h_continuous(backend, tk, M, eta)
    eta, etaZ = working(backend, eta), working(backend, etaZ)
    return etaZ / eta * K * (M - 1) ** 2 * h**2 / 2


def _snap_time(backend, values, dims):
    M, K, eta = values["M"], values["K"], values["eta_Y"]
    eta = working(backend, eta)
    return 2 * K * root_u(backend, M, -1) / eta


def _crossing_time(backend, values, dims):
    M, K, eta = values["M"], values["K"], values["eta_Y"]
    eta = working(backend, eta)
    return K * (2 * (M - 1) * root_u(backend, M, -1) - 1) / (M * eta)


def _peak_w(backend, M):
    if backend == "mpmath":
        import mpmath

        return lambertw_real(backend, (M - 1) / mpmath.e, 0)
    return lambertw_real(backend, (M - 1) / math.e, 0)


def _gamma_peak(backend, values, dims):
    M = values["M"]
    return (M - 1) * _peak_w(backend, M) / M


def _gamma_peak_time(backend, values, dims):
    M, K, eta = values["M"], values["K"], values["eta_Y"]
    w = _peak_w(backend, M)
    eta = working(backend, eta)
    return K * ((M - 1) / w + (M - 1) * (1 + w) - 1) / (M * eta)


def _epsilon_domain(values, dims):
    M = values["M"]
    if np.any(np.asarray(values["epsilon"]) >= math.sqrt(M / (M - 1)) * (M - 1) / M):
        raise ValueError("epsilon: must be < sqrt(M/(M-1)) (M-1)/M = ||e_n - alpha_n|| at zero init, "
                         f"got {values['epsilon']}")


# =====================================================================================
# Records
# =====================================================================================
_CLOCK = ("t counts total batch-1 SGD steps; each of the K uniformly sampled classes has received "
          "t/K of them, hence h(t/K).")
register(ClosedForm(
    id="scan_snap.speed.gamma",
    title="Speed control coefficient gamma(t) = (M-1)^2 h(t/K)/((M-1) + exp(M h(t/K)))",
    source="Theorem 1, Lemma 9 (eq. 85 with h continuous)",
    status="exact",
    params=(T_P, M_P, K_P, ETA_Y),
    derive=derive_gamma,
    evaluate=_gamma,
    doc="The continuous form (h(t/K) of eq. 45); eq. 85 uses h at ceil(t/K). " + _CLOCK
        + " Rises like ((M-1)/M)^2 eta_Y t/K, peaks near 0.8 t_0', decays like K ln(M eta_Y t/K)/(eta_Y t).",
))
register(ClosedForm(
    id="scan_snap.speed.gamma_integral",
    title="Gamma(t) = eta_Z int_0^t gamma = (eta_Z/eta_Y) K (M-1)^2 h(t/K)^2/2",
    source="eqs. 125-128",
    status="exact",
    params=(T_P, M_P, K_P, ETA_Y, ETA_Z),
    derive=derive_gamma_integral,
    evaluate=_gamma_integral,
    doc="Derived by the substitution dh = eta_Y dt/(K((M-1) + e^{Mh})): the integrand becomes "
        "(M-1)^2 K h/eta_Y dh. " + _CLOCK,
))
register(ClosedForm(
    id="scan_snap.speed.gamma_linear",
    title="Stage 1 of gamma: gamma ~ ((M-1)/M)^2 eta_Y t/K as t -> 0",
    source="Theorem 1(b), Lemma 9 (stage 1)",
    status="asymptotic",
    params=(T_P, M_P, K_P, ETA_Y),
    derive=derive_gamma_linear,
    doc="The paper states gamma = O(eta_Y t/K) for t <= t_0' = K ln M/eta_Y; the leading term has the "
        "constant ((M-1)/M)^2 (0.998 at M = 1000), which the O(.) absorbs.",
))
register(ClosedForm(
    id="scan_snap.speed.gamma_log",
    title="Stage 2 of gamma: gamma ~ ((M-1)/M)^2 K ln(M eta_Y t/K)/(eta_Y t) as t -> oo",
    source="Lemma 9 (stage 2); Theorem 1(b) as printed",
    status="asymptotic",
    params=(T_P, M_P, K_P, ETA_Y),
    derive=derive_gamma_log,
    printed=printed_gamma_log,
    domain=t_positive,
    example={"t": 1e4, "M": 1000, "K": 1, "eta_Y": 1.0},
    erratum="Theorem 1(b) (and Theorem 4's snapping bullet) write ln(eta_Y t/K) where Lemma 9 has "
            "ln(M eta_Y t/K): near t_0 the printed form is smaller than gamma by a factor ~ ln M/ln ln M "
            "(5.6 at t_0 for M = 1000) and is equivalent only as t -> oo (still 1.41 off at 1e6 t_0). "
            "Lemma 9's form equals the derived leading term up to the constant ((M-1)/M)^2, which O(.) absorbs.",
    doc="Exactly, gamma = (M-1)^2 u/(M(A - (M-2) - (M-1) u)) with u = M h(t/K), A = M eta_Y t/K + 1 and "
        "u ~ ln(M eta_Y t/K). " + _CLOCK,
))
register(ClosedForm(
    id="scan_snap.speed.scan_end",
    title="t_A: end of stage 1, exp(M h(t/K)) = M - 1",
    source="Lemma 9, eq. 52",
    status="exact",
    params=(M_P, K_P, ETA_Y),
    derive=derive_scan_end,
    printed=printed_scan_end,
    doc="Eq. 52 is printed for K = 1 (Lemma 9 is proved for K = 1); with the clock t/K it is K times "
        "that. Eq. 52's claim t_A > K ln M/eta_Y = t_0' holds for M >= 5 (it fails at M = 2, 3, 4, "
        "e.g. t_A = 1.324 < ln 4 = 1.386 at M = 4, K = eta_Y = 1), so for M >= 5 Lemma 9's stage-1 "
        "range t <= t_0' is conservative.",
))
register(ClosedForm(
    id="scan_snap.speed.scan_time",
    title="t_0' = K ln M/eta_Y: the scanning time scale",
    source="Lemma 9, Theorem 1(b), Theorem 4 (eq. 14)",
    status="asymptotic",
    params=(M_P, K_P, ETA_Y),
    derive=derive_scan_time,
    printed=lambda: sym("K") * __import__("sympy").log(sym("M")) / sym("eta_Y"),
    doc="Derived as the leading term of t_A (scan_snap.speed.scan_end) as M -> oo; t_0' < t_A for "
        "M >= 5 (not for M <= 4), so there stage 1 holds on t <= t_0'.",
))
register(ClosedForm(
    id="scan_snap.speed.snap_time",
    title="t_0 = 2 (1 + omega_1) K ln M/eta_Y: the snapping time (Lemma 9, Theorem 4)",
    source="Lemma 9, Theorem 1(b), Theorem 4",
    status="exact",
    params=(M4_P, K_P, ETA_Y),
    derive=derive_snap_time,
    evaluate=_snap_time,
    doc="The paper's t_0 with omega_1 solved exactly from eq. 51: t_0 = 2 K u_hi/eta_Y. This is the "
        "registered snap time because it is what Theorem 4 (eq. 14) and Lemma 9 use; the exact onset "
        "of stage 2 is the crossing t_B (scan_snap.speed.crossing_time), t_B/t_0 = "
        "(M-1)/M - 1/(2 M u_hi) -> (M-1)/M, so t_B < t_0 and Lemma 9's stage-2 claim for t >= t_0 holds.",
))
register(ClosedForm(
    id="scan_snap.speed.crossing_time",
    title="t_B: exact onset of stage 2, exp(M h(t/K)) = (M-1) M h(t/K) at the upper root",
    source="Lemma 9 (stage 2), Lemma 8",
    status="exact",
    params=(M4_P, K_P, ETA_Y),
    derive=derive_crossing_time,
    evaluate=_crossing_time,
    doc="t_B = K (2 (M-1) u_hi - 1)/(M eta_Y), from t(h) at u_hi (exp(u_hi) = (M-1) u_hi). "
        "Ratio to the paper's t_0: 0.963 at M = 30, 0.9989 at M = 1000.",
))
register(ClosedForm(
    id="scan_snap.speed.gamma_peak",
    title="max_t gamma(t) = (M-1) W_0((M-1)/e)/M",
    source="Theorem 1(b), Lemma 9 (gamma rises, then decays)",
    status="exact",
    params=(M_P, K_P, ETA_Y),
    derive=derive_gamma_peak,
    evaluate=_gamma_peak,
    doc="d gamma/d h = 0 at u* = M h = 1 + W_0((M-1)/e) (sympy); gamma there is (M-1)(u* - 1)/M, "
        "independent of K and eta_Y (4.42 at M = 1000).",
))
register(ClosedForm(
    id="scan_snap.speed.gamma_peak_time",
    title="argmax_t gamma(t) = K t(u*/M), u* = 1 + W_0((M-1)/e)",
    source="Theorem 1(b), Lemma 9 (the peak of gamma)",
    status="exact",
    params=(M_P, K_P, ETA_Y),
    derive=derive_gamma_peak_time,
    evaluate=_gamma_peak_time,
    doc="K (e^{u*} + (M-1) u* - 1)/(M eta_Y) with e^{u*} = (M-1)/W_0((M-1)/e); about 0.82 t_0' at M = 1000.",
))
register(ClosedForm(
    id="scan_snap.speed.convergence_steps",
    title="Corollary 1, sharp: total steps until ||e_n - alpha_n||_2 <= epsilon",
    source="Corollary 1 (eqs. 71-73), App. D.4",
    status="approximate",
    params=(M_P, K_P, ETA_Y, EPS_P),
    derive=derive_convergence_steps,
    stable=stable_convergence_steps,
    domain=_epsilon_domain,
    doc="K S_n with S_n = (E + (M-1) ln E - 1)/(M eta_Y), E = (M-1)(sqrt(M/(M-1))/epsilon - 1), from "
        "the continuous h and the per-class count t/K (approximate: h* vs h, and N_n ~ N/K, Lemmas "
        "7, 10-12). S_n ~ 1/(epsilon eta_Y) + ln(M/epsilon)/eta_Y, so the paper's O(K/(epsilon eta_Y) "
        "ln(M/epsilon)) is loose by a factor ~ ln(M/epsilon).",
))
