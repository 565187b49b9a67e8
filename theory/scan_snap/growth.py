"""The growth factor of distinct tokens and the consequences of Theorem 4 (Tian, Wang, Chen, Du
2023, Theorem 3 eq. 12, Theorem 4's bullets and insights, App. F eqs. 130-133, Fig. 9).

Derived here (sympy, not retyped):

* Eq. 12 on the clock of ``B_n``. Eq. 98 gives the dominant distinct token's logit the rate
  ``eta_Z f_nl0^2 xi_n`` whenever class n is the sample; with K uniformly sampled classes that is
  a fraction 1/K of the batch-1 steps, and ``B_n = eta_Z int_0^t xi_n`` of Theorems 3-4 counts every
  step (t is the clock of gamma(t) = gamma(h(t/K)) and of eq. 14). So ``dz_l0/dB_n = f_nl0^2/K`` with
  ``f_nl0^2`` rising from ``f_nl0^2(0)`` to at most 1 (eq. 114), and integrating gives
  ``exp(2 f_nl0^2(0) B_n/K) <= chi_l0 <= exp(2 B_n/K)``. Eq. 12 prints the exponents without the
  1/K: its upper bound still holds (loosely), its lower bound fails whenever
  ``f_nl0^2(t) < K f_nl0^2(0)``, i.e. always once ``f_nl0^2(0) > 1/K``. On eq. 10's own clock, the class
  sum read literally (one sample of every class per unit time), the printed form is right; the
  combination with Theorem 4's ``B_n`` (the bullets of Theorem 4) needs the 1/K.
* Theorem 4's bullets: the lower bound with the scanning ``B_n`` (eq. 14, corrected for eq. 124's
  integration constant) and the upper bound with the snapping ``B_n``: ``chi_l0 = O(ln(t)^(1/K))``.
* App. F's values ``B_n(t_0')`` and ``B_n(t_0)``: eqs. 130 and 131 at ``t_0' = K ln M/eta_Y`` and
  ``t_0 = 2 K u_hi/eta_Y`` (``u_hi = (1 + omega_1) ln M`` of eq. 51); both depend on eta_Y, eta_Z only
  through ``nu = eta_Y/eta_Z`` (Fig. 9).
* Eq. 132: the large-t expansion of the snapping ``B_n``, ``1/2 ln ln(M eta_Y t/K) + 1/4 ln(2 K (M-1)^2 /
  (M^2 nu C0)) + o(1)``: the constant carries ``-1/4 ln C0`` (eq. 124's offset), and the expansion needs
  ``4 Gamma >> C0``, i.e. ``ln(M eta_Y t/K) >> (M/(M-1)) sqrt(nu C0/(2K))`` (the time where the two are
  equal is ``scan_snap.growth.lnln_onset``).
* Insight (c) as a sign: at fixed eta_Z, ``dB_n/d eta_Y`` has the sign of ``h - 2 x h'(x)`` (``x =
  eta_Y t/K``, ``h' = dh/dx``): positive while h grows faster than sqrt(x), negative after. With ``u =
  M h`` the change of sign is at the root ``u_c > 2`` of ``e^u (u - 2) = (M - 1) u - 2``; before the
  time ``t_c = K x(u_c)/eta_Y`` a *larger* eta_Y gives a larger ``B_n``, after it a smaller one.

Contains
--------
``scan_snap.growth.factor_lower``, ``.factor_upper``, ``.factor_scanning``, ``.factor_snapping``, ``.value_scan_end``,
``.value_snap``, ``.lnln_asymptote``, ``.lnln_onset``, ``.eta_Y_crossover``.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from ..backends import backend_ops, working
from ..params import index, nonnegative, positive
from ..registry import ClosedForm, register
from .attention import (
    BN_PARAMS,
    derive_gamma_integral,
    derive_growth_scanning,
    derive_growth_snapping,
)
from .decoder import ETA_Y, M_VOCAB
from .h import ETA_Z, root_u

__all__ = ["derive_factor_lower", "derive_factor_upper", "crossover_u", "derive_crossover_condition"]

B_P = nonnegative("B", "B_n(t) = eta_Z int_0^t xi_n(t') dt' (Theorem 3), t in total batch-1 steps.", example=2.0,
                  sample=(0, 5))
F0_P = positive("f0", "f_nl0(0): the dominant distinct token's entry of the normalised attention f_n at t = 0 "
                "(<= 1).", example=0.6, sample=(0.05, 1.0))
K_P = index("K", "Number of uniformly sampled sequence classes K.")
C0_P = positive("C0", "Constant C0 of Theorem 4 (eq. 13).")
M5_P = index("M", "Vocabulary size M >= 5 (the output softmax size).", low=5)
M4_P = index("M", "Vocabulary size M >= 4 (u_hi of eq. 51 exists).", low=4)


def _sym(name):
    from . import sym

    return sym(name)


# -- eq. 12 -------------------------------------------------------------------------------------------
def _dz_bounds():
    """dz_l0 = int_0^B f^2/K db with f_nl0^2(0) <= f^2 <= 1 (eqs. 98, 114, the 1/K of uniform batch-1 sampling):
    the lower and upper ends of z_l0(t) - z_l0(0) given B_n(t) = B."""
    import sympy as sp

    B, f0, K = _sym("B"), _sym("f0"), _sym("K")
    b = sp.Symbol("b", nonnegative=True)
    return sp.integrate(f0**2 / K, (b, 0, B)), sp.integrate(sp.Integer(1) / K, (b, 0, B))


@cache
def derive_factor_lower():
    """chi_l0 = exp(2 dz_l0) >= exp(2 f0^2 B/K)."""
    import sympy as sp

    return sp.exp(2 * _dz_bounds()[0])


@cache
def derive_factor_upper():
    """chi_l0 = exp(2 dz_l0) <= exp(2 B/K)."""
    import sympy as sp

    return sp.exp(2 * _dz_bounds()[1])


def printed_factor_lower():
    """Eq. 12, left: e^{2 f_nl0^2(0) B_n} <= chi_l0."""
    import sympy as sp

    return sp.exp(2 * _sym("f0") ** 2 * _sym("B"))


def _f0_domain(values, dims):
    if np.any(np.asarray(values["f0"]) > 1):
        raise ValueError(f"f0: an entry of a unit vector must be <= 1, got {values['f0']!r}")


# -- Theorem 4's bullets ---------------------------------------------------------------------------------
@cache
def derive_factor_scanning():
    """Lower bound of eq. 12 (corrected) with the scanning B_n of eq. 14 (corrected)."""
    return derive_factor_lower().xreplace({_sym("B"): derive_growth_scanning()})


def stable_factor_scanning():
    """(1 + X)^(f0^2/(2K)) with X = 4 Gamma/C0 at h(t/K) ~ eta_Y t/(M K): exp(f0^2/(2K) log1p(X))."""
    import sympy as sp
    from sympy.codegen.cfunctions import log1p

    from .attention import _h_linear

    X = 4 * derive_gamma_integral().xreplace({_sym("h"): _h_linear()}) / _sym("C0")
    return sp.exp(_sym("f0") ** 2 / (2 * _sym("K")) * log1p(X))


def printed_factor_scanning():
    """Theorem 4, scanning: chi_l0 >= [K^{-1}(rho0^4 + 2 eta_Y eta_Z t^2)]^{0.5 f0^2}, rho0^4 = K C0."""
    K, C0, eY, eZ, t, f0 = (_sym(n) for n in ("K", "C0", "eta_Y", "eta_Z", "t", "f0"))
    return (C0 + 2 * eY * eZ * t**2 / K) ** (f0**2 / 2)


@cache
def derive_factor_snapping():
    """Upper bound of eq. 12 (corrected) with the snapping B_n of eq. 14 (corrected)."""
    return derive_factor_upper().xreplace({_sym("B"): derive_growth_snapping()})


def stable_factor_snapping():
    import sympy as sp
    from sympy.codegen.cfunctions import log1p

    from .attention import _h_log

    X = 4 * derive_gamma_integral().xreplace({_sym("h"): _h_log()}) / _sym("C0")
    return sp.exp(log1p(X) / (2 * _sym("K")))


def _t_domain(values, dims):
    x = np.asarray(values["M"]) * np.asarray(values["eta_Y"]) * np.asarray(values["t"]) / np.asarray(values["K"])
    if np.any(x <= 1):
        raise ValueError(f"t: needs M eta_Y t/K > 1 (ln ln of it), got t = {values['t']!r}")


def _t_positive(values, dims):
    if np.any(np.asarray(values["t"]) <= 0):
        raise ValueError(f"t: must be > 0 (ln t in the snapping regime), got {values['t']!r}")


# -- App. F: B_n(t_0'), B_n(t_0) -------------------------------------------------------------------------
def _at(expr, t_value):
    return expr.xreplace({_sym("t"): t_value})


@cache
def derive_value_scan_end():
    """Eq. 130 (corrected) at t_0' = K ln M/eta_Y."""
    import sympy as sp

    M, K, eY = _sym("M"), _sym("K"), _sym("eta_Y")
    return sp.simplify(_at(derive_growth_scanning(), K * sp.log(M) / eY))


def printed_value_scan_end():
    """App. F: B_n(t_0') = 1/4 ln(C0 + 2 K (M-1)^2 M^-2 nu^-1 ln^2 M), nu = eta_Y/eta_Z."""
    import sympy as sp

    M, K, eY, eZ, C0 = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "C0"))
    return sp.log(C0 + 2 * K * (M - 1) ** 2 / M**2 * eZ / eY * sp.log(M) ** 2) / 4


@cache
def derive_value_snap():
    """Eq. 131 (corrected) at t_0 = 2 K u_hi/eta_Y, u_hi = (1 + omega_1) ln M (scan_snap.speed.snap_time;
    u_hi enters as an auxiliary symbol, evaluated as -W_{-1}(-1/(M-1)))."""
    import sympy as sp

    from .h import lemma8_roots
    from .speed import derive_snap_time

    K, eY, u = _sym("K"), _sym("eta_Y"), _sym("u_hi")
    assert sp.simplify(derive_snap_time() - 2 * K * lemma8_roots()[1] / eY) == 0
    return _at(derive_growth_snapping(), 2 * K * u / eY)


def printed_value_snap():
    """App. F: B_n(t_0) = 1/4 ln(C0 + 2 K (M-1)^2 M^-2 nu^-1 ln^2(2 (1 + omega_1) M ln M)), with (1 + omega_1)
    ln M = u_hi (eq. 51)."""
    import sympy as sp

    M, K, eY, eZ, C0, u = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "C0", "u_hi"))
    return sp.log(C0 + 2 * K * (M - 1) ** 2 / M**2 * eZ / eY * sp.log(2 * u * M) ** 2) / 4


def _u_hi(values, dims, backend="numpy"):
    return {"u_hi": root_u(backend, values["M"], -1)}


# -- eqs. 132-133 -----------------------------------------------------------------------------------------
@cache
def derive_lnln_asymptote():
    """The snapping B_n = 1/4 ln(1 + A L^2), L = ln(M eta_Y t/K), A = 2 K (M-1)^2 eta_Z/(M^2 eta_Y C0),
    expanded as L -> oo: 1/2 ln L + 1/4 ln A + o(1) (sympy checks that the remainder -> 0)."""
    import sympy as sp

    M, K, eY, eZ, C0, t = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "C0", "t"))
    L = sp.Symbol("L", positive=True)
    A = 2 * K * (M - 1) ** 2 * eZ / (M**2 * eY * C0)
    snap = derive_growth_snapping()
    as_L = sp.expand_log(snap.xreplace({sp.log(M * eY * t / K): L}), force=True)
    lead = sp.log(L) / 2 + sp.log(A) / 4
    assert L in as_L.free_symbols and t not in as_L.free_symbols
    assert sp.limit(as_L - lead, L, sp.oo) == 0
    return sp.expand_log(lead.xreplace({L: sp.log(M * eY * t / K)}), force=True)


def printed_lnln_asymptote():
    """Eq. 132 (the bracket): 1/2 ln ln(M eta_Y t/K) + 1/4 ln(2 K (M-1)^2 M^-2 nu^-1)."""
    import sympy as sp

    M, K, eY, eZ, t = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "t"))
    return sp.log(sp.log(M * eY * t / K)) / 2 + sp.log(2 * K * (M - 1) ** 2 / M**2 * eZ / eY) / 4


@cache
def derive_lnln_onset():
    """The time at which 4 Gamma = C0 in the snapping stage (h ~ ln(M eta_Y t/K)/M): eq. 132 holds for
    t much later than it."""
    import sympy as sp

    M, K, eY, eZ, C0, t = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "C0", "t"))
    from .attention import _h_log

    G = derive_gamma_integral().xreplace({_sym("h"): _h_log()})
    sols = [s for s in sp.solve(sp.Eq(4 * G, C0), t) if s.is_positive is not False]
    later = [s for s in sols if sp.N(s.subs({M: 100, K: 2, eY: 1, eZ: 1, C0: 1})) > 2 / 100]
    (sol,) = later
    return sp.simplify(sol)


def printed_lnln_onset():
    """Eq. 132's condition t >> (M eta_Y)^{-1} exp(1/sqrt(2 nu))."""
    import sympy as sp

    M, eY, eZ = _sym("M"), _sym("eta_Y"), _sym("eta_Z")
    return sp.exp(1 / sp.sqrt(2 * eY / eZ)) / (M * eY)


# -- insight (c): the sign of dB_n/d eta_Y -----------------------------------------------------------------
@cache
def derive_crossover_condition():
    """dB_n/d eta_Y at fixed eta_Z (eq. 129 corrected) has the sign of -(e^u (u - 2) - (M-1) u + 2),
    u = M h(eta_Y t/K): returns that polynomial-exponential expression in u (checked by sympy)."""
    import sympy as sp

    M, K, eY, eZ, C0, t = (_sym(n) for n in ("M", "K", "eta_Y", "eta_Z", "C0", "t"))
    u = sp.Symbol("u", positive=True)
    # h(x) with x = eta_Y t/K: dh/dx = 1/((M-1) + e^{M h}) (eq. 44 at unit rate), x(h) from eq. 45
    x_of_u = (sp.exp(u) + (M - 1) * u - 1) / M
    dh_dx = 1 / ((M - 1) + sp.exp(u))
    h = u / M
    G = derive_gamma_integral()                             # Gamma = (eta_Z/eta_Y) K (M-1)^2 h^2/2
    B = sp.log(1 + 4 * G / C0) / 4
    # d/d eta_Y at fixed eta_Z and t: explicit dependence plus h's through x = eta_Y t/K
    dB = sp.diff(B, eY) + sp.diff(B, _sym("h")) * dh_dx * (t / K)
    dB = dB.xreplace({_sym("h"): h}).xreplace({t: x_of_u * K / eY})
    cond = sp.exp(u) * (u - 2) - (M - 1) * u + 2
    ratio = sp.simplify(dB / cond)
    assert ratio.is_negative, ratio  # dB/d eta_Y = (negative factor) * cond
    return cond


def crossover_u(backend, M):
    """The root u_c > 2 of e^u (u - 2) = (M - 1) u - 2 (bisection, then Newton; mpmath: findroot)."""
    if backend == "mpmath":
        import mpmath

        f = lambda u: mpmath.exp(u) * (u - 2) - (M - 1) * u + 2  # noqa: E731
        hi = mpmath.mpf(3)
        while f(hi) <= 0:
            hi *= 2
        return mpmath.findroot(f, (mpmath.mpf(2), hi), solver="anderson")
    f = lambda u: math.exp(u) * (u - 2) - (M - 1) * u + 2  # noqa: E731
    lo, hi = 2.0, 3.0
    while f(hi) <= 0:
        lo, hi = hi, 2 * hi
    for _ in range(200):                                     # bisection to a bracket of a few ulp
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if f(mid) <= 0 else (lo, mid)
    u = hi
    for _ in range(3):                                       # Newton polish: f'(u) = e^u (u - 1) - (M - 1) > 0
        u -= f(u) / (math.exp(u) * (u - 1) - (M - 1))
    if backend == "torch":
        import torch

        return torch.as_tensor(u, dtype=torch.float64)
    return u


def _crossover_eval(backend, values, dims):
    M, K = values["M"], values["K"]
    ops = backend_ops(backend)
    u = crossover_u(backend, M)
    x = (ops.exp(u) + (M - 1) * u - 1) / M                   # x(u) of eq. 45 at unit rate (u > 2)
    return K * x / working(backend, values["eta_Y"])


@cache
def derive_crossover():
    """t_c = K x(u_c)/eta_Y with x(u) = (e^u + (M-1) u - 1)/M (eq. 45 at unit rate), u_c(M) the root > 2
    of derive_crossover_condition(); stated as a relation in the function u_c(M)."""
    import sympy as sp

    M, K, eY = _sym("M"), _sym("K"), _sym("eta_Y")
    u = sp.Function("u_c")(M)
    return sp.Eq(sp.Function("t_c")(M, K, eY), K * (sp.exp(u) + (M - 1) * u - 1) / (M * eY))


# -- registry -------------------------------------------------------------------------------------------------
_CLOCK = ("B_n = eta_Z int_0^t xi_n with t the total number of batch-1 steps: the clock of gamma(t) = "
          "gamma(h(t/K)) and of Theorem 4's B_n (eq. 14); class n is the sample at a fraction 1/K of them.")
_ERR_12 = ("Eq. 12 prints e^{2 f_nl0^2(0) B_n} <= chi_l0 <= e^{2 B_n}. With B_n on the clock of Theorem 4 (total "
           "batch-1 steps, gamma(t) = gamma(h(t/K))), the dominant distinct token moves only when its class is "
           "sampled (1/K of the steps), so dz_l0/dB_n = f_nl0^2/K and the exponents carry 1/K: the printed "
           "lower bound fails (by a factor up to K in the exponent) whenever f_nl0^2(0) > f_nl0^2(t)/K, "
           "and the printed upper bound holds but is loose by the power K. The printed form is right on "
           "eq. 10's own clock with the class sum read literally (each class once per unit time), which is "
           "not the clock of gamma(t) and B_n.")

_DOC_12 = ("Bound on the growth factor chi_l0(t) = exp(2 (z_ml0(t) - z_ml0(0))) of the dominant distinct token l0 "
           "of class n (r_{l0/l|n}(0) > 0 for every other distinct l, every common token falling), given B_n(t) and "
           "f0 = f_nl0(0). Derived from dz_l0/dt = (eta_Z/K) f_nl0^2 xi_n (eq. 98 in expectation over the class of a "
           "batch-1 step), f_nl0^2 increasing (eq. 114) and <= 1. ")

register(ClosedForm(
    id="scan_snap.growth.factor_lower",
    title="Eq. 12 (lower) on Theorem 4's clock: chi_l0 >= exp(2 f0^2 B_n/K)",
    source="Theorem 3, eqs. 12, 112-117 (1/K of uniform batch-1 sampling restored)",
    status="exact",
    params=(B_P, F0_P, K_P),
    derive=derive_factor_lower,
    printed=printed_factor_lower,
    domain=_f0_domain,
    example={"B": 2.0, "f0": 0.6, "K": 4},
    doc=_DOC_12 + _CLOCK,
    erratum=_ERR_12,
))

register(ClosedForm(
    id="scan_snap.growth.factor_upper",
    title="Eq. 12 (upper) on Theorem 4's clock: chi_l0 <= exp(2 B_n/K)",
    source="Theorem 3, eqs. 12, 115-117 (1/K of uniform batch-1 sampling restored)",
    status="exact",
    params=(B_P, K_P),
    derive=derive_factor_upper,
    doc=_DOC_12 + _CLOCK + " The printed upper bound e^{2 B_n} also holds (it is weaker by the power K), so no "
        "printed form is registered here; see scan_snap.growth.factor_lower for the erratum.",
))

register(ClosedForm(
    id="scan_snap.growth.factor_scanning",
    title="Theorem 4, scanning: chi_l0 >= (1 + 2 (M-1)^2 eta_Y eta_Z t^2/(K M^2 C0))^(f0^2/(2K))",
    source="Theorem 4 (attention scanning bullet), eqs. 12, 14 (both corrected)",
    status="asymptotic",
    params=BN_PARAMS + (F0_P,),
    derive=derive_factor_scanning,
    printed=printed_factor_scanning,
    stable=stable_factor_scanning,
    domain=_f0_domain,
    doc="The lower bound of eq. 12 (corrected: exponent 2 f0^2 B_n/K) with the scanning B_n of eq. 14 "
        "(corrected: 1/4 ln(1 + X/C0) in place of 1/4 ln(C0 + X)); valid while t << t_0' = K ln M/eta_Y "
        "under Theorem 4's hypotheses. (1 + ...)^(f0^2/(2K)): sub-linear in t once f0^2 < K.",
    erratum="The bullet prints chi_l0 >= [K^{-1}(rho0^4 + 2 eta_Y eta_Z t^2)]^{0.5 f0^2} = (C0 + 2 eta_Y eta_Z "
            "t^2/K)^{f0^2/2}: eq. 124's dropped integration constant puts C0 inside (so the printed bound "
            "exceeds chi(0) = 1 at t = 0 when C0 > 1), and eq. 12's missing 1/K doubles up in the exponent "
            "(f0^2/2 for f0^2/(2K)). The printed form also drops (M-1)^2/M^2.",
))

register(ClosedForm(
    id="scan_snap.growth.factor_snapping",
    title="Theorem 4, snapping: chi_l0 <= (1 + 2 K (M-1)^2 eta_Z ln^2(M eta_Y t/K)/(M^2 eta_Y C0))^(1/(2K))",
    source="Theorem 4 (attention snapping bullet), eqs. 12, 14 (both corrected)",
    status="asymptotic",
    params=BN_PARAMS,
    derive=derive_factor_snapping,
    stable=stable_factor_snapping,
    domain=_t_positive,
    example={"t": 1e5, "M": 1000, "K": 10, "eta_Y": 1.0, "eta_Z": 0.5, "C0": 10.0},
    doc="The upper bound of eq. 12 (corrected) with the snapping B_n of eq. 14 (corrected): chi_l0 = "
        "O(ln(t)^(1/K)) for t >= t_0 under Theorem 4's hypotheses, a fortiori the bullet's chi_l0 = O(ln t), "
        "which holds as printed (loosely; the paper prints no formula beyond the O(.), so no printed form is "
        "registered). The bound rests on e^{2 B_n} in the paper, sqrt(C0 + 2 K (M-1)^2 M^-2 (eta_Z/eta_Y) "
        "ln^2(M eta_Y t/K)); on Theorem 4's clock the exponent is 2 B_n/K and C0 divides (eq. 124).",
))

_ERR_124 = ("Eq. 124 drops the lower limit of its integral: the printed value carries C0 inside the log "
            "(1/4 ln(C0 + X)) in place of 1/4 ln(1 + X/C0), an offset of 1/4 ln C0.")

register(ClosedForm(
    id="scan_snap.growth.value_scan_end",
    title="B_n(t_0') from eq. 130: 1/4 ln(1 + 2 K (M-1)^2 ln^2 M/(M^2 nu C0)), nu = eta_Y/eta_Z",
    source="App. F, after eq. 130 (integration constant corrected)",
    status="asymptotic",
    params=(M5_P, K_P, ETA_Y, ETA_Z, C0_P),
    derive=derive_value_scan_end,
    printed=printed_value_scan_end,
    doc="Eq. 130 (the scanning B_n with h(t/K) ~ eta_Y t/(M K)) at t_0' = K ln M/eta_Y. The linear h "
        "exceeds the true one (h is concave), so this is an upper bound of the exact B_n(t_0'); with u = "
        "M h(t_0'/K), e^u + (M-1) u = M ln M + 1 gives u = ln M - W(1) + o(1), so the gap tends to 0 "
        "like W(1)/(2 ln M) (W(1) = 0.567) once 4 Gamma >> C0. Depends on eta_Y, eta_Z through nu only.",
    erratum=_ERR_124,
))

register(ClosedForm(
    id="scan_snap.growth.value_snap",
    title="B_n(t_0) from eq. 131: 1/4 ln(1 + 2 K (M-1)^2 ln^2(2 M u_hi)/(M^2 nu C0)), u_hi = (1 + omega_1) ln M",
    source="App. F, after eq. 131; Fig. 9 (integration constant corrected)",
    status="asymptotic",
    params=(M4_P, K_P, ETA_Y, ETA_Z, C0_P),
    derive=derive_value_snap,
    printed=printed_value_snap,
    derived=_u_hi,
    derived_names=("u_hi",),
    doc="Eq. 131 (the snapping B_n with h(t/K) ~ ln(M eta_Y t/K)/M) at t_0 = 2 (1 + omega_1) K ln M/eta_Y "
        "(M eta_Y t_0/K = 2 M u_hi). An upper bound of the exact B_n(t_0) (eq. 45: e^{M h} < M eta_Y t/K + "
        "1); it depends on eta_Y and eta_Z only through nu = eta_Y/eta_Z, which is Fig. 9's claim (the "
        "exact B_n(t_0) also does: h(t_0/K) depends on eta_Y t_0/K = 2 u_hi only).",
    erratum=_ERR_124,
))

register(ClosedForm(
    id="scan_snap.growth.lnln_asymptote",
    title="Eq. 132: B_n ~ 1/2 ln ln(M eta_Y t/K) + 1/4 ln(2 K (M-1)^2/(M^2 nu C0)) as t -> oo",
    source="App. F, eqs. 132-133 (integration constant corrected)",
    status="asymptotic",
    params=BN_PARAMS,
    derive=derive_lnln_asymptote,
    printed=printed_lnln_asymptote,
    domain=_t_domain,
    example={"t": 1e8, "M": 1000, "K": 10, "eta_Y": 1.0, "eta_Z": 0.5, "C0": 10.0},
    doc="The large-t expansion of the snapping B_n (eq. 14, corrected): B_n - this -> 0 as t -> oo. It needs "
        "4 Gamma >> C0 (scan_snap.growth.lnln_onset). Eq. 133's Theta(ln ln(M eta_Z nu t/K) - ln(nu/K)) is "
        "the same with M eta_Z nu = M eta_Y.",
    erratum="Eq. 132's constant is 1/4 ln(2 K (M-1)^2 M^-2 nu^-1) without -1/4 ln C0 (eq. 124's offset): "
            "B_n minus the printed bracket tends to -1/4 ln C0, not 0. With the prefactor (1 + o(1)) the "
            "printed statement is still true (ln ln t outgrows any constant), but its constant is wrong.",
))

register(ClosedForm(
    id="scan_snap.growth.lnln_onset",
    title="Onset of eq. 132: t* = K exp((M/(M-1)) sqrt(nu C0/(2K)))/(M eta_Y), where 4 Gamma = C0",
    source="App. F, eq. 132's validity condition (corrected)",
    status="asymptotic",
    params=(M_VOCAB, K_P, ETA_Y, ETA_Z, C0_P),
    derive=derive_lnln_onset,
    printed=printed_lnln_onset,
    doc="The time at which 4 Gamma(t) = C0 with the snapping h(t/K) ~ ln(M eta_Y t/K)/M; eq. 132 needs t >> "
        "t*, i.e. ln(M eta_Y t/K) >> (M/(M-1)) sqrt(nu C0/(2K)).",
    erratum="Eq. 132 states its range as t >> (M eta_Y)^{-1} exp(1/sqrt(2 nu)): nu is inverted and C0/K is "
            "missing (the condition 4 Gamma >> C0 reads ln(M eta_Y t/K) >> (M/(M-1)) sqrt(nu C0/(2K))), so "
            "with a large nu C0/K the printed range begins long before the asymptote holds.",
))

register(ClosedForm(
    id="scan_snap.growth.eta_Y_crossover",
    title="Insight (c): t_c after which a larger eta_Y (fixed eta_Z) gives a smaller B_n; before it, larger",
    source="Theorem 4, insight (c); App. F (b) (the sign of dB_n/d eta_Y of eq. 129) [derived]",
    status="exact",
    params=(M5_P, K_P, ETA_Y),
    derive=derive_crossover,
    evaluate=_crossover_eval,
    doc="dB_n/d eta_Y at fixed eta_Z and t (eq. 129 corrected, continuous h) has the sign of -(e^u (u - 2) - "
        "(M - 1) u + 2), u = M h(eta_Y t/K): positive for u < u_c, negative after, u_c > 2 the root of e^u "
        "(u - 2) = (M - 1) u - 2. t_c = K (e^{u_c} + (M - 1) u_c - 1)/(M eta_Y). The sign does not depend on "
        "eta_Z, C0 or K. Insight (c) (smaller eta_Y, larger B_n) holds at t >= t_c, which is earlier than "
        "t_0 (the paper's 'after t_0' is sufficient); before t_c the order is reversed (Fig. 3's early times).",
))
