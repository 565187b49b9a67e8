"""The h recursion of Scan and Snap and everything built on it (Tian, Wang, Chen, Du 2023, App. D).

With a single sequence class, zero-initialised decoder and learning rate ``eta_Y``, the decoder row
is ``w_n(s) = (M - 1) h*(s) zeta_n`` (Lemma 5), where ``h*`` follows the recursion of eq. 33

    h*(s) = h*(s - 1) + eta_Y / ((M - 1) + exp(M h*(s - 1))),   h*(0) = 0.

Its continuous counterpart (Lemma 6, eq. 44) ``dh/dt = eta_Y / ((M - 1) + exp(M h))`` is separable;
sympy's ``dsolve`` gives the implicit solution of eq. 45,
``exp(M h) + (M - 1) M h = M eta_Y t + 1``, which is solved explicitly by Lambert W

    h(t) = (1/M) [A/(M - 1) - W_0(exp(A/(M - 1))/(M - 1))],   A = M eta_Y t + 1,

and inverted explicitly, ``t(h) = (exp(M h) + (M - 1) M h - 1)/(M eta_Y)``.

Numerics
--------
* ``h(t)`` (and everything evaluated at ``h(t)``) solves ``expm1(u) + (M - 1) u = M eta_Y t`` for
  ``u = M h`` by Newton's method from the upper bound ``min(M eta_Y t / M, log1p(M eta_Y t))``: the
  left side is convex and increasing, so the iterates decrease monotonically to the root. This
  works in ``u ~ ln(M eta_Y t)`` and never forms ``exp(A/(M - 1))`` (which overflows once
  ``M eta_Y t`` exceeds about ``700 M``); the ``expm1`` form keeps full relative precision at small
  ``t``. torch: the Newton iterates run without gradient and one last Newton step with gradient,
  which gives the exact implicit derivative.
* ``h*(s)`` is iterated exactly, one step at a time (no acceleration is exact, and Lemma 7's
  ``0 <= h* - h <= 2 eta_Y/M`` is only a bound). The step count is limited to
  :data:`S_MAX` ``= 10**7`` (about 2 s in float64 for a scalar ``eta_Y``); larger ``s`` raise
  ``ValueError("s: ...")``. mpmath takes about 14 us per step at 50 digits and 0.5 ms at 1000,
  so there ``s * mp.dps`` is limited to :data:`MPMATH_DIGIT_STEPS` (``s <= 500000`` at 50 digits).

The speed control coefficient gamma, a function of ``h(t/K)``, and the times it sets are
:mod:`theory.scan_snap.speed`.

Contains
--------
``scan_snap.h.discrete``, ``.continuous``, ``.time_of``, ``.linear``, ``.logarithmic``,
``.gap_bound``, ``.root_low``, ``.root_high``, ``.omega_0``, ``.omega_1``, ``.identity_53``,
``.identity_54``, ``.identity_56``, ``.identity_57``, ``.remark3_rate``.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from ..params import Param, nonnegative, positive
from ..backends import backend_ops, working
from ..registry import ClosedForm, register

__all__ = ["S_MAX", "trajectory", "u_of_t", "h_continuous", "lambertw_real",
           "implicit_solution", "explicit_solution"]

#: Largest step count the discrete recursion is iterated to.
S_MAX = 10**7
#: mpmath budget of the recursion: s * mp.dps at most this many digit-steps (s <= 500000 at 50
#: digits, about 7 s; s <= 25000 at 1000 digits, about 13 s): a step costs about 14 us at 50 digits
#: and 0.5 ms at 1000, so S_MAX steps would take minutes to hours.
MPMATH_DIGIT_STEPS = 25 * 10**6

M_P = Param("M", "index", "Vocabulary size M (the output softmax size), M >= 2.", low=2)
M4_P = Param("M", "index", "Vocabulary size M >= 4 (for M <= 3, exp(M h) > (M-1) M h for every h: "
             "no roots).", low=4)
S_P = Param("s", "index", f"Number of steps of the recursion, 0 <= s <= {S_MAX}.", low=0, high=S_MAX)
K_P = Param("K", "index", "Number of sequence classes (next tokens) K >= 1.", low=1)
T_P = nonnegative("t", "Time: per-class steps for h, total batch-1 SGD steps for gamma.", sample=(0, 20))
# h ~ ln(M eta_Y t)/M: M h stays below ~40 for t <= 1e9
H_SAMPLE = (1e-4, 0.04, "log")
H_P = nonnegative("h", "Value of h (so that u = M h).", sample=H_SAMPLE)
ETA_Y = positive("eta_Y", "Decoder learning rate eta_Y.")
ETA_Z = positive("eta_Z", "Self-attention learning rate eta_Z.")
EPS_P = positive("epsilon", "Target ||e_n - alpha_n||_2 (Corollary 1).")


def _sym(name):
    from . import sym

    return sym(name)


def syms():
    return _sym("M"), _sym("eta_Y"), _sym("t"), _sym("h")


# =====================================================================================
# Derivations
# =====================================================================================
@cache
def implicit_solution():
    """Eq. 45 from sympy's ``dsolve`` of eq. 44 with h(0) = 0: ``F(h, t) = 0`` with
    ``F = exp(M h) + (M - 1) M h - M eta_Y t - 1``."""
    import sympy as sp

    M, eta, t, h = syms()
    f = sp.Function("h")
    sol = sp.dsolve(sp.Eq(f(t).diff(t), eta / ((M - 1) + sp.exp(M * f(t)))), f(t), hint="separable",
                    simplify=False)
    C1 = (sol.lhs - sol.rhs).free_symbols - {M, eta, t}
    (c,) = C1
    F = (sol.lhs - sol.rhs).subs(f(t), h)
    c_val = sp.solve(F.subs({h: 0, t: 0}), c)[0]           # h(0) = 0
    F = sp.expand(M * F.subs(c, c_val))
    assert sp.simplify(F - (sp.exp(M * h) + (M - 1) * M * h - M * eta * t - 1)) == 0
    # the implicit solution satisfies the ODE: dh/dt = -F_t / F_h
    assert sp.simplify(-F.diff(t) / F.diff(h) - eta / ((M - 1) + sp.exp(M * h))) == 0
    return F


@cache
def explicit_solution():
    """h(t) solved from eq. 45 by sympy (Lambert W, principal branch)."""
    import sympy as sp

    M, eta, t, h = syms()
    (sol,) = sp.solve(implicit_solution(), h)
    return sol


@cache
def derive_time_of():
    import sympy as sp

    M, eta, t, h = syms()
    (sol,) = sp.solve(implicit_solution(), t)
    return sol


@cache
def stable_time_of():
    from sympy.codegen.cfunctions import expm1

    M, eta, t, h = syms()
    return (expm1(M * h) + (M - 1) * M * h) / (M * eta)


@cache
def derive_discrete():
    """Eq. 33 as a relation: h*(s) = h*(s-1) + eta_Y/((M-1) + exp(M h*(s-1)))."""
    import sympy as sp

    M, eta = _sym("M"), _sym("eta_Y")
    s = _sym("s")
    hs = sp.Function("h_star")
    return sp.Eq(hs(s), hs(s - 1) + eta / ((M - 1) + sp.exp(M * hs(s - 1))))


@cache
def derive_linear():
    """First-order Taylor term of h(t) at t = 0 (implicit differentiation of eq. 45)."""
    import sympy as sp

    M, eta, t, h = syms()
    F = implicit_solution()
    slope = (-F.diff(t) / F.diff(h)).subs(h, 0)
    return sp.simplify(slope) * t


@cache
def derive_logarithmic():
    """Leading term of h(t) as t -> oo: u = ln(A - (M-1) u) with u = o(A) gives u ~ ln(M eta_Y t)."""
    import sympy as sp

    M, eta, t, h = syms()
    lead = sp.log(M * eta * t) / M
    # the Lambert-W solution over the leading term tends to 1 (checked on the exact u-equation:
    # u = ln(A - (M-1) u) and u / ln(A) -> 1 since u <= ln(A))
    x = sp.Symbol("x", positive=True)
    ratio = sp.log(x - (M - 1) * sp.log(x)) / sp.log(x)
    assert sp.limit(ratio, x, sp.oo) == 1
    return lead


@cache
def derive_gap_bound():
    """Lemma 7(a): twice the largest one-step increment of h*, sup_h eta/((M-1) + e^{Mh}) at h = 0."""
    import sympy as sp

    M, eta, t, h = syms()
    inc = eta / ((M - 1) + sp.exp(M * h))
    num, den = sp.fraction(sp.together(inc.diff(h)))
    assert num.is_negative and den.is_nonnegative  # the increment decreases in h: sup at h = 0
    return 2 * inc.subs(h, 0)


def lemma8_roots():
    """u roots of exp(u) = (M-1) u: -W_0(-1/(M-1)) and -W_{-1}(-1/(M-1))."""
    import sympy as sp

    M, eta, t, h = syms()
    (root,) = sp.solve(sp.exp(M * h) - (M - 1) * M * h, h)     # sympy returns the W_0 branch
    lo = sp.expand(M * root)
    assert lo == -sp.LambertW(-1 / (M - 1))
    hi = lo.replace(sp.LambertW, lambda x, *k: sp.LambertW(x, -1))
    # both branches solve W e^W = x, hence e^u = (M-1) u
    for u in (lo, hi):
        W = -u  # W e^W = x  =>  e^{-W} = W/x
        residual = (sp.exp(u) - (M - 1) * u).subs(sp.exp(u), W / (-1 / (M - 1)))
        assert sp.simplify(residual) == 0
    return lo, hi


@cache
def derive_root_low():
    lo, _ = lemma8_roots()
    return lo / _sym("M")


@cache
def derive_root_high():
    _, hi = lemma8_roots()
    return hi / _sym("M")


@cache
def derive_omega_0():
    """Eq. 50 with u_lo = M^{omega_0 - 1}: omega_0 ln M = ln(M/(M-1)) + u_lo."""
    import sympy as sp

    M = _sym("M")
    lo, _ = lemma8_roots()
    return (sp.log(M / (M - 1)) + lo) / sp.log(M)


@cache
def derive_omega_1():
    """Eq. 51 with u_hi = (1 + omega_1) ln M."""
    import sympy as sp

    M = _sym("M")
    _, hi = lemma8_roots()
    return hi / sp.log(M) - 1


@cache
def derive_remark3_rate():
    """The eta_Y at which h(1) reaches the lower root u_lo/M of Lemma 8: eq. 45 at t = 1, h = u_lo/M,
    solved for eta_Y, with e^{u_lo} = (M-1) u_lo (Remark 3: for a larger eta_Y, e^{M h(t)} - (M-1) M h(t)
    changes sign once on t >= 1, at the upper root)."""
    import sympy as sp

    M, eta, t, h = syms()
    lo, _ = lemma8_roots()
    (sol,) = sp.solve(sp.Eq(derive_time_of().subs({h: lo / M}), 1), eta)
    return sp.simplify(sol.subs(sp.exp(lo), (M - 1) * lo))


def t_of_h_expr(hval):
    return derive_time_of().subs(_sym("h"), hval)


def _deltas():
    import sympy as sp

    M, eta, t, h = syms()
    return sp.exp(M * h) / (M - 1), sp.exp(M * h) / ((M - 1) * M * h)


def gamma_of_h():
    """gamma = (M-1)^2 h/((M-1) + exp(M h)) (the definition before Lemma 9, at h = h(t/K))."""
    import sympy as sp

    M, eta, t, h = syms()
    return (M - 1) ** 2 * h / ((M - 1) + sp.exp(M * h))


def _printed_53():
    M, eta, t, h = syms()
    d1, d2 = _deltas()
    return ((M * eta * t + 1) / ((1 + d2) * M * (M - 1))).subs(t, t_of_h_expr(h))


def _printed_54():
    M, eta, t, h = syms()
    d1, d2 = _deltas()
    return ((M * eta * t + 1) / ((1 + d1) * (1 + d2) * M)).subs(t, t_of_h_expr(h))


def _printed_56():
    import sympy as sp

    M, eta, t, h = syms()
    d1, d2 = _deltas()
    # 1/(1 + Delta_2^{-1}) written as Delta_2/(1 + Delta_2) (the same expression; sympy's
    # auto-evaluation of the former hides the cancellation from the comparison)
    return (sp.log((M * eta * t + 1) * d2 / (1 + d2)) / M).subs(t, t_of_h_expr(h))


def _printed_57():
    import sympy as sp

    M, eta, t, h = syms()
    d1, d2 = _deltas()
    X = (M * eta * t + 1) * d2 / (1 + d2)            # (M eta t + 1)/(1 + 1/Delta_2), as in eq. 56
    return ((M - 1) / M * (M - 1) * sp.log(X) * d1 / ((1 + d1) * X)).subs(t, t_of_h_expr(h))


# =====================================================================================
# Numerics
# =====================================================================================
def lambertw_real(backend, x, branch):
    """Real Lambert W on [-1/e, 0) (branches 0 and -1) for numpy, mpmath, torch (via float64)."""
    if backend == "mpmath":
        import mpmath

        return mpmath.re(mpmath.lambertw(x, branch))
    from scipy.special import lambertw

    val = float(np.real(lambertw(float(x), branch)))
    # one Newton polish on w e^w = x (scipy is accurate to a few ulp; this makes it ~1 ulp)
    val -= (val * math.exp(val) - x) / (math.exp(val) * (1 + val))
    if backend == "torch":
        import torch

        return torch.tensor(val, dtype=torch.float64)
    return val


def u_of_t(backend, c, M):
    """Solve expm1(u) + (M - 1) u = c for u >= 0 (c = M eta_Y t), i.e. u = M h(t)."""
    if backend == "mpmath":
        import mpmath

        c = mpmath.mpf(c)
        if c == 0:
            return mpmath.mpf(0)
        u = min(c / M, mpmath.log1p(c))
        tol = mpmath.mpf(2) ** (-mpmath.mp.prec + 4)
        for _ in range(10_000):
            step = (mpmath.expm1(u) + (M - 1) * u - c) / (mpmath.exp(u) + M - 1)
            u -= step
            if abs(step) <= tol * abs(u):
                break
        return u
    if backend == "torch":
        import torch

        ct = c if isinstance(c, torch.Tensor) else torch.as_tensor(c, dtype=torch.float64)
        with torch.no_grad():
            u0 = torch.as_tensor(_newton_numpy(ct.detach().cpu().numpy(), M), dtype=torch.float64)
        # one last Newton step with gradient: d u/d c = 1/(e^u + M - 1), the implicit derivative
        return u0 - (torch.expm1(u0) + (M - 1) * u0 - ct) / (torch.exp(u0) + M - 1)
    return _newton_numpy(c, M)


def _newton_numpy(c, M):
    if np.ndim(c) == 0 and math.isfinite(c):
        return _newton_scalar(float(c), M)
    c = np.asarray(c, dtype=np.float64)
    u = np.minimum(c / M, np.log1p(c))                  # an upper bound: G(u) >= 0 there
    for _ in range(200):
        step = (np.expm1(u) + (M - 1) * u - c) / (np.exp(u) + (M - 1))
        new = np.maximum(u - step, 0.0)
        done = np.all((new >= u) | (np.abs(u - new) <= 4e-16 * np.abs(new)))
        u = np.minimum(new, u)                           # monotone decrease (convexity)
        if done:
            break
    return u if u.ndim else float(u)


def _newton_scalar(c: float, M):
    """:func:`_newton_numpy` for one finite ``c``: the same iterates in Python floats (numpy's
    ``expm1``, ``exp``, ``log1p`` for the same values; ``min``/``max`` pick as ``np.minimum``/
    ``np.maximum`` do for numbers), without the cost of 0-d arrays (an ODE's right-hand side calls
    it at every evaluation)."""
    expm1, exp, Mm1 = np.expm1, np.exp, M - 1
    u = min(c / M, float(np.log1p(c)))
    for _ in range(200):
        step = (float(expm1(u)) + Mm1 * u - c) / (float(exp(u)) + Mm1)
        new = max(u - step, 0.0)
        done = new >= u or abs(u - new) <= 4e-16 * abs(new)
        u = min(new, u)
        if done:
            break
    return float(u)


def h_continuous(backend, t, M, eta_Y):
    """h(t) of eq. 45 (log-space Newton; see the module docstring)."""
    return u_of_t(backend, M * working(backend, eta_Y) * working(backend, t), M) / M


def trajectory(S, M, eta_Y):
    """h*(0), ..., h*(S) of eq. 33 (float64, scalar eta_Y), as a numpy array."""
    if S > S_MAX:
        raise ValueError(f"s: must be <= {S_MAX}, got {S}")
    # Python floats in a list (a numpy item store per step costs more than the step); -float(M)
    # and float(eta_Y) round as the record's ints and floats do, so the values are the same bits
    out = [0.0] * (S + 1)
    h, Mm1, mM, eta, exp = 0.0, float(M - 1), -float(M), float(eta_Y), math.exp
    for k in range(1, S + 1):
        u = exp(mM * h)                                  # as in the record: see _discrete
        h += eta * u / (1.0 + Mm1 * u)
        out[k] = h
    return np.array(out)


def _discrete(backend, values, dims):
    s, M, eta = values["s"], values["M"], values["eta_Y"]
    if backend == "mpmath":
        import mpmath

        limit = MPMATH_DIGIT_STEPS // mpmath.mp.dps
        if s > limit:
            raise ValueError(f"s: the mpmath backend iterates at most {MPMATH_DIGIT_STEPS:.2g}/dps steps "
                             f"({limit} at {mpmath.mp.dps} digits; each step costs more digits), got "
                             f"{s}; use numpy (float64) for larger s")
        h, eta, Mm1 = mpmath.mpf(0), mpmath.mpf(eta), M - 1
        for _ in range(s):
            h += eta / (Mm1 + mpmath.exp(M * h))
        return h
    if backend == "torch":
        import torch

        if isinstance(eta, torch.Tensor) and eta.requires_grad:  # autograd through the recursion
            h = torch.zeros_like(eta, dtype=torch.float64)
            for _ in range(s):
                u = torch.exp(-M * h)
                h = h + eta * u / (1 + (M - 1) * u)
            return h
        e = eta.detach().cpu().numpy() if isinstance(eta, torch.Tensor) else eta
        return torch.as_tensor(_discrete("numpy", dict(values, eta_Y=e), dims), dtype=torch.float64)
    # the increment eta/((M-1) + e^{Mh}) as eta u/(1 + (M-1) u) with u = e^{-Mh} <= 1 (h >= 0):
    # e^{Mh} overflows once M h > 709 (a large eta_Y gets there in one step), u only underflows
    if np.ndim(eta) == 0:
        h, Mm1, eta, exp = 0.0, float(M - 1), float(eta), math.exp
        for _ in range(s):
            u = exp(-M * h)
            h += eta * u / (1.0 + Mm1 * u)
        return h
    eta = np.asarray(eta, dtype=np.float64)
    h = np.zeros_like(eta)
    for _ in range(s):
        u = np.exp(-M * h)
        h += eta * u / (1.0 + (M - 1) * u)
    return h


def _continuous(backend, values, dims):
    return h_continuous(backend, values["t"], values["M"], values["eta_Y"])


def root_u(backend, M, branch):
    x = -1 / working(backend, M - 1)
    return -lambertw_real(backend, x, branch)


def _root_low(backend, values, dims):
    return root_u(backend, values["M"], 0) / values["M"]


def _root_high(backend, values, dims):
    return root_u(backend, values["M"], -1) / values["M"]


def _omega_0(backend, values, dims):
    M = values["M"]
    # ln(M/(M-1)) as log1p(1/(M-1)): M/(M-1) rounds to 1 + 1 ulp for large M (half the value
    # at M = 2**53)
    inv = 1 / working(backend, M - 1)
    return (backend_ops(backend).log1p(inv) + root_u(backend, M, 0)) / backend_ops(backend).log(M)


def _omega_1(backend, values, dims):
    M = values["M"]
    return root_u(backend, M, -1) / backend_ops(backend).log(M) - 1


def _remark3_rate(backend, values, dims):
    M = values["M"]
    return (2 * (M - 1) * root_u(backend, M, 0) - 1) / M


def t_positive(values, dims):
    """The t -> oo forms take ln t: t = 0 is outside them."""
    if np.any(np.asarray(values["t"]) <= 0):
        raise ValueError(f"t: must be > 0 (the form is the t -> oo leading term, with ln t), "
                         f"got {values['t']!r}")


# =====================================================================================
# Records
# =====================================================================================
_RECURSION_DOC = (
    "Lemma 5: with one sequence class, Y(0) = 0 and learning rate eta_Y, the decoder row is "
    "w_n(s) = (M-1) h*(s) zeta_n exactly. Iterated exactly in float64 (Python floats for a scalar "
    f"eta_Y, a vectorised numpy loop for arrays, mpmath at mp.dps); s <= {S_MAX}, and with mpmath "
    f"s * dps <= {MPMATH_DIGIT_STEPS:.2g} (s <= {MPMATH_DIGIT_STEPS // 50} at 50 digits). torch: autograd "
    "flows through the recursion when eta_Y requires grad (iterated in torch), else computed in numpy.")

register(ClosedForm(
    id="scan_snap.h.discrete",
    title="h*(s): the discrete h recursion of the decoder weights (single class)",
    source="eq. 33 (Lemma 5)",
    status="exact",
    params=(S_P, M_P, ETA_Y),
    derive=derive_discrete,
    evaluate=_discrete,
    doc=_RECURSION_DOC,
))

register(ClosedForm(
    id="scan_snap.h.continuous",
    title="h(t): solution of dh/dt = eta_Y/((M-1) + exp(M h)), h(0) = 0 (Lambert W)",
    source="eqs. 44-45 (Lemma 6)",
    status="exact",
    params=(T_P, M_P, ETA_Y),
    derive=explicit_solution,
    evaluate=_continuous,
    doc="dsolve gives the implicit solution exp(M h) + (M-1) M h = M eta_Y t + 1 (eq. 45); sympy solves "
        "it with the principal Lambert W. Evaluated by Newton's method on expm1(u) + (M-1) u = M eta_Y t "
        "(u = M h), stable up to t = 1e9 and beyond (no exp(A/(M-1)) is formed).",
))

register(ClosedForm(
    id="scan_snap.h.time_of",
    title="t(h): the explicit inverse of h(t)",
    source="eq. 45 (solved for t)",
    status="exact",
    params=(H_P, M_P, ETA_Y),
    derive=derive_time_of,
    stable=stable_time_of,
    doc="t(h) = (exp(M h) + (M-1) M h - 1)/(M eta_Y); numerics use expm1(M h) for small h.",
))

register(ClosedForm(
    id="scan_snap.h.linear",
    title="Linear regime of h(t): h ~ eta_Y t/M as t -> 0",
    source="Lemma 9 (stage 1)",
    status="asymptotic",
    params=(T_P, M_P, ETA_Y),
    derive=derive_linear,
    doc="First Taylor term of h(t) at t = 0 (implicit differentiation of eq. 45); accurate while "
        "exp(M h) << M - 1, i.e. up to t ~ t_A (scan_snap.speed.scan_end with K = 1).",
))

register(ClosedForm(
    id="scan_snap.h.logarithmic",
    title="Logarithmic regime of h(t): h ~ ln(M eta_Y t)/M as t -> oo",
    source="Lemma 9 (stage 2)",
    status="asymptotic",
    params=(T_P, M_P, ETA_Y),
    derive=derive_logarithmic,
    domain=t_positive,
    doc="Leading term of u = M h = ln(M eta_Y t + 1 - (M-1) u); the relative error is "
        "O(M ln(M eta_Y t)/(M eta_Y t)). Negative for M eta_Y t < 1 (meaningless there).",
))

register(ClosedForm(
    id="scan_snap.h.gap_bound",
    title="Lemma 7(a) bound on h*(s) - h(s): 2 eta_Y/M",
    source="Lemma 7(a)",
    status="exact",
    params=(M_P, ETA_Y),
    derive=derive_gap_bound,
    printed=lambda: 2 * _sym("eta_Y") / _sym("M"),
    doc="Twice the largest one-step increment eta_Y/M of the recursion (at h = 0). The lemma states "
        "0 <= h*(s) - h(s) <= 2 eta_Y/M for all s; the check scan_snap.h.lemma7_gap measures a maximum of "
        "0.09-0.19 of the bound.",
))

_ROOT_DOC = ("Lemma 8: with u = M h, exp(u) = (M-1) u has the roots u_lo = -W_0(-1/(M-1)) and "
             "u_hi = -W_{-1}(-1/(M-1)) (real for M >= 4); exp(M h) <= (M-1) M h exactly on "
             "J_1 = [u_lo/M, u_hi/M] = [M^{omega_0 - 2}, (1 + omega_1) ln M/M].")

register(ClosedForm(
    id="scan_snap.h.root_low", title="Lower root u_lo/M of exp(M h) = (M-1) M h (left end of J_1)",
    source="Lemma 8", status="exact", params=(M4_P,), derive=derive_root_low,
    evaluate=_root_low, doc=_ROOT_DOC))
register(ClosedForm(
    id="scan_snap.h.root_high", title="Upper root u_hi/M of exp(M h) = (M-1) M h (right end of J_1)",
    source="Lemma 8", status="exact", params=(M4_P,), derive=derive_root_high,
    evaluate=_root_high, doc=_ROOT_DOC))
register(ClosedForm(
    id="scan_snap.h.omega_0", title="omega_0 of eq. 50 (J_1 starts at M^{omega_0 - 2})",
    source="Lemma 8, eq. 50", status="exact", params=(M4_P,), derive=derive_omega_0,
    evaluate=_omega_0,
    doc=_ROOT_DOC + " Eq. 50's fixed point omega_0 ln M = ln(M/(M-1)) + M^{omega_0 - 1} is solved by "
    "M^{omega_0 - 1} = u_lo; omega_0 = O(1/(M^0.99 ln M))."))
register(ClosedForm(
    id="scan_snap.h.omega_1", title="omega_1 of eq. 51 (J_1 ends at (1 + omega_1) ln M/M)",
    source="Lemma 8, eq. 51", status="exact", params=(M4_P,), derive=derive_omega_1,
    evaluate=_omega_1,
    doc=_ROOT_DOC + " Eq. 51, M^{omega_1} = (1 + omega_1) ln M (M-1)/M, is solved by "
    "(1 + omega_1) ln M = u_hi; omega_1 = Theta(ln ln M/ln M) (0.3198 at M = 1000)."))

register(ClosedForm(
    id="scan_snap.h.remark3_rate", title="Remark 3: the eta_Y at which h(1) = u_lo/M (the lower root of Lemma 8)",
    source="Remark 3", status="exact", params=(M4_P,), derive=derive_remark3_rate, evaluate=_remark3_rate,
    doc=_ROOT_DOC + " Remark 3 assumes eta_Y >> M^{-0.99} so that h(1) > u_lo/M and only the upper root matters for "
    "t >= 1; exactly, h(1) > u_lo/M iff eta_Y exceeds this value, (2 (M-1) u_lo - 1)/M = (1 + 2/(M-1) + O(M^-2))/M, "
    "which is below M^{-0.99} for M >= 100 (so 'M >> 100' makes the paper's condition sufficient) but not for small M "
    "(at M = 10 it is 1.27/M against M^{-0.99} = 1.02/M)."))

_ID_DOC = ("Lemma 9 (K = 1), an exact identity along the solution: with t = t(h) (eq. 45) and "
           "Delta_1 = e^{Mh}/(M-1), Delta_2 = e^{Mh}/((M-1) M h), the printed right-hand side equals "
           "the left-hand side for every h > 0 (sympy proves it).")
register(ClosedForm(
    id="scan_snap.h.identity_53", title="Eq. 53: h = (M eta_Y t + 1)/((1 + Delta_2) M (M-1))",
    source="Lemma 9, eq. 53", status="exact", params=(Param("h", "positive", "h > 0.", sample=H_SAMPLE), M_P),
    derive=lambda: _sym("h"), printed=_printed_53, doc=_ID_DOC))
register(ClosedForm(
    id="scan_snap.h.identity_54",
    title="Eq. 54: gamma = (M eta_Y t + 1)/((1 + Delta_1)(1 + Delta_2) M) (K = 1)",
    source="Lemma 9, eq. 54", status="exact", params=(Param("h", "positive", "h > 0.", sample=H_SAMPLE), M_P),
    derive=gamma_of_h, printed=_printed_54, doc=_ID_DOC))
register(ClosedForm(
    id="scan_snap.h.identity_56", title="Eq. 56: h = ln((M eta_Y t + 1)/(1 + 1/Delta_2))/M",
    source="Lemma 9, eq. 56", status="exact", params=(Param("h", "positive", "h > 0.", sample=H_SAMPLE), M_P),
    derive=lambda: _sym("h"), printed=_printed_56, doc=_ID_DOC))
register(ClosedForm(
    id="scan_snap.h.identity_57",
    title="Eq. 57: gamma = (M-1)/M (M-1) ln X/((1 + 1/Delta_1) X), X = (M eta_Y t + 1)/(1 + 1/Delta_2)",
    source="Lemma 9, eq. 57", status="exact", params=(Param("h", "positive", "h > 0.", sample=H_SAMPLE), M_P),
    derive=gamma_of_h, printed=_printed_57, doc=_ID_DOC))
