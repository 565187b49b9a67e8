"""Exact-flow statistics of separate key/query linear attention ATTN_S (Zhang, Singh, Latham,
Saxe 2025, §4-5, App. E-F): the saddle levels (eq. 19), the escape time of a value weight from
the implicit solution (eqs. 70-71), long and brief plateaus, and one rank-R run of the exact
flow (eq. 83) with the plateau pattern of §5 / App. F.4.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

import theory
from verify.flows import separate as fs
from verify.stats import evaluate as _cf
from verify.tasks.in_context_regression import random_covariance

__all__ = ["SPECTRUM", "N_FIG", "TAU", "RTOL", "LONG_FRACTION", "GROWN_V", "saddle_levels", "figure_setup",
           "midpoint_value_fraction", "escape_correction", "long_plateaus", "literal_divides_pattern",
           "aligned_drop_times", "gaussian_first_drop", "rank_run", "log_thin", "scale_comparison",
           "rank_control_expectations", "staircase_figure", "FIG_POINTS", "thinned_series", "scalar_drop_times",
           "scalar_ode_rhs", "staircase_figures"]

#: Fig.-1 / Fig.-3 spectrum and context length.
SPECTRUM = (0.4, 0.3, 0.2, 0.1)
N_FIG = 31
#: Time unit ``tau`` of the flow (eq. 14) and the relative tolerance of ``solve_ivp`` (LSODA; stiff
#: after a head converges).
TAU = 1.0
RTOL = 1e-10

#: a plateau is long when the loss stays near its level for at least this fraction of the
#: escape scale tau / (lambda_{m+1}^2 w_init) (see :func:`long_plateaus`).
LONG_FRACTION = 0.1

#: value weight above which a head counts as grown (v* = O(1); unlearned heads are O(w_init)).
GROWN_V = 0.1


def saddle_levels(Lam, N, D) -> np.ndarray:
    """The plateau levels ``L(M_m)``, m = 0..D, of eq. 19 (Zhang, Singh, Latham, Saxe 2025)."""
    return np.array([float(_cf("linear_attention.separate.saddle_loss", Lambda=Lam, N=N, m=m))
                     for m in range(D + 1)])


def figure_setup(rng, N=N_FIG):
    """The Fig.-1 task: ``Lambda`` with :data:`SPECTRUM` and random eigenvectors, its moments
    (:func:`verify.flows.separate.moments`), eigenvalues ``lam``, eigenbasis ``E`` and the
    eigenvalues ``a`` of ``E[Lambda_hat^2]`` (eq. 31)."""
    Lam = random_covariance(rng, SPECTRUM)
    mo = fs.moments(Lam, N)
    lam, E = fs.eigenbasis(mo)
    a = np.array([float(_cf("linear_attention.data.lambda_hat_sq_eigenvalue", lam=x,
                            trLambda=float(np.sum(lam)), N=N)) for x in lam])
    return Lam, mo, lam, E, a


def midpoint_value_fraction() -> float:
    """``v / v*`` at which the ansatz loss has made half of its drop.

    Along eq. 21 the loss is ``L_m - (lambda^3/a)(2u - u^2)`` with ``u = (v/v*)^3``; half the
    drop ``lambda^3 / (2a)`` is reached at ``u = 1 - 2^{-1/2}``.
    """
    return float((1.0 - 2.0 ** -0.5) ** (1.0 / 3.0))


def escape_correction(lam: float, a: float, v0: float, tau: float = 1.0) -> float:
    """``t_mid lambda^2 v0 / tau`` from the implicit solution eq. 70, ``t_mid`` the time at
    which the ansatz loss is half-way down (``v = v* midpoint_value_fraction()``).

    Equals ``1 - K v0 / v* + O((v0/v*)^2)`` with ``K = v* |F(v_mid) - F_reg(0)|`` ~ 1.2534;
    this is the ratio (drop time)/(eq. 71) on the aligned manifold.
    """
    if not (np.isfinite(lam) and lam > 0):
        raise ValueError(f"lam: expected a positive eigenvalue, got {lam!r}")
    if not (np.isfinite(a) and a > 0):
        raise ValueError(f"a: expected a positive a_d, got {a!r}")
    v_star = (lam / a) ** (1.0 / 3.0)
    if not (np.isfinite(v0) and 0 < v0 < midpoint_value_fraction() * v_star):
        raise ValueError(f"v0: expected 0 < v0 < v_mid = {midpoint_value_fraction() * v_star}, got {v0!r}")
    t = float(_cf("linear_attention.separate.scalar_ode_time", v=midpoint_value_fraction() * v_star,
                  v0=v0, lam=lam, a=a, tau=tau))
    return t * lam**2 * v0 / tau


def long_plateaus(time_near, lam, w_init: float, tau: float = 1.0,
                  fraction: float = LONG_FRACTION) -> np.ndarray:
    """Which of the plateaus ``m = 0..D-1`` are long.

    A plateau at ``L(M_m)`` is long when the time spent near it is at least ``fraction`` of
    the escape scale ``tau / (lambda_{m+1}^2 w_init)`` of eq. 71 (the time a value weight
    needs to grow from ``O(w_init)``). Learning a new key/query pair inside a head whose
    ``v`` is already ``O(1)`` is exponential at rate ``~ lambda^2 v*`` and takes
    ``~ tau ln(v*/w_init) / (lambda^2 v*)``, a fraction ``~ w_init ln(v*/w_init) / v*`` of
    that scale (5e-3 at w_init = 1e-3).

    Parameters
    ----------
    time_near : array_like (D + 1,)
        :attr:`verify.flows.separate.Plateaus.time_near`.
    lam : array_like (D,)
        Eigenvalues, descending.
    w_init : float
    tau : float
    fraction : float
    """
    tn = np.asarray(time_near, dtype=np.float64)
    lam = np.asarray(lam, dtype=np.float64)
    if lam.ndim != 1 or lam.size == 0 or np.any(~np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError(f"lam: expected positive eigenvalues, got {lam!r}")
    if tn.shape != (lam.size + 1,):
        raise ValueError(f"time_near: expected shape ({lam.size + 1},), got {tn.shape}")
    for name, x in (("w_init", w_init), ("tau", tau), ("fraction", fraction)):
        if not (np.isfinite(x) and x > 0):
            raise ValueError(f"{name}: expected a positive number, got {x!r}")
    return tn[:-1] >= fraction * tau / (lam**2 * w_init)


def aligned_drop_times(mo, Lam, N: int, lam, levels, w: float, n_t: int):
    """Drop times (midpoint crossings of the eq.-19 levels) of the exact flow from the aligned
    balanced start ``k = q = v e_d``, ``v(0) = w`` (``H = D``, rank one) up to ``1.5 tau /
    (lambda_D^2 w)``, and eq. 71's escape times at ``w``."""
    D = lam.size
    va, ka, qa = fs.init_aligned_separate(mo, D, 1, w)
    T = 1.5 * TAU / (lam[-1] ** 2 * w)
    t = np.concatenate([[0.0], np.geomspace(1.0, T, n_t)])
    r = fs.integrate(mo, None, va, ka, qa, tau=TAU, t_eval=t, rtol=RTOL, method="LSODA", dense=True)
    drops = fs.plateaus(r.t, r.loss, levels, func=r.loss_at).drop_times
    esc = np.array([float(_cf("linear_attention.separate.escape_time", Lambda=Lam, N=N, m=m,
                              tau=TAU, w_init=w)) for m in range(1, D + 1)])
    return drops, esc


def gaussian_first_drop(mo, Lam, N: int, lam, levels, rng, wg: float) -> dict:
    """The first drop of the exact flow from an eq.-36 Gaussian start (``H = D``, rank one, scale
    ``wg``) against eq. 71: an O(1) random factor of the draw, reported."""
    D = lam.size
    v0, k0, q0 = fs.init_separate(rng, D, 1, D, wg)
    T = 30.0 * TAU / (lam[0] ** 2 * wg)
    t = np.concatenate([[0.0], np.geomspace(1e-2, T, 1500)])
    mid = 0.5 * (levels[0] + levels[1])
    # only the first drop is read: the solve stops 5 % into the second (t_1 is the same; the log-spaced output
    # times are too sparse to fall inside the first drop's lower half, and the later drops are most of the cost)
    kw = dict(tau=TAU, t_eval=t, rtol=RTOL, method="LSODA", dense=True)
    r = (fs.integrate_past(mo, None, v0, k0, q0, level=mid, stop_loss=levels[1] - 0.05 * (levels[1] - levels[2]), **kw)
         if len(levels) > 2 else fs.integrate(mo, None, v0, k0, q0, **kw))
    t1 = fs.first_crossing(r.t, r.loss, mid, func=r.loss_at)
    esc1 = float(_cf("linear_attention.separate.escape_time", Lambda=Lam, N=N, m=1, tau=TAU, w_init=wg))
    return {"t_1": t1, "t_1 / escape_time(w_init)": t1 / esc1,
            "t_1 lambda_1^2 max|v_i(0)| / tau": t1 * lam[0] ** 2 * float(np.max(np.abs(v0))) / TAU}


def literal_divides_pattern(D: int, R: int) -> np.ndarray:
    """The paper's literal wording of §5 ("m that divides R"): long plateau at m = 0..D-1
    when m >= 1 divides R. The wrong way round; used as a negative control."""
    D, R = int(D), int(R)
    if D < 1 or R < 1:
        raise ValueError(f"D: expected D >= 1 and R >= 1, got D = {D}, R = {R}")
    return np.array([m >= 1 and R % m == 0 for m in range(D)])


def rank_run(mo, Lam, N: int, lam, levels, R: int, rng, w_init: float, n_t: int = 3000,
             tau: float = TAU, unit=None) -> dict:
    """One eq.-36 draw of rank-R ATTN_S through the exact flow, with ``H = ceil(D/R)`` heads (the fewest that
    reach M_D), or as many as ``unit`` holds.

    Returns the plateau statistics, the long-plateau pattern (:func:`long_plateaus`), the
    number of grown value weights (``|v| > GROWN_V``) at ``t = 0`` and at each drop, and the
    loss and ``M`` at the flattest point of each conspicuous plateau ``m = jR`` compared with
    ``linear_attention.separate.conspicuous_plateau_loss`` and
    ``linear_attention.separate.rank_fixed_point_matrix`` (and with ``M_{jR+1}``, a control).
    ``pattern_ok``: long exactly at the multiples of R, exactly where a new value weight grows,
    and ``ceil(m/R)`` grown heads at ``t_m``.

    ``unit``: the draw at ``w_init = 1`` ``(v, k, q)`` to scale (the same draw at several
    ``w_init``); default a fresh :func:`verify.flows.separate.init_separate` draw from ``rng``.
    """
    lam = np.asarray(lam, dtype=np.float64)
    D = lam.size
    H = -(-D // R)
    if unit is None:
        unit = fs.init_separate(rng, H, R, D, 1.0)
    v0, k0, q0 = (w_init * np.asarray(x) for x in unit)
    T = 20.0 * tau / (lam[-1] ** 2 * w_init)
    t = np.concatenate([[0.0], np.geomspace(1e-2, T, n_t)])
    res = fs.integrate(mo, None, v0, k0, q0, tau=tau, t_eval=t, rtol=RTOL, method="LSODA", dense=True)
    p = fs.plateaus(res.t, res.loss, levels, func=res.loss_at)
    ok_drops = bool(np.all(np.isfinite(p.drop_times)))
    long = long_plateaus(p.time_near, lam, w_init, tau)
    scale = p.time_near[:-1] * lam**2 * w_init / tau
    multiple = np.arange(D) % R == 0
    times = np.r_[0.0, p.drop_times] if ok_drops else np.zeros(1)
    grown = [int(np.sum(np.abs(res.at(s)[0]) > GROWN_V)) for s in times]
    new_head = np.diff(grown) > 0 if ok_drops else np.zeros(D, bool)
    expect_grown = [int(np.ceil(m / R)) for m in range(D + 1)]
    pattern_ok = (ok_drops and bool(np.all(long == multiple)) and bool(np.all(long == new_head))
                  and grown == expect_grown)
    # conspicuous plateaus j = 0..ceil(D/R)-1 at their flattest point, and the end (m = D)
    M_D = np.asarray(_cf("linear_attention.separate.rank_fixed_point_matrix", Lambda=Lam, N=N,
                         S=list(range(1, D + 1)), R=R))
    scale_M = float(np.linalg.norm(M_D))
    lvl_err, M_err, M_ctrl = [], [], []
    for j in range(H + 1):
        m = min(j * R, D)
        idx = p.flattest[m]
        if idx < 0:
            lvl_err.append(np.inf)
            M_err.append(np.inf)
            continue
        if j < H:
            L_pred = float(_cf("linear_attention.separate.conspicuous_plateau_loss", Lambda=Lam, N=N,
                               R=R, j=j))
        else:
            L_pred = float(levels[-1])
        lvl_err.append(abs(float(res.loss[idx]) - L_pred) / L_pred)
        M_pred = np.asarray(_cf("linear_attention.separate.rank_fixed_point_matrix", Lambda=Lam, N=N,
                                S=list(range(1, m + 1)), R=R))
        M_err.append(float(np.linalg.norm(res.M[idx] - M_pred)) / scale_M)
        if m < D:
            M_next = np.asarray(_cf("linear_attention.separate.rank_fixed_point_matrix", Lambda=Lam,
                                    N=N, S=list(range(1, m + 2)), R=R))
            M_ctrl.append(float(np.linalg.norm(res.M[idx] - M_next)) / scale_M)
    return {"H": H, "heads": int(np.shape(unit[0])[0]), "R": R, "w_init": w_init, "time_near": p.time_near.tolist(),
            "time_near / (tau/(lambda_{m+1}^2 w))": scale.tolist(),
            "long": long.tolist(), "n_long": int(long.sum()), "multiple_of_R": multiple.tolist(),
            "grown heads at t=0, t_1..t_D": grown, "expected ceil(m/R)": expect_grown,
            "new value weight grows in drop m+1": new_head.tolist(),
            "drop_times": p.drop_times.tolist(),
            "max short-plateau fraction": float(np.max(scale[~multiple], initial=0.0)),
            "conspicuous level rel err (j = 0..H-1, end)": lvl_err,
            "M rel err vs rank_fixed_point_matrix (j = 0..H-1, end)": M_err,
            "control: M rel err vs M_{jR+1}": M_ctrl,
            "literal 'm divides R' mismatches": int(np.sum(literal_divides_pattern(D, R) != long)),
            "pattern_ok": bool(pattern_ok),
            "_curve": log_thin(res.t, res.loss)}


def log_thin(t, y, n: int = 400):
    """About ``n`` samples of the curve, evenly spaced in log t (for a figure)."""
    t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    pos = t > 0
    t, y = t[pos], y[pos]
    grid = np.geomspace(t[0], t[-1], n)
    idx = np.unique(np.clip(np.searchsorted(t, grid), 0, t.size - 1))
    return t[idx].tolist(), y[idx].tolist()


def scale_comparison(r1: dict, r2: dict, R: int) -> dict:
    """One draw of rank ``R`` at two scales ``w_1 > w_2`` (:func:`rank_run`): ``f_m`` (the time
    near ``L(M_m)`` over ``tau / (lambda_{m+1}^2 w)``) at each, their ratio, and the counts of
    violations of §5's pattern: conspicuous plateaus (m a multiple of R) whose ratio is outside
    [0.8, 1.25] or whose ``f_1 = 0``, brief ones that do not shrink to a third, and drops with
    other than ``ceil(m/R)`` grown heads; with the counts the rank-one pattern would give."""
    f1 = np.array(r1["time_near / (tau/(lambda_{m+1}^2 w))"])
    f2 = np.array(r2["time_near / (tau/(lambda_{m+1}^2 w))"])
    D = f1.size
    mult = np.arange(D) % R == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(f1 > 0, f2 / np.where(f1 > 0, f1, 1.0), np.where(f2 > 0, np.inf, 0.0))
    scale_invariant = (f1 > 0) & (ratio >= 0.8) & (ratio <= 1.25)
    grown = np.array(r2["grown heads at t=0, t_1..t_D"])
    return {"f1": f1, "f2": f2, "ratio": ratio,
            "conspicuous off": int(np.sum(mult & ~scale_invariant)),
            "brief not shrinking": int(np.sum(~mult & (f2 > f1 / 3.0))),
            "head counts off": int(np.sum(grown != np.array(r2["expected ceil(m/R)"]))),
            # the rank-one pattern calls every plateau conspicuous (scale invariant)
            "rank-one pattern fails": int(np.sum(~mult & ~scale_invariant)),
            "rank-one head counts off": int(np.sum(grown != np.arange(D + 1)))}


def rank_control_expectations(Lam, N: int, D: int, ranks) -> tuple[int, int, int, float]:
    """The control statistics of the rank-R pattern at the theory's point: brief plateaus the
    rank-one pattern misreads, head counts it gets wrong, plateaus where the literal "m divides
    R" differs from the multiples of R (each the smallest over ``ranks``), and the smallest
    relative distance ``||M_{jR} - M_{jR+1}|| / ||M_D||`` of the rank fixed points (eqs. 84-87)."""
    mult_of = {R: np.arange(D) % R == 0 for R in ranks}
    e_r1 = min(int(np.sum(~mult_of[R])) for R in ranks if R > 1)
    e_heads = min(int(np.sum(np.array([int(np.ceil(m / R)) for m in range(D + 1)]) != np.arange(D + 1)))
                  for R in ranks if R > 1)
    e_literal = min(int(np.sum(literal_divides_pattern(D, R) != mult_of[R])) for R in ranks)

    def _rfp(S, R):
        return np.asarray(_cf("linear_attention.separate.rank_fixed_point_matrix", Lambda=Lam, N=N, S=S, R=R))
    e_next = min(float(np.linalg.norm(_rfp(list(range(1, j * R + 1)), R) - _rfp(list(range(1, j * R + 2)), R)))
                 / float(np.linalg.norm(_rfp(list(range(1, D + 1)), R)))
                 for R in ranks for j in range(-(-D // R)) if j * R < D)
    return e_r1, e_heads, e_literal, e_next


def staircase_figure(curves: dict, levels, D: int, w_init: float, heads: dict | None = None) -> dict:
    """Loss curves of the exact flow by rank (from half the first drop time on: the loss is
    flat at ``L(M_0)`` before) with every saddle level ``L(M_m)`` of eq. 19 dotted; ``heads``: R -> the
    number of heads (default ``ceil(D/R)``)."""
    heads = heads or {}
    mid = 0.5 * (levels[0] + levels[1])
    t0 = 0.5 * min(next(t for t, y in zip(*c) if y < mid) for c in curves.values())
    curves = {R: tuple(zip(*[(t, y) for t, y in zip(*c) if t >= t0])) for R, c in curves.items()}
    t_all = [x for c in curves.values() for x in c[0]]
    series = [{"label": f"exact flow, rank R = {R} (H = {heads.get(R, -(-D // R))} heads)", "x": list(c[0]),
               "y": list(c[1])}
              for R, c in curves.items()]
    series += [{"label": "saddle levels L(M_m), eq. 19" if m == 0 else None, "style": ":", "color": "0.5",
                "x": [min(t_all), max(t_all)], "y": [float(L), float(L)]} for m, L in enumerate(levels)]
    return {"kind": "lines", "xscale": "log", "xlabel": "t / tau", "ylabel": "population loss",
            "title": f"Separate model, D = {D}, w_init = {w_init:g}: long plateaus only at m = multiples of R "
                     "(dotted: every saddle L(M_m))",
            "series": series}


#: Largest number of points of a figure's curve (:func:`thinned_series`).
FIG_POINTS = 500


def thinned_series(x, y, label: str, style: str = "-") -> dict:
    """A figure series of at most about :data:`FIG_POINTS` evenly strided points."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    step = max(1, x.size // FIG_POINTS)
    return {"label": label, "x": x[::step].tolist(), "y": y[::step].tolist(), "style": style}


def scalar_ode_rhs(lam: float, a: float, tau: float = TAU):
    """``v -> linear_attention.separate.scalar_ode_rhs(v, lam, a, tau)`` (a float) for an ODE solver: ``lam``,
    ``a`` and ``tau`` are validated once (with v = 0) and the record's emitted numpy function is then called with v
    alone replaced (v validated by its own parameter), which is what ``theory.get(...)(...)`` computes after its
    validation: the same values, without the record's whole validation at every evaluation."""
    rec = theory.get("linear_attention.separate.scalar_ode_rhs")
    if (rec.evaluate is not None or rec.derived is not None or rec.length is not None or rec.domain is not None
            or rec.output != "scalar"):
        return lambda v: float(rec(v=v, lam=lam, a=a, tau=tau))
    values, dims = rec.validate(dict(v=0.0, lam=lam, a=a, tau=tau))
    args = rec.arguments(values, dims, "numpy")
    i, fn = rec.param_names.index("v"), rec.function("numpy")
    param = rec.params[i]

    def value(v):
        args[i] = np.float64(param.validate(v, {}))
        return float(fn(*args))

    return value


def scalar_drop_times(lam, a, v0, levels, mo, E, T):
    """Drop times from the per-head scalar ODE eq. 21 (exact on the aligned manifold)."""
    sols = []
    for d in range(lam.size):
        ode = scalar_ode_rhs(lam[d], a[d], TAU)

        def f(t, y, ode=ode):
            return np.atleast_1d(ode(max(float(y[0]), 0.0)))
        r = solve_ivp(f, (0.0, T), [v0[d]], method="LSODA", rtol=RTOL, atol=1e-14, dense_output=True)
        sols.append(r.sol)

    def loss_of(v):
        c = np.array(v) ** 3
        return float(fs.loss(mo, None, (E * c) @ E.T))

    def loss_at(t):
        return loss_of([float(s(t)[0]) for s in sols])

    t = np.concatenate([[0.0], np.geomspace(1.0, T, 3000)])
    v = np.array([[float(s(ti)[0]) for s in sols] for ti in t])
    curve = np.array([loss_of(row) for row in v])          # loss_at at each t, the heads evaluated once
    return fs.plateaus(t, curve, levels, func=loss_at).drop_times, t, curve, v


def staircase_figures(res, ra, T: float, Ta: float, levels, ode, lam, a) -> dict:
    """The loss of the exact flow from the eq.-36 start (``res``, horizon ``T``) and from the
    aligned start (``ra``, ``Ta``) with the per-head scalar ODE eq. 21 (``ode = (t, loss, v)``
    of :func:`scalar_drop_times`) and the saddle levels of eq. 19; and each head's value weight
    along the aligned flow against eq. 21, with ``v* = (lambda/a)^(1/3)`` dotted."""
    t_ode, curve_ode, v_ode = ode
    H = ra.v.shape[1]
    fig_series = [thinned_series(res.t[1:], res.loss[1:], "exact flow, eq.-36 start", "-"),
                  thinned_series(ra.t[1:], ra.loss[1:], "exact flow, aligned start", "-"),
                  thinned_series(t_ode[1:], curve_ode[1:], "eq. 21 per head (aligned)", ":")]
    fig_series += [thinned_series([res.t[1], T], [L, L], f"L(M_{m}) eq. 19", "--") for m, L in enumerate(levels)]
    return {"staircase": {"kind": "lines",
                          "title": "ATTN_S rank 1, H = D = 4, N = 31: loss vs t/τ and L(M_m)",
                          "xlabel": "t/τ", "ylabel": "L", "xscale": "log",
                          "series": fig_series},
            "value_weights": {
                "kind": "lines", "xscale": "log", "xlabel": "t/τ", "ylabel": "value weight v_i",
                "title": "Aligned start: each head's value weight, exact flow vs the scalar ODE eq. 21 "
                         "(dotted: v* = (λ/a)^(1/3))",
                "series": [thinned_series(ra.t[1:], np.abs(ra.v[1:, i]), f"head {i + 1} (e_{i + 1}), exact flow", "-")
                           for i in range(H)]
                + [{**thinned_series(t_ode[1:], v_ode[1:, i], "scalar ODE eq. 21" if i == 0 else None, "--"),
                    "color": "k"}
                   for i in range(H)]
                + [{**thinned_series([ra.t[1], Ta], [vs, vs], None, ":"), "color": "0.5"}
                   for vs in (lam / a) ** (1 / 3)]}}
