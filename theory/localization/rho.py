"""The signal-propagation probability rho (Bao, Hataya, Karakida 2024, Definition 1, Sec. 4).

``rho_i = P(u_i in [0, 1])`` with ``u_i`` the linearised softmax coordinate of
:mod:`theory.localization.u`. The paper approximates ``u_i`` as Gaussian (R2); with
mean mu and variance v the interval probability is

    rho = 1/2 erf((1 - mu)/sqrt(2 v)) + 1/2 erf(mu/sqrt(2 v)),

which is *derived* here by integrating the normal density over [0, 1] (sympy). Substituting
the exact finite-T moments gives ``localization.rho.gaussian``. The continuum form (eq. 6) uses
the control parameters ``xi = tr(W)/sqrt(tr(W^2))``, ``eta = sqrt(tr(W^2))/lambda`` and
``theta = i/T``: it is derived as the T -> infinity limit of the moments at fixed theta,
substituted into the same interval probability; the 1/T offset gamma_0^i drops out.

Errata:

* eq. 6 uses Lemma 1's wrong variance, ``D(theta) = 2 theta^2 + 7/12`` in place of
  ``D_c(theta) = 2 theta^2 - 2 theta + 7/12``; the printed rho misses Monte Carlo by up to 0.55;
* Lemma 2.1/2.2: the limits are 1/2 (not 1) at the boundary points of the indicators;
* Lemma 2.3 (uniformity) is false: at xi = 0, rho(theta) = 1/2 erf(1/(eta sqrt(2 D(theta))))
  still varies with theta for every finite eta.

Contains
--------
``localization.rho.gaussian``, ``.continuum``, ``.continuum_printed``, ``.late_site_limit``,
``.early_site_limit``, ``.derivative_at_zero_xi``, ``.derivative_at_zero_xi_corrected``; the steps of
the proof of Lemma 2.3: ``.derivative`` (rho' of eq. 6) and ``.proof_quotient_derivative``.
"""

from __future__ import annotations

from functools import cache

from ..params import index, positive, real
from ..registry import ClosedForm, register
from .random_walk import I_KEY, TEMP, TRW, TRW2, index_domain
from .u import derive_mean, derive_variance

THETA = positive("theta", "Relative key position theta = i/T in (0, 1].")
XI = real("xi", "Eigenspectrum control xi = tr(W)/sqrt(tr(W^2)), |xi| <= sqrt(d) (eq. 5).")
ETA = positive("eta", "Eigenspectrum control eta = sqrt(tr(W^2))/lambda.")
T_GAUSS = index("T", "Sequence length, T >= 2 (at T = 1, u_1 = 1 is deterministic: v = 0).", low=2,
                example=8)
R_LIM = positive("r", "Limit of |xi eta| = |tr(W)|/lambda along the sequence of Lemma 2.1/2.2.")

__all__ = ["interval_probability", "stable_interval_probability", "derive_gaussian", "stable_gaussian",
           "derive_continuum", "stable_continuum", "printed_continuum", "stable_printed_continuum",
           "erf_difference", "erf_interval", "theta_domain"]


def _sym(name):
    from . import sym

    return sym(name)


def theta_domain(values: dict, dims: dict) -> None:
    """theta in (0, 1] (positivity is checked by the parameter kind)."""
    import numpy as np

    if np.any(np.asarray(values["theta"]) > 1):
        raise ValueError(f"theta: must be <= 1 (theta = i/T), got {values['theta']}")


def _gaussian_domain(values: dict, dims: dict) -> None:
    index_domain(values, dims)


# -- erf(lo + w) - erf(lo) without cancellation ----------------------------------------------------
#: Gauss-Legendre points of the short integral (exact to ~1e-26 where it is used, see erf_interval).
_GL_POINTS = 16


@cache
def _gauss_legendre():
    import numpy as np

    return np.polynomial.legendre.leggauss(_GL_POINTS)


def _erf_interval_array(lo, hi, w, xp, erf, erfc):
    """:func:`erf_interval` on float64 arrays of the namespace ``xp`` (numpy or torch), with
    its ``erf`` and ``erfc``."""
    import math

    x, s = (xp.asarray(a, dtype=xp.float64) for a in _gauss_legendre())
    h = w / 2
    c = lo + h
    # erf(hi) - erf(lo) = erf(-lo) - erf(-hi): mirrored so that the midpoint is >= 0
    lo, hi, c = xp.where(c < 0, -hi, lo), xp.where(c < 0, -lo, hi), xp.abs(c)
    near = h * (2 * c + h) <= 2
    zero = xp.zeros_like(h)
    hn, cn = xp.where(near, h, zero), xp.where(near, c, zero)  # finite exponents in both branches
    t = hn[..., None] * x
    short = (2 / math.sqrt(math.pi)) * xp.exp(-cn**2) * hn * (s * xp.exp(-2 * cn[..., None] * t - t * t)).sum(-1)
    far = xp.where(lo >= 0, erfc(lo) - erfc(hi), erf(hi) - erf(lo))
    return xp.where(near, short, far)


def _erf_interval_numpy(lo, hi, w):
    import numpy as np
    from scipy.special import erf, erfc

    args = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (lo, hi, w)))
    with np.errstate(all="ignore"):
        return _erf_interval_array(*args, np, erf, erfc)


def _erf_interval_torch(lo, hi, w):
    import torch

    args = torch.broadcast_tensors(*(torch.as_tensor(a, dtype=torch.float64) for a in (lo, hi, w)))
    return _erf_interval_array(*args, torch, torch.special.erf, torch.special.erfc)


def _erf_interval_mpmath(lo, hi, w):
    import mpmath

    lo, hi, w = mpmath.mpf(lo), mpmath.mpf(hi), mpmath.mpf(w)
    if w == 0:
        return mpmath.mpf(0)
    if lo + hi < 0:
        lo, hi = -hi, -lo
    if lo < 0:  # lo < 0 < hi: two positive terms
        return mpmath.erf(hi) - mpmath.erf(lo)
    # 0 <= lo < hi = lo + w (a sum of positive numbers, exact with the bits that lo has above w),
    # with the bits that erfc(lo) - erfc(lo + w) cancels (relatively ~ w (2 lo + w + 1)) added
    extra = 20 + max(0, mpmath.mag(lo) - mpmath.mag(w)) + max(0, -mpmath.mag(w * (2 * lo + w + 1)))
    with mpmath.extraprec(extra):
        value = _erfc_difference_mpmath(lo, lo + w)
    return +value


def _erfc_difference_mpmath(lo, hi):
    """``erfc(lo) - erfc(hi)`` for ``0 <= lo < hi`` at the working precision (mpmath.erfc overflows
    internally beyond ~1e154: there ``erfc(x) = e^{-x^2}/(x sqrt(pi)) S(x)`` by its asymptotic series)."""
    import mpmath

    if mpmath.mag(hi) < 500:
        return mpmath.erfc(lo) - mpmath.erfc(hi)
    if mpmath.mag(lo) < 250:  # erfc(hi)/erfc(lo) < e^{-(hi^2 - lo^2)} < e^{-2^997}
        return mpmath.erfc(lo)

    def series(x):  # S(x) = sum_k (-1)^k (2k - 1)!! / (2 x^2)^k
        total, term, k = mpmath.mpf(1), mpmath.mpf(1), 0
        while abs(term) > mpmath.eps:
            k += 1
            term *= -(2 * k - 1) / (2 * x * x)
            total += term
        return total

    w = hi - lo
    log_ratio = -w * (lo + hi) - mpmath.log1p(w / lo) + mpmath.log(series(hi) / series(lo))
    return mpmath.exp(-lo * lo) / (lo * mpmath.sqrt(mpmath.pi)) * series(lo) * -mpmath.expm1(log_ratio)


def erf_interval(lo, hi, w):
    """``erf(hi) - erf(lo)`` with ``w = hi - lo >= 0`` (each of the three computed in its own
    cancellation-free form), in the backend of the arguments (numpy float64 arrays, mpmath
    numbers at the working precision, torch float64 tensors with autograd), to relative accuracy
    also where ``w`` is tiny against ``|lo|``: there the two erf values agree to many digits and
    their difference in floating point is noise (0, or of the wrong sign).

    Mirrored by oddness so that the midpoint ``c = lo + h`` (``h = w/2``) is ``>= 0``; where
    ``h (2c + h) <= 2``, ``(2/sqrt(pi)) e^{-c^2} h int_{-1}^{1} e^{-2chs - h^2 s^2} ds`` by
    16-point Gauss-Legendre (the exponent stays within [-2, 2]: exact to ~1e-26); elsewhere
    ``erfc(lo) - erfc(hi)`` when both are >= 0 (their ratio is then below e^{-8/3}) and
    ``erf(hi) - erf(lo)`` when they straddle 0 (two positive terms), with the given lo, hi
    (``lo + w`` would cancel where ``w ~ -lo >> hi``). mpmath subtracts ``erfc(lo) - erfc(lo + w)``
    with the bits that cancel added to the working precision.
    """
    args = (lo, hi, w)
    if any(type(a).__module__.startswith("torch") for a in args):
        return _erf_interval_torch(*args)
    if any(type(a).__module__.startswith("mpmath") for a in args):
        return _erf_interval_mpmath(*args)
    return _erf_interval_numpy(*args)


@cache
def _erf_difference_class():
    import sympy as sp

    class ErfDifference(sp.Function):
        """``erf(hi) - erf(lo)`` with ``width = hi - lo`` given in a cancellation-free form.

        Expands (``expand``: the ``basic`` hint) to ``erf(hi) - erf(lo)``, so it is proved equal to
        the erf form like any other rewrite; the numeric backends call :func:`erf_interval`
        (lambdify finds it as ``_imp_``)."""

        nargs = 3
        _imp_ = staticmethod(erf_interval)

        @classmethod
        def eval(cls, lo, hi, width):
            return None

        def _eval_expand_basic(self, **hints):
            lo, hi, _ = self.args
            return sp.erf(hi) - sp.erf(lo)

        def _eval_rewrite_as_erf(self, lo, hi, width, **kwargs):
            return sp.erf(hi) - sp.erf(lo)

        def _eval_evalf(self, prec):
            import mpmath

            args = [a.evalf(prec + 10) for a in self.args]
            if not all(a.is_Number for a in args):
                return None
            with mpmath.workprec(prec + 10):
                value = _erf_interval_mpmath(*(a._to_mpmath(prec + 10) for a in args))
            return sp.Float(value, precision=prec)

        def _code(self, printer):
            return f"{type(self).__name__}({', '.join(printer._print(a) for a in self.args)})"

        _pythoncode = _numpycode = _mpmathcode = _torchcode = _code

    # a module attribute (see __getattr__ below), so that pickle finds the class by name and the
    # derivation cache can store the expressions that use it
    ErfDifference.__module__, ErfDifference.__qualname__ = __name__, "ErfDifference"
    return ErfDifference


def __getattr__(name: str):
    """``ErfDifference``: the sympy function of :func:`_erf_difference_class`, made on first use
    (``import theory`` does not import sympy)."""
    if name == "ErfDifference":
        return _erf_difference_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def erf_difference(lo, hi):
    """``erf(hi) - erf(lo)`` as a sympy expression whose numeric functions do not cancel:
    the width ``hi - lo`` is simplified symbolically (e.g. ``1/sqrt(2 v)`` where ``hi`` and ``lo``
    are ``(1 - m)/sqrt(2 v)`` and ``-m/sqrt(2 v)``) and evaluated by :func:`erf_interval`."""
    import sympy as sp

    width = sp.factor(sp.cancel(hi - lo))
    return _erf_difference_class()(lo, hi, width)


# -- R2: the Gaussian interval probability ---------------------------------------------------
@cache
def _interval_probability_generic():
    import sympy as sp

    m = sp.Symbol("m_u", real=True)
    v = sp.Symbol("v_u", positive=True)
    u = sp.Symbol("u", real=True)
    pdf = sp.exp(-(u - m) ** 2 / (2 * v)) / sp.sqrt(2 * sp.pi * v)
    return sp.integrate(pdf, (u, 0, 1)), m, v


def interval_probability(mean, variance):
    """P(N(mean, variance) in [0, 1]) from the integral of the normal density (R2)."""
    expr, m, v = _interval_probability_generic()
    return expr.xreplace({m: mean, v: variance})


@cache
def _stable_interval_probability_generic():
    """The integral of :func:`_interval_probability_generic`, ``erf(A)/2 + erf(B)/2`` with
    ``A = m/sqrt(2v)`` and ``B = (1 - m)/sqrt(2v)``, as ``(erf(B) - erf(-A))/2`` by
    :func:`erf_difference` (width ``1/sqrt(2v)``): at small v (low temperature) A and -B are
    large and nearly equal, and the sum of the two erf values cancels to noise."""
    import sympy as sp

    expr, m, v = _interval_probability_generic()
    terms = sp.Add.make_args(expr)
    args = {t: [f.args[0] for f in t.atoms(sp.erf)] for t in terms}
    assert len(terms) == 2 and all(len(a) == 1 and sp.simplify(t - sp.erf(a[0]) / 2) == 0 for t, a in args.items())
    (A,), (B,) = sorted(args.values(), key=lambda a: a[0].subs(m, 0) != 0)  # A: the one that vanishes at m = 0
    return erf_difference(-A, B) / 2, m, v


def stable_interval_probability(mean, variance):
    """:func:`interval_probability` for numerics (the difference of the erf values without cancellation)."""
    expr, m, v = _stable_interval_probability_generic()
    return expr.xreplace({m: mean, v: variance})


@cache
def derive_gaussian():
    return interval_probability(derive_mean(), derive_variance())


def stable_gaussian():
    return stable_interval_probability(derive_mean(), derive_variance())


@cache
def continuum_moments():
    """lim_{T -> oo} (mu^i, v^i) at i = theta T, tr(W) = xi eta lambda, tr(W^2) = eta^2 lambda^2."""
    import sympy as sp

    i, T, lam = _sym("i"), _sym("T"), _sym("temperature")
    th, xi, eta = _sym("theta"), _sym("xi"), _sym("eta")
    sub = {i: th * T, _sym("trW"): xi * eta * lam, _sym("trW2"): eta**2 * lam**2}
    mu = sp.limit(derive_mean().xreplace(sub), T, sp.oo)
    v = sp.limit(derive_variance().xreplace(sub), T, sp.oo)
    return sp.simplify(mu), sp.factor(v)


@cache
def derive_continuum():
    mu, v = continuum_moments()
    return interval_probability(mu, v)


def stable_continuum():
    mu, v = continuum_moments()
    return stable_interval_probability(mu, v)


def _phi(z, D):
    """Eq. 6's Phi(z; theta) = 1/2 erf(z / sqrt(2 D(theta))) (not a CDF)."""
    import sympy as sp

    return sp.erf(z / sp.sqrt(2 * D)) / 2


def printed_continuum():
    """Eq. 6: Phi((theta - 1/2) xi; theta) - Phi((theta - 1/2) xi - 1/eta; theta), D = 2 theta^2 + 7/12."""
    import sympy as sp

    th, xi, eta = _sym("theta"), _sym("xi"), _sym("eta")
    D = 2 * th**2 + sp.Rational(7, 12)
    z = (th - sp.Rational(1, 2)) * xi
    return _phi(z, D) - _phi(z - 1 / eta, D)


def stable_printed_continuum():
    """:func:`printed_continuum` as :func:`erf_difference` (width ``1/(eta sqrt(2 D))``): at large
    eta the two Phi values are nearly equal."""
    import sympy as sp

    th, xi, eta = _sym("theta"), _sym("xi"), _sym("eta")
    D = 2 * th**2 + sp.Rational(7, 12)
    z = (th - sp.Rational(1, 2)) * xi
    return erf_difference((z - 1 / eta) / sp.sqrt(2 * D), z / sp.sqrt(2 * D)) / 2  # the arguments of _phi


# -- Lemma 2 ------------------------------------------------------------------------------------
def _erf_ray_limit(expr, x):
    """lim_{x -> oo} of a sum of erf(c x) terms (c free of x): erf(c x) -> sign(c).

    Each erf argument must be exactly linear in x (checked); the rule erf(c x) -> sign(c) is
    confirmed by ``sympy.limit`` for c > 0 and c < 0 (and erf(0) = 0 = sign(0)).
    """
    import sympy as sp

    cp, cn = sp.Symbol("c_pos", positive=True), sp.Symbol("c_neg", negative=True)
    assert sp.limit(sp.erf(cp * x), x, sp.oo) == 1 and sp.limit(sp.erf(cn * x), x, sp.oo) == -1

    def rep(e):
        c = sp.simplify(e.args[0] / x)
        if sp.simplify(c.diff(x)) != 0:
            raise ValueError(f"expr: erf argument {e.args[0]} is not linear in {x}")
        kept = [f for f in sp.Mul.make_args(sp.factor(c))
                 if not (f.is_positive or (f.is_Pow and f.exp.is_Rational and not f.exp.is_integer))]
        return sp.sign(sp.Mul(*kept))  # positive factors (and even roots) do not change the sign

    return sp.expand(expr.replace(lambda e: isinstance(e, sp.erf), rep))


@cache
def derive_late_site_limit():
    """rho_c along xi -> +oo with eta = r/xi (so xi eta = r > 0, eta -> 0)."""
    import sympy as sp

    x = sp.Symbol("x_ray", positive=True)
    e = derive_continuum().xreplace({_sym("xi"): x, _sym("eta"): _sym("r") / x})
    return _erf_ray_limit(e, x)


@cache
def derive_early_site_limit():
    """rho_c along xi -> -oo with eta = r/|xi| (so xi eta = -r < 0, eta -> 0)."""
    import sympy as sp

    x = sp.Symbol("x_ray", positive=True)
    e = derive_continuum().xreplace({_sym("xi"): -x, _sym("eta"): _sym("r") / x})
    return _erf_ray_limit(e, x)


def printed_late_site_limit():
    """Lemma 2.1: 1{theta >= 1/2} for r <= 2, 1{1/2 <= theta <= 1/2 + 1/r} for r > 2; on
    theta in (0, 1] both cases are 1{1/2 <= theta <= 1/2 + 1/r} (for r <= 2, 1/2 + 1/r >= 1)."""
    import sympy as sp

    th, r = _sym("theta"), _sym("r")
    half = sp.Rational(1, 2)
    return sp.Piecewise((1, (th >= half) & (th <= half + 1 / r)), (0, True))


def printed_early_site_limit():
    """Lemma 2.2 with xi eta -> -r: 1{theta <= 1/2} for r <= 2, 1{1/2 - 1/r <= theta <= 1/2} for r > 2."""
    import sympy as sp

    th, r = _sym("theta"), _sym("r")
    half = sp.Rational(1, 2)
    return sp.Piecewise((1, (th <= half) & (th >= half - 1 / r)), (0, True))


@cache
def derive_derivative_at_zero_xi():
    """d rho/d theta of eq. 6 as printed, at xi = 0."""
    import sympy as sp

    return sp.simplify(sp.diff(printed_continuum(), _sym("theta")).xreplace({_sym("xi"): 0}))


@cache
def derive_derivative_at_zero_xi_corrected():
    """d rho_c/d theta of the corrected continuum form, at xi = 0."""
    import sympy as sp

    return sp.simplify(sp.diff(derive_continuum(), _sym("theta")).xreplace({_sym("xi"): 0}))


# -- the proof of Lemma 2.3 (App. C) ------------------------------------------------------------------
def _D_printed():
    import sympy as sp

    return 2 * _sym("theta") ** 2 + sp.Rational(7, 12)


@cache
def derive_derivative():
    """d rho/d theta of eq. 6 as printed, at any (theta, xi, eta)."""
    import sympy as sp

    return sp.simplify(sp.diff(printed_continuum(), _sym("theta")))


def printed_derivative():
    """The proof of Lemma 2.3: rho'(theta) = [e^{-((theta - 1/2) xi)^2/(2D)} (4 theta^2 - theta + 5/3)/(2D)^{3/2}
    - e^{-((theta - 1/2) xi - 1/eta)^2/(2D)} (4 theta^2 - theta + 5/3 - 1/eta)/(2D)^{3/2}] xi / sqrt(pi)."""
    import sympy as sp

    th, xi, eta = _sym("theta"), _sym("xi"), _sym("eta")
    D = _D_printed()
    q = 4 * th**2 - th + sp.Rational(5, 3)
    z = (th - sp.Rational(1, 2)) * xi
    return (sp.exp(-z**2 / (2 * D)) * q - sp.exp(-(z - 1 / eta) ** 2 / (2 * D)) * (q - 1 / eta)) \
        * xi / (sp.sqrt(sp.pi) * (2 * D) ** sp.Rational(3, 2))


@cache
def derive_quotient_derivative():
    """d/d theta of (theta - 1/2)/sqrt(2 (2 theta^2 + 7/12))."""
    import sympy as sp

    th = _sym("theta")
    return sp.factor(sp.diff((th - sp.Rational(1, 2)) / sp.sqrt(2 * _D_printed()), th))


def printed_quotient_derivative():
    """The proof of Lemma 2.3: (4 theta^2 - theta + 5/3)/(2 (2 theta^2 + 7/12))^{3/2}."""
    import sympy as sp

    th = _sym("theta")
    return (4 * th**2 - th + sp.Rational(5, 3)) / (2 * _D_printed()) ** sp.Rational(3, 2)


# -- registry ------------------------------------------------------------------------------------
_D_C = ("D_c(theta) = 2 theta^2 - 2 theta + 7/12 = 2 (theta - 1/2)^2 + 1/12")

register(ClosedForm(
    id="localization.rho.gaussian",
    title="rho_i by the Gaussian approximation with the exact finite-T moments of u_i",
    source="Definition 1, Sec. 4 (R2) with Lemma 1 (exact moments [derived])",
    status="approximate",
    params=(I_KEY, T_GAUSS, TRW, TRW2, TEMP),
    derive=derive_gaussian,
    stable=stable_gaussian,
    domain=_gaussian_domain,
    doc="1/2 erf((1 - mu^i)/sqrt(2 v^i)) + 1/2 erf(mu^i/sqrt(2 v^i)) with mu^i, v^i from "
        "localization.u.mean / .variance. Approximate: u_i is a Gaussian bilinear form, not Gaussian; "
        "the approximation is a CLT over the eigen-directions of W and improves with d (Monte Carlo: max "
        "error 0.11 at d = 2, <= 0.022 at d = 128, T = 40).",
))

register(ClosedForm(
    id="localization.rho.continuum",
    title="Continuum rho(theta) of eq. 6 with the corrected variance",
    source="eq. 6 (corrected)",
    status="approximate",
    params=(THETA, XI, ETA),
    derive=derive_continuum,
    stable=stable_continuum,
    printed=printed_continuum,
    domain=theta_domain,
    doc="T -> infinity limit of localization.rho.gaussian at theta = i/T, xi = tr(W)/sqrt(tr(W^2)), "
        "eta = sqrt(tr(W^2))/lambda: 1/2 erf((theta - 1/2) xi/sqrt(2 D_c)) + 1/2 erf((1/eta - "
        f"(theta - 1/2) xi)/sqrt(2 D_c)), {_D_C}. Approximate (Gaussian approximation); at T ~ 40 "
        "the O(1/T) terms shift rho by ~0.1, so use localization.rho.gaussian there. Symmetric: "
        "rho(1 - theta; -xi, eta) = rho(theta; xi, eta).",
    erratum="Eq. 6 uses D(theta) = 2 theta^2 + 7/12 from Lemma 1's wrong variance (the (B2) slip: "
            "a dropped 2 T^2 i tr(W^2)); the correct factor is D_c(theta) = 2 theta^2 - 2 theta + 7/12. "
            "The printed rho misses Monte Carlo by up to 0.55 (spec, d = 128, T = 40) and is too flat "
            "around theta = 1/2, where the true variance is 13 times smaller.",
))

register(ClosedForm(
    id="localization.rho.continuum_printed",
    title="rho(theta) of eq. 6 exactly as printed (wrong variance factor)",
    source="eq. 6 (as printed)",
    status="heuristic",
    params=(THETA, XI, ETA),
    derive=printed_continuum,
    stable=stable_printed_continuum,
    printed=printed_continuum,
    domain=theta_domain,
    doc="Phi((theta - 1/2) xi; theta) - Phi((theta - 1/2) xi - 1/eta; theta), Phi(z; theta) = "
        "1/2 erf(z/sqrt(2 (2 theta^2 + 7/12))). Registered so that the paper's formula can be "
        "evaluated; it is WRONG: the factor 2 theta^2 + 7/12 comes from Lemma 1's erroneous variance "
        f"(use localization.rho.continuum, with {_D_C}).",
))

register(ClosedForm(
    id="localization.rho.late_site_limit",
    title="Lemma 2.1: limit of rho(theta) as xi -> +oo, eta -> 0, xi eta -> r > 0",
    source="Lemma 2.1",
    status="asymptotic",
    params=(THETA, R_LIM),
    derive=derive_late_site_limit,
    printed=printed_late_site_limit,
    example={"theta": 0.5, "r": 4.0},  # a boundary point: the limit is 1/2, the printed indicator 1
    domain=theta_domain,
    doc="1/2 sign(theta - 1/2) + 1/2 sign(1/2 + 1/r - theta): the indicator of [1/2, 1/2 + 1/r] "
        "with value 1/2 at its end points (and at theta = 1 when r = 2). The same limit holds for "
        "the printed eq. 6 (only D > 0 bounded matters). Reachable only with d -> infinity "
        "(|xi| <= sqrt(d)).",
    erratum="Lemma 2.1's indicators are 1 at the boundary points theta = 1/2 and theta = 1/2 + 1/r "
            "(and theta = 1 for r = 2); the limit there is 1/2 (the proof's own limits of Phi give 0 "
            "at the boundary). Convergence is pointwise off these points.",
))

register(ClosedForm(
    id="localization.rho.early_site_limit",
    title="Lemma 2.2: limit of rho(theta) as xi -> -oo, eta -> 0, xi eta -> -r < 0",
    source="Lemma 2.2",
    status="asymptotic",
    params=(THETA, R_LIM),
    derive=derive_early_site_limit,
    printed=printed_early_site_limit,
    example={"theta": 0.5, "r": 4.0},  # a boundary point: the limit is 1/2, the printed indicator 1
    domain=theta_domain,
    doc="The parameter r is |xi eta| (the paper's r is negative): 1/2 sign(1/2 - theta) + 1/2 "
        "sign(theta - 1/2 + 1/r), the indicator of [1/2 - 1/r, 1/2] with value 1/2 at its end "
        "points. Mirror image of Lemma 2.1 (rho(1 - theta; -xi, eta) = rho(theta; xi, eta)).",
    erratum="Lemma 2.2's indicators are 1 at the boundary points theta = 1/2 and theta = 1/2 + 1/r "
            "(paper's r < 0); the limit there is 1/2.",
))

register(ClosedForm(
    id="localization.rho.derivative_at_zero_xi",
    title="d rho/d theta of eq. 6 (as printed) at xi = 0: Lemma 2.3's counterexample",
    source="Lemma 2.3",
    status="heuristic",
    params=(THETA, ETA),
    derive=derive_derivative_at_zero_xi,
    printed=lambda: __import__("sympy").S.Zero,
    domain=theta_domain,
    doc="At xi = 0 the printed rho is 1/2 erf(1/(eta sqrt(2 D(theta)))), D = 2 theta^2 + 7/12, so "
        "rho' = -24 sqrt(6) theta exp(-6/(eta^2 (24 theta^2 + 7)))/(sqrt(pi) eta (24 theta^2 + 7)^(3/2)) "
        "!= 0 for theta > 0 and finite eta. Heuristic because eq. 6 is (see localization.rho.continuum).",
    erratum="Lemma 2.3 claims |rho'(theta)| -> 0 as |xi| -> 0 for fixed finite eta; false: at xi = 0 "
            "the derivative is non-zero (e.g. -0.223 at theta = 1/2, eta = 1). The proof pulls xi out "
            "of the whole bracket although the -1/eta term has a xi-free part, and differentiates "
            "(theta - 1/2)/sqrt(2 D) wrongly (prints (4 theta^2 - theta + 5/3)/(2D)^{3/2}; correct "
            "(2 theta + 7/6)/(4 theta^2 + 7/6)^{3/2}). Uniformity holds only as eta -> 0 or oo.",
))

register(ClosedForm(
    id="localization.rho.derivative_at_zero_xi_corrected",
    title="d rho_c/d theta of the corrected continuum form at xi = 0",
    source="Lemma 2.3 (corrected eq. 6 [derived])",
    status="approximate",
    params=(THETA, ETA),
    derive=derive_derivative_at_zero_xi_corrected,
    domain=theta_domain,
    doc=f"With {_D_C}: rho_c(theta) = 1/2 erf(1/(eta sqrt(2 D_c))) at xi = 0 has a central bump; "
        "its derivative vanishes only at theta = 1/2 (e.g. rho_c = 0.405 at theta -> 0 vs 0.499 at "
        "theta = 1/2 for eta = 1), so Lemma 2.3 fails for the corrected form too.",
))

register(ClosedForm(
    id="localization.rho.derivative",
    title="rho'(theta) of eq. 6 (as printed) at any (theta, xi, eta): the first step of Lemma 2.3's proof",
    source="App. C (proof of Lemma 2.3)",
    status="heuristic",
    params=(THETA, XI, ETA),
    derive=derive_derivative,
    printed=printed_derivative,
    example={"theta": 0.5, "xi": 0.0, "eta": 1.0},
    domain=theta_domain,
    doc="The derivative of localization.rho.continuum_printed in theta (the proof works with the paper's "
        "D = 2 theta^2 + 7/12). Heuristic because eq. 6 is (see localization.rho.continuum).",
    erratum="The proof's rho'(theta) pulls xi out of the whole bracket, although the argument (theta - 1/2) xi "
            "- 1/eta of the second erf has the xi-free part -1/eta, whose theta-derivative "
            "(1/eta) (4 theta)/(2D)^{3/2} does not vanish at xi = 0; and it differentiates (theta - 1/2)/sqrt(2D) "
            "as (4 theta^2 - theta + 5/3)/(2D)^{3/2} (localization.rho.proof_quotient_derivative). Its bound "
            "|rho'| <= |xi|/(sqrt(pi) (2D)^{3/2} eta), the whole of Lemma 2.3's proof, then fails: at xi = 0 it "
            "is 0 while rho' = -0.223 at theta = 1/2, eta = 1.",
))

register(ClosedForm(
    id="localization.rho.proof_quotient_derivative",
    title="d/dtheta of (theta - 1/2)/sqrt(2 (2 theta^2 + 7/12)) in Lemma 2.3's proof",
    source="App. C (proof of Lemma 2.3)",
    status="exact",
    params=(THETA,),
    derive=derive_quotient_derivative,
    printed=printed_quotient_derivative,
    example={"theta": 1.0},
    domain=theta_domain,
    doc="(2 theta + 7/6)/(4 theta^2 + 7/6)^{3/2} = sqrt(6) (12 theta + 7)/(24 theta^2 + 7)^{3/2}.",
    erratum="The proof prints (4 theta^2 - theta + 5/3)/(2 (2 theta^2 + 7/12))^{3/2}; the quotient rule gives "
            "(2 theta + 7/6)/(4 theta^2 + 7/6)^{3/2} (e.g. 0.270 vs the printed 0.397 at theta = 1; the two agree "
            "only at theta = 1/4 and 1/2).",
))
