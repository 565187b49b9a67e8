"""Uniform class sampling in the decoder of Scan and Snap (Tian, Wang, Chen, Du 2023, App. D.4,
Lemmas 10-12, Remark 4, Corollary 1).

After ``N`` batch-1 steps with uniformly sampled next tokens, class ``n`` has been seen ``N_n`` times
(``E N_n = N/K``), and by Lemma 3 its decoder row is that of ``N_n`` single-class steps,
``w_n = (M - 1) h(N_n) zeta_n`` (Lemma 5, eq. 66). Lemma 12 writes it as ``(1 + theta_n)`` times the row
at the mean count ``N-bar = ceil(N/K)``, and Corollary 1 writes the residual ``e_n - alpha_n`` as
``(1 + sigma)`` times its value at ``N-bar``. Derived here (sympy):

* Lemma 10 (eqs. 58-59): Hoeffding's ``P(|N_n/N - 1/K| > t) <= 2 exp(-2 N t^2)`` solved for the
  radius at probability ``delta``, plus 1 for the ceiling: ``sqrt(N ln(2/delta)/2) + 1``.
* Lemma 12 (with eq. 63): ``h`` is concave and ``h(0) = 0``, so ``|h(N_n) - h(N-bar)| <= h(N-bar) r/(N-bar - r)``
  whenever ``|N_n - N-bar| <= r``; with Lemma 10's radius at ``delta/K`` (a union over the K classes)
  and ``N-bar >= N/K``, every ``|theta_n| <= r/(N/K - r)`` with probability at least ``1 - delta``. Its
  leading order ``K sqrt(ln(2K/delta)/(2N))`` is the paper's ``K sqrt(ln(K/delta)/N)`` up to the constant.
* Eq. 64: with ``x = e^{M h}``, ``|d ln g/ds| = M eta_Y x/(M - 1 + x)^2`` for ``g = 1/(M - 1 + x)``, largest
  at ``x = M - 1``: ``M eta_Y/(4 (M - 1))``.
* Corollary 1: eq. 45 gives ``x(a) - x(b) = M eta_Y (a - b) - (M - 1) M (h(a) - h(b))``, so
  ``|x(a) - x(b)| <= M eta_Y |a - b|`` and, with ``x >= 1``, ``|sigma| <= eta_Y |N_n - N-bar|``; once both
  counts are past the per-class crossing ``t_B`` (``Delta_2 >= 1``, eq. 53: ``x >= (M eta_Y t + 1)/2``)
  ``|sigma| <= 2 Delta/(N-bar - Delta)``, of order ``K sqrt(ln(1/delta)/N)``.

Contains
--------
``scan_snap.sampling.count_radius``, ``.theta_bound``, ``.log_slope_max``, ``.sigma_bound``,
``.sigma_snapping``.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ..params import index, positive
from ..registry import ClosedForm, register
from . import sym
from .h import ETA_Y, M_P

N_STEPS = index("N", "Total number of batch-1 decoder steps N (classes drawn uniformly).", low=1,
                sample=(10, 10**6), example=10000)
K_CL = index("K", "Number of classes K >= 1 (uniformly sampled next tokens).", low=1, sample=(1, 20), example=4)
DELTA = positive("delta", "Failure probability delta in (0, 1).", sample=(1e-4, 0.9, "log"), example=0.05)
DELTA_C = positive("Delta", "Count deviation |N_n - N-bar| (a radius, e.g. Lemma 10's).", sample=(1.0, 100.0),
                   example=30.0)
NBAR = positive("Nbar", "Mean per-class count N-bar = ceil(N/K) (> Delta).", sample=(101.0, 10**5), example=2500.0)

__all__ = ["derive_count_radius", "derive_theta_bound"]


@cache
def derive_count_radius():
    """Solve 2 exp(-2 N t^2) = delta (eq. 59) for t > 0; the count radius is N t, plus 1 for
    |ceil(N P(n)) - N P(n)| < 1 (eq. 58)."""
    import sympy as sp

    N, d = sym("N"), sym("delta")
    t = sp.Symbol("t_h", positive=True)
    (root,) = sp.solve(sp.Eq(2 * sp.exp(-2 * N * t**2), d), t)
    return sp.simplify(N * root) + 1


@cache
def derive_theta_bound():
    """r/(N/K - r) with r the Lemma-10 radius at delta/K (a union bound over the K classes); eq. 63's
    concavity bound |h(N_n)/h(N-bar) - 1| <= r/(N-bar - r), N-bar >= N/K."""
    N, K, d = sym("N"), sym("K"), sym("delta")
    r = derive_count_radius().subs(d, d / K)
    return r / (N / K - r)


@cache
def derive_log_slope_max():
    """max over x = e^{M h} > 0 of |d ln g/ds| = M eta_Y x/(M - 1 + x)^2 (eq. 64 with dh/ds of eq. 44)."""
    import sympy as sp

    M, eta = sym("M"), sym("eta_Y")
    x, h = sp.Symbol("x", positive=True), sp.Symbol("h_s", positive=True)
    g = 1 / (M - 1 + sp.exp(M * h))
    dh = eta / (M - 1 + sp.exp(M * h))                        # eq. 44
    slope = sp.simplify(-(sp.log(g).diff(h) * dh)).subs(sp.exp(M * h), x)
    slope = sp.simplify(slope)
    crit = sp.solve(sp.Eq(slope.diff(x), 0), x)
    assert crit == [M - 1], crit
    m = sp.Symbol("m", positive=True)                         # M = m + 1 >= 2: a maximum
    assert sp.factor(sp.simplify(slope.diff(x, 2).subs(x, M - 1).subs(M, m + 1))).is_negative
    return sp.simplify(slope.subs(x, M - 1))


@cache
def derive_sigma_bound():
    """|sigma| = |x(a) - x(b)|/(M - 1 + x(b)) <= M eta_Y Delta/M (eq. 45, x >= 1)."""
    M, eta, D = sym("M"), sym("eta_Y"), sym("Delta")
    return M * eta * D / (M - 1 + 1)


@cache
def derive_sigma_snapping():
    """|sigma| <= M eta_Y Delta/(M - 1 + x(N-bar - Delta)) with x >= (M eta_Y (N-bar - Delta) + 1)/2 in stage 2
    (eq. 53 at Delta_2 >= 1), which is at most 2 Delta/(N-bar - Delta) (checked here)."""
    import sympy as sp

    M, eta, D, Nb = sym("M"), sym("eta_Y"), sym("Delta"), sym("Nbar")
    n = sp.Symbol("n_lo", positive=True)                     # N-bar - Delta
    exact = M * eta * D / (M - 1 + (M * eta * n + 1) / 2)
    bound = 2 * D / n
    m = sp.Symbol("m", positive=True)                        # M = m + 1 >= 2
    assert sp.factor(sp.simplify((bound - exact).subs(M, m + 1))).is_positive
    return bound.subs(n, Nb - D)


def _delta_domain(values, dims):
    if np.any(np.asarray(values["delta"]) >= 1):
        raise ValueError(f"delta: a failure probability must be < 1, got {values['delta']!r}")


def _theta_domain(values, dims):
    _delta_domain(values, dims)
    N, K, d = (np.asarray(values[k], dtype=float) for k in ("N", "K", "delta"))
    r = np.sqrt(N * np.log(2 * K / d) / 2) + 1
    if np.any(N / K <= r):
        raise ValueError("N: the bound needs N/K above the count radius sqrt(N ln(2K/delta)/2) + 1 (N >> K^2)")


def _nbar_domain(values, dims):
    if np.any(np.asarray(values["Nbar"]) <= np.asarray(values["Delta"])):
        raise ValueError("Nbar: the mean count must exceed the deviation Delta")


register(ClosedForm(
    id="scan_snap.sampling.count_radius",
    title="Lemma 10: |N_n - ceil(N P(n))| <= sqrt(N ln(2/delta)/2) + 1 with probability >= 1 - delta",
    source="Lemma 10, eqs. 58-59",
    status="exact",
    params=(N_STEPS, DELTA),
    derive=derive_count_radius,
    printed=lambda: __import__("sympy").sqrt(sym("N") / 2 * __import__("sympy").log(2 / sym("delta"))) + 1,
    domain=_delta_domain,
    doc="Hoeffding for the count N_n of one class among N i.i.d. draws (any P(n)). The paper's second step, "
        "'< sqrt(N ln(2/delta))', holds only when N ln(2/delta) > (2 + sqrt 2)^2 = 11.66 (e.g. it fails at N = 5, "
        "delta = 0.5). Remark 4 (eq. 60) uses Delta = ceil(sqrt(N ln(1/delta))) instead, which covers with "
        "probability >= 1 - 2 delta^2 >= 1 - delta for delta <= 1/2.",
))

register(ClosedForm(
    id="scan_snap.sampling.theta_bound",
    title="Lemma 12: max_n |theta_n| <= r/(N/K - r), r = sqrt(N ln(2K/delta)/2) + 1, w.p. >= 1 - delta",
    source="Lemma 12, eqs. 63, 66-69 (with Lemma 10)",
    status="exact",
    params=(N_STEPS, K_CL, DELTA),
    derive=derive_theta_bound,
    domain=_theta_domain,
    example={"N": 10000, "K": 4, "delta": 0.05},
    doc="theta_n = h(N_n)/h(N-bar) - 1 (w_n(N) = (1 + theta_n) (M - 1) h(N-bar) zeta_n, eq. 68). Explicit constants "
        "for the paper's |theta_i| <~ K sqrt(ln(K/delta)/N): leading order K sqrt(ln(2K/delta)/(2N)). Any M, eta_Y "
        "(only the concavity of h and h(0) = 0 enter); with the discrete h* of eq. 33 the same holds (its increments "
        "decrease too).",
))

register(ClosedForm(
    id="scan_snap.sampling.log_slope_max",
    title="Eq. 64: |d ln g/ds| <= M eta_Y/(4 (M - 1)), g(s) = 1/((M - 1) + e^{M h(s)})",
    source="Lemma 11, eq. 64",
    status="exact",
    params=(M_P, ETA_Y),
    derive=derive_log_slope_max,
    printed=lambda: sym("M") / (sym("M") - 1) * sym("eta_Y") / 4,
    doc="Attained where e^{M h} = M - 1 (h = ln(M - 1)/M), as the paper says. g decreases, so eq. 64's 'dg/ds <= "
        "...' is meant for |dg/ds|. Integrating it (Gronwall) gives |g(s + Delta)/g(s) - 1| <= e^{c Delta} - 1 with "
        "c this value; eq. 65's eta_Y Delta/3 is its first-order form (M/(M - 1) <= 4/3).",
))

register(ClosedForm(
    id="scan_snap.sampling.sigma_bound",
    title="Corollary 1: |sigma| <= eta_Y Delta for |N_n - N-bar| <= Delta (any stage)",
    source="Corollary 1, eq. 71; Lemma 11, eq. 62",
    status="exact",
    params=(ETA_Y, DELTA_C),
    derive=derive_sigma_bound,
    doc="1 + sigma = g(N_n)/g(N-bar), g = 1/((M - 1) + e^{M h}); from eq. 45 the change of e^{M h} over Delta steps "
        "is at most M eta_Y Delta and (M - 1) + e^{M h} >= M. With Remark 4's Delta = ceil(sqrt(N ln(1/delta))) this "
        "is the paper's |sigma| <~ eta_Y sqrt(N ln(1/delta)), with constant 1.",
))

register(ClosedForm(
    id="scan_snap.sampling.sigma_snapping",
    title="Corollary 1, late stage: |sigma| <= 2 Delta/(N-bar - Delta) once N-bar - Delta >= t_B",
    source="Corollary 1; Lemma 11 (stage 2), eq. 53",
    status="exact",
    params=(DELTA_C, NBAR),
    derive=derive_sigma_snapping,
    domain=_nbar_domain,
    doc="Valid when both counts are past the per-class crossing t_B (scan_snap.speed.crossing_time with K = 1), where "
        "e^{M h} >= (M eta_Y t + 1)/2 (eq. 53 with Delta_2 >= 1). With Delta the Lemma-10 radius this is of order "
        "K sqrt(ln(1/delta)/N), the paper's second sigma bound (its condition N >> K(sqrt(N ln(1/delta)) + 2(1 + "
        "omega_1) ln M/eta_Y) is N-bar - Delta past t_0 per class).",
))
