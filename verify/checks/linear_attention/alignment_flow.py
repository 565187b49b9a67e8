"""Checks of ``linear_attention.alignment``: the linearised plateau dynamics of ATTN_S against the exact flow
(Zhang, Singh, Latham, Saxe 2025, App. E.5.1 eqs. 64-66, App. E.6.1 eqs. 72-73).

Contains
--------
``linear_attention.alignment.flow_plateaus``
    Eq. 66 tracks every head through the first plateau with relative error O(w_init^3); through the second
    plateau the small heads follow eq. 73 with each learned component constant, not eq. 73's k + q
``linear_attention.alignment.flow_gaussian_escape``
    First drop from the paper's Gaussian start: the linearised flow's blow-up predicts it, eq. 71 does not
``linear_attention.alignment.flow_plateau_durations``
    Later plateaus from the paper's Gaussian start: eq. 72's blow-up from the state at the previous drop predicts
    their durations up to O(1); eq. 76 with v_{m+1}(t_m) misses by a w_init-independent factor
"""

from __future__ import annotations

import numpy as np

import theory
from verify import Control, Outcome, check
from verify.settings import Setting
from verify.stats import evaluate as _cf

KEY, QUERY, LEARNED = (f"linear_attention.alignment.{n}" for n in ("key_component", "query_component",
                                                                    "learned_component"))
#: A window ends when the heads it follows have grown this many times their size at its start.
GROWTH = 4.0
#: Points of the window at which V = (1/tau) int v_i is accumulated (trapezoid) and the forms are compared.
WINDOW_POINTS = 20001
#: Relative error of eq. 66's solution allowed at the smallest w_init in the first window (the heads are
#: O(w_init) there; the measured errors are 1e-7 - 1e-6 at w_init = 3e-3).
ERROR_TOL = 1e-3
#: The second window follows heads that grew during the first plateau (to about w_init^0.64 at these
#: spectra); the linearisation's error is of the order of their squared norm. Heads count as small below
#: SMALL_HEAD at the window's start, and the error allowed there is ERROR_TOL_2 (seeds 0-19 of the quick
#: profile: at most 0.008 with heads below 0.1).
SMALL_HEAD, ERROR_TOL_2 = 0.05, 0.02
#: The order in w_init of the first window's relative error: the flow drops the cubic part of M from G
#: (eq. 64's O(w_init^5) against O(w_init^2) terms), O(w_init^3) relative.
ORDER, ORDER_TOL = 3.0, 0.5


def _components(res, E, t, heads):
    """(V, key components, query components) of ``heads`` at times ``t`` in the eigenbasis ``E``."""
    from scipy.integrate import cumulative_trapezoid

    v, k, q = res.at(t)
    V = cumulative_trapezoid(v[:, heads], t, axis=0, initial=0.0)
    kd = np.einsum("thrd,de->thre", k, E)[:, heads, 0]
    qd = np.einsum("thrd,de->thre", q, E)[:, heads, 0]
    return V, kd, qd


def _linearised(lam, V, kd, qd, learned: int):
    """Predicted components: the unlearned directions (d >= learned) by eq. 66 / 73 from the window's start,
    the learned ones constant; also the two wrong readings (eq. 73's k + q; the rate lambda for lambda^2)."""
    at = dict(V=V[:, :, None], k0=kd[0][None, :, learned:], q0=qd[0][None, :, learned:])
    un_k = np.asarray(_cf(KEY, lam=lam[None, None, learned:], **at), float)
    un_q = np.asarray(_cf(QUERY, lam=lam[None, None, learned:], **at), float)
    slow_k = np.asarray(_cf(KEY, lam=np.sqrt(lam[None, None, learned:]), **at), float)
    slow_q = np.asarray(_cf(QUERY, lam=np.sqrt(lam[None, None, learned:]), **at), float)
    k0, q0 = kd[0, :, :learned], qd[0, :, :learned]
    if learned:
        own_k = np.asarray(_cf(LEARNED, own=k0, other=q0), float)
        own_q = np.asarray(_cf(LEARNED, own=q0, other=k0), float)
    else:
        own_k = own_q = k0
    shape = (len(V), 1, 1)
    learned_k, learned_q = np.tile(own_k, shape), np.tile(own_q, shape)
    printed_k = printed_q = np.tile(k0 + q0, shape)                      # eq. 73's third term
    return ((np.concatenate([learned_k, un_k], -1), np.concatenate([learned_q, un_q], -1)),
            (np.concatenate([printed_k, un_k], -1), np.concatenate([printed_q, un_q], -1)),
            (np.concatenate([learned_k, slow_k], -1), np.concatenate([learned_q, slow_q], -1)))


def _error(pred, kd, qd) -> float:
    """Largest relative error over the window and the heads: ||(k, q)_pred - (k, q)|| / ||(k, q)||."""
    pk, pq = pred
    num = np.sqrt(((pk - kd) ** 2 + (pq - qd) ** 2).sum(-1))
    return float(np.max(num / np.sqrt((kd**2 + qd**2).sum(-1))))


@check("linear_attention.alignment.flow_plateaus", covers=[KEY, QUERY, LEARNED], method="exact_flow",
       decides=[LEARNED],
       title="Plateau alignment of ATTN_S (eqs. 64-66, 72-73): the linearised heads track the exact flow to "
             "O(w_init^3); learned components stay put, not eq. 73's k + q",
       settings=[Setting("spectrum", "spectrum", quick=(0.5, 0.3, 0.2), full=(0.4, 0.3, 0.2, 0.1),
                         doc="eigenvalues of Lambda (distinct), randomly rotated"),
                 Setting("D", "int", quick=3, full=4, low=2, high=16,
                         doc="token dimension for a white or power spectrum (a list fixes D)"),
                 Setting("N", "int", quick=15, full=31, low=1, high=10**4, doc="context length N"),
                 Setting("w_init", "floats", quick=(1e-2, 3e-3), full=(1e-2, 3e-3, 1e-3), low=1e-5, high=0.1,
                         doc="scales of the eq.-36 start (one draw, rescaled), largest first")])
def flow_plateaus(ctx):
    """The exact flow of ATTN_S (eq. 14, ``R = 1``, ``H = D``) from one eq.-36 draw rescaled to each
    ``w_init``, integrated with DOP853 (rtol 1e-12) and compared, in the eigenbasis of ``Lambda``, with the
    linearised solution of App. E.5.1 / E.6.1 (``linear_attention.alignment.*``), fed with the flow's own
    ``V_i(t) = (1/tau) int v_i``.

    First window (eq. 66, ``m = 0``): from ``t = 0`` until the largest head has grown :data:`GROWTH`
    times. Predicted: relative error ``O(w_init^3)`` (G loses the cubic part of M): its order between the
    two largest scales within :data:`ORDER_TOL` of :data:`ORDER`, and at most :data:`ERROR_TOL` at the
    smallest. Second window (eq. 73, ``m = 1``, at the smallest scale): from the time the loss is within
    1 % of the first drop of ``L(M_1)`` (``linear_attention.separate.saddle_loss``), for the heads still
    small (norm below :data:`SMALL_HEAD`),
    until they have grown :data:`GROWTH` times or the loss has fallen 1 % of the second drop (another head
    leaving the plateau moves ``G``): the unlearned components by eq. 73's first terms, the
    learned ``e_1`` component constant (``learned_component``); relative error at most :data:`ERROR_TOL_2`.

    Controls: the rate ``lambda_d`` for ``lambda_d^2`` (Omega = Lambda rather than Lambda^2, first window)
    and eq. 73 as printed (the learned components of key and query both ``k_1 + q_1``, second window)
    must miss by more than the tolerances.
    """
    from verify.flows import separate as fs
    from verify.flows.separate_ranks import saddle_levels
    from verify.tasks.in_context_regression import random_covariance

    eig = np.array(ctx.setting("spectrum").eigenvalues(ctx.setting("D")))
    if len(set(eig.tolist())) < len(eig):
        raise ValueError("spectrum: the eigenvalues must be distinct (the plateaus of eq. 19 merge otherwise)")
    D, N = len(eig), ctx.setting("N")
    scales = sorted(ctx.setting("w_init"), reverse=True)
    if len(scales) < 2:
        raise ValueError("w_init: need at least two scales (the order of the error is measured between them)")
    H = D
    Lam = random_covariance(ctx.rng, eig)
    lam, E = fs.eigenbasis(Lam)
    v1, k1, q1 = fs.init_separate(ctx.rng, H, 1, D, 1.0)
    L0, L1, L2 = saddle_levels(Lam, N, D)[:3]
    rows, first, second = [], {}, {}
    for s in scales:
        T = 60.0 / (lam[0] ** 2 * s)
        # Only the windows are read: the solve stops at the midpoint of the first drop (of the second at the
        # smallest scale), after they end. The steps up to the stop are those of the solve to T, so the numbers
        # are the same; where a window would reach the stop, the solve goes to T.
        for stop in (0.5 * (L0 + L1) if s != scales[-1] else 0.5 * (L1 + L2), None):
            res = fs.integrate(Lam, N, s * v1, s * k1, s * q1, t_eval=np.linspace(0.0, T, 8001), dense=True,
                               rtol=1e-12, stop_loss=stop)
            norm = np.sqrt(res.v**2 + (res.k**2).sum((2, 3)) + (res.q**2).sum((2, 3)))      # (T, H)
            end = int(np.argmax(norm.max(1) >= GROWTH * norm[0].max()))
            if s == scales[-1]:
                i1 = int(np.argmax(res.loss <= L1 + 0.01 * (L0 - L1)))
                small = [i for i in range(H) if norm[i1, i] < SMALL_HEAD]
                stop2 = ((norm[i1:, small].max(1) >= GROWTH * norm[i1, small].max())
                         | (res.loss[i1:] <= L1 - 0.01 * (L1 - L2))) if i1 and small else np.zeros(1, bool)
                inside = 0 < end < len(res.t) - 1 and i1 > 0 and bool(stop2[:-1].any())
            else:
                inside = 0 < end < len(res.t) - 1
            if inside:
                break
        # first window: every head, from the start
        if end == 0:
            raise ValueError(f"w_init: at {s:g} no head grew {GROWTH:g} times within t = {T:g}")
        t = np.linspace(0.0, res.t[end], WINDOW_POINTS)
        V, kd, qd = _components(res, E, t, list(range(H)))
        right, _, slow = _linearised(lam, V, kd, qd, learned=0)
        first[s] = {"error": _error(right, kd, qd), "rate lambda (control)": _error(slow, kd, qd),
                    "rate lambda against eq. 66": _error(slow, *right), "window": [0.0, float(res.t[end])]}
        rows.append((s, first[s]["error"]))
        if s != scales[-1]:
            continue
        # second window (the smallest scale): the small heads, from the second plateau's start
        i1 = int(np.argmax(res.loss <= L1 + 0.01 * (L0 - L1)))
        small = [i for i in range(H) if norm[i1, i] < SMALL_HEAD]
        if i1 == 0 or not small:
            raise ValueError(f"w_init: at {s:g} the flow reached no second plateau with a small head by t = {T:g}")
        # until the followed heads have grown GROWTH times or the loss leaves the plateau (another head's
        # drop moves M, and G with it, away from M_1)
        stop = (norm[i1:, small].max(1) >= GROWTH * norm[i1, small].max()) | (res.loss[i1:] <= L1 - 0.01 * (L1 - L2))
        end2 = i1 + int(np.argmax(stop)) if stop.any() else len(res.t) - 1
        if end2 <= i1 + 1:
            raise ValueError(f"w_init: at {s:g} the second plateau is too short to follow")
        t2 = np.linspace(res.t[i1], res.t[end2], WINDOW_POINTS)
        V2, kd2, qd2 = _components(res, E, t2, small)
        right2, printed2, _ = _linearised(lam, V2, kd2, qd2, learned=1)
        second[s] = {"error": _error(right2, kd2, qd2), "eq. 73 as printed (control)": _error(printed2, kd2, qd2),
                     "eq. 73 as printed against the derived form": _error(printed2, *right2),
                     "window": [float(res.t[i1]), float(res.t[end2])], "heads": small,
                     "head norms at the start": norm[i1, small]}
    (s_a, e_a), (s_b, e_b) = rows[0], rows[1]
    order_measured = float(np.log(e_a / e_b) / np.log(s_a / s_b))
    smallest = scales[-1]
    parts = {"|order - 3| / tol": abs(order_measured - ORDER) / ORDER_TOL,
             "first window: error at the smallest w_init / tol": first[smallest]["error"] / ERROR_TOL,
             "second window: error / tol": second[smallest]["error"] / ERROR_TOL_2}
    # the controls' expected values: the wrong forms against the derived solution (what the flow follows)
    ctrl_slow = min(v["rate lambda (control)"] for v in first.values())
    exp_slow = min(v["rate lambda against eq. 66"] for v in first.values())
    ctrl_printed = second[smallest]["eq. 73 as printed (control)"]
    exp_printed = second[smallest]["eq. 73 as printed against the derived form"]
    return Outcome(
        measured={"order of the first window's error in w_init": order_measured,
                  "first window: relative errors (w_init, error)": rows,
                  "second window: relative error": second[smallest]["error"]},
        predicted={"order": ORDER, "errors": f"<= {ERROR_TOL:g} (first window), {ERROR_TOL_2:g} (second)"},
        discrepancy=max(parts.values()), tolerance=1.0,
        criterion=(f"max of normalised discrepancies <= 1: the first window's relative error (eq. 66) of order "
                   f"{ORDER:g} +- {ORDER_TOL:g} in w_init between {s_a:g} and {s_b:g} and <= {ERROR_TOL:g} at "
                   f"w_init = {smallest:g}; at that scale the second window's (eq. 73, heads below {SMALL_HEAD:g}) "
                   f"<= {ERROR_TOL_2:g} (windows end when the followed heads have grown {GROWTH:g} times; D = {D}, "
                   f"H = {H}, R = 1, N = {N})"),
        controls=[Control("Omega = Lambda (rate lambda_d for lambda_d^2), first window: smallest relative error",
                          ctrl_slow, ERROR_TOL, expected=exp_slow),
                  Control("eq. 73 as printed (learned components of k and q both k_1 + q_1), second window: "
                          "smallest relative error", ctrl_printed, ERROR_TOL_2, expected=exp_printed)],
        details={"eigenvalues": lam, "first window (eq. 66)": first, "second window (eq. 73)": second,
                 "parts": parts, "L(M_0), L(M_1), L(M_2)": [L0, L1, L2]},
    )


# -- the first escape from the paper's Gaussian start -----------------------------------------------------------
def linearised_escape(lam, E, v0: float, k0, q0) -> float:
    """The time at which a head's linearised flow (eqs. 64-66) blows up: with V = int v / tau, each
    eigen-component is ``linear_attention.alignment.key_component``, and the conserved ``|k|^2 - v^2`` (eq. 82)
    gives ``v(V)^2 = v0^2 - |k0|^2 + |k(V)|^2``, so ``t = int dV / |v(V)|`` along the path of V: from 0 the way
    of v's sign, to infinity; or, where ``v^2`` reaches 0 first (at ``V_t``: v changes sign and V turns back),
    to ``V_t`` and from there to infinity the other way. Returns inf if it would turn twice."""
    import warnings

    from scipy.integrate import IntegrationWarning, quad
    from scipy.optimize import brentq

    kd, qd = E.T @ k0, E.T @ q0
    C = float(v0**2 - kd @ kd)
    s = 1.0 if v0 > 0 else -1.0
    key = theory.get(KEY).of("V", lam=lam, k0=kd, q0=qd)   # validated once: quad asks for thousands of V

    def v_sq(V):
        with np.errstate(over="ignore", invalid="ignore"):
            kk = key(V)
            return C + float(kk @ kk)

    def inverse_speed(V):
        val = v_sq(V)
        return 1.0 / np.sqrt(val) if np.isfinite(val) and val > 0 else 0.0

    def first_zero(direction):
        """The first V (from 0, the way of ``direction``) where v^2 reaches 0, or None: a grid of 4000 steps of
        0.05 / lambda_1^2 (far past the blow-up), then ``brentq``."""
        grid = direction * np.arange(1, 4001) * (0.05 / float(lam[0] ** 2))
        with np.errstate(over="ignore", invalid="ignore"):
            kk = np.asarray(_cf(KEY, lam=lam[None, :], V=grid[:, None], k0=kd[None, :], q0=qd[None, :]), float)
            vals = C + np.sum(kk**2, axis=1)
        vals = np.where(np.isfinite(vals), vals, np.inf)
        hit = np.flatnonzero(vals <= 0)
        if hit.size == 0:
            return None
        j = int(hit[0])
        return brentq(v_sq, 0.0 if j == 0 else float(grid[j - 1]), float(grid[j]))

    def leg(a, b):
        # from far out on a later plateau quad may report that round-off stops it short of epsrel = 1e-10 (its
        # extrapolation table); what it returns then is still far inside what the checks resolve (1e-5 of t)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IntegrationWarning)
            return quad(inverse_speed, min(a, b), max(a, b), limit=500, epsrel=1e-10)[0]

    V_t = first_zero(s)
    if V_t is None:
        return float(leg(0.0, s * np.inf))
    if first_zero(-s) is not None:   # v^2 is positive between the two zeros only: the head oscillates
        return float("inf")
    return float(leg(0.0, V_t) + leg(V_t, -s * np.inf))


def _drop_time(res, level: float) -> float:
    """First time the loss crosses ``level`` (linear interpolation between output times)."""
    i = int(np.argmax(res.loss <= level))
    if i == 0:
        return float("nan")
    t0, t1, l0, l1 = res.t[i - 1], res.t[i], res.loss[i - 1], res.loss[i]
    return float(t0 + (l0 - level) / (l0 - l1) * (t1 - t0))


@check("linear_attention.alignment.flow_gaussian_escape",
       covers=[KEY, "linear_attention.separate.escape_time"], method="exact_flow",
       refutes={"Zhang et al. 2025, eq. 71 (App. E.5.2) from the paper's eq.-36 start":
                "t_1 ~ tau / (lambda_1^2 v_1(0)) is asymptotically exact only from a balanced, aligned start. From "
                "the paper's Gaussian start the exact flow's first drop differs from it by a factor that does not "
                "shrink as w_init -> 0 (it depends on the draw: the head's key and query are not aligned with e_1 "
                "and not balanced with v). The linearised flow of eqs. 64-66, integrated to its blow-up with the "
                "conserved |k|^2 - v^2, predicts the drop from the same start with an error O(w_init)."},
       title="First drop from the paper's Gaussian start: the blow-up of the linearised flow (eqs. 64-66) predicts it "
             "to O(w_init); eq. 71 with v_1(0) misses by a w_init-independent factor",
       settings=[Setting("w_init", "floats", quick=(1e-2, 1e-3), full=(1e-2, 1e-3, 1e-4), low=1e-6, high=0.1,
                         doc="scales of the eq.-36 start (each draw rescaled), largest first"),
                 Setting("draws", "int", quick=3, full=10, low=1, high=100, doc="eq.-36 draws")])
def flow_gaussian_escape(ctx):
    """Fig.-1 setting (``D = H = 4``, ``R = 1``, ``N = 31``, eigenvalues ``(0.4, 0.3, 0.2, 0.1)`` randomly rotated).
    For each eq.-36 draw, rescaled to every ``w_init``: the exact flow's first drop time ``t_1`` (the loss crossing
    the midpoint of ``L(M_0)`` and ``L(M_1)``, ``saddle_loss``) against

    * the linearised prediction: the smallest over heads of :func:`linearised_escape` (each head's linearised flow
      blows up; the first to do so drops). Predicted: ``|t_1 / t_lin - 1| <= 2 w_init / v*_1`` (the nonlinear
      phase after the blow-up lasts ``~ tau / (lambda^2 v*)``, the same bound as ``escape_time_ratio``'s);
    * eq. 71, ``tau / (lambda_1^2 |v(0)|)`` of the head that drops: its ratio ``r_71`` does not tend to 1.

    Control (the refuted reading: eq. 71 asymptotically exact from this start, its deviation shrinking like
    ``w_init``): ``|r_71(w_2) - 1| / |r_71(w_1) - 1|`` over the draws whose deviation at ``w_1`` exceeds 0.05 (the
    smallest), expected near 1, must exceed 0.5 (a deviation that shrank like ``w_init`` would give ``w_2 /
    w_1``)."""
    from verify.flows import separate as fs
    from verify.flows.separate_ranks import N_FIG, figure_setup, saddle_levels

    scales = sorted(ctx.setting("w_init"), reverse=True)
    if len(scales) < 2:
        raise ValueError("w_init: need at least two scales")
    Lam, _, lam, E, a = figure_setup(ctx.rng)
    N, D = N_FIG, lam.size
    v_star = (lam[0] / a[0]) ** (1.0 / 3.0)
    levels = saddle_levels(Lam, N, D)
    mid = 0.5 * (levels[0] + levels[1])
    worst, rows, shrink = 0.0, [], []
    for rng in ctx.spawn(ctx.setting("draws")):
        v1, k1, q1 = fs.init_separate(rng, D, 1, D, 1.0)
        row = {}
        for s in scales:
            t_heads = [linearised_escape(lam, E, s * v1[i], s * k1[i, 0], s * q1[i, 0]) for i in range(D)]
            t_lin = min(t_heads)
            if not np.isfinite(t_lin):
                raise ValueError(f"w_init: at {s:g} no head's linearised flow escapes")
            # only the first drop is read: the solve stops 95 % of the way down it (t_1 is the same)
            res = fs.integrate_past(Lam, N, s * v1, s * k1, s * q1, level=mid,
                                    stop_loss=levels[1] + 0.05 * (levels[0] - levels[1]),
                                    t_eval=np.linspace(0.0, 1.5 * t_lin, 20001))
            t1 = _drop_time(res, mid)
            lead = int(np.argmin(t_heads))
            r71 = t1 * lam[0] ** 2 * abs(s * v1[lead])
            err = abs(t1 / t_lin - 1.0)
            worst = max(worst, err / (2.0 * s / v_star))
            row[f"{s:g}"] = {"t_1 (flow)": t1, "t_lin": t_lin, "|t_1/t_lin - 1|": err, "r_71": float(r71),
                             "head": lead}
        d1, d2 = (abs(row[f"{s:g}"]["r_71"] - 1.0) for s in scales[:2])
        if d1 > 0.05:
            shrink.append(d2 / d1)
        rows.append(row)
    ctrl = min(shrink) if shrink else float("nan")
    return Outcome(
        measured={"max |t_1/t_lin - 1| / (2 w_init / v*)": worst,
                  "eq. 71 ratios r_71 (per draw, per w_init)": [[r[f"{s:g}"]["r_71"] for s in scales] for r in rows]},
        predicted={"t_1 / t_lin": 1.0, "r_71": "draw-dependent, not -> 1"},
        discrepancy=worst, tolerance=1.0,
        criterion=(f"max over {len(rows)} draws and w_init in {scales} of |t_1 / t_lin - 1| / (2 w_init / v*_1) <= 1 "
                   f"(v*_1 = {v_star:.4f}); t_1 the exact flow's first crossing of the midpoint of L(M_0), L(M_1)"),
        controls=[Control("eq. 71 asymptotically exact from the Gaussian start (its deviation shrinking like w_init): "
                          "smallest |r_71(w_2) - 1| / |r_71(w_1) - 1|", ctrl, 0.5, expected=1.0)],
        details={"draws": rows, "v*_1": v_star, "draws tested by the control": len(shrink)},
    )


def _plateau_rows(lam, a, E, Lam, N: int, v1, k1, q1, scales):
    """For one eq.-36 draw (rescaled to each ``w_init`` of ``scales``): the exact flow's drop times (midpoint
    crossings, refined on the dense output), and for each later drop ``m`` its plateau's duration against the
    blow-up of the head's linearised flow over the unlearned directions (eq. 72) from the state at ``t_{m-1}``,
    and against eq. 76 with that head's ``|v(t_{m-1})|``."""
    from verify.flows import separate as fs
    from verify.flows.separate_ranks import saddle_levels

    D = lam.size
    levels = saddle_levels(Lam, N, D)
    out = {}
    for s in scales:
        T = 40.0 / (float(lam[-1]) ** 2 * s)
        t = np.unique(np.concatenate([np.linspace(0.0, T, 20001), np.geomspace(1e-3, T, 4000)]))
        # rtol 1e-8 (not the default 1e-10): the drop times to ~1e-7, every reported number unchanged at the
        # docstring's precision over seeds 0-19, at about half the CPU
        res = fs.integrate(Lam, N, s * v1, s * k1, s * q1, t_eval=t, method="LSODA", dense=True, rtol=1e-8)
        drops = np.asarray(fs.plateaus(t, res.loss, levels, func=res.loss_at).drop_times)
        if not np.all(np.isfinite(drops)):
            raise ValueError(f"w_init: at {s:g} the flow did not make its {D} drops by t = {T:g}")
        size = np.abs(res.v)                               # (T, H)
        grown = np.array([t[np.argmax(size[:, h] > 0.5 * size[-1, h])] for h in range(size.shape[1])])
        order = np.argsort(grown)                          # the head of drop m is the m-th to grow
        rows = []
        for m in range(2, D + 1):
            h = int(order[m - 1])
            v, k, q = res.at(drops[m - 2])
            duration = float(drops[m - 1] - drops[m - 2])
            t_lin = linearised_escape(lam[m - 1:], E[:, m - 1:], float(v[h]), k[h, 0], q[h, 0])
            t_76 = float(_cf(PLATEAU, Lambda=Lam, m=m, tau=1.0, v=abs(float(v[h]))))
            # eq. 21's time scales tau / (lambda^2 v*) of drops m - 1 and m: what the linearisation leaves out
            scale = float(sum(1.0 / (lam[j] ** 2 * (lam[j] / a[j]) ** (1.0 / 3.0)) for j in (m - 2, m - 1)))
            rows.append({"m": m, "head": h, "t_m - t_{m-1}": duration, "linearised": t_lin, "eq. 76": t_76,
                         "|v(t_{m-1})| / w_init": abs(float(v[h])) / s, "drop time scales S": scale})
        out[s] = rows
    return out


PLATEAU = "linear_attention.separate.plateau_duration"


@check("linear_attention.alignment.flow_plateau_durations",
       covers=[PLATEAU, KEY], method="exact_flow",
       refutes={"Zhang et al. 2025, eq. 76 (App. E.6.2) from the paper's eq.-36 start":
                "t_{m+1} - t_m ~ tau / (lambda_{m+1}^2 v_{m+1}(t_m)) assumes the head that learns e_{m+1} is aligned "
                "with it and balanced (|k| = |q| = v) when drop m happens. From the paper's Gaussian start it is "
                "not, and the exact plateau durations differ from eq. 76 by a factor that depends on the draw "
                "(about 0.06 to 3.4 at the Fig.-1 setting) and does not shrink as w_init -> 0; eq. 76 gets the "
                "1/w_init scaling, not the constant. The head's linearised flow over the unlearned directions "
                "(eq. 72), started from its state at t_m with the conserved |k|^2 - v^2 and integrated to its "
                "blow-up, predicts each duration to within the drops' own O(1) durations."},
       title="Plateau durations from the paper's Gaussian start: the blow-up of the linearised flow (eq. 72) from "
             "the state at the previous drop predicts them up to O(1); eq. 76 with v_{m+1}(t_m) misses by a "
             "w_init-independent factor",
       settings=[Setting("w_init", "floats", quick=(1e-3, 1e-4), full=(1e-2, 1e-3, 1e-4, 1e-5), low=1e-7,
                         high=0.1, doc="scales of the eq.-36 start (each draw rescaled), largest first"),
                 Setting("draws", "int", quick=3, full=10, low=1, high=100, doc="eq.-36 draws")])
def flow_plateau_durations(ctx):
    """Fig.-1 setting (``D = H = 4``, ``R = 1``, ``N = 31``, eigenvalues ``(0.4, 0.3, 0.2, 0.1)`` randomly rotated),
    eq.-36 draws rescaled to every ``w_init``. For each later drop ``m = 2..D`` of the exact flow: the plateau's
    duration ``t_m - t_{m-1}`` (midpoint crossings of eq. 19's levels) against

    * the linearised prediction: the head that learns ``e_m`` (the ``m``-th to grow) follows eq. 72 during the
      plateau (its learned directions frozen, the others growing at ``lambda_d^2``, ``linear_attention.alignment
      .key_component``) with ``|k|^2 - v^2`` conserved; from its exact state at ``t_{m-1}`` that flow blows up
      after ``t_lin`` (:func:`linearised_escape` over the unlearned eigen-directions);
    * eq. 76 (``linear_attention.separate.plateau_duration``) with that head's ``|v(t_{m-1})|``.

    The plateau lasts ``~ 1/w_init``; what the linearisation leaves out (the rest of drop ``m - 1`` after its
    midpoint, drop ``m``'s nonlinear phase up to its midpoint, heads that shared a direction in an earlier
    drop) does not grow as ``w_init`` shrinks. Pass: for every draw, drop and pair of consecutive scales
    ``w_1 > w_2``, the miss ``|t_m - t_{m-1} - t_lin|`` at ``w_2`` is at most ``sqrt(max(miss(w_1), S) (t_m -
    t_{m-1})(w_2))``, the geometric midpoint between a miss that stays as it was (or at the drops' eq.-21 time
    scales ``S = tau / (lambda_{m-1}^2 v*_{m-1}) + tau / (lambda_m^2 v*_m)``, ``v*`` eq. 81, if larger) and one
    that grows with the plateau. Control (the refuted reading: eq. 76 predicts the durations from this start):
    the same statistic for eq. 76's miss, largest over the drops, must exceed 1 (a miss that is a fixed
    fraction ``r`` of the plateau gives about ``sqrt(r w_1 / w_2)``). Seeds 0-19 (quick, 60 draws): the
    linearised miss is at most 5 ``S`` but at two draws (19 ``S``; 110 ``S`` at seed 6, where two heads had grown
    together before the previous drop: 2565 at 1e-3, 1927 at 1e-4, against plateaus of 1e4 and 1.2e5) and stays
    put as ``w_init`` shrinks (worst statistic 0.11); eq. 76's ratio to the flow is between 0.18 and 8.1,
    unchanged with ``w_init`` (control 2.3-6.7).
    """
    from verify.flows.separate_ranks import N_FIG, figure_setup
    from verify.flows import separate as fs

    scales = sorted(ctx.setting("w_init"), reverse=True)
    if len(scales) < 2:
        raise ValueError("w_init: need at least two scales")
    Lam, _, lam, E, a = figure_setup(ctx.rng)
    D = lam.size
    misses, wrong, draws = [], [], []
    for rng in ctx.spawn(ctx.setting("draws")):
        v1, k1, q1 = fs.init_separate(rng, D, 1, D, 1.0)
        rows = _plateau_rows(lam, a, E, Lam, N_FIG, v1, k1, q1, scales)
        for w1, w2 in zip(scales, scales[1:]):
            for r1, r2 in zip(rows[w1], rows[w2]):
                for key, out in (("linearised", misses), ("eq. 76", wrong)):
                    m1, m2 = (abs(r["t_m - t_{m-1}"] - r[key]) for r in (r1, r2))
                    out.append(m2 / np.sqrt(max(m1, r2["drop time scales S"]) * r2["t_m - t_{m-1}"]))
        draws.append({f"{s:g}": rows[s] for s in scales})
    worst = float(max(misses))
    ratios = [[r["t_m - t_{m-1}"] / r["eq. 76"] for r in d[f"{scales[-1]:g}"]] for d in draws]
    in_scales = [[(r["t_m - t_{m-1}"] - r["linearised"]) / r["drop time scales S"] for r in d[f"{s:g}"]]
                 for d in draws for s in scales]
    expected = float(np.sqrt(np.median([abs(x - 1.0) for row in ratios for x in row]) * scales[0] / scales[1]))
    return Outcome(
        measured={"largest miss(w_2) / sqrt(max(miss(w_1), S) (t_m - t_(m-1))(w_2))": worst,
                  f"eq. 76 ratios at w_init = {scales[-1]:g} (per draw, m = 2..{D})": ratios,
                  "(t_m - t_(m-1) - t_lin) / S (per draw and scale)": in_scales},
        predicted={"linearised miss": "O(S), S the drops' eq.-21 time scales", "r_76": "draw-dependent, not 1"},
        discrepancy=worst, tolerance=1.0,
        criterion=("max over draws, drops m = 2..D and consecutive scales w_1 > w_2 of miss(w_2) / sqrt(max(miss(w_1), "
                   "S) (t_m - t_{m-1})(w_2)) <= 1, miss = |t_m - t_{m-1} - t_lin|, S = tau / (lambda_{m-1}^2 "
                   "v*_{m-1}) + tau / (lambda_m^2 v*_m): the geometric midpoint between a miss that stays put and "
                   "one that grows with the plateau"),
        controls=[Control("eq. 76 with |v_m(t_{m-1})| as the duration: the same statistic for its miss, largest "
                          "over the drops", float(max(wrong)), 1.0, expected=expected)],
        details={"draws": draws, "scales": scales},
    )
